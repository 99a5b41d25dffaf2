/* SPDX-License-Identifier: BSD-3-Clause */
/* What keeping the zone state in a file costs a write (docs/zoned.md
 * "Persistence"): N sequential 4 KiB writes (8 LBAs, 512e) through
 * s4k_zones_write, with the zone records attached (file) or not (mem).
 * Run under callgrind for N and 3N: the difference over 2N is the
 * instructions per write.
 *   usage: zone-record-cost N mem|file */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sect4k/sect4k.h"
#include "sect4k/zone.h"

int
main (int argc, char **argv)
{
  if (argc != 3 || (strcmp (argv[2], "mem") && strcmp (argv[2], "file"))) {
    fprintf (stderr, "usage: zone-record-cost N mem|file\n");
    return 2;
  }
  const unsigned n = atoi (argv[1]);
  struct s4k_config c;
  char err[256];
  s4k_config_init (&c);
  if (s4k_config_set (&c, "size", "4G", err, sizeof err) ||
      s4k_config_set (&c, "model", "512e", err, sizeof err) ||
      s4k_config_set (&c, "zoned", "host-managed", err, sizeof err) ||
      s4k_config_set (&c, "zone-size", "1G", err, sizeof err) ||
      s4k_config_finish (&c, err, sizeof err)) {
    fprintf (stderr, "zone-record-cost: %s\n", err);
    return 1;
  }
  struct s4k_zones *z;
  if (s4k_zones_new (&z, &c.zone, &c.geom))
    return 1;
  void *map = NULL;
  if (strcmp (argv[2], "file") == 0) {
    const size_t len = s4k_zones_file_size (z);
    if (!(map = malloc (len)))
      return 1;
    s4k_zones_file_image (z, map);
    if (s4k_zones_file_attach (z, map, len, "mem", err, sizeof err)) {
      fprintf (stderr, "zone-record-cost: %s\n", err);
      return 1;
    }
  }
  /* 1 GiB zones of 2^21 LBAs: up to 262144 writes stay in zone 0. */
  for (unsigned i = 0; i < n; i++)
    if (s4k_zones_write (z, (uint64_t) i * 8, 8))
      return 1;
  if (map)
    s4k_zones_file_detach (z);
  s4k_zones_free (z);
  free (map);
  return 0;
}
