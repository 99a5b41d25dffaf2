/* SPDX-License-Identifier: BSD-3-Clause */
/* The fault layer (issue 11): a store over the real one, so it sees what
 * a drive's medium sees, whole physical sectors.
 *
 * - Bad sectors: a read touching one fails with EIO.  The engine's RMW
 *   reads a cut sector before writing it, so a partial write of a bad
 *   sector fails the same way and changes nothing; a whole-sector write,
 *   zero or trim reaches the store and clears it.
 * - Write cache: writes go to a table of dirty physical sectors over the
 *   durable contents (the inner store); a flush, a FUA write or destaging
 *   (oldest first, beyond write-cache-size) writes them through.  Zero
 *   and trim are written through at once (a drive may make anything
 *   durable early).
 * - Power cut: every dirty sector (and the write that triggered the cut)
 *   gets an outcome from a seeded PRNG: kept, reverted, or the policy's
 *   interrupted write: torn (a mix of old and new logical sectors), torn
 *   and bad (unreadable), garbage (the new image up to a random byte,
 *   random bytes after it) or zeroed.  After a drive's RMW a neighbour's
 *   old and new bytes are equal, so only the last two lose neighbours
 *   without an error.
 *
 * One mutex serializes the layer: the engine already holds the sector
 * locks, and the layer exists only for tests.  Without fault keys the
 * layer is not there at all.
 *
 * This file: the layer as a store (its operations, the connection epoch
 * that fails requests from before a cut), setting it up, its status.
 * fault_bad.c holds the bad sectors, fault_cache.c the write cache,
 * fault_cut.c the power cut; fault_priv.h is what they share. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fault_priv.h"
#include "stats/stats.h"

/* ---- the layer --------------------------------------------------------- */

/* The thread's connection epoch (s4k_fault_epoch); 0 before it is set. */
static _Thread_local __attribute__ ((tls_model ("initial-exec"))) unsigned
  tl_epoch;

void
s4k_fault_epoch (unsigned cuts)
{
  tl_epoch = cuts + 1;
}

/* True if the calling request comes from before the latest cut. */
static bool
stale (struct s4k_fault *f)
{
  return tl_epoch && tl_epoch != atomic_load (&f->cuts) + 1;
}

bool
fault_stale (struct s4k_fault *f)
{
  return stale (f);
}

/* ---- store operations -------------------------------------------------- */

static int
fault_read (struct s4k_store *s, const struct s4k_io *io, unsigned n)
{
  struct s4k_fault *f = (struct s4k_fault *) s;
  int r = 0;
  pthread_mutex_lock (&f->m);
  if (stale (f))
    r = -EIO;
  else if (f->bad.n)
    for (unsigned i = 0; i < n; i++)
      if (fault_bad_any (&f->bad, sector_of (f, io[i].off),
                         sector_of (f, io[i].off + io[i].len - 1))) {
        fault_tally.bad_sector_hit = true;
        r = -EIO;
        break;
      }
  if (r == 0)
    r = fault_read_cached (f, io, n);
  pthread_mutex_unlock (&f->m);
  return r;
}

/* atomic (the write's own bytes), not NULL: the sectors are kept or
 * dropped together at a cut. */
static int
write_any (struct s4k_store *s, const struct s4k_io *io, unsigned n,
           bool fua, const struct fault_span *atomic)
{
  struct s4k_fault *f = (struct s4k_fault *) s;
  int r = 0;
  bool cut = false;
  pthread_mutex_lock (&f->m);
  if (stale (f))
    r = -EIO;
  else if (f->cfg.power_cut_after && ++f->writes == f->cfg.power_cut_after) {
    /* In flight at the cut: at risk like unflushed data, and never
     * answered with success. */
    r = fault_stage (f, io, n, atomic);
    f->pending = true;
    f->pending_off = io[0].off;
    if (r == 0)
      fault_cut_locked (f, f->cfg.torn, "power-cut-after", NULL);
    f->pending = false;
    r = -EIO;
    cut = true;
  }
  else if (f->cfg.write_cache && !fua) {
    r = fault_stage (f, io, n, atomic);
    while (r == 0 && f->dirty_bytes > f->cfg.write_cache_size)
      r = fault_destage (f, f->oldest);
  }
  else {
    /* FUA: durable now, newer than anything dirty for these sectors
     * (and in a sequential zone, after the zone's writes below it). */
    r = fault_zone_settle (f, io[0].off, io[n - 1].off + io[n - 1].len);
    for (unsigned i = 0; i < n && r == 0; i++)
      if ((r = settle (f, io[i].len, io[i].off)) == 0)
        fault_drop_range (f, io[i].len, io[i].off);
    if (r == 0)
      r = f->inner->ops->write (f->inner, io, n, fua);
  }
  for (unsigned i = 0; i < n && r == 0; i++)
    r = fault_clear_bad (f, io[i].len, io[i].off);
  if (r == 0 && f->zones)
    fault_zone_wrote (f, io[0].off, io[n - 1].off + io[n - 1].len);
  pthread_mutex_unlock (&f->m);
  if (cut)
    fault_after_cut (f);
  return r;
}

