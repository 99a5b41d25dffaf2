/* SPDX-License-Identifier: BSD-3-Clause */
/* The device's synchronous driver (s4k_read..., the plugin): the plan
 * run to its end with the store's synchronous calls, the fast paths of
 * whole sectors that need no plan, extents. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/uio.h>

#include "dev_plan.h"
#include "zone/zone_fast.h"

/* ---- per-thread bounce buffer for RMW sectors ------------------------- */

static pthread_key_t bounce_key;
static pthread_once_t bounce_once = PTHREAD_ONCE_INIT;
/* initial-exec: no __tls_get_addr call on the data path of a plugin. */
#define S4K_TLS _Thread_local __attribute__ ((tls_model ("initial-exec")))
static S4K_TLS struct { char *buf; size_t len; } tl_bounce;

static void
bounce_free (void *p)
{
  free (p);
}
static void
bounce_init (void)
{
  pthread_key_create (&bounce_key, bounce_free);
}

/* Room for a head and a tail sector; freed when the thread exits. */
static char *
bounce (size_t len)
{
  if (tl_bounce.len < len) {
    pthread_once (&bounce_once, bounce_init);
    char *p = realloc (tl_bounce.buf, len);
    if (!p)
      return NULL;
    tl_bounce.buf = p;
    tl_bounce.len = len;
    pthread_setspecific (bounce_key, p);
  }
  return tl_bounce.buf;
}

/* ---- the synchronous driver ------------------------------------------- */

/* at: where the request went (an append's write pointer), or NULL. */
S4K_INLINE int
sync_request_at (struct s4k_dev *d, enum s4k_op op, void *buf, uint64_t len,
                 uint64_t off, unsigned flags, uint64_t *at)
{
  struct request q;
  struct s4k_store_req sq;
  int r = begin (d, &q, op, buf, len, off, flags);
  if (at)
    *at = q.off;
  if (r == 0 && needs_cut (&q) &&
      !(q.cut = bounce (2 * (size_t) d->g.physical)))
    r = -ENOMEM;
  if (r) {
    zone_undo (d, &q, r);
    return counted (d, op, len, off, r == 1 ? 0 : r, q.t);
  }
  return run (d, &q, &sq, NULL, ST_START, 0);
}

S4K_INLINE int
sync_request (struct s4k_dev *d, enum s4k_op op, void *buf, uint64_t len,
              uint64_t off, unsigned flags)
{
  return sync_request_at (d, op, buf, len, off, flags, NULL);
}

/* True for a read or write of whole physical sectors inside the device,
 * no longer than the maximum, with no statistics to keep: nothing to
 * refuse, no cut sector, so no plan (a shift and a mask).  The sectors
 * are [*first, *last]. */
S4K_INLINE bool
whole_sectors (const struct s4k_dev *d, uint64_t max, uint64_t len,
               uint64_t off, uint64_t *first, uint64_t *last)
{
  if (len - 1 >= max ||
      (((off + d->shift) | len) & d->pmask) ||
      off > d->g.size || len > d->g.size - off)
    return false;
  *first = (off + d->shift) >> d->pbits;
  *last = *first + ((len - 1) >> d->pbits);
  return true;
}

/* The plans of reads and writes, out of line so that the fast paths
 * below stay small. */
static __attribute__ ((noinline)) int
planned_read (struct s4k_dev *d, void *buf, uint64_t len, uint64_t off)
{
  return sync_request (d, S4K_OP_READ, buf, len, off, 0);
}

/* A zoned device's read (s4k_read): one of whole sectors in one zone
 * that is not offline (the zone check without the lock) is read as
 * s4k_read's fast path reads; the rest are planned.  Out of line, so
 * that neither the conventional fast reads nor (in planned_read) the
 * plan's frame cost it anything. */
static __attribute__ ((noinline)) int
zoned_read (struct s4k_dev *d, void *buf, uint64_t len, uint64_t off)
{
  uint64_t first, last;
  if (whole_sectors (d, d->fast_zoned_read_max, len, off, &first, &last) &&
      s4k_zones_read_fast (d->zones, off, len)) {
    struct s4k_io io = { buf, len, off };
    return d->store->ops->read (d->store, &io, 1);
  }
  return planned_read (d, buf, len, off);
}

