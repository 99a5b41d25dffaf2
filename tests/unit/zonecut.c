/* SPDX-License-Identifier: BSD-3-Clause */
/* Power cuts on zoned devices (issue 33) against an exact model.  Each
 * seed runs a random sequence of writes (some FUA), zeroes, flushes and
 * zone operations on a device with the write cache on, then cuts the
 * power, and checks, from the model and the cut report:
 *
 * - every sequential zone (host-managed, or host-aware written at its
 *   pointer only): the write pointer after the cut lies between the
 *   zone's durable point (its pointer at the last flush, FUA write or
 *   zero, CLOSE, FINISH or RESET) and its pointer before, on a physical
 *   boundary; the LBAs below it read exactly what was written; above it
 *   the zone reads zeroes, but for the one sector the report says is
 *   torn, which holds what torn= says;
 * - every other sector (conventional zones, host-aware zones written off
 *   their pointer) holds what its outcome in the report says, the old
 *   durable data or the new;
 * - a host-aware zone written off its pointer (NON_SEQ) has its pointer
 *   at the end of its highest sector on the medium: durable before the
 *   cut (flush, FUA, zero, CLOSE, FINISH), or kept or torn by it, at
 *   most its pointer before;
 * - no zone is open after the cut: EMPTY at its start, FULL at its end,
 *   else CLOSED, and REPORT ZONES agrees with the cut report's "zones",
 *   which lists exactly the zones whose pointer or condition changed;
 * - a host-managed zone takes a write at its new pointer.
 *
 * ZONECUT_REPORTS=DIR keeps a few reports there, for zonecut.t to check
 * against docs/cut-report.schema.json. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sect4k/sect4k.h"
#include "sect4k/zone.h"
#include "tap.h"
#include "devrig.h"

#define SIZE (4u << 20)
#define ZONE (512u << 10)

struct geo {
  const char *name, *keys;
  bool aware;
  bool seq_only;                /* no writes to the conventional zone */
};
static const struct geo geos[] = {
  { "host-managed 512e", "model=512e zoned=host-managed", false, false },
  { "host-managed 4kn", "model=4kn zoned=host-managed", false, false },
  { "host-aware 512e", "model=512e zoned=host-aware", true, false },
  /* The cache destages (oldest first) beyond 16K: what it wrote is not
   * durable for the zone, a cut may take it back.  (A conventional
   * sector destaged and written again would revert to its destaged
   * data, which this model does not follow.) */
  { "host-managed 512e, write-cache-size=16K",
    "model=512e zoned=host-managed write-cache-size=16K", false, true },
};
static const char *const torns[] = { "none", "sector", "unreadable",
                                     "garbage", "zero" };

static uint64_t rng;
static uint64_t
rnd (void)
{
  rng ^= rng >> 12;
  rng ^= rng << 25;
  rng ^= rng >> 27;
  return rng * 0x2545F4914F6CDD1DULL;
}
static uint64_t
below (uint64_t n)
{
  return (rnd () >> 11) % n;
}

/* The model. */
static unsigned char M[SIZE];   /* what was last written */
static unsigned char D[SIZE];   /* what is durable */
static unsigned char E[SIZE];   /* expected after the cut */
static bool bad[SIZE / 512];    /* expected unreadable (by LBA of 512) */
struct zst {
  uint64_t dwp;                 /* durable write pointer (LBA) */
  bool non_seq;
  /* As the fault layer sees a zone (whole physical sectors): hw, the end
   * of what reached it; dh, the end of what is durable (LBAs). */
  uint64_t hw, dh;
};
static struct zst zs[SIZE / ZONE];

static uint32_t L, P;
static uint64_t zlbas;
static unsigned nzones;
#define CONV 1                  /* zone-conventional=1 */

static struct s4k_zone_desc
zone_desc (struct s4k_dev *d, unsigned z)
{
  struct s4k_zone_desc r;
  uint64_t listed;
  if (s4k_zones_report (s4k_dev_zones (d), (uint64_t) z * zlbas, 0, true, &r,
                        1, &listed) != 1)
    bail ("report zone %u", z);
  return r;
}

