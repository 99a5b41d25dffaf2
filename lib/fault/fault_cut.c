/* SPDX-License-Identifier: BSD-3-Clause */
/* The fault layer's power cut: every dirty sector's outcome from the
 * seeded PRNG (kept, reverted, or the torn= policy's interrupted write),
 * the cut report, and the run-time calls that cut and count cuts. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fault_priv.h"

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

unsigned
fault_prng_below (struct s4k_fault *f, unsigned n)
{
  return (prng_next (f) >> 32) % n;
}

/* ---- power cut --------------------------------------------------------- */

const char *const fault_torn_names[] =
  { "none", "sector", "unreadable", "garbage", "zero" };

/* An atomic unit's outcome: kept or reverted, every sector alike, as
 * reported (one "sectors" line each, and one line in "atomic"). */
int
fault_cut_unit (struct s4k_fault *f, struct entry *e, enum s4k_torn torn,
                int forced, struct cut_out *o)
{
  const uint32_t L = f->g.logical;
  const bool kept = forced >= 0 ? forced == FO_KEPT
                    : torn != S4K_TORN_NONE && fault_prng_below (f, 2) == 0;
  const unsigned n = o->nunits++;
  FILE *fp = o->fp, *units = o->units;
  const char **sep = &o->sep;
  const uint64_t first = e->gfirst, last = e->glast;
  o->counts[kept ? FO_KEPT : FO_REVERTED] += last - first + 1;
  o->unit_counts[!kept]++;
  uint64_t s, end;
  /* lba, lbas: what the atomic write covers; sectors: the physical
   * sectors it settles, which with an alignment offset (512e-xp) or
   * atomic-write-min below the physical sector hold neighbours too. */
  fprintf (units, "%s\n  {\"lba\": %" PRIu64 ", \"lbas\": %" PRIu64
           ", \"sectors\": [%" PRIu64 ", %" PRIu64 "], \"outcome\": \"%s\"}",
           n ? "," : "", e->aoff / L, (e->aend - e->aoff) / L, first, last,
           kept ? "kept" : "dropped");
  for (uint64_t k = first; k <= last; k++) {
    s4k_sector_range (&f->g, k, &s, &end);
    fprintf (fp, "%s\n  {\"sector\": %" PRIu64 ", \"lba\": %" PRIu64
             ", \"lbas\": %" PRIu64 ", \"outcome\": \"%s\", \"atomic\": %u}",
             *sep, k, s / L, (end - s) / L, kept ? "kept" : "reverted", n);
    *sep = ",";
  }
  if (kept) {
    int r = fault_destage (f, e);
    if (r == 0 && f->bad.n)
      r = fault_bad_remove (&f->bad, first, last) < 0 ? -ENOMEM : 0;
    return r;
  }
  for (uint64_t k = first; k <= last; k++)
    fault_drop (f, fault_lookup (f, k));
  return 0;
}

/* One dirty sector's outcome (forced, or -1: from the PRNG), reported
 * and applied: kept (destaged), reverted (dropped), or the torn=
 * policy's interrupted write.  FO_TORN forced is "interrupted": the
 * policy's form of it, or reverted when the policy cannot tear a sector
 * of one logical block. */
