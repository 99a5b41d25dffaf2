/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-sect4k-filter: the sect4k geometry over any nbdkit plugin.
 *
 *   nbdkit --filter=./sect4k-filter.so memory 10G physical=4096
 *
 * The engine runs the RMW and the per-sector locks; its store here is
 * the next layer.  The engine knows nothing of nbdkit, and the next
 * layer can only be called with the nbdkit context of the connection
 * whose request it is: each callback puts its `next` in a thread-local
 * before calling the engine, which calls the store on that same thread
 * (the synchronous path), and the store calls through it.
 *
 * One device for the whole server (the sector locks must be shared by
 * every connection), made at the first connection: only then can the
 * next layer's size be asked.  It closes at .cleanup, once every
 * connection has ended, through a context of its own into the next
 * layer (which still exists then, unlike at .unload): a volatile write
 * cache is written back there, as the plugin does at its unload. */
#define NBDKIT_API_VERSION 2
#include <nbdkit-filter.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>

#include "sect4k/extents.h"
#include "sect4k/sect4k.h"
#include "sect4k/unixsock.h"
#include "glue.h"
/* The one front end that brings its own store (the next layer): the
 * store interface is otherwise private to lib/. */
#include "../lib/store/store.h"

#define ZERO_CHUNK (1u << 30)

/* -D sect4k.rmw=1 logs every read-modify-write. */
NBDKIT_DLL_PUBLIC int sect4k_debug_rmw = 0;

static struct s4k_config cfg;
static pthread_mutex_t dev_lock = PTHREAD_MUTEX_INITIALIZER;
static struct s4k_dev *dev;
static char description[256];
/* What .cleanup opens the next layer with: the export the device was
 * made over, and whether any connection could write (else nothing can
 * be dirty, and a read-only plugin need not be opened writable). */
static char *dev_export;
static bool dev_writable;

/* The next layer of the request this thread is running. */
static _Thread_local nbdkit_next *tl_next;
/* The next layer for store calls outside a request (a power cut from
 * the control socket's thread writing what its outcomes keep, the
 * write-back at .cleanup): a shared context of our own, opened at the
 * first writable connection where the plugin may be called from any
 * thread at any time (the parallel thread model), or at .cleanup. */
static nbdkit_next *_Atomic own_next;
static nbdkit_backend *backend;         /* from .open (under dev_lock),
                                           valid until .cleanup */
static int thread_model = -1;           /* nbdkit's final one */

/* Store calls with no next layer to call (the control socket's thread
 * over a plugin that is not parallel, the device closing at unload when
 * .cleanup could not reach the next layer) fail with EIO rather than
 * crash. */
#define NEXT_OR_EIO(next)                                               \
  nbdkit_next *next = tl_next ? tl_next : atomic_load (&own_next);      \
  if (!next)                                                            \
    return -EIO

struct handle {
  atomic_bool refused_once;     /* atomic: parallel worker threads */
  atomic_bool cut_logged;
  unsigned epoch;               /* power cuts before the connection */
  char *exportname;             /* the client's, for the device's first */
};

/* ---- the store: the next layer ---------------------------------------- */

struct next_store {
  struct s4k_store base;
  char info[128];
  uint32_t chunk;               /* largest read or write passed down */
  char *zeroes;                 /* for a next layer without zero */
  size_t zeroes_len;
};

static int
next_read (struct s4k_store *s, const struct s4k_io *io, unsigned n)
{
  struct next_store *ns = (struct next_store *) s;
  NEXT_OR_EIO (next);
  int err = 0;
  for (unsigned i = 0; i < n; i++)
    for (uint64_t done = 0; done < io[i].len; ) {
      uint32_t len = io[i].len - done < ns->chunk ? io[i].len - done
                                                  : ns->chunk;
      if (next->pread (next, (char *) io[i].buf + done, len,
                       io[i].off + done, 0, &err) == -1)
        return -(err ? err : EIO);
      done += len;
    }
  return 0;
}

/* FUA for the next layer, or a flush after the command. */
static uint32_t
fua_flag (nbdkit_next *next, bool fua)
{
  return fua && next->can_fua (next) != NBDKIT_FUA_NONE ? NBDKIT_FLAG_FUA
                                                        : 0;
}
static int
fua_flush (nbdkit_next *next, bool fua)
{
  int err = 0;
  if (fua && next->can_fua (next) == NBDKIT_FUA_NONE &&
      next->can_flush (next) == 1 && next->flush (next, 0, &err) == -1)
    return -(err ? err : EIO);
  return 0;
}

