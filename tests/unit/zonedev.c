/* SPDX-License-Identifier: BSD-3-Clause */
/* The zone model wired into the device (issue 33): the zone keys through
 * s4k_config_set/finish and their refusals, writes and zeroes that pass
 * the zone checks and move the write pointer (refused ones change
 * nothing, on the zones or the data), reads across zone types, trims
 * that free conventional zones only, the ZBC OUT operations through
 * s4k_dev_zone_op (RESET discarding the data below the old write
 * pointer), and a write the store fails moving the pointer back (a power
 * cut; the file store past RLIMIT_FSIZE, on the fast path and the plan). */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "sect4k/sect4k.h"
#include "sect4k/zone.h"
#include "tap.h"
#include "devrig.h"

static bool
all_bytes (const char *p, size_t n, int v)
{
  for (size_t i = 0; i < n; i++)
    if ((unsigned char) p[i] != v)
      return false;
  return true;
}

static void
test_keys (void)
{
  static const struct { const char *keys, *msg; } bad[] = {
    { "size=64M zone-size=4M", "zone-size=4M: needs zoned=host-managed or "
      "zoned=host-aware" },
    { "size=64M zoned=host-managed zone-size=4M file=/dev/null",
      "zoned= and file=/dev/null: not a regular file (the zone state is "
      "kept beside the file, in FILE.sect4k-zones)" },
    { "size=64M zoned=host-managed zone-size=4M strict=false",
      "zoned= and strict=false: a zoned drive takes whole logical blocks "
      "only" },
    { "size=64M zoned=smr", "zoned=smr: must be host-managed, host-aware "
      "or none" },
    { "size=64M model=512e-xp zoned=host-managed zone-size=4M",
      "alignment-offset=3584: a zoned device has none (its zones start at "
      "LBA 0, on physical boundaries)" },
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    struct s4k_config c;
    char err[256] = "";
    int r = configure (&c, bad[i].keys, err, sizeof err);
    ok (r == -1 && strcmp (err, bad[i].msg) == 0, "%s: refused: %s",
        bad[i].keys, err);
  }
  ok (strstr (s4k_config_help, "zoned=host-managed|host-aware") &&
      strstr (s4k_config_help, "zone-max-open=N"),
      "--help lists the zone keys");
  struct s4k_dev *d = open_dev ("size=16M");
  ok (s4k_dev_zones (d) == NULL &&
      s4k_dev_zone_op (d, S4K_ZOP_RESET, 0, true) == -EINVAL,
      "a device without zoned= has no zones");
  s4k_dev_close (d);
  d = open_dev ("size=64M model=512e zoned=host-managed zone-size=4M "
                "zone-conventional=1 zone-max-open=2");
  struct s4k_zones_info zi;
  s4k_zones_info (s4k_dev_zones (d), &zi);
  ok (zi.nr_zones == 16 && zi.zone_lbas == 8192 && zi.conventional == 1 &&
      zi.max_open == 2 && zi.model == S4K_ZONED_HOST_MANAGED,
      "zoned=host-managed zone-size=4M: 16 zones of 8192 LBAs, one "
      "conventional, open limit 2");
  s4k_dev_close (d);
}

#define Z(n) ((uint64_t) (n) * 8192)            /* zone n's first LBA */
#define B(lba) ((uint64_t) (lba) * 512)         /* its byte offset */

