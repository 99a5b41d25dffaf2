/* nbdkit-sect4k-plugin: glue between nbdkit and the sect4k engine.
 * Config keys go to s4k_config_set, callbacks to the s4k_* data path. */
#define NBDKIT_API_VERSION 2
#define THREAD_MODEL NBDKIT_THREAD_MODEL_PARALLEL
#include <nbdkit-plugin.h>

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sect4k/sect4k.h"
#include "glue.h"

/* -D sect4k.rmw=1 logs every read-modify-write. */
NBDKIT_DLL_PUBLIC int sect4k_debug_rmw = 0;

static struct s4k_config cfg;
static struct s4k_dev *dev;
static char description[256];   /* the export description, set once */

struct handle {
  bool refused_once;            /* strict refusals are logged once */
};

static void
sect4k_load (void)
{
  s4k_config_init (&cfg);
}

static void
sect4k_unload (void)
{
  s4k_dev_close (dev);
}

static int
sect4k_config (const char *key, const char *value)
{
  char err[512];
  if (s4k_config_set (&cfg, key, value, err, sizeof err) == -1) {
    nbdkit_error ("%s", err);
    return -1;
  }
  return 0;
}

static int
sect4k_config_complete (void)
{
  char err[512];
  if (s4k_config_finish (&cfg, err, sizeof err) == -1) {
    nbdkit_error ("%s", err);
    return -1;
  }
  return 0;
}

static void
log_debug (void *opaque, const char *msg)
{
  (void) opaque;
  nbdkit_debug ("%s", msg);
}

static int
sect4k_get_ready (void)
{
  char err[512];
  if (s4k_dev_open (&dev, &cfg, err, sizeof err) < 0) {
    nbdkit_error ("%s", err);
    return -1;
  }
  if (sect4k_debug_rmw)
    s4k_dev_set_debug (dev, S4K_DEBUG_RMW, log_debug, NULL);
  /* Before any connection: the threads then only read it. */
  s4k_dev_describe (dev, description, sizeof description);
  nbdkit_debug ("sect4k: %s, size %" PRIu64, description,
                s4k_dev_geometry (dev)->size);
  nbdkit_debug ("sect4k: %s", s4k_dev_store_info (dev));
  return 0;
}

/* nbdkit forks into the background after get_ready: threads start here. */
static int
sect4k_after_fork (void)
{
  s4k_dev_start (dev);
  return 0;
}

static void
sect4k_dump_plugin (void)
{
  printf ("sect4k_version=%s\n", S4K_VERSION);
  printf ("sect4k_logical_min=%u\n", S4K_MIN_LOGICAL);
  printf ("sect4k_logical_max=%u\n", S4K_MAX_LOGICAL);
  printf ("sect4k_physical_max=%u\n", S4K_MAX_PHYSICAL);
  printf ("sect4k_max_request_default=%u\n", S4K_DEFAULT_MAX_REQUEST);
  printf ("sect4k_max_request_max=%u\n", S4K_MAX_MAX_REQUEST);
  printf ("sect4k_models=512n,512e,512e-xp,4kn\n");
  printf ("sect4k_stores=memory,file,upstream\n");
}

static void *
sect4k_open (int readonly)
{
  (void) readonly;
  struct handle *h = calloc (1, sizeof *h);
  if (!h)
    nbdkit_error ("calloc: out of memory");
  return h;
}

static void
sect4k_close (void *handle)
{
  free (handle);
}

static int64_t
sect4k_get_size (void *handle)
{
  (void) handle;
  return s4k_dev_geometry (dev)->size;
}

static int
sect4k_block_size (void *handle, uint32_t *minimum, uint32_t *preferred,
                   uint32_t *maximum)
{
  (void) handle;
  const struct s4k_geometry *g = s4k_dev_geometry (dev);
  *minimum = g->logical;
  *preferred = g->physical;
  *maximum = s4k_dev_max_request (dev);
  return 0;
}

static const char *
sect4k_export_description (void *handle)
{
  (void) handle;
  return description;
}