/* Writes len bytes of buf at off; with buflen, buf holds buflen bytes
 * to write again and again (zeroes). */
static int
write_next (struct next_store *ns, nbdkit_next *next, const char *buf,
            uint64_t len, uint64_t off, bool fua, size_t buflen)
{
  int err = 0;
  for (uint64_t done = 0; done < len; ) {
    uint32_t n = len - done < ns->chunk ? len - done : ns->chunk;
    if (buflen && n > buflen)
      n = buflen;
    if (next->pwrite (next, buflen ? buf : buf + done, n, off + done,
                      fua_flag (next, fua), &err) == -1)
      return -(err ? err : EIO);
    done += n;
  }
  return 0;
}

static int
next_write (struct s4k_store *s, const struct s4k_io *io, unsigned n,
            bool fua)
{
  struct next_store *ns = (struct next_store *) s;
  NEXT_OR_EIO (next);
  int r = 0;
  for (unsigned i = 0; i < n && r == 0; i++)
    r = write_next (ns, next, io[i].buf, io[i].len, io[i].off, fua, 0);
  return r ? r : fua_flush (next, fua);
}

/* A trim is a zero that may punch holes: sect4k's trimmed sectors read
 * as zeroes, and the next layer's trim promises nothing. */
static int
next_zero (struct s4k_store *s, uint64_t len, uint64_t off, bool may_trim,
           bool fua)
{
  struct next_store *ns = (struct next_store *) s;
  NEXT_OR_EIO (next);
  int err = 0;
  if (next->can_zero (next) == NBDKIT_ZERO_NONE) {
    int r = write_next (ns, next, ns->zeroes, len, off, fua, ns->zeroes_len);
    return r ? r : fua_flush (next, fua);
  }
  for (uint64_t done = 0; done < len; done += ZERO_CHUNK) {
    uint32_t n = len - done < ZERO_CHUNK ? len - done : ZERO_CHUNK;
    if (next->zero (next, n, off + done,
                    (may_trim ? NBDKIT_FLAG_MAY_TRIM : 0) |
                    fua_flag (next, fua), &err) == -1)
      return -(err ? err : EIO);
  }
  return fua_flush (next, fua);
}

static int
next_trim (struct s4k_store *s, uint64_t len, uint64_t off, bool fua)
{
  return next_zero (s, len, off, true, fua);
}

static int
next_flush (struct s4k_store *s)
{
  NEXT_OR_EIO (next);
  int err = 0;
  (void) s;
  if (next->can_flush (next) == 1 && next->flush (next, 0, &err) == -1)
    return -(err ? err : EIO);
  return 0;
}

static int
next_extents (struct s4k_store *s, uint64_t len, uint64_t off,
              s4k_extent_fn *fn, void *opaque)
{
  NEXT_OR_EIO (next);
  (void) s;
  if (next->can_extents (next) != 1)
    return fn (opaque, off, len, false) < 0 ? -EIO : 0;
  struct s4k_extent_rounder w;
  s4k_extent_round_init (&w, s4k_dev_geometry (dev), off, fn, opaque);
  const uint64_t end = off + len;
  while (w.pos < end && !w.stop) {
    uint32_t n = end - w.pos < ZERO_CHUNK ? end - w.pos : ZERO_CHUNK;
    struct nbdkit_extents *e = nbdkit_extents_new (w.pos, w.pos + n);
    int err = 0;
    if (!e)
      return -ENOMEM;
    if (next->extents (next, n, w.pos, 0, e, &err) == -1) {
      nbdkit_extents_free (e);
      return -(err ? err : EIO);
    }
    uint64_t before = w.pos;
    for (size_t i = 0; i < nbdkit_extents_count (e) && !w.stop; i++) {
      struct nbdkit_extent x = nbdkit_get_extent (e, i);
      s4k_extent_round_add (&w, x.length, x.type & NBDKIT_EXTENT_ZERO);
    }
    nbdkit_extents_free (e);
    if (w.pos <= before)
      return -EIO;              /* the next layer answered nothing */
  }
  return s4k_extent_round_end (&w, end);
}

