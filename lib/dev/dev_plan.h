/* SPDX-License-Identifier: BSD-3-Clause */
/* The plan every request runs, shared by the synchronous driver
 * (dev_sync.c) and the asynchronous one (dev_aio.c): checks, the span of
 * sectors, the stages and run(), the write log's entry of a request.  In
 * a header so that each driver has it in its own file as before (the
 * synchronous calls fold it into straight code, and the write log's
 * cold call stays a static one): include it from those two files only. */
#ifndef S4K_DEV_PLAN_H
#define S4K_DEV_PLAN_H

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dev_priv.h"
#include "fault/fault.h"
#include "zone/zone_fast.h"

/* 0, or the errno a request outside the device or refused by strict mode
 * gets: past the end, ENOSPC for writes and zeroes, EINVAL for the rest
 * (trims too), as the NBD spec asks. */
static int
check_request (const struct s4k_dev *d, enum s4k_op op, uint64_t len,
               uint64_t off)
{
  if (off > d->g.size || len > d->g.size - off)
    return op == S4K_OP_WRITE || op == S4K_OP_ZERO ? -ENOSPC : -EINVAL;
  if (s4k_refused (d, op, len, off))
    return -EINVAL;
  return 0;
}

/* The physical sectors a request touches and whether its ends cut into
 * them. */
struct span {
  uint64_t first, last;                 /* sector indexes */
  uint64_t head_start, head_end;        /* sector `first` */
  uint64_t tail_start, tail_end;        /* sector `last` */
  bool head_cut, tail_cut;              /* the request covers part only */
  uint64_t mid_start, mid_end;          /* the whole sectors between */
  uint64_t lock_first, lock_last;       /* the sectors the request locks */
};

/* Filled in place rather than returned by value. */
S4K_INLINE void
span_of (const struct s4k_dev *d, uint64_t len, uint64_t off, struct span *s)
{
  const uint64_t end = off + len;
  s->first = s4k_sector_index (&d->g, off);
  s->last = s4k_sector_index (&d->g, end - 1);
  s4k_sector_range (&d->g, s->first, &s->head_start, &s->head_end);
  s4k_sector_range (&d->g, s->last, &s->tail_start, &s->tail_end);
  s->head_cut = off != s->head_start ||
                (s->first == s->last && end != s->head_end);
  s->tail_cut = s->first != s->last && end != s->tail_end;
  s->mid_start = s->head_cut ? s->head_end : off;
  s->mid_end = s->tail_cut ? s->tail_start : end;
  if (s->mid_end < s->mid_start)        /* one cut sector, nothing whole */
    s->mid_end = s->mid_start;
}

static void
debug_rmw (struct s4k_dev *d, const char *op, uint64_t len, uint64_t off,
           uint64_t sector, uint64_t start, uint64_t end)
{
  char msg[256];
  snprintf (msg, sizeof msg, "rmw: %s offset %" PRIu64 " length %" PRIu64
            ": physical sector %" PRIu64 " [%" PRIu64 ", %" PRIu64 ")",
            op, off, len, sector, start, end);
  d->debug_fn (d->debug_opaque, msg);
}

/* ---- one plan for every request --------------------------------------- */

/* Records how a request sits on the sectors, for the statistics. */
static void
place (struct tally *t, const struct span *s)
{
  t->placed = true;
  t->cut = s->head_cut || s->tail_cut;
  t->sectors = s->last - s->first + 1;
}

/* Checks a request and works out the physical sectors it touches and
 * locks (*s).  Returns 0 to go on, 1 if there is nothing to do, or the
 * -errno the request fails with. */
S4K_INLINE int
plan (const struct s4k_dev *d, enum s4k_op op, uint64_t len, uint64_t off,
      unsigned flags, struct span *s, struct tally *t)
{
  int r = check_request (d, op, len, off);
  if (r || len == 0)
    return r ? r : 1;
  if (op == S4K_OP_ZERO && (flags & S4K_FAST_ZERO) &&
      !s4k_dev_can_fast_zero (d))
    return -ENOTSUP;
  /* A drive refuses a write marked atomic that it cannot do whole. */
  if (op == S4K_OP_WRITE && (flags & S4K_ATOMIC) &&
      !s4k_atomic_allowed (&d->atomic, len, off))
    return -EINVAL;
  span_of (d, len, off, s);
  place (t, s);
  s->lock_first = s->first;
  s->lock_last = s->last;
  if (op == S4K_OP_TRIM) {
    /* Trim frees whole physical sectors only: a cut sector at either end
     * is left as it is (a drive cannot unmap part of a sector either). */
    if (s->mid_start == s->mid_end)
      return 1;
    s->lock_first += s->head_cut;
    s->lock_last -= s->tail_cut;
  }
  return 0;
}

