/* SPDX-License-Identifier: BSD-3-Clause */
/* Zone state with file= (issue 33): conditions, write pointers, NON_SEQ
 * and the zone faults survive a restart (open zones come back closed)
 * and a SIGKILL (every acknowledged write and zone operation is on
 * record: a child runs a seeded sequence of writes and operations, is
 * killed, and the zones reopened equal a model replayed to the last
 * acknowledged step, or to the one in flight); a file of another layout,
 * a data file without zone state and a damaged state file are refused in
 * one line, unless zone-reformat=true; the control socket's zone
 * commands. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sect4k/sect4k.h"
#include "sect4k/zone.h"
#include "tap.h"
#include "devrig.h"
#include "killrig.h"

void closed_view (struct s4k_zone_desc *z);

/* Every zone of z, as REPORT ZONES gives it. */
static int
report_all (struct s4k_zones *z, struct s4k_zone_desc *out, uint32_t max)
{
  uint64_t listed;
  return s4k_zones_report (z, 0, 0, true, out, max, &listed);
}

static bool
same (const struct s4k_zone_desc *a, const struct s4k_zone_desc *b)
{
  return a->start == b->start && a->len == b->len && a->wp == b->wp &&
         a->type == b->type && a->cond == b->cond && a->non_seq == b->non_seq;
}

static void
show (const char *what, const struct s4k_zone_desc *z)
{
  diag ("%s: start %llu cond %x wp %lld non_seq %d", what,
        (unsigned long long) z->start, z->cond,
        z->wp == UINT64_MAX ? -1LL : (long long) z->wp, z->non_seq);
}

#define HM "size=64M model=512e zoned=host-managed zone-size=4M " \
           "zone-conventional=1 zone-max-open=3"
#define Z(n) ((uint64_t) (n) * 8192)
#define B(lba) ((uint64_t) (lba) * 512)

static void
test_refusals (void)
{
  static const struct { const char *keys, *msg; } bad[] = {
    { "size=64M zoned=host-managed zone-size=4M file=/dev/null",
      "zoned= and file=/dev/null: not a regular file (the zone state is "
      "kept beside the file, in FILE.sect4k-zones)" },
    { "size=64M zoned=host-managed zone-size=4M zone-reformat=true",
      "zone-reformat=true: needs file= (the zones of a memory device start "
      "empty)" },
    { "size=64M zone-reformat=true", "zone-reformat=true: needs "
      "zoned=host-managed or zoned=host-aware" },
    { "size=64M zoned=host-managed zone-reformat=maybe", "zone-reformat="
      "maybe: not a boolean (true/false, on/off, yes/no, 1/0)" },
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    struct s4k_config c;
    char err[256] = "";
    int r = configure (&c, bad[i].keys, err, sizeof err);
    ok (r == -1 && strcmp (err, bad[i].msg) == 0, "%s: refused: %s",
        bad[i].keys, err);
  }
}

/* Writes, operations and faults, then a restart: the same zones, but
 * open ones closed (empty if nothing was written). */