static bool
next_can_fast_zero (struct s4k_store *s)
{
  (void) s;
  return tl_next && tl_next->can_fast_zero (tl_next) == 1;
}

static void
next_close (struct s4k_store *s)
{
  struct next_store *ns = (struct next_store *) s;
  free (ns->zeroes);
  free (ns);
}

static const char *
next_info (const struct s4k_store *s)
{
  return ((const struct next_store *) s)->info;
}

static const struct s4k_store_ops next_ops = {
  .name = "nbdkit filter: the next layer",
  .info = next_info,
  .read = next_read,
  .write = next_write,
  .zero = next_zero,
  .trim = next_trim,
  .flush = next_flush,
  .extents = next_extents,
  .can_fast_zero = next_can_fast_zero,
  .close = next_close,
};

/* ---- configuration: our keys, the rest to the plugin ------------------ */

/* Keys of the plugin that do not apply here: the next layer is the
 * store. */
static const char *const not_ours[] = {
  "size", "file", "direct", "io", "upstream", "upstream-connections",
  "upstream-timeout", "export", "exports", NULL
};

static bool
excluded (const char *key, size_t len)
{
  for (size_t i = 0; not_ours[i]; i++)
    if (strlen (not_ours[i]) == len && memcmp (not_ours[i], key, len) == 0)
      return true;
  return false;
}

/* Our keys are those the shared help documents (a line starting
 * "key="), minus the store's. */
static bool
ours (const char *key)
{
  size_t len = strlen (key);
  if (excluded (key, len))
    return false;
  for (const char *p = s4k_config_help; p; p = strchr (p, '\n')) {
    if (*p == '\n')
      p++;
    if (strncmp (p, key, len) == 0 && p[len] == '=')
      return true;
  }
  return false;
}

static void
sect4k_load (void)
{
  s4k_config_init (&cfg);
  cfg.store_sized = true;
}

/* Closes the device if .cleanup did not (nbdkit does not promise to
 * call it): with no next layer to write to, the fault layer says how
 * much cached data is lost. */
static void
sect4k_unload (void)
{
  s4k_dev_close (dev);
  free (dev_export);
}

static int
sect4k_get_ready (int model)
{
  thread_model = model;
  return 0;
}

/* A context of our own into the next layer (own_next), or NULL.  nbdkit
 * checks that a context was asked its size and whether it can write
 * before it is written to. */
static nbdkit_next *
open_own_next (void)
{
  nbdkit_next *next = nbdkit_next_context_open (backend, 0, dev_export, 1);
  if (!next)
    return NULL;
  if (next->prepare (next) == -1) {
    nbdkit_next_context_close (next);
    return NULL;
  }
  if (next->get_size (next) == -1 || next->can_write (next) != 1) {
    next->finalize (next);
    nbdkit_next_context_close (next);
    return NULL;
  }
  return next;
}

/* Every connection has ended and the next layer is still there: the
 * device closes with a next layer to call (own_next, opened now if it
 * was not), so that the fault layer's write-back (a clean power-down
 * flushes a drive's cache) reaches the plugin. */
static void
sect4k_cleanup (nbdkit_backend *b)
{
  (void) b;                     /* the one .open saw */
  if (!dev)
    return;
  if (dev_writable && !own_next)
    own_next = open_own_next ();
  s4k_dev_close (dev);
  dev = NULL;
  nbdkit_next *next = atomic_exchange (&own_next, NULL);
  if (next) {
    next->finalize (next);
    nbdkit_next_context_close (next);
  }
}

static int
sect4k_config (nbdkit_next_config *next, nbdkit_backend *nxdata,
               const char *key, const char *value)
{
  char err[512];
  /* The filter serves one device: over the next layer's one export. */
  if (strcmp (key, "export") == 0 || strcmp (key, "exports") == 0) {
    nbdkit_error ("%s=: the sect4k filter serves one device (the plugin "
                  "serves several exports)", key);
    return -1;
  }
  if (!ours (key))
    return next (nxdata, key, value);
  if (s4k_config_set (&cfg, key, value, err, sizeof err) == -1) {
    nbdkit_error ("%s", err);
    return -1;
  }
  return 0;
}

