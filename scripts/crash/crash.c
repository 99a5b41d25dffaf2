/* sect4k-crash: the crash states of a write log, each served over NBD to a
 * checker (issue 23; the model and the options: scripts/crash/
 * sect4k-crash.pod).
 *
 * One process does everything: it reads the log (lib/wlog.c), builds the
 * durable image of each crash point as an overlay of physical sectors
 * over the base, and serves every state from memory through a small NBD
 * server of its own on a Unix socket, while the checker runs.  A state is
 * the crash point's overlay plus the few sectors it changes, so it costs
 * what it changes, not the device's size, and nothing is copied or
 * restarted between states. */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sect4k/sect4k.h"
#include "sect4k/wlog.h"
#include "../../server/nbd.h"

#define PROG "sect4k-crash"

static void
die (const char *fmt, ...) __attribute__ ((format (printf, 1, 2), noreturn));
static void
die (const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  fprintf (stderr, PROG ": ");
  vfprintf (stderr, fmt, ap);
  fputc ('\n', stderr);
  va_end (ap);
  exit (2);
}

static void *
xcalloc (size_t n, size_t size)
{
  void *p = calloc (n ? n : 1, size ? size : 1);
  if (!p)
    die ("out of memory");
  return p;
}

static void *
xrealloc (void *p, size_t n)
{
  if (!(p = realloc (p, n ? n : 1)))
    die ("out of memory");
  return p;
}

/* ---- options ----------------------------------------------------------- */

static const char *log_path, *base_path, *until_mark, *state_id, *output,
  *report_path, *geometry_arg;
static uint64_t states_limit = 256;     /* per crash point; 0: all */
static enum s4k_torn torn = S4K_TORN_SECTOR;
static uint64_t seed;
static double timeout_s = 60;
static char **checker;
static const char *const torn_names[] =
  { "none", "sector", "unreadable", "garbage", "zero" };

/* ---- geometry and the device's sectors -------------------------------- */

static struct s4k_geometry g;
static uint32_t L, P;

static void
sector_range (uint64_t k, uint64_t *s, uint64_t *e)
{
  s4k_sector_range (&g, k, s, e);
}

/* ---- the log ----------------------------------------------------------- */

struct wr {
  uint64_t entry;                       /* log entry number */
  uint64_t off, len;
  const unsigned char *data;            /* NULL: zeroes (zero, trim) */
  bool durable_early;                   /* FUA, zero, trim: durable when
                                           done, as the fault layer does */
};
static struct wr *writes;
static size_t nwrites;

/* A crash point: the crash comes before log entry `before`, when writes
 * [0, nw) were done and [0, f) were flushed. */
struct cp {
  uint64_t before;
  size_t f, nw;
};
static struct cp *cps;
static size_t ncps;
static uint64_t log_entries;

static size_t
volatile_writes (size_t f, size_t nw)
{
  size_t n = 0;
  for (size_t i = f; i < nw; i++)
    n += !writes[i].durable_early;
  return n;
}

static void
add_cp (uint64_t before, size_t f, size_t nw)
{
  /* Nothing changed since the last one (a flush with nothing unflushed
   * before it, e.g. the one a front end sends when a client leaves, adds
   * no state): front ends that flush differently give the same states. */
  if (ncps && cps[ncps - 1].nw == nw &&
      (cps[ncps - 1].f == f ||
       (volatile_writes (cps[ncps - 1].f, nw) == 0 &&
        volatile_writes (f, nw) == 0)))
    return;
  cps = xrealloc (cps, (ncps + 1) * sizeof *cps);
  cps[ncps++] = (struct cp) { before, f, nw };
}

static void
add_write (const struct s4k_wlog_entry *e, bool trim, bool durable)
{
  if (e->off % L || e->len % L)
    die ("%s: entry %" PRIu64 ": bytes [%" PRIu64 ", %" PRIu64 ") are not "
         "whole logical sectors of %" PRIu32 " bytes (a log of another "
         "geometry?)", log_path, e->index, e->off, e->off + e->len, L);
  if (e->off + e->len > g.size)
    die ("%s: entry %" PRIu64 ": bytes [%" PRIu64 ", %" PRIu64 ") are past "
         "the end of the device (size %" PRIu64 ")", log_path, e->index,
         e->off, e->off + e->len, g.size);
  writes = xrealloc (writes, (nwrites + 1) * sizeof *writes);
  writes[nwrites++] = (struct wr) { e->index, e->off, e->len,
                                    trim ? NULL : e->data, durable };
}

static struct s4k_wlog_reader *reader;

static void
read_log (void)
{
  char err[512];
  size_t f = 0;
  bool found_mark = false;
  struct s4k_wlog_entry e;
  int r;
  while ((r = s4k_wlog_next (reader, &e, err, sizeof err)) == 1) {
    log_entries = e.index + 1;
    if (e.flags & S4K_WLOG_MARK) {
      if (until_mark && !e.geometry &&
          strcmp (e.mark, until_mark) == 0) {
        found_mark = true;
        break;
      }
      continue;
    }
    const bool zero = e.flags & (S4K_WLOG_DISCARD | S4K_WLOG_ZERO);
    /* A zero's data is what the device holds: zeroes, and with
     * strict=false the bytes beside an unaligned zero. */
    const bool trim = e.flags & S4K_WLOG_DISCARD;
    if (e.flags & S4K_WLOG_FLUSH) {
      add_cp (e.index, f, nwrites);
      f = nwrites;
    }
    if (e.len) {
      const bool durable = zero || (e.flags & S4K_WLOG_FUA);
      if (durable)
        add_cp (e.index, f, nwrites);
      add_write (&e, trim, durable);
    }
  }
  if (r == -1)
    die ("%s", err);
  if (until_mark && !found_mark)
    die ("%s: no mark named \"%s\"", log_path, until_mark);
  add_cp (found_mark ? e.index : log_entries, f, nwrites);
}

/* ---- sector maps: physical sector -> image ----------------------------- */

struct sec {
  uint64_t k;
  bool unreadable;
  unsigned char *data;                  /* the sector's bytes (end - s) */
};

struct map {
  struct sec *slot;
  size_t cap, n;                        /* cap: power of two */
};

static size_t
hash_k (uint64_t k, size_t cap)
{
  return (k * 0x9E3779B97F4A7C15ULL) >> 17 & (cap - 1);
}

static struct sec *
map_find (const struct map *m, uint64_t k)
{
  if (!m->n)
    return NULL;
  for (size_t i = hash_k (k, m->cap);; i = (i + 1) & (m->cap - 1)) {
    if (!m->slot[i].data)
      return NULL;
    if (m->slot[i].k == k)
      return &m->slot[i];
  }
}

static struct sec *map_add (struct map *m, uint64_t k);

static void
map_grow (struct map *m)
{
  struct map old = *m;
  m->cap = old.cap ? 2 * old.cap : 64;
  m->slot = xcalloc (m->cap, sizeof *m->slot);
  m->n = 0;
  for (size_t i = 0; i < old.cap; i++)
    if (old.slot[i].data) {
      struct sec *s = map_add (m, old.slot[i].k);
      s->data = old.slot[i].data;
      s->unreadable = old.slot[i].unreadable;
    }
  free (old.slot);
}

/* A new slot for k (data NULL: the caller fills it). */
static struct sec *
map_add (struct map *m, uint64_t k)
{
  if (2 * (m->n + 1) > m->cap)
    map_grow (m);
  size_t i = hash_k (k, m->cap);
  while (m->slot[i].data)
    i = (i + 1) & (m->cap - 1);
  m->slot[i].k = k;
  m->slot[i].unreadable = false;
  m->slot[i].data = (unsigned char *) 1;        /* taken */
  m->n++;
  return &m->slot[i];
}

static void
map_clear (struct map *m)
{
  for (size_t i = 0; i < m->cap && m->n; i++)
    if (m->slot[i].data) {
      free (m->slot[i].data);
      m->slot[i].data = NULL;
      m->n--;
    }
  m->n = 0;
}

/* ---- images: base, flushed overlay, crash point overlay, state -------- */

static int base_fd = -1;
static uint64_t base_size;
static struct map flushed;              /* writes [0, cp.f) */
static struct map cpmap;                /* + the epoch's durable-early writes */
static size_t flushed_upto;

