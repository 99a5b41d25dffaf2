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
 * layer is not there at all. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fault.h"
#include "stats.h"

/* ---- bad sectors: sorted, disjoint, non-adjacent runs of sectors ------ */

struct run {
  uint64_t first, last;
};

struct badset {
  struct run *r;
  size_t n, cap;
};

/* Index of the first run ending at or after k. */
static size_t
bad_find (const struct badset *b, uint64_t k)
{
  size_t lo = 0, hi = b->n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (b->r[mid].last < k)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

static bool
bad_any (const struct badset *b, uint64_t first, uint64_t last)
{
  size_t i = bad_find (b, first);
  return i < b->n && b->r[i].first <= last;
}

static int
bad_reserve (struct badset *b, size_t n)
{
  if (n <= b->cap)
    return 0;
  size_t cap = b->cap ? 2 * b->cap : 16;
  while (cap < n)
    cap *= 2;
  struct run *r = realloc (b->r, cap * sizeof *r);
  if (!r)
    return -ENOMEM;
  b->r = r;
  b->cap = cap;
  return 0;
}

static int
bad_add (struct badset *b, uint64_t first, uint64_t last)
{
  /* Merge every run overlapping or adjacent to [first, last]. */
  size_t i = bad_find (b, first ? first - 1 : 0), j = i;
  while (j < b->n && b->r[j].first <= last + 1) {
    if (b->r[j].first < first)
      first = b->r[j].first;
    if (b->r[j].last > last)
      last = b->r[j].last;
    j++;
  }
  if (j == i) {
    if (bad_reserve (b, b->n + 1))
      return -ENOMEM;
    memmove (&b->r[i + 1], &b->r[i], (b->n - i) * sizeof *b->r);
    b->n++;
  }
  else {
    memmove (&b->r[i + 1], &b->r[j], (b->n - j) * sizeof *b->r);
    b->n -= j - i - 1;
  }
  b->r[i] = (struct run) { first, last };
  return 0;
}

/* Returns how many sectors were bad, or -ENOMEM. */
static int64_t
bad_remove (struct badset *b, uint64_t first, uint64_t last)
{
  int64_t removed = 0;
  size_t i = bad_find (b, first);
  while (i < b->n && b->r[i].first <= last) {
    struct run *r = &b->r[i];
    uint64_t s = r->first > first ? r->first : first;
    uint64_t e = r->last < last ? r->last : last;
    removed += e - s + 1;
    if (r->first < first && r->last > last) {       /* split in two */
      if (bad_reserve (b, b->n + 1))
        return -ENOMEM;
      r = &b->r[i];
      memmove (&b->r[i + 1], r, (b->n - i) * sizeof *r);
      b->n++;
      b->r[i].last = first - 1;
      b->r[i + 1].first = last + 1;
      return removed;
    }
    if (r->first < first)
      r->last = first - 1, i++;
    else if (r->last > last)
      r->first = last + 1, i++;
    else {
      memmove (r, r + 1, (b->n - i - 1) * sizeof *r);
      b->n--;
    }
  }
  return removed;
}

/* ---- the layer --------------------------------------------------------- */

/* A dirty physical sector: its new contents, not yet durable. */
struct entry {
  uint64_t k;
  struct entry *hnext;                  /* hash chain */
  struct entry *prev, *next;            /* oldest first */
  char data[];
};

struct s4k_fault {
  struct s4k_store base;
  struct s4k_store *inner;
  char info[640];                       /* the inner store's line, and
                                           what the layer changes */
  struct s4k_geometry g;
  struct s4k_fault_config cfg;
  pthread_mutex_t m;
  struct badset bad;
  struct entry **bucket;
  unsigned bucket_bits;
  struct entry *oldest, *newest;
  uint64_t dirty_bytes, dirty_sectors;
  uint64_t writes;                      /* store writes, for power-cut-after */
  uint64_t prng;
  uint64_t seed;
  _Atomic unsigned cuts;
  void (*on_cut) (void *opaque);
  void *on_cut_opaque;
  struct control *control;
};

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

/* xorshift64*: small, and the same outcomes for the same seed. */
static uint64_t
prng_next (struct s4k_fault *f)
{
  uint64_t x = f->prng;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  f->prng = x;
  return x * 0x2545F4914F6CDD1DULL;
}

static unsigned
prng_below (struct s4k_fault *f, unsigned n)
{
  return (prng_next (f) >> 32) % n;
}

static inline uint64_t
sector_of (const struct s4k_fault *f, uint64_t off)
{
  return s4k_sector_index (&f->g, off);
}

static struct entry **
slot (struct s4k_fault *f, uint64_t k)
{
  return &f->bucket[(k * 0x9E3779B97F4A7C15ULL) >> (64 - f->bucket_bits)];
}

static struct entry *
lookup (struct s4k_fault *f, uint64_t k)
{
  for (struct entry *e = *slot (f, k); e; e = e->hnext)
    if (e->k == k)
      return e;
  return NULL;
}

static void
drop (struct s4k_fault *f, struct entry *e)
{
  struct entry **p = slot (f, e->k);
  while (*p != e)
    p = &(*p)->hnext;
  *p = e->hnext;
  if (e->prev)
    e->prev->next = e->next;
  else
    f->oldest = e->next;
  if (e->next)
    e->next->prev = e->prev;
  else
    f->newest = e->prev;
  uint64_t s, end;
  s4k_sector_range (&f->g, e->k, &s, &end);
  f->dirty_bytes -= end - s;
  f->dirty_sectors--;
  free (e);
}

/* Drops the dirty sectors in [off, off+len) (whole sectors). */
static void
drop_range (struct s4k_fault *f, uint64_t len, uint64_t off)
{
  if (!f->dirty_sectors)
    return;
  for (uint64_t k = sector_of (f, off), last = sector_of (f, off + len - 1);
       k <= last; k++) {
    struct entry *e = lookup (f, k);
    if (e)
      drop (f, e);
  }
}

/* Puts a piece's sectors in the table as dirty. */
static int
stage (struct s4k_fault *f, const struct s4k_io *io)
{
  const char *buf = io->buf;
  for (uint64_t k = sector_of (f, io->off),
       last = sector_of (f, io->off + io->len - 1); k <= last; k++) {
    uint64_t s, end;
    s4k_sector_range (&f->g, k, &s, &end);
    struct entry *e = lookup (f, k);
    if (!e) {
      if (!(e = malloc (sizeof *e + (end - s))))
        return -ENOMEM;
      e->k = k;
      e->hnext = *slot (f, k);
      *slot (f, k) = e;
      e->next = NULL;
      e->prev = f->newest;
      if (f->newest)
        f->newest->next = e;
      else
        f->oldest = e;
      f->newest = e;
      f->dirty_bytes += end - s;
      f->dirty_sectors++;
    }
    memcpy (e->data, buf + (s - io->off), end - s);
  }
  return 0;
}

/* Makes a dirty sector durable. */
static int
destage (struct s4k_fault *f, struct entry *e)
{
  uint64_t s, end;
  s4k_sector_range (&f->g, e->k, &s, &end);
  const struct s4k_io io = { e->data, end - s, s };
  int r = f->inner->ops->write (f->inner, &io, 1, false);
  if (r == 0)
    drop (f, e);
  return r;
}

/* Counts repaired sectors for the statistics. */
static int
clear_bad (struct s4k_fault *f, uint64_t len, uint64_t off)
{
  if (!f->bad.n)
    return 0;
  int64_t n = bad_remove (&f->bad, sector_of (f, off),
                          sector_of (f, off + len - 1));
  if (n < 0)
    return n;
  fault_tally.bad_sectors_cleared += n;
  return 0;
}

/* ---- power cut --------------------------------------------------------- */

static const char *const torn_names[] =
  { "none", "sector", "unreadable", "garbage", "zero" };

/* Gives every dirty sector its outcome, oldest first, and reports it.
 * Called with the mutex held. */
static int
cut_locked (struct s4k_fault *f, enum s4k_torn torn, const char *trigger,
            char **report)
{
  const uint32_t L = f->g.logical;
  char *rep = NULL;
  size_t replen = 0;
  FILE *fp = open_memstream (&rep, &replen);
  char *old = malloc (f->g.physical);
  int r = 0;
  enum { KEPT, REVERTED, TORN, UNREADABLE, GARBAGE, ZEROED, OUTCOMES };
  unsigned counts[OUTCOMES] = { 0 };
  static const char *const outcome_names[OUTCOMES] =
    { "kept", "reverted", "torn", "unreadable", "garbage", "zeroed" };

  if (!fp || !old) {
    if (fp)
      fclose (fp);
    free (rep);
    free (old);
    return -ENOMEM;
  }
  const unsigned cut = atomic_load (&f->cuts) + 1;
  fprintf (fp, "{\"schema\": \"sect4k-cut/1\", \"cut\": %u, \"trigger\": "
           "\"%s\", \"torn\": \"%s\", \"seed\": %" PRIu64 ",\n"
           " \"geometry\": {\"size\": %" PRIu64 ", \"logical\": %" PRIu32
           ", \"physical\": %" PRIu32 ", \"alignment_offset\": %" PRIu32
           "},\n \"sectors\": [", cut, trigger, torn_names[torn], f->seed,
           f->g.size, L, f->g.physical, f->g.alignment);
  const char *sep = "";
  while (f->oldest) {
    struct entry *e = f->oldest;
    uint64_t s, end;
    s4k_sector_range (&f->g, e->k, &s, &end);
    const unsigned lbas = (end - s) / L;
    /* Torn needs two logical sectors; garbage and zeroed do not. */
    unsigned o = torn == S4K_TORN_NONE ? REVERTED
                 : prng_below (f, lbas > 1 || torn >= S4K_TORN_GARBAGE
                                  ? 3 : 2);
    uint64_t mask = 0;                  /* bit i: logical sector i is new */
    uint64_t stop = 0;                  /* garbage: the first random byte */
    if (o == TORN && torn == S4K_TORN_GARBAGE) {
      o = GARBAGE;
      stop = prng_next (f) % (end - s);
    }
    else if (o == TORN && torn == S4K_TORN_ZERO)
      o = ZEROED;
    else if (o == TORN) {
      /* A mix: at least one old and one new logical sector. */
      for (unsigned i = 0; i < lbas && i < 64; i++)
        mask |= (prng_next (f) >> 63) << i;
      const uint64_t all = lbas >= 64 ? UINT64_MAX : (1ULL << lbas) - 1;
      if ((mask & all) == 0 || (mask & all) == all)
        mask ^= 1ULL << prng_below (f, lbas < 64 ? lbas : 64);
      mask &= all;
      if (torn == S4K_TORN_UNREADABLE)
        o = UNREADABLE;
    }
    fprintf (fp, "%s\n  {\"sector\": %" PRIu64 ", \"lba\": %" PRIu64
             ", \"lbas\": %u, \"outcome\": \"%s\"", sep, e->k, s / L, lbas,
             outcome_names[o]);
    sep = ",";
    if (o == GARBAGE)
      fprintf (fp, ", \"garbage_from\": %" PRIu64 ", \"garbage_lba\": %"
               PRIu64, s + stop, (s + stop) / L);
    if (o == TORN || o == UNREADABLE) {
      fprintf (fp, ", \"new_lbas\": [");
      const char *sep2 = "";
      for (unsigned i = 0; i < lbas; i++)
        if (i < 64 && (mask >> i & 1)) {
          fprintf (fp, "%s%" PRIu64, sep2, s / L + i);
          sep2 = ", ";
        }
      fprintf (fp, "]");
    }
    fprintf (fp, "}");
    counts[o]++;
    const struct s4k_io io = { old, end - s, s };
    if (o == TORN || o == UNREADABLE) {
      /* Logical sectors beyond 64 keep their old contents. */
      if ((r = f->inner->ops->read (f->inner, &io, 1)) == 0) {
        for (unsigned i = 0; i < lbas && i < 64; i++)
          if (mask >> i & 1)
            memcpy (old + (uint64_t) i * L, e->data + (uint64_t) i * L, L);
        r = f->inner->ops->write (f->inner, &io, 1, false);
      }
      if (r == 0 && o == UNREADABLE)
        r = bad_add (&f->bad, e->k, e->k);
    }
    else if (o == GARBAGE || o == ZEROED) {
      /* What the interrupted write left, read back without an error. */
      if (o == GARBAGE) {
        memcpy (old, e->data, stop);
        for (uint64_t i = stop; i < end - s; i += 8) {
          const uint64_t x = prng_next (f);
          memcpy (old + i, &x, end - s - i < 8 ? end - s - i : 8);
        }
      }
      else
        memset (old, 0, end - s);
      r = f->inner->ops->write (f->inner, &io, 1, false);
    }
    const uint64_t k = e->k;    /* destage and drop free e */
    if (o == KEPT)
      r = destage (f, e);
    else
      drop (f, e);
    /* Written whole, and it reads back without an error. */
    if (r == 0 && f->bad.n && (o == KEPT || o == GARBAGE || o == ZEROED))
      r = bad_remove (&f->bad, k, k) < 0 ? -ENOMEM : 0;
    if (r)
      break;
  }
  fprintf (fp, "\n ],\n \"outcomes\": {");
  for (unsigned i = 0; i < OUTCOMES; i++)
    fprintf (fp, "%s\"%s\": %u", i ? ", " : "", outcome_names[i], counts[i]);
  fprintf (fp, "}}\n");
  /* Whatever failed, the power is off: nothing unflushed survives. */
  while (f->oldest)
    drop (f, f->oldest);
  if (r == 0)
    r = f->inner->ops->flush (f->inner);
  atomic_fetch_add (&f->cuts, 1);
  free (old);
  if (fclose (fp) != 0 && r == 0)
    r = -ENOMEM;
  if (f->cfg.cut_report) {
    /* Atomically, as statsfile=: a reader never sees half a report. */
    size_t n = strlen (f->cfg.cut_report) + 32;
    char *tmp = malloc (n);
    FILE *out = NULL;
    if (tmp) {
      snprintf (tmp, n, "%s.tmp.%ld", f->cfg.cut_report, (long) getpid ());
      out = fopen (tmp, "w");
    }
    if (!out || fwrite (rep, 1, replen, out) != replen ||
        fclose (out) != 0 || rename (tmp, f->cfg.cut_report) != 0)
      fprintf (stderr, "sect4k: cut-report=%s: %s\n", f->cfg.cut_report,
               s4k_strerror (errno));
    free (tmp);
  }
  if (report)
    *report = rep;
  else
    free (rep);
  return r;
}

static void
after_cut (struct s4k_fault *f)
{
  if (f->on_cut)
    f->on_cut (f->on_cut_opaque);
}

/* ---- store operations -------------------------------------------------- */

/* Dirty sectors from the cache, runs of the others from the store. */
static int
read_cached (struct s4k_fault *f, const struct s4k_io *io, unsigned n)
{
  if (!f->dirty_sectors)
    return f->inner->ops->read (f->inner, io, n);
  for (unsigned i = 0; i < n; i++) {
    char *buf = io[i].buf;
    uint64_t run = io[i].off, st, end;           /* run: [run, st) */
    for (uint64_t k = sector_of (f, io[i].off),
         last = sector_of (f, io[i].off + io[i].len - 1); k <= last; k++) {
      s4k_sector_range (&f->g, k, &st, &end);
      struct entry *e = lookup (f, k);
      if (!e)
        continue;
      if (run < st) {
        const struct s4k_io p = { buf + (run - io[i].off), st - run, run };
        int r = f->inner->ops->read (f->inner, &p, 1);
        if (r)
          return r;
      }
      memcpy (buf + (st - io[i].off), e->data, end - st);
      run = end;
    }
    if (run < io[i].off + io[i].len) {
      const struct s4k_io p = { buf + (run - io[i].off),
                                io[i].off + io[i].len - run, run };
      int r = f->inner->ops->read (f->inner, &p, 1);
      if (r)
        return r;
    }
  }
  return 0;
}

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
      if (bad_any (&f->bad, sector_of (f, io[i].off),
                   sector_of (f, io[i].off + io[i].len - 1))) {
        fault_tally.bad_sector_hit = true;
        r = -EIO;
        break;
      }
  if (r == 0)
    r = read_cached (f, io, n);
  pthread_mutex_unlock (&f->m);
  return r;
}

