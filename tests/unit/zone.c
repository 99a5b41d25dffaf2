/* SPDX-License-Identifier: BSD-3-Clause */
/* The zone model (issue 33, lib/zone/zone.c): the keys and their one-line
 * refusals, the layout, every condition transition of ZBC-2's state
 * machine, every error with the sense it maps to, the open limit with
 * its implicit close, the active limit, host-aware writes, reads, and
 * REPORT ZONES with every reporting option and the partial bit. */
#include <errno.h>
#include <string.h>

#include "sect4k/zone.h"
#include "tap.h"

#define MiB (1024ull * 1024)

/* "key=value ..." into c against g: 0, or -1 with err filled. */
static int
keys (struct s4k_zone_config *c, const struct s4k_geometry *g,
      const char *kv, char *err, size_t errlen)
{
  static char store[32][64];
  static unsigned ns;
  memset (c, 0, sizeof *c);
  for (const char *p = kv; *p; ) {
    size_t n = strcspn (p, " ");
    char *k = store[ns++ % 32];
    snprintf (k, 64, "%.*s", (int) n, p);
    p += n + (p[n] == ' ');
    char *eq = strchr (k, '=');
    *eq = '\0';
    int r = s4k_zone_set (c, k, eq + 1, err, errlen);
    if (r == 1)
      bail ("%s: not a zone key", k);
    if (r)
      return -1;
  }
  return s4k_zone_finish (c, g, err, errlen);
}

static struct s4k_geometry
geom (uint64_t size, uint32_t logical, uint32_t physical)
{
  return (struct s4k_geometry) { size, logical, physical, 0 };
}

static struct s4k_zones *
zones (const struct s4k_geometry *g, const char *kv)
{
  struct s4k_zone_config c;
  struct s4k_zones *z;
  char err[256];
  if (keys (&c, g, kv, err, sizeof err))
    bail ("%s: %s", kv, err);
  if (s4k_zones_new (&z, &c, g))
    bail ("%s: s4k_zones_new failed", kv);
  return z;
}

static struct s4k_zone_desc
zone (struct s4k_zones *z, uint64_t lba)
{
  struct s4k_zone_desc d;
  uint64_t listed;
  if (s4k_zones_report (z, lba, 0, true, &d, 1, &listed) != 1)
    bail ("report at %" PRIu64 " failed", lba);
  return d;
}

static uint8_t
cond (struct s4k_zones *z, uint64_t lba)
{
  return zone (z, lba).cond;
}

static void
counts (struct s4k_zones *z, uint32_t imp, uint32_t exp, uint32_t closed,
        const char *what)
{
  struct s4k_zones_counts n;
  s4k_zones_counts (z, &n);
  if (!ok (n.imp_open == imp && n.exp_open == exp && n.closed == closed,
           "%s: %u implicitly open, %u explicitly open, %u closed",
           what, imp, exp, closed))
    diag ("got %u, %u, %u", n.imp_open, n.exp_open, n.closed);
}

#define is_err(got, want, ...)                                          \
  do {                                                                  \
    int g_ = (got), w_ = (want);                                        \
    if (!ok (g_ == w_, __VA_ARGS__))                                    \
      diag ("got %d (%s), want %d (%s)", g_, s4k_zone_strerror (-g_),   \
            w_, s4k_zone_strerror (-w_));                               \
  } while (0)

/* ---- keys ------------------------------------------------------------- */