static void
test_restart (void)
{
  char err[512];
  struct s4k_dev *d = open_dev (keys (HM, "a.img"));
  char *buf = malloc (4 << 20), *rd = malloc (65536);
  memset (buf, 0x5c, 4 << 20);
  ok (s4k_write (d, buf, 8192, B (Z (1)), 0) == 0 &&      /* imp open */
      s4k_write (d, buf, 4 << 20, B (Z (2)), 0) == 0 &&   /* full */
      s4k_dev_zone_op (d, S4K_ZOP_OPEN, Z (3), false) == 0 &&
      s4k_write (d, buf, 4096, B (Z (3)), 0) == 0 &&      /* exp open */
      s4k_dev_zone_op (d, S4K_ZOP_OPEN, Z (4), false) == 0 && /* empty */
      s4k_write (d, buf, 4096, B (Z (5)), S4K_FUA) == 0 &&
      s4k_dev_zone_op (d, S4K_ZOP_CLOSE, Z (5), false) == 0 &&
      s4k_dev_zone_op (d, S4K_ZOP_FINISH, Z (6), false) == 0 &&
      s4k_write (d, buf, 4096, B (Z (9)), 0) == 0 &&
      s4k_dev_zone_op (d, S4K_ZOP_RESET, Z (9), false) == 0 &&
      s4k_dev_zone_fault (d, Z (7), S4K_ZC_OFFLINE, err, sizeof err) == 0 &&
      s4k_dev_zone_fault (d, Z (8), S4K_ZC_READ_ONLY, err, sizeof err) == 0 &&
      s4k_dev_zone_fault (d, Z (0), S4K_ZC_READ_ONLY, err, sizeof err) == 0 &&
      s4k_flush (d) == 0,
      "writes, zone operations and faults on a file= device");
  struct s4k_zone_desc before[16], after[16];
  ok (report_all (s4k_dev_zones (d), before, 16) == 16, "16 zones");
  s4k_dev_close (d);

  struct stat st;
  ok (stat (keys ("", "a.img.sect4k-zones") + 6, &st) == 0 &&
      st.st_size == 4096 + 16 * 8,
      "FILE.sect4k-zones: a 4096-byte header and 8 bytes per zone");

  d = open_dev (keys (HM, "a.img"));
  ok (report_all (s4k_dev_zones (d), after, 16) == 16, "reopened");
  bool match = true;
  for (int i = 0; i < 16; i++) {
    struct s4k_zone_desc want = before[i];
    if (want.cond == S4K_ZC_IMP_OPEN || want.cond == S4K_ZC_EXP_OPEN)
      want.cond = want.wp == want.start ? S4K_ZC_EMPTY : S4K_ZC_CLOSED;
    if (!same (&want, &after[i])) {
      show ("want", &want);
      show ("got", &after[i]);
      match = false;
    }
  }
  ok (match, "after a restart every zone is as it was, open ones closed");
  ok (after[1].cond == S4K_ZC_CLOSED && after[1].wp == Z (1) + 16 &&
      after[2].cond == S4K_ZC_FULL && after[3].cond == S4K_ZC_CLOSED &&
      after[4].cond == S4K_ZC_EMPTY && after[5].cond == S4K_ZC_CLOSED &&
      after[6].cond == S4K_ZC_FULL && after[7].cond == S4K_ZC_OFFLINE &&
      after[8].cond == S4K_ZC_READ_ONLY && after[0].cond == S4K_ZC_READ_ONLY &&
      after[9].cond == S4K_ZC_EMPTY,
      "imp open and exp open: closed; opened but empty: empty; full, "
      "closed, offline, read only (conventional too), reset: kept");
  struct s4k_zones_counts n;
  s4k_zones_counts (s4k_dev_zones (d), &n);
  ok (n.imp_open == 0 && n.exp_open == 0 && n.closed == 3,
      "resource counts rebuilt: 3 closed, none open");
  memset (rd, 0, 65536);
  ok (s4k_read (d, rd, 8192, B (Z (1))) == 0 && rd[0] == 0x5c &&
      rd[8191] == 0x5c, "the data below the write pointer reads back");
  ok (s4k_zone_err_of (s4k_write (d, buf, 4096, B (Z (1)), 0)) ==
      S4K_ZERR_UNALIGNED_WRITE &&
      s4k_write (d, buf, 4096, B (Z (1) + 16), 0) == 0 &&
      dev_zone (d, Z (1)).cond == S4K_ZC_IMP_OPEN &&
      s4k_zone_err_of (s4k_write (d, buf, 4096, B (Z (7)), 0)) ==
      S4K_ZERR_OFFLINE,
      "the write pointer is where it was: a write at the old start is "
      "unaligned, at the pointer it opens the zone; the offline zone "
      "refuses");
  ok (s4k_dev_zone_fault (d, Z (7), S4K_ZC_EMPTY, err, sizeof err) == 0 &&
      s4k_dev_zone_fault (d, Z (0), S4K_ZC_EMPTY, err, sizeof err) == 0,
      "repaired");
  s4k_dev_close (d);
  d = open_dev (keys (HM, "a.img"));
  ok (dev_zone (d, Z (7)).cond == S4K_ZC_EMPTY &&
      dev_zone (d, Z (0)).cond == S4K_ZC_NOT_WP &&
      dev_zone (d, Z (1)).wp == Z (1) + 24,
      "a repair and the write after the restart are on record too");
  s4k_dev_close (d);

  /* Host-aware: NON_SEQ. */
  const char *ha = "size=16M zoned=host-aware zone-size=4M";
  d = open_dev (keys (ha, "ha.img"));
  ok (s4k_write (d, buf, 4096, B (Z (1) + 64), 0) == 0 &&
      dev_zone (d, Z (1)).non_seq, "host-aware: a write off the pointer sets "
      "NON_SEQ");
  s4k_dev_close (d);
  d = open_dev (keys (ha, "ha.img"));
  struct s4k_zone_desc z1 = dev_zone (d, Z (1));
  ok (z1.non_seq && z1.wp == Z (1) + 72 && z1.cond == S4K_ZC_CLOSED,
      "host-aware after a restart: NON_SEQ and the write pointer kept, "
      "closed");
  s4k_dev_close (d);
  free (buf);
  free (rd);
}