static void
read_base (uint64_t k, unsigned char *buf)
{
  uint64_t s, e;
  sector_range (k, &s, &e);
  memset (buf, 0, e - s);
  if (base_fd >= 0 && s < base_size) {
    uint64_t n = e < base_size ? e - s : base_size - s;
    if (pread (base_fd, buf, n, s) != (ssize_t) n)
      die ("%s: read at byte %" PRIu64 ": %s", base_path, s,
           strerror (errno ? errno : EIO));
  }
}

static void
read_flushed (uint64_t k, unsigned char *buf)
{
  uint64_t s, e;
  struct sec *x = map_find (&flushed, k);
  sector_range (k, &s, &e);
  if (x)
    memcpy (buf, x->data, e - s);
  else
    read_base (k, buf);
}

static void
read_durable (uint64_t k, unsigned char *buf)
{
  uint64_t s, e;
  struct sec *x = map_find (&cpmap, k);
  sector_range (k, &s, &e);
  if (x)
    memcpy (buf, x->data, e - s);
  else
    read_flushed (k, buf);
}

/* Applies write w's bytes that fall in sector k to buf (k's image). */
static void
apply (const struct wr *w, uint64_t k, unsigned char *buf)
{
  uint64_t s, e;
  sector_range (k, &s, &e);
  uint64_t a = w->off > s ? w->off : s;
  uint64_t b = w->off + w->len < e ? w->off + w->len : e;
  if (a >= b)
    return;
  if (w->data)
    memcpy (buf + (a - s), w->data + (a - w->off), b - a);
  else
    memset (buf + (a - s), 0, b - a);
}

static uint64_t
first_sector (const struct wr *w)
{
  return s4k_sector_index (&g, w->off);
}

static uint64_t
last_sector (const struct wr *w)
{
  return s4k_sector_index (&g, w->off + w->len - 1);
}

/* Applies w to a map whose missing sectors come from fill. */
static void
apply_to_map (struct map *m, const struct wr *w,
              void (*fill) (uint64_t, unsigned char *))
{
  for (uint64_t k = first_sector (w); k <= last_sector (w); k++) {
    struct sec *x = map_find (m, k);
    if (!x) {
      x = map_add (m, k);
      x->data = xcalloc (1, P);
      fill (k, x->data);
    }
    apply (w, k, x->data);
  }
}

/* Moves the durable image to crash point c (they come in order). */
static void
enter_cp (const struct cp *c)
{
  for (; flushed_upto < c->f; flushed_upto++)
    apply_to_map (&flushed, &writes[flushed_upto], read_base);
  map_clear (&cpmap);
  for (size_t i = c->f; i < c->nw; i++)
    if (writes[i].durable_early)
      apply_to_map (&cpmap, &writes[i], read_flushed);
}

/* ---- a state: which volatile writes were kept, each sector's outcome -- */

enum { O_KEPT, O_REVERTED, O_TORN, O_UNREADABLE, O_GARBAGE, O_ZERO };
static const char outcome_char[] = "krtugz";
static const char *const outcome_names[] =
  { "kept", "reverted", "torn", "unreadable", "garbage", "zeroed" };

struct outcome {
  unsigned kind;
  uint64_t arg;                 /* torn: the new LBAs (bit i: the sector's
                                   i-th); garbage: from its arg-th LBA */
};

/* One touched sector of a state. */
struct tsec {
  uint64_t k;
  unsigned lbas;
  uint64_t diff;                /* bit i: old and new differ in LBA i */
  unsigned char *old, *new, *img;
  struct outcome o;
  bool unreadable;
};

struct state {
  size_t cpi;
  size_t *vol;                  /* the crash point's volatile writes */
  size_t nvol;
  uint64_t *kept;               /* bitset over vol */
  struct tsec *t;
  size_t nt, tcap;
};

static bool
bit (const uint64_t *b, size_t i)
{
  return b[i / 64] >> (i % 64) & 1;
}

static size_t
bitwords (size_t n)
{
  return (n + 63) / 64 + 1;
}

static int
cmp_u64 (const void *a, const void *b)
{
  uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;
  return x < y ? -1 : x > y;
}

static void
state_set_cp (struct state *st, size_t cpi)
{
  const struct cp *c = &cps[cpi];
  st->cpi = cpi;
  st->nvol = 0;
  st->vol = xrealloc (st->vol, (c->nw - c->f + 1) * sizeof *st->vol);
  for (size_t i = c->f; i < c->nw; i++)
    if (!writes[i].durable_early)
      st->vol[st->nvol++] = i;
  st->kept = xrealloc (st->kept, bitwords (st->nvol) * 8);
  memset (st->kept, 0, bitwords (st->nvol) * 8);
}

static void
state_free_sectors (struct state *st)
{
  for (size_t i = 0; i < st->nt; i++) {
    free (st->t[i].old);
    free (st->t[i].new);
    free (st->t[i].img);
  }
  st->nt = 0;
}

/* From the kept set: the touched sectors with their old and new images
 * (outcomes not chosen yet). */
static void
state_build (struct state *st)
{
  const struct cp *c = &cps[st->cpi];
  state_free_sectors (st);
  uint64_t *ks = NULL;
  size_t nk = 0, kcap = 0;
  for (size_t v = 0; v < st->nvol; v++)
    if (bit (st->kept, v)) {
      const struct wr *w = &writes[st->vol[v]];
      for (uint64_t k = first_sector (w); k <= last_sector (w); k++) {
        if (nk == kcap)
          ks = xrealloc (ks, (kcap = kcap ? 2 * kcap : 16) * sizeof *ks);
        ks[nk++] = k;
      }
    }
  if (nk)                       /* qsort wants a real array */
    qsort (ks, nk, sizeof *ks, cmp_u64);
  size_t u = 0;
  for (size_t i = 0; i < nk; i++)
    if (!u || ks[u - 1] != ks[i])
      ks[u++] = ks[i];
  if (u > st->tcap)
    st->t = xrealloc (st->t, (st->tcap = u) * sizeof *st->t);
  /* Which writes are applied to the new images, in log order: the
   * epoch's durable-early ones and the kept ones. */
  bool *in = xcalloc (c->nw - c->f + 1, 1);
  for (size_t i = c->f; i < c->nw; i++)
    in[i - c->f] = writes[i].durable_early;
  for (size_t v = 0; v < st->nvol; v++)
    if (bit (st->kept, v))
      in[st->vol[v] - c->f] = true;
  for (size_t i = 0; i < u; i++) {
    struct tsec *t = &st->t[i];
    uint64_t s, e;
    sector_range (ks[i], &s, &e);
    t->k = ks[i];
    t->lbas = (e - s) / L;
    t->old = xcalloc (1, P);
    t->new = xcalloc (1, P);
    t->img = xcalloc (1, P);
    t->o = (struct outcome) { O_KEPT, 0 };
    t->unreadable = false;
    read_durable (t->k, t->old);
    read_flushed (t->k, t->new);
    for (size_t j = c->f; j < c->nw; j++)
      if (in[j - c->f] && first_sector (&writes[j]) <= t->k &&
          last_sector (&writes[j]) >= t->k)
        apply (&writes[j], t->k, t->new);
    t->diff = 0;
    for (unsigned l = 0; l < t->lbas && l < 64; l++)
      if (memcmp (t->old + (uint64_t) l * L, t->new + (uint64_t) l * L, L))
        t->diff |= 1ULL << l;
  }
  st->nt = u;
  free (in);
  free (ks);
}

/* How many outcomes the policy allows sector t (those that give distinct
 * images): kept and reverted, and what an interrupted write leaves.
 * Matches lib/fault.c's cut_locked: a torn mix needs two logical sectors
 * (so does unreadable, its variant); garbage and zero do not. */
static uint64_t
n_torn_masks (const struct tsec *t)
{
  const int d = __builtin_popcountll (t->diff);
  if (t->lbas < 2 || d < 2)
    return 0;
  return d >= 63 ? UINT64_MAX / 4 : (1ULL << d) - 2;
}

static uint64_t
n_outcomes (const struct tsec *t)
{
  uint64_t n = t->diff ? 2 : 1;         /* kept (= reverted if equal) */
  switch (torn) {
  case S4K_TORN_NONE: break;
  case S4K_TORN_SECTOR: n += n_torn_masks (t); break;
  case S4K_TORN_UNREADABLE: n += t->lbas > 1; break;
  case S4K_TORN_GARBAGE: n += t->lbas; break;
  case S4K_TORN_ZERO: n += 1; break;
  }
  return n;
}

