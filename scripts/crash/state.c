/* SPDX-License-Identifier: BSD-3-Clause */
/* sect4k-crash: a state: the kept writes, each sector's outcome, the images
 * (the files: crash.h). */
#include "crash.h"

const char outcome_char[] = "krtugz";
const char *const outcome_names[] =
  { "kept", "reverted", "torn", "unreadable", "garbage", "zeroed" };

bool
bit (const uint64_t *b, size_t i)
{
  return b[i / 64] >> (i % 64) & 1;
}

size_t
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

void
state_set_cp (struct state *st, size_t cpi)
{
  const struct cp *c = &cps[cpi];
  st->cpi = cpi;
  st->nvol = 0;
  st->vol = xrealloc (st->vol, (c->nw - c->f + 1) * sizeof *st->vol);
  for (size_t i = c->f; i < c->nw; i++)
    if (!durable_at (&writes[i], c))
      st->vol[st->nvol++] = i;
  st->kept = xrealloc (st->kept, bitwords (st->nvol) * 8);
  memset (st->kept, 0, bitwords (st->nvol) * 8);
  /* The writes outside sequential zones (a host-aware zone NON_SEQ at
   * the crash point is one: its sectors are cut one by one), and each
   * zone's in log order. */
  for (size_t g = 0; g < st->nzg; g++)
    free (st->zg[g].v);
  st->nfree = st->nzg = 0;
  st->freev = xrealloc (st->freev, (st->nvol + 1) * sizeof *st->freev);
  st->zg = xrealloc (st->zg, (st->nvol + 1) * sizeof *st->zg);
  for (size_t v = 0; v < st->nvol; v++) {
    const int64_t z = writes[st->vol[v]].zone;
    if (z < 0 || nonseq_at (z, c->before)) {
      st->freev[st->nfree++] = v;
      continue;
    }
    size_t g = 0;
    while (g < st->nzg && st->zg[g].zone != z)
      g++;
    if (g == st->nzg)
      st->zg[st->nzg++] = (struct zgroup) { z, NULL, 0, 0 };
    struct zgroup *zg = &st->zg[g];
    zg->v = xrealloc (zg->v, (zg->n + 1) * sizeof *zg->v);
    zg->v[zg->n++] = v;
  }
}

/* ---- kept sets: any subset of the writes outside sequential zones, a
 * prefix of each zone's ------------------------------------------------- */

