/* SPDX-License-Identifier: BSD-3-Clause */
/* The two drivers of the engine's one request plan must never diverge:
 * the same seeded random script of writes (whole and cutting into
 * physical sectors), zeroes, trims, reads, flushes and extents, with FUA,
 * may-trim and fast-zero, runs through the synchronous calls (s4k_write,
 * s4k_zero, s4k_trim..., as the plugin makes them) on one device and
 * through the asynchronous ones (s4k_aio_write..., as sect4k-server
 * makes them, driven on an s4k_loop) on a twin; every request must get
 * the same result (and a read the same bytes), and at the end the twins
 * must hold the same bytes, report the same extents and count the same
 * statistics.
 *
 * Both stores: the file store (its io_uring submit path against its
 * synchronous one), and the memory store, which has no submit of its own,
 * so the twin wraps it in a store whose submit does the work and
 * completes later through the loop's post queue (or at once, now and
 * then), making the engine take every asynchronous stage; it takes
 * extents too (async_extents, as the upstream store), so s4k_aio_extents
 * goes through the store's submit (the file store answers extents at
 * once).
 *
 * usage: file-diverge DIR */
#define _GNU_SOURCE
#include <errno.h>
#include <liburing.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "sect4k/sect4k.h"
#include "store/store.h"
#include "aio.h"
#include "tap.h"

/* Per geometry and store.  FUA and flushes are rare enough that the
 * file store's fdatasyncs keep the test short. */
#define REQUESTS 2000

static uint64_t rng;

static uint64_t
rnd (uint64_t n)
{
  return xorshift64 (&rng) % n;
}

/* ---- a single-threaded s4k_loop ---------------------------------------- */

struct loop {
  struct s4k_loop base;
  struct io_uring ring;
  struct s4k_completion *posted;
  unsigned posts;
};

static void
post (struct s4k_loop *l, struct s4k_completion *c)
{
  struct loop *lp = (struct loop *) l;
  c->next = lp->posted;
  lp->posted = c;
  lp->posts++;
}

/* Empties lp's queue of posted work (for wait_aio). */
static struct s4k_completion *
take_posted (void *arg)
{
  struct loop *lp = arg;
  struct s4k_completion *c = lp->posted;
  lp->posted = NULL;
  return c;
}

/* ---- the memory store behind a submit ---------------------------------- */

struct deferred {
  struct s4k_store base;
  struct s4k_store *inner;
  unsigned deferred, at_once;
};

#define INNER(s) (((struct deferred *) (s))->inner)

static int
d_read (struct s4k_store *s, const struct s4k_io *io, unsigned n)
{
  return INNER (s)->ops->read (INNER (s), io, n);
}
static int
d_write (struct s4k_store *s, const struct s4k_io *io, unsigned n, bool fua)
{
  return INNER (s)->ops->write (INNER (s), io, n, fua);
}
static int
d_zero (struct s4k_store *s, uint64_t len, uint64_t off, bool may_trim,
        bool fua)
{
  return INNER (s)->ops->zero (INNER (s), len, off, may_trim, fua);
}
static int
d_trim (struct s4k_store *s, uint64_t len, uint64_t off, bool fua)
{
  return INNER (s)->ops->trim (INNER (s), len, off, fua);
}
static int
d_flush (struct s4k_store *s)
{
  return INNER (s)->ops->flush (INNER (s));
}
static int
d_extents (struct s4k_store *s, uint64_t len, uint64_t off,
           s4k_extent_fn *fn, void *opaque)
{
  return INNER (s)->ops->extents (INNER (s), len, off, fn, opaque);
}
static bool
d_can_fast_zero (struct s4k_store *s)
{
  return INNER (s)->ops->can_fast_zero (INNER (s));
}
static void
d_close (struct s4k_store *s)
{
  INNER (s)->ops->close (INNER (s));
  free (s);
}

static void
d_complete (struct s4k_completion *c, int res)
{
  (void) res;
  struct s4k_store_piece *p = s4k_container_of (c, struct s4k_store_piece, c);
  p->req->done (p->req, p->req->err);
}

/* Does the request now; answers through the loop's post queue, or (one
 * time in four) at once. */
static int
d_submit (struct s4k_store *s, struct s4k_store_req *q)
{
  struct deferred *st = (struct deferred *) s;
  const struct s4k_io *io = &q->io[0];
  int r;
  switch (q->kind) {
  case S4K_REQ_READ: r = d_read (s, q->io, q->n); break;
  case S4K_REQ_WRITE: r = d_write (s, q->io, q->n, q->fua); break;
  case S4K_REQ_ZERO: r = d_zero (s, io->len, io->off, q->may_trim, q->fua);
    break;
  case S4K_REQ_TRIM: r = d_trim (s, io->len, io->off, q->fua); break;
  case S4K_REQ_EXTENTS:
    r = d_extents (s, io->len, io->off, q->extent_fn, q->extent_opaque);
    break;
  default: r = d_flush (s); break;
  }
  if (rnd (4) == 0) {
    st->at_once++;
    return r;
  }
  st->deferred++;
  q->err = r;
  q->piece[0].req = q;
  q->piece[0].c.fn = d_complete;
  q->loop->post (q->loop, &q->piece[0].c);
  return 1;
}

