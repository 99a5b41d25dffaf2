/* SPDX-License-Identifier: BSD-3-Clause */
/* Sector-size conversion in place (issue 34): the device switches its
 * logical size while the physical sectors and the alignment stay, as a
 * "fast format" drive switches between 512e and 4Kn (the SCSI layer's
 * FORMAT UNIT, lib/scsi/scsi_format.c, runs it).  On a file= store the new size
 * is recorded next to the file, FILE.sect4k-geometry, one line
 *
 *   sect4k-geometry logical=L physical=P alignment=A
 *
 * which the next open applies over the keys' logical size (the drive
 * keeps its format), and refuses when its physical size or alignment is
 * not the keys'. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dev_priv.h"
#include "fault/fault.h"

#define RECORD_SUFFIX ".sect4k-geometry"
#define RECORD_PREFIX "sect4k-geometry "

int
dev_format_record_init (struct s4k_dev *d, const char *file, char *err,
                        size_t errlen)
{
  struct stat st;
  /* A block device has no place beside it for the record. */
  if (stat (file, &st) == -1 || !S_ISREG (st.st_mode))
    return 0;
  const size_t n = strlen (file) + sizeof RECORD_SUFFIX;
  if (!(d->geom_record = malloc (n))) {
    snprintf (err, errlen, "out of memory");
    return -1;
  }
  snprintf (d->geom_record, n, "%s" RECORD_SUFFIX, file);
  return 0;
}

int
dev_format_record_apply (struct s4k_config *c, char *err, size_t errlen)
{
  char path[4096], line[256];
  if (snprintf (path, sizeof path, "%s" RECORD_SUFFIX, c->file) >=
      (int) sizeof path)
    return 0;
  FILE *fp = fopen (path, "r");
  if (!fp) {
    if (errno == ENOENT)
      return 0;
    snprintf (err, errlen, "%s: %s", path, s4k_strerror (errno));
    return -1;
  }
  struct s4k_geometry g = c->geom;
  const bool got = fgets (line, sizeof line, fp) != NULL;
  fclose (fp);
  if (!got || sscanf (line, RECORD_PREFIX "logical=%" SCNu32 " physical=%"
                      SCNu32 " alignment=%" SCNu32, &g.logical, &g.physical,
                      &g.alignment) != 3) {
    snprintf (err, errlen, "%s: not a sect4k geometry record (expected '"
              RECORD_PREFIX "logical=L physical=P alignment=A')", path);
    return -1;
  }
  if (g.physical != c->geom.physical || g.alignment != c->geom.alignment) {
    snprintf (err, errlen, "%s: FORMAT UNIT left physical=%" PRIu32
              " alignment-offset=%" PRIu32 ", the keys say physical=%" PRIu32
              " alignment-offset=%" PRIu32 ": give those, or remove the "
              "record", path, g.physical, g.alignment, c->geom.physical,
              c->geom.alignment);
    return -1;
  }
  c->geom.logical = g.logical;
  return 0;
}

int
dev_sidecar_write (const char *path, const void *buf, size_t len)
{
  char tmp[4096];
  if (snprintf (tmp, sizeof tmp, "%s.tmp", path) >= (int) sizeof tmp)
    return -ENAMETOOLONG;
  int fd = open (tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd == -1)
    return -errno;
  int r = 0;
  for (size_t done = 0; r == 0 && done < len; ) {
    ssize_t n = write (fd, (const char *) buf + done, len - done);
    if (n > 0)
      done += n;
    else if (n == -1 && errno != EINTR)
      r = -errno;
    else if (n == 0)
      r = -EIO;
  }
  if (r == 0 && fsync (fd) == -1)
    r = -errno;
  if (close (fd) == -1 && r == 0)
    r = -errno;
  if (r == 0 && rename (tmp, path) == -1)
    r = -errno;
  if (r) {
    unlink (tmp);
    return r;
  }
  /* The rename itself, durable. */
  char dir[4096];
  snprintf (dir, sizeof dir, "%s", path);
  char *slash = strrchr (dir, '/');
  if (slash)
    *(slash == dir ? slash + 1 : slash) = '\0';
  int dfd = open (slash ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd != -1) {
    fsync (dfd);
    close (dfd);
  }
  return 0;
}

/* Writes the record. */
static int
record_write (const char *path, const struct s4k_geometry *g)
{
  char line[256];
  int n = snprintf (line, sizeof line, RECORD_PREFIX "logical=%" PRIu32
                    " physical=%" PRIu32 " alignment=%" PRIu32 "\n",
                    g->logical, g->physical, g->alignment);
  return dev_sidecar_write (path, line, (size_t) n);
}

int
s4k_dev_logical_ok (const struct s4k_dev *d, uint32_t logical, char *err,
                    size_t errlen)
{
  struct s4k_geometry g = d->g;
  g.logical = logical;
  if (s4k_geometry_check (&g, err, errlen) == -1)
    return -EINVAL;
  if (d->atomic.max && (d->atomic.max % logical || d->atomic.min % logical ||
                        d->atomic.boundary % logical)) {
    snprintf (err, errlen, "logical=%" PRIu32 ": the atomic write limits "
              "are not multiples of it", logical);
    return -EINVAL;
  }
  if (d->max_request < logical) {
    snprintf (err, errlen, "logical=%" PRIu32 ": larger than max-request=%"
              PRIu32, logical, d->max_request);
    return -EINVAL;
  }
  if (d->wlog) {
    snprintf (err, errlen, "write-log= records one geometry: the sector "
              "size cannot change");
    return -ENOTSUP;
  }
  if (d->zones) {
    snprintf (err, errlen, "zoned=: the zones are laid out in logical "
              "blocks of the keys' size: the sector size cannot change");
    return -ENOTSUP;
  }
  if (!d->volatile_store && !d->geom_record) {
    snprintf (err, errlen, "upstream= and a file= that is not a regular "
              "file keep the data, not the geometry: the sector size "
              "cannot change");
    return -ENOTSUP;
  }
  return 0;
}

int
s4k_dev_set_logical (struct s4k_dev *d, uint32_t logical)
{
  char err[256];
  int r = s4k_dev_logical_ok (d, logical, err, sizeof err);
  if (r)
    return r;
  if (d->geom_record) {
    /* First the record: the next start must read the data with the
     * size it is about to be written in. */
    struct s4k_geometry g = d->g;
    g.logical = logical;
    if ((r = record_write (d->geom_record, &g)) != 0)
      return r;
  }
  /* Physical size and alignment stay: sector indexes, locks, the
   * store's layout and the fault layer's bad sectors are unchanged. */
  __atomic_store_n (&d->g.logical, logical, __ATOMIC_RELEASE);
  d->lbits = __builtin_ctz (logical);
  if (d->fault)
    fault_set_logical (d->fault, logical);
  return 0;
}