int
fault_cut_sector (struct s4k_fault *f, struct entry *e, enum s4k_torn torn,
                  int forced, struct cut_out *o)
{
  static const char *const outcome_names[FO_N] =
    { "kept", "reverted", "torn", "unreadable", "garbage", "zeroed" };
  const uint32_t L = f->g.logical;
  FILE *fp = o->fp;
  char *old = o->old;
  int r = 0;
  uint64_t s, end;
  s4k_sector_range (&f->g, e->k, &s, &end);
  const unsigned lbas = (end - s) / L;
  /* Torn needs two logical sectors; garbage and zeroed do not. */
  const bool can_tear = torn != S4K_TORN_NONE &&
                        (lbas > 1 || torn >= S4K_TORN_GARBAGE);
  unsigned oc = forced == FO_TORN ? (can_tear ? FO_TORN : FO_REVERTED)
              : forced >= 0 ? (unsigned) forced
              : torn == S4K_TORN_NONE ? FO_REVERTED
              : fault_prng_below (f, can_tear ? 3 : 2);
  uint64_t mask = 0;                    /* bit i: logical sector i is new */
  uint64_t stop = 0;                    /* garbage: the first random byte */
  if (oc == FO_TORN && torn == S4K_TORN_GARBAGE) {
    oc = FO_GARBAGE;
    stop = prng_next (f) % (end - s);
  }
  else if (oc == FO_TORN && torn == S4K_TORN_ZERO)
    oc = FO_ZEROED;
  else if (oc == FO_TORN) {
    /* A mix: at least one old and one new logical sector. */
    for (unsigned i = 0; i < lbas && i < 64; i++)
      mask |= (prng_next (f) >> 63) << i;
    const uint64_t all = lbas >= 64 ? UINT64_MAX : (1ULL << lbas) - 1;
    if ((mask & all) == 0 || (mask & all) == all)
      mask ^= 1ULL << fault_prng_below (f, lbas < 64 ? lbas : 64);
    mask &= all;
    if (torn == S4K_TORN_UNREADABLE)
      oc = FO_UNREADABLE;
  }
  fprintf (fp, "%s\n  {\"sector\": %" PRIu64 ", \"lba\": %" PRIu64
           ", \"lbas\": %u, \"outcome\": \"%s\"", o->sep, e->k, s / L, lbas,
           outcome_names[oc]);
  o->sep = ",";
  if (oc == FO_GARBAGE)
    fprintf (fp, ", \"garbage_from\": %" PRIu64 ", \"garbage_lba\": %"
             PRIu64, s + stop, (s + stop) / L);
  if (oc == FO_TORN || oc == FO_UNREADABLE) {
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
  o->counts[oc]++;
  const struct s4k_io io = { old, end - s, s };
  if (oc == FO_TORN || oc == FO_UNREADABLE) {
    /* Logical sectors beyond 64 keep their old contents. */
    if ((r = f->inner->ops->read (f->inner, &io, 1)) == 0) {
      for (unsigned i = 0; i < lbas && i < 64; i++)
        if (mask >> i & 1)
          memcpy (old + (uint64_t) i * L, e->data + (uint64_t) i * L, L);
      r = f->inner->ops->write (f->inner, &io, 1, false);
    }
    if (r == 0 && oc == FO_UNREADABLE)
      r = fault_bad_add (&f->bad, e->k, e->k);
  }
  else if (oc == FO_GARBAGE || oc == FO_ZEROED) {
    /* What the interrupted write left, read back without an error. */
    if (oc == FO_GARBAGE) {
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
  /* A torn sector holds something of the write (a zone's pointer at a
   * cut counts it); a kept one is counted as it is destaged. */
  if (r == 0 && f->zones && oc != FO_KEPT && oc != FO_REVERTED)
    fault_zone_medium (f, s, end);
  const uint64_t k = e->k;      /* fault_destage and fault_drop free e */
  if (oc == FO_KEPT) {
    int r2 = fault_destage (f, e);
    r = r ? r : r2;
  }
  else
    fault_drop (f, e);
  /* Written whole, and it reads back without an error. */
  if (r == 0 && f->bad.n &&
      (oc == FO_KEPT || oc == FO_GARBAGE || oc == FO_ZEROED))
    r = fault_bad_remove (&f->bad, k, k) < 0 ? -ENOMEM : 0;
  return r;
}

/* Gives every dirty sector its outcome and reports it: the sequential
 * zones' first (fault_zone.c: a prefix each), then the others oldest
 * first.  Called with the mutex held. */
int
fault_cut_locked (struct s4k_fault *f, enum s4k_torn torn, const char *trigger,
                  char **report)
{
  static const char *const outcome_names[FO_N] =
    { "kept", "reverted", "torn", "unreadable", "garbage", "zeroed" };
  char *rep = NULL, *urep = NULL, *zrep = NULL;
  size_t replen = 0, ureplen = 0, zreplen = 0;
  struct cut_out o = { .sep = "" };
  o.fp = open_memstream (&rep, &replen);
  o.units = open_memstream (&urep, &ureplen);
  FILE *zones = f->zones ? open_memstream (&zrep, &zreplen) : NULL;
  o.old = malloc (f->g.physical);
  int r = 0;

  if (!o.fp || !o.old || !o.units || (f->zones && !zones)) {
    if (o.fp)
      fclose (o.fp);
    if (o.units)
      fclose (o.units);
    if (zones)
      fclose (zones);
    free (zrep);
    free (urep);
    free (rep);
    free (o.old);
    return -ENOMEM;
  }
  FILE *fp = o.fp;
  const unsigned cut = atomic_load (&f->cuts) + 1;
  fprintf (fp, "{\"schema\": \"sect4k-cut/1\", \"cut\": %u, \"trigger\": "
           "\"%s\", \"torn\": \"%s\", \"seed\": %" PRIu64 ",\n"
           " \"geometry\": {\"size\": %" PRIu64 ", \"logical\": %" PRIu32
           ", \"physical\": %" PRIu32 ", \"alignment_offset\": %" PRIu32
           "},\n \"sectors\": [", cut, trigger, fault_torn_names[torn],
           f->seed, f->g.size, f->g.logical, f->g.physical, f->g.alignment);
  if (f->zones)
    r = fault_zone_cut (f, torn, &o, zones);
  while (r == 0 && f->oldest) {
    struct entry *e = f->oldest;
    r = e->atomic ? fault_cut_unit (f, e, torn, -1, &o)
                  : fault_cut_sector (f, e, torn, -1, &o);
  }
  fprintf (fp, "\n ],\n \"outcomes\": {");
  for (unsigned i = 0; i < FO_N; i++)
    fprintf (fp, "%s\"%s\": %u", i ? ", " : "", outcome_names[i],
             o.counts[i]);
  /* The atomic writes among them, each kept or dropped whole. */
  fclose (o.units);
  fprintf (fp, "},\n \"atomic\": [%s%s],\n \"atomic_outcomes\": "
           "{\"kept\": %u, \"dropped\": %u}", urep ? urep : "",
           o.nunits ? "\n " : "", o.unit_counts[0], o.unit_counts[1]);
  free (urep);
  if (zones) {
    /* The sequential zones whose write pointer or condition changed. */
    const bool any = ftell (zones) > 0;
    fclose (zones);
    fprintf (fp, ",\n \"zones\": [%s%s]", zrep ? zrep : "", any ? "\n " : "");
    free (zrep);
  }
  fprintf (fp, "}\n");
  /* Whatever failed, the power is off: nothing unflushed survives. */
  while (f->oldest)
    fault_drop (f, f->oldest);
  if (r == 0)
    r = f->inner->ops->flush (f->inner);
  atomic_fetch_add (&f->cuts, 1);
  free (o.old);
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

void
fault_after_cut (struct s4k_fault *f)
{
  if (f->on_cut)
    f->on_cut (f->on_cut_opaque);
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
  int r = fault_cut_locked (f, torn < 0 ? f->cfg.torn : (enum s4k_torn) torn,
                            "control", report);
  pthread_mutex_unlock (&f->m);
  fault_after_cut (f);
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