static void
test_writes (void)
{
  struct s4k_dev *d = open_dev ("size=64M model=512e zoned=host-managed "
                                "zone-size=4M zone-conventional=1 "
                                "zone-max-open=2");
  char *buf = malloc (1 << 20), *rd = malloc (1 << 20);
  memset (buf, 0xab, 1 << 20);

  ok (s4k_write (d, buf, 4096, B (Z (1)), 0) == 0 &&
      dev_zone (d, Z (1)).wp == Z (1) + 8 &&
      dev_zone (d, Z (1)).cond == S4K_ZC_IMP_OPEN,
      "a write at the write pointer: the pointer moves, the zone opens");
  ok (s4k_zone_err_of (s4k_write (d, buf, 4096, B (Z (1)), 0)) ==
      S4K_ZERR_UNALIGNED_WRITE && dev_zone (d, Z (1)).wp == Z (1) + 8,
      "a write below the write pointer: UNALIGNED WRITE, nothing moves");
  ok (s4k_zone_err_of (s4k_write (d, buf, 512, B (Z (1) + 8), 0)) ==
      S4K_ZERR_UNALIGNED_PHYSICAL,
      "512e: one logical block at the write pointer: UNALIGNED WRITE "
      "(whole physical blocks only)");
  ok (s4k_zone_err_of (s4k_zero (d, 8192, B (Z (2) - 8), 0)) ==
      S4K_ZERR_WRITE_BOUNDARY &&
      s4k_zone_err_of (s4k_zero (d, 4096, B (Z (1) + 16), 0)) ==
      S4K_ZERR_UNALIGNED_WRITE,
      "zeroes across a zone's end or off the pointer refused");
  ok (s4k_zero (d, 8192, B (Z (1) + 8), 0) == 0 &&
      dev_zone (d, Z (1)).wp == Z (1) + 24,
      "a zero at the write pointer is a write: the pointer moves");
  ok (s4k_write (d, buf, 4096, B (100), 0) == 0 &&
      s4k_write (d, buf, 512, B (3), 0) == 0,
      "conventional zone: any write, 512 bytes too");
  ok (s4k_zone_err_of (s4k_write (d, buf, 8192, B (Z (1) - 8), 0)) ==
      S4K_ZERR_WRITE_BOUNDARY,
      "a write from the conventional zone into a sequential one: WRITE "
      "BOUNDARY VIOLATION");
  ok (s4k_zone_err_of (s4k_read (d, rd, 8192, B (Z (1) - 8))) ==
      S4K_ZERR_READ_CROSS_TYPE,
      "a read across the conventional/sequential boundary: ATTEMPT TO "
      "READ INVALID DATA");
  memset (rd, 1, 65536);
  ok (s4k_read (d, rd, 65536, B (Z (1))) == 0 &&
      all_bytes (rd, 4096, 0xab) && all_bytes (rd + 4096, 8192, 0) &&
      all_bytes (rd + 12288, 65536 - 12288, 0),
      "reads are unrestricted: the data below the pointer, zeroes above");

  /* Trims: conventional zones only. */
  ok (s4k_trim (d, B (Z (2)) - B (0), 0, 0) == 0 &&
      s4k_read (d, rd, 4096, B (Z (1))) == 0 && all_bytes (rd, 4096, 0xab) &&
      s4k_read (d, rd, 4096, B (100)) == 0 && all_bytes (rd, 4096, 0),
      "a trim over both zone kinds frees the conventional zone's blocks "
      "and leaves the sequential zone's");
  ok (dev_zone (d, Z (1)).wp == Z (1) + 24, "a trim moves no write pointer");

  /* Full zone. */
  ok (s4k_write (d, buf, 1 << 20, B (Z (2)), 0) == 0 &&
      s4k_write (d, buf, 1 << 20, B (Z (2) + 2048), 0) == 0 &&
      s4k_write (d, buf, 1 << 20, B (Z (2) + 4096), 0) == 0 &&
      s4k_write (d, buf, 1 << 20, B (Z (2) + 6144), 0) == 0 &&
      dev_zone (d, Z (2)).cond == S4K_ZC_FULL,
      "four 1 MiB writes fill zone 2");
  memset (buf, 0xcd, 4096);
  ok (s4k_zone_err_of (s4k_write (d, buf, 4096, B (Z (2)), 0)) ==
      S4K_ZERR_ZONE_FULL && s4k_read (d, rd, 4096, B (Z (2))) == 0 &&
      all_bytes (rd, 4096, 0xab),
      "a write to a full zone: refused, the data unchanged");

  /* The open limit (2): zones 1 (implicitly) open; 3 explicitly. */
  ok (s4k_dev_zone_op (d, S4K_ZOP_OPEN, Z (3), false) == 0 &&
      s4k_dev_zone_op (d, S4K_ZOP_OPEN, Z (4), false) == 0 &&
      dev_zone (d, Z (1)).cond == S4K_ZC_CLOSED,
      "OPEN of two zones at the limit closes the implicitly open one");
  ok (s4k_zone_err_of (s4k_write (d, buf, 4096, B (Z (5)), 0)) ==
      S4K_ZERR_INSUFFICIENT_RESOURCES &&
      s4k_zone_err_of (s4k_dev_zone_op (d, S4K_ZOP_OPEN, Z (5), false)) ==
      S4K_ZERR_INSUFFICIENT_RESOURCES,
      "both open explicitly: a write or OPEN of another zone gets "
      "INSUFFICIENT ZONE RESOURCES");
  ok (s4k_dev_zone_op (d, S4K_ZOP_CLOSE, Z (4), false) == 0 &&
      dev_zone (d, Z (4)).cond == S4K_ZC_EMPTY &&
      s4k_write (d, buf, 4096, B (Z (5)), 0) == 0,
      "CLOSE of an empty open zone makes it EMPTY; room for a write");
  ok (s4k_dev_zone_op (d, S4K_ZOP_FINISH, Z (5), false) == 0 &&
      dev_zone (d, Z (5)).cond == S4K_ZC_FULL &&
      dev_zone (d, Z (5)).wp == Z (6),
      "FINISH: full, the pointer at the zone's end");
  ok (s4k_zone_err_of (s4k_dev_zone_op (d, S4K_ZOP_RESET, Z (1) + 8,
                                        false)) == S4K_ZERR_NOT_ZONE_START &&
      s4k_zone_err_of (s4k_dev_zone_op (d, S4K_ZOP_RESET, 0, false)) ==
      S4K_ZERR_NOT_WRITE_POINTER_ZONE &&
      s4k_zone_err_of (s4k_dev_zone_op (d, S4K_ZOP_RESET, Z (16), false)) ==
      S4K_ZERR_LBA_OUT_OF_RANGE,
      "ZBC OUT errors: not a zone start, a conventional zone, past the end");

  /* RESET discards the data. */
  ok (s4k_dev_zone_op (d, S4K_ZOP_RESET, Z (2), false) == 0 &&
      dev_zone (d, Z (2)).cond == S4K_ZC_EMPTY && dev_zone (d, Z (2)).wp == Z (2) &&
      s4k_read (d, rd, 1 << 20, B (Z (2))) == 0 &&
      all_bytes (rd, 1 << 20, 0) && s4k_read (d, rd, 4096, B (Z (1))) == 0 &&
      all_bytes (rd, 4096, 0xab),
      "RESET WRITE POINTER: the zone reads zeroes, the others keep theirs");
  ok (s4k_write (d, buf, 4096, B (Z (2)), 0) == 0 &&
      s4k_write (d, buf, 4096, 0, 0) == 0 &&
      s4k_dev_zone_op (d, S4K_ZOP_RESET, 0, true) == 0 &&
      s4k_read (d, rd, 4096, B (Z (1))) == 0 && all_bytes (rd, 4096, 0) &&
      s4k_read (d, rd, 4096, B (Z (2))) == 0 && all_bytes (rd, 4096, 0) &&
      dev_zone (d, Z (1)).cond == S4K_ZC_EMPTY &&
      dev_zone (d, Z (5)).cond == S4K_ZC_EMPTY &&
      s4k_read (d, rd, 4096, 0) == 0 && all_bytes (rd, 4096, 0xcd),
      "RESET ALL: every sequential zone reads zeroes, conventional data "
      "stays");
  free (rd);
  s4k_dev_close (d);

  /* Host-aware: any write, and a trim frees sequential zones too. */
  d = open_dev ("size=64M model=512e zoned=host-aware zone-size=4M");
  rd = malloc (4096);
  ok (s4k_write (d, buf, 4096, B (Z (1) + 64), 0) == 0 &&
      dev_zone (d, Z (1)).wp == Z (1) + 72 && dev_zone (d, Z (1)).non_seq &&
      s4k_write (d, buf, 4096, B (Z (1)), 0) == 0 &&
      dev_zone (d, Z (1)).wp == Z (1) + 72,
      "host-aware: writes off the pointer pass, the pointer moves up only, "
      "NON_SEQ set");
  ok (s4k_trim (d, 4096, B (Z (1)), 0) == 0 &&
      s4k_read (d, rd, 4096, B (Z (1))) == 0 && all_bytes (rd, 4096, 0),
      "host-aware: a trim frees a sequential zone's blocks");
  free (buf);
  free (rd);
  s4k_dev_close (d);
}