static int
fault_write (struct s4k_store *s, const struct s4k_io *io, unsigned n,
             bool fua)
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
    for (unsigned i = 0; i < n && r == 0; i++)
      r = stage (f, &io[i]);
    if (r == 0)
      cut_locked (f, f->cfg.torn, "power-cut-after", NULL);
    r = -EIO;
    cut = true;
  }
  else if (f->cfg.write_cache && !fua) {
    for (unsigned i = 0; i < n && r == 0; i++)
      r = stage (f, &io[i]);
    while (r == 0 && f->dirty_bytes > f->cfg.write_cache_size)
      r = destage (f, f->oldest);
  }
  else {
    /* FUA: durable now, newer than anything dirty for these sectors. */
    for (unsigned i = 0; i < n; i++)
      drop_range (f, io[i].len, io[i].off);
    r = f->inner->ops->write (f->inner, io, n, fua);
  }
  for (unsigned i = 0; i < n && r == 0; i++)
    r = clear_bad (f, io[i].len, io[i].off);
  pthread_mutex_unlock (&f->m);
  if (cut)
    after_cut (f);
  return r;
}

static int
fault_zero (struct s4k_store *s, uint64_t len, uint64_t off, bool may_trim,
            bool fua)
{
  struct s4k_fault *f = (struct s4k_fault *) s;
  int r = -EIO;
  pthread_mutex_lock (&f->m);
  if (!stale (f)) {
    drop_range (f, len, off);
    r = f->inner->ops->zero (f->inner, len, off, may_trim, fua);
    if (r == 0)
      r = clear_bad (f, len, off);
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
  if (!stale (f)) {
    drop_range (f, len, off);
    r = f->inner->ops->trim (f->inner, len, off, fua);
    if (r == 0)
      r = clear_bad (f, len, off);
  }
  pthread_mutex_unlock (&f->m);
  return r;
}

static int
flush_locked (struct s4k_fault *f)
{
  int r = 0;
  while (r == 0 && f->oldest)
    r = destage (f, f->oldest);
  return r ? r : f->inner->ops->flush (f->inner);
}

static int
fault_flush (struct s4k_store *s)
{
  struct s4k_fault *f = (struct s4k_fault *) s;
  pthread_mutex_lock (&f->m);
  int r = stale (f) ? -EIO : flush_locked (f);
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
fault_close (struct s4k_store *s)
{
  struct s4k_fault *f = (struct s4k_fault *) s;
  control_close (f->control);   /* open if the layer failed to start */
  /* A clean shutdown is not a power cut: the cache is written back. */
  int r = flush_locked (f);
  if (f->dirty_sectors)
    fprintf (stderr, "sect4k: writing the write cache back at close: %s: "
             "%" PRIu64 " dirty bytes lost\n", s4k_strerror (-r),
             f->dirty_bytes);
  f->inner->ops->close (f->inner);
  free (f->bad.r);
  free (f->bucket);
  pthread_mutex_destroy (&f->m);
  free (f);
}

static const struct s4k_store_ops fault_ops = {
  .name = "faults",
  .read = fault_read,
  .write = fault_write,
  .zero = fault_zero,
  .trim = fault_trim,
  .flush = fault_flush,
  .extents = fault_extents,
  .can_fast_zero = fault_can_fast_zero,
  .readonly = fault_readonly,
  .info = fault_info,
  .close = fault_close,
};

/* ---- lifecycle --------------------------------------------------------- */

static int
add_lbas (void *opaque, uint64_t first, uint64_t last)
{
  struct s4k_fault *f = opaque;
  const uint64_t lbas = f->g.size / f->g.logical;
  if (last >= lbas)
    return -ERANGE;
  return bad_add (&f->bad, sector_of (f, first * f->g.logical),
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

/* ---- run time ---------------------------------------------------------- */

int
s4k_dev_power_cut (struct s4k_dev *d, int torn, char **report)
{
  struct s4k_fault *f = dev_fault (d);
  if (report)
    *report = NULL;
  if (!f)
    return -ENOTSUP;
  pthread_mutex_lock (&f->m);
  int r = cut_locked (f, torn < 0 ? f->cfg.torn : (enum s4k_torn) torn,
                      "control", report);
  pthread_mutex_unlock (&f->m);
  after_cut (f);
  return r;
}

unsigned
s4k_dev_power_cuts (const struct s4k_dev *d)
{
  struct s4k_fault *f = dev_fault (d);
  return f ? atomic_load (&f->cuts) : 0;
}

void
s4k_dev_on_power_cut (struct s4k_dev *d, void (*fn) (void *opaque),
                      void *opaque)
{
  struct s4k_fault *f = dev_fault (d);
  if (f) {
    f->on_cut = fn;
    f->on_cut_opaque = opaque;
  }
}

static int
bad_change (struct s4k_dev *d, uint64_t first, uint64_t last, bool add,
            char *err, size_t errlen)
{
  struct s4k_fault *f = dev_fault (d);
  if (!f) {
    snprintf (err, errlen, "no fault layer (give bad-sectors=, control=, "
              "write-cache= or power-cut-after=)");
    return -ENOTSUP;
  }
  const uint64_t lbas = f->g.size / f->g.logical;
  if (first > last || last >= lbas) {
    snprintf (err, errlen, "LBA range %" PRIu64 "-%" PRIu64 ": must be "
              "FIRST <= LAST <= %" PRIu64 " (the last LBA)", first, last,
              lbas - 1);
    return -ERANGE;
  }
  const uint64_t a = sector_of (f, first * f->g.logical),
                 b = sector_of (f, last * f->g.logical);
  pthread_mutex_lock (&f->m);
  int r = add ? bad_add (&f->bad, a, b)
              : bad_remove (&f->bad, a, b) < 0 ? -ENOMEM : 0;
  pthread_mutex_unlock (&f->m);
  if (r)
    snprintf (err, errlen, "out of memory");
  return r;
}

int
s4k_dev_bad_add (struct s4k_dev *d, uint64_t first_lba, uint64_t last_lba,
                 char *err, size_t errlen)
{
  return bad_change (d, first_lba, last_lba, true, err, errlen);
}

int
s4k_dev_bad_remove (struct s4k_dev *d, uint64_t first_lba,
                    uint64_t last_lba, char *err, size_t errlen)
{
  return bad_change (d, first_lba, last_lba, false, err, errlen);
}

int
s4k_dev_bad_list (struct s4k_dev *d, FILE *fp)
{
  struct s4k_fault *f = dev_fault (d);
  if (!f)
    return 0;
  const uint32_t L = f->g.logical;
  pthread_mutex_lock (&f->m);
  for (size_t i = 0; i < f->bad.n; i++) {
    uint64_t s, e, s2, e2;
    s4k_sector_range (&f->g, f->bad.r[i].first, &s, &e);
    s4k_sector_range (&f->g, f->bad.r[i].last, &s2, &e2);
    fprintf (fp, "%" PRIu64 "-%" PRIu64 "\n", s / L, e2 / L - 1);
  }
  pthread_mutex_unlock (&f->m);
  return 0;
}

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
           f->dirty_bytes, f->dirty_sectors, bad, torn_names[f->cfg.torn],
           f->seed, atomic_load (&f->cuts));
  pthread_mutex_unlock (&f->m);
}
