/* SPDX-License-Identifier: BSD-3-Clause */
/* The write log: what the writer writes, the reader reads back, in order,
 * and a damaged log gets one clear error naming the entry and byte. */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sect4k/wlog.h"
#include "tap.h"

static char path[256];

static int
contains (const char *s, const char *want)
{
  if (strstr (s, want))
    return 1;
  diag ("got: %s", s);
  diag ("want it to contain: %s", want);
  return 0;
}

/* Opens path and expects the next() error of entry n to contain want. */
static void
expect_bad_entry (const char *what, unsigned flags, const char *want)
{
  struct s4k_wlog_reader *r;
  struct s4k_wlog_entry e;
  char err[512] = "";
  int n = -2;
  if (s4k_wlog_open (&r, path, flags, err, sizeof err) == 0) {
    while ((n = s4k_wlog_next (r, &e, err, sizeof err)) == 1)
      ;
    s4k_wlog_close (r);
  }
  ok (n == -1 && contains (err, want), "%s: %s", what, want);
}

static void
patch (off_t off, const void *p, size_t n)
{
  int fd = open (path, O_WRONLY);
  if (fd == -1 || pwrite (fd, p, n, off) != (ssize_t) n)
    bail ("patch %s", path);
  close (fd);
}

static void
truncate_to (off_t len)
{
  if (truncate (path, len) == -1)
    bail ("truncate %s", path);
}

static off_t
file_size (void)
{
  int fd = open (path, O_RDONLY);
  off_t n = lseek (fd, 0, SEEK_END);
  close (fd);
  return n;
}