/* Every read, write, zero, trim and flush runs the one plan in run(), in
 * this order, each stage skipped when it has nothing to do:
 *
 *   lock    the sectors touched (shared for a read; a trim: the whole ones)
 *   read    a read's sectors; a write's or zero's cut sectors (the R of RMW)
 *   merge   the new bytes, or zeroes, into the cut sectors (the M)
 *   zero    a zero's whole sectors, and cut ones it left all zero
 *   write   a write's whole sectors and the merged cut sectors (the W); a
 *           write over a store with partial_writes skips read and merge
 *           and is sent as it is, the store merging it (one call)
 *   trim    the whole sectors
 *   flush
 *   unlock, and a read's cut bytes to the caller
 *
 * Each stage's store I/O is a struct s4k_store_req.  Two drivers run the
 * plan: the synchronous calls (s4k_read..., the plugin) pass it to the
 * store's synchronous functions and sleep on locks; the asynchronous ones
 * (s4k_aio_..., the server with the file store) submit it to the loop's
 * ring, return, and come back into run() at the stage that waited, with
 * its result.  A stage that waits is recorded in the request's `stage`. */
enum stage {
  ST_START, ST_LOCK, ST_READ, ST_ZERO, ST_WRITE, ST_TRIM, ST_FLUSH,
  ST_EXTENTS                    /* s4k_aio_extents: its one stage */
};

/* A request on its way through the stages. */
struct request {
  enum s4k_op op;
  enum stage stage;             /* the one waited for */
  char *buf;                    /* a read's destination, a write's data */
  uint64_t len, off;
  unsigned flags;
  bool locked;
  bool head_zero, tail_zero;    /* a zero left the cut sector all zero */
  bool partial;                 /* a write that cuts sectors, sent as it
                                   is: the store merges it */
  bool exact;                   /* a read of just its bytes, no lock */
  bool zoned;                   /* a write or zero the zones accepted:
                                   its write pointer moves back if it
                                   fails */
  char *cut;                    /* 2P: the head sector, then the tail */
  struct span s;
  struct tally t;
};

S4K_INLINE bool
cuts (const struct request *q)
{
  return q->s.head_cut || q->s.tail_cut;
}

/* The read stage: the cut sectors into cut (the store reads whole
 * sectors only) and, for a read, the whole ones straight into its
 * buffer.  Returns how many pieces. */
S4K_INLINE unsigned
list_reads (const struct s4k_dev *d, struct request *q, struct s4k_io *io)
{
  const struct span *s = &q->s;
  unsigned n = 0;
  if (q->exact) {
    io[n++] = (struct s4k_io) { q->buf, q->len, q->off };
    return n;
  }
  if (s->head_cut)
    io[n++] = (struct s4k_io) { q->cut, s->head_end - s->head_start,
                                s->head_start };
  if (q->op == S4K_OP_READ && s->mid_start < s->mid_end)
    io[n++] = (struct s4k_io) { q->buf + (s->mid_start - q->off),
                                s->mid_end - s->mid_start, s->mid_start };
  if (s->tail_cut)
    io[n++] = (struct s4k_io) { q->cut + d->g.physical,
                                s->tail_end - s->tail_start, s->tail_start };
  if (q->op != S4K_OP_READ) {
    q->t.rmw_sectors = n;
    for (unsigned i = 0; i < n; i++)
      q->t.rmw_read_bytes += io[i].len;
  }
  return n;
}

static bool
all_zero (const char *p, size_t len)
{
  for (size_t i = 0; i < len; i++)
    if (p[i])
      return false;
  return true;
}

/* The merge stage: the write's data (or zeroes) into the cut sectors.  A
 * cut sector that a zero leaves all zero is zeroed by the store instead
 * of written, so zeroing keeps the store sparse. */
