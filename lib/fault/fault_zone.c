/* SPDX-License-Identifier: BSD-3-Clause */
/* The fault layer on a zoned device (issue 33): a power cut keeps, in each
 * sequential zone, a prefix of its unflushed writes and moves the write
 * pointer back to the prefix's end; what makes a zone's writes durable.
 *
 * Per zone the layer keeps hw, the end of the writes that reached it,
 * and dwp, the durable write pointer: a flush sets dwp to hw for every
 * zone, a FUA write or zero to its end (with the zone's cached writes
 * below it), CLOSE, FINISH and RESET to the zone's (fault_zone_sync).  A
 * sequential zone is written in order, so the order its writes were
 * accepted in is LBA order, and a prefix of them is a prefix of the
 * zone: the cut picks its end c from the seeded PRNG between dwp (or
 * the zone's lowest dirty sector) and the end of the run of dirty
 * sectors from there; the sectors below c are kept, the one at c may be
 * torn (torn=), the rest revert, the zone reads zeroes from c to its old
 * write pointer (as after a reset), and the pointer moves to c.  Then
 * every pointer goes back to hw (writes in flight are lost) and no zone
 * stays open.  All of it under the layer's mutex.  docs/zoned.md "Power
 * cuts" says why and what the host sees. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "fault_priv.h"
#include "sect4k/zone.h"

int
fault_set_zones (struct s4k_fault *f, struct s4k_zones *z)
{
  struct s4k_zones_info zi;
  s4k_zones_info (z, &zi);
  uint64_t *dwp = malloc (zi.nr_zones * sizeof *dwp);
  uint64_t *hw = malloc (zi.nr_zones * sizeof *hw);
  uint64_t *mwp = malloc (zi.nr_zones * sizeof *mwp);
  if (!dwp || !hw || !mwp) {
    free (dwp);
    free (hw);
    free (mwp);
    return -ENOMEM;
  }
  s4k_zones_wps (z, dwp);
  memcpy (hw, dwp, zi.nr_zones * sizeof *hw);
  memcpy (mwp, dwp, zi.nr_zones * sizeof *mwp);
  /* With the cache the zones' records (file=) hold the durable
   * pointers: a SIGKILL loses the cache, as a cut keeping nothing
   * unflushed does, and the data file has only what was destaged. */
  uint64_t *pub = NULL;
  if (f->cfg.write_cache) {
    pub = malloc (zi.nr_zones * sizeof *pub);
    if (!pub || s4k_zones_durable_init (z) != 0) {
      free (dwp);
      free (hw);
      free (mwp);
      free (pub);
      return -ENOMEM;
    }
    memcpy (pub, dwp, zi.nr_zones * sizeof *pub);
  }
  pthread_mutex_lock (&f->m);
  f->zones = z;
  f->dwp = dwp;
  f->hw = hw;
  f->mwp = mwp;
  f->pub = pub;
  f->zone_shift = __builtin_ctzll (zi.zone_lbas);
  f->zone_conv = zi.conventional;
  f->nr_zones = zi.nr_zones;
  pthread_mutex_unlock (&f->m);
  return 0;
}

/* The zone of the physical sector starting at byte s. */
static uint32_t
zone_of_byte (const struct s4k_fault *f, uint64_t s)
{
  return (s / f->g.logical) >> f->zone_shift;
}

static uint64_t
zone_start_byte (const struct s4k_fault *f, uint32_t zone)
{
  return ((uint64_t) zone << f->zone_shift) * f->g.logical;
}

/* The durable pointers of zones [z0, z1) to the zones (their records),
 * those that moved.  Called once the data below them is in the store:
 * a record never runs ahead of the data file. */
static void
publish (struct s4k_fault *f, uint32_t z0, uint32_t z1)
{
  if (!f->pub)
    return;
  for (uint32_t z = z0 < f->zone_conv ? f->zone_conv : z0;
       z < z1 && z < f->nr_zones; z++)
    if (f->pub[z] != f->dwp[z]) {
      f->pub[z] = f->dwp[z];
      s4k_zones_set_durable (f->zones, z, f->dwp[z]);
    }
}

/* Not the zones' pointers: those of writes the zones accepted that have
 * not reached the layer yet are not durable (they fail after a cut). */
void
fault_zone_flushed (struct s4k_fault *f)
{
  memcpy (f->dwp, f->hw, f->nr_zones * sizeof *f->dwp);
  publish (f, 0, f->nr_zones);
}