static void
test_keys (void)
{
  static const struct {
    uint64_t size; uint32_t logical, physical, alignment;
    const char *kv, *msg;
  } bad[] = {
    { 1024 * MiB, 512, 4096, 0, "zoned=smr",
      "zoned=smr: must be host-managed, host-aware or none" },
    { 1024 * MiB, 512, 4096, 0, "zone-size=64M",
      "zone-size=64M: needs zoned=host-managed or zoned=host-aware" },
    { 1024 * MiB, 512, 4096, 0, "zone-conventional=2",
      "zone-conventional=2: needs zoned=host-managed or zoned=host-aware" },
    { 1024 * MiB, 512, 4096, 0, "zone-max-open=8",
      "zone-max-open=8: needs zoned=host-managed or zoned=host-aware" },
    { 1024 * MiB, 512, 4096, 0, "zone-max-active=8",
      "zone-max-active=8: needs zoned=host-managed or zoned=host-aware" },
    { 1024 * MiB, 512, 4096, 0, "zoned=host-managed zone-size=96M",
      "zone-size=96M: not a power of two (a number with an optional "
      "k/M/G suffix, e.g. 256M)" },
    { 1024 * MiB, 512, 4096, 0, "zoned=host-managed zone-size=lots",
      "zone-size=lots: not a power of two (a number with an optional "
      "k/M/G suffix, e.g. 256M)" },
    { 1024 * MiB, 512, 4096, 0, "zoned=host-managed zone-size=2K",
      "zone-size=2K: must be a multiple of physical=4096 and at most 1T "
      "(Linux's zone size limit)" },
    { 4ull << 40, 512, 4096, 0, "zoned=host-managed zone-size=2T",
      "zone-size=2T: must be a multiple of physical=4096 and at "
      "most 1T (Linux's zone size limit)" },
    { 1024 * MiB, 512, 4096, 0, "zoned=host-managed zone-size=2G",
      "zone-size=2G: larger than the device (size=1073741824): "
      "give a smaller zone-size=" },
    { 128 * MiB, 512, 4096, 0, "zoned=host-managed",
      "zone-size=256M (the default): larger than the device "
      "(size=134217728): give a smaller zone-size=" },
    { 1024 * MiB, 512, 4096, 3584, "zoned=host-managed",
      "alignment-offset=3584: a zoned device has none (its zones start at "
      "LBA 0, on physical boundaries)" },
    { 1024 * MiB, 512, 4096, 0, "zoned=host-managed zone-conventional=4",
      "zone-conventional=4: must leave a sequential zone (the device has 4 "
      "zones of 268435456 bytes)" },
    { 1000 * MiB, 512, 4096, 0, "zoned=host-managed zone-conventional=4",
      "zone-conventional=4: must leave a sequential zone (the device has 4 "
      "zones of 268435456 bytes)" },
    { 1024 * MiB, 512, 4096, 0, "zoned=host-managed zone-conventional=-1",
      "zone-conventional=-1: not a number of zones (0 to 4294967295)" },
    { 1024 * MiB, 512, 4096, 0, "zoned=host-managed zone-max-open=4294967296",
      "zone-max-open=4294967296: not a number of zones (0 to 4294967295)" },
    { 1024 * MiB, 512, 4096, 0, "zoned=host-aware zone-max-open=2",
      "zone-max-open=2: host-aware zones have no limit (ZBC-2 limits open "
      "zones of host-managed drives only)" },
    { 1024 * MiB, 512, 4096, 0, "zoned=host-aware zone-max-active=2",
      "zone-max-active=2: host-aware zones have no limit (ZBC-2 limits "
      "open zones of host-managed drives only)" },
    { 1ull << 52, 4096, 4096, 0, "zoned=host-managed zone-size=4K",
      "zone-size=4K: more than 2^32 zones on size=4503599627370496: give "
      "a larger zone-size=" },
    { 1024 * MiB, 512, 4096, 0,
      "zoned=host-managed zone-max-open=3 zone-max-active=2",
      "zone-max-open=3: must be at most zone-max-active=2 (an open zone is "
      "active)" },
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    struct s4k_geometry g = { bad[i].size, bad[i].logical, bad[i].physical,
                              bad[i].alignment };
    struct s4k_zone_config c;
    char err[256] = "";
    int r = keys (&c, &g, bad[i].kv, err, sizeof err);
    if (!ok (r == -1 && strcmp (err, bad[i].msg) == 0,
             "refused in one line: %s", bad[i].kv))
      diag ("got \"%s\"", err);
  }

  struct s4k_geometry g = geom (1024 * MiB, 512, 4096);
  struct s4k_zone_config c;
  char err[256];
  ok (keys (&c, &g, "", err, sizeof err) == 0 && c.model == S4K_ZONED_NONE,
      "no zone key: not zoned");
  ok (keys (&c, &g, "zoned=none", err, sizeof err) == 0 &&
      c.model == S4K_ZONED_NONE, "zoned=none: not zoned");
  ok (keys (&c, &g, "zoned=host-managed", err, sizeof err) == 0 &&
      c.size == 256 * MiB && c.conventional == 0 && !c.max_open,
      "zoned=host-managed: 256 MiB zones by default");
  struct s4k_geometry g128 = geom (128 * MiB, 512, 4096);
  ok (s4k_zone_finish (&c, &g128, err, sizeof err) == -1 &&
      strcmp (err, "zone-size=256M (the default): larger than the device "
              "(size=134217728): give a smaller zone-size=") == 0,
      "finish again: the default named as such");
  ok (keys (&c, &g, "zoned=host-aware zone-size=64M zone-conventional=15",
            err, sizeof err) == 0 && c.size == 64 * MiB &&
      c.conventional == 15, "zoned=host-aware zone-size=64M "
      "zone-conventional=15");
  ok (keys (&c, &g, "zoned=host-managed zone-size=1G", err, sizeof err) == 0,
      "one zone the size of the device");
  struct s4k_geometry g4k = geom (1024 * MiB, 4096, 4096);
  ok (keys (&c, &g4k, "zoned=host-managed zone-size=4K", err, sizeof err)
      == 0, "4kn: a zone of one block");
  struct s4k_geometry big = geom (4ull << 40, 512, 4096);
  ok (keys (&c, &big, "zoned=host-managed zone-size=1T", err, sizeof err)
      == 0, "zone-size=1T (Linux's largest)");
  ok (s4k_zone_set (&c, "size", "1G", err, sizeof err) == 1,
      "size= is not a zone key");
}

/* ---- layout ----------------------------------------------------------- */

static void
test_layout (void)
{
  /* 1000 MiB of 512e in 256 MiB zones: 3 whole and a 232 MiB one. */
  struct s4k_geometry g = geom (1000 * MiB, 512, 4096);
  struct s4k_zones *z = zones (&g, "zoned=host-managed zone-conventional=1 "
                               "zone-max-open=2");
  struct s4k_zones_info in;
  s4k_zones_info (z, &in);
  const uint64_t zl = 256 * MiB / 512;
  ok (in.model == S4K_ZONED_HOST_MANAGED && in.capacity == 1000 * MiB / 512
      && in.zone_lbas == zl && in.nr_zones == 4 && in.conventional == 1 &&
      in.max_open == 2 && in.max_active == 0, "layout: 4 zones of %" PRIu64
      " LBAs, 1 conventional", zl);
  struct s4k_zone_desc d[8];
  uint64_t listed;
  is_u64 (s4k_zones_report (z, 0, 0, false, d, 8, &listed), 4,
          "report: 4 zones");
  ok (d[0].type == S4K_ZT_CONVENTIONAL && d[0].cond == S4K_ZC_NOT_WP &&
      d[0].wp == UINT64_MAX && d[0].start == 0 && d[0].len == zl,
      "zone 0: conventional, no write pointer");
  ok (d[1].type == S4K_ZT_SEQ_REQUIRED && d[1].cond == S4K_ZC_EMPTY &&
      d[1].start == zl && d[1].wp == zl && d[1].len == zl,
      "zone 1: sequential write required, empty, wp at its start");
  ok (d[3].start == 3 * zl && d[3].len == 1000 * MiB / 512 - 3 * zl &&
      d[3].type == S4K_ZT_SEQ_REQUIRED, "last zone smaller: %" PRIu64
      " LBAs", d[3].len);
  s4k_zones_free (z);

  z = zones (&g, "zoned=host-aware zone-size=512M");
  s4k_zones_info (z, &in);
  is_u64 (s4k_zones_report (z, 0, 0, false, d, 8, &listed), 2,
          "host-aware: 2 zones");
  ok (d[0].type == S4K_ZT_SEQ_PREFERRED && d[1].type ==
      S4K_ZT_SEQ_PREFERRED && d[1].len == (1000 - 512) * MiB / 512,
      "host-aware: sequential write preferred zones, the last smaller");
  s4k_zones_free (z);

  struct s4k_zone_config c = { .model = S4K_ZONED_NONE };
  ok (s4k_zones_new (&z, &c, &g) == -EINVAL, "not zoned: no zones");
}

