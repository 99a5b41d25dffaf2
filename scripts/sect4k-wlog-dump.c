/* SPDX-License-Identifier: BSD-3-Clause */
/* sect4k-wlog-dump LOG [--summary] [--tail]: the entries of a write log
 * (sect4k's write-log= or the kernel's dm-log-writes), one a line, with
 * the library's reader; or with --summary one line of counts.  Exit 1
 * with one line on stderr for a damaged log. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sect4k/wlog.h"

static void
print_flags (uint64_t f)
{
  static const struct { uint64_t bit; const char *name; } names[] = {
    { S4K_WLOG_FLUSH, "flush" }, { S4K_WLOG_FUA, "fua" },
    { S4K_WLOG_DISCARD, "discard" }, { S4K_WLOG_MARK, "mark" },
    { S4K_WLOG_METADATA, "metadata" }, { S4K_WLOG_ZERO, "zero" },
    { S4K_WLOG_GEOMETRY, "geometry" }, { S4K_WLOG_ATOMIC, "atomic" },
  };
  const char *sep = "";
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (f & names[i].bit) {
      printf ("%s%s", sep, names[i].name);
      sep = ",";
      f &= ~names[i].bit;
    }
  if (f)
    printf ("%s%#" PRIx64, sep, f);
  else if (!*sep)
    printf ("write");
}

static const char usage[] =
  "usage: sect4k-wlog-dump LOG [--summary] [--tail]\n";

int
main (int argc, char **argv)
{
  const char *path = NULL;
  bool summary = false;
  unsigned flags = 0;
  for (int i = 1; i < argc; i++)
    if (strcmp (argv[i], "--summary") == 0)
      summary = true;
    else if (strcmp (argv[i], "--tail") == 0)
      flags |= S4K_WLOG_READ_TAIL;
    else if (strcmp (argv[i], "--help") == 0 || strcmp (argv[i], "-h") == 0) {
      fputs (usage, stdout);
      return 0;
    }
    else if (argv[i][0] != '-' && !path)
      path = argv[i];
    else {
      fputs (usage, stderr);
      return 2;
    }
  if (!path) {
    fputs (usage, stderr);
    return 2;
  }
  char err[512];
  struct s4k_wlog_reader *r;
  if (s4k_wlog_open (&r, path, flags, err, sizeof err) == -1) {
    fprintf (stderr, "sect4k-wlog-dump: %s\n", err);
    return 1;
  }
  const struct s4k_wlog_info *info = s4k_wlog_info (r);
  uint64_t n = 0, writes = 0, zeros = 0, discards = 0, flushes = 0,
           fuas = 0, atomics = 0, marks = 0, bytes = 0, past = 0,
           zone_ops = 0;
  struct s4k_wlog_entry e;
  int got;
  if (!summary) {
    printf ("# nr_entries=%" PRIu64 " sectorsize=%" PRIu32,
            s4k_wlog_nr_entries (r), s4k_wlog_sectorsize (r));
    if (info->known)
      printf (" size=%" PRIu64 " logical=%" PRIu32 " physical=%" PRIu32
              " alignment=%" PRIu32 " export=%s", info->geom.size,
              info->geom.logical, info->geom.physical, info->geom.alignment,
              info->export_name);
    if (info->zone.model != S4K_ZONED_NONE)
      printf (" zoned=%s zone-size=%" PRIu64 " zone-conventional=%" PRIu32,
              info->zone.model == S4K_ZONED_HOST_MANAGED ? "host-managed"
                                                         : "host-aware",
              info->zone.size, info->zone.conventional);
    printf ("\n");
  }
  while ((got = s4k_wlog_next (r, &e, err, sizeof err)) == 1) {
    n++;
    past += e.past_count;
    if (e.flags & S4K_WLOG_MARK)
      marks++, zone_ops += e.zone_op != 0;
    else if (e.flags & S4K_WLOG_DISCARD)
      discards++;
    else if (e.len) {
      writes++;
      zeros += (e.flags & S4K_WLOG_ZERO) != 0;
      atomics += (e.flags & S4K_WLOG_ATOMIC) != 0;
      bytes += e.len;
    }
    flushes += (e.flags & S4K_WLOG_FLUSH) != 0;
    fuas += (e.flags & S4K_WLOG_FUA) != 0;
    if (summary)
      continue;
    printf ("%" PRIu64 " byte=%" PRIu64 " ", e.index, e.pos);
    print_flags (e.flags);
    if (e.mark)
      printf (" \"%s\"", e.mark);
    /* A zoned device's entries, as the reader took them. */
    if (e.zones)
      printf (" zone-layout");
    else if (e.zone_op && e.zone_all)
      printf (" zone-%s all", s4k_wlog_zone_op_name (e.zone_op));
    else if (e.zone_op)
      printf (" zone-%s lba=%" PRIu64, s4k_wlog_zone_op_name (e.zone_op),
              e.zone_lba);
    else if (e.len)
      printf (" off=%" PRIu64 " len=%" PRIu64, e.off, e.len);
    printf ("%s\n", e.past_count ? " (past nr_entries)" : "");
  }
  if (got == -1) {
    fprintf (stderr, "sect4k-wlog-dump: %s\n", err);
    s4k_wlog_close (r);
    return 1;
  }
  if (summary)
    printf ("entries=%" PRIu64 " writes=%" PRIu64 " zeros=%" PRIu64
            " discards=%" PRIu64 " flushes=%" PRIu64 " fua=%" PRIu64
            " atomic=%" PRIu64 " marks=%" PRIu64 " bytes=%" PRIu64
            " past_count=%" PRIu64 " geometry=%s zone_ops=%" PRIu64
            " zoned=%s\n", n, writes, zeros,
            discards, flushes, fuas, atomics, marks, bytes, past,
            info->known ? "yes" : "no", zone_ops,
            info->zone.model == S4K_ZONED_HOST_MANAGED ? "host-managed"
            : info->zone.model == S4K_ZONED_HOST_AWARE ? "host-aware"
            : "no");
  s4k_wlog_close (r);
  return 0;
}