static void
test_layout (void)
{
  char err[512], want[1024];
  struct s4k_dev *d;
  /* a.img was written by test_restart with HM. */
  static const struct { const char *keys, *was, *now; } other[] = {
    { "size=64M model=512e zoned=host-managed zone-size=8M "
      "zone-conventional=1", "zone-size=4194304 zones=16",
      "zone-size=8388608 zones=8" },
    { "size=64M model=512e zoned=host-managed zone-size=4M "
      "zone-conventional=2", "zone-conventional=1", "zone-conventional=2" },
    { "size=64M model=512e zoned=host-aware zone-size=4M "
      "zone-conventional=1", "zoned=host-managed", "zoned=host-aware" },
    { "size=64M model=4kn zoned=host-managed zone-size=4M "
      "zone-conventional=1", "logical=512", "logical=4096" },
  };
  for (size_t i = 0; i < sizeof other / sizeof other[0]; i++) {
    snprintf (want, sizeof want, "%s/a.img.sect4k-zones: written with %s, "
              "the keys say %s: give the same, or zone-reformat=true to "
              "start every zone empty", dir, other[i].was, other[i].now);
    err[0] = '\0';
    ok (try_open (&d, keys (other[i].keys, "a.img"), err, sizeof err) ==
        -1 && strcmp (err, want) == 0, "another layout refused: %s", err);
  }
  /* size: the file store keeps the file's size unless size= grows it. */
  snprintf (want, sizeof want, "%s/a.img.sect4k-zones: written with "
            "size=67108864 zones=16, the keys say size=134217728 zones=32: "
            "give the same, or zone-reformat=true to start every zone empty",
            dir);
  err[0] = '\0';
  ok (try_open (&d, keys ("size=128M model=512e zoned=host-managed "
                          "zone-size=4M zone-conventional=1", "a.img"),
                err, sizeof err) == -1 && strcmp (err, want) == 0,
      "another size refused: %s", err);
  struct stat st;
  ok (stat (keys ("", "a.img") + 6, &st) == 0 && st.st_size == 64 << 20,
      "before the file grew to the new size");

  const char *k8 = "size=64M model=512e zoned=host-managed zone-size=8M";
  char k[512];
  snprintf (k, sizeof k, "%s zone-reformat=true", k8);
  if (!ok (try_open (&d, keys (k, "a.img"), err, sizeof err) == 0,
           "zone-reformat=true takes the new layout"))
    bail ("%s", err);
  struct s4k_zones_info zi;
  s4k_zones_info (s4k_dev_zones (d), &zi);
  struct s4k_zone_desc all[8];
  report_all (s4k_dev_zones (d), all, 8);
  bool empty = true;
  for (int i = 0; i < 8; i++)
    empty &= all[i].cond == S4K_ZC_EMPTY && all[i].wp == all[i].start;
  ok (zi.nr_zones == 8 && zi.conventional == 0 && empty,
      "every zone empty, 8 of 8M");
  char buf[4096] = { 1 };
  ok (s4k_write (d, buf, 4096, B (16384), 0) == 0, "written");
  s4k_dev_close (d);
  ok (try_open (&d, keys (k8, "a.img"), err, sizeof err) == 0 &&
      dev_zone (d, 16384).wp == 16392,
      "restarted with the new layout and no zone-reformat: kept");
  s4k_dev_close (d);

  /* A data file with data and no zone state. */
  d = open_dev (keys ("size=64M", "plain.img"));
  ok (s4k_write (d, buf, 4096, 0, 0) == 0, "a plain device wrote its file");
  s4k_dev_close (d);
  snprintf (want, sizeof want, "file=%s/plain.img: holds data but no zone "
            "state (%s/plain.img.sect4k-zones is missing): zone-reformat="
            "true starts every zone empty", dir, dir);
  err[0] = '\0';
  ok (try_open (&d, keys (k8, "plain.img"), err, sizeof err) == -1 &&
      strcmp (err, want) == 0, "refused: %s", err);
  snprintf (k, sizeof k, "%s zone-reformat=true", k8);
  ok (try_open (&d, keys (k, "plain.img"), err, sizeof err) == 0 &&
      dev_zone (d, 0).cond == S4K_ZC_EMPTY, "zone-reformat=true: all empty");
  s4k_dev_close (d);

  /* The data file gone, its zone state left. */
  char gone[300];
  snprintf (gone, sizeof gone, "%s/a.img", dir);
  ok (unlink (gone) == 0, "a.img removed, a.img.sect4k-zones left");
  snprintf (want, sizeof want, "file=%s: does not exist, but %s.sect4k-zones "
            "does (the zone state of a file that is gone): zone-reformat="
            "true starts every zone empty", gone, gone);
  err[0] = '\0';
  ok (try_open (&d, keys (k8, "a.img"), err, sizeof err) == -1 &&
      strcmp (err, want) == 0 && access (gone, F_OK) == -1,
      "refused, and no new data file made: %s", err);

  /* Damaged state files. */
  char path[512];
  snprintf (path, sizeof path, "%s/plain.img.sect4k-zones", dir);
  int fd = open (path, O_RDWR);
  uint64_t bad = 0x5a000000000000ffull;    /* EMPTY with a pointer */
  ok (fd != -1 && pwrite (fd, &bad, 8, 4096 + 8 * 2) == 8,
      "a record damaged");
  snprintf (want, sizeof want, "%s: the record of zone 2 (LBA 32768) is not "
            "valid (5a000000000000ff): zone-reformat=true starts every zone "
            "empty", path);
  err[0] = '\0';
  ok (try_open (&d, keys (k8, "plain.img"), err, sizeof err) == -1 &&
      strcmp (err, want) == 0, "refused: %s", err);
  ok (ftruncate (fd, 4096 + 8 * 7) == 0, "truncated");
  close (fd);
  snprintf (want, sizeof want, "%s: 4152 bytes, 4160 expected for 8 zones "
            "(the file is damaged): zone-reformat=true writes a new one",
            path);
  err[0] = '\0';
  ok (try_open (&d, keys (k8, "plain.img"), err, sizeof err) == -1 &&
      strcmp (err, want) == 0, "refused: %s", err);
  fd = open (path, O_WRONLY | O_TRUNC);
  ok (fd != -1 && write (fd, "junk\n", 5) == 5, "overwritten");
  close (fd);
  snprintf (want, sizeof want, "%s: not a sect4k zone state file (expected "
            "'sect4k-zones 1 zoned=...'): zone-reformat=true writes a new "
            "one", path);
  err[0] = '\0';
  ok (try_open (&d, keys (k8, "plain.img"), err, sizeof err) == -1 &&
      strcmp (err, want) == 0, "refused: %s", err);
}

