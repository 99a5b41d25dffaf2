/* SPDX-License-Identifier: BSD-3-Clause */
/* sect4k-crash: the geometry and the log: its writes and crash points
 * (the files: crash.h). */
#include "crash.h"
#include "sect4k/zone.h"

struct s4k_geometry g;
uint32_t L, P;

void
sector_range (uint64_t k, uint64_t *s, uint64_t *e)
{
  s4k_sector_range (&g, k, s, e);
}

struct wr *writes;
static size_t nwrites;
struct zev *zevs;
size_t nzevs;
struct cp *cps;
size_t ncps;
uint64_t log_entries;

/* ---- zones -------------------------------------------------------------- */

bool zoned, aware;
uint64_t zone_bytes, zone_seq_start;

int64_t
zone_of (uint64_t off)
{
  return zoned && off >= zone_seq_start ? (int64_t) (off / zone_bytes) : -1;
}

/* Host-aware: what lib/zone/zone.c keeps per zone and the cut reads
 * (lib/fault/fault_zone.c): the pointer (bytes; write_aware moves it up
 * to a write's end, never down), whether an empty zone was opened
 * explicitly (FINISH ALL takes it), and NON_SEQ: set by a write or zero
 * off the pointer (a trim and a reset's zeroes move nothing), cleared
 * by a reset only (RESET ALL skips an empty zone, which keeps it: one
 * a cut emptied, as a sect4k-zonewp entry may say), kept across finish,
 * open, close and flush.
 * Where the log starts every zone is empty but those its "sect4k-zonewp"
 * entries list (a device whose file= restored them). */
static uint64_t *zwp;
uint64_t *zone_wp0;
static bool *zopened;
struct nsi {
  int64_t zone;
  uint64_t on, off;                     /* NON_SEQ from after entry on to
                                           entry off (its reset) */
};
static struct nsi *nsis;
static size_t nnsi;
static size_t nzones;

bool
nonseq_at (int64_t z, uint64_t before)
{
  for (size_t i = 0; aware && i < nnsi; i++)
    if (nsis[i].zone == z && nsis[i].on < before && before <= nsis[i].off)
      return true;
  return false;
}

static bool
nonseq_now (int64_t z)
{
  return nonseq_at (z, UINT64_MAX - 1);
}

static uint64_t
zone_end_byte (int64_t z)
{
  const uint64_t e = (uint64_t) (z + 1) * zone_bytes;
  return e < g.size ? e : g.size;
}

/* A write or zero of [off, end) at entry e: NON_SEQ where it starts off
 * a zone's pointer (each zone it covers, from the zone's start past the
 * first), pointers up to its end. */
static void
aware_wrote (uint64_t off, uint64_t end, uint64_t e)
{
  for (int64_t z = zone_of (off < zone_seq_start ? zone_seq_start : off);
       z >= 0 && (uint64_t) z < nzones && (uint64_t) z * zone_bytes < end;
       z++) {
    const uint64_t zs = (uint64_t) z * zone_bytes, ze = zone_end_byte (z);
    const uint64_t s = off > zs ? off : zs, wend = end < ze ? end : ze;
    if (s != zwp[z] && !nonseq_now (z)) {
      nsis = xrealloc (nsis, (nnsi + 1) * sizeof *nsis);
      nsis[nnsi++] = (struct nsi) { z, e, UINT64_MAX };
    }
    if (wend > zwp[z])
      zwp[z] = wend;
  }
}

