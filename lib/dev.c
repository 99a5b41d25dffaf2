/* The device: geometry, read-modify-write and per-sector locking over a
 * store that only ever sees whole physical sectors. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sect4k/sect4k.h"
#include "lock.h"
#include "stats.h"
#include "stats_save.h"

struct s4k_dev {
  struct s4k_geometry g;
  bool counting;                /* keep statistics */
  uint32_t max_request;
  bool strict;
  struct s4k_store *store;
  struct s4k_locks *locks;
  unsigned debug_mask;
  s4k_debug_fn *debug_fn;
  void *debug_opaque;
  struct stats_state stats;
  struct stats_saver saver;
  struct s4k_timing *timing;    /* NULL unless a timing key asks */
};

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

/* ---- lifecycle --------------------------------------------------------- */

int
s4k_dev_new (struct s4k_dev **out, const struct s4k_config *c,
             struct s4k_store *store, char *err, size_t errlen)
{
  struct s4k_dev *d = calloc (1, sizeof *d);
  if (!d || !(d->locks = s4k_locks_new ())) {
    snprintf (err, errlen, "out of memory");
    free (d);
    store->ops->close (store);
    return -ENOMEM;
  }
  d->g = c->geom;
  d->max_request = c->max_request;
  d->strict = c->strict;
  d->counting = c->stats_count;
  d->store = store;
  if (s4k_timing_enabled (&c->timing) &&
      !(d->timing = s4k_timing_new (&c->timing, &d->g))) {
    snprintf (err, errlen, "out of memory");
    s4k_locks_free (d->locks);
    free (d);
    store->ops->close (store);
    return -ENOMEM;
  }
  stats_init (&d->stats, &d->g);
  stats_saver_init (&d->saver, d, c);
  *out = d;
  return 0;
}

int
s4k_dev_open (struct s4k_dev **out, const struct s4k_config *c,
              char *err, size_t errlen)
{
  struct s4k_config cfg = *c;
  struct s4k_store *store = NULL;

  /* The file store may take the size from the file. */
  if (cfg.file && !(store = s4k_file_store_new (&cfg, &cfg.geom.size,
                                                err, errlen)))
    return -EINVAL;
  if (s4k_geometry_check (&cfg.geom, err, errlen) == -1) {
    if (store)
      store->ops->close (store);
    return -EINVAL;
  }
  if (!store && !(store = s4k_mem_store_new (&cfg.geom, err, errlen)))
    return -ENOMEM;
  return s4k_dev_new (out, &cfg, store, err, errlen);
}

void
s4k_dev_start (struct s4k_dev *d)
{
  stats_saver_start (&d->saver);
}

void
s4k_dev_close (struct s4k_dev *d)
{
  if (!d)
    return;
  stats_saver_close (&d->saver);
  d->store->ops->close (d->store);
  s4k_locks_free (d->locks);
  stats_free (&d->stats);
  s4k_timing_free (d->timing);
  free (d);
}

/* The timing model runs in the front ends once the data work is done:
 * nothing of it is on the data path above. */
bool
s4k_dev_timed (const struct s4k_dev *d)
{
  return d->timing != NULL;
}

uint64_t
s4k_dev_timing (struct s4k_dev *d, enum s4k_op op, uint64_t len,
                uint64_t off, int r)
{
  if (!d->timing || r != 0 || op == S4K_OP_EXTENTS || op == S4K_OP_CACHE)
    return 0;                   /* refused at once, or no media work */
  struct s4k_timing_cost c;
  const uint64_t now = s4k_now_ns ();
  const uint64_t due = s4k_timing_schedule (d->timing, op, len, off, now, &c);
  if (d->counting)
    stats_count_time (&d->stats, op, &c);
  return due > now ? due : 0;
}

void
s4k_dev_stats (const struct s4k_dev *d, struct s4k_stats *out)
{
  stats_sum ((struct stats_state *) &d->stats, out);
}

const struct s4k_geometry *
s4k_dev_geometry (const struct s4k_dev *d)
{
  return &d->g;
}

uint32_t
s4k_dev_max_request (const struct s4k_dev *d)
{
  return d->max_request;
}

bool
s4k_dev_can_fast_zero (const struct s4k_dev *d)
{
  return d->store->ops->can_fast_zero (d->store);
}