static __attribute__ ((noinline)) int
planned_write (struct s4k_dev *d, const void *buf, uint64_t len, uint64_t off,
               unsigned flags)
{
  return sync_request (d, S4K_OP_WRITE, (void *) buf, len, off, flags);
}

/* A zoned device's write on the fast path failed in the store: the
 * pointer goes back before the sectors are unlocked (as zone_undo).  Out of line,
 * from the request itself, so that the fast path keeps no more than it
 * needs across the store's call. */
static __attribute__ ((noinline, cold)) void
zoned_fast_failed (struct s4k_dev *d, const struct s4k_io *io)
{
  s4k_zones_rewind (d->zones, io->off >> d->lbits, io->len >> d->lbits);
}

/* The fast path's write of whole sectors [first, last], under their
 * locks (zoned: of a zoned device, whose pointer has moved). */
S4K_INLINE int
locked_write (struct s4k_dev *d, const struct s4k_io *io, uint64_t first,
              uint64_t last, unsigned flags, bool zoned)
{
  s4k_lock (d->locks, first, last, false);
  int r = d->store->ops->write (d->store, io, 1, flags & S4K_FUA);
  /* The pointer goes back before the sectors are unlocked (as
   * zone_undo). */
  if (zoned && __builtin_expect (r < 0, 0))
    zoned_fast_failed (d, io);
  s4k_unlock (d->locks, first, last, false);
  return r;
}

/* A zoned device's write of whole sectors [first, last] that the zone
 * check without the lock did not take (s4k_write): what the plan does
 * for it, minus the planning (begin, run, finish of a write that cuts no
 * sector, with no statistics, no write log and no atomic layer: a zoned
 * device has a fast path only without them).  The zone check moves the
 * write pointer (as zone_admit: under the zone lock, before the sector
 * lock, its record on file with file=, and with FUA synced), the store
 * writes (the fault layer, if any, is the store: it sees the write as
 * from the plan), and a failed write moves the pointer back before the
 * sectors are unlocked (locked_write, as zone_undo in finish). */
static __attribute__ ((noinline)) int
zoned_write (struct s4k_dev *d, const void *buf, uint64_t len, uint64_t off,
             unsigned flags, uint64_t first, uint64_t last)
{
  /* zone_admit's write, with no op or flag left to test. */
  const uint64_t lba = off >> d->lbits, n = len >> d->lbits;
  int r = s4k_zones_write (d->zones, lba, n);
  if (__builtin_expect (r != 0, 0))
    return s4k_zone_errno (-r);
  if (__builtin_expect ((flags & S4K_FUA) && d->zmap, 0) &&
      (r = dev_zones_file_sync (d, lba))) {
    s4k_zones_rewind (d->zones, lba, n);
    return r;
  }
  const struct s4k_io io = { (void *) buf, len, off };
  return locked_write (d, &io, first, last, flags, true);
}

int
s4k_read (struct s4k_dev *d, void *buf, uint64_t len, uint64_t off)
{
  uint64_t first, last;
  if (d->lockfree_reads &&
      whole_sectors (d, d->fast_max, len, off, &first, &last)) {
    struct s4k_io io = { buf, len, off };
    return d->store->ops->read (d->store, &io, 1);
  }
  if (__builtin_expect (d->zones != NULL, 0))
    return zoned_read (d, buf, len, off);
  return planned_read (d, buf, len, off);
}

/* s4k_read_iov with a plan: checks, statistics. */
static __attribute__ ((noinline)) int
planned_read_iov (struct s4k_dev *d, uint64_t len, uint64_t off,
                  struct iovec *iov, unsigned max)
{
  struct span s;
  struct tally t = { 0 };
  int r = plan (d, S4K_OP_READ, len, off, 0, &s, &t);
  if (r == 0 && __builtin_expect (d->zones != NULL, 0) &&
      (r = s4k_zones_read (d->zones, off >> d->lbits, len >> d->lbits)))
    r = s4k_zone_errno (-r);
  if (r == 1)
    r = 0;                      /* nothing to read: no pieces */
  else if (r == 0 &&
           (r = d->store->ops->read_iov (d->store, len, off, iov, max))
           == -ENOBUFS)
    return r;                   /* not counted: the caller reads instead */
  counted (d, S4K_OP_READ, len, off, r < 0 ? r : 0, t);
  return r;
}