/* A zone operation (z: -2 for ALL) at entry e, as lib/zone/zone.c's. */
static void
aware_op (unsigned op, int64_t z, uint64_t e)
{
  for (size_t k = zone_seq_start / zone_bytes; k < nzones; k++) {
    if (z != -2 && (int64_t) k != z)
      continue;
    const uint64_t zs = k * zone_bytes;
    const bool empty = zwp[k] == zs && !zopened[k];
    switch (op) {
    case S4K_ZOP_RESET:
      if (z != -2 || !empty) {
        zwp[k] = zs;
        zopened[k] = false;
        for (size_t i = 0; i < nnsi; i++)
          if (nsis[i].zone == (int64_t) k && nsis[i].off == UINT64_MAX)
            nsis[i].off = e;
      }
      break;
    case S4K_ZOP_FINISH:
      if (z != -2 || !empty)
        zwp[k] = zone_end_byte (k);
      zopened[k] = false;
      break;
    case S4K_ZOP_OPEN:                  /* ALL opens closed zones only */
      zopened[k] = zopened[k] || (z != -2 && zwp[k] == zs);
      break;
    case S4K_ZOP_CLOSE:
      zopened[k] = false;
      break;
    }
  }
}

/* The log's zone layout, checked against the geometry as the keys are. */
static void
read_zones (void)
{
  struct s4k_zone_config z = s4k_wlog_info (reader)->zone;
  char err[256];
  if (z.model == S4K_ZONED_NONE)
    return;
  if (s4k_zone_finish (&z, &g, err, sizeof err) == -1)
    die ("%s: the log's zone layout does not fit the geometry: %s",
         log_path, err);
  zoned = true;
  aware = z.model != S4K_ZONED_HOST_MANAGED;
  zone_bytes = z.size;
  zone_seq_start = (uint64_t) z.conventional * z.size;
  nzones = (g.size + zone_bytes - 1) / zone_bytes;
  zwp = xcalloc (nzones, sizeof *zwp);
  zone_wp0 = xcalloc (nzones, sizeof *zone_wp0);
  zopened = xcalloc (nzones, sizeof *zopened);
  for (size_t k = 0; k < nzones; k++) {
    zwp[k] = k * zone_bytes;
    zone_wp0[k] = zwp[k] / L;
  }
}

/* "sect4k-zonewp lba=LBA wp=WP[ non-seq]": zone LBA's state where the
 * log starts. */
static void
zone_wp_entry (const struct s4k_wlog_entry *e)
{
  uint64_t lba, wp;
  int n = -1;
  const char *s = e->mark + strlen (S4K_WLOG_ZONE_WP_PREFIX);
  if (sscanf (s, "lba=%" SCNu64 " wp=%" SCNu64 "%n", &lba, &wp, &n) != 2 ||
      (strcmp (s + n, "") != 0 && strcmp (s + n, " non-seq") != 0))
    die ("%s: entry %" PRIu64 ": a zone state that does not parse: \"%s\"",
         log_path, e->index, e->mark);
  const int64_t z = lba <= g.size / L ? zone_of (lba * L) : -1;
  if (z < 0 || lba * L != (uint64_t) z * zone_bytes || wp < lba ||
      wp * L > zone_end_byte (z))
    die ("%s: entry %" PRIu64 ": \"%s\": no sequential zone starts at LBA "
         "%" PRIu64 " with its pointer there", log_path, e->index, e->mark,
         lba);
  zwp[z] = wp * L;
  zone_wp0[z] = wp;
  if (aware && s[n] && !nonseq_now (z)) {
    nsis = xrealloc (nsis, (nnsi + 1) * sizeof *nsis);
    nsis[nnsi++] = (struct nsi) { z, e->index, UINT64_MAX };
  }
}

/* The volatile writes of sequential zones since the last flush, not yet
 * settled: a FUA write, zero, reset, finish or close in their zone
 * settles them
 * (a drive writes a zone in order: what it made durable there has every
 * earlier write of the zone under it).  Host-aware: a FUA write or zero
 * settles the zone's sectors below its own (fault_zone_settle destages
 * those), which is every earlier write of a zone written at its
 * pointer. */
static size_t *pend, npend;
static unsigned gen;

/* Settles the pending writes of zone z (-2: every zone) at entry e;
 * true if there were any. */