static int
sect4k_can_write (void *h)
{
  (void) h;
  return !s4k_dev_readonly (dev);
}
static int sect4k_can_flush (void *h) { (void) h; return 1; }
static int sect4k_can_trim (void *h) { (void) h; return 1; }
static int sect4k_can_zero (void *h) { (void) h; return 1; }
static int sect4k_can_extents (void *h) { (void) h; return 1; }
static int sect4k_can_multi_conn (void *h) { (void) h; return 1; }
static int sect4k_can_fua (void *h) { (void) h; return NBDKIT_FUA_NATIVE; }
static int sect4k_can_cache (void *h) { (void) h; return NBDKIT_CACHE_NATIVE; }
static int
sect4k_can_fast_zero (void *h)
{
  (void) h;
  return s4k_dev_can_fast_zero (dev);
}

static int
result (struct handle *h, int r, enum s4k_op op, uint64_t len, uint64_t off)
{
  return s4k_glue_result (dev, &h->refused_once, r, op, len, off);
}

static int
sect4k_pread (void *h, void *buf, uint32_t count, uint64_t offset,
              uint32_t flags)
{
  (void) flags;
  return result (h, s4k_read (dev, buf, count, offset), S4K_OP_READ, count, offset);
}

static int
sect4k_pwrite (void *h, const void *buf, uint32_t count, uint64_t offset,
               uint32_t flags)
{
  return result (h, s4k_write (dev, buf, count, offset, s4k_glue_flags (flags)),
                 S4K_OP_WRITE, count, offset);
}

static int
sect4k_zero (void *h, uint32_t count, uint64_t offset, uint32_t flags)
{
  return result (h, s4k_zero (dev, count, offset, s4k_glue_flags (flags)),
                 S4K_OP_ZERO, count, offset);
}

static int
sect4k_trim (void *h, uint32_t count, uint64_t offset, uint32_t flags)
{
  return result (h, s4k_trim (dev, count, offset, s4k_glue_flags (flags)),
                 S4K_OP_TRIM, count, offset);
}

static int
sect4k_flush (void *h, uint32_t flags)
{
  (void) flags;
  return result (h, s4k_flush (dev), S4K_OP_FLUSH, 0, 0);
}

static int
sect4k_cache (void *h, uint32_t count, uint64_t offset, uint32_t flags)
{
  (void) flags;
  return result (h, s4k_cache (dev, count, offset), S4K_OP_CACHE, count, offset);
}

static int
sect4k_extents (void *h, uint32_t count, uint64_t offset, uint32_t flags,
                struct nbdkit_extents *extents)
{
  struct s4k_glue_extents c = { extents, flags & NBDKIT_FLAG_REQ_ONE };
  return result (h, s4k_extents (dev, count, offset, s4k_glue_add_extent, &c),
                 S4K_OP_EXTENTS, count, offset);
}

static struct nbdkit_plugin plugin = {
  .name = "sect4k",
  .longname = "sect4k: block devices with any sector geometry",
  .version = S4K_VERSION,
  .description = "Serves a device with chosen logical and physical sector "
                 "sizes and alignment offset, doing read-modify-write of "
                 "physical sectors like a 512e drive.",
  .load = sect4k_load,
  .unload = sect4k_unload,
  .config = sect4k_config,
  .config_complete = sect4k_config_complete,
  .config_help = s4k_config_help,
  .magic_config_key = "size",
  .get_ready = sect4k_get_ready,
  .after_fork = sect4k_after_fork,
  .dump_plugin = sect4k_dump_plugin,
  .open = sect4k_open,
  .close = sect4k_close,
  .get_size = sect4k_get_size,
  .block_size = sect4k_block_size,
  .export_description = sect4k_export_description,
  .can_write = sect4k_can_write,
  .can_flush = sect4k_can_flush,
  .can_trim = sect4k_can_trim,
  .can_zero = sect4k_can_zero,
  .can_fast_zero = sect4k_can_fast_zero,
  .can_extents = sect4k_can_extents,
  .can_multi_conn = sect4k_can_multi_conn,
  .can_fua = sect4k_can_fua,
  .can_cache = sect4k_can_cache,
  .pread = sect4k_pread,
  .pwrite = sect4k_pwrite,
  .zero = sect4k_zero,
  .trim = sect4k_trim,
  .flush = sect4k_flush,
  .cache = sect4k_cache,
  .extents = sect4k_extents,
  .errno_is_preserved = 0,
};

NBDKIT_REGISTER_PLUGIN (plugin)