/* ---- zone-reformat=true erases; a read-only start changes no file ----- */

static int
count_data (void *opaque, uint64_t off, uint64_t len, bool zero)
{
  (void) off;
  if (!zero)
    *(uint64_t *) opaque += len;
  return 0;
}

/* Bytes of [0, size) the device's extents call data. */
static uint64_t
data_bytes (struct s4k_dev *d, uint64_t size)
{
  uint64_t n = 0;
  if (s4k_extents (d, size, 0, count_data, &n) < 0)
    bail ("extents");
  return n;
}

static bool
reads_zeroes (struct s4k_dev *d, uint64_t len, uint64_t off)
{
  char *b = malloc (len);
  bool z = s4k_read (d, b, len, off) == 0;
  for (uint64_t i = 0; z && i < len; i++)
    z = b[i] == 0;
  free (b);
  return z;
}

static void
test_reformat_data (void)
{
  char err[512];
  struct s4k_dev *d = open_dev (keys (HM, "r.img"));
  char *buf = malloc (4 << 20);
  memset (buf, 0x6d, 4 << 20);
  ok (s4k_write (d, buf, 65536, 0, 0) == 0 &&            /* conventional */
      s4k_write (d, buf, 65536, B (Z (1)), 0) == 0 &&
      s4k_write (d, buf, 4 << 20, B (Z (2)), 0) == 0 &&  /* full */
      s4k_flush (d) == 0, "data in a conventional and two sequential zones");
  s4k_dev_close (d);

  char k[512];
  snprintf (k, sizeof k, "%s zone-reformat=true", HM);
  if (!ok (try_open (&d, keys (k, "r.img"), err, sizeof err) == 0,
           "zone-reformat=true"))
    bail ("%s", err);
  ok (dev_zone (d, Z (1)).cond == S4K_ZC_EMPTY &&
      dev_zone (d, Z (2)).cond == S4K_ZC_EMPTY, "the zones are empty");
  ok (reads_zeroes (d, 65536, B (Z (1))) && reads_zeroes (d, 4 << 20, B (Z (2))),
      "the sequential zones read zeroes, as a reset leaves them");
  ok (reads_zeroes (d, 65536, 0),
      "the conventional zone reads zeroes (a reformat is a FORMAT UNIT)");
  ok (data_bytes (d, 64 << 20) == 0, "the extents say zero everywhere");
  struct stat st;
  ok (stat (keys ("", "r.img") + 6, &st) == 0 && st.st_blocks == 0 &&
      st.st_size == 64 << 20, "the file's blocks are punched out, its "
      "size kept");
  ok (s4k_write (d, buf, 4096, B (Z (1)), 0) == 0, "a write at the start");
  s4k_dev_close (d);
  d = open_dev (keys (HM, "r.img"));
  ok (dev_zone (d, Z (1)).wp == Z (1) + 8 && reads_zeroes (d, 4 << 20, B (Z (2))),
      "restarted without the key: the new write kept, the rest zeroes");
  s4k_dev_close (d);
  free (buf);
}

/* Opens keys k read-only, as sect4k-server -r does. */
static int
try_open_ro (struct s4k_dev **d, const char *k, char *err, size_t errlen)
{
  struct s4k_config c;
  if (configure (&c, k, err, errlen))
    return -1;
  c.readonly = true;
  return s4k_dev_open (d, &c, err, errlen) ? -1 : 0;
}

static char *
slurp (const char *path, size_t *len)
{
  FILE *f = fopen (path, "r");
  if (!f)
    return NULL;
  char *b = malloc (1 << 20);
  *len = fread (b, 1, 1 << 20, f);
  fclose (f);
  return b;
}