int
main (void)
{
  const char *tmp = getenv ("TMPDIR") ? getenv ("TMPDIR") : "/tmp";
  snprintf (path, sizeof path, "%s/wlog-unit.%ld", tmp, (long) getpid ());
  char err[512];
  struct s4k_geometry g = { 1 << 20, 512, 4096, 3584 };
  struct s4k_wlog *w;

  ok (s4k_wlog_create (&w, "/nonexistent/dir/log", &g, NULL, err,
                       sizeof err) == -1 &&
      contains (err, "write-log=/nonexistent/dir/log: cannot create"),
      "an unwritable path: one clear error");

  if (s4k_wlog_create (&w, path, &g, "disk1", err, sizeof err))
    bail ("%s", err);
  char a[4096], b[1024];
  memset (a, 'a', sizeof a);
  memset (b, 'b', sizeof b);
  ok (s4k_wlog_append (w, 0, 8192, sizeof a, a) == 0, "a write");
  ok (s4k_wlog_append (w, S4K_WLOG_FUA | S4K_WLOG_ATOMIC, 512, sizeof b,
                       b) == 0, "an atomic FUA write");
  ok (s4k_wlog_append (w, S4K_WLOG_ZERO, 65536, 1 << 16, NULL) == 0,
      "a zero");
  ok (s4k_wlog_append (w, S4K_WLOG_DISCARD, 1 << 19, 1 << 18, NULL) == 0,
      "a trim");
  ok (s4k_wlog_flush (w) == 0, "a flush");
  ok (s4k_wlog_mark (w, "after-flush") == 0, "a mark");
  ok (s4k_wlog_mark (w, "") == -EINVAL, "an empty mark is refused");
  ok (s4k_wlog_append (w, 0, 100, 512, a) == -EINVAL,
      "an entry off logical sectors is refused");
  ok (s4k_wlog_append (w, S4K_WLOG_ZERO, 0, 4096, NULL) == 0,
      "a trailing zero (a hole at the end of the file)");
  is_u64 (s4k_wlog_entries (w), 8, "entries counted, geometry included");
  ok (s4k_wlog_free (w) == 0, "closed");
  is_u64 (file_size (), 512 + 512 + (512 + 4096) + (512 + 1024) +
          (512 + 65536) + 512 + 512 + 512 + (512 + 4096),
          "the file is as long as its entries (zeroes: holes)");

  struct s4k_wlog_reader *r;
  if (s4k_wlog_open (&r, path, 0, err, sizeof err))
    bail ("%s", err);
  is_u64 (s4k_wlog_nr_entries (r), 8, "super block: nr_entries");
  is_u64 (s4k_wlog_sectorsize (r), 512, "super block: sectorsize 512");
  const struct s4k_wlog_info *info = s4k_wlog_info (r);
  ok (info->known && info->geom.size == g.size && info->geom.logical == 512 &&
      info->geom.physical == 4096 && info->geom.alignment == 3584 &&
      strcmp (info->export_name, "disk1") == 0,
      "the geometry entry gives geometry and export");
  struct s4k_wlog_entry e;
  static const struct { uint64_t flags, off, len; char byte; } want[] = {
    { S4K_WLOG_MARK, 0, 0, 0 },   /* exactly MARK, as replay-log asks */
    { 0, 8192, 4096, 'a' },
    { S4K_WLOG_FUA | S4K_WLOG_ATOMIC, 512, 1024, 'b' },
    { S4K_WLOG_ZERO, 65536, 65536, 0 },
    { S4K_WLOG_DISCARD, 1 << 19, 1 << 18, 0 },
    { S4K_WLOG_FLUSH, 0, 0, 0 },
    { S4K_WLOG_MARK, 0, 0, 0 },
    { S4K_WLOG_ZERO, 0, 4096, 0 },
  };
  for (unsigned i = 0; i < sizeof want / sizeof want[0]; i++) {
    int n = s4k_wlog_next (r, &e, err, sizeof err);
    int good = n == 1 && e.index == i && e.flags == want[i].flags &&
               e.off == want[i].off && e.len == want[i].len &&
               e.sector * 512 == e.off && e.nr_sectors * 512 == e.len;
    if (good && (want[i].byte || (e.flags & S4K_WLOG_ZERO))) {
      const char *d = e.data;
      for (uint64_t j = 0; good && j < e.len; j++)
        good = d && d[j] == want[i].byte;
    } else if (good)
      good = e.data == NULL;
    if (good && i == 6)
      good = e.mark && strcmp (e.mark, "after-flush") == 0 && !e.geometry;
    if (good && i == 0)
      good = e.geometry && e.mark &&
             strcmp (e.mark, "sect4k-geometry size=1048576 logical=512 "
                     "physical=4096 alignment=3584 export=disk1") == 0;
    ok (good, "entry %u: flags %#" PRIx64 " [%" PRIu64 ", +%" PRIu64
        ") and its data", i, want[i].flags, want[i].off, want[i].len);
  }
  ok (s4k_wlog_next (r, &e, err, sizeof err) == 0, "then the end");
  s4k_wlog_rewind (r);
  ok (s4k_wlog_next (r, &e, err, sizeof err) == 1 && e.index == 0,
      "rewind starts again");
  s4k_wlog_close (r);

  /* A log written before the geometry entry was a plain mark: MARK and
   * the private bit, still read. */
  uint64_t old_flags = htole64 (S4K_WLOG_MARK | S4K_WLOG_GEOMETRY);
  patch (512 + 16, &old_flags, 8);
  if (s4k_wlog_open (&r, path, 0, err, sizeof err))
    bail ("%s", err);
  info = s4k_wlog_info (r);
  ok (info->known && info->geom.alignment == 3584 &&
      strcmp (info->export_name, "disk1") == 0 &&
      s4k_wlog_next (r, &e, err, sizeof err) == 1 && e.geometry,
      "a log with the old geometry entry (MARK|GEOMETRY) is read");
  s4k_wlog_close (r);
  uint64_t mark_flags = htole64 (S4K_WLOG_MARK);
  patch (512 + 16, &mark_flags, 8);

  /* A writer killed before its last count: entries past nr_entries are
   * read only on request, and an incomplete one ends the log quietly. */
  uint64_t two = htole64 (2);
  patch (16, &two, 8);
  if (s4k_wlog_open (&r, path, 0, err, sizeof err))
    bail ("%s", err);
  unsigned n = 0;
  while (s4k_wlog_next (r, &e, err, sizeof err) == 1)
    n++;
  s4k_wlog_close (r);
  is_u64 (n, 2, "nr_entries 2: two entries");
  const off_t full = file_size ();
  truncate_to (full - 100);     /* the last zero's data, cut */
  if (s4k_wlog_open (&r, path, S4K_WLOG_READ_TAIL, err, sizeof err))
    bail ("%s", err);
  n = 0;
  int last;
  while ((last = s4k_wlog_next (r, &e, err, sizeof err)) == 1)
    n += e.past_count;
  s4k_wlog_close (r);
  ok (last == 0 && n == 5, "READ_TAIL: the five whole entries past the "
      "count (an atomic write first), the cut one dropped quietly (got %u)",
      n);

  /* Truncated inside the counted entries: an error naming the entry. */
  uint64_t eight = htole64 (8);
  patch (16, &eight, 8);
  expect_bad_entry ("truncated data", 0, "entry 7 at byte 74752: truncated");
  truncate_to (1024 + 100);
  expect_bad_entry ("truncated header", 0, "entry 1 at byte 1024: truncated: "
                    "the header needs bytes up to 1536, the log has 1124");

  /* Corrupt magic, version, sector size. */
  truncate_to (full);
  patch (0, "XXXXXXXX", 8);
  ok (s4k_wlog_open (&r, path, 0, err, sizeof err) == -1 &&
      contains (err, "not a write log: magic 0x5858585858585858"),
      "a corrupt magic: one clear error");
  uint64_t magic = htole64 (S4K_WLOG_MAGIC), v2 = htole64 (2);
  patch (0, &magic, 8);
  patch (8, &v2, 8);
  ok (s4k_wlog_open (&r, path, 0, err, sizeof err) == -1 &&
      contains (err, "version 2"), "an unknown version");
  uint64_t v1 = htole64 (1);
  patch (8, &v1, 8);
  uint32_t ss = htole32 (1000);
  patch (24, &ss, 4);
  ok (s4k_wlog_open (&r, path, 0, err, sizeof err) == -1 &&
      contains (err, "sector size 1000"), "a bad sector size");
  ss = htole32 (512);
  patch (24, &ss, 4);

  /* An entry past the end of the device its geometry entry names. */
  uint64_t far = htole64 (g.size / 512 - 4);
  patch (1024, &far, 8);        /* entry 1: 8 sectors from here */
  expect_bad_entry ("past the device", 0, "entry 1 at byte 1024: bytes "
                    "[1046528, 1050624) are past the end of the device "
                    "(size 1048576)");
  uint64_t huge = htole64 (UINT64_MAX / 256);
  patch (1024, &huge, 8);
  expect_bad_entry ("an overflowing sector", 0, "entry 1 at byte 1024: "
                    "sector");
  far = htole64 (16);
  patch (1024, &far, 8);
  uint64_t long_mark = htole64 (600);
  patch (512 + 24, &long_mark, 8);
  ok (s4k_wlog_open (&r, path, 0, err, sizeof err) == -1 &&
      contains (err, "entry 0 at byte 512: a mark of 600 bytes does not fit"),
      "a mark longer than its block");
  static const char bad_geom[] = "sect4k-geometry size=x";
  uint64_t bad_len = htole64 (sizeof bad_geom - 1);
  patch (512 + 24, &bad_len, 8);
  patch (512 + 32, bad_geom, sizeof bad_geom);
  ok (s4k_wlog_open (&r, path, 0, err, sizeof err) == -1 &&
      contains (err, "geometry entry that does not parse"),
      "a geometry entry that does not parse");

  /* The first mark of a log that is not ours (the kernel's) is a mark. */
  static const char other[] = "mkfs-done";
  uint64_t other_len = htole64 (sizeof other - 1);
  patch (512 + 24, &other_len, 8);
  patch (512 + 32, other, sizeof other);
  int opened = s4k_wlog_open (&r, path, 0, err, sizeof err) == 0;
  ok (opened && !s4k_wlog_info (r)->known &&
      s4k_wlog_next (r, &e, err, sizeof err) == 1 && !e.geometry &&
      strcmp (e.mark, other) == 0,
      "a first mark of another name is a user's mark");
  if (opened)
    s4k_wlog_close (r);
  else
    diag ("%s", err);

  /* 4Kn: the log's unit is the device's logical sector, as the kernel's
   * sectorsize is its device's logical block size. */
  struct s4k_geometry g4 = { 1 << 20, 4096, 4096, 0 };
  if (s4k_wlog_create (&w, path, &g4, NULL, err, sizeof err))
    bail ("%s", err);
  ok (s4k_wlog_append (w, 0, 4096, 512, a) == -EINVAL &&
      s4k_wlog_append (w, 0, 512, 4096, a) == -EINVAL,
      "4Kn: an entry off 4096-byte sectors is refused");
  ok (s4k_wlog_append (w, S4K_WLOG_FUA, 8192, 4096, a) == 0, "4Kn: a write");
  ok (s4k_wlog_free (w) == 0, "4Kn: closed");
  is_u64 (file_size (), 4096 + 4096 + 4096 + 4096,
          "4Kn: super block, geometry, header and data: a sector each");
  if (s4k_wlog_open (&r, path, 0, err, sizeof err))
    bail ("%s", err);
  ok (s4k_wlog_sectorsize (r) == 4096 &&
      s4k_wlog_next (r, &e, err, sizeof err) == 1 && e.geometry &&
      s4k_wlog_next (r, &e, err, sizeof err) == 1 && e.sector == 2 &&
      e.nr_sectors == 1 && e.off == 8192 && e.len == 4096 &&
      memcmp (e.data, a, 4096) == 0,
      "4Kn: sectorsize 4096, the write at sector 2 of 4096 bytes");
  s4k_wlog_close (r);

  truncate_to (10);
  ok (s4k_wlog_open (&r, path, 0, err, sizeof err) == -1 &&
      contains (err, "shorter than a super block"), "a 10-byte file");
  unlink (path);
  return done_testing ();
}
