/* SPDX-License-Identifier: BSD-3-Clause */
/* s4k-zbdconf DEV: a zone-conformance sequence through libzbd (the zoned
 * block device library behind zbd-utils), run in the test guest on the
 * sect4k zoned disk and on scsi_debug with the same zones
 * (guest/zoned.sh), whose outputs are compared line by line.
 *
 * One line per step: what was done, its outcome ("ok" or the errno's
 * name, as the kernel returned it), and after "|" the sequential zones
 * that are not empty as INDEX=COND+WP (the write pointer in physical
 * blocks from the zone's start); reads say D, 0 or X per physical block
 * (the data written there, zeroes, other data).  Nothing device-specific
 * (vendor, device name) is printed.  Zone N is the N-th sequential zone
 * (the conventional zones come first, as on both drives; the last of
 * them is -1).  Exit 0 once the sequence ran (its outcomes are the
 * output), 1 if it could not start.  Userspace has no way to issue a
 * zone append to a block device, so for it only whether the queue
 * offers it (zone_append_max_bytes) is said. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <libzbd/zbd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int fd;
static struct zbd_info info;
static unsigned int nconv;          /* conventional zones, first */
static unsigned long long zs;       /* zone size in bytes */
static unsigned int pb;             /* physical block */
static unsigned char *wbuf, *rbuf;  /* O_DIRECT buffers, a zone each */

static const char *ename (int e)
{
  const char *n = strerrorname_np (e);
  return n ? n : "E?";
}

static const char *cond_name (unsigned int c)
{
  switch (c) {
  case ZBD_ZONE_COND_NOT_WP: return "nw";
  case ZBD_ZONE_COND_EMPTY: return "em";
  case ZBD_ZONE_COND_IMP_OPEN: return "oi";
  case ZBD_ZONE_COND_EXP_OPEN: return "oe";
  case ZBD_ZONE_COND_CLOSED: return "cl";
  case ZBD_ZONE_COND_FULL: return "fu";
  case ZBD_ZONE_COND_READONLY: return "ro";
  case ZBD_ZONE_COND_OFFLINE: return "ol";
  default: return "??";
  }
}

/* Byte offset of sequential zone N. */
static off_t Z (unsigned int n) { return (off_t) (nconv + n) * zs; }

/* " | 1=oi+3 4=fu+1024": the sequential zones that are not empty. */
static void state (void)
{
  struct zbd_zone *zones = calloc (info.nr_zones, sizeof *zones);
  unsigned int n = info.nr_zones, i;
  int r = zbd_report_zones (fd, 0, 0, ZBD_RO_ALL, zones, &n);
  if (r != 0) {
    printf (" | report: %s\n", ename (-r));
    free (zones);
    return;
  }
  printf (" |");
  for (i = 0; i < n; i++) {
    struct zbd_zone *z = &zones[i];
    if (zbd_zone_cnv (z) || zbd_zone_empty (z))
      continue;
    printf (" %u=%s+%llu", i - nconv, cond_name (z->cond), (z->wp - z->start) / pb);
    if (z->flags)
      printf ("/%s%s", z->flags & ZBD_ZONE_RWP_RECOMMENDED ? "r" : "",
              z->flags & ZBD_ZONE_NON_SEQ_RESOURCES ? "n" : "");
  }
  printf ("\n");
  free (zones);
}

static void fill (unsigned char *p, size_t len, off_t at)
{
  size_t i;
  for (i = 0; i < len; i++)
    p[i] = (unsigned char) ((at + i) * 7 / 3 + 1);   /* never all zero */
}

/* pwrite LEN bytes at byte AT of sequential zone N (the line says it in
 * physical blocks: "+OFF xCOUNT"). */
static void w_at (const char *what, unsigned int n, long long at, size_t len)
{
  off_t o = Z (n) + at;
  ssize_t r;
  fill (wbuf, len, o);
  r = pwrite (fd, wbuf, len, o);
  printf ("%s: write zone %u ", what, n);
  if (at % pb || len % pb) printf ("+%lld bytes x%zu bytes: ", at, len);
  else printf ("+%lld x%zu: ", at / (long long) pb, len / pb);
  if (r < 0) printf ("%s", ename (errno));
  else if ((size_t) r == len) printf ("ok");
  else printf ("short %zd", r);
  state ();
}
/* BLOCKS physical blocks at sequential zone N + OFF blocks. */
static void w (const char *what, unsigned int n, long long off, size_t blocks)
{
  w_at (what, n, off * pb, blocks * pb);
}