S4K_INLINE void
merge (struct s4k_dev *d, struct request *q)
{
  const struct span *s = &q->s;
  const char *data = q->op == S4K_OP_WRITE ? q->buf : NULL;
  const char *name = data ? "write" : "zero";
  const uint64_t off = q->off, end = off + q->len;
  if (s->head_cut) {
    char *head = q->cut;
    uint64_t e = end < s->head_end ? end : s->head_end;
    if (data)
      memcpy (head + (off - s->head_start), data, e - off);
    else {
      memset (head + (off - s->head_start), 0, e - off);
      q->head_zero = all_zero (head, s->head_end - s->head_start);
    }
    if (d->debug_mask & S4K_DEBUG_RMW)
      debug_rmw (d, name, q->len, off, s->first, s->head_start, s->head_end);
  }
  if (s->tail_cut) {
    char *tail = q->cut + d->g.physical;
    if (data)
      memcpy (tail, data + (s->tail_start - off), end - s->tail_start);
    else {
      memset (tail, 0, end - s->tail_start);
      q->tail_zero = all_zero (tail, s->tail_end - s->tail_start);
    }
    if (d->debug_mask & S4K_DEBUG_RMW)
      debug_rmw (d, name, q->len, off, s->last, s->tail_start, s->tail_end);
  }
}

/* The drive's read-modify-write of one cut sector [start, end), in the
 * statistics and the debug log, for a write the store merges. */
S4K_INLINE void
tally_cut (struct s4k_dev *d, struct request *q, uint64_t sector,
           uint64_t start, uint64_t end)
{
  q->t.rmw_sectors++;
  q->t.rmw_read_bytes += end - start;
  q->t.store_write_bytes += end - start;
  if (d->debug_mask & S4K_DEBUG_RMW)
    debug_rmw (d, "write", q->len, q->off, sector, start, end);
}

/* A write that cuts sectors, for a store with partial_writes: nothing
 * to read or merge here, the store merges it.  The statistics and the
 * debug log count the drive's read-modify-write all the same (they
 * describe the emulated drive, whatever the store does). */
S4K_INLINE void
partial_write (struct s4k_dev *d, struct request *q)
{
  const struct span *s = &q->s;
  if (s->head_cut)
    tally_cut (d, q, s->first, s->head_start, s->head_end);
  if (s->tail_cut)
    tally_cut (d, q, s->last, s->tail_start, s->tail_end);
  q->t.store_write_bytes += s->mid_end - s->mid_start;
}

/* The write stage: the merged cut sectors a zero did not leave all zero,
 * and a write's whole sectors straight from its buffer (for a write of
 * whole sectors, or a partial one, its buffer as it is).  Returns how
 * many pieces. */
S4K_INLINE unsigned
list_writes (const struct s4k_dev *d, struct request *q, struct s4k_io *io)
{
  const struct span *s = &q->s;
  unsigned n = 0;
  if (q->partial) {
    io[0] = (struct s4k_io) { q->buf, q->len, q->off };
    return 1;                   /* counted by partial_write */
  }
  if (s->head_cut && !q->head_zero)
    io[n++] = (struct s4k_io) { q->cut, s->head_end - s->head_start,
                                s->head_start };
  if (q->op == S4K_OP_WRITE && s->mid_start < s->mid_end)
    io[n++] = (struct s4k_io) { q->buf + (s->mid_start - q->off),
                                s->mid_end - s->mid_start, s->mid_start };
  if (s->tail_cut && !q->tail_zero)
    io[n++] = (struct s4k_io) { q->cut + d->g.physical,
                                s->tail_end - s->tail_start, s->tail_start };
  for (unsigned i = 0; i < n; i++)
    q->t.store_write_bytes += io[i].len;
  return n;
}

/* Runs a store request with the store's synchronous functions. */
S4K_INLINE int
store_call (struct s4k_store *st, const struct s4k_store_req *sq)
{
  switch (sq->kind) {
  case S4K_REQ_READ:
    return st->ops->read (st, sq->io, sq->n);
  case S4K_REQ_WRITE:
    return st->ops->write (st, sq->io, sq->n, sq->fua);
  case S4K_REQ_ZERO:
    return st->ops->zero (st, sq->io[0].len, sq->io[0].off, sq->may_trim,
                          sq->fua);
  case S4K_REQ_TRIM:
    return st->ops->trim (st, sq->io[0].len, sq->io[0].off, sq->fua);
  default:
    return st->ops->flush (st);
  }
}

