/* SPDX-License-Identifier: BSD-3-Clause */
/* The zone state as a file (issue 33): the image of FILE.sect4k-zones
 * and the records kept in it once mapped (lib/dev/dev_zones.c maps it).
 *
 *   bytes 0-4095   one text line naming the layout, then NULs:
 *                  "sect4k-zones 1 zoned=M size=B logical=L zone-size=B
 *                   zone-conventional=N zones=N\n"
 *   then           one 8-byte record per zone, host byte order (little
 *                  endian where sect4k builds):
 *                  bits 0-39   write pointer - zone start (LBAs)
 *                  bits 40-43  condition (ZBC-2 code)
 *                  bit  44     NON_SEQ
 *                  bits 56-63  0x5A: a record (a hole reads 0)
 *
 * One aligned 8-byte store per zone changed, made under the zone lock
 * before the call returns: a process killed at any instruction leaves
 * every record as it was before or after that store, never half of it,
 * and the page cache keeps what was stored.  Calls that change several
 * zones (an implicit close, the ALL operations) store each, so a kill
 * in between leaves some changed: each such state is one the zones
 * could reach, and open zones are closed at the next start anyway. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zone_priv.h"

#define HEADER_LEN 4096
#define MAGIC "sect4k-zones 1 "
#define VALID 0x5Aull
#define WP_BITS 40

static uint64_t
pack (const struct zone *zn)
{
  return (zn->wp - zn->start) | (uint64_t) zn->cond << WP_BITS |
         (uint64_t) zn->non_seq << (WP_BITS + 4) | VALID << 56;
}

/* Zone k's record.  With a write cache a sequential zone's is what a
 * power cut that keeps nothing unflushed leaves: its durable pointer,
 * and the condition a cut gives it (no zone stays open).  Conventional,
 * read only, offline and NON_SEQ zones keep their pointers at a cut
 * (docs/zoned.md "Power cuts"): theirs as they are. */
static uint64_t
record (const struct s4k_zones *z, uint32_t k)
{
  const struct zone *zn = &z->z[k];
  if (!z->dur || zn->type == S4K_ZT_CONVENTIONAL || zn->non_seq ||
      zn->cond == S4K_ZC_READ_ONLY || zn->cond == S4K_ZC_OFFLINE)
    return pack (zn);
  struct zone d = *zn;
  d.wp = z->dur[k];
  d.cond = d.wp == d.start ? S4K_ZC_EMPTY
         : d.wp == d.start + d.len ? S4K_ZC_FULL : S4K_ZC_CLOSED;
  return pack (&d);
}

void
zone_file_save (struct s4k_zones *z)
{
  if (z->ntouched > ZONE_TOUCHED_MAX) {
    for (uint32_t i = 0; i < z->info.nr_zones; i++)
      __atomic_store_n (&z->rec[i], record (z, i), __ATOMIC_RELAXED);
  }
  else
    for (unsigned i = 0; i < z->ntouched; i++) {
      const uint32_t k = z->touched[i];
      __atomic_store_n (&z->rec[k], record (z, k), __ATOMIC_RELAXED);
    }
  z->ntouched = 0;
}

int
s4k_zones_durable_init (struct s4k_zones *z)
{
  uint64_t *dur = malloc (z->info.nr_zones * sizeof *dur);
  if (!dur)
    return -ENOMEM;
  s4k_zones_wps (z, dur);
  pthread_mutex_lock (&z->lock);
  free (z->dur);
  z->dur = dur;
  pthread_mutex_unlock (&z->lock);
  return 0;
}

void
s4k_zones_set_durable (struct s4k_zones *z, uint32_t zone, uint64_t wp)
{
  pthread_mutex_lock (&z->lock);
  if (z->dur && zone < z->info.nr_zones && z->dur[zone] != wp) {
    z->dur[zone] = wp;
    zone_touch (z, &z->z[zone]);
  }
  zone_unlock (z);
}

static const char *
model_name (enum s4k_zoned m)
{
  return m == S4K_ZONED_HOST_MANAGED ? "host-managed" : "host-aware";
}

/* The layout line of z (no newline). */
static void
layout (const struct s4k_zones *z, char *buf, size_t len)
{
  const struct s4k_zones_info *i = &z->info;
  snprintf (buf, len, "zoned=%s size=%" PRIu64 " logical=%" PRIu32
            " zone-size=%" PRIu64 " zone-conventional=%" PRIu32
            " zones=%" PRIu32, model_name (i->model),
            i->capacity * z->logical, z->logical,
            i->zone_lbas * z->logical, i->conventional, i->nr_zones);
}

size_t
s4k_zones_file_size (const struct s4k_zones *z)
{
  return HEADER_LEN + (size_t) z->info.nr_zones * sizeof (uint64_t);
}

size_t
s4k_zones_file_offset (const struct s4k_zones *z, uint64_t lba)
{
  return HEADER_LEN + (size_t) (lba >> z->shift) * sizeof (uint64_t);
}

void
s4k_zones_file_image (struct s4k_zones *z, void *buf)
{
  char line[256];
  layout (z, line, sizeof line);
  memset (buf, 0, HEADER_LEN);
  snprintf (buf, HEADER_LEN, MAGIC "%s\n", line);
  uint64_t *rec = (uint64_t *) ((char *) buf + HEADER_LEN);
  pthread_mutex_lock (&z->lock);
  for (uint32_t i = 0; i < z->info.nr_zones; i++)
    rec[i] = record (z, i);
  pthread_mutex_unlock (&z->lock);
}