/* ---- host-managed transitions ----------------------------------------- */

/* 4kn, 8 zones of 16 blocks, zone 0 conventional. */
#define ZL 16

static struct s4k_zones *
small (const char *extra)
{
  static char kv[256];
  struct s4k_geometry g = geom (8 * ZL * 4096, 4096, 4096);
  snprintf (kv, sizeof kv, "zoned=host-managed zone-size=64K "
            "zone-conventional=1 %s", extra);
  return zones (&g, kv);
}

static void
test_transitions (void)
{
  struct s4k_zones *z = small ("");
  const uint64_t a = ZL, b = 2 * ZL;

  /* EMPTY -write-> IMPLICITLY OPEN -write to the end-> FULL */
  is_err (s4k_zones_write (z, a, 4), 0, "write at wp of an empty zone");
  ok (cond (z, a) == S4K_ZC_IMP_OPEN && zone (z, a).wp == a + 4,
      "EMPTY -> IMPLICITLY OPEN, wp moves 4");
  counts (z, 1, 0, 0, "after the write");
  is_err (s4k_zones_write (z, a + 4, 4), 0, "write at the new wp");
  is_u64 (zone (z, a).wp, a + 8, "IMPLICITLY OPEN -> IMPLICITLY OPEN, wp +4");
  /* IMPLICITLY OPEN -close-> CLOSED -write-> IMPLICITLY OPEN */
  is_err (s4k_zones_op (z, S4K_ZOP_CLOSE, a, false), 0, "close");
  ok (cond (z, a) == S4K_ZC_CLOSED && zone (z, a).wp == a + 8,
      "IMPLICITLY OPEN -> CLOSED, wp kept");
  counts (z, 0, 0, 1, "closed");
  is_err (s4k_zones_write (z, a + 8, 4), 0, "write to a closed zone");
  ok (cond (z, a) == S4K_ZC_IMP_OPEN, "CLOSED -> IMPLICITLY OPEN");
  /* IMPLICITLY OPEN -open-> EXPLICITLY OPEN -write-> EXPLICITLY OPEN */
  is_err (s4k_zones_op (z, S4K_ZOP_OPEN, a, false), 0, "open");
  ok (cond (z, a) == S4K_ZC_EXP_OPEN, "IMPLICITLY OPEN -> EXPLICITLY OPEN");
  counts (z, 0, 1, 0, "explicitly open");
  is_err (s4k_zones_write (z, a + 12, 2), 0, "write to an open zone");
  ok (cond (z, a) == S4K_ZC_EXP_OPEN, "EXPLICITLY OPEN stays on a write");
  /* EXPLICITLY OPEN -close-> CLOSED -open-> EXPLICITLY OPEN */
  is_err (s4k_zones_op (z, S4K_ZOP_CLOSE, a, false), 0, "close");
  ok (cond (z, a) == S4K_ZC_CLOSED, "EXPLICITLY OPEN -> CLOSED");
  is_err (s4k_zones_op (z, S4K_ZOP_OPEN, a, false), 0, "open a closed zone");
  ok (cond (z, a) == S4K_ZC_EXP_OPEN, "CLOSED -> EXPLICITLY OPEN");
  is_err (s4k_zones_op (z, S4K_ZOP_OPEN, a, false), 0, "open it again");
  ok (cond (z, a) == S4K_ZC_EXP_OPEN, "EXPLICITLY OPEN -open-> itself");
  /* The write reaching the end: FULL, wp at the end. */
  is_err (s4k_zones_write (z, a + 14, 2), 0, "write to the zone's end");
  ok (cond (z, a) == S4K_ZC_FULL && zone (z, a).wp == a + ZL,
      "EXPLICITLY OPEN -> FULL, wp at the zone's end");
  counts (z, 0, 0, 0, "full holds nothing");
  /* FULL: open, close, finish change nothing; reset empties it. */
  is_err (s4k_zones_op (z, S4K_ZOP_OPEN, a, false), 0, "open a full zone");
  is_err (s4k_zones_op (z, S4K_ZOP_CLOSE, a, false), 0, "close a full zone");
  is_err (s4k_zones_op (z, S4K_ZOP_FINISH, a, false), 0, "finish it");
  ok (cond (z, a) == S4K_ZC_FULL, "FULL stays FULL");
  is_err (s4k_zones_op (z, S4K_ZOP_RESET, a, false), 0, "reset");
  ok (cond (z, a) == S4K_ZC_EMPTY && zone (z, a).wp == a,
      "FULL -> EMPTY, wp at the start");
  /* EMPTY: close and reset change nothing; open; close -> EMPTY. */
  is_err (s4k_zones_op (z, S4K_ZOP_CLOSE, a, false), 0, "close an empty zone");
  is_err (s4k_zones_op (z, S4K_ZOP_RESET, a, false), 0, "reset an empty zone");
  ok (cond (z, a) == S4K_ZC_EMPTY, "EMPTY stays EMPTY");
  is_err (s4k_zones_op (z, S4K_ZOP_OPEN, a, false), 0, "open an empty zone");
  ok (cond (z, a) == S4K_ZC_EXP_OPEN, "EMPTY -> EXPLICITLY OPEN");
  is_err (s4k_zones_op (z, S4K_ZOP_CLOSE, a, false), 0, "close it unwritten");
  ok (cond (z, a) == S4K_ZC_EMPTY, "EXPLICITLY OPEN, nothing written -> "
      "EMPTY");
  counts (z, 0, 0, 0, "nothing open");
  /* Finish from every condition that has one. */
  is_err (s4k_zones_op (z, S4K_ZOP_FINISH, a, false), 0, "finish empty");
  ok (cond (z, a) == S4K_ZC_FULL && zone (z, a).wp == a + ZL,
      "EMPTY -> FULL");
  s4k_zones_op (z, S4K_ZOP_RESET, a, false);
  s4k_zones_write (z, a, 1);
  is_err (s4k_zones_op (z, S4K_ZOP_FINISH, a, false), 0, "finish");
  ok (cond (z, a) == S4K_ZC_FULL, "IMPLICITLY OPEN -> FULL");
  s4k_zones_op (z, S4K_ZOP_RESET, a, false);
  s4k_zones_op (z, S4K_ZOP_OPEN, a, false);
  is_err (s4k_zones_op (z, S4K_ZOP_FINISH, a, false), 0, "finish");
  ok (cond (z, a) == S4K_ZC_FULL, "EXPLICITLY OPEN -> FULL");
  s4k_zones_op (z, S4K_ZOP_RESET, a, false);
  s4k_zones_write (z, a, 1);
  s4k_zones_op (z, S4K_ZOP_CLOSE, a, false);
  is_err (s4k_zones_op (z, S4K_ZOP_FINISH, a, false), 0, "finish");
  ok (cond (z, a) == S4K_ZC_FULL, "CLOSED -> FULL");
  counts (z, 0, 0, 0, "finish released everything");
  /* Reset from the open and closed conditions. */
  s4k_zones_op (z, S4K_ZOP_RESET, a, false);
  s4k_zones_write (z, a, 1);
  is_err (s4k_zones_op (z, S4K_ZOP_RESET, a, false), 0, "reset");
  ok (cond (z, a) == S4K_ZC_EMPTY, "IMPLICITLY OPEN -> EMPTY");
  s4k_zones_op (z, S4K_ZOP_OPEN, a, false);
  is_err (s4k_zones_op (z, S4K_ZOP_RESET, a, false), 0, "reset");
  ok (cond (z, a) == S4K_ZC_EMPTY, "EXPLICITLY OPEN -> EMPTY");
  s4k_zones_write (z, a, 1);
  s4k_zones_op (z, S4K_ZOP_CLOSE, a, false);
  is_err (s4k_zones_op (z, S4K_ZOP_RESET, a, false), 0, "reset");
  ok (cond (z, a) == S4K_ZC_EMPTY && zone (z, a).wp == a,
      "CLOSED -> EMPTY");
  counts (z, 0, 0, 0, "reset released everything");

  /* The ALL forms. */
  s4k_zones_write (z, a, 2);                    /* a: implicitly open */
  s4k_zones_op (z, S4K_ZOP_OPEN, b, false);     /* b: explicitly open */
  s4k_zones_write (z, 3 * ZL, 2);
  s4k_zones_op (z, S4K_ZOP_CLOSE, 3 * ZL, false);       /* closed */
  s4k_zones_op (z, S4K_ZOP_FINISH, 4 * ZL, false);      /* full */
  is_err (s4k_zones_op (z, S4K_ZOP_CLOSE, 0, true), 0, "close all");
  ok (cond (z, a) == S4K_ZC_CLOSED && cond (z, b) == S4K_ZC_EMPTY &&
      cond (z, 3 * ZL) == S4K_ZC_CLOSED && cond (z, 4 * ZL) == S4K_ZC_FULL &&
      cond (z, 0) == S4K_ZC_NOT_WP, "CLOSE ALL: open zones closed (or "
      "empty), the rest kept");
  is_err (s4k_zones_op (z, S4K_ZOP_OPEN, 0, true), 0, "open all");
  ok (cond (z, a) == S4K_ZC_EXP_OPEN && cond (z, 3 * ZL) == S4K_ZC_EXP_OPEN
      && cond (z, b) == S4K_ZC_EMPTY && cond (z, 4 * ZL) == S4K_ZC_FULL,
      "OPEN ALL: closed zones open explicitly, empty ones stay empty");
  s4k_zones_write (z, 5 * ZL, 1);               /* implicitly open */
  is_err (s4k_zones_op (z, S4K_ZOP_FINISH, 0, true), 0, "finish all");
  ok (cond (z, a) == S4K_ZC_FULL && cond (z, 3 * ZL) == S4K_ZC_FULL &&
      cond (z, 5 * ZL) == S4K_ZC_FULL && cond (z, b) == S4K_ZC_EMPTY,
      "FINISH ALL: open and closed zones full, empty ones stay empty");
  is_err (s4k_zones_op (z, S4K_ZOP_RESET, 0, true), 0, "reset all");
  struct s4k_zone_desc d[8];
  uint64_t listed;
  is_u64 (s4k_zones_report (z, 0, 0x01, false, d, 8, &listed), 7,
          "RESET ALL: every sequential zone empty");
  counts (z, 0, 0, 0, "after reset all");
  s4k_zones_free (z);
}