static const struct s4k_store_ops deferred_ops = {
  .name = "memory behind a submit",
  .read = d_read, .write = d_write, .zero = d_zero, .trim = d_trim,
  .flush = d_flush, .extents = d_extents, .can_fast_zero = d_can_fast_zero,
  .close = d_close, .submit = d_submit,
};

/* ---- the twins ---------------------------------------------------------- */

struct geom {
  uint32_t logical, physical, alignment;
  uint64_t size;
  bool strict;
};

static void
config (struct s4k_config *c, const struct geom *g, const char *file)
{
  char err[512], v[4][32];
  const char *keys[] = { "logical", "physical", "alignment-offset", "size",
                         "strict", "file" };
  snprintf (v[0], sizeof v[0], "%" PRIu32, g->logical);
  snprintf (v[1], sizeof v[1], "%" PRIu32, g->physical);
  snprintf (v[2], sizeof v[2], "%" PRIu32, g->alignment);
  snprintf (v[3], sizeof v[3], "%" PRIu64, g->size);
  const char *vals[] = { v[0], v[1], v[2], v[3],
                         g->strict ? "true" : "false", file };
  s4k_config_init (c);
  for (size_t i = 0; i < (file ? 6 : 5); i++)
    if (s4k_config_set (c, keys[i], vals[i], err, sizeof err) == -1)
      bail ("%s", err);
  if (s4k_config_finish (c, err, sizeof err) == -1)
    bail ("%s", err);
  c->stats_count = true;        /* count, without writing them anywhere */
}

/* Opens the device for one twin: file store on path, or memory (behind
 * a submit when deferred is non-NULL). */
static struct s4k_dev *
open_twin (const struct geom *g, const char *path, struct deferred **deferred)
{
  struct s4k_config c;
  struct s4k_dev *d;
  char err[512];
  if (path)
    unlink (path);
  config (&c, g, path);
  if (path || !deferred) {
    if (s4k_dev_open (&d, &c, err, sizeof err) < 0)
      bail ("%s", err);
    return d;
  }
  struct deferred *st = calloc (1, sizeof *st);
  if (!st || !(st->inner = s4k_mem_store_new (&c.geom, err, sizeof err)))
    bail ("memory store: %s", st ? err : "out of memory");
  st->base = (struct s4k_store) { .ops = &deferred_ops, .async = true,
                                  .async_extents = true,
                                  .partial_writes = true };
  *deferred = st;
  if (s4k_dev_new (&d, &c, &st->base, err, sizeof err) < 0)
    bail ("%s", err);
  return d;
}

/* A random request range: whole physical sectors, cutting into them,
 * one logical sector, long, unaligned (refused under strict), or past
 * the end. */
static void
pick_range (const struct s4k_geometry *g, uint64_t *off, uint64_t *len)
{
  const uint64_t L = g->logical, size = g->size;
  const uint64_t sectors = s4k_sector_count (g);
  uint64_t a, b;
  switch (rnd (10)) {
  case 0: case 1: case 2: {     /* whole sectors */
    uint64_t k = rnd (sectors), last = k + rnd (4), unused;
    s4k_sector_range (g, k, &a, &unused);
    s4k_sector_range (g, last < sectors ? last : sectors - 1, &unused, &b);
    break;
  }
  case 3:                       /* one logical sector */
    a = rnd (size / L) * L;
    b = a + L;
    break;
  case 4:                       /* long */
    a = rnd (size / L) * L;
    b = a + (1 + rnd (6 * g->physical / L)) * L;
    break;
  case 5:                       /* unaligned, past the end */
    if (rnd (2)) {
      a = rnd (size);
      b = a + 1 + rnd (3 * g->physical);
    }
    else {
      a = size - rnd (2 * L);
      b = a + L + rnd (2) * g->physical;
    }
    break;
  default:                      /* cutting into sectors */
    a = rnd (size / L) * L;
    b = a + (1 + rnd (2 * g->physical / L + 1)) * L;
    break;
  }
  if (b > size && rnd (4))
    b = size > a ? size : a;    /* mostly inside */
  *off = a;
  *len = b - a;
}

struct extents {
  uint64_t off[4096], len[4096];
  bool zero[4096];
  unsigned n;
};

static int
extent_cb (void *opaque, uint64_t off, uint64_t len, bool zero)
{
  struct extents *e = opaque;
  if (e->n == 4096)
    return -1;
  e->off[e->n] = off;
  e->len[e->n] = len;
  e->zero[e->n++] = zero;
  return 0;
}