static bool
settle (int64_t z, uint64_t e)
{
  size_t n = 0;
  for (size_t i = 0; i < npend; i++) {
    struct wr *w = &writes[pend[i]];
    if (z == -2 || w->zone == z)
      w->settled = e;
    else
      pend[n++] = pend[i];
  }
  bool any = n != npend;
  npend = n;
  gen += any;
  return any;
}

/* Splits pending write i at byte at (a physical sector boundary inside
 * it): i keeps [off, at), i + 1 the rest, pending too; the writes after
 * it, and the crash points' counts past it, move up one. */
static void
split_write (size_t i, uint64_t at)
{
  writes = xrealloc (writes, (nwrites + 1) * sizeof *writes);
  memmove (&writes[i + 1], &writes[i], (nwrites - i) * sizeof *writes);
  nwrites++;
  const uint64_t n = at - writes[i].off;
  writes[i].len = n;
  writes[i + 1].off = at;
  writes[i + 1].len -= n;
  if (writes[i + 1].data)
    writes[i + 1].data += n;
  for (size_t k = 0; k < npend; k++)
    pend[k] += pend[k] > i;
  pend = xrealloc (pend, (npend + 1) * sizeof *pend);
  pend[npend++] = i + 1;
  for (size_t k = 0; k < ncps; k++) {
    cps[k].f += cps[k].f > i;
    cps[k].nw += cps[k].nw > i;
  }
}

/* Host-aware: settles the pending writes of zone z in the physical
 * sectors below byte lim (a sector's start) at entry e (not e's own
 * pieces), cutting one across lim there (an atomic one goes whole: the
 * device destages a unit whole). */
static void
settle_below (int64_t z, uint64_t lim, uint64_t e)
{
  bool any = false;
  for (size_t k = 0; k < npend; k++) {
    const size_t i = pend[k];
    if (writes[i].zone != z || writes[i].off >= lim ||
        writes[i].entry == e)
      continue;
    if (writes[i].off + writes[i].len > lim && !writes[i].atomic)
      split_write (i, lim);
    writes[i].settled = e;
    any = true;
  }
  size_t n = 0;
  for (size_t k = 0; k < npend; k++)
    if (writes[pend[k]].settled == UINT64_MAX)
      pend[n++] = pend[k];
  npend = n;
  gen += any;
}

/* ---- the log ----------------------------------------------------------- */

static size_t
volatile_writes (const struct cp *c)
{
  size_t n = 0;
  for (size_t i = c->f; i < c->nw; i++)
    n += !durable_at (&writes[i], c);
  return n;
}