/* A write the store fails (a power cut at the Nth write, which fails it
 * with EIO) moves the write pointer back. */
static void
test_rewind (void)
{
  struct s4k_dev *d = open_dev ("size=64M model=4kn zoned=host-managed "
                                "zone-size=4M power-cut-after=2");
  char *buf = calloc (1, 1 << 20);
  const uint64_t z1 = 1024;     /* 4kn: 1024 LBAs a zone */
  ok (s4k_write (d, buf, 8192, z1 * 4096, 0) == 0 &&
      dev_zone (d, z1).wp == z1 + 2, "4kn: a write at zone 1");
  ok (s4k_write (d, buf, 8192, (z1 + 2) * 4096, 0) == -EIO &&
      dev_zone (d, z1).wp == z1 + 2 && dev_zone (d, z1).cond == S4K_ZC_CLOSED,
      "the store fails the next write (power cut): the pointer moves back, "
      "the zone closed (open zones do not survive a power loss)");
  ok (s4k_write (d, buf, 8192, (z1 + 2) * 4096, 0) == 0 &&
      dev_zone (d, z1).wp == z1 + 4, "a write at the pointer again passes");
  s4k_dev_close (d);

  /* A write that filled its zone, failed: not full any more. */
  d = open_dev ("size=64M model=4kn zoned=host-managed zone-size=1M "
                "power-cut-after=2");
  ok (s4k_write (d, buf, 4096, 0, 0) == 0 &&
      s4k_write (d, buf, (1 << 20) - 4096, 4096, 0) == -EIO &&
      dev_zone (d, 0).wp == 1 && dev_zone (d, 0).cond == S4K_ZC_CLOSED,
      "a failed write that would have filled its zone (a power cut): "
      "closed, the pointer back");
  s4k_dev_close (d);
  d = open_dev ("size=64M model=4kn zoned=host-managed zone-size=1M "
                "power-cut-after=1");
  ok (s4k_write (d, buf, 8192, 1 << 20, 0) == -EIO &&
      dev_zone (d, 256).wp == 256 && dev_zone (d, 256).cond == S4K_ZC_EMPTY,
      "a failed first write of a zone leaves it EMPTY");
  s4k_dev_close (d);

  /* The model alone: a later write accepted keeps the pointer. */
  struct s4k_zone_config zc = { .model = S4K_ZONED_HOST_MANAGED,
                                .size = 1 << 20 };
  struct s4k_geometry g = { 16 << 20, 4096, 4096, 0 };
  struct s4k_zones *z;
  char err[256];
  if (s4k_zone_finish (&zc, &g, err, sizeof err) || s4k_zones_new (&z, &zc, &g))
    bail ("zones: %s", err);
  struct s4k_zone_desc desc;
  uint64_t listed;
  ok (s4k_zones_write (z, 0, 2) == 0 && s4k_zones_write (z, 2, 2) == 0 &&
      !s4k_zones_rewind (z, 0, 2) &&
      s4k_zones_report (z, 0, 0, true, &desc, 1, &listed) == 1 &&
      desc.wp == 4, "a failed write followed by an accepted one: the "
      "pointer stays");
  ok (s4k_zones_rewind (z, 2, 2) &&
      s4k_zones_report (z, 0, 0, true, &desc, 1, &listed) == 1 &&
      desc.wp == 2 && desc.cond == S4K_ZC_IMP_OPEN,
      "the last accepted write failed: the pointer back to its start");
  s4k_zones_free (z);
  zc = (struct s4k_zone_config) { .model = S4K_ZONED_HOST_AWARE,
                                  .size = 1 << 20 };
  if (s4k_zone_finish (&zc, &g, err, sizeof err) || s4k_zones_new (&z, &zc, &g))
    bail ("zones: %s", err);
  ok (s4k_zones_write (z, 0, 2) == 0 && !s4k_zones_rewind (z, 0, 2),
      "host-aware: the pointer stays");
  s4k_zones_free (z);
  free (buf);
}