static void
test_readonly (void)
{
  char err[512], path[512], zpath[512];
  struct s4k_dev *d;
  snprintf (path, sizeof path, "%s/ro.img", dir);
  snprintf (zpath, sizeof zpath, "%s/ro.img.sect4k-zones", dir);
  int fd = open (path, O_RDWR | O_CREAT | O_TRUNC, 0644);
  ok (fd != -1 && ftruncate (fd, 64 << 20) == 0, "an empty 64M file");
  close (fd);
  if (!ok (try_open_ro (&d, keys (HM, "ro.img"), err, sizeof err) == 0,
           "read-only start with no zone state"))
    bail ("%s", err);
  struct s4k_zone_desc all[16];
  bool empty = report_all (s4k_dev_zones (d), all, 16) == 16;
  for (int i = 1; i < 16; i++)
    empty &= all[i].cond == S4K_ZC_EMPTY && all[i].wp == all[i].start;
  ok (empty, "the zones of a reset drive, in memory");
  char b[4096] = { 1 };
  ok (s4k_write (d, b, 4096, B (Z (1)), 0) != 0, "a write is refused");
  s4k_dev_close (d);
  ok (access (zpath, F_OK) == -1 && errno == ENOENT,
      "no FILE.sect4k-zones made");

  d = open_dev (keys (HM, "ro.img"));
  ok (s4k_write (d, b, 4096, B (Z (1)), 0) == 0 &&
      dev_zone (d, Z (1)).cond == S4K_ZC_IMP_OPEN, "a writable start: zone 1 "
      "implicitly open");
  s4k_dev_close (d);   /* still open on record: a restart closes it */
  size_t n0, n1;
  struct stat st0, st1;
  char *before = slurp (zpath, &n0);
  ok (before && stat (zpath, &st0) == 0, "the state file");
  usleep (20000);
  if (!ok (try_open_ro (&d, keys (HM, "ro.img"), err, sizeof err) == 0,
           "read-only start with zone state"))
    bail ("%s", err);
  ok (dev_zone (d, Z (1)).cond == S4K_ZC_CLOSED &&
      dev_zone (d, Z (1)).wp == Z (1) + 8, "zone 1 closed in memory");
  s4k_dev_close (d);
  char *after = slurp (zpath, &n1);
  ok (after && n0 == n1 && memcmp (before, after, n0) == 0 &&
      stat (zpath, &st1) == 0 &&
      st1.st_mtim.tv_sec == st0.st_mtim.tv_sec &&
      st1.st_mtim.tv_nsec == st0.st_mtim.tv_nsec,
      "the state file unchanged (its record still says open)");
  free (after);

  char k[512], want[1024];
  snprintf (k, sizeof k, "%s zone-reformat=true", HM);
  snprintf (want, sizeof want, "zone-reformat=true: file=%s is read-only (a "
            "reformat erases the data and rewrites its zone state)", path);
  err[0] = '\0';
  ok (try_open_ro (&d, keys (k, "ro.img"), err, sizeof err) == -1 &&
      strcmp (err, want) == 0, "read-only with zone-reformat=true refused: "
      "%s", err);
  after = slurp (zpath, &n1);
  ok (after && n0 == n1 && memcmp (before, after, n0) == 0,
      "the state file unchanged");
  d = open_dev (keys (HM, "ro.img"));
  ok (dev_zone (d, Z (1)).wp == Z (1) + 8 && !reads_zeroes (d, 4096, B (Z (1))),
      "the data kept");
  s4k_dev_close (d);
  free (before);
  free (after);
}

/* ---- threads ----------------------------------------------------------- */

/* Four threads append to zones 1-8 at once, each write at the pointer
 * the report gives (two threads may race for one pointer: the loser is
 * refused); the records on file then equal the zones in memory. */
struct racer {
  struct s4k_dev *d;
  unsigned id, done, refused;
};

static void *
race (void *arg)
{
  struct racer *r = arg;
  static char buf[65536];
  for (unsigned i = 0; i < 400; i++) {
    /* Two threads on each zone at a time. */
    const uint64_t zl = Z (1 + (i + (r->id & 1)) % 8);
    struct s4k_zone_desc z = dev_zone (r->d, zl);
    if (z.cond == S4K_ZC_FULL)
      s4k_dev_zone_op (r->d, S4K_ZOP_RESET, zl, false);
    else if (s4k_write (r->d, buf, 65536, B (z.wp), i % 16 ? 0 : S4K_FUA)
             == 0)
      r->done++;
    else
      r->refused++;
  }
  return NULL;
}

static void
test_threads (void)
{
  const char *k = keys ("size=64M model=512e zoned=host-managed zone-size=4M "
                        "zone-conventional=1", "t.img");
  struct s4k_dev *d = open_dev (k);
  pthread_t t[4];
  struct racer r[4];
  for (unsigned i = 0; i < 4; i++) {
    r[i] = (struct racer) { d, i + 1, 0, 0 };
    pthread_create (&t[i], NULL, race, &r[i]);
  }
  unsigned done = 0, refused = 0;
  for (unsigned i = 0; i < 4; i++) {
    pthread_join (t[i], NULL);
    done += r[i].done;
    refused += r[i].refused;
  }
  struct s4k_zone_desc before[16], after[16];
  report_all (s4k_dev_zones (d), before, 16);
  s4k_dev_close (d);
  d = open_dev (k);
  report_all (s4k_dev_zones (d), after, 16);
  bool match = true;
  for (int i = 0; i < 16; i++) {
    closed_view (&before[i]);
    if (!same (&before[i], &after[i])) {
      show ("want", &before[i]);
      show ("got", &after[i]);
      match = false;
    }
  }
  ok (match && done > 100, "4 threads, %u writes accepted, %u refused "
      "(a pointer raced for, or a zone full), zones reset when full: the "
      "zones reopen as they were", done, refused);
  s4k_dev_close (d);
}

/* ---- SIGKILL ------------------------------------------------------------ */

/* A small device: 2 conventional and 30 sequential zones of 1 MiB
 * (2048 LBAs), open limit 4, active limit 6. */
#define KZONES 32
#define KLBAS 2048
#define KKEYS "size=32M model=512e zoned=host-managed zone-size=1M " \
              "zone-conventional=2 zone-max-open=4 zone-max-active=6"

struct step {
  int kind;                     /* 0-4: write, open, close, finish, reset */
  bool all, fua;
  uint32_t zone;
  uint32_t blocks;              /* write: physical blocks (8 LBAs) */
};