/* pread and say what came, a letter per physical block: D what w()
 * wrote there, 0 zeroes, X other data. */
static void rd (const char *what, off_t at, size_t blocks)
{
  size_t len = blocks * pb, b, i;
  ssize_t r = pread (fd, rbuf, len, at);
  printf ("%s: ", what);
  if (r < 0) printf ("%s", ename (errno));
  else if ((size_t) r != len) printf ("short %zd", r);
  else {
    printf ("ok, ");
    fill (wbuf, len, at);
    for (b = 0; b < blocks; b++) {
      unsigned char *p = rbuf + b * pb;
      for (i = 0; i < pb && p[i] == 0; i++)
        ;
      putchar (i == pb ? '0' : memcmp (p, wbuf + b * pb, pb) == 0 ? 'D' : 'X');
    }
  }
  state ();
}

static void op (const char *what, enum zbd_zone_op o, off_t ofst, off_t len)
{
  static const char *names[] = { "", "reset", "open", "close", "finish" };
  int r, e;
  errno = 0;
  r = zbd_zones_operation (fd, o, ofst, len);
  e = errno;
  printf ("%s: %s: ", what, names[o]);
  if (r == 0) printf ("ok");
  else printf ("%s", e ? ename (e) : "failed");
  state ();
}
/* One sequential zone N. */
static void zop (const char *what, enum zbd_zone_op o, unsigned int n)
{
  op (what, o, Z (n), zs);
}

/* Each reporting option libzbd has: the count (zbd_report_nr_zones) and
 * which zones (zbd_list_zones), over the whole device. */
static void reports (const char *when)
{
  static const struct { enum zbd_report_option ro; const char *name; } ros[] = {
    { ZBD_RO_ALL, "ALL" }, { ZBD_RO_EMPTY, "EMPTY" }, { ZBD_RO_IMP_OPEN, "IMP_OPEN" },
    { ZBD_RO_EXP_OPEN, "EXP_OPEN" }, { ZBD_RO_CLOSED, "CLOSED" }, { ZBD_RO_FULL, "FULL" },
    { ZBD_RO_RDONLY, "READONLY" }, { ZBD_RO_OFFLINE, "OFFLINE" },
    { ZBD_RO_RWP_RECOMMENDED, "RWP_RECOMMENDED" }, { ZBD_RO_NON_SEQ, "NON_SEQ" },
    { ZBD_RO_NOT_WP, "NOT_WP" },
  };
  size_t k;
  for (k = 0; k < sizeof ros / sizeof ros[0]; k++) {
    unsigned int n = 0, m = 0, i;
    struct zbd_zone *zones = NULL;
    int r = zbd_report_nr_zones (fd, 0, 0, ros[k].ro, &n);
    int r2 = zbd_list_zones (fd, 0, 0, ros[k].ro, &zones, &m);
    printf ("%s: report %s: ", when, ros[k].name);
    if (r != 0 || r2 != 0) {
      printf ("%s\n", ename (-(r ? r : r2)));
      continue;
    }
    printf ("%u zones", n);
    if (m != n) printf (" (zbd_list_zones: %u)", m);
    for (i = 0; i < m; i++)
      printf ("%s%lld", i ? "," : " [", (long long) (zones[i].start / zs) - (long long) nconv);
    printf ("%s\n", m ? "]" : "");
    free (zones);
  }
}

/* Every zone in full, as zbd_report_zones gives it. */
static void zone_list (const char *when)
{
  struct zbd_zone *zones = calloc (info.nr_zones, sizeof *zones);
  unsigned int n = 0, i;
  int r;
  /* A part of the device: 1 byte inside zone 1 is zone 1. */
  n = 3;
  r = zbd_report_zones (fd, Z (1) + 4096, 1, ZBD_RO_ALL, zones, &n);
  printf ("%s: report from inside zone 1, 1 byte long, at most 3: ", when);
  if (r) printf ("%s\n", ename (-r));
  else {
    printf ("%u zones", n);
    for (i = 0; i < n; i++)
      printf (" %lld", (long long) (zones[i].start / zs) - (long long) nconv);
    printf ("\n");
  }
  n = 0;
  r = zbd_report_zones (fd, 0, 0, ZBD_RO_ALL, zones, &n);
  if (r) { printf ("%s: report: %s\n", when, ename (-r)); free (zones); return; }
  for (i = 0; i < n; i++) {
    struct zbd_zone *z = &zones[i];
    printf ("%s: zone %d: %s %s start %llu len %llu cap %llu wp +%llu flags %u\n", when,
            (int) i - (int) nconv, zbd_zone_type_str (z, true), cond_name (z->cond),
            z->start, z->len, z->capacity, zbd_zone_cnv (z) ? 0 : z->wp - z->start, z->flags);
  }
  free (zones);
}