static void
add_cp (uint64_t before, size_t f, size_t nw)
{
  /* Nothing changed since the last one (a flush with nothing unflushed
   * before it, e.g. the one a front end sends when a client leaves, adds
   * no state): front ends that flush differently give the same states. */
  const struct cp c = { before, f, nw, gen };
  if (ncps && cps[ncps - 1].nw == nw &&
      ((cps[ncps - 1].f == f && cps[ncps - 1].gen == gen) ||
       (volatile_writes (&cps[ncps - 1]) == 0 && volatile_writes (&c) == 0)))
    return;
  cps = xrealloc (cps, (ncps + 1) * sizeof *cps);
  cps[ncps++] = c;
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
  const bool zero = (e->flags & S4K_WLOG_ZERO) && !trim;
  const uint64_t end = e->off + e->len;
  uint64_t s1, e1, sn, en;
  sector_range (s4k_sector_index (&g, e->off), &s1, &e1);
  sector_range (s4k_sector_index (&g, end - 1), &sn, &en);
  /* The engine zeroes the whole physical sectors of a zero (durable at
   * once) but writes a sector it cuts after its RMW, through the cache
   * unless FUA (lib/dev/dev_plan.h): those pieces are unflushed writes. */
  const bool head = zero && !(e->flags & S4K_WLOG_FUA) &&
                    (e->off != s1 || (s1 == sn && end != e1));
  const bool tail = zero && !(e->flags & S4K_WLOG_FUA) && s1 != sn &&
                    end != en;
  uint64_t mid = head ? e1 : e->off, mid_end = tail ? sn : end;
  if (mid_end < mid)
    mid_end = mid;
  /* A sequential write required zone takes writes inside it, at its
   * write pointer (so never over a write it has not made durable). */
  const int64_t z = zone_of (e->off);
  if (!aware && (z >= 0 || zone_of (end - 1) >= 0)) {
    if (zone_of (end - 1) != z)
      die ("%s: entry %" PRIu64 ": bytes [%" PRIu64 ", %" PRIu64 ") cross "
           "a sequential zone's boundary (zones of %" PRIu64 " bytes): a "
           "host-managed drive takes no such write", log_path, e->index,
           e->off, end, zone_bytes);
    for (size_t i = 0; i < npend && !durable; i++) {
      const struct wr *w = &writes[pend[i]];
      if (w->zone == z && w->off < end && e->off < w->off + w->len)
        die ("%s: entry %" PRIu64 ": bytes [%" PRIu64 ", %" PRIu64 ") "
             "write over entry %" PRIu64 " in sequential zone %" PRId64
             " before a flush, reset or FUA write made it durable: a "
             "host-managed drive writes a zone at its write pointer only",
             log_path, e->index, e->off, end, w->entry, z);
    }
  }
  struct wr piece[3];
  size_t n = 0;
  const unsigned char *d = trim ? NULL : e->data;
  if (head) {
    const uint64_t he = end < e1 ? end : e1;
    piece[n++] = (struct wr) { e->index, e->off, he - e->off, d, false,
                               false, z, UINT64_MAX, false, false };
  }
  if (mid < mid_end)
    piece[n++] = (struct wr) { e->index, mid, mid_end - mid,
                               d ? d + (mid - e->off) : NULL, durable,
                               e->flags & S4K_WLOG_ATOMIC, z, UINT64_MAX,
                               false, trim };
  if (tail)
    piece[n++] = (struct wr) { e->index, sn, end - sn, d + (sn - e->off),
                               false, false, z, UINT64_MAX, false, false };
  writes = xrealloc (writes, (nwrites + n) * sizeof *writes);
  for (size_t i = 0; i < n; i++) {
    if (z >= 0 && !piece[i].durable_early) {
      pend = xrealloc (pend, (npend + 1) * sizeof *pend);
      pend[npend++] = nwrites;
    }
    writes[nwrites++] = piece[i];
  }
  /* Durable at once: with every earlier write of its zone (host-aware:
   * those below it, and under it, whose cached sectors it drops; a trim
   * settles nothing else there). */
  if (z >= 0 && durable && !aware)
    settle (z, e->index);
  else if (z >= 0 && durable && !trim)
    settle_below (z, en, e->index);
}

/* Host-aware: a write across zones, each zone's piece in turn (the
 * device settles the first zone's sectors below it only). */
static void
add_write_zones (const struct s4k_wlog_entry *e, bool trim, bool durable)
{
  const uint64_t end = e->off + e->len;
  if (!aware || zone_of (e->off) == zone_of (end - 1 < end ? end - 1 : 0)) {
    add_write (e, trim, durable);
    return;
  }
  for (uint64_t off = e->off; off < end; ) {
    uint64_t next = off < zone_seq_start ? zone_seq_start
                    : (off / zone_bytes + 1) * zone_bytes;
    next = next < end ? next : end;
    struct s4k_wlog_entry piece = *e;
    piece.off = off;
    piece.len = next - off;
    if (e->data)
      piece.data = e->data + (off - e->off);
    add_write (&piece, trim, durable);
    off = next;
  }
}

struct s4k_wlog_reader *reader;