static bool
same_extents (const struct extents *a, const struct extents *b)
{
  return a->n == b->n &&
         !memcmp (a->off, b->off, a->n * sizeof a->off[0]) &&
         !memcmp (a->len, b->len, a->n * sizeof a->len[0]) &&
         !memcmp (a->zero, b->zero, a->n * sizeof a->zero[0]);
}

static bool
same_stats (const struct s4k_stats *a, const struct s4k_stats *b,
            char *why, size_t len)
{
  for (unsigned op = 0; op < S4K_NOPS; op++)
    if (memcmp (&a->op[op], &b->op[op], sizeof a->op[op])) {
      const struct s4k_op_stats *x = &a->op[op], *y = &b->op[op];
      snprintf (why, len, "%s: requests %" PRIu64 "/%" PRIu64 ", errors %"
                PRIu64 "/%" PRIu64 ", rmw sectors %" PRIu64 "/%" PRIu64
                ", rmw read bytes %" PRIu64 "/%" PRIu64 ", store write "
                "bytes %" PRIu64 "/%" PRIu64 " (or the histograms)",
                s4k_op_names[op], x->requests, y->requests, x->errors,
                y->errors, x->rmw_sectors, y->rmw_sectors, x->rmw_read_bytes,
                y->rmw_read_bytes, x->store_write_bytes, y->store_write_bytes);
      return false;
    }
  return true;
}