void
fault_zone_wrote (struct s4k_fault *f, uint64_t off, uint64_t end)
{
  /* A host-aware write may cross into the next zones. */
  const uint64_t e = end / f->g.logical;
  for (uint32_t z = zone_of_byte (f, off);
       z < f->nr_zones && zone_start_byte (f, z) < end; z++) {
    const uint64_t zend = (uint64_t) (z + 1) << f->zone_shift;
    const uint64_t ze = e < zend ? e : zend;
    if (z >= f->zone_conv && ze > f->hw[z])
      f->hw[z] = ze;
  }
  /* A FUA write's or a zero's dwp (fault_zone_settle), now written. */
  publish (f, zone_of_byte (f, off), zone_of_byte (f, end - 1) + 1);
}

void
fault_zone_medium (struct s4k_fault *f, uint64_t off, uint64_t end)
{
  const uint32_t z = zone_of_byte (f, off);
  const uint64_t e = end / f->g.logical;
  if (z >= f->zone_conv && z < f->nr_zones && e > f->mwp[z])
    f->mwp[z] = e;
}

/* Destages the dirty sectors in [off, end): their keys first, as a
 * destage frees entries (an atomic unit's several). */
static int
destage_within (struct s4k_fault *f, uint64_t off, uint64_t end)
{
  if (!f->dirty_sectors || off >= end)
    return 0;
  const uint64_t first = sector_of (f, off), last = sector_of (f, end - 1);
  uint64_t *keys = malloc (f->dirty_sectors * sizeof *keys);
  if (!keys)
    return -ENOMEM;
  size_t n = 0;
  for (struct entry *e = f->oldest; e; e = e->next)
    if (e->k >= first && e->k <= last)
      keys[n++] = e->k;
  int r = 0;
  for (size_t i = 0; i < n && r == 0; i++) {
    struct entry *e = fault_lookup (f, keys[i]);
    if (e)
      r = fault_destage (f, e);
  }
  free (keys);
  return r;
}

int
fault_zone_settle (struct s4k_fault *f, uint64_t off, uint64_t end)
{
  if (!f->zones)
    return 0;
  const uint32_t zone = zone_of_byte (f, off);
  if (zone < f->zone_conv || zone >= f->nr_zones)
    return 0;
  int r = destage_within (f, zone_start_byte (f, zone), off);
  const uint64_t e = end / f->g.logical;
  if (r == 0 && e > f->dwp[zone])
    f->dwp[zone] = e;
  return r;
}

int
fault_zone_sync (struct s4k_fault *f, uint64_t len, uint64_t off,
                 bool pointer)
{
  pthread_mutex_lock (&f->m);
  int r = destage_within (f, off, off + len);
  if (r == 0)
    r = f->inner->ops->flush (f->inner);
  uint64_t *now = pointer ? malloc (f->nr_zones * sizeof *now) : NULL;
  if (r == 0 && pointer && !now)
    r = -ENOMEM;
  if (r == 0) {
    /* What was written, or the pointer the operation set (a reset's
     * lower than before, a finish's at the end). */
    if (now)
      s4k_zones_wps (f->zones, now);
    for (uint32_t z = zone_of_byte (f, off);
         z < f->nr_zones && zone_start_byte (f, z) < off + len; z++) {
      if (now)
        f->hw[z] = now[z];
      f->dwp[z] = f->mwp[z] = f->hw[z];
    }
    publish (f, zone_of_byte (f, off), zone_of_byte (f, off + len - 1) + 1);
  }
  free (now);
  pthread_mutex_unlock (&f->m);
  return r;
}

/* ---- the cut ----------------------------------------------------------- */

struct zkey {
  uint32_t zone;
  uint64_t k;
};

static int
cmp_zkey (const void *a, const void *b)
{
  const struct zkey *x = a, *y = b;
  if (x->zone != y->zone)
    return x->zone < y->zone ? -1 : 1;
  return x->k < y->k ? -1 : x->k > y->k;
}

/* A zone the report lists: its state before and after. */
struct zsnap {
  uint32_t zone;
  struct s4k_zone_desc before;
  uint64_t torn;                        /* the torn sector, or UINT64_MAX */
};