void
read_log (void)
{
  char err[512];
  size_t f = 0;
  bool found_mark = false;
  struct s4k_wlog_entry e;
  int r;
  /* After a reset's mark, the zeroes the device logs for it: one zero
   * from the start of each zone it emptied, in zone order. */
  int64_t rz = -1;                      /* the reset's zone, -2: ALL */
  int64_t rz_last = -1;                 /* the last zone zeroed for it */
  read_zones ();
  while ((r = s4k_wlog_next (reader, &e, err, sizeof err)) == 1) {
    log_entries = e.index + 1;
    const int64_t ez = e.len && !(e.flags & S4K_WLOG_MARK)
                       ? zone_of (e.off) : -1;
    const bool reset_zero = rz != -1 && (e.flags & S4K_WLOG_ZERO) &&
                            !(e.flags & (S4K_WLOG_DISCARD | S4K_WLOG_MARK |
                                         S4K_WLOG_FLUSH)) &&
                            ez >= 0 && e.off % zone_bytes == 0 &&
                            (rz == -2 ? ez > rz_last : ez == rz);
    rz_last = reset_zero ? ez : -1;
    if (!reset_zero || rz >= 0)
      rz = -1;
    if (zoned && (e.flags & S4K_WLOG_MARK) &&
        (e.zone_op == S4K_ZOP_RESET || e.zone_op == S4K_ZOP_FINISH)) {
      const int64_t z = e.zone_all ? -2 : zone_of (e.zone_lba * L);
      zevs = xrealloc (zevs, (nzevs + 1) * sizeof *zevs);
      zevs[nzevs++] = (struct zev) { e.index, e.zone_op, z };
      if (e.zone_op == S4K_ZOP_RESET)
        rz = z, rz_last = -1;
    }
    if (aware && (e.flags & S4K_WLOG_MARK) && !e.geometry && !e.zones &&
        e.zone_op)
      aware_op (e.zone_op, e.zone_all ? -2 : zone_of (e.zone_lba * L),
                e.index);
    if (zoned && (e.flags & S4K_WLOG_MARK) &&
        strncmp (e.mark, S4K_WLOG_ZONE_WP_PREFIX,
                 strlen (S4K_WLOG_ZONE_WP_PREFIX)) == 0)
      zone_wp_entry (&e);
    if (e.flags & S4K_WLOG_MARK) {
      if (until_mark && !e.geometry && !e.zones &&
          strcmp (e.mark, until_mark) == 0) {
        found_mark = true;
        break;
      }
      /* A reset, finish or close makes its zone durable (the device
       * writes a zone's cache first: a closed zone survives a power
       * loss, lib/fault/fault_zone.c): a crash point before it if it
       * settles anything.  Open changes nothing. */
      if (zoned && (e.zone_op == S4K_ZOP_RESET ||
                    e.zone_op == S4K_ZOP_FINISH ||
                    e.zone_op == S4K_ZOP_CLOSE)) {
        const int64_t z = e.zone_all ? -2 : zone_of (e.zone_lba * L);
        bool any = false;
        for (size_t i = 0; i < npend && !any; i++)
          any = z == -2 || writes[pend[i]].zone == z;
        if (any) {
          add_cp (e.index, f, nwrites);
          settle (z, e.index);
        }
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
      npend = 0;
    }
    if (e.len) {
      const bool durable = zero || (e.flags & S4K_WLOG_FUA);
      if (durable)
        add_cp (e.index, f, nwrites);
      /* A reset's zeroes and a trim move no pointer. */
      if (aware && !trim && !reset_zero)
        aware_wrote (e.off, e.off + e.len, e.index);
      add_write_zones (&e, trim, durable);
      for (size_t i = nwrites; reset_zero && i-- > 0 &&
                              writes[i].entry == e.index; )
        writes[i].reset_zero = true;
    }
  }
  if (r == -1)
    die ("%s", err);
  if (until_mark && !found_mark)
    die ("%s: no mark named \"%s\"", log_path, until_mark);
  add_cp (found_mark ? e.index : log_entries, f, nwrites);
}