/* ---- errors ----------------------------------------------------------- */

static void
test_errors (void)
{
  /* The table every front end maps from, as ZBC-2 and scsi_debug. */
  static const struct { int err; uint8_t key, asc, ascq; } sense[] = {
    { S4K_ZERR_LBA_OUT_OF_RANGE, 5, 0x21, 0x00 },
    { S4K_ZERR_NOT_ZONE_START, 5, 0x24, 0x00 },
    { S4K_ZERR_NOT_WRITE_POINTER_ZONE, 5, 0x24, 0x00 },
    { S4K_ZERR_BAD_REPORTING_OPTION, 5, 0x24, 0x00 },
    { S4K_ZERR_ZONE_FULL, 5, 0x24, 0x00 },
    { S4K_ZERR_UNALIGNED_WRITE, 5, 0x21, 0x04 },
    { S4K_ZERR_UNALIGNED_PHYSICAL, 5, 0x21, 0x04 },
    { S4K_ZERR_WRITE_BOUNDARY, 5, 0x21, 0x05 },
    { S4K_ZERR_READ_CROSS_TYPE, 5, 0x21, 0x06 },
    { S4K_ZERR_READ_ONLY, 7, 0x27, 0x08 },
    { S4K_ZERR_OFFLINE, 7, 0x2c, 0x0e },
    { S4K_ZERR_INSUFFICIENT_RESOURCES, 7, 0x55, 0x0e },
  };
  for (size_t i = 0; i < sizeof sense / sizeof sense[0]; i++) {
    uint8_t k, asc, ascq;
    ok (s4k_zone_sense (sense[i].err, &k, &asc, &ascq) && k == sense[i].key
        && asc == sense[i].asc && ascq == sense[i].ascq,
        "%s: sense %u %02Xh/%02Xh", s4k_zone_strerror (sense[i].err),
        sense[i].key, sense[i].asc, sense[i].ascq);
  }
  uint8_t k, asc, ascq;
  ok (!s4k_zone_sense (0, &k, &asc, &ascq) &&
      !s4k_zone_sense (S4K_ZERR_MAX, &k, &asc, &ascq), "no sense for 0 or "
      "an unknown error");

  struct s4k_zones *z = small ("");
  const uint64_t a = ZL, cap = 8 * ZL;
  is_err (s4k_zones_write (z, cap - 1, 2), -S4K_ZERR_LBA_OUT_OF_RANGE,
          "write past the end: LBA out of range");
  is_err (s4k_zones_write (z, cap + 1, 0), -S4K_ZERR_LBA_OUT_OF_RANGE,
          "empty write past the end: LBA out of range");
  is_err (s4k_zones_write (z, cap, 0), 0, "empty write at the end");
  is_err (s4k_zones_write (z, a + 3, 0), 0, "empty write off the wp: "
          "nothing to check");
  ok (cond (z, a) == S4K_ZC_EMPTY, "an empty write opens nothing");
  is_err (s4k_zones_write (z, a + 1, 1), -S4K_ZERR_UNALIGNED_WRITE,
          "write above the wp: unaligned write");
  s4k_zones_write (z, a, 4);
  is_err (s4k_zones_write (z, a + 2, 1), -S4K_ZERR_UNALIGNED_WRITE,
          "write below the wp: unaligned write");
  is_err (s4k_zones_write (z, a + 2, 4), -S4K_ZERR_UNALIGNED_WRITE,
          "write across the wp: unaligned write");
  is_err (s4k_zones_write (z, a + 4, ZL), -S4K_ZERR_WRITE_BOUNDARY,
          "write at the wp past the zone's end: write boundary violation");
  is_err (s4k_zones_write (z, ZL - 1, 2), -S4K_ZERR_WRITE_BOUNDARY,
          "conventional into sequential: write boundary violation");
  is_err (s4k_zones_write (z, 0, ZL), 0, "a whole conventional zone");
  is_err (s4k_zones_write (z, 5, 3), 0, "anywhere in a conventional zone");
  is_u64 (zone (z, a).wp, a + 4, "refused writes moved nothing");
  s4k_zones_op (z, S4K_ZOP_FINISH, a, false);
  is_err (s4k_zones_write (z, a + ZL, 1), 0, "the next zone is writable");
  is_err (s4k_zones_write (z, a, 1), -S4K_ZERR_ZONE_FULL,
          "write to a full zone: invalid field in CDB");
  is_err (s4k_zones_write (z, a + 3, 1), -S4K_ZERR_ZONE_FULL,
          "anywhere in a full zone");
  /* Operations. */
  for (int op = S4K_ZOP_CLOSE; op <= S4K_ZOP_RESET; op++) {
    is_err (s4k_zones_op (z, op, 0, false),
            -S4K_ZERR_NOT_WRITE_POINTER_ZONE, "op %d on a conventional "
            "zone: invalid field in CDB", op);
    is_err (s4k_zones_op (z, op, a + 1, false), -S4K_ZERR_NOT_ZONE_START,
            "op %d not at a zone start: invalid field in CDB", op);
    is_err (s4k_zones_op (z, op, cap, false), -S4K_ZERR_LBA_OUT_OF_RANGE,
            "op %d past the end: LBA out of range", op);
  }
  ok (s4k_zones_op (z, 7, a, false) == -EINVAL, "no such operation");
  /* Read only and offline. */
  const uint64_t ro = 3 * ZL, off = 4 * ZL;
  s4k_zones_write (z, ro, 2);
  counts (z, 2, 0, 0, "zones 2 and 3 open");
  is_err (s4k_zones_set_cond (z, ro, S4K_ZC_READ_ONLY), 0, "zone 3 read "
          "only");
  counts (z, 1, 0, 0, "a read-only zone holds no resource");
  is_err (s4k_zones_set_cond (z, off, S4K_ZC_OFFLINE), 0, "zone 4 offline");
  is_err (s4k_zones_set_cond (z, 0, S4K_ZC_OFFLINE), 0, "conventional "
          "zone 0 offline");
  ok (s4k_zones_set_cond (z, ro, S4K_ZC_FULL) == -EINVAL,
      "set_cond takes no other condition");
  is_err (s4k_zones_set_cond (z, ro + 1, S4K_ZC_OFFLINE),
          -S4K_ZERR_NOT_ZONE_START, "set_cond at a zone's start only");
  struct s4k_zone_desc d = zone (z, ro);
  ok (d.cond == S4K_ZC_READ_ONLY && d.wp == UINT64_MAX, "READ ONLY, wp "
      "invalid");
  is_err (s4k_zones_write (z, ro + 2, 2), -S4K_ZERR_READ_ONLY,
          "write to a read-only zone: zone is read only");
  is_err (s4k_zones_write (z, off, 1), -S4K_ZERR_OFFLINE,
          "write to an offline zone: zone is offline");
  is_err (s4k_zones_write (z, 3, 1), -S4K_ZERR_OFFLINE,
          "write to an offline conventional zone");
  for (int op = S4K_ZOP_CLOSE; op <= S4K_ZOP_RESET; op++) {
    is_err (s4k_zones_op (z, op, ro, false), -S4K_ZERR_READ_ONLY,
            "op %d on a read-only zone: zone is read only", op);
    is_err (s4k_zones_op (z, op, off, false), -S4K_ZERR_OFFLINE,
            "op %d on an offline zone: zone is offline", op);
    is_err (s4k_zones_op (z, op, 0, true), 0, "op %d ALL skips them", op);
  }
  ok (cond (z, ro) == S4K_ZC_READ_ONLY && cond (z, off) == S4K_ZC_OFFLINE,
      "the ALL forms left them as they were");
  is_err (s4k_zones_read (z, ro, 2 * ZL), -S4K_ZERR_OFFLINE,
          "read into an offline zone: zone is offline");
  is_err (s4k_zones_read (z, ro, ZL), 0, "a read-only zone reads");
  is_err (s4k_zones_set_cond (z, off, S4K_ZC_EMPTY), 0, "offline zone back");
  is_err (s4k_zones_set_cond (z, 0, S4K_ZC_NOT_WP), 0, "conventional back");
  ok (s4k_zones_set_cond (z, 0, S4K_ZC_EMPTY) == -EINVAL &&
      s4k_zones_set_cond (z, a, S4K_ZC_NOT_WP) == -EINVAL, "back to the "
      "condition of its type only");
  ok (cond (z, off) == S4K_ZC_EMPTY && zone (z, off).wp == off &&
      cond (z, 0) == S4K_ZC_NOT_WP, "back: empty, and not write pointer");
  is_err (s4k_zones_write (z, off, 1), 0, "and writable");
  /* Reads. */
  is_err (s4k_zones_read (z, ZL - 1, 2), -S4K_ZERR_READ_CROSS_TYPE,
          "host-managed read across conventional/sequential: attempt to "
          "read invalid data");
  is_err (s4k_zones_read (z, 0, 2), 0, "read in a conventional zone");
  is_err (s4k_zones_read (z, 5 * ZL, 3 * ZL), 0, "read across sequential "
          "zones, above their wp (URSWRZ)");
  is_err (s4k_zones_read (z, cap - 1, 2), -S4K_ZERR_LBA_OUT_OF_RANGE,
          "read past the end");
  is_err (s4k_zones_read (z, cap, 0), 0, "empty read at the end");
  s4k_zones_free (z);

  /* 512e host-managed: whole physical blocks (8 LBAs) at the wp. */
  struct s4k_geometry g = geom (4 * MiB + 3 * 512, 512, 4096);
  z = zones (&g, "zoned=host-managed zone-size=1M");
  is_err (s4k_zones_write (z, 0, 1), -S4K_ZERR_UNALIGNED_PHYSICAL,
          "512e: one LBA at the wp: unaligned write command");
  is_err (s4k_zones_write (z, 0, 12), -S4K_ZERR_UNALIGNED_PHYSICAL,
          "512e: 12 LBAs at the wp");
  is_err (s4k_zones_write (z, 0, 16), 0, "512e: two physical blocks");
  is_err (s4k_zones_write (z, 8192, 3), 0, "512e: the last zone's 3 LBAs, "
          "to its end");
  ok (cond (z, 8192) == S4K_ZC_FULL, "which fills it");
  s4k_zones_free (z);
}

