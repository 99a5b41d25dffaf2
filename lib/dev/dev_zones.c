/* SPDX-License-Identifier: BSD-3-Clause */
/* The zones of a file= device kept beside the file, FILE.sect4k-zones
 * (issue 33; the format: lib/zone/zone_file.c), and the control
 * socket's zone faults.
 *
 * The file is mapped shared: a zone change is a store into the page
 * cache, made before the request that caused it is acknowledged, so it
 * outlives the process (SIGKILL) as the data written with
 * write-cache=false does.  A flush syncs the mapping and a FUA write
 * the page of its zone's record, as they make the data durable. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dev_priv.h"

#define ZONES_SUFFIX ".sect4k-zones"

/* FILE.sect4k-zones into path: 0, or -1 with err. */
static int
zones_path (const struct s4k_config *c, char *path, size_t len, char *err,
            size_t errlen)
{
  if (snprintf (path, len, "%s" ZONES_SUFFIX, c->file) >= (int) len) {
    snprintf (err, errlen, "file=%.100s...: the path is too long for its "
              "zone state file", c->file);
    return -1;
  }
  return 0;
}

int
dev_zones_file_check (const struct s4k_config *c, char *err, size_t errlen)
{
  if (c->zone.model == S4K_ZONED_NONE || !c->file || c->zone.reformat)
    return 0;
  char path[4096], head[4096];
  if (zones_path (c, path, sizeof path, err, errlen) == -1)
    return -1;
  int fd = open (path, O_RDONLY | O_CLOEXEC);
  if (fd == -1)
    return 0;                   /* none yet, or open() says why later */
  /* The state of a data file that is gone would describe a new, empty
   * one. */
  struct stat st;
  if (stat (c->file, &st) == -1 && errno == ENOENT) {
    close (fd);
    snprintf (err, errlen, "file=%s: does not exist, but %s does (the zone "
              "state of a file that is gone): zone-reformat=true starts "
              "every zone empty", c->file, path);
    return -1;
  }
  if (!c->have_size) {
    close (fd);
    return 0;                   /* the file's size: checked once open */
  }
  ssize_t n = pread (fd, head, sizeof head, 0);
  close (fd);
  struct s4k_zone_config zc = c->zone;
  struct s4k_zones *z;
  if (n < 0 || s4k_zone_finish (&zc, &c->geom, err, errlen) == -1 ||
      s4k_zones_new (&z, &zc, &c->geom) < 0)
    return 0;                   /* s4k_dev_new says why */
  int r = s4k_zones_file_check (z, head, n, path, err, errlen);
  s4k_zones_free (z);
  return r;
}

static bool
store_readonly (const struct s4k_config *c, const struct s4k_store *s)
{
  return c->readonly || (s->ops->readonly && s->ops->readonly (s));
}

static int
refuse_readonly_reformat (const struct s4k_config *c, char *err,
                          size_t errlen)
{
  snprintf (err, errlen, "zone-reformat=true: file=%s is read-only (a "
            "reformat erases the data and rewrites its zone state)",
            c->file);
  return -1;
}

/* A reformat is a FORMAT UNIT of the whole drive: every zone, the
 * conventional ones too, reads zeroes after it (the LUN's own FORMAT
 * UNIT erases the data the same way, lib/scsi/scsi_format.c).  Holes
 * punched, not zeroes written: the file keeps its size and no blocks. */
int
dev_zones_reformat_data (const struct s4k_config *c, struct s4k_store *store,
                         char *err, size_t errlen)
{
  if (c->zone.model == S4K_ZONED_NONE || !c->file || !c->zone.reformat)
    return 0;
  if (store_readonly (c, store))
    return refuse_readonly_reformat (c, err, errlen);
  int r = store->ops->zero (store, c->geom.size, 0, true, false);
  if (r == 0 && store->ops->flush)
    r = store->ops->flush (store);
  if (r) {
    snprintf (err, errlen, "zone-reformat=true: erasing file=%s: %s",
              c->file, s4k_strerror (-r));
    return -1;
  }
  return 0;
}

int
dev_zones_file_open (struct s4k_dev *d, const struct s4k_config *c,
                     char *err, size_t errlen)
{
  char path[4096];
  if (zones_path (c, path, sizeof path, err, errlen) == -1)
    return -1;
  /* Read-only (asked for, or the data file cannot be written): no file
   * is made or changed. */
  const bool ro = store_readonly (c, d->store);
  struct stat st;
  bool fresh = c->zone.reformat;
  if (fresh && ro)
    return refuse_readonly_reformat (c, err, errlen);
  if (!fresh && stat (path, &st) == -1) {
    if (errno != ENOENT) {
      snprintf (err, errlen, "%s: %s", path, s4k_strerror (errno));
      return -1;
    }
    /* A file with data and no zone state: its zones are unknown, and
     * starting them empty would be a silent reformat. */
    if (stat (c->file, &st) == 0 && st.st_blocks > 0) {
      snprintf (err, errlen, "file=%s: holds data but no zone state (%s "
                "is missing): zone-reformat=true starts every zone empty",
                c->file, path);
      return -1;
    }
    /* Read-only and nothing written yet: the zones are those of a reset
     * drive, in memory; the first writable start makes the file. */
    if (ro)
      return 0;
    fresh = true;
  }
  if (fresh) {
    const size_t len = s4k_zones_file_size (d->zones);
    void *img = malloc (len);
    if (!img) {
      snprintf (err, errlen, "out of memory");
      return -1;
    }
    s4k_zones_file_image (d->zones, img);
    int r = dev_sidecar_write (path, img, len);
    free (img);
    if (r) {
      snprintf (err, errlen, "%s: %s", path, s4k_strerror (-r));
      return -1;
    }
  }
  /* Read-only: the records are read, and what changes (the open zones
   * closed) stays in memory. */
  int fd = open (path, (ro ? O_RDONLY : O_RDWR) | O_CLOEXEC);
  if (fd == -1 || fstat (fd, &st) == -1) {
    snprintf (err, errlen, "%s: %s", path, s4k_strerror (errno));
    if (fd != -1)
      close (fd);
    return -1;
  }
  void *map = st.st_size ? mmap (NULL, st.st_size, PROT_READ | PROT_WRITE,
                                 ro ? MAP_PRIVATE : MAP_SHARED,
                                 fd, 0)
                         : NULL;
  const int e = errno;
  close (fd);
  if (map == MAP_FAILED) {
    snprintf (err, errlen, "%s: mmap: %s", path, s4k_strerror (e));
    return -1;
  }
  if (s4k_zones_file_attach (d->zones, map ? map : "", map ? st.st_size : 0,
                             path, err, errlen) == -1) {
    if (map)
      munmap (map, st.st_size);
    return -1;
  }
  d->zmap = map;
  d->zmap_len = st.st_size;
  return 0;
}