static uint64_t
sat_mul (uint64_t a, uint64_t b)
{
  return b && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

uint64_t
n_kept_sets (const struct state *st)
{
  uint64_t n = st->nfree >= 64 ? UINT64_MAX : 1ULL << st->nfree;
  for (size_t g = 0; g < st->nzg; g++)
    n = sat_mul (n, st->zg[g].n + 1);
  return n;
}

static void
keep (struct state *st, size_t v)
{
  st->kept[v / 64] |= 1ULL << (v % 64);
}

/* The idx-th kept set: the free writes' subset in binary order (bit i:
 * the i-th), then each zone's prefix length, the first zone varying
 * fastest.  A log without sequential zones: subset idx of the writes. */
void
kept_set_at (struct state *st, uint64_t idx)
{
  memset (st->kept, 0, bitwords (st->nvol) * 8);
  for (size_t i = 0; i < st->nfree; i++)
    if (i < 64 && idx >> i & 1)
      keep (st, st->freev[i]);
  idx = st->nfree >= 64 ? 0 : idx >> st->nfree;
  for (size_t g = 0; g < st->nzg; g++) {
    struct zgroup *zg = &st->zg[g];
    zg->p = idx % (zg->n + 1);
    idx /= zg->n + 1;
    for (size_t j = 0; j < zg->p; j++)
      keep (st, zg->v[j]);
  }
}

/* A seeded kept set: every write (all), or each free one with
 * probability 1/2 and a prefix of each zone's of uniform length. */
void
kept_set_random (struct state *st, uint64_t *x, bool all)
{
  memset (st->kept, 0, bitwords (st->nvol) * 8);
  for (size_t i = 0; i < st->nfree; i++) {
    *x = mix64 (*x);
    if (all || *x >> 63)
      keep (st, st->freev[i]);
  }
  for (size_t g = 0; g < st->nzg; g++) {
    struct zgroup *zg = &st->zg[g];
    *x = mix64 (*x);
    zg->p = all ? zg->n : *x % (zg->n + 1);
    for (size_t j = 0; j < zg->p; j++)
      keep (st, zg->v[j]);
  }
}

static void
state_free_sectors (struct state *st)
{
  for (size_t i = 0; i < st->nt; i++) {
    free (st->t[i].old);
    free (st->t[i].new);
    free (st->t[i].img);
    free (st->t[i].bases);
    free (st->t[i].xb);
    free (st->t[i].xdiff);
  }
  st->nt = 0;
}

/* Bit i: LBA i of the sector differs between img and new. */
static uint64_t
lba_diff (const struct tsec *t, const unsigned char *img)
{
  uint64_t d = 0;
  for (unsigned l = 0; l < t->lbas && l < 64; l++)
    if (memcmp (img + (uint64_t) l * L, t->new + (uint64_t) l * L, L))
      d |= 1ULL << l;
  return d;
}

/* From the kept set: the touched sectors with their old and new images
 * (outcomes not chosen yet). */
void
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
    in[i - c->f] = durable_at (&writes[i], c);
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
    t->o = (struct outcome) { O_KEPT, 0, 0 };
    t->unreadable = false;
    /* Its kept unflushed writes, and the last atomic one among them:
     * reverting or tearing the sector to a base without that write would
     * tear it (dropping it whole is the kept set without it). */
    t->nk = t->amin = 0;
    for (size_t j = c->f; j < c->nw; j++)
      if (in[j - c->f] && !durable_at (&writes[j], c) &&
          first_sector (&writes[j]) <= t->k &&
          last_sector (&writes[j]) >= t->k) {
        t->nk++;
        if (writes[j].atomic)
          t->amin = t->nk;
      }
    /* Base b: the durable-early writes and the first b kept ones. */
    t->bases = xcalloc (t->nk + 1, P);
    for (unsigned b = 0; b <= t->nk; b++) {
      unsigned char *img = t->bases + (uint64_t) b * P;
      unsigned rank = 0;
      read_flushed (t->k, img);
      for (size_t j = c->f; j < c->nw; j++)
        if (in[j - c->f] && first_sector (&writes[j]) <= t->k &&
            last_sector (&writes[j]) >= t->k &&
            (durable_at (&writes[j], c) || rank++ < b))
          apply (&writes[j], t->k, img);
    }
    memcpy (t->old, t->bases, e - s);
    memcpy (t->new, t->bases + (uint64_t) t->nk * P, e - s);
    t->diff = lba_diff (t, t->old);
    /* The bases past old worth enumerating: distinct images only. */
    t->xb = xcalloc (t->nk + 1, sizeof *t->xb);
    t->xdiff = xcalloc (t->nk + 1, sizeof *t->xdiff);
    t->nxb = 0;
    for (unsigned b = t->amin > 1 ? t->amin : 1; b < t->nk; b++) {
      const unsigned char *img = t->bases + (uint64_t) b * P;
      bool dup = memcmp (img, t->new, e - s) == 0 ||
                 (t->amin == 0 && memcmp (img, t->old, e - s) == 0);
      for (unsigned x = 0; x < t->nxb && !dup; x++)
        dup = memcmp (img, t->bases + (uint64_t) t->xb[x] * P, e - s) == 0;
      if (!dup) {
        t->xdiff[t->nxb] = lba_diff (t, img);
        t->xb[t->nxb++] = b;
      }
    }
  }
  st->nt = u;
  free (in);
  free (ks);
}

/* How many outcomes the policy allows sector t (those that give distinct
 * images): kept, reverted (to old, or to a base past it), and what an
 * interrupted write leaves.  Matches lib/fault/fault_cut.c's fault_cut_locked:
 * a torn mix needs two logical sectors (so does unreadable, its
 * variant); garbage and zero do not.  A dirty sector's older image there
 * is whatever the device made durable before the cut: old, or (destaged
 * when the cache was full, or made durable by a FUA write, zero or trim
 * over it, or by settling an atomic unit, lib/fault/fault_cache.c) a base. */
static uint64_t
n_torn_masks (const struct tsec *t, uint64_t diff)
{
  const int d = __builtin_popcountll (diff);
  if (t->lbas < 2 || d < 2)
    return 0;
  return d >= 63 ? UINT64_MAX / 4 : (1ULL << d) - 2;
}