/* ---- limits ----------------------------------------------------------- */

static void
test_open_limit (void)
{
  struct s4k_zones *z = small ("zone-max-open=2");
  const uint64_t a = ZL, b = 2 * ZL, c = 3 * ZL, d = 4 * ZL, e = 5 * ZL;
  s4k_zones_write (z, b, 1);
  s4k_zones_write (z, a, 1);
  counts (z, 2, 0, 0, "two implicitly open");
  is_err (s4k_zones_write (z, c, 1), 0, "a third write at the limit");
  ok (cond (z, a) == S4K_ZC_CLOSED && cond (z, b) == S4K_ZC_IMP_OPEN &&
      cond (z, c) == S4K_ZC_IMP_OPEN, "implicit close of the lowest "
      "implicitly open zone (as scsi_debug)");
  counts (z, 2, 0, 1, "limit kept");
  is_err (s4k_zones_op (z, S4K_ZOP_OPEN, d, false), 0, "explicit open at "
          "the limit");
  ok (cond (z, b) == S4K_ZC_CLOSED && cond (z, d) == S4K_ZC_EXP_OPEN,
      "closes an implicitly open zone too");
  is_err (s4k_zones_op (z, S4K_ZOP_OPEN, c, false), 0, "implicitly open -> "
          "explicitly open needs no room");
  counts (z, 0, 2, 2, "both open explicitly");
  is_err (s4k_zones_write (z, e, 1), -S4K_ZERR_INSUFFICIENT_RESOURCES,
          "write to an empty zone with every open zone explicit: "
          "insufficient zone resources");
  is_err (s4k_zones_write (z, a + 1, 1), -S4K_ZERR_INSUFFICIENT_RESOURCES,
          "write to a closed zone too");
  is_err (s4k_zones_op (z, S4K_ZOP_OPEN, e, false),
          -S4K_ZERR_INSUFFICIENT_RESOURCES, "explicit open too");
  is_err (s4k_zones_write (z, c + 1, 1), 0, "an open zone takes writes");
  ok (cond (z, e) == S4K_ZC_EMPTY && cond (z, a) == S4K_ZC_CLOSED,
      "refused: nothing changed");
  /* OPEN ALL: all closed zones, or none. */
  is_err (s4k_zones_op (z, S4K_ZOP_OPEN, 0, true),
          -S4K_ZERR_INSUFFICIENT_RESOURCES, "OPEN ALL with 2 open and 2 "
          "closed over a limit of 2");
  counts (z, 0, 2, 2, "nothing opened");
  s4k_zones_op (z, S4K_ZOP_CLOSE, 0, true);
  counts (z, 0, 0, 3, "CLOSE ALL: d, opened but never written, is empty");
  is_err (s4k_zones_op (z, S4K_ZOP_OPEN, 0, true),
          -S4K_ZERR_INSUFFICIENT_RESOURCES, "OPEN ALL with 3 closed");
  s4k_zones_op (z, S4K_ZOP_RESET, c, false);
  s4k_zones_op (z, S4K_ZOP_RESET, d, false);
  s4k_zones_write (z, e, 1);
  counts (z, 1, 0, 2, "2 closed, one implicitly open");
  is_err (s4k_zones_op (z, S4K_ZOP_OPEN, 0, true), 0, "OPEN ALL with 2 "
          "closed");
  ok (cond (z, a) == S4K_ZC_EXP_OPEN && cond (z, b) == S4K_ZC_EXP_OPEN &&
      cond (z, e) == S4K_ZC_CLOSED, "both open explicitly, the implicitly "
      "open zone closed to make room and left closed");
  counts (z, 0, 2, 1, "at the limit");
  /* FINISH ALL with more closed zones than the limit (libzbc 01.149). */
  s4k_zones_op (z, S4K_ZOP_CLOSE, 0, true);
  s4k_zones_write (z, c, 1);
  s4k_zones_op (z, S4K_ZOP_CLOSE, 0, true);
  counts (z, 0, 0, 4, "4 closed");
  is_err (s4k_zones_op (z, S4K_ZOP_FINISH, 0, true), 0, "FINISH ALL with "
          "4 closed over a limit of 2");
  counts (z, 0, 0, 0, "all full");
  s4k_zones_free (z);
}

