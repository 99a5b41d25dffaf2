/* SPDX-License-Identifier: BSD-3-Clause */
/* The write log of a zoned device (issue 33, docs/write-log.md "Zones"):
 * entry 1 holds the zone layout, every zone operation that succeeded is
 * a mark the reader parses (one zone or ALL), a reset's data follows as
 * ZERO entries of [start, old write pointer), a refused operation logs
 * nothing, and replaying the log gives the device's bytes.
 *
 * With arguments it records a log for tests/crash/zoned.t instead:
 *   unit-zonelog record LOG IMAGE KEYS OP...
 * runs OPs on a device of KEYS (space-separated, write-log=LOG added)
 * and writes the device's bytes at the end to IMAGE.  OP: w:LBA:N[:fua]
 * (N blocks, each 16-byte pattern (op number + 1, LBA) repeated, as
 * tests/crash/superset.t writes), z:LBA:N[:fua], trim:LBA:N, f (flush),
 * mark:NAME,
 * and reset|finish|open|close:LBA|all.  And for tests/crash/
 * zoned-superset.t:
 *   unit-zonelog cuts LOG DIR KEYS RUNS OP...
 * runs OPs RUNS times, each on a new device of KEYS with seed=BASE+run
 * (KEYS hold write-cache=true and seed=BASE), the first with
 * write-log=LOG, then cuts the power (s4k_dev_power_cut) and writes the
 * device's bytes to DIR/RUN, the LBAs a read fails with EIO to
 * DIR/RUN.eio (one "A-A" line each, as sect4k-crash --output does). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sect4k/sect4k.h"
#include "sect4k/wlog.h"
#include "sect4k/zone.h"
#include "tap.h"
#include "devrig.h"

static const char *const opnames[] =
  { [S4K_ZOP_CLOSE] = "close", [S4K_ZOP_FINISH] = "finish",
    [S4K_ZOP_OPEN] = "open", [S4K_ZOP_RESET] = "reset" };

/* The device's bytes, a zone at a time (host-managed: a read does not
 * cross from a conventional zone into a sequential one). */
static char *
image (struct s4k_dev *d, uint64_t size)
{
  struct s4k_zones_info zi;
  s4k_zones_info (s4k_dev_zones (d), &zi);
  const uint64_t zb = zi.zone_lbas * s4k_dev_geometry (d)->logical;
  char *img = malloc (size);
  for (uint64_t off = 0; img && off < size; off += zb)
    if (s4k_read (d, img + off, size - off < zb ? size - off : zb, off))
      bail ("reading the device at %llu", (unsigned long long) off);
  return img;
}

/* One OP (above) as number n: 0 or the request's error. */
static int
run_op (struct s4k_dev *d, uint32_t L, unsigned n, const char *op)
{
  char kind[16] = "";
  unsigned long long lba = 0, cnt = 0;
  char rest[64] = "";
  if (strcmp (op, "f") == 0)
    return s4k_flush (d);
  if (strncmp (op, "mark:", 5) == 0)
    return s4k_dev_wlog_mark (d, op + 5);
  if (sscanf (op, "%15[a-z]:%llu:%llu:%63s", kind, &lba, &cnt, rest) >= 3 &&
      (strcmp (kind, "w") == 0 || strcmp (kind, "z") == 0 ||
       strcmp (kind, "trim") == 0)) {
    const unsigned flags = strcmp (rest, "fua") == 0 ? S4K_FUA : 0;
    if (kind[0] == 't')
      return s4k_trim (d, cnt * L, lba * L, flags);
    if (kind[0] == 'z')
      return s4k_zero (d, cnt * L, lba * L, flags);
    char *buf = malloc (cnt * L);
    for (uint64_t i = 0; i < cnt * L; i += 16) {
      const uint64_t v[2] = { n + 1, lba + i / L };
      memcpy (buf + i, v, 16);
    }
    int r = s4k_write (d, buf, cnt * L, lba * L, flags);
    free (buf);
    return r;
  }
  const char *colon = strchr (op, ':');
  for (unsigned z = 0; colon && z < sizeof opnames / sizeof opnames[0]; z++)
    if (opnames[z] && strncmp (op, opnames[z], colon - op) == 0 &&
        strlen (opnames[z]) == (size_t) (colon - op))
      return s4k_dev_zone_op (d, z, strtoull (colon + 1, NULL, 10),
                              strcmp (colon + 1, "all") == 0);
  bail ("%s: not an operation", op);
}