/* Only for stores whose reads take no lock (read_iov implies
 * lockfree_reads): a reference is handed out with no lock held, so it
 * is the same as a lock-free read, whose copy the kernel does later. */
int
s4k_read_iov (struct s4k_dev *d, uint64_t len, uint64_t off,
              struct iovec *iov, unsigned max)
{
  uint64_t first, last;
  /* A reference cannot vouch for an atomic write across chunks: with
   * atomic writes, a read beyond one physical sector is copied. */
  if (!d->store->ops->read_iov ||
      (d->atomic.max && len &&
       s4k_sector_index (&d->g, off) !=
       s4k_sector_index (&d->g, off + len - 1)))
    return -ENOTSUP;
  if (whole_sectors (d, d->fast_max, len, off, &first, &last))
    return d->store->ops->read_iov (d->store, len, off, iov, max);
  return planned_read_iov (d, len, off, iov, max);
}

int
s4k_read_piece (struct s4k_dev *d, void *buf, uint64_t len, uint64_t off)
{
  struct s4k_io io = { buf, len, off };
  if (!d->lockfree_reads || d->zones)
    return -ENOTSUP;
  return d->store->ops->read (d->store, &io, 1);
}

int
s4k_write (struct s4k_dev *d, const void *buf, uint64_t len, uint64_t off,
           unsigned flags)
{
  uint64_t first, last;
  if (!(flags & (S4K_ATOMIC | S4K_ZONE_RAW)) &&
      whole_sectors (d, d->fast_write_max, len, off, &first, &last)) {
    struct s4k_io io = { (void *) buf, len, off };
    if (__builtin_expect (d->zones == NULL, 1))
      return locked_write (d, &io, first, last, flags, false);
    /* A zoned device's common write moves its zone's pointer without
     * the zone lock (an armed zone: open, host-managed, no file=, so no
     * record to keep and no FUA to sync); zoned_write does the others. */
    if (!s4k_zones_write_fast (d->zones, off, len))
      return zoned_write (d, buf, len, off, flags, first, last);
    return locked_write (d, &io, first, last, flags, true);
  }
  return planned_write (d, buf, len, off, flags);
}

int
s4k_zero (struct s4k_dev *d, uint64_t len, uint64_t off, unsigned flags)
{
  return sync_request (d, S4K_OP_ZERO, NULL, len, off, flags);
}

int
s4k_trim (struct s4k_dev *d, uint64_t len, uint64_t off, unsigned flags)
{
  return sync_request (d, S4K_OP_TRIM, NULL, len, off, flags);
}

int
s4k_flush (struct s4k_dev *d)
{
  return sync_request (d, S4K_OP_FLUSH, NULL, 0, 0, 0);
}

int
s4k_cache (struct s4k_dev *d, uint64_t len, uint64_t off)
{
  /* Nothing to prefetch from memory; a file store reads ahead itself. */
  return counted (d, S4K_OP_CACHE, len, off,
                  check_request (d, S4K_OP_CACHE, len, off),
                  (struct tally) { 0 });
}

static int
extents_op (struct s4k_dev *d, uint64_t len, uint64_t off,
            s4k_extent_fn *fn, void *opaque)
{
  struct extent_clip c;
  struct s4k_io range;
  int r = extents_plan (d, len, off, fn, opaque, &c, &range);
  if (r)
    return r == 1 ? 0 : r;
  return d->store->ops->extents (d->store, range.len, range.off,
                                 clip_extent, &c);
}

int
s4k_extents (struct s4k_dev *d, uint64_t len, uint64_t off,
             s4k_extent_fn *fn, void *opaque)
{
  return counted (d, S4K_OP_EXTENTS, len, off,
                  extents_op (d, len, off, fn, opaque), (struct tally) { 0 });
}