/* The j-th set bit pattern: the j-th (1-based, skipping 0) subset of the
 * bits of mask, by pdep. */
static uint64_t
deposit (uint64_t x, uint64_t mask)
{
  uint64_t r = 0;
  for (uint64_t b = 1; mask; b <<= 1) {
    uint64_t low = mask & -mask;
    if (x & b)
      r |= low;
    mask &= mask - 1;
  }
  return r;
}

static struct outcome
outcome_at (const struct tsec *t, uint64_t i)
{
  if (i == 0)
    return (struct outcome) { O_KEPT, 0 };
  if (t->diff && i == 1)
    return (struct outcome) { O_REVERTED, 0 };
  i -= t->diff ? 2 : 1;
  switch (torn) {
  case S4K_TORN_SECTOR:
    return (struct outcome) { O_TORN, deposit (i + 1, t->diff) };
  case S4K_TORN_UNREADABLE:
    return (struct outcome) { O_UNREADABLE, 0 };
  case S4K_TORN_GARBAGE:
    return (struct outcome) { O_GARBAGE, i };
  default:
    return (struct outcome) { O_ZERO, 0 };
  }
}

static bool
outcome_allowed (const struct tsec *t, struct outcome o)
{
  switch (o.kind) {
  case O_KEPT: return true;
  case O_REVERTED: return true;
  case O_TORN:
    return torn == S4K_TORN_SECTOR && n_torn_masks (t) &&
           (o.arg & ~t->diff) == 0 && o.arg && o.arg != t->diff;
  case O_UNREADABLE: return torn == S4K_TORN_UNREADABLE && t->lbas > 1;
  case O_GARBAGE: return torn == S4K_TORN_GARBAGE && o.arg < t->lbas;
  case O_ZERO: return torn == S4K_TORN_ZERO;
  }
  return false;
}