static uint64_t
sec_start (uint64_t off)
{
  return off / P * P;
}
static uint64_t
sec_end (uint64_t off_last)
{
  return off_last / P * P + P;
}

/* Makes [a, b) durable (whole physical sectors). */
static void
durable (uint64_t a, uint64_t b)
{
  a = sec_start (a);
  b = b ? sec_end (b - 1) : 0;
  if (a < b)
    memcpy (D + a, M + a, b - a);
}

/* A write or zero written through at off in zone z: the zone's writes
 * below it become durable with it (sequential zones). */
static void
through (unsigned z, uint64_t off, uint64_t len, uint64_t wp_after)
{
  if (z >= CONV) {
    durable ((uint64_t) z * ZONE, off + len);
    zs[z].dwp = wp_after;
    const uint64_t e = sec_end (off + len - 1) / L;
    zs[z].dh = e > zs[z].dh ? e : zs[z].dh;
  }
  else
    durable (off, off + len);
}

static void
fill_data (unsigned char *p, uint64_t off, uint64_t len, unsigned salt)
{
  for (uint64_t i = 0; i < len; i++)
    p[i] = (unsigned char) (((off + i) / L) * 131 + salt * 7 + 1) | 1;
}

/* One random step of the sequence. */
static void
step (struct s4k_dev *d, const struct geo *g, unsigned salt)
{
  const bool aware = g->aware;
  static unsigned char buf[64 * 1024];
  const uint64_t c = below (100);
  if (c < 8) {
    if (s4k_flush (d))
      bail ("flush");
    memcpy (D, M, SIZE);
    for (unsigned z = CONV; z < nzones; z++) {
      zs[z].dwp = zone_desc (d, z).wp;
      zs[z].dh = zs[z].hw;
    }
    return;
  }
  if (c < 18) {
    const unsigned z = CONV + below (nzones - CONV);
    const struct s4k_zone_desc b = zone_desc (d, z);
    static const enum s4k_zone_op ops[] =
      { S4K_ZOP_RESET, S4K_ZOP_CLOSE, S4K_ZOP_FINISH, S4K_ZOP_OPEN };
    const enum s4k_zone_op op = ops[below (4)];
    if (s4k_dev_zone_op (d, op, b.start, false))
      bail ("zone op %d on zone %u", op, z);
    const uint64_t zoff = (uint64_t) z * ZONE;
    if (op == S4K_ZOP_RESET) {
      memset (M + zoff, 0, ZONE);
      memset (D + zoff, 0, ZONE);
      zs[z] = (struct zst) { b.start, false, b.start, b.start };
    }
    else if (op != S4K_ZOP_OPEN) {
      memcpy (D + zoff, M + zoff, ZONE);
      zs[z].dwp = zone_desc (d, z).wp;
      /* CLOSE makes what reached the layer durable; FINISH the pointer
       * it sets. */
      if (op == S4K_ZOP_FINISH)
        zs[z].hw = zs[z].dwp;
      zs[z].dh = zs[z].hw;
    }
    return;
  }
  const bool fua = below (10) == 0;
  const bool zero = c < 24;
  unsigned z = g->seq_only ? CONV + below (nzones - CONV) : below (nzones);
  if (z < CONV) {
    /* Anywhere; zeroes in whole sectors (a zero's cut sectors are writes,
     * cached, and its middle is not). */
    uint64_t len = (1 + below (16)) * L, off = below ((ZONE - len) / L) * L;
    if (zero) {
      off = sec_start (off);
      len = P * (1 + below (2));
    }
    if (zero ? s4k_zero (d, len, off, fua ? S4K_FUA : 0)
             : (fill_data (buf, off, len, salt), s4k_write (d, buf, len, off,
                                                            fua ? S4K_FUA : 0)))
      bail ("conventional write");
    if (zero)
      memset (M + off, 0, len);
    else
      memcpy (M + off, buf, len);
    if (fua || zero)
      through (z, off, len, 0);
    return;
  }
  const struct s4k_zone_desc b = zone_desc (d, z);
  const uint64_t zend = b.start + b.len;
  if (b.cond == S4K_ZC_FULL && !aware)
    return;
  uint64_t lba = b.wp, n;
  if (aware && below (12) == 0) {
    /* Off the pointer: NON_SEQ, the per-sector model from now on. */
    lba = b.start + below (b.len - 8);
    n = 1 + below (8);
  }
  else {
    /* A zero's cut sectors would be cached writes, its middle durable:
     * zeroes at a sector boundary only. */
    if (lba >= zend || (zero && lba * L % P))
      return;
    n = aware && !zero ? 1 + below (12) : (1 + below (3)) * (P / L);
    if (n > zend - lba)
      n = zend - lba;
  }
  const uint64_t off = lba * L, len = n * L;
  int r;
  if (zero)
    r = s4k_zero (d, len, off, fua ? S4K_FUA : 0);
  else {
    fill_data (buf, off, len, salt);
    r = s4k_write (d, buf, len, off, fua ? S4K_FUA : 0);
  }
  if (r == -(S4K_EZONE + S4K_ZERR_UNALIGNED_PHYSICAL))
    return;                     /* a host-aware zero off sectors: no */
  if (r)
    bail ("write at zone %u lba %" PRIu64 " n %" PRIu64 ": %d", z, lba, n, r);
  if (lba != b.wp)
    zs[z].non_seq = true;
  const uint64_t e = sec_end (off + len - 1) / L;
  zs[z].hw = e > zs[z].hw ? e : zs[z].hw;
  if (zero)
    memset (M + off, 0, len);
  else
    memcpy (M + off, buf, len);
  if (fua || zero)
    through (z, off, len, zone_desc (d, z).wp);
}

