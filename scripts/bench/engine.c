/* The engine alone, no nbdkit: N requests of one kind on a prefilled
 * 64 MiB 512e memory device, at pseudo-random physical-sector offsets.
 * scripts/bench/engine-ir runs it under callgrind for N and 3N requests:
 * the difference over 2N is the engine's instructions per request.
 *
 * usage: bench-engine N write4k|read4k|rmw512|write16k|read16k|read64k
 *        [KEY=VALUE...]
 * (extra keys, e.g. write-cache=true or atomic-write-max=16K, to measure
 * what they cost; the 16k and 64k requests lie at multiples of 16 KiB) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sect4k/sect4k.h"

#define SIZE (64u << 20)

int
main (int argc, char **argv)
{
  if (argc < 3) {
    fprintf (stderr, "usage: bench-engine N write4k|read4k|rmw512|"
             "write16k|read16k|read64k [KEY=VALUE...]\n");
    return 2;
  }
  unsigned n = atoi (argv[1]);
  const char *op = argv[2];
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
  memset (fill, 0x5a, sizeof fill);
  for (unsigned off = 0; off < SIZE; off += sizeof fill)
    if (s4k_write (d, fill, sizeof fill, off, 0))
      return 1;
  uint64_t x = 88172645463325252ull;
  for (unsigned i = 0; i < n; i++) {
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    uint64_t off = x % (SIZE / 4096 - 1) * 4096;
    uint64_t off16 = x % (SIZE / 16384 - 4) * 16384;
    int r = !strcmp (op, "write4k") ? s4k_write (d, buf, 4096, off, 0)
          : !strcmp (op, "read4k") ? s4k_read (d, buf, 4096, off)
          : !strcmp (op, "write16k") ? s4k_write (d, buf, 16384, off16, 0)
          : !strcmp (op, "read16k") ? s4k_read (d, buf, 16384, off16)
          : !strcmp (op, "read64k") ? s4k_read (d, buf, 65536, off16)
          : s4k_write (d, buf, 512, off + 512, 0);
    if (r) {
      fprintf (stderr, "bench-engine: %s: %s\n", op, s4k_strerror (-r));
      return 1;
    }
  }
  s4k_dev_close (d);
  return 0;
}