static int
fault_write (struct s4k_store *s, const struct s4k_io *io, unsigned n,
             bool fua)
{
  return write_any (s, io, n, fua, NULL);
}

/* Without the cache the write reaches the store under the mutex, all of
 * it before a cut can run; with it, fault_stage keeps it one unit. */
static int
fault_write_atomic (struct s4k_store *s, const struct s4k_io *io,
                    unsigned n, bool fua, uint64_t len, uint64_t off)
{
  const struct fault_span span = { off, off + len };
  return write_any (s, io, n, fua, &span);
}

static int
fault_zero (struct s4k_store *s, uint64_t len, uint64_t off, bool may_trim,
            bool fua)
{
  struct s4k_fault *f = (struct s4k_fault *) s;
  int r = -EIO;
  pthread_mutex_lock (&f->m);
  if (!stale (f) && (r = settle (f, len, off)) == 0 &&
      (r = fault_zone_settle (f, off, off + len)) == 0) {
    fault_drop_range (f, len, off);
    r = f->inner->ops->zero (f->inner, len, off, may_trim, fua);
    if (r == 0)
      r = fault_clear_bad (f, len, off);
    if (r == 0 && f->zones)
      fault_zone_wrote (f, off, off + len);
  }
  pthread_mutex_unlock (&f->m);
  return r;
}

static int
fault_trim (struct s4k_store *s, uint64_t len, uint64_t off, bool fua)
{
  struct s4k_fault *f = (struct s4k_fault *) s;
  int r = -EIO;
  pthread_mutex_lock (&f->m);
  if (!stale (f) && (r = settle (f, len, off)) == 0) {
    fault_drop_range (f, len, off);
    r = f->inner->ops->trim (f->inner, len, off, fua);
    if (r == 0)
      r = fault_clear_bad (f, len, off);
  }
  pthread_mutex_unlock (&f->m);
  return r;
}

static int
fault_flush (struct s4k_store *s)
{
  struct s4k_fault *f = (struct s4k_fault *) s;
  pthread_mutex_lock (&f->m);
  int r = stale (f) ? -EIO : fault_flush_locked (f);
  pthread_mutex_unlock (&f->m);
  return r;
}

static int
fault_extents (struct s4k_store *s, uint64_t len, uint64_t off,
               s4k_extent_fn *fn, void *opaque)
{
  struct s4k_fault *f = (struct s4k_fault *) s;
  pthread_mutex_lock (&f->m);
  bool dirty = f->dirty_sectors != 0;
  pthread_mutex_unlock (&f->m);
  /* A dirty sector over a hole holds data: while anything is dirty, say
   * everything does (never wrong, only less sparse). */
  if (dirty)
    return fn (opaque, off, len, false) < 0 ? -EIO : 0;
  return f->inner->ops->extents (f->inner, len, off, fn, opaque);
}

static bool
fault_can_fast_zero (struct s4k_store *s)
{
  struct s4k_fault *f = (struct s4k_fault *) s;
  return f->inner->ops->can_fast_zero (f->inner);
}

static bool
fault_readonly (const struct s4k_store *s)
{
  const struct s4k_fault *f = (const struct s4k_fault *) s;
  return f->inner->ops->readonly && f->inner->ops->readonly (f->inner);
}

static const char *
fault_info (const struct s4k_store *s)
{
  return ((const struct s4k_fault *) s)->info;
}

static void
fault_store_stop (struct s4k_store *s)
{
  struct s4k_fault *f = (struct s4k_fault *) s;
  if (f->inner->ops->stop)
    f->inner->ops->stop (f->inner);
}

static void
fault_close (struct s4k_store *s)
{
  struct s4k_fault *f = (struct s4k_fault *) s;
  control_close (f->control);   /* open if the layer failed to start */
  /* A clean shutdown is not a power cut: the cache is written back. */
  int r = fault_flush_locked (f);
  if (f->dirty_sectors)
    fprintf (stderr, "sect4k: writing the write cache back at close: %s: "
             "%" PRIu64 " dirty bytes lost\n", s4k_strerror (-r),
             f->dirty_bytes);
  f->inner->ops->close (f->inner);
  free (f->bad.r);
  free (f->bucket);
  free (f->dwp);
  free (f->hw);
  free (f->mwp);
  free (f->pub);
  pthread_mutex_destroy (&f->m);
  free (f);
}