/* Runs the script on the synchronous twin and the asynchronous one. */
static void
twins (const char *dir, const struct geom *geo, bool file, uint64_t seed)
{
  char name[160], pa[4096], pb[4096];
  snprintf (name, sizeof name, "%s store, %" PRIu32 "/%" PRIu32
            " offset %" PRIu32 ", size %" PRIu64 "%s", file ? "file" : "memory",
            geo->logical, geo->physical, geo->alignment, geo->size,
            geo->strict ? "" : ", strict=false");
  snprintf (pa, sizeof pa, "%s/sync.img", dir);
  snprintf (pb, sizeof pb, "%s/aio.img", dir);
  struct deferred *deferred = NULL;
  struct s4k_dev *sync = open_twin (geo, file ? pa : NULL, NULL);
  struct s4k_dev *aio = open_twin (geo, file ? pb : NULL, &deferred);
  if (!s4k_dev_async (aio)) {
    printf ("ok %u # skip %s: the store cannot go through a ring (%s)\n",
            ++tap_n, name, s4k_dev_store_info (aio));
    s4k_dev_close (sync);
    s4k_dev_close (aio);
    unlink (pa);
    unlink (pb);
    return;
  }

  struct loop lp = { 0 };
  if (s4k_ring_init (&lp.ring, 64) < 0)
    bail ("io_uring_queue_init failed");
  lp.base = (struct s4k_loop) { &lp.ring, post };
  struct waiter w;
  struct s4k_aio *a = s4k_aio_new (aio, &lp.base, waiter_done, &w);
  const struct s4k_geometry *g = s4k_dev_geometry (sync);
  const size_t max = 8 * (size_t) g->physical + 2 * g->logical;
  unsigned char *data = malloc (max), *ra = malloc (max), *rb = malloc (max);
  unsigned char *all_a = malloc (g->size), *all_b = malloc (g->size);
  if (!a || !data || !ra || !rb || !all_a || !all_b)
    bail ("out of memory");

  rng = seed;
  unsigned diverged = 0, failed = 0, kinds[6] = { 0 };
  static struct extents xa, xb;
  for (unsigned i = 0; i < REQUESTS; i++) {
    uint64_t off, len;
    pick_range (g, &off, &len);
    if (len > max)
      len = max;
    unsigned what = rnd (22), flags = rnd (16) == 0 ? S4K_FUA : 0;
    int rs, rq;
    bool read = false, extents = false;
    w.done = false;
    if (what < 8) {             /* write: random bytes, or zeroes */
      kinds[0]++;
      if (rnd (5) == 0)
        memset (data, 0, len);
      else
        for (uint64_t j = 0; j < len; j++)
          data[j] = rnd (256);
      rs = s4k_write (sync, data, len, off, flags);
      rq = s4k_aio_write (a, data, len, off, flags);
    }
    else if (what < 12) {       /* zero */
      kinds[1]++;
      flags |= (rnd (2) ? S4K_MAY_TRIM : 0) | (rnd (6) ? 0 : S4K_FAST_ZERO);
      rs = s4k_zero (sync, len, off, flags);
      rq = s4k_aio_zero (a, len, off, flags);
    }
    else if (what < 15) {       /* trim */
      kinds[2]++;
      rs = s4k_trim (sync, len, off, flags);
      rq = s4k_aio_trim (a, len, off, flags);
    }
    else if (what >= 20) {      /* extents */
      extents = true;
      kinds[5]++;
      xa.n = xb.n = 0;
      rs = s4k_extents (sync, len, off, extent_cb, &xa);
      rq = s4k_aio_extents (a, len, off, extent_cb, &xb);
    }
    else if (what < 19 || rnd (4)) {    /* read */
      read = true;
      kinds[3]++;
      memset (ra, 0xa5, len);
      memset (rb, 0x5a, len);
      rs = s4k_read (sync, ra, len, off);
      rq = s4k_aio_read (a, rb, len, off);
    }
    else {
      kinds[4]++;
      rs = s4k_flush (sync);
      rq = s4k_aio_flush (a);
    }
    rq = wait_aio (&lp.ring, take_posted, &lp, rq, &w);
    if (rs < 0 && rs != -EINVAL && rs != -ENOSPC && rs != -ENOTSUP)
      failed++;
    if (rs != rq || (read && rs == 0 && memcmp (ra, rb, len)) ||
        (extents && rs == 0 && !same_extents (&xa, &xb))) {
      if (diverged++ < 5)
        diag ("%s: request %u (%s at %" PRIu64 " length %" PRIu64 ", flags "
              "%u): synchronous %d, asynchronous %d%s", name, i,
              what < 8 ? "write" : what < 12 ? "zero" : what < 15 ? "trim"
              : read ? "read" : extents ? "extents" : "flush", off, len,
              flags, rs, rq, rs != rq ? "" : read ? ", read different bytes"
              : ", different runs");
    }
  }
  ok (diverged == 0 && failed == 0, "%s: %u requests (%u writes, %u zeroes, "
      "%u trims, %u reads, %u flushes, %u extents), each with the same "
      "result through both drivers (%u differed, %u failed)", name,
      REQUESTS, kinds[0], kinds[1], kinds[2], kinds[3], kinds[4], kinds[5],
      diverged, failed);

  bool same = s4k_read (sync, all_a, g->size, 0) == 0 &&
              s4k_read (aio, all_b, g->size, 0) == 0;
  uint64_t first_diff = g->size;
  for (uint64_t j = 0; same && j < g->size; j++)
    if (all_a[j] != all_b[j]) {
      first_diff = j;
      break;
    }
  if (!ok (same && first_diff == g->size, "%s: both devices hold the same "
           "bytes", name))
    diag ("first difference at byte %" PRIu64, first_diff);

  xa.n = xb.n = 0;
  int ra_ = s4k_extents (sync, g->size, 0, extent_cb, &xa);
  int rb_ = s4k_extents (aio, g->size, 0, extent_cb, &xb);
  ok (ra_ == 0 && rb_ == 0 && same_extents (&xa, &xb),
      "%s: the same extents (%u and %u runs)", name, xa.n, xb.n);

  struct s4k_stats sa, sb;
  char why[512] = "";
  s4k_dev_stats (sync, &sa);
  s4k_dev_stats (aio, &sb);
  if (!ok (sa.offset_bucket == sb.offset_bucket &&
           sa.offset_buckets == sb.offset_buckets &&
           same_stats (&sa, &sb, why, sizeof why),
           "%s: the same statistics", name) && *why)
    diag ("%s", why);

  if (deferred)
    ok (deferred->deferred > 0 && deferred->at_once > 0 && lp.posts > 0,
        "%s: the asynchronous twin's store answered later (%u) and at "
        "once (%u)", name, deferred->deferred, deferred->at_once);

  s4k_aio_free (a);
  io_uring_queue_exit (&lp.ring);
  s4k_dev_close (sync);
  s4k_dev_close (aio);
  unlink (pa);
  unlink (pb);
  free (data);
  free (ra);
  free (rb);
  free (all_a);
  free (all_b);
}

int
main (int argc, char **argv)
{
  if (argc != 2)
    bail ("usage: file-diverge DIR");
  static const struct geom geoms[] = {
    { 512, 4096, 0, 1u << 20, true },                   /* 512e */
    { 512, 4096, 3584, (1u << 20) + 1536, true },       /* 512e, XP jumper,
                                                           short last sector */
    { 512, 512, 0, 256u << 10, true },                  /* 512n */
    { 4096, 4096, 0, 1u << 20, true },                  /* 4kn */
    { 1024, 16384, 5120, (2u << 20) + 7168, true },     /* L 1k, P 16k */
    { 512, 8192, 1536, (1u << 20) + 512, false },       /* unaligned served */
  };
  for (size_t i = 0; i < sizeof geoms / sizeof geoms[0]; i++)
    for (int file = 0; file < 2; file++)
      twins (argv[1], &geoms[i], file, 0x9E3779B97F4A7C15ull * (i + 1));
  return done_testing ();
}