/* The report's object that starts with "{\"KEY\": V, ", or NULL. */
static const char *
object (const char *rep, const char *key, uint64_t v)
{
  char k[96];
  snprintf (k, sizeof k, "{\"%s\": %" PRIu64 ",", key, v);
  return strstr (rep, k);
}

/* A field's text in the object at o (before its closing brace). */
static const char *
field (const char *o, const char *key)
{
  char k[64];
  snprintf (k, sizeof k, "\"%s\": ", key);
  const char *end = strchr (o, '}');
  const char *p = strstr (o, k);
  return p && p < end ? p + strlen (k) : NULL;
}

static bool
is (const char *v, const char *s)
{
  return v && v[0] == '"' && strncmp (v + 1, s, strlen (s)) == 0 &&
         v[1 + strlen (s)] == '"';
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
  default: return "?";
  }
}

/* The expected contents of physical sector k from its outcome in the
 * report (old: the data it falls back to). */
static bool
expect_sector (const char *rep, uint64_t k, const unsigned char *old)
{
  const uint64_t s = k * P;
  const char *o = object (rep, "sector", k);
  if (!o) {
    memcpy (E + s, M + s, P);
    return true;
  }
  const char *oc = field (o, "outcome");
  if (is (oc, "kept"))
    memcpy (E + s, M + s, P);
  else if (is (oc, "reverted"))
    memcpy (E + s, old + s, P);
  else if (is (oc, "zeroed"))
    memset (E + s, 0, P);
  else if (is (oc, "garbage")) {
    const char *g = field (o, "garbage_from");
    if (!g)
      return false;
    const uint64_t from = strtoull (g, NULL, 10);
    if (from < s || from >= s + P)
      return false;
    /* The new image up to garbage_from; from there on anything (the
     * read's check skips those bytes). */
    memcpy (E + s, M + s, P);
  }
  else if (is (oc, "torn") || is (oc, "unreadable")) {
    memcpy (E + s, old + s, P);
    const char *nl = field (o, "new_lbas");
    if (!nl || *nl != '[')
      return false;
    for (const char *p = nl + 1; *p && *p != ']'; ) {
      char *e;
      uint64_t v = strtoull (p, &e, 10);
      if (e == p)
        break;
      if (v * L < s || v * L >= s + P)
        return false;
      memcpy (E + v * L, M + v * L, L);
      p = *e == ',' ? e + 1 : e;
    }
    if (is (oc, "unreadable"))
      bad[s / 512] = true;
  }
  else
    return false;
  return true;
}