static void
test_active_limit (void)
{
  struct s4k_zones *z = small ("zone-max-active=2");
  const uint64_t a = ZL, b = 2 * ZL, c = 3 * ZL;
  s4k_zones_write (z, a, 1);
  s4k_zones_write (z, b, 1);
  s4k_zones_op (z, S4K_ZOP_CLOSE, 0, true);
  counts (z, 0, 0, 2, "two closed zones: both active");
  is_err (s4k_zones_write (z, c, 1), -S4K_ZERR_INSUFFICIENT_RESOURCES,
          "write to a third empty zone: insufficient zone resources");
  is_err (s4k_zones_op (z, S4K_ZOP_OPEN, c, false),
          -S4K_ZERR_INSUFFICIENT_RESOURCES, "explicit open of it too");
  ok (cond (z, c) == S4K_ZC_EMPTY, "it stays empty");
  is_err (s4k_zones_write (z, a + 1, 1), 0, "a closed zone reopens: it is "
          "active already");
  is_err (s4k_zones_op (z, S4K_ZOP_OPEN, b, false), 0, "and opens "
          "explicitly");
  is_err (s4k_zones_op (z, S4K_ZOP_FINISH, c, false), 0, "finish an empty "
          "zone: full is not active");
  is_err (s4k_zones_op (z, S4K_ZOP_FINISH, a, false), 0, "finish zone a");
  is_err (s4k_zones_write (z, 4 * ZL, 1), 0, "room for another");
  counts (z, 1, 1, 0, "two active again");
  s4k_zones_free (z);

  /* Both limits: open 1, active 2. */
  z = small ("zone-max-open=1 zone-max-active=2");
  s4k_zones_write (z, a, 1);
  is_err (s4k_zones_write (z, b, 1), 0, "second zone: a closes");
  counts (z, 1, 0, 1, "one open, one closed");
  is_err (s4k_zones_write (z, c, 1), -S4K_ZERR_INSUFFICIENT_RESOURCES,
          "third zone: the active limit, though an open zone could close");
  is_err (s4k_zones_write (z, a + 1, 1), 0, "the closed zone reopens, "
          "closing the other");
  ok (cond (z, a) == S4K_ZC_IMP_OPEN && cond (z, b) == S4K_ZC_CLOSED,
      "they swapped");
  s4k_zones_free (z);
}

