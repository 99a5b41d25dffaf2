/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-sect4k-plugin: glue between nbdkit and the sect4k engine.
 * Config keys go to s4k_config_set, callbacks to the s4k_* data path. */
#define NBDKIT_API_VERSION 2
#define THREAD_MODEL NBDKIT_THREAD_MODEL_PARALLEL
#include <nbdkit-plugin.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>

#include "sect4k/sect4k.h"
#include "sect4k/exports.h"
#include "glue.h"

/* -D sect4k.rmw=1 logs every read-modify-write. */
NBDKIT_DLL_PUBLIC int sect4k_debug_rmw = 0;

static struct s4k_exports exports;

/* What a request pays for beyond the engine call is decided per export,
 * at open: an export without fault or timing keys pays one untaken
 * branch each, whatever its neighbours ask for. */
struct handle {
  struct s4k_dev *dev;          /* the export the client named */
  bool faults;                  /* its fault keys: power cuts may happen */
  bool timed;                   /* its timing model */
  bool rotational;              /* the model rotates (timing=hdd7200) */
  const char *description;
  /* Logged once a connection; atomic: nbdkit's worker threads serve one
   * connection's requests in parallel. */
  atomic_bool refused_once;     /* strict refusals are logged once */
  atomic_bool cut_logged;
  unsigned epoch;               /* power cuts before the connection opened */
  struct s4k_client client;     /* its writes a loss may have taken */
};

static inline struct s4k_dev *
dev_of (void *handle)
{
  return ((struct handle *) handle)->dev;
}

/* An engine call for h's client connection: a flush reports the writes
 * of this connection a loss may have taken (s4k_client, sect4k.h). */
#define AS_CLIENT(h, op, flags, call)                                      \
  __extension__ ({                                                          \
    struct handle *h_ = (h);                                                \
    uint64_t t_ = s4k_client_begin (h_->dev, &h_->client, (op), (flags));   \
    s4k_client_end (h_->dev, &h_->client, (op), t_, (call));                \
  })

static void
sect4k_load (void)
{
  s4k_exports_init (&exports);
  /* nbdkit -r reaches open, not config: a read-only upstream is opened
   * read-only, and open refuses writable connections to it. */
  exports.readonly_per_connection = true;
}

/* nbdkit tells a plugin nothing when it stops (SIGTERM): it waits for
 * the requests in flight, then unloads.  A request waiting on an
 * upstream without a deadline (upstream-timeout=0) would wait forever:
 * this thread sleeps in nbdkit_nanosleep, which nbdkit wakes as it
 * stops, and stops the devices then (s4k_dev_stop: their waits end). */
static pthread_t stop_watcher;
static bool stop_watching;

static void *
watch_stop (void *arg)
{
  (void) arg;
  while (nbdkit_nanosleep (3600, 0) == 0)
    ;
  pthread_setcancelstate (PTHREAD_CANCEL_DISABLE, NULL);
  for (size_t i = 0; i < exports.n; i++)
    s4k_dev_stop (exports.v[i].dev);
  return NULL;
}

static void
sect4k_unload (void)
{
  if (stop_watching) {
    /* Ended by the stop; not (nbdkit -s: the connection ended) woken. */
    pthread_cancel (stop_watcher);
    pthread_join (stop_watcher, NULL);
  }
  s4k_exports_close (&exports);
}

static int
sect4k_config (const char *key, const char *value)
{
  char err[512];
  if (s4k_exports_set (&exports, key, value, err, sizeof err) == -1) {
    nbdkit_error ("%s", err);
    return -1;
  }
  return 0;
}