static int
run_seed (const struct geo *g, const char *torn, unsigned seed,
          const char *keep_dir)
{
  char keys[256];
  snprintf (keys, sizeof keys, "size=4M %s zone-size=512K "
            "zone-conventional=1 write-cache=true seed=%u power-cut-after=1000000000", g->keys, seed);
  struct s4k_dev *d = open_dev (keys);
  const struct s4k_geometry *geom = s4k_dev_geometry (d);
  L = geom->logical;
  P = geom->physical;
  zlbas = ZONE / L;
  nzones = SIZE / ZONE;
  memset (M, 0, SIZE);
  memset (D, 0, SIZE);
  memset (bad, 0, sizeof bad);
  for (unsigned z = 0; z < nzones; z++)
    zs[z] = (struct zst) { (uint64_t) z * zlbas, false, (uint64_t) z * zlbas,
                           (uint64_t) z * zlbas };
  rng = seed * 0x9E3779B97F4A7C15ULL + 17;
  const unsigned steps = 20 + below (60);
  for (unsigned i = 0; i < steps; i++)
    step (d, g, seed * 1000 + i);

  struct s4k_zone_desc before[SIZE / ZONE];
  for (unsigned z = CONV; z < nzones; z++)
    before[z] = zone_desc (d, z);
  char *rep = NULL;
  int torn_v = 0;
  for (int i = 0; i < 5; i++)
    if (strcmp (torn, torns[i]) == 0)
      torn_v = i;
  if (s4k_dev_power_cut (d, torn_v, &rep) || !rep)
    bail ("power cut");
  if (keep_dir && seed <= 3) {
    char path[512];
    snprintf (path, sizeof path, "%s/%s-%s-%u.json", keep_dir, g->name,
              torn, seed);
    for (char *p = path + strlen (keep_dir) + 1; *p; p++)
      if (*p == ' ')
        *p = '_';
    FILE *fp = fopen (path, "w");
    if (fp) {
      fputs (rep, fp);
      fclose (fp);
    }
  }

  /* The expected image. */
  const char *why = NULL;
  char whybuf[256];
  for (uint64_t k = 0; k < SIZE / P && !why; k++) {
    const unsigned z = k * P / ZONE;
    if (z < CONV || zs[z].non_seq) {
      if (!expect_sector (rep, k, D))
        why = "a sector's outcome";
    }
  }
  for (unsigned z = CONV; z < nzones && !why; z++) {
    const struct s4k_zone_desc a = zone_desc (d, z), *b = &before[z];
    const uint64_t zend = a.start + a.len;
    const char *o = object (rep, "zone", a.start);
    const bool changed = a.wp != b->wp || a.cond != b->cond;
    const uint8_t want = a.wp == a.start ? S4K_ZC_EMPTY
                       : a.wp == zend ? S4K_ZC_FULL : S4K_ZC_CLOSED;
    snprintf (whybuf, sizeof whybuf, "zone %u (%" PRIu64 "): wp %" PRIu64
              " -> %" PRIu64 " (durable %" PRIu64 "), %s -> %s", z, a.start,
              b->wp, a.wp, zs[z].dwp, cond_name (b->cond),
              cond_name (a.cond));
    if (a.cond != want)
      why = "condition";
    else if (!!o != changed)
      why = "listed iff changed";
    else if (o && (strtoull (field (o, "wp_before"), NULL, 10) != b->wp ||
                   strtoull (field (o, "wp_after"), NULL, 10) != a.wp ||
                   !is (field (o, "cond_before"), cond_name (b->cond)) ||
                   !is (field (o, "cond_after"), cond_name (a.cond))))
      why = "the report's zone entry";
    if (why) {
      why = whybuf;
      break;
    }
    if (zs[z].non_seq) {
      /* The end of the highest sector on the medium, at most the old
       * pointer. */
      uint64_t want = zs[z].dh;
      for (uint64_t k = a.start * L / P; k < zend * L / P; k++) {
        const char *s = object (rep, "sector", k);
        if (s && !is (field (s, "outcome"), "reverted") &&
            (k + 1) * P / L > want)
          want = (k + 1) * P / L;
      }
      want = want < b->wp ? want : b->wp;
      if (a.wp != want) {
        snprintf (whybuf + strlen (whybuf), sizeof whybuf - strlen (whybuf),
                  ", NON_SEQ: expected %" PRIu64, want);
        why = whybuf;
      }
      continue;
    }
    /* On a physical boundary, or at the durable pointer or the old one
     * (a host-aware pointer may cut a sector). */
    if (a.wp < zs[z].dwp || a.wp > b->wp ||
        (a.wp * L % P && a.wp != b->wp && a.wp != zs[z].dwp)) {
      why = whybuf;
      break;
    }
    /* Below the pointer the data written; above it zeroes, but the torn
     * sector. */
    const uint64_t zoff = (uint64_t) z * ZONE, wpoff = a.wp * L;
    memcpy (E + zoff, M + zoff, wpoff - zoff);
    memset (E + wpoff, 0, zoff + ZONE - wpoff);
    const char *t = o ? field (o, "torn_sector") : NULL;
    if (t) {
      const uint64_t tk = strtoull (t, NULL, 10);
      static unsigned char zeros[SIZE];
      if (tk * P != wpoff || !expect_sector (rep, tk, zeros) ||
          is (field (object (rep, "sector", tk), "outcome"), "kept") ||
          is (field (object (rep, "sector", tk), "outcome"), "reverted")) {
        why = whybuf;
        break;
      }
    }
  }
  /* What the device reads. */
  static unsigned char rd[SIZE];
  for (uint64_t k = 0; k < SIZE / P && !why; k++) {
    const uint64_t s = k * P;
    const unsigned z = s / ZONE;
    const int r = s4k_read (d, rd + s, P, s);
    if (bad[s / 512]) {
      if (r != -EIO) {
        snprintf (whybuf, sizeof whybuf, "sector %" PRIu64 ": readable, "
                  "the report says unreadable", k);
        why = whybuf;
      }
      continue;
    }
    if (r) {
      snprintf (whybuf, sizeof whybuf, "sector %" PRIu64 ": read %d", k, r);
      why = whybuf;
      continue;
    }
    const char *o = object (rep, "sector", k);
    const bool garbage = o && is (field (o, "outcome"), "garbage");
    for (uint64_t i = s; i < s + P && !why; i++)
      if (rd[i] != E[i] && !(garbage &&
                             i >= strtoull (field (o, "garbage_from"),
                                            NULL, 10))) {
        snprintf (whybuf, sizeof whybuf, "sector %" PRIu64 " (zone %u) "
                  "byte %" PRIu64 ": %02x, expected %02x (written %02x, "
                  "durable %02x)", k, z, i - s, rd[i], E[i], M[i], D[i]);
        why = whybuf;
      }
  }
  /* A host-managed zone takes a write at its new pointer. */
  if (!why && !g->aware)
    for (unsigned z = CONV; z < nzones; z++) {
      const struct s4k_zone_desc a = zone_desc (d, z);
      if (a.cond == S4K_ZC_FULL)
        continue;
      static unsigned char buf[4096 * 2];
      fill_data (buf, a.wp * L, P, 99);
      if (s4k_write (d, buf, P, a.wp * L, 0) ||
          s4k_read (d, rd, P, a.wp * L) || memcmp (rd, buf, P) ||
          zone_desc (d, z).wp != a.wp + P / L) {
        snprintf (whybuf, sizeof whybuf, "zone %u: a write at the new "
                  "pointer %" PRIu64, z, a.wp);
        why = whybuf;
      }
      break;
    }
  if (why)
    diag ("%s torn=%s seed %u: %s\n%s", g->name, torn, seed, why, rep);
  free (rep);
  s4k_dev_close (d);
  return why ? -1 : 0;
}