bool
s4k_dev_readonly (const struct s4k_dev *d)
{
  return d->store->ops->readonly && d->store->ops->readonly (d->store);
}

const char *
s4k_dev_store_info (const struct s4k_dev *d)
{
  return d->store->ops->info ? d->store->ops->info (d->store) : d->store->ops->name;
}

void
s4k_dev_set_debug (struct s4k_dev *d, unsigned mask, s4k_debug_fn *fn,
                   void *opaque)
{
  d->debug_mask = fn ? mask : 0;
  d->debug_fn = fn;
  d->debug_opaque = opaque;
}

static void
format_sector_size (char *buf, size_t len, uint32_t n)
{
  if (n >= 1024 && n % 1024 == 0)
    snprintf (buf, len, "%" PRIu32 "k", n / 1024);
  else
    snprintf (buf, len, "%" PRIu32, n);
}

void
s4k_dev_describe (const struct s4k_dev *d, char *buf, size_t len)
{
  char l[16];
  format_sector_size (l, sizeof l, d->g.logical);
  snprintf (buf, len, "%s%s: logical %" PRIu32 ", physical %" PRIu32
            ", alignment offset %" PRIu32 " (lowest aligned LBA %" PRIu64 ")",
            l, d->g.logical == d->g.physical ? "n" : "e",
            d->g.logical, d->g.physical, d->g.alignment,
            s4k_lowest_aligned (&d->g));
}

/* ---- request checks ---------------------------------------------------- */

static bool
misaligned (const struct s4k_dev *d, uint64_t len, uint64_t off)
{
  return ((off | len) & (d->g.logical - 1)) != 0;
}

/* Reads and writes carry a payload, bounded by the advertised maximum. */
static bool
too_long (const struct s4k_dev *d, enum s4k_op op, uint64_t len)
{
  return (op == S4K_OP_READ || op == S4K_OP_WRITE) && len > d->max_request;
}

bool
s4k_refused (const struct s4k_dev *d, enum s4k_op op, uint64_t len,
             uint64_t off)
{
  return d->strict && op != S4K_OP_FLUSH &&
         (misaligned (d, len, off) || too_long (d, op, len));
}

void
s4k_explain_refusal (const struct s4k_dev *d, enum s4k_op op, uint64_t len,
                     uint64_t off, char *buf, size_t buflen)
{
  if (too_long (d, op, len))
    snprintf (buf, buflen, "%s at offset %" PRIu64 " length %" PRIu64
              " refused: longer than the advertised maximum request %" PRIu32
              " (strict=true)", s4k_op_names[op], off, len, d->max_request);
  else
    snprintf (buf, buflen, "%s at offset %" PRIu64 " length %" PRIu64
              " refused: offset and length must be multiples of the logical "
              "sector size %" PRIu32 " (strict=true)",
              s4k_op_names[op], off, len, d->g.logical);
}

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

/* Inline: on every request's path, and filled in place rather than
 * returned by value. */
static inline __attribute__ ((always_inline)) void
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

/* ---- data path --------------------------------------------------------- */

/* Records how a request sits on the sectors, for the statistics. */
static void
place (struct tally *t, const struct span *s)
{
  t->placed = true;
  t->cut = s->head_cut || s->tail_cut;
  t->sectors = s->last - s->first + 1;
}

/* The store reads of a read request: whole sectors straight into the
 * client's buffer, cut ones into cut (2P: the head sector, then the
 * tail), since the store reads whole sectors only.  Returns how many. */
static inline __attribute__ ((always_inline)) unsigned
read_pieces (const struct s4k_dev *d, char *buf, uint64_t off,
             const struct span *s, char *cut, struct s4k_io *io)
{
  unsigned n = 0;
  if (s->head_cut)
    io[n++] = (struct s4k_io) { cut, s->head_end - s->head_start,
                                s->head_start };
  if (s->mid_start < s->mid_end)
    io[n++] = (struct s4k_io) { buf + (s->mid_start - off),
                                s->mid_end - s->mid_start, s->mid_start };
  if (s->tail_cut)
    io[n++] = (struct s4k_io) { cut + d->g.physical,
                                s->tail_end - s->tail_start, s->tail_start };
  return n;
}