/* Writers racing at one zone's write pointer through the device: each
 * reads the pointer, writes one physical block there with its own
 * pattern; the zones accept exactly one write per position, so the
 * accepted writes tile the zone and each block holds its writer's
 * pattern. */
#define RACERS 4
static struct s4k_dev *race_dev;
static _Atomic unsigned race_ok[RACERS], race_refused;
static pthread_barrier_t race_start;

static void *
racer (void *arg)
{
  const unsigned id = (unsigned) (uintptr_t) arg;
  char buf[4096];
  memset (buf, 'a' + id, sizeof buf);
  pthread_barrier_wait (&race_start);
  for (;;) {
    const struct s4k_zone_desc z = dev_zone (race_dev, 1024);
    if (z.cond == S4K_ZC_FULL)
      return NULL;
    sched_yield ();             /* let another writer read the same pointer */
    int r = s4k_write (race_dev, buf, 4096, z.wp * 4096, 0);
    if (r == 0)
      race_ok[id]++;
    else if (s4k_zone_err_of (r) == S4K_ZERR_UNALIGNED_WRITE ||
             s4k_zone_err_of (r) == S4K_ZERR_ZONE_FULL)
      race_refused++;
    else
      bail ("racer %u: %d", id, r);
  }
}

static void
test_race (void)
{
  race_dev = open_dev ("size=16M model=4kn zoned=host-managed zone-size=4M");
  pthread_t t[RACERS];
  pthread_barrier_init (&race_start, NULL, RACERS);
  for (uintptr_t i = 0; i < RACERS; i++)
    pthread_create (&t[i], NULL, racer, (void *) i);
  for (unsigned i = 0; i < RACERS; i++)
    pthread_join (t[i], NULL);
  unsigned total = 0, seen[RACERS] = { 0 };
  for (unsigned i = 0; i < RACERS; i++)
    total += race_ok[i];
  pthread_barrier_destroy (&race_start);
  char *rd = malloc (4 << 20);
  bool whole = s4k_read (race_dev, rd, 4 << 20, 4 << 20) == 0;
  for (unsigned b = 0; whole && b < 1024; b++) {
    const char c = rd[b * 4096];
    whole = c >= 'a' && c < 'a' + RACERS && all_bytes (rd + b * 4096, 4096, c);
    if (whole)
      seen[c - 'a']++;
  }
  for (unsigned i = 0; whole && i < RACERS; i++)
    whole = seen[i] == race_ok[i];
  ok (total == 1024 && whole && dev_zone (race_dev, 1024).wp == 2048,
      "%d writers racing at one write pointer: %u accepted (one per block, "
      "each block its writer's), %u refused off the pointer", RACERS, total,
      (unsigned) race_refused);
  free (rd);
  s4k_dev_close (race_dev);
}