/* Step i of the sequence of seed: the same in the child and the parent. */
static struct step
step_of (uint64_t seed, uint64_t i)
{
  uint64_t s = (seed ^ (i * 0x9E3779B97F4A7C15ull)) | 1;
  for (int k = 0; k < 4; k++)
    rng (&s);
  const unsigned r = rng (&s) % 100;
  struct step st = { 0 };
  st.zone = 2 + rng (&s) % (KZONES - 2);
  st.kind = r < 80 ? 0 : r < 85 ? 1 : r < 90 ? 2 : r < 94 ? 3 : 4;
  st.all = st.kind && rng (&s) % 8 == 0;
  st.fua = rng (&s) % 8 == 0;
  st.blocks = 1 + rng (&s) % 16;
  return st;
}

/* What the replay tracks beside the zones: per zone, its reset epoch and
 * how far it was written in it. */
struct track {
  uint32_t epoch[KZONES];
  uint64_t written[KZONES];
};

/* Runs step st on the model zones m (with t), or on device d: the same
 * choices, from the zones' own state.  Returns the result (0 or a zone
 * error). */
static int
run_step (struct s4k_zones *m, struct track *t, struct s4k_dev *d,
          const struct step *st, char *buf)
{
  struct s4k_zones *z = d ? s4k_dev_zones (d) : m;
  const uint64_t start = (uint64_t) st->zone * KLBAS;
  if (st->kind == 0) {
    struct s4k_zone_desc zd;
    uint64_t listed;
    s4k_zones_report (z, start, 0, true, &zd, 1, &listed);
    uint64_t lba = zd.cond == S4K_ZC_FULL ? start : zd.wp;
    uint64_t n = (uint64_t) st->blocks * 8;
    if (lba + n > start + KLBAS)
      n = start + KLBAS - lba;
    int r;
    if (d) {
      fill (buf, lba, n, t->epoch[st->zone]);
      r = s4k_write (d, buf, n * 512, lba * 512, st->fua ? S4K_FUA : 0);
      r = r ? s4k_zone_err_of (r) : 0;
    }
    else {
      r = -s4k_zones_write (m, lba, n);
      if (r == 0)
        t->written[st->zone] = lba + n;
    }
    return r;
  }
  static const enum s4k_zone_op ops[] = {
    0, S4K_ZOP_OPEN, S4K_ZOP_CLOSE, S4K_ZOP_FINISH, S4K_ZOP_RESET };
  int r;
  if (d) {
    r = s4k_dev_zone_op (d, ops[st->kind], start, st->all);
    r = r ? s4k_zone_err_of (r) : 0;
  }
  else {
    r = -s4k_zones_op (m, ops[st->kind], start, st->all);
    if (r == 0 && st->kind == 4)
      for (uint32_t i = 2; i < KZONES; i++)
        if (st->all || i == st->zone) {
          t->epoch[i]++;
          t->written[i] = (uint64_t) i * KLBAS;
        }
  }
  /* The device's reset epochs follow the model's: the child tracks them
   * the same way. */
  if (d && r == 0 && st->kind == 4)
    for (uint32_t i = 2; i < KZONES; i++)
      if (st->all || i == st->zone)
        t->epoch[i]++;
  return r;
}

static void
child (uint64_t seed, const char *k, int wfd)
{
  struct s4k_dev *d;
  char err[512];
  if (try_open (&d, k, err, sizeof err)) {
    fprintf (stderr, "child: %s\n", err);
    _exit (1);
  }
  struct track t = { 0 };
  char *buf = malloc (16 * 4096);
  for (uint64_t i = 0; ; i++) {
    struct step st = step_of (seed, i);
    struct ack a = { i, run_step (NULL, &t, d, &st, buf) };
    if (write (wfd, &a, sizeof a) != sizeof a)
      _exit (2);
  }
}

/* Replays steps [0, n) on a fresh model. */
static struct s4k_zones *
replay (uint64_t seed, uint64_t n, struct track *t, const struct ack *acks)
{
  struct s4k_config c;
  char err[256];
  if (configure (&c, KKEYS, err, sizeof err))
    bail ("%s", err);
  struct s4k_zones *m;
  if (s4k_zones_new (&m, &c.zone, &c.geom))
    bail ("zones_new");
  memset (t, 0, sizeof *t);
  for (uint32_t i = 0; i < KZONES; i++)
    t->written[i] = (uint64_t) i * KLBAS;
  for (uint64_t i = 0; i < n; i++) {
    struct step st = step_of (seed, i);
    int r = run_step (m, t, NULL, &st, NULL);
    if (acks && r != acks[i].result)
      bail ("seed %llu step %llu: the device answered %d, the model %d",
            (unsigned long long) seed, (unsigned long long) i,
            acks[i].result, r);
  }
  return m;
}

void
closed_view (struct s4k_zone_desc *z)
{
  if (z->cond == S4K_ZC_IMP_OPEN || z->cond == S4K_ZC_EXP_OPEN)
    z->cond = z->wp == z->start ? S4K_ZC_EMPTY : S4K_ZC_CLOSED;
}