static int
sect4k_config_complete (nbdkit_next_config_complete *next,
                        nbdkit_backend *nxdata)
{
  char err[512];
  if (s4k_config_finish (&cfg, err, sizeof err) == -1 ||
      s4k_zone_refuse_nbd (&cfg.zone, NULL, "sect4k-server ", false,
                           err, sizeof err) == -1) {
    nbdkit_error ("%s", err);
    return -1;
  }
  /* The control socket opens with the device, at the first connection:
   * a path another server answers on is refused now, at startup. */
  if (cfg.fault.control &&
      s4k_unix_probe (cfg.fault.control, err, sizeof err) == -1) {
    nbdkit_error ("control=%s: %s", cfg.fault.control, err);
    return -1;
  }
  return next (nxdata);
}

/* ---- connections ------------------------------------------------------ */

static void
log_debug (void *opaque, const char *msg)
{
  (void) opaque;
  nbdkit_debug ("%s", msg);
}

/* The device over the next layer, made at the first connection. */
static int
make_dev (nbdkit_next *next, const char *exportname)
{
  const struct s4k_geometry *g = &cfg.geom;
  char err[512];
  int64_t size = next->get_size (next);
  uint32_t min = 0, pref = 0, max = 0;
  if (size == -1 || next->block_size (next, &min, &pref, &max) == -1)
    return -1;
  if (min > 1 && (g->physical % min || g->alignment % min)) {
    nbdkit_error ("the plugin's minimum block size %" PRIu32 " does not "
                  "divide physical=%" PRIu32 " and alignment-offset=%"
                  PRIu32, min, g->physical, g->alignment);
    return -1;
  }
  struct s4k_config c = cfg;
  c.geom.size = (uint64_t) size / g->logical * g->logical;
  if (c.geom.size == 0) {
    nbdkit_error ("the plugin's size %" PRId64 " is smaller than one "
                  "logical sector (%" PRIu32 ")", size, g->logical);
    return -1;
  }
  struct next_store *ns = calloc (1, sizeof *ns);
  uint64_t chunk = max && max < (32u << 20) ? max : 32u << 20;
  if (min > 1)
    chunk = chunk / min * min;
  if (ns) {
    ns->base.ops = &next_ops;
    /* A plugin that says no minimum block size takes any byte range
     * (nbdkit passes it every request, as the NBD spec's default of 1). */
    ns->base.partial_writes = s4k_upstream_partial_writes (&c, min);
    ns->chunk = chunk ? chunk : min;
    ns->zeroes_len = g->physical > (1u << 20) ? g->physical : 1u << 20;
    ns->zeroes = calloc (1, ns->zeroes_len);
  }
  if (ns)
    snprintf (ns->info, sizeof ns->info, "the next layer: minimum block "
              "size %" PRIu32 ", partial writes %s", min,
              ns->base.partial_writes ? "yes"
              : !c.partial_writes ? "no (upstream-partial-writes=false)"
              : "no (whole minimum blocks)");
  if (!ns || !ns->zeroes) {
    nbdkit_error ("out of memory");
    free (ns);
    return -1;
  }
  if (s4k_geometry_check (&c.geom, err, sizeof err) == -1) {
    nbdkit_error ("%s", err);
    next_close (&ns->base);
    return -1;
  }
  if (!(dev_export = strdup (exportname))) {
    nbdkit_error ("out of memory");
    next_close (&ns->base);
    return -1;
  }
  if (s4k_dev_new (&dev, &c, &ns->base, err, sizeof err) < 0) {
    nbdkit_error ("%s", err);
    free (dev_export);
    dev_export = NULL;
    return -1;
  }
  if (sect4k_debug_rmw)
    s4k_dev_set_debug (dev, S4K_DEBUG_RMW, log_debug, NULL);
  s4k_dev_describe (dev, description, sizeof description);
  s4k_dev_start (dev);
  nbdkit_debug ("sect4k: %s, size %" PRIu64 " over the plugin's %" PRId64,
                description, c.geom.size, size);
  nbdkit_debug ("sect4k: %s", s4k_dev_store_info (dev));
  return 0;
}