int
dev_zones_file_sync (struct s4k_dev *d, uint64_t lba)
{
  if (!d->zmap)
    return 0;
  size_t off = 0, n = d->zmap_len;
  if (lba != UINT64_MAX) {
    const size_t page = sysconf (_SC_PAGESIZE);
    off = s4k_zones_file_offset (d->zones, lba) & ~(page - 1);
    n = off + page <= d->zmap_len ? page : d->zmap_len - off;
  }
  return msync ((char *) d->zmap + off, n, MS_SYNC) == -1 ? -errno : 0;
}

void
dev_zones_file_close (struct s4k_dev *d)
{
  if (!d->zmap)
    return;
  s4k_zones_file_detach (d->zones);
  munmap (d->zmap, d->zmap_len);
  d->zmap = NULL;
}

/* ---- the control socket's zone commands -------------------------------- */

static int
not_zoned (char *err, size_t errlen)
{
  snprintf (err, errlen, "zone: the device is not zoned (give zoned="
            "host-managed or zoned=host-aware)");
  return -1;
}

int
s4k_dev_zone_fault (struct s4k_dev *d, uint64_t lba, enum s4k_zone_cond cond,
                    char *err, size_t errlen)
{
  if (!d->zones)
    return not_zoned (err, errlen);
  struct s4k_zones_info zi;
  s4k_zones_info (d->zones, &zi);
  if (lba >= zi.capacity) {
    snprintf (err, errlen, "zone %" PRIu64 ": beyond the last LBA (%"
              PRIu64 ")", lba, zi.capacity - 1);
    return -1;
  }
  if (lba & (zi.zone_lbas - 1)) {
    snprintf (err, errlen, "zone %" PRIu64 ": not the first LBA of a zone "
              "(zones are %" PRIu64 " LBAs; this one starts at %" PRIu64 ")",
              lba, zi.zone_lbas, lba & ~(zi.zone_lbas - 1));
    return -1;
  }
  if (cond == S4K_ZC_EMPTY || cond == S4K_ZC_NOT_WP)
    cond = lba >> __builtin_ctzll (zi.zone_lbas) < zi.conventional
           ? S4K_ZC_NOT_WP : S4K_ZC_EMPTY;
  int r = s4k_zones_set_cond (d->zones, lba, cond);
  if (r) {
    snprintf (err, errlen, "zone %" PRIu64 ": %s", lba,
              s4k_zone_strerror (-r));
    return -1;
  }
  /* A fault the user set sticks across a host crash too. */
  if ((r = dev_zones_file_sync (d, lba))) {
    snprintf (err, errlen, "zone %" PRIu64 ": set, but syncing %s failed: "
              "%s", lba, "its record", s4k_strerror (-r));
    return -1;
  }
  return 0;
}

static const char *
type_name (uint8_t t)
{
  return t == S4K_ZT_CONVENTIONAL ? "conventional"
       : t == S4K_ZT_SEQ_REQUIRED ? "seq-required" : "seq-preferred";
}

static const char *
cond_name (uint8_t c)
{
  switch (c) {
  case S4K_ZC_NOT_WP: return "not-wp";
  case S4K_ZC_EMPTY: return "empty";
  case S4K_ZC_IMP_OPEN: return "imp-open";
  case S4K_ZC_EXP_OPEN: return "exp-open";
  case S4K_ZC_CLOSED: return "closed";
  case S4K_ZC_READ_ONLY: return "read-only";
  case S4K_ZC_FULL: return "full";
  case S4K_ZC_OFFLINE: return "offline";
  default: return "?";
  }
}

int
s4k_dev_zone_list (struct s4k_dev *d, FILE *out, char *err, size_t errlen)
{
  if (!d->zones)
    return not_zoned (err, errlen);
  struct s4k_zones_info zi;
  s4k_zones_info (d->zones, &zi);
  struct s4k_zone_desc desc[256];
  for (uint64_t lba = 0; lba < zi.capacity; ) {
    uint64_t listed;
    int n = s4k_zones_report (d->zones, lba, 0, true, desc, 256, &listed);
    if (n <= 0)
      break;
    for (int i = 0; i < n; i++) {
      const struct s4k_zone_desc *z = &desc[i];
      fprintf (out, "start=%" PRIu64 " len=%" PRIu64 " type=%s cond=%s ",
               z->start, z->len, type_name (z->type), cond_name (z->cond));
      if (z->wp == UINT64_MAX)
        fprintf (out, "wp=-");
      else
        fprintf (out, "wp=%" PRIu64, z->wp);
      fprintf (out, " non-seq=%d\n", z->non_seq);
    }
    lba = desc[n - 1].start + desc[n - 1].len;
  }
  return 0;
}