static bool
kill_round (uint64_t seed, uint64_t kill_after)
{
  char name[64];
  snprintf (name, sizeof name, "kill-%llu.img", (unsigned long long) seed);
  const char *k = keys (KKEYS, name);
  size_t n;
  struct ack *acks = acks_until_kill (child, seed, k, kill_after, &n);

  /* Acknowledged: steps [0, n); in flight: step n. */
  struct track ta, tb;
  struct s4k_zones *ma = replay (seed, n, &ta, acks);
  struct s4k_zones *mb = replay (seed, n + 1, &tb, NULL);
  struct s4k_dev *d;
  char err[512];
  if (try_open (&d, k, err, sizeof err))
    bail ("reopen: %s", err);
  struct s4k_zone_desc got[KZONES], a[KZONES], b[KZONES];
  report_all (s4k_dev_zones (d), got, KZONES);
  report_all (ma, a, KZONES);
  report_all (mb, b, KZONES);
  bool good = true;
  char *buf = malloc (KLBAS * 512), *want = malloc (KLBAS * 512);
  for (int i = 0; i < KZONES && good; i++) {
    closed_view (&a[i]);
    closed_view (&b[i]);
    if (!same (&got[i], &a[i]) && !same (&got[i], &b[i])) {
      diag ("seed %llu, %zu steps acknowledged: zone %d",
            (unsigned long long) seed, n, i);
      show ("acknowledged", &a[i]);
      show ("in flight", &b[i]);
      show ("reopened", &got[i]);
      good = false;
      break;
    }
    /* The data of the acknowledged writes since the zone's last reset. */
    uint64_t start = (uint64_t) i * KLBAS, end = ta.written[i];
    if (got[i].wp != UINT64_MAX && got[i].wp < end)
      end = got[i].wp;
    if (i < 2 || end <= start)
      continue;
    fill (want, start, end - start, ta.epoch[i]);
    if (s4k_read (d, buf, (end - start) * 512, start * 512) != 0 ||
        memcmp (buf, want, (end - start) * 512) != 0) {
      diag ("seed %llu: zone %d: the data of [%llu, %llu) differs",
            (unsigned long long) seed, i, (unsigned long long) start,
            (unsigned long long) end);
      good = false;
    }
  }
  /* And the device goes on from there. */
  memset (buf, 7, 4096);
  if (good && (s4k_dev_zone_op (d, S4K_ZOP_RESET, 0, true) != 0 ||
               s4k_write (d, buf, 4096, 2 * KLBAS * 512, 0) != 0)) {
    diag ("seed %llu: a reset and a write after the restart failed",
          (unsigned long long) seed);
    good = false;
  }
  s4k_dev_close (d);
  s4k_zones_free (ma);
  s4k_zones_free (mb);
  free (acks);
  free (buf);
  free (want);
  if (good)
    diag ("seed %llu: killed after %zu acknowledged steps: the zones "
          "reopened match", (unsigned long long) seed, n);
  return good;
}

static void
test_kill (void)
{
  const char *env = getenv ("SECT4K_ZONE_KILL_ROUNDS");
  const int rounds = env ? atoi (env) : 8;
  bool good = true;
  for (int i = 0; i < rounds && good; i++)
    good = kill_round (1000 + i, 200 + 150 * i);
  ok (good, "SIGKILL in %d rounds: every zone reopens as the "
      "acknowledged steps left it (or the one in flight), open zones "
      "closed, the acknowledged data there", rounds);
}

/* ---- the control socket ------------------------------------------------ */

/* One command, its whole answer into out. */
static void
ctl (const char *path, const char *line, char *out, size_t len)
{
  struct sockaddr_un sa = { .sun_family = AF_UNIX };
  snprintf (sa.sun_path, sizeof sa.sun_path, "%s", path);
  int fd = socket (AF_UNIX, SOCK_STREAM, 0);
  if (fd == -1 || connect (fd, (struct sockaddr *) &sa, sizeof sa) == -1)
    bail ("connect %s", path);
  if (write (fd, line, strlen (line)) != (ssize_t) strlen (line) ||
      write (fd, "\n", 1) != 1)
    bail ("write");
  size_t have = 0;
  for (;;) {
    ssize_t r = read (fd, out + have, len - 1 - have);
    if (r <= 0)
      break;
    have += r;
    out[have] = '\0';
    if ((have >= 3 && strcmp (out + have - 3, "ok\n") == 0 &&
         (have == 3 || out[have - 4] == '\n')) ||
        (strncmp (out, "error: ", 7) == 0 && out[have - 1] == '\n'))
      break;
  }
  out[have] = '\0';
  close (fd);
}

static const char *top;         /* the source tree, for scripts/ */