/* ---- zones (zoned=) ----------------------------------------------------- */

/* The write cache's data of one zone, or of all, made durable, and the
 * zone's write pointer with it. */
static int
zone_sync (struct s4k_dev *d, enum s4k_zone_op op, uint64_t zone_lba,
           bool all)
{
  struct s4k_zones_info zi;
  s4k_zones_info (d->zones, &zi);
  const bool pointer = op != S4K_ZOP_CLOSE;
  if (all)
    return fault_zone_sync (d->fault, d->g.size, 0, pointer);
  const uint64_t start = zone_lba << d->lbits;
  const uint64_t len = zi.zone_lbas << d->lbits;
  return fault_zone_sync (d->fault, len < d->g.size - start
                                    ? len : d->g.size - start, start,
                          pointer);
}

int
s4k_dev_zone_append (struct s4k_dev *d, const void *buf, uint64_t len,
                     uint64_t *off, unsigned flags)
{
  if (!d->zones)
    return -EINVAL;
  return sync_request_at (d, S4K_OP_WRITE, (void *) buf, len, *off,
                          (flags & ~S4K_ZONE_RAW) | S4K_ZONE_APPEND, off);
}

int
s4k_dev_zone_op (struct s4k_dev *d, enum s4k_zone_op op, uint64_t zone_lba,
                 bool all)
{
  if (!d->zones)
    return -EINVAL;
  if (op != S4K_ZOP_RESET) {
    int r = s4k_zones_op (d->zones, op, zone_lba, all);
    if (r)
      return s4k_zone_errno (-r);
    if (d->wlog)
      r = s4k_wlog_zone_op (d->wlog, op, zone_lba, all);
    /* CLOSE and FINISH make the zone's write pointer durable (ZBC keeps
     * closed and full zones across a power loss, not open ones): its
     * cached writes first. */
    if (r == 0 && d->fault && (op == S4K_ZOP_CLOSE || op == S4K_ZOP_FINISH))
      r = zone_sync (d, op, zone_lba, all);
    return r;
  }
  /* The zones written before the reset, whose data it discards: one,
   * or every one a report lists (the model says which zones RESET ALL
   * applies to; those it skips, read only and offline, are left). */
  struct s4k_zones_info zi;
  s4k_zones_info (d->zones, &zi);
  const uint32_t max = all ? zi.nr_zones : 1;
  struct s4k_zone_desc one, *desc = all ? calloc (max, sizeof *desc) : &one;
  if (!desc)
    return -ENOMEM;
  uint64_t listed;
  int n = s4k_zones_report (d->zones, all ? 0 : zone_lba, 0, true, desc, max,
                            &listed);
  int r = n < 0 ? n : s4k_zones_op (d->zones, op, zone_lba, all);
  if (r)
    r = s4k_zone_errno (-r);
  /* Logged before its zeroes: a reader knows the zones it empties
   * (docs/write-log.md "Zones").  The zones are reset: their data goes
   * even if the log failed. */
  const int lr = r == 0 && d->wlog ? s4k_wlog_zone_op (d->wlog, op, zone_lba,
                                                       all) : 0;
  for (int i = 0; r == 0 && i < n; i++) {
    const struct s4k_zone_desc *z = &desc[i];
    if (z->type == S4K_ZT_CONVENTIONAL || z->wp == UINT64_MAX ||
        z->wp <= z->start || (!all && z->start != zone_lba))
      continue;
    /* Not S4K_MAY_TRIM: the zone is rewritten next, so the store keeps
     * its space (the memory store its pages, a file its blocks). */
    r = sync_request (d, S4K_OP_ZERO, NULL, (z->wp - z->start) << d->lbits,
                      z->start << d->lbits, S4K_ZONE_RAW);
  }
  if (all)
    free (desc);
  /* A reset is durable at once: its zeroes were written through, and
   * the pointer at the start with them. */
  if (r == 0 && d->fault)
    r = zone_sync (d, op, zone_lba, all);
  return r ? r : lr;
}
