/* SPDX-License-Identifier: BSD-3-Clause */
/* Devices for the engine's unit tests from "key=value" strings, as the
 * front ends give them (after tap.h). */
#ifndef S4K_DEVRIG_H
#define S4K_DEVRIG_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sect4k/sect4k.h"

/* Sets one "key=value": 0, or -1 with err filled.  The config keeps
 * string values, so they get storage that lasts (the last 64). */
TAP_UNUSED static int
rig_set (struct s4k_config *c, const char *kv, char *err, size_t errlen)
{
  static char store[64][256];
  static unsigned ns;
  char key[256];
  snprintf (key, sizeof key, "%s", kv);
  char *eq = strchr (key, '=');
  if (!eq) {
    snprintf (err, errlen, "%.200s: not key=value", kv);
    return -1;
  }
  *eq = '\0';
  char *v = store[ns++ % 64];
  snprintf (v, sizeof store[0], "%s", eq + 1);
  return s4k_config_set (c, key, v, err, errlen);
}

/* A fresh config from "key=value ..." (space-separated), finished: 0, or
 * -1 with err filled. */
TAP_UNUSED static int
configure (struct s4k_config *c, const char *keys, char *err, size_t errlen)
{
  char kv[256];
  s4k_config_init (c);
  for (const char *p = keys; *p; ) {
    size_t n = strcspn (p, " ");
    snprintf (kv, sizeof kv, "%.*s", (int) n, p);
    p += n + (p[n] == ' ');
    if (rig_set (c, kv, err, errlen))
      return -1;
  }
  return s4k_config_finish (c, err, errlen);
}

/* The device of those keys, or bail out. */
TAP_UNUSED static struct s4k_dev *
open_dev (const char *keys)
{
  struct s4k_config c;
  struct s4k_dev *d;
  char err[256];
  if (configure (&c, keys, err, sizeof err) ||
      s4k_dev_open (&d, &c, err, sizeof err))
    bail ("%s: %s", keys, err);
  return d;
}

/* A scratch data file for file= (img: "/tmp/NAME-XXXXXX", made by
 * mkstemp) and the name of the zone state file beside it. */
TAP_UNUSED static void
scratch_file (char *img, char *zpath, size_t zlen)
{
  int fd = mkstemp (img);
  if (fd == -1)
    bail ("mkstemp %s", img);
  close (fd);
  snprintf (zpath, zlen, "%s.sect4k-zones", img);
}

/* The zone of a zoned device holding lba, as REPORT ZONES gives it, or
 * bail out (after sect4k/zone.h). */
#ifdef SECT4K_ZONE_H
TAP_UNUSED static struct s4k_zone_desc
dev_zone (struct s4k_dev *d, uint64_t lba)
{
  struct s4k_zone_desc z;
  uint64_t listed;
  if (s4k_zones_report (s4k_dev_zones (d), lba, 0, true, &z, 1, &listed) != 1)
    bail ("report at %llu", (unsigned long long) lba);
  return z;
}
#endif

#endif