/* Counts a request that ended with r.  The tally is passed by value so
 * that a request on the stack never escapes (it stays in registers). */
S4K_INLINE int
counted (struct s4k_dev *d, enum s4k_op op, uint64_t len, uint64_t off,
         int r, struct tally t)
{
  if (d->counting)
    stats_count (&d->stats, &d->g, op, len, off, r,
                 r == -EINVAL && s4k_refused (d, op, len, off), &t);
  return r;
}

/* The zone hooks take values, never the request: a request whose
 * address reached an out-of-line call would live in memory on every
 * device's path (+30 instructions per RMW write, zoned or not;
 * make bench-engine's rmw512 row). */

/* Host-managed devices: a trim frees conventional zones only (a
 * sequential write required zone keeps its blocks mapped, as SBC allows
 * a device to: RESET WRITE POINTER discards them), so it is clipped to
 * them: the length it keeps.  A host-aware drive, which Linux uses as a
 * regular disk, trims anywhere (its write pointers are advisory). */
static __attribute__ ((noinline)) uint64_t
zone_clip_trim (const struct s4k_dev *d, uint64_t len, uint64_t off)
{
  struct s4k_zones_info zi;
  s4k_zones_info (d->zones, &zi);
  if (zi.model != S4K_ZONED_HOST_MANAGED)
    return len;
  const uint64_t conv_end = ((uint64_t) zi.conventional * zi.zone_lbas)
                            << d->lbits;
  if (off <= d->g.size && len <= d->g.size - off && off + len > conv_end)
    return off >= conv_end ? 0 : conv_end - off;
  return len;
}

/* The zone checks of a planned request (include/sect4k/zone.h): a
 * write or zero must pass them and moves the write pointer, under the
 * zone lock and before any sector lock; a read must not touch an
 * offline zone nor cross zone types.  0 or a zone error (s4k_zone_errno). */
static __attribute__ ((noinline)) int
zone_admit (struct s4k_dev *d, struct request *q, enum s4k_op op,
            uint64_t len, uint64_t off, unsigned flags)
{
  if (flags & S4K_ZONE_RAW)
    return 0;
  uint64_t lba = off >> d->lbits;
  const uint64_t n = len >> d->lbits;
  int r = 0;
  if (op == S4K_OP_READ) {
    /* The common read (one zone, not offline) without a call: the
     * asynchronous driver's reads all come this way. */
    if (!s4k_zones_read_fast (d->zones, off, len))
      r = s4k_zones_read (d->zones, lba, n);
  }
  else if (op == S4K_OP_WRITE && (flags & S4K_ZONE_APPEND)) {
    /* Planned at the zone's start; the zones give the write pointer,
     * and the plan is made again there. */
    if ((r = s4k_zones_append (d->zones, lba, n, &lba)) == 0) {
      q->off = lba << d->lbits;
      int e = plan (d, op, len, q->off, flags, &q->s, &q->t);
      if (e) {
        s4k_zones_rewind (d->zones, lba, n);
        return e == 1 ? 0 : e;
      }
    }
  }
  else if (op == S4K_OP_WRITE || op == S4K_OP_ZERO)
    r = s4k_zones_write (d->zones, lba, n);
  if (r == 0 && (op == S4K_OP_WRITE || op == S4K_OP_ZERO)) {
    /* FUA: its zone's record durable with the data (file=). */
    int e;
    if ((flags & S4K_FUA) && d->zmap && (e = dev_zones_file_sync (d, lba))) {
      s4k_zones_rewind (d->zones, lba, n);
      return e;
    }
  }
  return r ? s4k_zone_errno (-r) : 0;
}

/* A write or zero the zones accepted failed with r: its write pointer
 * back, if no later write moved it on. */
S4K_INLINE void
zone_undo (struct s4k_dev *d, struct request *q, int r)
{
  if (__builtin_expect (q->zoned, 0) && r < 0)
    s4k_zones_rewind (d->zones, q->off >> d->lbits, q->len >> d->lbits);
  q->zoned = false;
}

/* Fills in q and plans it: 0 to run its stages, 1 if there is nothing to
 * do, or the -errno it fails with. */