static void *
sect4k_open (nbdkit_next_open *next, nbdkit_context *context, int readonly,
             const char *exportname, int is_tls)
{
  (void) is_tls;
  if (next (context, readonly, exportname) == -1)
    return NULL;
  pthread_mutex_lock (&dev_lock);
  if (!backend)
    backend = nbdkit_context_get_backend (context);
  pthread_mutex_unlock (&dev_lock);
  struct handle *h = calloc (1, sizeof *h);
  if (h && !(h->exportname = strdup (exportname))) {
    free (h);
    h = NULL;
  }
  if (!h)
    nbdkit_error ("calloc: out of memory");
  return h;
}

static void
sect4k_close (void *handle)
{
  struct handle *h = handle;
  free (h->exportname);
  free (h);
}

static int
sect4k_prepare (nbdkit_next *next, void *handle, int readonly)
{
  struct handle *h = handle;
  int r = 0;
  pthread_mutex_lock (&dev_lock);
  if (!dev)
    r = make_dev (next, h->exportname);
  else {
    int64_t size = next->get_size (next);
    if (size >= 0 &&
        (uint64_t) size / cfg.geom.logical * cfg.geom.logical !=
        s4k_dev_geometry (dev)->size) {
      nbdkit_error ("this export's size %" PRId64 " is not the first "
                    "one's: the filter serves one device", size);
      r = -1;
    }
  }
  if (r == 0)
    h->epoch = s4k_dev_power_cuts (dev);
  if (r == 0 && !readonly) {
    dev_writable = true;
    if (!own_next && thread_model == NBDKIT_THREAD_MODEL_PARALLEL)
      own_next = open_own_next ();
  }
  pthread_mutex_unlock (&dev_lock);
  return r;
}

static int64_t
sect4k_get_size (nbdkit_next *next, void *handle)
{
  (void) next; (void) handle;
  return s4k_dev_geometry (dev)->size;
}

static int
sect4k_block_size (nbdkit_next *next, void *handle, uint32_t *minimum,
                   uint32_t *preferred, uint32_t *maximum)
{
  (void) next; (void) handle;
  const struct s4k_geometry *g = s4k_dev_geometry (dev);
  *minimum = g->logical;
  *preferred = g->physical;
  *maximum = s4k_dev_max_request (dev);
  return 0;
}

static const char *
sect4k_export_description (nbdkit_next *next, void *handle)
{
  (void) next; (void) handle;
  return description;
}

/* The engine answers flush, trim, zero, FUA, extents and cache itself
 * (with fallbacks where the next layer lacks them). */
static int sect4k_yes (nbdkit_next *n, void *h) { (void) n; (void) h; return 1; }
static int
sect4k_can_fua (nbdkit_next *n, void *h)
{
  (void) n; (void) h;
  return NBDKIT_FUA_NATIVE;
}
static int
sect4k_can_cache (nbdkit_next *n, void *h)
{
  (void) n; (void) h;
  return NBDKIT_CACHE_NATIVE;
}
/* The device's timing model says, not the next layer (its store), as the
 * plugin and the SCSI disk (s4k_timing_rotation_rate). */
static int
sect4k_is_rotational (nbdkit_next *n, void *h)
{
  (void) n; (void) h;
  return s4k_timing_rotation_rate (&cfg.timing) > 1;
}
static int
sect4k_can_fast_zero (nbdkit_next *next, void *h)
{
  (void) h;
  return next->can_fast_zero (next);
}

/* Runs one engine call with this request's next layer; r is its
 * result. */
#define WITH_NEXT(next, call) \
  (tl_next = (next), __extension__ ({ int r_ = (call); tl_next = NULL; r_; }))

static int
result (void *handle, int r, enum s4k_op op, uint64_t len, uint64_t off,
        int *err)
{
  struct handle *h = handle;
  if (s4k_glue_result (dev, &h->refused_once, r, op, len, off) == 0)
    return 0;
  *err = -r;
  return -1;
}

/* A connection opened before a power cut gets EIO for every request,
 * as in the plugin (s4k_glue_cut_off); this also marks the engine call
 * to follow with its epoch, so that a cut while it runs refuses it. */
static bool
cut_off (void *handle, int *err)
{
  struct handle *h = handle;
  if (!cfg.fault.on || !s4k_glue_cut_off (dev, h->epoch, &h->cut_logged))
    return false;
  *err = EIO;
  return true;
}