/* Zone append: at the write pointer, which the zones choose; refused
 * off a zone start, on a conventional zone, past the zone's end, on a
 * full zone; the pointer and the data follow; concurrent appends each
 * get their own blocks. */
struct appender { struct s4k_dev *d; uint64_t at[64]; int r; };

static void *
append_thread (void *opaque)
{
  struct appender *a = opaque;
  char buf[4096];
  memset (buf, 0x5a, sizeof buf);
  for (int i = 0; i < 64 && !a->r; i++) {
    a->at[i] = B (Z (3));
    a->r = s4k_dev_zone_append (a->d, buf, 4096, &a->at[i], 0);
  }
  return NULL;
}

static void
test_append (void)
{
  struct s4k_dev *d = open_dev ("size=64M model=512e zoned=host-managed "
                                "zone-size=4M zone-conventional=1");
  char *buf = malloc (65536), *rd = malloc (65536);
  memset (buf, 0xcd, 65536);
  uint64_t off = B (Z (1));
  ok (s4k_write (d, buf, 4096, B (Z (1)), 0) == 0 &&
      s4k_dev_zone_append (d, buf, 8192, &off, 0) == 0 &&
      off == B (Z (1) + 8) && dev_zone (d, Z (1)).wp == Z (1) + 24,
      "an append after 8 LBAs goes to LBA +8 (got +%llu), the pointer +24",
      (unsigned long long) (off / 512 - Z (1)));
  ok (s4k_read (d, rd, 12288, B (Z (1))) == 0 && all_bytes (rd, 12288, 0xcd),
      "... its data is there");
  off = B (Z (1) + 8);
  ok (s4k_zone_err_of (s4k_dev_zone_append (d, buf, 4096, &off, 0)) ==
      S4K_ZERR_NOT_ZONE_START && dev_zone (d, Z (1)).wp == Z (1) + 24,
      "an append off a zone start: NOT_ZONE_START, nothing moves");
  off = 0;
  ok (s4k_zone_err_of (s4k_dev_zone_append (d, buf, 4096, &off, 0)) ==
      S4K_ZERR_NOT_WRITE_POINTER_ZONE, "an append to a conventional zone: "
      "NOT_WRITE_POINTER_ZONE");
  off = B (Z (2));
  for (int i = 0; i < 63; i++)
    s4k_dev_zone_append (d, buf, 65536, &off, 0), off = B (Z (2));
  s4k_dev_zone_append (d, buf, 61440, &off, 0), off = B (Z (2));
  ok (s4k_zone_err_of (s4k_dev_zone_append (d, buf, 8192, &off, 0)) ==
      S4K_ZERR_WRITE_BOUNDARY && dev_zone (d, Z (2)).wp == Z (2) + 8184,
      "an append past the zone's end: WRITE_BOUNDARY, the pointer stays");
  off = B (Z (2));
  ok (s4k_dev_zone_append (d, buf, 4096, &off, 0) == 0 &&
      off == B (Z (2) + 8184) && dev_zone (d, Z (2)).cond == S4K_ZC_FULL,
      "... one that fits goes in, at the last 8 LBAs: the zone is full");
  ok (s4k_dev_zone_op (d, S4K_ZOP_FINISH, Z (2), false) == 0 &&
      (off = B (Z (2)), s4k_zone_err_of (s4k_dev_zone_append (d, buf, 512, &off,
                                                              0))) ==
      S4K_ZERR_ZONE_FULL, "an append to a full zone: ZONE_FULL");
  struct appender a[4];
  for (int i = 0; i < 4; i++)
    a[i] = (struct appender) { .d = d };
  pthread_t th[4];
  for (int i = 0; i < 4; i++)
    pthread_create (&th[i], NULL, append_thread, &a[i]);
  for (int i = 0; i < 4; i++)
    pthread_join (th[i], NULL);
  static bool seen[256];
  bool tiled = true;
  for (int i = 0; i < 4; i++)
    for (int k = 0; k < 64; k++) {
      const uint64_t blk = (a[i].at[k] - B (Z (3))) / 4096;
      tiled = tiled && !a[i].r && blk < 256 && !seen[blk];
      if (blk < 256)
        seen[blk] = true;
    }
  ok (tiled && dev_zone (d, Z (3)).wp == Z (3) + 2048,
      "4 threads x 64 appends of 4 KiB: each a block of its own, the "
      "pointer after the 256");
  struct s4k_dev *ha = open_dev ("size=64M model=512e zoned=host-aware "
                                 "zone-size=4M");
  off = B (Z (1));
  ok (s4k_zone_err_of (s4k_dev_zone_append (ha, buf, 4096, &off, 0)) ==
      S4K_ZERR_NOT_WRITE_POINTER_ZONE, "host-aware: no append");
  s4k_dev_close (ha);
  s4k_dev_close (d);
  free (buf);
  free (rd);
}