S4K_INLINE int
begin (struct s4k_dev *d, struct request *q, enum s4k_op op, void *buf,
       uint64_t len, uint64_t off, unsigned flags)
{
  q->op = op;
  q->stage = ST_START;
  q->buf = buf;
  q->len = len;
  q->off = off;
  q->flags = flags;
  q->locked = q->head_zero = q->tail_zero = q->partial = q->zoned = false;
  q->exact = op == S4K_OP_READ && d->lockfree_reads;
  q->cut = NULL;
  q->t = (struct tally) { 0 };
  if (op == S4K_OP_FLUSH)       /* the zone records too (file=) */
    return __builtin_expect (d->zmap != NULL, 0)
           ? dev_zones_file_sync (d, UINT64_MAX) : 0;
  if (__builtin_expect (d->zones != NULL, 0) && op == S4K_OP_TRIM)
    q->len = len = zone_clip_trim (d, len, off);
  int r = plan (d, op, len, off, flags, &q->s, &q->t);
  if (__builtin_expect (d->zones != NULL, 0) && r == 0) {
    r = zone_admit (d, q, op, len, off, flags);
    q->zoned = r == 0 && !(flags & S4K_ZONE_RAW) &&
               (op == S4K_OP_WRITE || op == S4K_OP_ZERO);
  }
  q->partial = op == S4K_OP_WRITE && d->partial_writes && r == 0 &&
               cuts (q);
  return r;
}

/* True if the device does the write q atomically: marked so (plan
 * refused it if it is not allowed, and nothing is without atomic
 * writes), or under implicit, it fits. */
S4K_INLINE bool
atomic_write (const struct s4k_dev *d, const struct request *q)
{
  return __builtin_expect (d->atomic.max != 0, 0) &&
         q->op == S4K_OP_WRITE &&
         ((q->flags & S4K_ATOMIC) ||
          (!d->atomic.explicit_only &&
           s4k_atomic_fits (&d->atomic, q->len, q->off)));
}

/* True if the request needs the cut-sector buffer (a trim leaves cut
 * sectors alone). */
S4K_INLINE bool
needs_cut (const struct request *q)
{
  return q->op != S4K_OP_TRIM && q->op != S4K_OP_FLUSH && !q->exact &&
         !q->partial && cuts (q);
}

/* ---- the write log (write-log=) ---------------------------------------- */

/* Bytes [pos, pos+n) of a cut sector as the request left it: the merged
 * head or tail sector, or (a write the store merged itself) read back. */
static int
cut_bytes (struct s4k_dev *d, const struct request *q, uint64_t pos,
           char *dst, uint64_t n)
{
  const struct span *s = &q->s;
  const bool head = pos < s->head_end;
  const uint64_t start = head ? s->head_start : s->tail_start;
  const uint64_t end = head ? s->head_end : s->tail_end;
  if (!q->partial) {
    memcpy (dst, q->cut + (head ? 0 : d->g.physical) + (pos - start), n);
    return 0;
  }
  char *sector = malloc (end - start);
  if (!sector)
    return -ENOMEM;
  struct s4k_io io = { sector, end - start, start };
  int r = d->store->ops->read (d->store, &io, 1);
  if (r == 0)
    memcpy (dst, sector + (pos - start), n);
  free (sector);
  return r;
}

/* The entry of a write, zero or trim that completed: what the device
 * holds in the logical sectors the request changed (only a request off
 * logical sectors, strict=false, has bytes around it to add: as they now
 * stand, after the RMW); a trim: the whole sectors it freed.  Logical
 * sectors are the log's unit (its sectorsize), as in dm-log-writes. */
