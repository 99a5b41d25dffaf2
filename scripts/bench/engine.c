/* SPDX-License-Identifier: BSD-3-Clause */
/* The engine alone, no nbdkit: N requests of one kind on a prefilled
 * 64 MiB 512e memory device (size= changes it), at pseudo-random
 * offsets aligned to the request's size (a 16 KiB request lies in one 16 KiB unit, so it is
 * atomic under atomic-write-max=16K).  scripts/bench/engine-ir runs it
 * under callgrind for N and 3N requests: the difference over 2N is the
 * engine's instructions per request.
 *
 * usage: bench-engine N write4k|read4k|rmw512|write16k|read16k|read64k|
 *        seq4k [KEY=VALUE...]
 * (extra keys, e.g. write-cache=true, to measure what they cost; read64k
 * lies at multiples of 16 KiB, so it spans several 16 KiB units).
 * seq4k: 4 KiB writes one after the other from offset 0, back to 0 at the
 * end; the only write a zoned= device takes (a host-managed drive's writes
 * go at the write pointer): each sequential zone is reset when the writes
 * enter it (the prefill left it full), as a log-structured user does.  The
 * device's last physical sector is neither prefilled nor ever touched, so
 * bad-sectors= can name it: the fault layer is there and idle. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sect4k/sect4k.h"
#include "sect4k/zone.h"

#define USAGE "usage: bench-engine N write4k|read4k|rmw512|write16k|read16k|" \
              "read64k|seq4k [KEY=VALUE...]\n"

/* A request's error r (negative): an errno or a zone error. */
static const char *
err_text (int r)
{
  int z = s4k_zone_err_of (r);
  return z ? s4k_zone_strerror (z) : s4k_strerror (-r);
}

int
main (int argc, char **argv)
{
  if (argc < 3) {
    fprintf (stderr, USAGE);
    return 2;
  }
  unsigned n = atoi (argv[1]);
  const char *op = argv[2];
  /* len: the request; unit: offsets are multiples of it; skip: from the
   * unit's start (the RMW writes LBA 1 of a physical sector). */
  unsigned len, unit = 4096, skip = 0;
  bool rd = !strncmp (op, "read", 4), seq = !strcmp (op, "seq4k");
  if (!strcmp (op, "write4k") || !strcmp (op, "read4k") || seq)
    len = 4096;
  else if (!strcmp (op, "rmw512"))
    len = 512, skip = 512;
  else if (!strcmp (op, "write16k") || !strcmp (op, "read16k"))
    len = unit = 16384;
  else if (!strcmp (op, "read64k"))
    len = 65536, unit = 16384;
  else {
    fprintf (stderr, "bench-engine: %s: unknown request kind\n" USAGE, op);
    return 2;
  }
  struct s4k_config c;
  struct s4k_dev *d;
  char err[256];
  s4k_config_init (&c);
  if (s4k_config_set (&c, "size", "64M", err, sizeof err) ||
      s4k_config_set (&c, "model", "512e", err, sizeof err))
    goto fail;
  for (int i = 3; i < argc; i++) {
    char *eq = strchr (argv[i], '=');
    if (!eq) {
      snprintf (err, sizeof err, "%s: not KEY=VALUE", argv[i]);
      goto fail;
    }
    *eq = '\0';
    if (s4k_config_set (&c, argv[i], eq + 1, err, sizeof err))
      goto fail;
  }
  if (s4k_config_finish (&c, err, sizeof err) ||
      s4k_dev_open (&d, &c, err, sizeof err)) {
fail:
    fprintf (stderr, "bench-engine: %s\n", err);
    return 1;
  }
  static char fill[1 << 20], buf[65536];
  const uint64_t size = s4k_dev_geometry (d)->size;
  int rc = 0;
  if (!size || size % sizeof fill) {
    fprintf (stderr, "bench-engine: size=%" PRIu64 ": not a multiple of 1 MiB\n",
             size);
    rc = 2;
    goto out;
  }
  memset (fill, 0x5a, sizeof fill);
  /* All but the last physical sector: a whole write would repair it. */
  for (uint64_t off = 0; off < size; off += sizeof fill) {
    size_t l = off + sizeof fill < size ? sizeof fill : sizeof fill - 4096;
    int r = s4k_write (d, fill, l, off, 0);
    if (r) {
      fprintf (stderr, "bench-engine: prefill: %s\n", err_text (r));
      rc = 1;
      goto out;
    }
  }
  /* seq4k on a zoned device: the bytes of a zone and of the
   * conventional ones, which are never reset. */
  struct s4k_zones_info zi = { 0 };
  if (s4k_dev_zones (d))
    s4k_zones_info (s4k_dev_zones (d), &zi);
  const uint64_t lb = s4k_dev_geometry (d)->logical;
  const uint64_t zone = zi.zone_lbas * lb, conv = zi.conventional * zone;
  /* reset: the offset of the next zone to reset (none: never). */
  uint64_t x = 88172645463325252ull, next = 0,
           reset = zone ? conv : UINT64_MAX;
  for (unsigned i = 0; i < n; i++) {
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    /* Offsets whose request ends before the last unit, which holds the
     * untouched sector. */
    uint64_t off = x % ((size - unit - (len > unit ? len : unit)) / unit + 1)
                   * unit + skip;
    if (seq) {
      off = next;
      next = off + 2 * len + unit <= size ? off + len : 0;
      if (!off)                 /* back at the start */
        reset = zone ? conv : UINT64_MAX;
      if (off == reset) {
        reset += zone;
        int r = s4k_dev_zone_op (d, S4K_ZOP_RESET, off / lb, false);
        if (r) {
          fprintf (stderr, "bench-engine: reset of the zone at %" PRIu64
                   ": %s\n", off, err_text (r));
          rc = 1;
          break;
        }
      }
    }
    int r = rd ? s4k_read (d, buf, len, off) : s4k_write (d, buf, len, off, 0);
    if (r) {
      fprintf (stderr, "bench-engine: %s: %s\n", op, err_text (r));
      rc = 1;
      break;
    }
  }
out:
  s4k_dev_close (d);
  return rc;
}