static const struct s4k_store_ops fault_ops = {
  .name = "faults",
  .read = fault_read,
  .write = fault_write,
  .write_atomic = fault_write_atomic,
  .zero = fault_zero,
  .trim = fault_trim,
  .flush = fault_flush,
  .extents = fault_extents,
  .can_fast_zero = fault_can_fast_zero,
  .readonly = fault_readonly,
  .info = fault_info,
  .close = fault_close,
  .stop = fault_store_stop,
};

/* ---- lifecycle --------------------------------------------------------- */

static int
add_lbas (void *opaque, uint64_t first, uint64_t last)
{
  struct s4k_fault *f = opaque;
  const uint64_t lbas = f->g.size / f->g.logical;
  if (last >= lbas)
    return -ERANGE;
  return fault_bad_add (&f->bad, sector_of (f, first * f->g.logical),
                        sector_of (f, last * f->g.logical));
}

struct s4k_store *
fault_wrap (struct s4k_store *inner, const struct s4k_config *c,
            struct s4k_fault **fault, char *err, size_t errlen)
{
  struct s4k_fault *f = calloc (1, sizeof *f);
  if (!f) {
    snprintf (err, errlen, "out of memory");
    inner->ops->close (inner);
    return NULL;
  }
  f->base.ops = &fault_ops;
  f->base.async = false;        /* the synchronous calls, from any loop */
  /* Neither lockfree_reads nor partial_writes: a torn write needs the
   * whole sector the engine read, merged and writes back. */
  f->inner = inner;
  snprintf (f->info, sizeof f->info, "%s%s",
            inner->ops->info ? inner->ops->info (inner) : inner->ops->name,
            inner->partial_writes ? " (under the fault layer: whole-sector "
            "RMW, no partial writes)" : "");
  f->g = c->geom;
  f->cfg = c->fault;
  pthread_mutex_init (&f->m, NULL);
  uint64_t sectors = f->cfg.write_cache_size / f->g.physical + 1;
  f->bucket_bits = 10;
  while (f->bucket_bits < 22 && (1ULL << f->bucket_bits) < sectors)
    f->bucket_bits++;
  f->seed = f->cfg.have_seed ? f->cfg.seed
            : (uint64_t) time (NULL) ^ ((uint64_t) getpid () << 32);
  /* splitmix64 of the seed: xorshift must not start at 0. */
  uint64_t z = f->seed + 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  f->prng = (z ^ (z >> 31)) | 1;
  int r = 0;
  if (!(f->bucket = calloc (1ULL << f->bucket_bits, sizeof *f->bucket))) {
    snprintf (err, errlen, "out of memory");
    r = -1;
  }
  else if (f->cfg.bad_sectors &&
           (r = s4k_parse_lba_list (f->cfg.bad_sectors, add_lbas, f)) != 0)
    snprintf (err, errlen, "bad-sectors=%s: %s", f->cfg.bad_sectors,
              r == -ERANGE ? "an LBA is beyond the end of the device"
                           : "out of memory");
  if (r == 0 && f->cfg.control &&
      !(f->control = control_open (f->cfg.control, err, errlen)))
    r = -1;
  if (r) {
    fault_close (&f->base);
    return NULL;
  }
  *fault = f;
  return &f->base;
}

void
fault_start (struct s4k_fault *f, struct s4k_dev *d)
{
  if (f->control)
    control_start (f->control, d);
}

void
fault_stop (struct s4k_fault *f)
{
  control_close (f->control);
  f->control = NULL;
}

void
fault_set_logical (struct s4k_fault *f, uint32_t logical)
{
  /* Under the layer's lock, as the control socket's LBA commands and the
   * torn-write plans read it. */
  pthread_mutex_lock (&f->m);
  f->g.logical = logical;
  pthread_mutex_unlock (&f->m);
}

/* ---- run time ---------------------------------------------------------- */

void
s4k_dev_fault_status (struct s4k_dev *d, FILE *fp)
{
  struct s4k_fault *f = dev_fault (d);
  char desc[256];
  s4k_dev_describe (d, desc, sizeof desc);
  fprintf (fp, "geometry=%s\nsize=%" PRIu64 "\n", desc,
           s4k_dev_geometry (d)->size);
  if (!f)
    return;
  pthread_mutex_lock (&f->m);
  uint64_t bad = 0;
  for (size_t i = 0; i < f->bad.n; i++)
    bad += f->bad.r[i].last - f->bad.r[i].first + 1;
  fprintf (fp, "write-cache=%s\nwrite-cache-size=%" PRIu64
           "\ndirty-bytes=%" PRIu64 "\ndirty-sectors=%" PRIu64
           "\nbad-sectors=%" PRIu64 "\ntorn=%s\nseed=%" PRIu64
           "\npower-cuts=%u\n",
           f->cfg.write_cache ? "true" : "false", f->cfg.write_cache_size,
           f->dirty_bytes, f->dirty_sectors, bad,
           fault_torn_names[f->cfg.torn], f->seed, atomic_load (&f->cuts));
  pthread_mutex_unlock (&f->m);
}