/* The words of b that are not in a, space-separated, into out. */
static void
differing (const char *a, const char *b, char *out, size_t len)
{
  char ca[256], cb[256];
  snprintf (ca, sizeof ca, "%s", a);
  snprintf (cb, sizeof cb, "%s", b);
  size_t n = 0;
  out[0] = '\0';
  char *save = NULL;
  for (char *w = strtok_r (cb, " ", &save); w; w = strtok_r (NULL, " ", &save)) {
    /* Words are key=value, each key once: a word of b absent from a. */
    bool found = false;
    const size_t wl = strlen (w);
    for (const char *p = ca; (p = strstr (p, w)) != NULL; p += wl)
      if ((p == ca || p[-1] == ' ') && (p[wl] == ' ' || p[wl] == '\0'))
        found = true;
    if (!found && n < len)
      n += snprintf (out + n, len - n, "%s%s", n ? " " : "", w);
  }
}

/* Whether a record's condition is one a zone of type t can be in. */
static bool
cond_ok (uint8_t t, unsigned c)
{
  if (c == S4K_ZC_READ_ONLY || c == S4K_ZC_OFFLINE)
    return true;
  if (t == S4K_ZT_CONVENTIONAL)
    return c == S4K_ZC_NOT_WP;
  return c == S4K_ZC_EMPTY || c == S4K_ZC_IMP_OPEN || c == S4K_ZC_EXP_OPEN ||
         c == S4K_ZC_CLOSED || c == S4K_ZC_FULL;
}

int
s4k_zones_file_check (const struct s4k_zones *z, const void *map, size_t len,
                      const char *path, char *err, size_t errlen)
{
  char want[256], have[256];
  layout (z, want, sizeof want);
  const char *h = map;
  const char *nl = len >= HEADER_LEN ? memchr (h, '\n', HEADER_LEN) : NULL;
  if (!nl || strncmp (h, MAGIC, sizeof MAGIC - 1) != 0) {
    snprintf (err, errlen, "%s: not a sect4k zone state file (expected '"
              MAGIC "zoned=...'): zone-reformat=true writes a new one",
              path);
    return -1;
  }
  snprintf (have, sizeof have, "%.*s", (int) (nl - h - (sizeof MAGIC - 1)),
            h + sizeof MAGIC - 1);
  if (strcmp (have, want) != 0) {
    char was[256], now[256];
    differing (want, have, was, sizeof was);
    differing (have, want, now, sizeof now);
    snprintf (err, errlen, "%s: written with %s, the keys say %s: give "
              "the same, or zone-reformat=true to start every zone empty",
              path, was, now);
    return -1;
  }
  return 0;
}

int
s4k_zones_file_attach (struct s4k_zones *z, void *map, size_t len,
                       const char *path, char *err, size_t errlen)
{
  if (s4k_zones_file_check (z, map, len, path, err, errlen) == -1)
    return -1;
  if (len != s4k_zones_file_size (z)) {
    snprintf (err, errlen, "%s: %zu bytes, %zu expected for %" PRIu32
              " zones (the file is damaged): zone-reformat=true writes a "
              "new one", path, len, s4k_zones_file_size (z), z->info.nr_zones);
    return -1;
  }
  uint64_t *rec = (uint64_t *) ((char *) map + HEADER_LEN);
  /* Checked whole first: a damaged file changes nothing. */
  for (uint32_t i = 0; i < z->info.nr_zones; i++) {
    const struct zone *zn = &z->z[i];
    const uint64_t r = rec[i], off = r & ((1ull << WP_BITS) - 1);
    const unsigned cond = (r >> WP_BITS) & 0xf;
    const bool seq = zn->type != S4K_ZT_CONVENTIONAL;
    if (r >> 56 != VALID || (r >> (WP_BITS + 5) & 0x7ff) ||
        !cond_ok (zn->type, cond) || off > zn->len ||
        (seq && cond == S4K_ZC_EMPTY && off) ||
        (seq && cond == S4K_ZC_FULL && off != zn->len) ||
        (seq && cond == S4K_ZC_CLOSED && (!off || off == zn->len))) {
      snprintf (err, errlen, "%s: the record of zone %" PRIu32 " (LBA %"
                PRIu64 ") is not valid (%016" PRIx64 "): zone-reformat="
                "true starts every zone empty", path, i, zn->start, r);
      return -1;
    }
  }
  pthread_mutex_lock (&z->lock);
  z->imp_open = z->exp_open = z->closed = 0;
  for (uint32_t i = 0; i < z->info.nr_zones; i++) {
    struct zone *zn = &z->z[i];
    const uint64_t r = rec[i];
    zn->wp = zn->start + (r & ((1ull << WP_BITS) - 1));
    zone_set_cond (zn, (r >> WP_BITS) & 0xf);
    zn->non_seq = (r >> (WP_BITS + 4)) & 1;
    /* A power cycle closes the open zones (tcmu-runner's file_zbc does
     * the same at start; NVMe ZNS too), so no zone holds an open
     * resource the host did not ask for in this session. */
    if (zn->cond == S4K_ZC_IMP_OPEN || zn->cond == S4K_ZC_EXP_OPEN)
      zone_set_cond (zn, zn->wp == zn->start ? S4K_ZC_EMPTY
                                             : S4K_ZC_CLOSED);
    if (zn->cond == S4K_ZC_CLOSED)
      z->closed++;
  }
  z->rec = rec;
  z->ntouched = ZONE_TOUCHED_MAX + 1;   /* the closed zones, on record */
  zone_unlock (z);
  return 0;
}

void
s4k_zones_file_detach (struct s4k_zones *z)
{
  pthread_mutex_lock (&z->lock);
  z->rec = NULL;
  z->ntouched = 0;
  pthread_mutex_unlock (&z->lock);
}