/* ---- host-aware -------------------------------------------------------- */

static void
test_host_aware (void)
{
  /* 512e: host-aware writes anywhere, any length. */
  struct s4k_geometry g = geom (8 * 64 * 512, 512, 4096);
  struct s4k_zones *z = zones (&g, "zoned=host-aware zone-size=32K "
                               "zone-conventional=1");
  const uint64_t a = 64, b = 128, c = 192;
  is_err (s4k_zones_write (z, a, 1), 0, "host-aware: one LBA at the wp");
  ok (cond (z, a) == S4K_ZC_IMP_OPEN && zone (z, a).wp == a + 1 &&
      !zone (z, a).non_seq, "implicitly open, wp +1, sequential");
  is_err (s4k_zones_write (z, a + 10, 2), 0, "above the wp");
  ok (zone (z, a).wp == a + 12 && zone (z, a).non_seq, "wp to the write's "
      "end, NON_SEQ set");
  is_err (s4k_zones_write (z, a + 2, 2), 0, "below the wp");
  is_u64 (zone (z, a).wp, a + 12, "the wp never moves back");
  is_err (s4k_zones_write (z, 60, 74), 0, "from the conventional zone "
          "across a and into b");
  ok (cond (z, a) == S4K_ZC_FULL && zone (z, a).wp == b &&
      cond (z, b) == S4K_ZC_IMP_OPEN && zone (z, b).wp == b + 6 &&
      !zone (z, b).non_seq, "a full, b opened with wp at the end of the "
      "write, from its start: sequential");
  is_err (s4k_zones_write (z, a + 5, 1), 0, "a full zone takes writes");
  ok (cond (z, a) == S4K_ZC_FULL, "and stays full");
  counts (z, 1, 0, 0, "one open, no limit");
  for (uint64_t i = 2; i < 8; i++)
    s4k_zones_write (z, i * 64 + 7, 1);
  counts (z, 6, 0, 0, "six open: host-aware has no open limit");
  ok (zone (z, c).non_seq, "zone written off its wp: NON_SEQ");
  is_err (s4k_zones_op (z, S4K_ZOP_RESET, c, false), 0, "reset");
  ok (!zone (z, c).non_seq && cond (z, c) == S4K_ZC_EMPTY, "reset clears "
      "NON_SEQ");
  s4k_zones_set_cond (z, c, S4K_ZC_READ_ONLY);
  is_err (s4k_zones_write (z, b + 60, 8), -S4K_ZERR_READ_ONLY,
          "a write reaching a read-only zone");
  is_u64 (zone (z, b).wp, b + 8, "refused: b untouched");
  is_err (s4k_zones_read (z, 60, 8), 0, "host-aware reads cross zone "
          "types");
  s4k_zones_free (z);
}