static struct s4k_zone_desc
describe (struct s4k_fault *f, uint32_t zone)
{
  struct s4k_zone_desc d = { 0 };
  uint64_t listed;
  s4k_zones_report (f->zones, (uint64_t) zone << f->zone_shift, 0, true,
                    &d, 1, &listed);
  return d;
}

static const char *
cond_name (uint8_t c)
{
  switch (c) {
  case S4K_ZC_EMPTY: return "empty";
  case S4K_ZC_IMP_OPEN: return "implicitly-open";
  case S4K_ZC_EXP_OPEN: return "explicitly-open";
  case S4K_ZC_CLOSED: return "closed";
  case S4K_ZC_FULL: return "full";
  case S4K_ZC_READ_ONLY: return "read-only";
  case S4K_ZC_OFFLINE: return "offline";
  default: return "not-write-pointer";
  }
}

/* The pointer of the zone starting at LBA start back to wp; *hw the
 * pointer after.  Where the model's pointer is lower already (a reset it
 * took while the cut was decided: the reset's zeroes, from before the
 * cut, will be refused), the cut writes them: from that pointer to wp
 * the zone reads zeroes, as above its pointer. */
static int
cut_pointer (struct s4k_fault *f, uint64_t start, uint64_t wp, uint64_t *hw)
{
  uint64_t now = wp;
  if (s4k_zones_cut_wp (f->zones, start, wp, &now) != 0)
    return -EIO;
  *hw = now;
  const uint64_t L = f->g.logical;
  return now < wp ? f->inner->ops->zero (f->inner, (wp - now) * L, now * L,
                                         true, false)
                  : 0;
}

/* One zone's prefix: the dirty sectors keys[0..n) (sorted), the zone as
 * it was (d).  *torn_out: the sector torn, or UINT64_MAX. */
static int
cut_zone (struct s4k_fault *f, enum s4k_torn torn, struct cut_out *o,
          const struct zkey *keys, size_t n, const struct s4k_zone_desc *d,
          uint64_t *torn_out)
{
  const uint32_t L = f->g.logical, P = f->g.physical;
  const uint64_t zstart = d->start * L, zend = (d->start + d->len) * L;
  const uint64_t wpb = d->wp * L;
  uint64_t lo, s, end;
  s4k_sector_range (&f->g, keys[0].k, &lo, &end);
  /* From the durable pointer (a host-aware one may cut a sector) ... */
  uint64_t lower = f->dwp[keys[0].zone] * L;
  lower = lower > lo ? lower : lo;
  lower = lower < wpb ? lower : wpb;
  /* ... to the end of the run of dirty sectors from the lowest: a prefix
   * of the zone's unflushed writes lies in it (a gap is a write not yet
   * cached, which no prefix may pass), and never the write in flight. */
  size_t run = 1;
  while (run < n && keys[run].k == keys[run - 1].k + 1)
    run++;
  s4k_sector_range (&f->g, keys[run - 1].k, &s, &end);
  uint64_t cap = end < wpb ? end : wpb;
  if (f->pending && f->pending_off >= zstart && f->pending_off < zend) {
    uint64_t ps, pe;
    s4k_sector_range (&f->g, sector_of (f, f->pending_off), &ps, &pe);
    cap = ps < cap ? ps : cap;
  }
  cap = cap > lower ? cap : lower;
  /* c: lower, a sector boundary above it, or cap. */
  uint64_t c = lower;
  if (torn != S4K_TORN_NONE && cap > lower) {
    const uint64_t first = lower / P * P + P;   /* the first boundary */
    const uint64_t bounds = first < cap ? (cap - first + P - 1) / P : 0;
    const uint64_t i = fault_prng_below (f, bounds + 2);
    c = i == 0 ? lower : i <= bounds ? first + (i - 1) * P : cap;
  }
  /* An atomic unit is kept or dropped whole: c not inside one. */
  struct entry *at = c < wpb ? fault_lookup (f, sector_of (f, c)) : NULL;
  if (at && at->atomic && at->gfirst < sector_of (f, c)) {
    s4k_sector_range (&f->g, at->gfirst, &s, &end);
    if (s >= lower) {
      c = s;
      at = fault_lookup (f, at->gfirst);
    }
  }
  /* The sector the cut falls in: torn as torn= says (torn=sector and
   * unreadable need two logical blocks in it), or half the time the cut
   * falls between sectors. */
  uint64_t tk = UINT64_MAX;
  if (at && !at->atomic && c % P == 0 && torn != S4K_TORN_NONE &&
      (P > L || torn >= S4K_TORN_GARBAGE) && fault_prng_below (f, 2) == 0)
    tk = at->k;
  *torn_out = tk;
  int r = 0;
  for (size_t i = 0; i < n && r == 0; i++) {
    struct entry *e = fault_lookup (f, keys[i].k);
    if (!e)
      continue;                         /* went with its atomic unit */
    s4k_sector_range (&f->g, e->k, &s, &end);
    /* A sector c cuts: kept if c is the write pointer (all of its data
     * is below), else reverted to its durable part. */
    const bool keep = end <= c || (s < c && c == wpb);
    const int forced = keep ? FO_KEPT : e->k == tk ? FO_TORN : FO_REVERTED;
    r = e->atomic ? fault_cut_unit (f, e, torn, forced, o)
                  : fault_cut_sector (f, e, torn, forced, o);
  }
  /* Above c the zone reads zeroes to its old write pointer, as after a
   * reset (whole sectors: the one c cuts, read and written back). */
  if (r == 0 && c < wpb) {
    uint64_t from = c, ws, we;
    s4k_sector_range (&f->g, sector_of (f, wpb - 1), &ws, &we);
    if (c % P) {
      s4k_sector_range (&f->g, sector_of (f, c), &s, &end);
      const struct s4k_io io = { o->old, end - s, s };
      if ((r = f->inner->ops->read (f->inner, &io, 1)) == 0) {
        memset (o->old + (c - s), 0, end - c);
        r = f->inner->ops->write (f->inner, &io, 1, false);
      }
      from = end;
    }
    /* The torn sector keeps what the interrupted write left. */
    if (tk != UINT64_MAX)
      from += P;
    if (r == 0 && from < we)
      r = f->inner->ops->zero (f->inner, we - from, from, true, false);
  }
  f->hw[keys[0].zone] = c / L;
  if (r == 0)
    r = cut_pointer (f, d->start, c / L, &f->hw[keys[0].zone]);
  return r;
}