static int
sect4k_config_complete (void)
{
  char err[512];
  if (s4k_exports_finish (&exports, err, sizeof err) == -1) {
    nbdkit_error ("%s", err);
    return -1;
  }
  for (size_t i = 0; i < exports.n; i++)
    if (s4k_zone_refuse_nbd (&exports.v[i].cfg.zone,
                             exports.named ? exports.v[i].name : NULL,
                             "sect4k-server ", false, err,
                             sizeof err) == -1) {
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
  /* Before any connection: the threads then only read the table. */
  if (s4k_exports_open (&exports, err, sizeof err) < 0) {
    nbdkit_error ("%s", err);
    return -1;
  }
  for (size_t i = 0; i < exports.n; i++) {
    struct s4k_export *e = &exports.v[i];
    if (sect4k_debug_rmw)
      s4k_dev_set_debug (e->dev, S4K_DEBUG_RMW, log_debug, NULL);
    /* Unnamed: the lines of before, which tests and users grep. */
    const char *sep = exports.named ? ": " : "";
    nbdkit_debug ("sect4k: %s%s%s, size %" PRIu64, e->name, sep,
                  e->description, s4k_dev_geometry (e->dev)->size);
    nbdkit_debug ("sect4k: %s%s%s", e->name, sep,
                  s4k_dev_store_info (e->dev));
  }
  return 0;
}

/* nbdkit forks into the background after get_ready: threads start here. */
static int
sect4k_after_fork (void)
{
  s4k_exports_start (&exports);
  bool forever = false;
  for (size_t i = 0; i < exports.n; i++)
    forever |= exports.v[i].cfg.upstream && !exports.v[i].cfg.upstream_timeout;
  if (forever) {
    int e = pthread_create (&stop_watcher, NULL, watch_stop, NULL);
    if (e) {
      nbdkit_error ("upstream-timeout=0: cannot start a thread: %s",
                    strerror (e));
      return -1;
    }
    stop_watching = true;
  }
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
  printf ("sect4k_upstream_partial_writes=yes\n");
}

/* Without export=, any name reaches the one export, as nbdkit's own
 * plugins do; with it, the list is the table's. */
static int
sect4k_list_exports (int readonly, int is_tls, struct nbdkit_exports *list)
{
  (void) readonly; (void) is_tls;
  if (!exports.named)
    return nbdkit_use_default_export (list);
  for (size_t i = 0; i < exports.n; i++)
    if (nbdkit_add_export (list, exports.v[i].name,
                           exports.v[i].description) == -1)
      return -1;
  return 0;
}

static const char *
sect4k_default_export (int readonly, int is_tls)
{
  (void) readonly; (void) is_tls;
  return exports.v[0].name;
}

static void *
sect4k_open (int readonly)
{
  const struct s4k_export *e = &exports.v[0];
  if (exports.named) {
    const char *name = nbdkit_export_name ();
    if (!name)
      name = "";
    if (!(e = s4k_exports_find (&exports, name, strlen (name)))) {
      char msg[768];
      s4k_exports_unknown (&exports, name, msg, sizeof msg);
      nbdkit_error ("%s", msg);
      return NULL;
    }
  }
  /* A read-only upstream is the user's to ask for, as with
   * sect4k-server -r.  (A file that cannot be written is served
   * read-only as it is, like a disk on a read-only mount.) */
  if (!readonly && e->cfg.upstream && s4k_dev_readonly (e->dev)) {
    nbdkit_error ("upstream=%s: the export is read-only; serve it "
                  "read-only (nbdkit -r)", e->cfg.upstream);
    return NULL;
  }
  struct handle *h = calloc (1, sizeof *h);
  if (!h) {
    nbdkit_error ("calloc: out of memory");
    return NULL;
  }
  h->dev = e->dev;
  h->description = e->description;
  h->faults = e->cfg.fault.on;
  h->timed = s4k_dev_timed (e->dev);
  h->rotational = s4k_timing_rotation_rate (&e->cfg.timing) > 1;
  if (h->faults)
    h->epoch = s4k_dev_power_cuts (h->dev);
  return h;
}

/* A connection opened before a power cut gets EIO (s4k_glue_cut_off).
 * Inline: on an export without faults, one test of the handle. */
static inline bool
cut_off (struct handle *h)
{
  return __builtin_expect (h->faults, 0) &&
         s4k_glue_cut_off (h->dev, h->epoch, &h->cut_logged);
}

static void
sect4k_close (void *handle)
{
  free (handle);
}

static int64_t
sect4k_get_size (void *handle)
{
  struct handle *h = handle;
  return s4k_dev_geometry (h->dev)->size;
}

static int
sect4k_block_size (void *handle, uint32_t *minimum, uint32_t *preferred,
                   uint32_t *maximum)
{
  struct handle *h = handle;
  const struct s4k_geometry *g = s4k_dev_geometry (h->dev);
  *minimum = g->logical;
  *preferred = g->physical;
  *maximum = s4k_dev_max_request (h->dev);
  return 0;
}

static const char *
sect4k_export_description (void *handle)
{
  struct handle *h = handle;
  return h->description;
}

static int
sect4k_can_write (void *h)
{
  return !s4k_dev_readonly (dev_of (h));
}
static int sect4k_can_flush (void *h) { (void) h; return 1; }
static int sect4k_can_trim (void *h) { (void) h; return 1; }
static int sect4k_can_zero (void *h) { (void) h; return 1; }
static int sect4k_can_extents (void *h) { (void) h; return 1; }
static int sect4k_can_multi_conn (void *h) { (void) h; return 1; }
static int sect4k_can_fua (void *h) { (void) h; return NBDKIT_FUA_NATIVE; }
static int sect4k_can_cache (void *h) { (void) h; return NBDKIT_CACHE_NATIVE; }
/* As the SCSI disk's rotation rate says (s4k_timing_rotation_rate). */
static int
sect4k_is_rotational (void *h)
{
  return ((struct handle *) h)->rotational;
}
static int
sect4k_can_fast_zero (void *h)
{
  return s4k_dev_can_fast_zero (dev_of (h));
}

/* The timing model: this worker thread sleeps until the request's
 * modelled completion, the data work done and its sector locks released
 * (other requests go on in the other threads; nbdkit's -t bounds how many
 * are in flight).  nbdkit_nanosleep wakes early at shutdown. */
static void __attribute__ ((noinline, cold))
wait_modelled (struct handle *h, int r, enum s4k_op op, uint64_t len,
               uint64_t off)
{
  const uint64_t due = s4k_dev_timing (h->dev, op, len, off, r);
  const uint64_t now = s4k_now_ns ();
  if (due > now)
    nbdkit_nanosleep ((due - now) / 1000000000u, (due - now) % 1000000000u);
}

/* Turns an engine result into nbdkit's convention.  Inline, so success
 * costs the callers one test (and the timing model's one more). */
static inline int
result (struct handle *h, int r, enum s4k_op op, uint64_t len, uint64_t off)
{
  if (__builtin_expect (h->timed, 0))
    wait_modelled (h, r, op, len, off);
  return r == 0 ? 0 : s4k_glue_result (h->dev, &h->refused_once, r, op,
                                       len, off);
}

static int
sect4k_pread (void *h, void *buf, uint32_t count, uint64_t offset,
              uint32_t flags)
{
  if (cut_off (h))
    return -1;
  (void) flags;
  return result (h, s4k_read (dev_of (h), buf, count, offset), S4K_OP_READ,
                 count, offset);
}

static int
sect4k_pwrite (void *h, const void *buf, uint32_t count, uint64_t offset,
               uint32_t flags)
{
  if (cut_off (h))
    return -1;
  /* FUA is the only flag nbdkit passes to a write. */
  const unsigned f = flags & NBDKIT_FLAG_FUA ? S4K_FUA : 0;
  return result (h, AS_CLIENT (h, S4K_OP_WRITE, f,
                               s4k_write (dev_of (h), buf, count, offset, f)),
                 S4K_OP_WRITE, count, offset);
}

static int
sect4k_zero (void *h, uint32_t count, uint64_t offset, uint32_t flags)
{
  if (cut_off (h))
    return -1;
  const unsigned f = s4k_glue_flags (flags);
  return result (h, AS_CLIENT (h, S4K_OP_ZERO, f,
                               s4k_zero (dev_of (h), count, offset, f)),
                 S4K_OP_ZERO, count, offset);
}

static int
sect4k_trim (void *h, uint32_t count, uint64_t offset, uint32_t flags)
{
  if (cut_off (h))
    return -1;
  const unsigned f = s4k_glue_flags (flags);
  return result (h, AS_CLIENT (h, S4K_OP_TRIM, f,
                               s4k_trim (dev_of (h), count, offset, f)),
                 S4K_OP_TRIM, count, offset);
}

static int
sect4k_flush (void *h, uint32_t flags)
{
  if (cut_off (h))
    return -1;
  (void) flags;
  return result (h, AS_CLIENT (h, S4K_OP_FLUSH, 0, s4k_flush (dev_of (h))),
                 S4K_OP_FLUSH, 0, 0);
}

static int
sect4k_cache (void *h, uint32_t count, uint64_t offset, uint32_t flags)
{
  if (cut_off (h))
    return -1;
  (void) flags;
  return result (h, s4k_cache (dev_of (h), count, offset), S4K_OP_CACHE,
                 count, offset);
}

static int
sect4k_extents (void *h, uint32_t count, uint64_t offset, uint32_t flags,
                struct nbdkit_extents *extents)
{
  if (cut_off (h))
    return -1;
  struct s4k_glue_extents c = { extents, flags & NBDKIT_FLAG_REQ_ONE };
  return result (h, s4k_extents (dev_of (h), count, offset,
                                 s4k_glue_add_extent, &c),
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
  .list_exports = sect4k_list_exports,
  .default_export = sect4k_default_export,
  .can_write = sect4k_can_write,
  .can_flush = sect4k_can_flush,
  .can_trim = sect4k_can_trim,
  .can_zero = sect4k_can_zero,
  .can_fast_zero = sect4k_can_fast_zero,
  .can_extents = sect4k_can_extents,
  .can_multi_conn = sect4k_can_multi_conn,
  .can_fua = sect4k_can_fua,
  .can_cache = sect4k_can_cache,
  .is_rotational = sect4k_is_rotational,
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