int main (int argc, char **argv)
{
  char path[256], *dev;
  FILE *f;
  unsigned long long append = 0;
  unsigned int i, mo;
  struct zbd_zone *zones;

  if (argc != 2) {
    fprintf (stderr, "usage: s4k-zbdconf DEVICE\n");
    return 2;
  }
  setvbuf (stdout, NULL, _IOLBF, 0);
  fd = zbd_open (argv[1], O_RDWR | O_DIRECT, &info);
  if (fd < 0) {
    /* libzbd refuses a device whose queue is not zoned (Linux 6.12 shows
     * a host-aware disk as a regular one): say which model sysfs has. */
    char model[32] = "?";
    dev = basename (argv[1]);
    snprintf (path, sizeof path, "/sys/block/%s/queue/zoned", dev);
    if ((f = fopen (path, "r"))) {
      if (fscanf (f, "%31s", model) != 1) strcpy (model, "?");
      fclose (f);
    }
    printf ("zbd_open: refused (queue/zoned %s, zbd_device_is_zoned %d)\n", model,
            zbd_device_is_zoned (argv[1]));
    return 0;
  }
  zs = info.zone_size;
  pb = info.pblock_size;
  if (posix_memalign ((void **) &wbuf, 4096, zs) || posix_memalign ((void **) &rbuf, 4096, zs)) {
    fprintf (stderr, "s4k-zbdconf: out of memory\n");
    return 1;
  }
  zones = calloc (info.nr_zones, sizeof *zones);
  i = info.nr_zones;
  if (zbd_report_zones (fd, 0, 0, ZBD_RO_ALL, zones, &i) != 0) {
    fprintf (stderr, "s4k-zbdconf: cannot report zones\n");
    return 1;
  }
  while (nconv < i && zbd_zone_cnv (&zones[nconv])) nconv++;
  free (zones);
  if (info.nr_zones < nconv + 12) {
    fprintf (stderr, "s4k-zbdconf: needs 12 sequential zones, the device has %u\n",
             info.nr_zones - nconv);
    return 1;
  }
  dev = basename (argv[1]);
  snprintf (path, sizeof path, "/sys/block/%s/queue/zone_append_max_bytes", dev);
  if ((f = fopen (path, "r"))) {
    if (fscanf (f, "%llu", &append) != 1) append = 0;
    fclose (f);
  }
  mo = info.max_nr_open_zones;
  printf ("info: %s, logical %u, physical %u, %llu sectors, %u zones of %u sectors,"
          " %u conventional, max open %u, max active %u\n",
          zbd_device_model_str (info.model, true), info.lblock_size, pb, info.nr_sectors,
          info.nr_zones, info.zone_sectors, nconv, mo, info.max_nr_active_zones);
  /* The value is compared by zoned.sh (6.1 bounds it by the transport). */
  printf ("zone append: %s\n", append ? "the queue offers it (zone_append_max_bytes > 0);"
          " no user interface issues it" : "not offered");

  /* From any state: every zone empty. */
  op ("reset all", ZBD_OP_RESET, 0, 0);
  reports ("empty");

  /* Writes at and off the write pointer, reads below and above it. */
  w ("at the pointer", 1, 0, 1);
  w ("at the pointer again", 1, 1, 2);
  w ("below the pointer", 1, 0, 1);
  w ("above the pointer", 1, 8, 1);
  /* On 512e: one logical block past the pointer, a physical block long. */
  w_at ("a logical block above the pointer", 1, 3 * pb + info.lblock_size, pb);
  rd ("read below the pointer", Z (1), 3);
  rd ("read above the pointer", Z (1) + 4 * pb, 2);
  rd ("read across the pointer", Z (1) + 2 * pb, 2);

  /* Across a zone boundary, at zone 2's pointer: the kernel splits it
   * at the zone boundary (chunk_sectors), each half at its pointer. */
  w ("fill zone 2 to its last block", 2, 0, zs / pb - 1);
  w ("across zones 2 and 3", 2, zs / pb - 1, 2);
  /* Across into a zone whose pointer is not at its start. */
  w ("zone 5 written", 5, 0, 1);
  w ("fill zone 4 to its last block", 4, 0, zs / pb - 1);
  w ("across zones 4 and 5 (5 not empty)", 4, zs / pb - 1, 2);
  /* Full zones refuse writes. */
  w ("to full zone 2", 2, 0, 1);
  zop ("finish zone 1", ZBD_OP_FINISH, 1);
  w ("to full (finished) zone 1 at its former pointer", 1, 3, 1);
  rd ("read a finished zone above its former pointer", Z (1) + 3 * pb, 1);

  /* Open limits: explicit opens up to the limit and past it, implicit
   * opens closing an implicitly open zone. */
  op ("reset all", ZBD_OP_RESET, 0, 0);
  printf ("max open %u\n", mo);
  if (mo >= 1 && mo + 6 <= info.nr_zones - nconv) {
    for (i = 0; i < mo; i++) w ("implicit open", 1 + i, 0, 1);
    w ("implicit open past the limit (a zone is implicitly closed)", 1 + mo, 0, 1);
    zop ("explicit open, past the implicit ones (one implicitly closed)", ZBD_OP_OPEN, 2 + mo);
    for (i = 1; i < mo; i++) zop ("explicit open", ZBD_OP_OPEN, 2 + mo + i);
    zop ("explicit open past the limit", ZBD_OP_OPEN, 2 + 2 * mo);
    w ("write to an empty zone, every open slot explicit", 3 + 2 * mo, 0, 1);
    w ("write to a closed zone, every open slot explicit", 1, 1, 1);
    w ("write to an explicitly open zone", 2 + mo, 0, 2);
    zop ("open an open zone", ZBD_OP_OPEN, 2 + mo);
    zop ("close an explicitly open zone with data", ZBD_OP_CLOSE, 2 + mo);
    zop ("close an explicitly open empty zone", ZBD_OP_CLOSE, 3 + mo);
    zop ("open a closed zone", ZBD_OP_OPEN, 2 + mo);
  } else {
    /* No limit (host-aware): opens and writes all pass. */
    for (i = 1; i <= 4; i++) zop ("explicit open", ZBD_OP_OPEN, i);
    w ("write to an empty zone", 5, 0, 1);
    w ("write to an explicitly open zone", 1, 0, 1);
    zop ("close an explicitly open zone with data", ZBD_OP_CLOSE, 1);
    w ("write above the pointer (non-sequential)", 6, 4, 1);
  }
  zop ("close an empty zone", ZBD_OP_CLOSE, 10);
  zop ("close a closed zone", ZBD_OP_CLOSE, 1);
  zop ("finish a closed zone", ZBD_OP_FINISH, 1);
  zop ("finish an empty zone", ZBD_OP_FINISH, 11);
  zop ("finish a full zone", ZBD_OP_FINISH, 11);
  op ("close two zones at once (zones 9-10)", ZBD_OP_CLOSE, Z (9), 2 * zs);
  w ("implicit open beside an explicit one", 8, 0, 1);
  reports ("mixed");
  zone_list ("mixed");
  zop ("reset a full zone", ZBD_OP_RESET, 11);
  zop ("reset an empty zone", ZBD_OP_RESET, 11);
  zop ("reset an open zone", ZBD_OP_RESET, 2 + (mo ? mo : 2));
  w ("at the pointer after a reset", 11, 0, 1);
  rd ("read a reset zone above the pointer", Z (11) + pb, 1);

  /* Conventional zones: written anywhere, no zone operations. */
  if (nconv) {
    off_t c = (off_t) (nconv - 1) * zs;
    ssize_t r;
    fill (wbuf, pb, c + 5 * pb);
    r = pwrite (fd, wbuf, pb, c + 5 * pb);
    printf ("conventional: write at +5: %s\n", r == (ssize_t) pb ? "ok" : ename (errno));
    fill (wbuf, 2 * pb, c + 2 * pb);
    r = pwrite (fd, wbuf, 2 * pb, c + 2 * pb);
    printf ("conventional: write at +2 x2 (behind it): %s\n", r == 2 * (ssize_t) pb ? "ok" : ename (errno));
    rd ("conventional: read back +2 x2", c + 2 * pb, 2);
    rd ("conventional: read back +5", c + 5 * pb, 1);
    w ("write across the conventional boundary into zone 0", 0, -1, 2);
    op ("conventional", ZBD_OP_RESET, c, zs);
    op ("conventional", ZBD_OP_OPEN, c, zs);
    op ("conventional", ZBD_OP_CLOSE, c, zs);
    op ("conventional", ZBD_OP_FINISH, c, zs);
  }
  op ("reset all", ZBD_OP_RESET, 0, 0);
  reports ("after reset all");
  zbd_close (fd);
  return 0;
}