/* A write the store itself fails, no power cut (whose own handling of
 * the pointers would hide a missing rewind): the file store past
 * RLIMIT_FSIZE fails it with EFBIG.  Its pointer moves back, on the
 * zoned fast path (dev_sync.c) and on the plan (stats=true), so that
 * the write can be sent again at the same place. */
static void
test_store_fails (void)
{
  char img[] = "/tmp/zonedev-XXXXXX";
  char keys[256], zpath[300];
  scratch_file (img, zpath, sizeof zpath);
  char *buf = calloc (1, 8192);
  struct rlimit old, lim;
  if (getrlimit (RLIMIT_FSIZE, &old) == -1)
    bail ("getrlimit");
  signal (SIGXFSZ, SIG_IGN);
  for (int stats = 0; stats < 2; stats++) {
    const char *how = stats ? "planned (stats=true)" : "fast path";
    snprintf (keys, sizeof keys, "size=8M model=4kn zoned=host-managed "
              "zone-size=1M file=%s zone-reformat=true stats=%s", img,
              stats ? "true" : "false");
    struct s4k_dev *d = open_dev (keys);
    lim = old;
    lim.rlim_cur = (4 << 20) + 8192;    /* zone 4's first 2 LBAs */
    if (setrlimit (RLIMIT_FSIZE, &lim) == -1)
      bail ("setrlimit");
    ok (s4k_write (d, buf, 8192, 1 << 20, 0) == 0 &&
        dev_zone (d, 256).wp == 258, "%s: a write below the limit passes", how);
    ok (s4k_write (d, buf, 8192, 5 << 20, 0) == -EFBIG &&
        dev_zone (d, 1280).wp == 1280 && dev_zone (d, 1280).cond == S4K_ZC_EMPTY,
        "%s: the store fails a write: its zone's pointer back, EMPTY", how);
    ok (s4k_write (d, buf, 8192, 4 << 20, 0) == 0 &&
        s4k_write (d, buf, 8192, (4 << 20) + 8192, S4K_FUA) == -EFBIG &&
        dev_zone (d, 1024).wp == 1026 &&
        dev_zone (d, 1024).cond == S4K_ZC_IMP_OPEN,
        "%s: a FUA write after one accepted fails: back to the first's "
        "end, still open", how);
    if (setrlimit (RLIMIT_FSIZE, &old) == -1)
      bail ("setrlimit");
    ok (s4k_write (d, buf, 8192, 5 << 20, 0) == 0 &&
        dev_zone (d, 1280).wp == 1282, "%s: sent again, it passes", how);
    s4k_dev_close (d);
  }
  signal (SIGXFSZ, SIG_DFL);
  unlink (img);
  unlink (zpath);
  free (buf);
}