static void
test_control (void)
{
  char sock[300], k[700], out[8192];
  snprintf (sock, sizeof sock, "%s/ctl", dir);
  snprintf (k, sizeof k, "size=16M model=512e zoned=host-managed "
            "zone-size=4M zone-conventional=1 control=%s", sock);
  struct s4k_dev *d = open_dev (keys (k, "c.img"));
  s4k_dev_start (d);
  char buf[4096] = { 3 };
  s4k_write (d, buf, 4096, B (Z (2)), 0);
  ctl (sock, "zone offline 8192", out, sizeof out);
  ok (strcmp (out, "ok\n") == 0, "zone offline 8192");
  ctl (sock, "zone read-only 0", out, sizeof out);
  ok (strcmp (out, "ok\n") == 0, "zone read-only 0 (conventional)");
  ctl (sock, "zone list", out, sizeof out);
  if (!ok (strcmp (out,
              "start=0 len=8192 type=conventional cond=read-only wp=- "
              "non-seq=0\n"
              "start=8192 len=8192 type=seq-required cond=offline wp=- "
              "non-seq=0\n"
              "start=16384 len=8192 type=seq-required cond=imp-open "
              "wp=16392 non-seq=0\n"
              "start=24576 len=8192 type=seq-required cond=empty wp=24576 "
              "non-seq=0\n"
              "ok\n") == 0, "zone list: one line per zone"))
    diag ("%s", out);
  /* The client, scripts/sect4k-ctl: the lines without "ok", status 0;
   * an error on stderr, status 1. */
  if (top) {
    char cmd[1200], got[4096] = "";
    snprintf (cmd, sizeof cmd, "%s/scripts/sect4k-ctl %s zone list 2>&1",
              top, sock);
    FILE *p = popen (cmd, "r");
    size_t n = p ? fread (got, 1, sizeof got - 1, p) : 0;
    got[n] = '\0';
    int st = p ? pclose (p) : -1;
    ok (st == 0 && strncmp (got, "start=0 len=8192 type=conventional "
                            "cond=read-only wp=- non-seq=0\n", 64) == 0 &&
        !strstr (got, "ok\n"), "sect4k-ctl SOCK zone list: the zones");
    snprintf (cmd, sizeof cmd, "%s/scripts/sect4k-ctl %s zone offline 1 "
              "2>&1", top, sock);
    p = popen (cmd, "r");
    n = p ? fread (got, 1, sizeof got - 1, p) : 0;
    got[n] = '\0';
    st = p ? pclose (p) : -1;
    ok (WIFEXITED (st) && WEXITSTATUS (st) == 1 &&
        strcmp (got, "sect4k-ctl: zone 1: not the first LBA of a zone "
                "(zones are 8192 LBAs; this one starts at 0)\n") == 0,
        "sect4k-ctl SOCK zone offline 1: status 1, %.*s",
        (int) strcspn (got, "\n"), got);
  }
  ok (s4k_zone_err_of (s4k_write (d, buf, 4096, B (Z (1)), 0)) ==
      S4K_ZERR_OFFLINE &&
      s4k_zone_err_of (s4k_write (d, buf, 4096, 0, 0)) == S4K_ZERR_READ_ONLY,
      "the device refuses writes there");
  static const struct { const char *cmd, *ans; } bad[] = {
    { "zone offline 8193", "error: zone 8193: not the first LBA of a zone "
      "(zones are 8192 LBAs; this one starts at 8192)\n" },
    { "zone offline 32768", "error: zone 32768: beyond the last LBA "
      "(32767)\n" },
    { "zone offline x", "error: zone offline x: must be the first LBA of a "
      "zone (decimal)\n" },
    { "zone broken 0", "error: usage: zone offline|read-only|repair LBA or "
      "zone list\n" },
    { "zone", "error: usage: zone offline|read-only|repair LBA or zone "
      "list\n" },
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ctl (sock, bad[i].cmd, out, sizeof out);
    ok (strcmp (out, bad[i].ans) == 0, "%s: %.*s", bad[i].cmd,
        (int) strcspn (out, "\n"), out);
  }
  s4k_dev_close (d);
  d = open_dev (keys (k, "c.img"));
  s4k_dev_start (d);
  ctl (sock, "zone list", out, sizeof out);
  ok (strncmp (out, "start=0 len=8192 type=conventional cond=read-only wp=- "
               "non-seq=0\nstart=8192 len=8192 type=seq-required "
               "cond=offline", 96) == 0 &&
      strstr (out, "start=16384 len=8192 type=seq-required cond=closed "
              "wp=16392"),
      "after a restart: the faults kept, the open zone closed");
  ctl (sock, "zone repair 8192", out, sizeof out);
  ok (strcmp (out, "ok\n") == 0 &&
      s4k_write (d, buf, 4096, B (Z (1)), 0) == 0, "zone repair: writable "
      "again, from the zone's start");
  s4k_dev_close (d);
  snprintf (k, sizeof k, "size=16M control=%s", sock);
  d = open_dev (k);
  s4k_dev_start (d);
  ctl (sock, "zone list", out, sizeof out);
  ok (strcmp (out, "error: zone: the device is not zoned (give zoned="
              "host-managed or zoned=host-aware)\n") == 0,
      "a device without zones: %.*s", (int) strcspn (out, "\n"), out);
  s4k_dev_close (d);
}

int
main (int argc, char **argv)
{
  top = argc > 1 ? argv[1] : NULL;
  const char *tmp = getenv ("TMPDIR");
  snprintf (dir, sizeof dir, "%s/s4k-zone-persist-XXXXXX", tmp ? tmp : "/tmp");
  if (!mkdtemp (dir))
    bail ("mkdtemp");
  test_refusals ();
  test_restart ();
  test_layout ();
  test_reformat_data ();
  test_readonly ();
  test_control ();
  test_threads ();
  test_kill ();
  char cmd[300];
  snprintf (cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system (cmd) != 0)
    diag ("could not remove %s", dir);
  return done_testing ();
}