static int
sect4k_pread (nbdkit_next *next, void *h, void *buf, uint32_t count,
              uint64_t offset, uint32_t flags, int *err)
{
  (void) flags;
  if (cut_off (h, err))
    return -1;
  return result (h, WITH_NEXT (next, s4k_read (dev, buf, count, offset)),
                 S4K_OP_READ, count, offset, err);
}

static int
sect4k_pwrite (nbdkit_next *next, void *h, const void *buf, uint32_t count,
               uint64_t offset, uint32_t flags, int *err)
{
  if (cut_off (h, err))
    return -1;
  return result (h, WITH_NEXT (next, s4k_write (dev, buf, count, offset,
                                                s4k_glue_flags (flags))),
                 S4K_OP_WRITE, count, offset, err);
}

static int
sect4k_zero (nbdkit_next *next, void *h, uint32_t count, uint64_t offset,
             uint32_t flags, int *err)
{
  if (cut_off (h, err))
    return -1;
  return result (h, WITH_NEXT (next, s4k_zero (dev, count, offset,
                                               s4k_glue_flags (flags))),
                 S4K_OP_ZERO, count, offset, err);
}

static int
sect4k_trim (nbdkit_next *next, void *h, uint32_t count, uint64_t offset,
             uint32_t flags, int *err)
{
  if (cut_off (h, err))
    return -1;
  return result (h, WITH_NEXT (next, s4k_trim (dev, count, offset,
                                               s4k_glue_flags (flags))),
                 S4K_OP_TRIM, count, offset, err);
}

static int
sect4k_flush (nbdkit_next *next, void *h, uint32_t flags, int *err)
{
  (void) flags;
  if (cut_off (h, err))
    return -1;
  return result (h, WITH_NEXT (next, s4k_flush (dev)), S4K_OP_FLUSH, 0, 0,
                 err);
}

static int
sect4k_cache (nbdkit_next *next, void *h, uint32_t count, uint64_t offset,
              uint32_t flags, int *err)
{
  (void) next; (void) flags;
  if (cut_off (h, err))
    return -1;
  return result (h, s4k_cache (dev, count, offset), S4K_OP_CACHE, count,
                 offset, err);
}

static int
sect4k_extents (nbdkit_next *next, void *h, uint32_t count, uint64_t offset,
                uint32_t flags, struct nbdkit_extents *extents, int *err)
{
  struct s4k_glue_extents c = { extents, flags & NBDKIT_FLAG_REQ_ONE };
  if (cut_off (h, err))
    return -1;
  return result (h, WITH_NEXT (next, s4k_extents (dev, count, offset,
                                                  s4k_glue_add_extent, &c)),
                 S4K_OP_EXTENTS, count, offset, err);
}

static struct nbdkit_filter filter = {
  .name = "sect4k",
  .longname = "sect4k filter: any sector geometry over any plugin",
  .description = "Serves the plugin's data with chosen logical and "
                 "physical sector sizes and alignment offset, doing "
                 "read-modify-write of physical sectors like a 512e drive.",
  .load = sect4k_load,
  .unload = sect4k_unload,
  .get_ready = sect4k_get_ready,
  .cleanup = sect4k_cleanup,
  .config = sect4k_config,
  .config_complete = sect4k_config_complete,
  .open = sect4k_open,
  .close = sect4k_close,
  .prepare = sect4k_prepare,
  .get_size = sect4k_get_size,
  .block_size = sect4k_block_size,
  .export_description = sect4k_export_description,
  .can_flush = sect4k_yes,
  .can_trim = sect4k_yes,
  .can_zero = sect4k_yes,
  .can_fast_zero = sect4k_can_fast_zero,
  .can_extents = sect4k_yes,
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
};

/* The shared help without the store's keys (at load: the list of keys
 * grows in lib/config.c). */
__attribute__ ((constructor)) static void
make_help (void)
{
  char *o = malloc (strlen (s4k_config_help) + 1);
  bool skip = false;
  if (!o)
    return;
  filter.config_help = o;
  for (const char *p = s4k_config_help; *p; ) {
    const char *nl = strchr (p, '\n');
    size_t n = nl ? (size_t) (nl - p) + 1 : strlen (p);
    if (*p != ' ')
      skip = excluded (p, strcspn (p, "="));
    if (!skip) {
      memcpy (o, p, n);
      o += n;
    }
    p += n;
  }
  *o = '\0';
}

NBDKIT_REGISTER_FILTER (filter)