static uint64_t
sat_add (uint64_t a, uint64_t b)
{
  return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* The outcomes of an interrupted write that do not depend on the base. */
static uint64_t
n_interrupted (const struct tsec *t)
{
  switch (torn) {
  case S4K_TORN_UNREADABLE: return t->lbas > 1;
  case S4K_TORN_GARBAGE: return t->lbas;
  case S4K_TORN_ZERO: return 1;
  default: return 0;
  }
}

uint64_t
n_outcomes (const struct tsec *t)
{
  /* Its last kept write is atomic: kept whole. */
  if (t->amin == t->nk)
    return 1;
  uint64_t n = 1;
  if (t->amin == 0) {
    n += t->diff != 0;                  /* reverted (= kept if equal) */
    if (torn == S4K_TORN_SECTOR)
      n = sat_add (n, n_torn_masks (t, t->diff));
  }
  n = sat_add (n, n_interrupted (t));
  for (unsigned x = 0; x < t->nxb; x++)
    n = sat_add (n, 1 + (torn == S4K_TORN_SECTOR ?
                         n_torn_masks (t, t->xdiff[x]) : 0));
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

/* In n_outcomes' order: kept; over old, reverted and the torn mixes;
 * the interrupted write's other outcomes; then over each base past old,
 * reverted and the torn mixes.  Logs whose sectors have one kept write
 * each (or whose bases add no image) keep the order they always had. */
struct outcome
outcome_at (const struct tsec *t, uint64_t i)
{
  if (i == 0)
    return (struct outcome) { O_KEPT, 0, 0 };
  i--;
  if (t->amin == 0) {
    if (t->diff && i-- == 0)
      return (struct outcome) { O_REVERTED, 0, 0 };
    if (torn == S4K_TORN_SECTOR) {
      const uint64_t m = n_torn_masks (t, t->diff);
      if (i < m)
        return (struct outcome) { O_TORN, deposit (i + 1, t->diff), 0 };
      i -= m;
    }
  }
  const uint64_t m = n_interrupted (t);
  if (i < m) {
    switch (torn) {
    case S4K_TORN_UNREADABLE: return (struct outcome) { O_UNREADABLE, 0, 0 };
    case S4K_TORN_GARBAGE: return (struct outcome) { O_GARBAGE, i, 0 };
    default: return (struct outcome) { O_ZERO, 0, 0 };
    }
  }
  i -= m;
  for (unsigned x = 0; x < t->nxb; x++) {
    if (i-- == 0)
      return (struct outcome) { O_REVERTED, 0, t->xb[x] };
    if (torn == S4K_TORN_SECTOR) {
      const uint64_t n = n_torn_masks (t, t->xdiff[x]);
      if (i < n)
        return (struct outcome) { O_TORN, deposit (i + 1, t->xdiff[x]),
                                  t->xb[x] };
      i -= n;
    }
  }
  return (struct outcome) { O_KEPT, 0, 0 };     /* not reached */
}

/* Base b is one the device can revert or tear the sector to. */
bool
base_allowed (const struct tsec *t, unsigned b)
{
  return b == 0 ? t->amin == 0 : b >= t->amin && b < t->nk;
}

bool
outcome_allowed (const struct tsec *t, struct outcome o)
{
  if (o.base && o.kind != O_REVERTED && o.kind != O_TORN)
    return false;
  /* Only kept when its last kept write is atomic. */
  if (o.kind != O_KEPT && t->amin == t->nk)
    return false;
  switch (o.kind) {
  case O_KEPT: return true;
  case O_REVERTED: return base_allowed (t, o.base);
  case O_TORN: {
    if (torn != S4K_TORN_SECTOR || !base_allowed (t, o.base))
      return false;
    const uint64_t d = lba_diff (t, t->bases + (uint64_t) o.base * P);
    return n_torn_masks (t, d) && (o.arg & ~d) == 0 && o.arg && o.arg != d;
  }
  case O_UNREADABLE: return torn == S4K_TORN_UNREADABLE && t->lbas > 1;
  case O_GARBAGE: return torn == S4K_TORN_GARBAGE && o.arg < t->lbas;
  case O_ZERO: return torn == S4K_TORN_ZERO;
  }
  return false;
}

/* ---- digits: what varies once the kept set is built ------------------- */

static bool
in_zone (const struct state *st, const struct tsec *t)
{
  uint64_t s, e;
  sector_range (t->k, &s, &e);
  const int64_t z = zone_of (s);
  return z >= 0 && !nonseq_at (z, cps[st->cpi].before);
}

static size_t
tsec_index (const struct state *st, uint64_t k)
{
  size_t lo = 0, hi = st->nt;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (st->t[mid].k < k)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* Outcomes of sector i of a zone's last kept write when the cut falls in
 * it: all but kept (the next sector's cut) and, for its first sector,
 * reverted (the prefix without the write). */
static uint64_t
cut_skip (const struct tsec *t, size_t i)
{
  return 1 + (i == 0 && t->amin == 0 && t->diff != 0);
}

static uint64_t
cut_outcomes (const struct tsec *t, size_t i)
{
  const uint64_t n = n_outcomes (t), k = cut_skip (t, i);
  return n > k ? n - k : 0;
}

/* The digits of the built state: each sector outside the sequential
 * zones (its outcomes), and each zone's last kept write (where the cut
 * falls in it, and that sector's outcome); the earlier kept writes of a
 * zone are kept (state_build made them so). */
void
state_digits (struct state *st)
{
  st->dg = xrealloc (st->dg, (st->nt + st->nzg + 1) * sizeof *st->dg);
  st->ndg = 0;
  for (size_t i = 0; i < st->nt; i++)
    if (!in_zone (st, &st->t[i]))
      st->dg[st->ndg++] = (struct digit) { i, 1, -1, n_outcomes (&st->t[i]) };
  for (size_t g = 0; g < st->nzg; g++) {
    const struct zgroup *zg = &st->zg[g];
    if (!zg->p)
      continue;
    const struct wr *w = &writes[st->vol[zg->v[zg->p - 1]]];
    struct digit d = { tsec_index (st, first_sector (w)),
                       last_sector (w) - first_sector (w) + 1, g, 1 };
    for (size_t i = 0; i < d.nt; i++)
      d.n += cut_outcomes (&st->t[d.t0 + i], i);
    st->dg[st->ndg++] = d;
  }
}

/* Sets the outcomes of digit d's sectors for its value x: a sector's
 * outcome_at, or for a zone's last write 0 (kept whole) or the cut: the
 * sectors before it kept, its sector's outcome, those after reverted. */
void
digit_set (struct state *st, const struct digit *d, uint64_t x)
{
  struct tsec *t = &st->t[d->t0];
  if (d->g < 0) {
    t->o = outcome_at (t, x);
    return;
  }
  size_t cut = d->nt;
  uint64_t o = 0;
  if (x > 0) {
    x--;
    for (cut = 0; cut < d->nt; cut++) {
      const uint64_t n = cut_outcomes (&t[cut], cut);
      if (x < n) {
        o = x + cut_skip (&t[cut], cut);
        break;
      }
      x -= n;
    }
  }
  for (size_t i = 0; i < d->nt; i++)
    t[i].o = i < cut ? (struct outcome) { O_KEPT, 0, 0 }
           : i == cut ? outcome_at (&t[i], o)
           : (struct outcome) { O_REVERTED, 0, 0 };
}

/* A parsed state (kept set and outcomes) is one a zoned drive can be
 * left in: NULL, or why not.  Sets each zone's prefix length. */
const char *
zone_check (struct state *st)
{
  static char why[256];
  for (size_t g = 0; g < st->nzg; g++) {
    struct zgroup *zg = &st->zg[g];
    const uint64_t lba = (uint64_t) zg->zone * zone_bytes / L;
    for (zg->p = 0; zg->p < zg->n && bit (st->kept, zg->v[zg->p]); zg->p++)
      ;
    for (size_t j = zg->p; j < zg->n; j++)
      if (bit (st->kept, zg->v[j])) {
        snprintf (why, sizeof why, "the sequential zone at LBA %" PRIu64
                  " keeps write %zu without write %zu before it: a zone "
                  "keeps a prefix of its writes", lba, zg->v[j],
                  zg->v[zg->p]);
        return why;
      }
    for (size_t j = 0; j < zg->p; j++) {
      const struct wr *w = &writes[st->vol[zg->v[j]]];
      const size_t t0 = tsec_index (st, first_sector (w));
      const size_t nt = last_sector (w) - first_sector (w) + 1;
      bool cut = false;
      for (size_t i = 0; i < nt; i++) {
        const struct tsec *t = &st->t[t0 + i];
        /* Before the cut kept; the cut in the last kept write only (any
         * outcome the policy allows: state_parse checked it); after it
         * reverted to the durable image. */
        const bool ok = cut ? t->o.kind == O_REVERTED && t->o.base == 0
                        : t->o.kind == O_KEPT || j + 1 == zg->p;
        if (!ok) {
          snprintf (why, sizeof why, "physical sector %" PRIu64 " of the "
                    "sequential zone at LBA %" PRIu64 " is %s: a zone's "
                    "sectors are kept up to the cut, one sector is cut in "
                    "its last kept write, the rest of it reverted", t->k, lba,
                    outcome_names[t->o.kind]);
          return why;
        }
        cut = cut || t->o.kind != O_KEPT;
      }
    }
  }
  return NULL;
}

uint64_t
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
void
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
    case O_REVERTED:
      memcpy (t->img, t->bases + (uint64_t) t->o.base * P, n);
      break;
    case O_TORN:
      for (unsigned l = 0; l < t->lbas; l++)
        memcpy (t->img + (uint64_t) l * L,
                (l < 64 && (t->o.arg >> l & 1) ? t->new
                 : t->bases + (uint64_t) t->o.base * P) + (uint64_t) l * L,
                L);
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
uint64_t
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