/* Reads of an offline zone fail through the device, whichever way they
 * go: whole sectors in one zone (s4k_read's zoned fast path, without the
 * zone lock), a cut sector or across zones (the plan), with statistics
 * (every read planned), a conventional zone, and a zone that file= gave
 * back offline at start.  Repaired, they pass. */
static void
test_offline_reads (void)
{
  char img[] = "/tmp/zonedev-XXXXXX";
  char keys[256], zpath[300], err[256];
  scratch_file (img, zpath, sizeof zpath);
  static char rd[8192];
  const int off = S4K_ZERR_OFFLINE;
  for (int pass = 0; pass < 3; pass++) {
    snprintf (keys, sizeof keys, "size=16M model=512e zoned=host-managed "
              "zone-size=4M zone-conventional=1%s%s%s",
              pass == 1 ? " stats=true" : "", pass == 2 ? " file=" : "",
              pass == 2 ? img : "");
    const char *how = pass == 0 ? "memory" : pass == 1 ? "stats=true"
                    : "file=, reopened";
    struct s4k_dev *d = open_dev (keys);
    if (s4k_dev_zone_fault (d, Z (2), S4K_ZC_OFFLINE, err, sizeof err) ||
        s4k_dev_zone_fault (d, 0, S4K_ZC_OFFLINE, err, sizeof err))
      bail ("%s: %s", how, err);
    if (pass == 2) {            /* the conditions come back from the file */
      s4k_dev_close (d);
      d = open_dev (keys);
    }
    ok (s4k_zone_err_of (s4k_read (d, rd, 4096, B (Z (2)))) == off &&
        s4k_zone_err_of (s4k_read (d, rd, 4096, B (Z (3) - 8))) == off &&
        s4k_zone_err_of (s4k_read (d, rd, 512, B (Z (2) + 1))) == off &&
        s4k_zone_err_of (s4k_read (d, rd, 8192, B (Z (2) - 8))) == off &&
        s4k_zone_err_of (s4k_read (d, rd, 4096, B (8))) == off,
        "%s: reads of an offline zone fail: whole sectors, the last ones, "
        "a cut sector, across zones, the conventional zone", how);
    ok (s4k_read (d, rd, 4096, B (Z (1))) == 0 &&
        s4k_read (d, rd, 4096, B (Z (3))) == 0,
        "%s: the zones around it read", how);
    ok (s4k_dev_zone_fault (d, Z (2), S4K_ZC_EMPTY, err, sizeof err) == 0 &&
        s4k_read (d, rd, 4096, B (Z (2))) == 0 &&
        s4k_read (d, rd, 8192, B (Z (2) - 8)) == 0 &&
        s4k_read (d, rd, 512, B (Z (2) + 1)) == 0,
        "%s: repaired, it reads", how);
    s4k_dev_close (d);
  }
  unlink (img);
  unlink (zpath);
}

int
main (void)
{
  test_keys ();
  test_writes ();
  test_rewind ();
  test_store_fails ();
  test_offline_reads ();
  test_race ();
  test_append ();
  return done_testing ();
}