/* Copies the requested bytes of the cut sectors to the client's buffer. */
static inline __attribute__ ((always_inline)) void
read_cut_copy (const struct s4k_dev *d, char *buf, uint64_t len, uint64_t off,
               const struct span *s, const char *cut)
{
  const uint64_t end = off + len;
  if (s->head_cut) {
    uint64_t e = end < s->head_end ? end : s->head_end;
    memcpy (buf, cut + (off - s->head_start), e - off);
  }
  if (s->tail_cut)
    memcpy (buf + (s->tail_start - off), cut + d->g.physical,
            end - s->tail_start);
}

/* Checks a request and works out the physical sectors it touches and
 * locks (*s).  Returns 0 to go on, 1 if there is nothing to do, or the
 * -errno the request fails with. */
static inline __attribute__ ((always_inline)) int
plan (const struct s4k_dev *d, enum s4k_op op, uint64_t len, uint64_t off,
      unsigned flags, struct span *s, struct tally *t)
{
  int r = check_request (d, op, len, off);
  if (r || len == 0)
    return r ? r : 1;
  if (op == S4K_OP_ZERO && (flags & S4K_FAST_ZERO) &&
      !s4k_dev_can_fast_zero (d))
    return -ENOTSUP;
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

static int
read_op (struct s4k_dev *d, void *buf, uint64_t len, uint64_t off,
         struct tally *t)
{
  struct span s;
  int r = plan (d, S4K_OP_READ, len, off, 0, &s, t);
  if (r)
    return r == 1 ? 0 : r;
  char *cut = NULL;
  struct s4k_io io[3];

  if ((s.head_cut || s.tail_cut) &&
      !(cut = bounce (2 * (size_t) d->g.physical)))
    return -ENOMEM;
  unsigned n = read_pieces (d, buf, off, &s, cut, io);
  s4k_lock (d->locks, s.first, s.last, true);
  r = d->store->ops->read (d->store, io, n);
  s4k_unlock (d->locks, s.first, s.last, true);
  if (r == 0)
    read_cut_copy (d, buf, len, off, &s, cut);
  return r;
}

static bool
all_zero (const char *p, size_t len)
{
  for (size_t i = 0; i < len; i++)
    if (p[i])
      return false;
  return true;
}

/* The store calls of a write or zero that cuts into sectors. */
struct rmw {
  struct s4k_io head, tail;     /* the cut sectors, in the bounce buffer */
  struct s4k_io rd[2], wr[3];
  unsigned nrd, nwr;
  uint64_t zero_start, zero_end;        /* whole sectors for store->zero */
};

/* Lists the cut sectors to read first, into cut (2P: head, then tail). */
static inline __attribute__ ((always_inline)) void
rmw_reads (const struct s4k_dev *d, const struct span *s, char *cut,
           struct rmw *m, struct tally *t)
{
  m->nrd = 0;
  if (!cut)
    return;                     /* nothing cut */
  m->head = (struct s4k_io) { cut, s->head_end - s->head_start,
                              s->head_start };
  m->tail = (struct s4k_io) { cut + d->g.physical,
                              s->tail_end - s->tail_start, s->tail_start };
  if (s->head_cut)
    m->rd[m->nrd++] = m->head;
  if (s->tail_cut)
    m->rd[m->nrd++] = m->tail;
  t->rmw_sectors = m->nrd;
  for (unsigned i = 0; i < m->nrd; i++)
    t->rmw_read_bytes += m->rd[i].len;
}

/* Merges data (or zeroes, when data is NULL) into the cut sectors read
 * and lists the writes.  A cut sector that a zero leaves all zero is
 * zeroed by the store instead, so zeroing keeps the store sparse. */
static inline __attribute__ ((always_inline)) void
rmw_merge (struct s4k_dev *d, const char *data, uint64_t len, uint64_t off,
           const struct span *s, const char *op, struct rmw *m,
           struct tally *t)
{
  const uint64_t end = off + len;
  bool head_zero = false, tail_zero = false;
  if (s->head_cut) {
    char *head = m->head.buf;
    uint64_t e = end < s->head_end ? end : s->head_end;
    if (data)
      memcpy (head + (off - s->head_start), data, e - off);
    else {
      memset (head + (off - s->head_start), 0, e - off);
      head_zero = all_zero (head, m->head.len);
    }
    if (d->debug_mask & S4K_DEBUG_RMW)
      debug_rmw (d, op, len, off, s->first, s->head_start, s->head_end);
  }
  if (s->tail_cut) {
    char *tail = m->tail.buf;
    if (data)
      memcpy (tail, data + (s->tail_start - off), end - s->tail_start);
    else {
      memset (tail, 0, end - s->tail_start);
      tail_zero = all_zero (tail, m->tail.len);
    }
    if (d->debug_mask & S4K_DEBUG_RMW)
      debug_rmw (d, op, len, off, s->last, s->tail_start, s->tail_end);
  }

  m->nwr = 0;
  if (s->head_cut && !head_zero)
    m->wr[m->nwr++] = m->head;
  if (data && s->mid_start < s->mid_end)
    m->wr[m->nwr++] = (struct s4k_io) { (char *) data + (s->mid_start - off),
                                        s->mid_end - s->mid_start,
                                        s->mid_start };
  if (s->tail_cut && !tail_zero)
    m->wr[m->nwr++] = m->tail;
  m->zero_start = m->zero_end = 0;
  if (!data) {
    m->zero_start = head_zero ? s->head_start : s->mid_start;
    m->zero_end = tail_zero ? s->tail_end : s->mid_end;
  }
  for (unsigned i = 0; i < m->nwr; i++)
    t->store_write_bytes += m->wr[i].len;
}

/* Writes data (or zeroes, when data is NULL) to [off, off+len): cut
 * sectors by read-modify-write, whole ones straight to the store (or
 * zeroed by the store).  The caller has locked every sector. */
static int
write_locked (struct s4k_dev *d, const char *data, uint64_t len, uint64_t off,
              const struct span *s, unsigned flags, const char *op,
              struct tally *t)
{
  const bool fua = flags & S4K_FUA;
  char *cut = NULL;
  struct rmw m;
  int r;

  if ((s->head_cut || s->tail_cut) &&
      !(cut = bounce (2 * (size_t) d->g.physical)))
    return -ENOMEM;
  rmw_reads (d, s, cut, &m, t);
  if (m.nrd && (r = d->store->ops->read (d->store, m.rd, m.nrd)) != 0)
    return r;
  rmw_merge (d, data, len, off, s, op, &m, t);
  if (m.zero_start < m.zero_end &&
      (r = d->store->ops->zero (d->store, m.zero_end - m.zero_start,
                                m.zero_start, flags & S4K_MAY_TRIM, fua)) != 0)
    return r;
  if (m.nwr)
    return d->store->ops->write (d->store, m.wr, m.nwr, fua);
  return 0;
}

/* A write (data) or zero (data NULL): lock, then write_locked. */
static int
modify_op (struct s4k_dev *d, const void *data, uint64_t len, uint64_t off,
           unsigned flags, struct tally *t)
{
  struct span s;
  int r = plan (d, data ? S4K_OP_WRITE : S4K_OP_ZERO, len, off, flags, &s, t);
  if (r)
    return r == 1 ? 0 : r;
  s4k_lock (d->locks, s.first, s.last, false);
  if (data && !s.head_cut && !s.tail_cut) {
    /* Whole sectors: the common case needs no RMW machinery. */
    const struct s4k_io io = { (void *) data, len, off };
    r = d->store->ops->write (d->store, &io, 1, flags & S4K_FUA);
    t->store_write_bytes = len;
  }
  else
    r = write_locked (d, data, len, off, &s, flags, data ? "write" : "zero",
                      t);
  s4k_unlock (d->locks, s.first, s.last, false);
  return r;
}

static int
trim_op (struct s4k_dev *d, uint64_t len, uint64_t off, unsigned flags,
         struct tally *t)
{
  struct span s;
  int r = plan (d, S4K_OP_TRIM, len, off, flags, &s, t);
  if (r)
    return r == 1 ? 0 : r;
  s4k_lock (d->locks, s.lock_first, s.lock_last, false);
  r = d->store->ops->trim (d->store, s.mid_end - s.mid_start, s.mid_start,
                           flags & S4K_FUA);
  s4k_unlock (d->locks, s.lock_first, s.lock_last, false);
  return r;
}

/* ---- the public data path: each request is counted ------------------- */

static int
counted (struct s4k_dev *d, enum s4k_op op, uint64_t len, uint64_t off,
         int r, const struct tally *t)
{
  if (d->counting)
    stats_count (&d->stats, &d->g, op, len, off, r,
               r == -EINVAL && s4k_refused (d, op, len, off), t);
  return r;
}

int
s4k_read (struct s4k_dev *d, void *buf, uint64_t len, uint64_t off)
{
  struct tally t = { 0 };
  int r = read_op (d, buf, len, off, &t);
  return counted (d, S4K_OP_READ, len, off, r, &t);
}

int
s4k_write (struct s4k_dev *d, const void *buf, uint64_t len, uint64_t off,
           unsigned flags)
{
  struct tally t = { 0 };
  int r = modify_op (d, buf, len, off, flags, &t);
  return counted (d, S4K_OP_WRITE, len, off, r, &t);
}

int
s4k_zero (struct s4k_dev *d, uint64_t len, uint64_t off, unsigned flags)
{
  struct tally t = { 0 };
  int r = modify_op (d, NULL, len, off, flags, &t);
  return counted (d, S4K_OP_ZERO, len, off, r, &t);
}

int
s4k_trim (struct s4k_dev *d, uint64_t len, uint64_t off, unsigned flags)
{
  struct tally t = { 0 };
  int r = trim_op (d, len, off, flags, &t);
  return counted (d, S4K_OP_TRIM, len, off, r, &t);
}

int
s4k_flush (struct s4k_dev *d)
{
  struct tally t = { 0 };
  return counted (d, S4K_OP_FLUSH, 0, 0, d->store->ops->flush (d->store), &t);
}

int
s4k_cache (struct s4k_dev *d, uint64_t len, uint64_t off)
{
  /* Nothing to prefetch from memory; a file store reads ahead itself. */
  struct tally t = { 0 };
  return counted (d, S4K_OP_CACHE, len, off,
                  check_request (d, S4K_OP_CACHE, len, off), &t);
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

static int
extents_op (struct s4k_dev *d, uint64_t len, uint64_t off,
            s4k_extent_fn *fn, void *opaque)
{
  int r = check_request (d, S4K_OP_EXTENTS, len, off);
  if (r || len == 0)
    return r;
  /* The store works in whole sectors, whose boundaries are multiples of
   * the logical size: runs come out at logical granularity. */
  struct span s;
  span_of (d, len, off, &s);
  struct extent_clip c = { off, off + len, fn, opaque };
  return d->store->ops->extents (d->store, s.tail_end - s.head_start,
                                 s.head_start, clip_extent, &c);
}

int
s4k_extents (struct s4k_dev *d, uint64_t len, uint64_t off,
             s4k_extent_fn *fn, void *opaque)
{
  struct tally t = { 0 };
  return counted (d, S4K_OP_EXTENTS, len, off,
                  extents_op (d, len, off, fn, opaque), &t);
}

/* ---- asynchronous requests -------------------------------------------- */

/* A request runs as a sequence of stages, each either done at once or
 * waited for: a sector lock (woken through the loop's post) or store I/O
 * (completed from the loop's ring).  A zero that cuts into sectors reads
 * them, has the store zero the whole ones, then writes the cut ones
 * back, as write_locked does. */
enum aio_stage {
  AIO_START, AIO_LOCK, AIO_READ, AIO_RMW_READ, AIO_WRITE, AIO_ZERO, AIO_TRIM,
  AIO_FLUSH, AIO_DONE
};

struct s4k_aio {
  struct s4k_dev *d;
  s4k_aio_done_fn *done;
  void *opaque;
  /* The request in flight. */
  enum s4k_op op;
  enum aio_stage stage;
  char *buf;
  uint64_t len, off;
  unsigned flags;
  struct span s;
  struct tally t;
  struct rmw m;
  bool locked;
  char *cut;                    /* 2P for the cut sectors, kept */
  struct s4k_lock_waiter waiter;
  struct s4k_completion retry;  /* posted when the waiter is woken */
  struct s4k_store_req req;
};

bool
s4k_dev_async (const struct s4k_dev *d)
{
  return d->store->async;
}

static enum aio_stage
next_stage (const struct s4k_aio *a)
{
  switch (a->stage) {
  case AIO_START:
    return a->op == S4K_OP_FLUSH ? AIO_FLUSH : AIO_LOCK;
  case AIO_LOCK:
    if (a->op == S4K_OP_READ)
      return AIO_READ;
    if (a->op == S4K_OP_TRIM)
      return AIO_TRIM;
    if (a->s.head_cut || a->s.tail_cut)
      return AIO_RMW_READ;
    return a->op == S4K_OP_WRITE ? AIO_WRITE : AIO_ZERO;
  case AIO_RMW_READ:
    return a->op == S4K_OP_WRITE ? AIO_WRITE : AIO_ZERO;
  case AIO_ZERO:
    return AIO_WRITE;           /* the cut sectors, if any */
  default:
    return AIO_DONE;
  }
}

/* Starts the current stage: 1 if it must be waited for, else its
 * result. */
static int
start_stage (struct s4k_aio *a)
{
  struct s4k_dev *d = a->d;
  struct s4k_store_req *q = &a->req;

  switch (a->stage) {
  case AIO_LOCK:
    if (!s4k_trylock (d->locks, a->s.lock_first, a->s.lock_last,
                      a->op == S4K_OP_READ, &a->waiter))
      return 1;
    a->locked = true;
    return 0;
  case AIO_READ:
    q->kind = S4K_REQ_READ;
    q->n = read_pieces (d, a->buf, a->off, &a->s, a->cut, q->io);
    break;
  case AIO_RMW_READ:
    rmw_reads (d, &a->s, a->cut, &a->m, &a->t);
    q->kind = S4K_REQ_READ;
    q->n = a->m.nrd;
    memcpy (q->io, a->m.rd, sizeof a->m.rd);
    break;
  case AIO_WRITE:
    q->kind = S4K_REQ_WRITE;
    q->fua = a->flags & S4K_FUA;
    if (a->op == S4K_OP_WRITE && !a->s.head_cut && !a->s.tail_cut) {
      q->n = 1;
      q->io[0] = (struct s4k_io) { a->buf, a->len, a->off };
      a->t.store_write_bytes = a->len;
      break;
    }
    /* A zero's cut sectors were merged in AIO_ZERO. */
    if (a->op == S4K_OP_WRITE)
      rmw_merge (d, a->buf, a->len, a->off, &a->s, "write", &a->m, &a->t);
    if (!a->m.nwr)
      return 0;
    q->n = a->m.nwr;
    memcpy (q->io, a->m.wr, sizeof a->m.wr);
    break;
  case AIO_ZERO:
    rmw_merge (d, NULL, a->len, a->off, &a->s, "zero", &a->m, &a->t);
    if (a->m.zero_start == a->m.zero_end)
      return 0;
    q->kind = S4K_REQ_ZERO;
    q->fua = a->flags & S4K_FUA;
    q->may_trim = a->flags & S4K_MAY_TRIM;
    q->n = 1;
    q->io[0] = (struct s4k_io) { NULL, a->m.zero_end - a->m.zero_start,
                                 a->m.zero_start };
    break;
  case AIO_TRIM:
    q->kind = S4K_REQ_TRIM;
    q->fua = a->flags & S4K_FUA;
    q->n = 1;
    q->io[0] = (struct s4k_io) { NULL, a->s.mid_end - a->s.mid_start,
                                 a->s.mid_start };
    break;
  case AIO_FLUSH:
    q->kind = S4K_REQ_FLUSH;
    q->n = 0;
    break;
  default:
    abort ();
  }
  return d->store->ops->submit (d->store, q);
}

/* The request is over: unlock, hand over the cut bytes, count it. */
static int
aio_finish (struct s4k_aio *a, int r)
{
  struct s4k_dev *d = a->d;
  if (a->locked) {
    s4k_unlock (d->locks, a->s.lock_first, a->s.lock_last,
                a->op == S4K_OP_READ);
    a->locked = false;
  }
  if (r == 0 && a->op == S4K_OP_READ)
    read_cut_copy (d, a->buf, a->len, a->off, &a->s, a->cut);
  a->stage = AIO_DONE;
  return counted (d, a->op, a->len, a->off, r, &a->t);
}

/* The current stage finished with r (or waits, r == 1): runs the next
 * ones until one must be waited for.  Returns 1 then, else the result. */
static int
aio_run (struct s4k_aio *a, int r)
{
  while (r == 0) {
    a->stage = next_stage (a);
    if (a->stage == AIO_DONE)
      break;
    r = start_stage (a);
  }
  return r == 1 ? 1 : aio_finish (a, r);
}

/* Store I/O completed (on the loop's thread). */
static void
aio_store_done (struct s4k_store_req *q, int res)
{
  struct s4k_aio *a = s4k_container_of (q, struct s4k_aio, req);
  int r = aio_run (a, res);
  if (r != 1)
    a->done (a->opaque, r);
}

/* The stripe the request waits on was unlocked, maybe by another
 * thread: try again on the request's own. */
static void
aio_lock_woken (struct s4k_lock_waiter *w)
{
  struct s4k_aio *a = s4k_container_of (w, struct s4k_aio, waiter);
  a->req.loop->post (a->req.loop, &a->retry);
}

static void
aio_retry (struct s4k_completion *c, int res)
{
  (void) res;
  struct s4k_aio *a = s4k_container_of (c, struct s4k_aio, retry);
  int r = aio_run (a, start_stage (a));
  if (r != 1)
    a->done (a->opaque, r);
}

struct s4k_aio *
s4k_aio_new (struct s4k_dev *d, struct s4k_loop *loop, s4k_aio_done_fn *done,
             void *opaque)
{
  struct s4k_aio *a = calloc (1, sizeof *a);
  if (!a)
    return NULL;
  a->d = d;
  a->done = done;
  a->opaque = opaque;
  a->stage = AIO_DONE;
  a->waiter.wake = aio_lock_woken;
  a->retry.fn = aio_retry;
  a->req.loop = loop;
  a->req.done = aio_store_done;
  return a;
}

void
s4k_aio_free (struct s4k_aio *a)
{
  if (!a)
    return;
  free (a->cut);
  free (a->req.bounce);
  free (a);
}

static int
aio_begin (struct s4k_aio *a, enum s4k_op op, void *buf, uint64_t len,
           uint64_t off, unsigned flags)
{
  struct s4k_dev *d = a->d;
  a->op = op;
  a->buf = buf;
  a->len = len;
  a->off = off;
  a->flags = flags;
  a->t = (struct tally) { 0 };
  a->stage = AIO_START;
  a->locked = false;
  if (op != S4K_OP_FLUSH) {
    int r = plan (d, op, len, off, flags, &a->s, &a->t);
    if (r) {
      a->stage = AIO_DONE;
      return counted (d, op, len, off, r == 1 ? 0 : r, &a->t);
    }
    /* Page-aligned, so O_DIRECT needs no bounce for the cut sectors
     * (which a trim leaves alone). */
    if (op != S4K_OP_TRIM && (a->s.head_cut || a->s.tail_cut) && !a->cut &&
        posix_memalign ((void **) &a->cut, 4096, 2 * (size_t) d->g.physical)) {
      a->cut = NULL;
      a->stage = AIO_DONE;
      return counted (d, op, len, off, -ENOMEM, &a->t);
    }
  }
  return aio_run (a, 0);
}

/* Stores without submit run the synchronous calls: they do not wait on
 * a disk. */
int
s4k_aio_read (struct s4k_aio *a, void *buf, uint64_t len, uint64_t off)
{
  if (!a->d->store->async)
    return s4k_read (a->d, buf, len, off);
  return aio_begin (a, S4K_OP_READ, buf, len, off, 0);
}

int
s4k_aio_write (struct s4k_aio *a, const void *buf, uint64_t len, uint64_t off,
               unsigned flags)
{
  if (!a->d->store->async)
    return s4k_write (a->d, buf, len, off, flags);
  return aio_begin (a, S4K_OP_WRITE, (void *) buf, len, off, flags);
}

int
s4k_aio_zero (struct s4k_aio *a, uint64_t len, uint64_t off, unsigned flags)
{
  if (!a->d->store->async)
    return s4k_zero (a->d, len, off, flags);
  return aio_begin (a, S4K_OP_ZERO, NULL, len, off, flags);
}

int
s4k_aio_trim (struct s4k_aio *a, uint64_t len, uint64_t off, unsigned flags)
{
  if (!a->d->store->async)
    return s4k_trim (a->d, len, off, flags);
  return aio_begin (a, S4K_OP_TRIM, NULL, len, off, flags);
}

int
s4k_aio_flush (struct s4k_aio *a)
{
  if (!a->d->store->async)
    return s4k_flush (a->d);
  return aio_begin (a, S4K_OP_FLUSH, NULL, 0, 0, 0);
}