/* ---- reports ----------------------------------------------------------- */

static void
test_report (void)
{
  struct s4k_zones *z = small ("zone-max-open=4");
  /* zone: 0 conv, 1 empty, 2 imp open, 3 exp open, 4 closed, 5 full,
   * 6 read only, 7 offline; 2 written off nothing (host-managed). */
  s4k_zones_write (z, 2 * ZL, 3);
  s4k_zones_op (z, S4K_ZOP_OPEN, 3 * ZL, false);
  s4k_zones_write (z, 4 * ZL, 2);
  s4k_zones_op (z, S4K_ZOP_CLOSE, 4 * ZL, false);
  s4k_zones_op (z, S4K_ZOP_FINISH, 5 * ZL, false);
  s4k_zones_set_cond (z, 6 * ZL, S4K_ZC_READ_ONLY);
  s4k_zones_set_cond (z, 7 * ZL, S4K_ZC_OFFLINE);
  /* option -> the zones it lists (bit i: zone i) */
  static const struct { unsigned opt; unsigned zones; const char *name; }
  want[] = {
    { 0x00, 0xff, "all" }, { 0x01, 0x02, "empty" },
    { 0x02, 0x04, "implicitly open" }, { 0x03, 0x08, "explicitly open" },
    { 0x04, 0x10, "closed" }, { 0x05, 0x20, "full" },
    { 0x06, 0x40, "read only" }, { 0x07, 0x80, "offline" },
    { 0x08, 0x00, "inactive" }, { 0x10, 0x00, "reset recommended" },
    { 0x11, 0x00, "non-sequential write resources active" },
    { 0x3e, 0xff, "all but gap zones" }, { 0x3f, 0x01, "not write pointer" },
  };
  unsigned valid[0x40] = { 0 };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    struct s4k_zone_desc d[8];
    uint64_t listed;
    int n = s4k_zones_report (z, 0, want[i].opt, false, d, 8, &listed);
    unsigned got = 0;
    for (int j = 0; j < n; j++)
      got |= 1u << (d[j].start / ZL);
    if (!ok (n >= 0 && got == want[i].zones &&
             listed == (uint64_t) __builtin_popcount (want[i].zones),
             "option %02Xh (%s): zones %02x", want[i].opt, want[i].name,
             want[i].zones))
      diag ("got %d zones %02x, listed %" PRIu64, n, got, listed);
    valid[want[i].opt] = 1;
  }
  unsigned bad = 0;
  for (unsigned opt = 0; opt < 0x40; opt++) {
    struct s4k_zone_desc d[8];
    uint64_t listed;
    if (!valid[opt] &&
        s4k_zones_report (z, 0, opt, false, d, 8, &listed) !=
        -S4K_ZERR_BAD_REPORTING_OPTION)
      bad++;
  }
  ok (bad == 0, "the %d other options 00h-3Fh: invalid field in CDB",
      0x40 - (int) (sizeof want / sizeof want[0]));
  /* Descriptors. */
  struct s4k_zone_desc d[8];
  uint64_t listed;
  s4k_zones_report (z, 0, 0, false, d, 8, &listed);
  ok (d[2].wp == 2 * ZL + 3 && d[3].wp == 3 * ZL && d[4].wp == 4 * ZL + 2 &&
      d[5].wp == 6 * ZL && d[0].wp == UINT64_MAX && d[6].wp == UINT64_MAX &&
      d[7].wp == UINT64_MAX, "write pointers: as written, full at the end, "
      "invalid for conventional, read only, offline");
  /* Starting LBA: the zone holding it and those after. */
  int n = s4k_zones_report (z, 3 * ZL + 5, 0, false, d, 8, &listed);
  ok (n == 5 && listed == 5 && d[0].start == 3 * ZL, "from an LBA inside "
      "zone 3: zones 3-7");
  n = s4k_zones_report (z, 3 * ZL + 5, 0x01, false, d, 8, &listed);
  ok (n == 0 && listed == 0, "no empty zone from there");
  is_err (s4k_zones_report (z, 8 * ZL, 0, false, d, 8, &listed),
          -S4K_ZERR_LBA_OUT_OF_RANGE, "from past the end: LBA out of range");
  /* Partial: the zone list length counts what fits, or everything. */
  n = s4k_zones_report (z, 0, 0, false, d, 3, &listed);
  ok (n == 3 && listed == 8 && d[2].start == 2 * ZL, "room for 3, partial "
      "0: 3 filled, the list length counts all 8");
  n = s4k_zones_report (z, 0, 0, true, d, 3, &listed);
  ok (n == 3 && listed == 3, "room for 3, partial 1: 3 filled, 3 counted");
  n = s4k_zones_report (z, ZL, 0x3e, true, d, 0, &listed);
  ok (n == 0 && listed == 0, "room for none, partial 1: none counted");
  n = s4k_zones_report (z, ZL, 0x3e, false, d, 0, &listed);
  ok (n == 0 && listed == 7, "room for none, partial 0: 7 counted");
  n = s4k_zones_report (z, 0, 0x01, true, d, 3, &listed);
  ok (n == 1 && listed == 1, "fewer matches than room: partial makes no "
      "difference");
  s4k_zones_free (z);

  /* Host-aware: NON_SEQ reported and selected by 11h. */
  struct s4k_geometry g = geom (4 * 64 * 512, 512, 512);
  z = zones (&g, "zoned=host-aware zone-size=32K");
  s4k_zones_write (z, 64 + 5, 1);
  n = s4k_zones_report (z, 0, 0x11, false, d, 8, &listed);
  ok (n == 1 && d[0].start == 64 && d[0].non_seq && listed == 1,
      "option 11h: the zone written off its wp");
  s4k_zones_free (z);
}

int
main (void)
{
  test_keys ();
  test_layout ();
  test_transitions ();
  test_errors ();
  test_open_limit ();
  test_active_limit ();
  test_host_aware ();
  test_report ();
  return done_testing ();
}