int
fault_zone_cut (struct s4k_fault *f, enum s4k_torn torn, struct cut_out *o,
                FILE *zones)
{
  struct s4k_zones_counts zc;
  s4k_zones_counts (f->zones, &zc);
  const size_t nopen = zc.imp_open + zc.exp_open;
  struct zkey *keys = malloc ((f->dirty_sectors + 1) * sizeof *keys);
  struct zsnap *snap = malloc ((f->dirty_sectors + nopen + 1) * sizeof *snap);
  struct s4k_zone_desc *open = malloc ((nopen + 1) * sizeof *open);
  int r = 0;
  if (!keys || !snap || !open) {
    free (keys);
    free (snap);
    free (open);
    return -ENOMEM;
  }
  /* The sequential zones' dirty sectors, by zone and LBA. */
  size_t n = 0, ns = 0;
  for (struct entry *e = f->oldest; e; e = e->next) {
    uint64_t s, end;
    s4k_sector_range (&f->g, e->k, &s, &end);
    const uint32_t zone = zone_of_byte (f, s);
    if (zone >= f->zone_conv)
      keys[n++] = (struct zkey) { zone, e->k };
  }
  qsort (keys, n, sizeof *keys, cmp_zkey);
  /* The zones open now: each closes. */
  uint64_t listed;
  int nop = 0;
  for (unsigned opt = 0x02; opt <= 0x03; opt++) {
    int m = s4k_zones_report (f->zones, 0, opt, true, open + nop,
                              nopen - nop, &listed);
    nop += m > 0 ? m : 0;
  }
  for (int i = 0; i < nop; i++)
    snap[ns++] = (struct zsnap) { open[i].start >> f->zone_shift, open[i],
                                  UINT64_MAX };
  for (size_t i = 0; i < n && r == 0; ) {
    size_t j = i;
    while (j < n && keys[j].zone == keys[i].zone)
      j++;
    const struct s4k_zone_desc d = describe (f, keys[i].zone);
    /* Read only and offline zones, and host-aware zones written off
     * their pointer, have their sectors' outcomes one by one, as a
     * conventional zone's: the first in the main loop, the NON_SEQ ones
     * here, as their pointers (below) follow what they keep. */
    const bool live = d.cond != S4K_ZC_READ_ONLY && d.cond != S4K_ZC_OFFLINE;
    const bool prefix = live && !d.non_seq;
    for (size_t k = i; live && d.non_seq && k < j && r == 0; k++) {
      struct entry *e = fault_lookup (f, keys[k].k);
      if (e)                            /* else gone with its unit */
        r = e->atomic ? fault_cut_unit (f, e, torn, -1, o)
                      : fault_cut_sector (f, e, torn, -1, o);
    }
    if (prefix) {
      size_t k = 0;
      while (k < ns && snap[k].zone != keys[i].zone)
        k++;
      if (k == ns)
        snap[ns++] = (struct zsnap) { keys[i].zone, d, UINT64_MAX };
      r = cut_zone (f, torn, o, keys + i, j - i, &d, &snap[k].torn);
    }
    i = j;
  }
  /* A write the zones accepted that has not reached the layer is lost
   * (it fails as a request from before the cut): every pointer back to
   * the end of what reached it.  A host-aware zone written off its
   * pointer (NON_SEQ: its pointer is the end of its highest write, as
   * scsi_debug's zbc_inc_wp moves it) back to the end of its highest
   * sector on the medium now: durable before the cut, destaged, or kept
   * or torn by it (whole physical sectors, at most the old pointer), so
   * that above its pointer the zone reads zeroes, as after a reset. */
  uint64_t *wps = r == 0 ? malloc (f->nr_zones * sizeof *wps) : NULL;
  if (r == 0 && !wps)
    r = -ENOMEM;
  if (wps)
    s4k_zones_wps (f->zones, wps);
  for (uint32_t z = f->zone_conv; wps && z < f->nr_zones && r == 0; z++) {
    const uint64_t medium = f->dwp[z] > f->mwp[z] ? f->dwp[z] : f->mwp[z];
    if (wps[z] <= f->hw[z] && wps[z] <= medium)
      continue;
    const struct s4k_zone_desc d = describe (f, z);
    if (d.cond == S4K_ZC_READ_ONLY || d.cond == S4K_ZC_OFFLINE)
      continue;
    if (d.non_seq)
      f->hw[z] = medium < f->hw[z] ? medium : f->hw[z];
    if (wps[z] <= f->hw[z])
      continue;
    size_t k = 0;
    while (k < ns && snap[k].zone != z)
      k++;
    if (k == ns) {
      struct zsnap *grown = realloc (snap, (ns + 1) * sizeof *snap);
      if (!grown) {
        r = -ENOMEM;
        break;
      }
      snap = grown;
      snap[ns++] = (struct zsnap) { z, d, UINT64_MAX };
    }
    r = cut_pointer (f, d.start, f->hw[z], &f->hw[z]);
  }
  free (wps);
  s4k_zones_power_loss (f->zones);
  fault_zone_flushed (f);
  memcpy (f->mwp, f->hw, f->nr_zones * sizeof *f->mwp);
  /* The report: the zones that changed, by LBA. */
  for (size_t i = 1; i < ns; i++)
    for (size_t k = i; k > 0 && snap[k - 1].zone > snap[k].zone; k--) {
      struct zsnap t = snap[k];
      snap[k] = snap[k - 1];
      snap[k - 1] = t;
    }
  const char *sep = "";
  for (size_t i = 0; i < ns; i++) {
    const struct s4k_zone_desc *b = &snap[i].before;
    const struct s4k_zone_desc a = describe (f, snap[i].zone);
    if (a.wp == b->wp && a.cond == b->cond)
      continue;
    fprintf (zones, "%s\n  {\"zone\": %" PRIu64 ", \"lbas\": %" PRIu64
             ", \"type\": \"%s\", \"wp_before\": %" PRIu64
             ", \"wp_after\": %" PRIu64 ", \"cond_before\": \"%s\""
             ", \"cond_after\": \"%s\"", sep, b->start, b->len,
             b->type == S4K_ZT_SEQ_REQUIRED ? "sequential-write-required"
                                            : "sequential-write-preferred",
             b->wp, a.wp, cond_name (b->cond), cond_name (a.cond));
    if (snap[i].torn != UINT64_MAX)
      fprintf (zones, ", \"torn_sector\": %" PRIu64, snap[i].torn);
    fprintf (zones, "}");
    sep = ",";
  }
  free (keys);
  free (snap);
  free (open);
  return r;
}