static __attribute__ ((noinline, cold)) int
wlog_request (struct s4k_dev *d, const struct request *q)
{
  const uint64_t fua = q->flags & S4K_FUA ? S4K_WLOG_FUA : 0;
  if (q->op == S4K_OP_TRIM)
    return s4k_wlog_append (d->wlog, S4K_WLOG_DISCARD | fua, q->s.mid_start,
                            q->s.mid_end - q->s.mid_start, NULL);
  const uint64_t flags = fua | (q->op == S4K_OP_ZERO ? S4K_WLOG_ZERO : 0) |
                         (atomic_write (d, q) ? S4K_WLOG_ATOMIC : 0);
  const uint64_t lmask = d->g.logical - 1;
  const uint64_t off = q->off, end = off + q->len;
  const uint64_t start = off & ~lmask, stop = (end + lmask) & ~lmask;
  if (start == off && stop == end)
    return s4k_wlog_append (d->wlog, flags, off, q->len, q->buf);
  char *buf = calloc (1, stop - start);
  if (!buf)
    return -ENOMEM;
  int r = 0;
  if (q->buf)
    memcpy (buf + (off - start), q->buf, q->len);
  if (start < off)
    r = cut_bytes (d, q, start, buf, off - start);
  if (r == 0 && end < stop)
    r = cut_bytes (d, q, end, buf + (end - start), stop - end);
  if (r == 0)
    r = s4k_wlog_append (d->wlog, flags, start, stop - start, buf);
  free (buf);
  return r;
}

/* The request is over with r: log it (still under its sector locks, so
 * that requests sharing a physical sector are logged in the order the
 * store applied them), unlock, hand over a read's cut bytes, count it. */
S4K_INLINE int
finish (struct s4k_dev *d, struct request *q, int r)
{
  const struct span *s = &q->s;
  /* Only what changes the device: block status (the upstream store's
   * asynchronous extents) ends here too. */
  if (__builtin_expect (d->wlog != NULL, 0) && r == 0 &&
      (q->op == S4K_OP_WRITE || q->op == S4K_OP_ZERO ||
       q->op == S4K_OP_TRIM))
    r = wlog_request (d, q);
  zone_undo (d, q, r);
  if (q->locked) {
    s4k_unlock (d->locks, s->lock_first, s->lock_last, q->op == S4K_OP_READ);
    q->locked = false;
  }
  if (r == 0 && q->op == S4K_OP_READ && !q->exact) {
    const uint64_t off = q->off, end = off + q->len;
    if (s->head_cut) {
      uint64_t e = end < s->head_end ? end : s->head_end;
      memcpy (q->buf, q->cut + (off - s->head_start), e - off);
    }
    if (s->tail_cut)
      memcpy (q->buf + (s->tail_start - off), q->cut + d->g.physical,
              end - s->tail_start);
  }
  return counted (d, q->op, q->len, q->off, r, q->t);
}

/* Hands a stage's store request to the store: to its synchronous
 * functions (w NULL), or to its submit.  Returns 1 if it is in flight,
 * else its result. */
S4K_INLINE int
issue (struct s4k_dev *d, struct s4k_store_req *sq, struct s4k_lock_waiter *w)
{
  return w ? d->store->ops->submit (d->store, sq) : store_call (d->store, sq);
}

/* The plan, from stage `from` (ST_START for a new request) whose result
 * is r.  Synchronous (w NULL): runs the request to its end.
 * Asynchronous (w the request's lock waiter): returns 1 when a stage must
 * be waited for, and is called again with that stage and its result;
 * else the result. */
S4K_INLINE int
run (struct s4k_dev *d, struct request *q, struct s4k_store_req *sq,
     struct s4k_lock_waiter *w, enum stage from, int r)
{
  const struct span *s = &q->s;
  const bool fua = q->flags & S4K_FUA;

  switch (from) {
  case ST_START:
    break;
  case ST_LOCK:                 /* woken: try again */
    goto lock;
  case ST_READ:
    goto read_done;
  case ST_ZERO:
    goto zero_done;
  default:                      /* write, trim, flush, extents: the last
                                   stage */
    goto done;
  }

  if (q->op == S4K_OP_FLUSH) {
    /* Logged as it starts: the entries before it are the requests
     * completed before it, which it makes durable.  One from before a
     * power cut is refused below: not logged, or the log would claim a
     * durability the device did not give. */
    if (__builtin_expect (d->wlog != NULL, 0)) {
      if (d->fault && fault_stale (d->fault)) {
        r = -EIO;
        goto done;
      }
      if ((r = s4k_wlog_flush (d->wlog)))
        goto done;
    }
    q->stage = ST_FLUSH;
    sq->kind = S4K_REQ_FLUSH;
    sq->n = 0;
    goto last;
  }

lock:
  q->stage = ST_LOCK;
  /* Reads of a store that says they need no lock take none, and read
   * just their bytes: see lockfree_reads in store.h, and the memory
   * store's comment for why it can say so. */
  if (!q->exact) {
    if (!w)
      s4k_lock (d->locks, s->lock_first, s->lock_last, q->op == S4K_OP_READ);
    else if (!s4k_trylock (d->locks, s->lock_first, s->lock_last,
                           q->op == S4K_OP_READ, w))
      return 1;
    q->locked = true;
  }