static uint64_t
mix64 (uint64_t z)
{
  z += 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

/* The sector's bytes for its outcome.  Garbage's random bytes depend on
 * the crash point, the sector and where they start only, so a state ID
 * alone gives the same bytes. */
static void
state_images (struct state *st)
{
  for (size_t i = 0; i < st->nt; i++) {
    struct tsec *t = &st->t[i];
    uint64_t s, e;
    sector_range (t->k, &s, &e);
    const uint64_t n = e - s;
    t->unreadable = false;
    switch (t->o.kind) {
    case O_KEPT: memcpy (t->img, t->new, n); break;
    case O_REVERTED: memcpy (t->img, t->old, n); break;
    case O_TORN:
      for (unsigned l = 0; l < t->lbas; l++)
        memcpy (t->img + (uint64_t) l * L,
                (l < 64 && (t->o.arg >> l & 1) ? t->new : t->old)
                + (uint64_t) l * L, L);
      break;
    case O_UNREADABLE:
      memcpy (t->img, t->old, n);
      t->unreadable = true;
      break;
    case O_GARBAGE: {
      const uint64_t from = t->o.arg * L;
      memcpy (t->img, t->new, from);
      uint64_t x = mix64 (st->cpi * 0x100000001B3ULL ^ mix64 (t->k) ^ from);
      for (uint64_t b = from; b < n; b += 8) {
        x = mix64 (x);
        memcpy (t->img + b, &x, n - b < 8 ? n - b : 8);
      }
      break;
    }
    case O_ZERO: memset (t->img, 0, n); break;
    }
  }
}

/* What the checker sees differing from the durable image, hashed: two
 * choices that give the same device are one state. */
static uint64_t
state_hash (const struct state *st)
{
  uint64_t h = 0x12345;
  for (size_t i = 0; i < st->nt; i++) {
    const struct tsec *t = &st->t[i];
    uint64_t s, e;
    sector_range (t->k, &s, &e);
    if (!t->unreadable && memcmp (t->img, t->old, e - s) == 0)
      continue;
    h = mix64 (h ^ t->k) ^ t->unreadable;
    for (uint64_t b = 0; b + 8 <= e - s; b += 8) {
      uint64_t x;
      memcpy (&x, t->img + b, 8);
      h = (h ^ x) * 0x100000001B3ULL;
    }
    h = mix64 (h);
  }
  return h;
}

/* ---- state IDs: CP-KEPT-OUTCOMES, e.g. 3-5-k.g2*2.r -------------------- */

static char *
state_id_of (const struct state *st)
{
  char *buf = NULL;
  size_t len = 0;
  FILE *fp = open_memstream (&buf, &len);
  if (!fp)
    die ("out of memory");
  fprintf (fp, "%zu-", st->cpi);
  /* kept as hex, the highest volatile write first */
  bool any = false;
  for (size_t nib = (st->nvol + 3) / 4; nib-- > 0;) {
    unsigned x = 0;
    for (unsigned b = 0; b < 4; b++)
      if (nib * 4 + b < st->nvol && bit (st->kept, nib * 4 + b))
        x |= 1u << b;
    if (x || any) {
      fputc ("0123456789abcdef"[x], fp);
      any = true;
    }
  }
  if (!any)
    fputc ('0', fp);
  fputc ('-', fp);
  for (size_t i = 0; i < st->nt;) {
    size_t j = i + 1;
    while (j < st->nt && st->t[j].o.kind == st->t[i].o.kind &&
           st->t[j].o.arg == st->t[i].o.arg)
      j++;
    fprintf (fp, "%s%c", i ? "." : "", outcome_char[st->t[i].o.kind]);
    if (st->t[i].o.kind == O_TORN)
      fprintf (fp, "%" PRIx64, st->t[i].o.arg);
    else if (st->t[i].o.kind == O_GARBAGE)
      fprintf (fp, "%" PRIu64, st->t[i].o.arg);
    if (j - i > 1)
      fprintf (fp, "*%zu", j - i);
    i = j;
  }
  if (!st->nt)
    fputc ('0', fp);
  fclose (fp);
  return buf;
}

static void
state_parse (struct state *st, const char *id)
{
  char *end;
  errno = 0;
  unsigned long long cpi = strtoull (id, &end, 10);
  if (errno || end == id || *end != '-')
    die ("--state %s: not a state ID (CRASHPOINT-KEPT-OUTCOMES)", id);
  if (cpi >= ncps)
    die ("--state %s: crash point %llu: the log has %zu (0..%zu)", id, cpi,
         ncps, ncps - 1);
  state_set_cp (st, cpi);
  const char *h = end + 1, *he = strchr (h, '-');
  if (!he)
    die ("--state %s: not a state ID (CRASHPOINT-KEPT-OUTCOMES)", id);
  size_t nib = he - h;
  for (size_t i = 0; i < nib; i++) {
    const char ch = h[nib - 1 - i];
    const char *p = strchr ("0123456789abcdef", ch);
    if (!p || !ch)
      die ("--state %s: kept set: '%c' is not a hex digit", id, ch);
    for (unsigned b = 0; b < 4; b++)
      if ((p - "0123456789abcdef") >> b & 1) {
        if (i * 4 + b >= st->nvol)
          die ("--state %s: kept set names write %zu; crash point %llu has "
               "%zu unflushed", id, i * 4 + b, cpi, st->nvol);
        st->kept[(i * 4 + b) / 64] |= 1ULL << ((i * 4 + b) % 64);
      }
  }
  state_build (st);
  const char *o = he + 1;
  size_t ti = 0;
  if (strcmp (o, "0") == 0 && st->nt == 0)
    return;
  while (*o) {
    const char *p = strchr (outcome_char, *o);
    if (!p || !*o)
      die ("--state %s: outcome '%c': not one of %s", id, *o, outcome_char);
    struct outcome oc = { p - outcome_char, 0 };
    o++;
    if (oc.kind == O_TORN)
      oc.arg = strtoull (o, &end, 16), o = end;
    else if (oc.kind == O_GARBAGE)
      oc.arg = strtoull (o, &end, 10), o = end;
    unsigned long long rep = 1;
    if (*o == '*')
      rep = strtoull (o + 1, &end, 10), o = end;
    if (*o == '.')
      o++;
    else if (*o)
      die ("--state %s: unexpected '%c' in the outcomes", id, *o);
    for (; rep > 0; rep--, ti++) {
      if (ti >= st->nt)
        die ("--state %s: more outcomes than the %zu physical sectors the "
             "kept writes touch", id, st->nt);
      if (!outcome_allowed (&st->t[ti], oc))
        die ("--state %s: outcome %s for physical sector %" PRIu64 " is "
             "not one torn=%s allows there", id, outcome_names[oc.kind],
             st->t[ti].k, torn_names[torn]);
      st->t[ti].o = oc;
    }
  }
  if (ti != st->nt)
    die ("--state %s: %zu outcomes for the %zu physical sectors the kept "
         "writes touch", id, ti, st->nt);
}

/* ---- the NBD server ---------------------------------------------------- */

static struct state cur;                /* the state being served */
static struct map scratch;              /* the checker's own writes */
static int listen_fd = -1;
static char sock_path[108], sock_dir[64];

static struct tsec *
state_sector (uint64_t k)
{
  size_t lo = 0, hi = cur.nt;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (cur.t[mid].k < k)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < cur.nt && cur.t[lo].k == k ? &cur.t[lo] : NULL;
}

/* Sector k as the checker sees it; -EIO if unreadable. */
static int
read_sector (uint64_t k, unsigned char *buf)
{
  uint64_t s, e;
  sector_range (k, &s, &e);
  struct sec *x = map_find (&scratch, k);
  if (x) {
    memcpy (buf, x->data, e - s);
    return 0;
  }
  struct tsec *t = state_sector (k);
  if (t) {
    if (t->unreadable)
      return -EIO;
    memcpy (buf, t->img, e - s);
    return 0;
  }
  read_durable (k, buf);
  return 0;
}

static int
serve_read (unsigned char *buf, uint64_t off, uint64_t len)
{
  unsigned char *sb = xcalloc (1, P);
  int r = 0;
  for (uint64_t k = s4k_sector_index (&g, off);
       r == 0 && k <= s4k_sector_index (&g, off + len - 1); k++) {
    uint64_t s, e;
    sector_range (k, &s, &e);
    if ((r = read_sector (k, sb)) == 0) {
      uint64_t a = off > s ? off : s, b = off + len < e ? off + len : e;
      memcpy (buf + (a - off), sb + (a - s), b - a);
    }
  }
  free (sb);
  return r;
}

/* The checker's writes: whole sectors into scratch; a partial write of
 * an unreadable sector fails as the RMW's read does, a whole one repairs
 * it. */
static int
serve_write (const unsigned char *data, uint64_t off, uint64_t len)
{
  for (uint64_t k = s4k_sector_index (&g, off);
       k <= s4k_sector_index (&g, off + len - 1); k++) {
    uint64_t s, e;
    sector_range (k, &s, &e);
    struct sec *x = map_find (&scratch, k);
    if (!x) {
      unsigned char *b = xcalloc (1, P);
      const bool whole = off <= s && off + len >= e;
      if (read_sector (k, b) == -EIO && !whole) {
        free (b);
        return -EIO;
      }
      x = map_add (&scratch, k);
      x->data = b;
    }
    const struct wr w = { 0, off, len, data, false };
    apply (&w, k, x->data);
  }
  return 0;
}

static int
read_full (int fd, void *buf, size_t n)
{
  char *p = buf;
  while (n) {
    ssize_t r = read (fd, p, n);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return -1;
    p += r, n -= r;
  }
  return 0;
}

static int
write_full (int fd, const void *buf, size_t n)
{
  const char *p = buf;
  while (n) {
    ssize_t r = send (fd, p, n, MSG_NOSIGNAL);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return -1;
    p += r, n -= r;
  }
  return 0;
}

static void
put16 (unsigned char *p, uint16_t v) { v = htobe16 (v); memcpy (p, &v, 2); }
static void
put32 (unsigned char *p, uint32_t v) { v = htobe32 (v); memcpy (p, &v, 4); }
static void
put64 (unsigned char *p, uint64_t v) { v = htobe64 (v); memcpy (p, &v, 8); }
static uint16_t
get16 (const unsigned char *p) { uint16_t v; memcpy (&v, p, 2); return be16toh (v); }
static uint32_t
get32 (const unsigned char *p) { uint32_t v; memcpy (&v, p, 4); return be32toh (v); }
static uint64_t
get64 (const unsigned char *p) { uint64_t v; memcpy (&v, p, 8); return be64toh (v); }

static const uint16_t tflags = NBD_FLAG_HAS_FLAGS | NBD_FLAG_SEND_FLUSH |
  NBD_FLAG_SEND_FUA | NBD_FLAG_SEND_TRIM | NBD_FLAG_SEND_WRITE_ZEROES |
  NBD_FLAG_CAN_MULTI_CONN;
#define MAX_REQUEST (32u << 20)

static int
opt_reply (int fd, uint32_t opt, uint32_t type, const void *data,
           uint32_t len)
{
  unsigned char h[20];
  put64 (h, NBD_REP_MAGIC);
  put32 (h + 8, opt);
  put32 (h + 12, type);
  put32 (h + 16, len);
  return write_full (fd, h, 20) || (len && write_full (fd, data, len))
         ? -1 : 0;
}

/* Fixed newstyle handshake: 0 in transmission, -1 to close. */
static int
handshake (int fd)
{
  unsigned char b[18];
  put64 (b, NBD_MAGIC);
  put64 (b + 8, NBD_IHAVEOPT);
  put16 (b + 16, NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES);
  uint32_t cflags;
  if (write_full (fd, b, 18) || read_full (fd, &cflags, 4))
    return -1;
  const bool no_zeroes = be32toh (cflags) & NBD_FLAG_C_NO_ZEROES;
  for (;;) {
    unsigned char h[16];
    if (read_full (fd, h, 16) || get64 (h) != NBD_IHAVEOPT)
      return -1;
    const uint32_t opt = get32 (h + 8), len = get32 (h + 12);
    if (len > 65536)
      return -1;
    unsigned char *data = xcalloc (1, len);
    if (len && read_full (fd, data, len)) {
      free (data);
      return -1;
    }
    int r = 1;
    if (opt == NBD_OPT_EXPORT_NAME) {
      unsigned char rep[10 + 124] = { 0 };
      put64 (rep, g.size);
      put16 (rep + 8, tflags);
      r = write_full (fd, rep, no_zeroes ? 10 : sizeof rep) ? -1 : 0;
    }
    else if (opt == NBD_OPT_GO || opt == NBD_OPT_INFO) {
      unsigned char ex[12], bs[14];
      put16 (ex, NBD_INFO_EXPORT);
      put64 (ex + 2, g.size);
      put16 (ex + 10, tflags);
      put16 (bs, NBD_INFO_BLOCK_SIZE);
      put32 (bs + 2, L);
      put32 (bs + 6, P);
      put32 (bs + 10, MAX_REQUEST);
      if (opt_reply (fd, opt, NBD_REP_INFO, ex, 12) ||
          opt_reply (fd, opt, NBD_REP_INFO, bs, 14) ||
          opt_reply (fd, opt, NBD_REP_ACK, NULL, 0))
        r = -1;
      else if (opt == NBD_OPT_GO)
        r = 0;
    }
    else if (opt == NBD_OPT_ABORT) {
      opt_reply (fd, opt, NBD_REP_ACK, NULL, 0);
      r = -1;
    }
    else if (opt == NBD_OPT_LIST) {
      unsigned char z[4] = { 0 };
      if (opt_reply (fd, opt, NBD_REP_SERVER, z, 4) ||
          opt_reply (fd, opt, NBD_REP_ACK, NULL, 0))
        r = -1;
    }
    else if (opt_reply (fd, opt, NBD_REP_ERR_UNSUP, NULL, 0))
      r = -1;
    free (data);
    if (r <= 0)
      return r;
  }
}

/* One request: 0, or -1 to close the connection. */
static int
serve_request (int fd)
{
  unsigned char h[28], rep[16];
  if (read_full (fd, h, 28) || get32 (h) != NBD_REQUEST_MAGIC)
    return -1;
  const uint16_t type = get16 (h + 6);
  const uint64_t off = get64 (h + 16);
  const uint32_t len = get32 (h + 24);
  int err = 0;
  unsigned char *buf = NULL;
  if (type == NBD_CMD_DISC)
    return -1;
  const bool io = type == NBD_CMD_READ || type == NBD_CMD_WRITE ||
                  type == NBD_CMD_TRIM || type == NBD_CMD_WRITE_ZEROES;
  if (io && (len > MAX_REQUEST || off > g.size || len > g.size - off))
    err = type == NBD_CMD_WRITE && len > MAX_REQUEST ? -1 : EINVAL;
  if (err == -1)
    return -1;
  if (type == NBD_CMD_WRITE) {
    buf = xcalloc (1, len);
    if (read_full (fd, buf, len)) {
      free (buf);
      return -1;
    }
  }
  if (!err && io && (off % L || len % L || !len))
    err = EINVAL;
  if (!err) {
    switch (type) {
    case NBD_CMD_READ:
      buf = xcalloc (1, len);
      err = -serve_read (buf, off, len);
      break;
    case NBD_CMD_WRITE:
      err = -serve_write (buf, off, len);
      break;
    case NBD_CMD_TRIM:
    case NBD_CMD_WRITE_ZEROES: {
      unsigned char *z = xcalloc (1, len);
      err = -serve_write (z, off, len);
      free (z);
      break;
    }
    case NBD_CMD_FLUSH:
      break;
    default:
      err = EINVAL;
    }
  }
  put32 (rep, NBD_SIMPLE_REPLY_MAGIC);
  put32 (rep + 4, err);
  memcpy (rep + 8, h + 8, 8);
  int r = write_full (fd, rep, 16);
  if (r == 0 && type == NBD_CMD_READ && !err)
    r = write_full (fd, buf, len);
  free (buf);
  return r;
}

static void
cleanup_socket (void)
{
  if (sock_path[0])
    unlink (sock_path);
  if (sock_dir[0])
    rmdir (sock_dir);
}

static void
open_socket (void)
{
  const char *tmp = getenv ("TMPDIR");
  snprintf (sock_dir, sizeof sock_dir, "%s/sect4k-crash.XXXXXX",
            tmp && strlen (tmp) < 32 ? tmp : "/tmp");
  if (!mkdtemp (sock_dir))
    die ("cannot create a directory for the socket: %s", strerror (errno));
  snprintf (sock_path, sizeof sock_path, "%s/nbd.sock", sock_dir);
  atexit (cleanup_socket);
  struct sockaddr_un a = { .sun_family = AF_UNIX };
  snprintf (a.sun_path, sizeof a.sun_path, "%s", sock_path);
  listen_fd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd < 0 || bind (listen_fd, (struct sockaddr *) &a, sizeof a) ||
      listen (listen_fd, 64))
    die ("%s: %s", sock_path, strerror (errno));
}