static int
record (int argc, char **argv)
{
  if (argc < 5)
    bail ("usage: unit-zonelog record LOG IMAGE KEYS OP...");
  char keys[1024];
  snprintf (keys, sizeof keys, "%s write-log=%s", argv[4], argv[2]);
  struct s4k_dev *d = open_dev (keys);
  const struct s4k_geometry *g = s4k_dev_geometry (d);
  for (int i = 5; i < argc; i++) {
    int r = run_op (d, g->logical, i - 5, argv[i]);
    if (r)
      bail ("%s: %s", argv[i], s4k_strerror (-r));
  }
  char *img = image (d, g->size);
  FILE *fp = fopen (argv[3], "wb");
  if (!fp || fwrite (img, 1, g->size, fp) != g->size || fclose (fp))
    bail ("%s: cannot write", argv[3]);
  free (img);
  s4k_dev_close (d);
  return 0;
}

static int
cuts (int argc, char **argv)
{
  if (argc < 6)
    bail ("usage: unit-zonelog cuts LOG DIR KEYS RUNS OP...");
  const char *sp = strstr (argv[4], "seed=");
  const unsigned long base = sp ? strtoul (sp + 5, NULL, 10) : 0;
  const int runs = atoi (argv[5]);
  for (int run = 0; run < runs; run++) {
    char keys[1400], path[1100];
    /* The last seed= wins: each run's outcomes its own. */
    snprintf (keys, sizeof keys, "%s seed=%lu%s%s", argv[4], base + run,
              run ? "" : " write-log=", run ? "" : argv[2]);
    struct s4k_dev *d = open_dev (keys);
    const struct s4k_geometry *g = s4k_dev_geometry (d);
    for (int i = 6; i < argc; i++) {
      int r = run_op (d, g->logical, i - 6, argv[i]);
      if (r)
        bail ("%s: %s", argv[i], s4k_strerror (-r));
    }
    char *rep = NULL;
    if (s4k_dev_power_cut (d, -1, &rep))
      bail ("power cut");
    free (rep);
    char *img = calloc (1, g->size);
    snprintf (path, sizeof path, "%s/%d.eio", argv[3], run);
    FILE *eio = fopen (path, "w");
    if (!img || !eio)
      bail ("%s: cannot write", path);
    for (uint64_t lba = 0; lba < g->size / g->logical; lba++)
      if (s4k_read (d, img + lba * g->logical, g->logical,
                    lba * g->logical) != 0) {
        memset (img + lba * g->logical, 0, g->logical);
        fprintf (eio, "%llu-%llu\n", (unsigned long long) lba,
                 (unsigned long long) lba);
      }
    snprintf (path, sizeof path, "%s/%d", argv[3], run);
    FILE *fp = fopen (path, "wb");
    if (fclose (eio) || !fp || fwrite (img, 1, g->size, fp) != g->size ||
        fclose (fp))
      bail ("%s: cannot write", path);
    free (img);
    s4k_dev_close (d);
  }
  return 0;
}