  if (q->op == S4K_OP_TRIM) {
    q->stage = ST_TRIM;
    sq->kind = S4K_REQ_TRIM;
    sq->fua = fua;
    sq->n = 1;
    sq->io[0] = (struct s4k_io) { NULL, s->mid_end - s->mid_start,
                                  s->mid_start };
    goto last;
  }

  if (q->partial)
    partial_write (d, q);
  else if (q->op == S4K_OP_READ || cuts (q)) {
    q->stage = ST_READ;
    sq->kind = S4K_REQ_READ;
    sq->fua = false;
    sq->n = list_reads (d, q, sq->io);
    /* An RMW's read under its own locks: a lock-free store's check
     * could wait for writers of other sectors of its chunk, and its
     * fallback would take those locks again. */
    if (d->lockfree_reads && !q->exact)
      r = d->store->ops->read_locked (d->store, sq->io, sq->n);
    else
      r = issue (d, sq, w);
    if (w && r == 1)
      return 1;
  read_done:
    if (r || q->op == S4K_OP_READ)
      goto done;
    merge (d, q);
  }

  if (q->op == S4K_OP_ZERO) {
    uint64_t start = q->head_zero ? s->head_start : s->mid_start;
    uint64_t end = q->tail_zero ? s->tail_end : s->mid_end;
    if (start < end) {
      q->stage = ST_ZERO;
      sq->kind = S4K_REQ_ZERO;
      sq->fua = fua;
      sq->may_trim = q->flags & S4K_MAY_TRIM;
      sq->n = 1;
      sq->io[0] = (struct s4k_io) { NULL, end - start, start };
      r = issue (d, sq, w);
      if (w && r == 1)
        return 1;
    zero_done:
      if (r)
        goto done;
    }
  }

  q->stage = ST_WRITE;
  sq->kind = S4K_REQ_WRITE;
  sq->fua = fua;
  if (!(sq->n = list_writes (d, q, sq->io)))
    goto done;                  /* a zero that left no cut sector */
  /* Only a synchronous layer (the fault layer) has write_atomic. */
  if (__builtin_expect (d->write_atomic, 0) && atomic_write (d, q)) {
    r = d->store->ops->write_atomic (d->store, sq->io, sq->n, fua, q->len,
                                     q->off);
    goto done;
  }
last:
  r = issue (d, sq, w);
  if (w && r == 1)
    return 1;
done:
  return finish (d, q, r);
}

/* Clips the store's runs to the request and merges neighbours of the
 * same kind before passing them on. */
struct extent_clip {
  uint64_t start, end;
  s4k_extent_fn *fn;
  void *opaque;
};

static int
clip_extent (void *opaque, uint64_t off, uint64_t len, bool zero)
{
  struct extent_clip *c = opaque;
  uint64_t s = off > c->start ? off : c->start;
  uint64_t e = off + len < c->end ? off + len : c->end;
  if (s >= e)
    return off >= c->end;       /* stop once past the end */
  return c->fn (c->opaque, s, e - s, zero);
}

/* What the store is asked for the extents of [off, off+len): *range,
 * its runs going through *c to fn.  0 to ask, 1 if there is nothing to
 * ask (length 0), or the -errno the request fails with. */
static int
extents_plan (struct s4k_dev *d, uint64_t len, uint64_t off,
              s4k_extent_fn *fn, void *opaque, struct extent_clip *c,
              struct s4k_io *range)
{
  int r = check_request (d, S4K_OP_EXTENTS, len, off);
  if (r || len == 0)
    return r ? r : 1;
  /* The store works in whole sectors, whose boundaries are multiples of
   * the logical size: runs come out at logical granularity. */
  struct span s;
  span_of (d, len, off, &s);
  *c = (struct extent_clip) { off, off + len, fn, opaque };
  *range = (struct s4k_io) { NULL, s.tail_end - s.head_start, s.head_start };
  return 0;
}

#endif