/* ---- running the checker ---------------------------------------------- */

enum result { R_CONSISTENT, R_FAILED, R_TIMEOUT, R_SIGNAL, R_EXEC };
static const char *const result_names[] =
  { "consistent", "failed", "not checked", "not checked", "not checked" };

struct run {
  enum result result;
  int status;                   /* exit status or signal */
};

/* The start of what the checker printed (stdout and stderr), for the
 * report. */
#define OUTPUT_MAX 2048
static char checker_out[OUTPUT_MAX + 1];
static size_t checker_out_len;

static double
now_s (void)
{
  struct timespec t;
  clock_gettime (CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

#define MAX_CONNS 64

static void
drain_output (int fd)
{
  char buf[4096];
  ssize_t n;
  while ((n = read (fd, buf, sizeof buf)) > 0) {
    size_t take = (size_t) n < OUTPUT_MAX - checker_out_len
                  ? (size_t) n : OUTPUT_MAX - checker_out_len;
    memcpy (checker_out + checker_out_len, buf, take);
    checker_out_len += take;
  }
  checker_out[checker_out_len] = '\0';
}

/* Serves the current state while the checker runs. */
static struct run
run_checker (const char *id)
{
  char uri[200];
  snprintf (uri, sizeof uri, "nbd+unix:///?socket=%s", sock_path);
  int pfd[2], ofd[2];
  if (pipe2 (pfd, O_CLOEXEC) || pipe2 (ofd, O_CLOEXEC | O_NONBLOCK))
    die ("pipe: %s", strerror (errno));
  checker_out_len = 0;
  pid_t pid = fork ();
  if (pid < 0)
    die ("fork: %s", strerror (errno));
  if (pid == 0) {
    setpgid (0, 0);
    setenv ("SECT4K_URI", uri, 1);
    setenv ("SECT4K_STATE", id, 1);
    close (pfd[0]);
    dup2 (ofd[1], 1);
    dup2 (ofd[1], 2);
    fcntl (1, F_SETFL, 0);
    execvp (checker[0], checker);
    int e = errno;
    if (write (pfd[1], &e, sizeof e) < 0)
      _exit (127);
    _exit (127);
  }
  setpgid (pid, pid);
  close (pfd[1]);
  close (ofd[1]);
  int pidfd = syscall (SYS_pidfd_open, pid, 0);
  if (pidfd < 0)
    die ("pidfd_open: %s", strerror (errno));
  int conns[MAX_CONNS], nconns = 0;
  const double deadline = timeout_s > 0 ? now_s () + timeout_s : 0;
  bool exited = false, timed_out = false;
  while (!exited) {
    struct pollfd fds[MAX_CONNS + 3];
    fds[0] = (struct pollfd) { pidfd, POLLIN, 0 };
    fds[1] = (struct pollfd) { listen_fd, POLLIN, 0 };
    fds[2 + nconns] = (struct pollfd) { ofd[0], POLLIN, 0 };
    for (int i = 0; i < nconns; i++)
      fds[2 + i] = (struct pollfd) { conns[i], POLLIN, 0 };
    int wait_ms = -1;
    if (deadline) {
      double left = deadline - now_s ();
      if (left <= 0) {
        timed_out = true;
        break;
      }
      wait_ms = (int) (left * 1000) + 1;
    }
    int n = poll (fds, 3 + nconns, wait_ms);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      die ("poll: %s", strerror (errno));
    const int polled = nconns;
    if (fds[0].revents)
      exited = true;
    if (fds[2 + nconns].revents)
      drain_output (ofd[0]);
    if (fds[1].revents & POLLIN) {
      int c = accept4 (listen_fd, NULL, NULL, SOCK_CLOEXEC);
      if (c >= 0) {
        /* A stalled client must not stall us past the timeout. */
        struct timeval tv = { 5, 0 };
        setsockopt (c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt (c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        if (nconns == MAX_CONNS || handshake (c))
          close (c);
        else
          conns[nconns++] = c;
      }
    }
    for (int i = polled - 1; i >= 0; i--)
      if (fds[2 + i].revents &&
          serve_request (conns[i])) {
        close (conns[i]);
        conns[i] = conns[--nconns];
      }
  }
  if (timed_out)
    kill (-pid, SIGKILL);
  int status;
  while (waitpid (pid, &status, 0) < 0 && errno == EINTR)
    ;
  kill (-pid, SIGKILL);                 /* whatever it left running */
  for (int i = 0; i < nconns; i++)
    close (conns[i]);
  close (pidfd);
  drain_output (ofd[0]);
  close (ofd[0]);
  int exec_errno = 0;
  bool exec_failed = read (pfd[0], &exec_errno, sizeof exec_errno) ==
                     sizeof exec_errno;
  close (pfd[0]);
  map_clear (&scratch);
  if (exec_failed)
    die ("cannot run the checker %s: %s", checker[0], strerror (exec_errno));
  if (timed_out)
    return (struct run) { R_TIMEOUT, 0 };
  if (WIFSIGNALED (status))
    return (struct run) { R_SIGNAL, WTERMSIG (status) };
  return (struct run) { WEXITSTATUS (status) ? R_FAILED : R_CONSISTENT,
                        WEXITSTATUS (status) };
}

/* ---- the report -------------------------------------------------------- */

static void
json_str (FILE *fp, const char *s)
{
  fputc ('"', fp);
  for (; *s; s++) {
    unsigned char c = *s;
    if (c == '"' || c == '\\')
      fprintf (fp, "\\%c", c);
    else if (c < 0x20)
      fprintf (fp, "\\u%04x", c);
    else
      fputc (c, fp);
  }
  fputc ('"', fp);
}

static char *
reason_of (struct run r)
{
  char *s = NULL;
  switch (r.result) {
  case R_TIMEOUT:
    if (asprintf (&s, "timeout: the checker ran past %gs and was killed",
                  timeout_s) < 0)
      s = NULL;
    break;
  case R_SIGNAL:
    if (asprintf (&s, "the checker crashed: killed by signal %d (%s)",
                  r.status, strsignal (r.status)) < 0)
      s = NULL;
    break;
  default:
    break;
  }
  return s;
}

/* The LBAs of sector t whose contents are neither the old nor the new. */
static void
damaged_lbas (const struct tsec *t, uint64_t **out, size_t *n)
{
  uint64_t s, e;
  sector_range (t->k, &s, &e);
  for (unsigned l = 0; l < t->lbas; l++) {
    const uint64_t o = (uint64_t) l * L;
    if (t->unreadable || (memcmp (t->img + o, t->old + o, L) &&
                          memcmp (t->img + o, t->new + o, L))) {
      *out = xrealloc (*out, (*n + 1) * sizeof **out);
      (*out)[(*n)++] = s / L + l;
    }
  }
}

static bool
lba_written (const struct state *st, uint64_t lba)
{
  for (size_t v = 0; v < st->nvol; v++)
    if (bit (st->kept, v)) {
      const struct wr *w = &writes[st->vol[v]];
      if (lba * L >= w->off && lba * L < w->off + w->len)
        return true;
    }
  return false;
}

static void
print_u64s (FILE *fp, const uint64_t *v, size_t n)
{
  fputc ('[', fp);
  for (size_t i = 0; i < n; i++)
    fprintf (fp, "%s%" PRIu64, i ? ", " : "", v[i]);
  fputc (']', fp);
}

/* The writes kept whole, torn (a sector of theirs not kept) and dropped,
 * by log entry number. */
static void
classify (const struct state *st, uint64_t **kept, size_t *nk,
          uint64_t **tornw, size_t *ntw, uint64_t **dropped, size_t *nd)
{
  *nk = *ntw = *nd = 0;
  *kept = xcalloc (st->nvol, 8);
  *tornw = xcalloc (st->nvol, 8);
  *dropped = xcalloc (st->nvol, 8);
  for (size_t v = 0; v < st->nvol; v++) {
    const struct wr *w = &writes[st->vol[v]];
    if (!bit (st->kept, v)) {
      (*dropped)[(*nd)++] = w->entry;
      continue;
    }
    bool whole = true;
    for (size_t i = 0; i < st->nt; i++)
      if (st->t[i].k >= first_sector (w) && st->t[i].k <= last_sector (w) &&
          st->t[i].o.kind != O_KEPT)
        whole = false;
    if (whole)
      (*kept)[(*nk)++] = w->entry;
    else
      (*tornw)[(*ntw)++] = w->entry;
  }
}

struct tally {
  uint64_t states, checked, consistent, failed, not_checked;
};

/* One state's report entry; one summary line if it failed or was not
 * checked. */
static void
report_state (FILE *fp, FILE *sum, const char *id, struct run r,
              bool first)
{
  const struct cp *c = &cps[cur.cpi];
  fprintf (fp, "%s\n  {\"id\": ", first ? "" : ",");
  json_str (fp, id);
  fprintf (fp, ", \"crash_point\": %zu, \"before_entry\": %" PRIu64
           ", \"result\": \"%s\"", cur.cpi, c->before,
           result_names[r.result]);
  char *why = reason_of (r);
  if (why) {
    fprintf (fp, ", \"reason\": ");
    json_str (fp, why);
  }
  if (r.result == R_FAILED)
    fprintf (fp, ", \"exit_status\": %d", r.status);
  if (r.result != R_CONSISTENT) {
    fprintf (fp, ", \"output\": ");
    json_str (fp, checker_out);
  }
  if (r.result != R_CONSISTENT) {
    uint64_t *kept, *tw, *dr, *dmg = NULL, *nb = NULL;
    size_t nk, ntw, nd, ndmg = 0, nnb = 0;
    classify (&cur, &kept, &nk, &tw, &ntw, &dr, &nd);
    fprintf (fp, ",\n   \"kept\": ");
    print_u64s (fp, kept, nk);
    fprintf (fp, ", \"torn\": ");
    print_u64s (fp, tw, ntw);
    fprintf (fp, ", \"dropped\": ");
    print_u64s (fp, dr, nd);
    fprintf (fp, ",\n   \"sectors\": [");
    const char *sep = "";
    for (size_t i = 0; i < cur.nt; i++) {
      const struct tsec *t = &cur.t[i];
      if (t->o.kind == O_KEPT)
        continue;
      uint64_t s, e;
      sector_range (t->k, &s, &e);
      fprintf (fp, "%s{\"sector\": %" PRIu64 ", \"lba\": %" PRIu64
               ", \"lbas\": %u, \"outcome\": \"%s\"", sep, t->k, s / L,
               t->lbas, outcome_names[t->o.kind]);
      sep = ", ";
      if (t->o.kind == O_TORN) {
        fprintf (fp, ", \"new_lbas\": [");
        for (unsigned l = 0, n = 0; l < t->lbas; l++)
          if (t->o.arg >> l & 1)
            fprintf (fp, "%s%" PRIu64, n++ ? ", " : "", s / L + l);
        fputc (']', fp);
      }
      if (t->o.kind == O_GARBAGE)
        fprintf (fp, ", \"garbage_lba\": %" PRIu64, s / L + t->o.arg);
      size_t before = ndmg;
      damaged_lbas (t, &dmg, &ndmg);
      fprintf (fp, ", \"damaged_lbas\": ");
      print_u64s (fp, dmg + before, ndmg - before);
      fputc ('}', fp);
    }
    for (size_t i = 0; i < ndmg; i++)
      if (!lba_written (&cur, dmg[i])) {
        nb = xrealloc (nb, (nnb + 1) * sizeof *nb);
        nb[nnb++] = dmg[i];
      }
    fprintf (fp, "],\n   \"damaged_lbas\": ");
    print_u64s (fp, dmg, ndmg);
    fprintf (fp, ", \"neighbours_damaged\": ");
    print_u64s (fp, nb, nnb);
    if (r.result == R_FAILED)
      fprintf (sum, "FAILED %s (exit %d): before log entry %" PRIu64, id,
               r.status, c->before);
    else
      fprintf (sum, "NOT CHECKED %s: %s", id, why);
    fprintf (sum, "\n  kept ");
    print_u64s (sum, kept, nk);
    fprintf (sum, ", torn ");
    print_u64s (sum, tw, ntw);
    fprintf (sum, ", dropped ");
    print_u64s (sum, dr, nd);
    fprintf (sum, " (log entries); damaged LBAs ");
    print_u64s (sum, dmg, ndmg);
    if (nnb) {
      fprintf (sum, ", of which no kept write targeted ");
      print_u64s (sum, nb, nnb);
    }
    fputc ('\n', sum);
    if (checker_out_len) {
      const char *nl = strchr (checker_out, '\n');
      fprintf (sum, "  checker: %.*s\n",
               (int) (nl ? nl - checker_out : (long) checker_out_len),
               checker_out);
    }
    free (kept), free (tw), free (dr), free (dmg), free (nb);
  }
  free (why);
  fputc ('}', fp);
}

/* ---- exploring --------------------------------------------------------- */

struct hset {
  uint64_t *v;
  size_t cap, n;
};

/* True if h was new. */
static bool
hset_add (struct hset *s, uint64_t h)
{
  if (2 * (s->n + 1) > s->cap) {
    struct hset o = *s;
    s->cap = o.cap ? 2 * o.cap : 256;
    s->v = xcalloc (s->cap, 8);
    s->n = 0;
    for (size_t i = 0; i < o.cap; i++)
      if (o.v[i])
        hset_add (s, o.v[i]);
    free (o.v);
  }
  h |= 1;                               /* 0 marks an empty slot */
  for (size_t i = hash_k (h, s->cap);; i = (i + 1) & (s->cap - 1)) {
    if (s->v[i] == h)
      return false;
    if (!s->v[i]) {
      s->v[i] = h;
      s->n++;
      return true;
    }
  }
}

static bool is_tty;
static double last_progress;

static void
progress (struct tally *t, bool final)
{
  if (!is_tty)
    return;
  double n = now_s ();
  if (!final && n - last_progress < 0.1)
    return;
  last_progress = n;
  fprintf (stderr, "\r" PROG ": crash point %zu/%zu, %" PRIu64 " states: %"
           PRIu64 " consistent, %" PRIu64 " failed, %" PRIu64 " not checked"
           "%s", cur.cpi + 1, ncps, t->states, t->consistent, t->failed,
           t->not_checked, final ? "\n" : "");
}

static FILE *rep_fp, *sum_fp;
static struct tally tally;

static void
check_state (void)
{
  state_images (&cur);
  char *id = state_id_of (&cur);
  struct run r = run_checker (id);
  tally.states++;
  if (r.result == R_CONSISTENT)
    tally.checked++, tally.consistent++;
  else if (r.result == R_FAILED)
    tally.checked++, tally.failed++;
  else
    tally.not_checked++;
  report_state (rep_fp, sum_fp, id, r, tally.states == 1);
  free (id);
  progress (&tally, false);
}

/* Total states of the current kept set, saturating. */
static uint64_t
count_outcomes (void)
{
  uint64_t n = 1;
  for (size_t i = 0; i < cur.nt; i++) {
    uint64_t k = n_outcomes (&cur.t[i]);
    n = n > UINT64_MAX / k ? UINT64_MAX : n * k;
  }
  return n;
}

#define EXHAUSTIVE_MAX_WRITES 20

/* Every state of the crash point, if at most the limit, else seeded
 * samples.  Either way in a fixed order. */
static void
explore_cp (size_t cpi)
{
  struct hset seen = { 0 };
  enter_cp (&cps[cpi]);
  state_set_cp (&cur, cpi);
  const size_t m = cur.nvol;
  bool exhaustive = m <= EXHAUSTIVE_MAX_WRITES;
  uint64_t total = 0;
  if (exhaustive) {
    for (uint64_t s = 0; s < (1ULL << m) && total != UINT64_MAX; s++) {
      cur.kept[0] = s;
      state_build (&cur);
      uint64_t n = count_outcomes ();
      total = total > UINT64_MAX - n ? UINT64_MAX : total + n;
      if (states_limit && total > states_limit)
        break;
    }
    if (states_limit && total > states_limit)
      exhaustive = false;
  }
  if (!exhaustive && !states_limit)
    die ("crash point %zu: %zu unflushed writes and their outcomes are too "
         "many for --states all; give a number", cpi, m);
  if (exhaustive) {
    for (uint64_t s = 0; s < (1ULL << m); s++) {
      memset (cur.kept, 0, bitwords (m) * 8);
      cur.kept[0] = s;
      state_build (&cur);
      uint64_t *radix = xcalloc (cur.nt + 1, 8);
      for (;;) {
        for (size_t i = 0; i < cur.nt; i++)
          cur.t[i].o = outcome_at (&cur.t[i], radix[i]);
        state_images (&cur);
        if (hset_add (&seen, state_hash (&cur)))
          check_state ();
        size_t i = cur.nt;
        while (i > 0 && ++radix[i - 1] == n_outcomes (&cur.t[i - 1]))
          radix[--i] = 0;
        if (i == 0)
          break;
      }
      free (radix);
    }
  }
  else {
    uint64_t x = mix64 (seed ^ mix64 (cpi + 1));
    uint64_t got = 0;
    for (uint64_t attempt = 0; got < states_limit &&
         attempt < 8 * states_limit; attempt++) {
      memset (cur.kept, 0, bitwords (m) * 8);
      /* First nothing kept, then everything kept whole, then random. */
      for (size_t v = 0; v < m && attempt > 0; v++) {
        x = mix64 (x);
        if (attempt == 1 || x >> 63)
          cur.kept[v / 64] |= 1ULL << (v % 64);
      }
      state_build (&cur);
      for (size_t i = 0; i < cur.nt; i++) {
        x = mix64 (x);
        uint64_t n = n_outcomes (&cur.t[i]);
        cur.t[i].o = outcome_at (&cur.t[i], attempt <= 1 ? 0 : x % n);
      }
      state_images (&cur);
      if (hset_add (&seen, state_hash (&cur))) {
        check_state ();
        got++;
      }
    }
  }
  free (seen.v);
}

/* ---- main -------------------------------------------------------------- */

static void
usage (FILE *fp)
{
  fprintf (fp,
"Usage: " PROG " LOG --geometry G [--base IMAGE] [--until MARK]\n"
"         [--states N|all] [--torn POLICY] [--seed S] [--timeout SECS]\n"
"         [--state ID [--output IMAGE]] [--report FILE.json]\n"
"         -- CHECKER ARGS...\n"
"Every crash state of the write LOG (write-log=), each served over NBD to\n"
"CHECKER with $SECT4K_URI and $SECT4K_STATE; exit 0 means consistent.\n"
"  --geometry G    512n, 512e, 512e-xp, 4kn and/or logical=, physical=,\n"
"                  alignment-offset=, size= (comma-separated; size from\n"
"                  the log or --base if not given)\n"
"  --base IMAGE    the device before the log (default: zeroes)\n"
"  --until MARK    stop at the log's mark MARK\n"
"  --states N|all  states per crash point: all of them if at most N,\n"
"                  else N seeded samples (default 256)\n"
"  --torn POLICY   none, sector, unreadable, garbage or zero: what an\n"
"                  interrupted physical sector holds (default sector)\n"
"  --seed S        the samples' seed (default 0)\n"
"  --timeout SECS  per state; 0: none (default 60)\n"
"  --state ID      only that state: run CHECKER on it, write it with\n"
"                  --output IMAGE, or without either serve it until\n"
"                  interrupted\n"
"  --report FILE   the JSON report (docs/crash-report.schema.json)\n"
"See sect4k-crash(1).\n");
}

static void
parse_geometry_arg (void)
{
  struct s4k_config c;
  char err[256];
  s4k_config_init (&c);
  char *s = strdup (geometry_arg), *save = NULL;
  for (char *tok = strtok_r (s, ",", &save); tok;
       tok = strtok_r (NULL, ",", &save)) {
    char *eq = strchr (tok, '=');
    const char *key = eq ? tok : "model", *val = eq ? eq + 1 : tok;
    if (eq)
      *eq = '\0';
    if (strcmp (key, "model") && strcmp (key, "size") &&
        strcmp (key, "logical") && strcmp (key, "physical") &&
        strcmp (key, "alignment-offset") && strcmp (key, "lowest-aligned"))
      die ("--geometry %s: %s= is not a geometry key (model, size, "
           "logical, physical, alignment-offset, lowest-aligned)",
           geometry_arg, key);
    if (s4k_config_set (&c, key, val, err, sizeof err))
      die ("--geometry %s: %s", geometry_arg, err);
  }
  free (s);
  const struct s4k_wlog_info *info = s4k_wlog_info (reader);
  if (!c.have_size) {
    uint64_t size = info->known ? info->geom.size : base_size;
    if (!size)
      die ("--geometry %s: no size=, and neither the log nor --base gives "
           "one", geometry_arg);
    char v[32];
    snprintf (v, sizeof v, "%" PRIu64, size);
    s4k_config_set (&c, "size", v, err, sizeof err);
  }
  if (s4k_config_finish (&c, err, sizeof err))
    die ("--geometry %s: %s", geometry_arg, err);
  g = c.geom;
  L = g.logical;
  P = g.physical;
  if (info->known && (info->geom.size != g.size ||
                      info->geom.logical != g.logical ||
                      info->geom.physical != g.physical ||
                      info->geom.alignment != g.alignment))
    die ("%s: the log records another geometry (size=%" PRIu64
         " logical=%" PRIu32 " physical=%" PRIu32 " alignment-offset=%"
         PRIu32 ") than --geometry %s (size=%" PRIu64 " logical=%" PRIu32
         " physical=%" PRIu32 " alignment-offset=%" PRIu32 ")", log_path,
         info->geom.size, info->geom.logical, info->geom.physical,
         info->geom.alignment, geometry_arg, g.size, L, P, g.alignment);
  if (base_size > g.size)
    die ("--base %s: %" PRIu64 " bytes, larger than the device (%" PRIu64
         ")", base_path, base_size, g.size);
}

static void
write_output (void)
{
  int fd = open (output, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0 || ftruncate (fd, g.size))
    die ("--output %s: %s", output, strerror (errno));
  unsigned char *buf = xcalloc (1, P);
  uint64_t nsec = s4k_sector_count (&g), unreadable = 0;
  for (uint64_t k = 0; k < nsec; k++) {
    uint64_t s, e;
    sector_range (k, &s, &e);
    bool touched = (base_fd >= 0 && s < base_size) ||
                   map_find (&flushed, k) || map_find (&cpmap, k) ||
                   state_sector (k);
    if (!touched)
      continue;
    if (read_sector (k, buf) == -EIO) {
      unreadable++;
      read_durable (k, buf);
      fprintf (stderr, PROG ": --output %s: physical sector %" PRIu64
               " (LBAs %" PRIu64 "-%" PRIu64 ") is unreadable in this "
               "state; the image holds its old contents\n", output, k,
               s / L, (e - 1) / L);
    }
    if (pwrite (fd, buf, e - s, s) != (ssize_t) (e - s))
      die ("--output %s: %s", output, strerror (errno));
  }
  if (close (fd))
    die ("--output %s: %s", output, strerror (errno));
  free (buf);
}

static volatile sig_atomic_t stop;
static void on_signal (int sig) { (void) sig; stop = 1; }

int
main (int argc, char **argv)
{
  static const struct option opts[] = {
    { "geometry", required_argument, NULL, 'g' },
    { "base", required_argument, NULL, 'b' },
    { "until", required_argument, NULL, 'u' },
    { "states", required_argument, NULL, 'n' },
    { "torn", required_argument, NULL, 't' },
    { "seed", required_argument, NULL, 's' },
    { "timeout", required_argument, NULL, 'T' },
    { "state", required_argument, NULL, 'i' },
    { "output", required_argument, NULL, 'o' },
    { "report", required_argument, NULL, 'r' },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
  };
  int ch;
  char *end;
  /* Everything after the first -- is the checker's. */
  for (int i = 1; i < argc; i++)
    if (strcmp (argv[i], "--") == 0) {
      checker = argv[i + 1] ? &argv[i + 1] : NULL;
      argv[i] = NULL;
      argc = i;
      break;
    }
  while ((ch = getopt_long (argc, argv, "h", opts, NULL)) != -1) {
    switch (ch) {
    case 'g': geometry_arg = optarg; break;
    case 'b': base_path = optarg; break;
    case 'u': until_mark = optarg; break;
    case 'n':
      if (strcmp (optarg, "all") == 0)
        states_limit = 0;
      else if ((states_limit = strtoull (optarg, &end, 10)) == 0 || *end)
        die ("--states %s: a positive number or all", optarg);
      break;
    case 't': {
      size_t i;
      for (i = 0; i < 5 && strcmp (optarg, torn_names[i]); i++)
        ;
      if (i == 5)
        die ("--torn %s: one of none, sector, unreadable, garbage, zero",
             optarg);
      torn = i;
      break;
    }
    case 's':
      errno = 0;
      seed = strtoull (optarg, &end, 0);
      if (errno || *end || end == optarg)
        die ("--seed %s: not a number", optarg);
      break;
    case 'T':
      timeout_s = strtod (optarg, &end);
      if (*end || end == optarg || timeout_s < 0)
        die ("--timeout %s: a number of seconds (0: none)", optarg);
      break;
    case 'i': state_id = optarg; break;
    case 'o': output = optarg; break;
    case 'r': report_path = optarg; break;
    case 'h': usage (stdout); return 0;
    default: usage (stderr); return 2;
    }
  }
  if (optind < argc)
    log_path = argv[optind++];
  if (optind < argc)
    die ("%s: unexpected after LOG (the checker goes after --)",
         argv[optind]);
  if (!log_path)
    die ("no LOG given (" PROG " --help)");
  if (!geometry_arg)
    die ("--geometry is required (e.g. --geometry 512e)");
  if (!checker && !state_id)
    die ("no checker given (" PROG " LOG --geometry G -- CHECKER ARGS...)");
  if (output && !state_id)
    die ("--output needs --state ID");
  char err[512];
  if (s4k_wlog_open (&reader, log_path, 0, err, sizeof err))
    die ("%s", err);
  if (base_path) {
    struct stat st;
    if ((base_fd = open (base_path, O_RDONLY | O_CLOEXEC)) < 0 ||
        fstat (base_fd, &st))
      die ("--base %s: %s", base_path, strerror (errno));
    base_size = st.st_size;
  }
  parse_geometry_arg ();
  read_log ();
  signal (SIGPIPE, SIG_IGN);
  is_tty = isatty (2);

  if (state_id) {
    state_parse (&cur, state_id);
    for (size_t i = 0; i <= cur.cpi; i++)
      enter_cp (&cps[i]);
    state_images (&cur);
    char *canon = state_id_of (&cur);
    if (output) {
      write_output ();
      fprintf (stderr, PROG ": state %s written to %s\n", canon, output);
    }
    if (!checker) {
      if (output) {
        free (canon);
        return 0;
      }
      open_socket ();
      printf ("nbd+unix:///?socket=%s\n", sock_path);
      fflush (stdout);
      signal (SIGINT, on_signal);
      signal (SIGTERM, on_signal);
      /* Serve it until interrupted: the checker is whoever connects. */
      char *fake[] = { "sleep", "infinity", NULL };
      checker = fake;
      timeout_s = 0;
      while (!stop)
        run_checker (canon);
      free (canon);
      return 0;
    }
    open_socket ();
    struct run r = run_checker (canon);
    char *why = reason_of (r);
    printf (PROG ": state %s: %s%s%s\n", canon, result_names[r.result],
            why ? ": " : "", why ? why : "");
    free (why);
    free (canon);
    return r.result == R_CONSISTENT ? 0 : r.result == R_FAILED ? 1 : 3;
  }

  open_socket ();
  char *repbuf = NULL, *sumbuf = NULL;
  size_t replen = 0, sumlen = 0;
  rep_fp = open_memstream (&repbuf, &replen);
  sum_fp = open_memstream (&sumbuf, &sumlen);
  if (!rep_fp || !sum_fp)
    die ("out of memory");
  const double t0 = now_s ();
  for (size_t i = 0; i < ncps; i++)
    explore_cp (i);
  const double secs = now_s () - t0;
  progress (&tally, true);
  fclose (rep_fp);
  fclose (sum_fp);

  FILE *out = stdout;
  if (report_path && !(out = fopen (report_path, "w")))
    die ("--report %s: %s", report_path, strerror (errno));
  if (report_path || 1) {
    FILE *fp = report_path ? out : NULL;
    if (fp) {
      fprintf (fp, "{\"schema\": \"sect4k-crash/1\", \"log\": ");
      json_str (fp, log_path);
      fprintf (fp, ", \"log_entries\": %" PRIu64 ",\n \"geometry\": "
               "{\"size\": %" PRIu64 ", \"logical\": %" PRIu32 ", "
               "\"physical\": %" PRIu32 ", \"alignment_offset\": %" PRIu32
               "},\n \"base\": ", log_entries, g.size, L, P, g.alignment);
      if (base_path)
        json_str (fp, base_path);
      else
        fprintf (fp, "null");
      fprintf (fp, ", \"until\": ");
      if (until_mark)
        json_str (fp, until_mark);
      else
        fprintf (fp, "null");
      fprintf (fp, ", \"torn\": \"%s\", \"seed\": %" PRIu64 ", "
               "\"states_per_crash_point\": ", torn_names[torn], seed);
      if (states_limit)
        fprintf (fp, "%" PRIu64, states_limit);
      else
        fprintf (fp, "\"all\"");
      fprintf (fp, ", \"timeout\": %g,\n \"checker\": [", timeout_s);
      for (char **a = checker; *a; a++) {
        fprintf (fp, "%s", a == checker ? "" : ", ");
        json_str (fp, *a);
      }
      fprintf (fp, "],\n \"crash_points\": %zu,\n \"summary\": {\"states\": "
               "%" PRIu64 ", \"checked\": %" PRIu64 ", \"consistent\": %"
               PRIu64 ", \"failed\": %" PRIu64 ", \"not_checked\": %" PRIu64
               "},\n \"states\": [%s\n ]}\n", ncps, tally.states,
               tally.checked, tally.consistent, tally.failed,
               tally.not_checked, repbuf);
      if (fclose (fp))
        die ("--report %s: %s", report_path, strerror (errno));
    }
  }
  printf (PROG ": %s, geometry logical=%" PRIu32 " physical=%" PRIu32
          " alignment-offset=%" PRIu32 ", torn=%s: %zu crash points, %"
          PRIu64 " states in %.1fs: %" PRIu64 " checked (%" PRIu64
          " consistent, %" PRIu64 " failed), %" PRIu64 " not checked\n",
          log_path, L, P, g.alignment, torn_names[torn], ncps, tally.states,
          secs, tally.checked, tally.consistent, tally.failed,
          tally.not_checked);
  fwrite (sumbuf, 1, sumlen, stdout);
  free (repbuf);
  free (sumbuf);
  return tally.failed ? 1 : tally.not_checked ? 3 : 0;
}