/* The counts over seeds: cuts that kept part of a zone's unflushed
 * writes, all, none, and tore a sector; so that the test shows it saw
 * each case. */
static void
test_random (unsigned nseeds, const char *keep_dir)
{
  for (size_t gi = 0; gi < sizeof geos / sizeof geos[0]; gi++)
    for (size_t ti = 0; ti < 5; ti++) {
      unsigned failed = 0;
      for (unsigned seed = 1; seed <= nseeds; seed++)
        failed += run_seed (&geos[gi], torns[ti], seed, keep_dir) != 0;
      ok (failed == 0, "%s, torn=%s: %u random sequences, the cut keeps a "
          "prefix per zone, pointers and conditions agree (%u failed)",
          geos[gi].name, torns[ti], nseeds, failed);
    }
}

/* Fixed cases: what flushes, FUA, CLOSE and FINISH make durable, and
 * the power-cut-after write. */
static void
test_fixed (void)
{
  static unsigned char buf[65536], rd[65536];
  memset (buf, 0x5a, sizeof buf);
  /* torn=none: a cut keeps nothing unflushed. */
  struct s4k_dev *d = open_dev ("size=4M model=4kn zoned=host-managed "
                                "zone-size=512K write-cache=true");
  zlbas = 128;
  L = P = 4096;
  nzones = 8;
  const uint64_t z1 = 128;
  char *rep = NULL;
  ok (s4k_write (d, buf, 8192, z1 * 4096, 0) == 0 && s4k_flush (d) == 0 &&
      s4k_write (d, buf, 8192, (z1 + 2) * 4096, 0) == 0 &&
      zone_desc (d, 1).wp == z1 + 4 &&
      s4k_dev_power_cut (d, 0, &rep) == 0 &&
      zone_desc (d, 1).wp == z1 + 2 &&
      zone_desc (d, 1).cond == S4K_ZC_CLOSED &&
      s4k_read (d, rd, 8192, (z1 + 2) * 4096) == 0 && rd[0] == 0 &&
      rd[8191] == 0, "torn=none: the pointer back to the flush, the zone "
      "closed, above it zeroes");
  ok (rep && strstr (rep, "\"zones\": [\n  {\"zone\": 128, \"lbas\": 128, "
                     "\"type\": \"sequential-write-required\", "
                     "\"wp_before\": 132, \"wp_after\": 130, "
                     "\"cond_before\": \"implicitly-open\", "
                     "\"cond_after\": \"closed\"}\n ]"),
      "the report lists the zone's pointer before and after");
  if (rep && !strstr (rep, "\"wp_after\": 130"))
    diag ("%s", rep);
  free (rep);
  /* FUA: durable with the zone's writes below it. */
  ok (s4k_write (d, buf, 8192, (z1 + 2) * 4096, 0) == 0 &&
      s4k_write (d, buf, 4096, (z1 + 4) * 4096, S4K_FUA) == 0 &&
      s4k_write (d, buf, 4096, (z1 + 5) * 4096, 0) == 0 &&
      s4k_dev_power_cut (d, 0, &rep) == 0 && zone_desc (d, 1).wp == z1 + 5,
      "a FUA write makes the zone durable up to its end");
  free (rep);
  /* CLOSE, FINISH: durable. */
  ok (s4k_write (d, buf, 4096, (z1 + 5) * 4096, 0) == 0 &&
      s4k_dev_zone_op (d, S4K_ZOP_CLOSE, z1, false) == 0 &&
      s4k_write (d, buf, 4096, 2 * z1 * 4096, 0) == 0 &&
      s4k_dev_zone_op (d, S4K_ZOP_FINISH, 2 * z1, false) == 0 &&
      s4k_dev_power_cut (d, 0, &rep) == 0 && zone_desc (d, 1).wp == z1 + 6 &&
      zone_desc (d, 1).cond == S4K_ZC_CLOSED &&
      zone_desc (d, 2).cond == S4K_ZC_FULL &&
      s4k_read (d, rd, 4096, 2 * z1 * 4096) == 0 && rd[0] == 0x5a,
      "CLOSE and FINISH make the zone's writes durable");
  free (rep);
  /* RESET: durable at once (a cut does not bring the data back). */
  ok (s4k_dev_zone_op (d, S4K_ZOP_RESET, z1, false) == 0 &&
      s4k_dev_power_cut (d, 0, &rep) == 0 && zone_desc (d, 1).wp == z1 &&
      zone_desc (d, 1).cond == S4K_ZC_EMPTY &&
      s4k_read (d, rd, 4096, z1 * 4096) == 0 && rd[0] == 0,
      "RESET is durable at once");
  free (rep);
  /* An explicitly open empty zone: EMPTY after the cut. */
  ok (s4k_dev_zone_op (d, S4K_ZOP_OPEN, 3 * z1, false) == 0 &&
      zone_desc (d, 3).cond == S4K_ZC_EXP_OPEN &&
      s4k_dev_power_cut (d, 0, &rep) == 0 &&
      zone_desc (d, 3).cond == S4K_ZC_EMPTY &&
      strstr (rep, "\"cond_before\": \"explicitly-open\", \"cond_after\": "
              "\"empty\""), "an open empty zone is EMPTY after the cut, "
      "and listed");
  free (rep);
  s4k_dev_close (d);

  /* README's example: 512e, 4 MiB zones, zone 1's first 16 LBAs
   * flushed, 24 more cached, a cut with seed=9 (torn=sector). */
  d = open_dev ("size=64M model=512e zoned=host-managed zone-size=4M "
                "zone-conventional=1 write-cache=true seed=9 "
                "power-cut-after=1000000000");
  zlbas = 8192;
  memset (buf, 0xa5, sizeof buf);
  if (s4k_write (d, buf, 16 * 512, 8192 * 512, 0) || s4k_flush (d) ||
      s4k_write (d, buf, 24 * 512, 8208 * 512, 0) ||
      s4k_dev_power_cut (d, -1, &rep))
    bail ("README's example");
  ok (strstr (rep, "{\"sector\": 1026, \"lba\": 8208, \"lbas\": 8, "
              "\"outcome\": \"torn\", \"new_lbas\": [8208, 8211, 8212, "
              "8213, 8214, 8215]}") &&
      strstr (rep, "{\"zone\": 8192, \"lbas\": 8192, \"type\": "
              "\"sequential-write-required\", \"wp_before\": 8232, "
              "\"wp_after\": 8208, \"cond_before\": \"implicitly-open\", "
              "\"cond_after\": \"closed\", \"torn_sector\": 1026}") &&
      zone_desc (d, 1).wp == 8208 &&
      s4k_read (d, rd, 512, 8208 * 512) == 0 && rd[0] == 0xa5 &&
      s4k_read (d, rd, 512, 8209 * 512) == 0 && rd[0] == 0 &&
      s4k_read (d, rd, 512, 8207 * 512) == 0 && rd[0] == 0xa5,
      "README's example: the report and the data");
  free (rep);
  s4k_dev_close (d);

  /* Host-aware: a flushed write across two zones stays in both. */
  d = open_dev ("size=4M model=4kn zoned=host-aware zone-size=512K "
                "write-cache=true");
  zlbas = 128;
  ok (s4k_write (d, buf, 8192, 255 * 4096, 0) == 0 && s4k_flush (d) == 0 &&
      s4k_dev_power_cut (d, 0, &rep) == 0 && zone_desc (d, 1).wp == 256 &&
      zone_desc (d, 2).wp == 257 && zone_desc (d, 2).cond == S4K_ZC_CLOSED,
      "host-aware: a flushed write across two zones keeps both pointers");
  free (rep);
  /* Host-aware off the pointer (NON_SEQ): the pointer goes back to the
   * end of what the medium holds, not the end of the lost write. */
  ok (s4k_dev_zone_op (d, S4K_ZOP_RESET, 384, false) == 0 &&
      s4k_write (d, buf, 4096, 384 * 4096, 0) == 0 && s4k_flush (d) == 0 &&
      s4k_write (d, buf, 4096, 424 * 4096, 0) == 0 &&
      zone_desc (d, 3).non_seq && zone_desc (d, 3).wp == 425 &&
      s4k_dev_power_cut (d, 0, &rep) == 0 && zone_desc (d, 3).wp == 385 &&
      zone_desc (d, 3).cond == S4K_ZC_CLOSED &&
      s4k_read (d, rd, 4096, 424 * 4096) == 0 && rd[0] == 0 &&
      strstr (rep, "\"wp_before\": 425, \"wp_after\": 385"),
      "host-aware NON_SEQ, torn=none: the lost write's pointer goes back "
      "to the flushed end");
  free (rep);
  ok (s4k_write (d, buf, 4096, 400 * 4096, S4K_FUA) == 0 &&
      s4k_write (d, buf, 4096, 410 * 4096, 0) == 0 &&
      s4k_dev_power_cut (d, 0, &rep) == 0 && zone_desc (d, 3).wp == 401 &&
      s4k_read (d, rd, 4096, 400 * 4096) == 0 && rd[0] == 0xa5,
      "host-aware NON_SEQ: a FUA write off the pointer is durable, the "
      "pointer at its end");
  free (rep);
  s4k_dev_close (d);

  /* With file= (no cache): the cut's pointer and condition are on
   * record, a restart shows them. */
  char img[] = "/tmp/zonecut-XXXXXX";
  char keys[256], zpath[300];
  scratch_file (img, zpath, sizeof zpath);
  snprintf (keys, sizeof keys, "size=4M model=4kn zoned=host-managed "
            "zone-size=512K file=%s zone-reformat=true power-cut-after=3 "
            "torn=none", img);
  d = open_dev (keys);
  zlbas = 128;
  const int w1 = s4k_write (d, buf, 8192, 128 * 4096, 0);
  const int w2 = s4k_write (d, buf, 8192, 130 * 4096, 0);
  const int w3 = s4k_write (d, buf, 8192, 132 * 4096, 0);
  const struct s4k_zone_desc cut = zone_desc (d, 1);
  s4k_dev_close (d);
  snprintf (keys, sizeof keys, "size=4M model=4kn zoned=host-managed "
            "zone-size=512K file=%s", img);
  d = open_dev (keys);
  const struct s4k_zone_desc back = zone_desc (d, 1);
  ok (w1 == 0 && w2 == 0 && w3 == -EIO && cut.wp == 132 &&
      cut.cond == S4K_ZC_CLOSED && back.wp == 132 &&
      back.cond == S4K_ZC_CLOSED,
      "file=: the pointer and the closed zone a cut left are kept across a "
      "restart (wp %" PRIu64 ", after the restart %" PRIu64 ")", cut.wp,
      back.wp);
  s4k_dev_close (d);
  unlink (img);
  unlink (zpath);

  /* The write in flight at power-cut-after is never kept. */
  unsigned kept = 0, torn = 0;
  for (unsigned seed = 1; seed <= 40; seed++) {
    char keys[160];
    snprintf (keys, sizeof keys, "size=4M model=512e zoned=host-managed "
              "zone-size=512K write-cache=true power-cut-after=3 seed=%u",
              seed);
    d = open_dev (keys);
    zlbas = 1024;
    const uint64_t z = 1024;
    int r1 = s4k_write (d, buf, 8192, z * 512, 0);
    int r2 = s4k_write (d, buf, 8192, (z + 16) * 512, 0);
    int r3 = s4k_write (d, buf, 8192, (z + 32) * 512, 0);
    const struct s4k_zone_desc a = zone_desc (d, 1);
    if (r1 || r2 || r3 != -EIO || a.wp > z + 32 || a.wp % 8) {
      diag ("seed %u: %d %d %d wp %" PRIu64, seed, r1, r2, r3, a.wp);
      kept = 1000;
    }
    kept += a.wp == z + 32;
    bool nonzero = false;
    if (s4k_read (d, rd, 4096, a.wp * 512) != 0)
      nonzero = true;
    for (unsigned i = 0; i < 4096; i++)
      nonzero |= rd[i] != 0;
    torn += nonzero;
    s4k_dev_close (d);
  }
  ok (kept > 0 && kept < 40, "power-cut-after: the failed write is never "
      "kept, the acknowledged ones may be (%u of 40 kept all)", kept);
  ok (torn > 0, "the sector at the new pointer is torn in some (%u)", torn);
}

int
main (void)
{
  const char *keep = getenv ("ZONECUT_REPORTS");
  const char *san = getenv ("SECT4K_SAN");
  test_fixed ();
  test_random (san && *san ? 25 : 80, keep);
  return done_testing ();
}