int
main (int argc, char **argv)
{
  if (argc > 1 && strcmp (argv[1], "record") == 0)
    return record (argc, argv);
  if (argc > 1 && strcmp (argv[1], "cuts") == 0)
    return cuts (argc, argv);
  const char *tmp = getenv ("TMPDIR") ? getenv ("TMPDIR") : "/tmp";
  char path[256], keys[512], err[512];
  snprintf (path, sizeof path, "%s/zonelog-unit.%ld", tmp, (long) getpid ());
  /* 1 MiB of 64 KiB zones (128 LBAs of 512 bytes), the first
   * conventional. */
  const uint64_t SIZE = 1 << 20;
  snprintf (keys, sizeof keys, "size=1M model=512e zoned=host-managed "
            "zone-size=64K zone-conventional=1 write-log=%s", path);
  struct s4k_dev *d = open_dev (keys);
  static const char *const ops[] = {
    "w:0:8", "w:128:16", "w:144:8", "w:256:8:fua", "z:264:8",
    "open:384", "close:384", "finish:512", "mark:middle",
    "reset:128", "w:128:8", "f", "open:all", "close:all", "reset:all",
    "finish:all",
  };
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    int r = run_op (d, 512, i, ops[i]);
    if (r)
      bail ("%s: %s", ops[i], s4k_strerror (-r));
  }
  ok (s4k_zone_err_of (s4k_dev_zone_op (d, S4K_ZOP_RESET, 0, false)) ==
      S4K_ZERR_NOT_WRITE_POINTER_ZONE &&
      s4k_zone_err_of (s4k_dev_zone_op (d, S4K_ZOP_FINISH, 130, false)) ==
      S4K_ZERR_NOT_ZONE_START, "refused zone operations");
  char *img = image (d, SIZE);
  s4k_dev_close (d);

  struct s4k_wlog_reader *r;
  if (s4k_wlog_open (&r, path, 0, err, sizeof err))
    bail ("%s", err);
  const struct s4k_wlog_info *info = s4k_wlog_info (r);
  ok (info->known && info->zone.model == S4K_ZONED_HOST_MANAGED &&
      info->zone.size == 65536 && info->zone.conventional == 1,
      "the reader has the zone layout");
  /* What each entry is, one word, and the replayed image. */
  char *replay = calloc (1, SIZE), seen[1024] = "";
  struct s4k_wlog_entry e;
  int n;
  while ((n = s4k_wlog_next (r, &e, err, sizeof err)) == 1) {
    char w[96];
    if (e.geometry)
      snprintf (w, sizeof w, "geometry");
    else if (e.zones)
      snprintf (w, sizeof w, "zones");
    else if (e.zone_op && e.zone_all)
      snprintf (w, sizeof w, "%s-all", opnames[e.zone_op]);
    else if (e.zone_op)
      snprintf (w, sizeof w, "%s@%llu", opnames[e.zone_op],
                (unsigned long long) e.zone_lba);
    else if (e.mark)
      snprintf (w, sizeof w, "mark:%s", e.mark);
    else if (e.flags & S4K_WLOG_FLUSH)
      snprintf (w, sizeof w, "flush");
    else
      snprintf (w, sizeof w, "%s%s%llu+%llu",
                e.flags & S4K_WLOG_ZERO ? "z" : "w",
                e.flags & S4K_WLOG_FUA ? "f" : "",
                (unsigned long long) e.off / 512,
                (unsigned long long) e.len / 512);
    snprintf (seen + strlen (seen), sizeof seen - strlen (seen), "%s%s",
              *seen ? " " : "", w);
    if (e.len && !(e.flags & S4K_WLOG_DISCARD)) {
      if (e.data)
        memcpy (replay + e.off, e.data, e.len);
      else
        memset (replay + e.off, 0, e.len);
    }
  }
  ok (n == 0, "the log reads to its end: %s", n ? err : "");
  /* Zone 1 held 24 blocks when reset, zone 2 sixteen (the FUA write
   * and the zero), zone 1 eight again, zone 4 was finished: RESET ALL
   * zeroes zones 1 and 2 (zone 4, finished, is full: all of it);
   * FINISH ALL changes no data. */
  const char *want = "geometry zones w0+8 w128+16 w144+8 wf256+8 z264+8 "
    "open@384 close@384 finish@512 mark:middle reset@128 z128+24 w128+8 "
    "flush open-all close-all reset-all z128+8 z256+16 z512+128 finish-all";
  if (!ok (strcmp (seen, want) == 0, "the entries: the layout, the zone "
           "operations, a reset's zeroes"))
    diag ("got  %s\n# want %s", seen, want);
  ok (memcmp (replay, img, SIZE) == 0,
      "replaying the log gives the device's bytes");
  s4k_wlog_close (r);
  free (replay);
  free (img);

  /* Entries that do not parse: one line naming the entry. */
  static const struct { const char *mark, *err; } bad[] = {
    { "sect4k-zones zoned=smr zone-size=65536 zone-conventional=1",
      "entry 1 at byte 1024: a zone layout entry that does not parse: "
      "\"sect4k-zones zoned=smr zone-size=65536 zone-conventional=1\": "
      "zoned=smr: must be host-managed, host-aware or none" },
    { "sect4k-zones zoned=host-managed zone-size=3000",
      "zone-size=3000: not a power of two" },
    { "sect4k-zones zoned=host-managed zone-size=4M",
      "zone-size=4M: larger than the device (size=1048576)" },
    { "sect4k-zone rewind lba=128", "entry 1 at byte 1024: a zone "
      "operation entry that does not parse: \"sect4k-zone rewind lba=128\"" },
    { "sect4k-zone reset lba=", "does not parse" },
  };
  struct s4k_geometry g = { SIZE, 512, 4096, 0 };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    struct s4k_wlog *w;
    if (s4k_wlog_create (&w, path, &g, NULL, err, sizeof err) ||
        s4k_wlog_mark (w, bad[i].mark) || s4k_wlog_free (w))
      bail ("writing %s", path);
    int got = s4k_wlog_open (&r, path, 0, err, sizeof err);
    if (got == 0) {
      got = s4k_wlog_next (r, &e, err, sizeof err) == 1 &&
            s4k_wlog_next (r, &e, err, sizeof err) == -1 ? -1 : 0;
      s4k_wlog_close (r);
    }
    ok (got == -1 && strstr (err, bad[i].err) && !strchr (err, '\n'),
        "refused: %s", err);
  }
  unlink (path);
  done_testing ();
}
