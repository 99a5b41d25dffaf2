/* SPDX-License-Identifier: BSD-3-Clause */
/* The write log (write-log=PATH) and its reader: dm-log-writes' on-disk
 * format, docs/write-log.md.
 *
 * Layout: the super block in block 0, then for each entry one block of
 * header (struct log_write_entry, a mark's name after it, zeroes) and,
 * for a write, its nr_sectors blocks of data.  Little-endian throughout. */
#include <endian.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "sect4k/wlog.h"
#include "sect4k/zone.h"

#define SUPER_BYTES 28u          /* magic, version, nr_entries, sectorsize */
#define ENTRY_BYTES 32u          /* sector, nr_sectors, flags, data_len */
#define GEOMETRY_PREFIX S4K_WLOG_GEOMETRY_PREFIX
#define KNOWN_FLAGS (S4K_WLOG_FLUSH | S4K_WLOG_FUA | S4K_WLOG_DISCARD |     \
                     S4K_WLOG_MARK | S4K_WLOG_METADATA | S4K_WLOG_ZERO |    \
                     S4K_WLOG_GEOMETRY | S4K_WLOG_ATOMIC)

static void
put64 (unsigned char *p, uint64_t v)
{
  v = htole64 (v);
  memcpy (p, &v, 8);
}

static uint64_t
get64 (const unsigned char *p)
{
  uint64_t v;
  memcpy (&v, p, 8);
  return le64toh (v);
}

/* ---- writer ----------------------------------------------------------- */

struct s4k_wlog {
  pthread_mutex_t mu;
  int fd;
  char *path;
  uint64_t pos;                 /* where the next entry goes */
  uint64_t entries;
  uint64_t file_end;            /* bytes actually written: zero data is
                                   left as a hole, so the file may end
                                   before pos */
  int failed;                   /* -errno of the first failure, then 0 */
  uint32_t ss;                  /* the super block's sectorsize: the
                                   device's logical sector size */
  unsigned char *block;         /* ss bytes: the header being written */
};

/* Writes all of iov at off; 0 or -errno. */
static int
pwritev_all (int fd, struct iovec *iov, int n, uint64_t off)
{
  while (n > 0) {
    ssize_t r = pwritev (fd, iov, n, off);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      return -errno;
    }
    if (r == 0)
      return -EIO;
    off += r;
    while (n > 0 && (size_t) r >= iov->iov_len) {
      r -= iov->iov_len;
      iov++, n--;
    }
    if (n > 0) {
      iov->iov_base = (char *) iov->iov_base + r;
      iov->iov_len -= r;
    }
  }
  return 0;
}

/* Called with mu held: the first failure is reported once, and every
 * later call returns it (a log with a gap would replay wrong). */
static int
fail (struct s4k_wlog *w, int r)
{
  if (!w->failed) {
    w->failed = r;
    fprintf (stderr, "sect4k: write-log=%s: %s: the log ends at entry %"
             PRIu64 "; later writes fail with EIO\n", w->path,
             s4k_strerror (-r), w->entries);
  }
  return -EIO;
}

/* The super block with the current count, after making the file as long
 * as its entries (a trailing write of zeroes is a hole). */
static int
write_super (struct s4k_wlog *w)
{
  if (w->file_end < w->pos) {
    if (ftruncate (w->fd, w->pos) == -1)
      return -errno;
    w->file_end = w->pos;
  }
  unsigned char *super = w->block;      /* free between entries */
  memset (super, 0, w->ss);
  put64 (super, S4K_WLOG_MAGIC);
  put64 (super + 8, S4K_WLOG_VERSION);
  put64 (super + 16, w->entries);
  uint32_t ss = htole32 (w->ss);
  memcpy (super + 24, &ss, 4);
  struct iovec iov = { super, w->ss };
  return pwritev_all (w->fd, &iov, 1, 0);
}

/* Appends one entry with mu held: its header, then data (len bytes) or,
 * data NULL and not a trim, a hole of len bytes. */
static int
append_locked (struct s4k_wlog *w, uint64_t flags, uint64_t off, uint64_t len,
               const void *data, const char *mark)
{
  if (w->failed)
    return -EIO;
  size_t mark_len = mark ? strlen (mark) : 0;
  memset (w->block, 0, w->ss);
  put64 (w->block, off / w->ss);
  put64 (w->block + 8, len / w->ss);
  put64 (w->block + 16, flags);
  put64 (w->block + 24, mark_len);
  if (mark_len)
    memcpy (w->block + ENTRY_BYTES, mark, mark_len);
  struct iovec iov[2] = { { w->block, w->ss },
                          { (void *) data, len } };
  const bool trim = flags & S4K_WLOG_DISCARD;
  int r = pwritev_all (w->fd, iov, data ? 2 : 1, w->pos);
  if (r)
    return fail (w, r);
  uint64_t end = w->pos + w->ss + (trim ? 0 : len);
  w->file_end = data || trim ? end : w->pos + w->ss;
  w->pos = end;
  w->entries++;
  /* As the kernel does after FUA and mark entries, and after flushes:
   * the count a reader trusts covers every durable entry. */
  if (flags & (S4K_WLOG_FLUSH | S4K_WLOG_FUA | S4K_WLOG_MARK) &&
      (r = write_super (w)))
    return fail (w, r);
  return 0;
}

int
s4k_wlog_create (struct s4k_wlog **out, const char *path,
                 const struct s4k_geometry *g, const char *export_name,
                 char *err, size_t errlen)
{
  struct s4k_wlog *w = calloc (1, sizeof *w);
  if (!w || !(w->path = strdup (path)) ||
      !(w->block = malloc (w->ss = g->logical))) {
    if (w)
      free (w->path);
    free (w);
    snprintf (err, errlen, "write-log=%s: out of memory", path);
    return -1;
  }
  w->fd = open (path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (w->fd == -1) {
    snprintf (err, errlen, "write-log=%s: cannot create the log: %s", path,
              s4k_strerror (errno));
    free (w->block);
    free (w->path);
    free (w);
    return -1;
  }
  pthread_mutex_init (&w->mu, NULL);
  w->pos = w->file_end = w->ss;
  char name[512 - ENTRY_BYTES];         /* fits the smallest sector, with
                                           the NUL after it replay-log
                                           needs */
  snprintf (name, sizeof name, GEOMETRY_PREFIX "size=%" PRIu64
            " logical=%" PRIu32 " physical=%" PRIu32 " alignment=%" PRIu32
            " export=%s", g->size, g->logical, g->physical, g->alignment,
            export_name ? export_name : "");
  int r = write_super (w);
  /* A plain mark: replay-log takes an entry with a name only when its
   * flags are exactly MARK. */
  if (r == 0)
    r = append_locked (w, S4K_WLOG_MARK, 0, 0, NULL, name);
  if (r) {
    snprintf (err, errlen, "write-log=%s: cannot write the log: %s", path,
              s4k_strerror (w->failed ? -w->failed : -r));
    close (w->fd);
    pthread_mutex_destroy (&w->mu);
    free (w->block);
    free (w->path);
    free (w);
    return -1;
  }
  *out = w;
  return 0;
}

int
s4k_wlog_append (struct s4k_wlog *w, uint64_t flags, uint64_t off,
                 uint64_t len, const void *data)
{
  if ((off | len) & (w->ss - 1))
    return -EINVAL;
  pthread_mutex_lock (&w->mu);
  int r = append_locked (w, flags, off, len, data, NULL);
  pthread_mutex_unlock (&w->mu);
  return r;
}

int
s4k_wlog_flush (struct s4k_wlog *w)
{
  pthread_mutex_lock (&w->mu);
  int r = append_locked (w, S4K_WLOG_FLUSH, 0, 0, NULL, NULL);
  pthread_mutex_unlock (&w->mu);
  return r;
}

int
s4k_wlog_mark (struct s4k_wlog *w, const char *name)
{
  size_t n = strlen (name);
  if (n == 0 || n > S4K_WLOG_MARK_MAX)
    return -EINVAL;
  pthread_mutex_lock (&w->mu);
  int r = append_locked (w, S4K_WLOG_MARK, 0, 0, NULL, name);
  pthread_mutex_unlock (&w->mu);
  return r;
}

static const char *const zone_op_names[] =
  { [S4K_ZOP_CLOSE] = "close", [S4K_ZOP_FINISH] = "finish",
    [S4K_ZOP_OPEN] = "open", [S4K_ZOP_RESET] = "reset" };
#define NZOPS (sizeof zone_op_names / sizeof zone_op_names[0])

const char *
s4k_wlog_zone_op_name (unsigned op)
{
  return op < NZOPS ? zone_op_names[op] : NULL;
}

int
s4k_wlog_zones (struct s4k_wlog *w, const struct s4k_zone_config *z)
{
  char name[160];
  snprintf (name, sizeof name, S4K_WLOG_ZONES_PREFIX "zoned=%s zone-size=%"
            PRIu64 " zone-conventional=%" PRIu32,
            z->model == S4K_ZONED_HOST_MANAGED ? "host-managed"
                                               : "host-aware",
            z->size, z->conventional);
  pthread_mutex_lock (&w->mu);
  int r = append_locked (w, S4K_WLOG_MARK, 0, 0, NULL, name);
  pthread_mutex_unlock (&w->mu);
  return r;
}

int
s4k_wlog_zone_op (struct s4k_wlog *w, unsigned op, uint64_t lba, bool all)
{
  const char *opn = s4k_wlog_zone_op_name (op);
  if (!opn)
    return -EINVAL;
  char name[80];
  if (all)
    snprintf (name, sizeof name, S4K_WLOG_ZONE_OP_PREFIX "%s all", opn);
  else
    snprintf (name, sizeof name, S4K_WLOG_ZONE_OP_PREFIX "%s lba=%" PRIu64,
              opn, lba);
  /* A plain mark, as the geometry entry: replay-log replays nothing for
   * it; a reset's data follows as ZERO entries. */
  pthread_mutex_lock (&w->mu);
  int r = append_locked (w, S4K_WLOG_MARK, 0, 0, NULL, name);
  pthread_mutex_unlock (&w->mu);
  return r;
}

int
s4k_wlog_zone_wp (struct s4k_wlog *w, uint64_t lba, uint64_t wp,
                  bool non_seq)
{
  char name[96];
  snprintf (name, sizeof name, S4K_WLOG_ZONE_WP_PREFIX "lba=%" PRIu64
            " wp=%" PRIu64 "%s", lba, wp, non_seq ? " non-seq" : "");
  pthread_mutex_lock (&w->mu);
  int r = append_locked (w, S4K_WLOG_MARK, 0, 0, NULL, name);
  pthread_mutex_unlock (&w->mu);
  return r;
}

uint64_t
s4k_wlog_entries (struct s4k_wlog *w)
{
  pthread_mutex_lock (&w->mu);
  uint64_t n = w->entries;
  pthread_mutex_unlock (&w->mu);
  return n;
}

int
s4k_wlog_free (struct s4k_wlog *w)
{
  if (!w)
    return 0;
  int r = w->failed ? w->failed : write_super (w);
  if (r && !w->failed)
    fprintf (stderr, "sect4k: write-log=%s: %s\n", w->path,
             s4k_strerror (-r));
  if (close (w->fd) == -1 && r == 0)
    r = -errno;
  pthread_mutex_destroy (&w->mu);
  free (w->block);
  free (w->path);
  free (w);
  return r;
}

/* ---- reader ----------------------------------------------------------- */

struct s4k_wlog_reader {
  char *path;
  const unsigned char *map;
  uint64_t size;                /* bytes in the file */
  uint64_t nr_entries;
  uint32_t sectorsize;
  unsigned flags;
  uint64_t index, pos;          /* the next entry */
  struct s4k_wlog_info info;
  char mark[65536];             /* the last mark's name */
};

uint64_t
s4k_wlog_nr_entries (const struct s4k_wlog_reader *r)
{
  return r->nr_entries;
}

uint32_t
s4k_wlog_sectorsize (const struct s4k_wlog_reader *r)
{
  return r->sectorsize;
}

const struct s4k_wlog_info *
s4k_wlog_info (const struct s4k_wlog_reader *r)
{
  return &r->info;
}

void
s4k_wlog_rewind (struct s4k_wlog_reader *r)
{
  r->index = 0;
  r->pos = r->sectorsize;
}

void
s4k_wlog_close (struct s4k_wlog_reader *r)
{
  if (!r)
    return;
  if (r->map)
    munmap ((void *) r->map, r->size);
  free (r->path);
  free (r);
}

/* "sect4k-geometry size=N logical=L physical=P alignment=A export=NAME" */
static bool
parse_geometry (const char *s, struct s4k_wlog_info *info)
{
  int n = -1;
  struct s4k_geometry g;
  if (sscanf (s, GEOMETRY_PREFIX "size=%" SCNu64 " logical=%" SCNu32
              " physical=%" SCNu32 " alignment=%" SCNu32 " export=%n",
              &g.size, &g.logical, &g.physical, &g.alignment, &n) != 4 ||
      n < 0)
    return false;
  char e[64];
  if (s4k_geometry_check (&g, e, sizeof e) == -1)
    return false;
  info->known = true;
  info->geom = g;
  snprintf (info->export_name, sizeof info->export_name, "%s", s + n);
  return true;
}

/* "sect4k-zones zoned=MODEL zone-size=BYTES zone-conventional=N": the
 * keys as a device takes them, checked against the geometry alike. */
static bool
parse_zones (const char *s, struct s4k_wlog_info *info, char *why,
             size_t whylen)
{
  struct s4k_zone_config z;
  memset (&z, 0, sizeof z);
  char buf[256];
  snprintf (buf, sizeof buf, "%s", s + strlen (S4K_WLOG_ZONES_PREFIX));
  char *save = NULL;
  for (char *kv = strtok_r (buf, " ", &save); kv;
       kv = strtok_r (NULL, " ", &save)) {
    char *eq = strchr (kv, '=');
    if (!eq) {
      snprintf (why, whylen, "\"%s\" is not key=value", kv);
      return false;
    }
    *eq = '\0';
    int r = s4k_zone_set (&z, kv, eq + 1, why, whylen);
    if (r == 1)
      snprintf (why, whylen, "%s= is not a zone key", kv);
    if (r)
      return false;
  }
  if (z.model == S4K_ZONED_NONE) {
    snprintf (why, whylen, "no zoned=");
    return false;
  }
  if (info->known && s4k_zone_finish (&z, &info->geom, why, whylen) == -1)
    return false;
  info->zone = z;
  return true;
}

/* "sect4k-zone OP lba=LBA" or "sect4k-zone OP all". */
static bool
parse_zone_op (const char *s, struct s4k_wlog_entry *e)
{
  s += strlen (S4K_WLOG_ZONE_OP_PREFIX);
  for (unsigned op = 0; op < NZOPS; op++) {
    const char *n = zone_op_names[op];
    const size_t len = n ? strlen (n) : 0;
    if (!n || strncmp (s, n, len) || s[len] != ' ')
      continue;
    const char *a = s + len + 1;
    int end = -1;
    if (strcmp (a, "all") == 0)
      e->zone_all = true;
    else if (sscanf (a, "lba=%" SCNu64 "%n", &e->zone_lba, &end) != 1 ||
             a[end] || !isdigit ((unsigned char) a[4]))
      return false;
    e->zone_op = op;
    return true;
  }
  return false;
}

int
s4k_wlog_open (struct s4k_wlog_reader **out, const char *path,
               unsigned flags, char *err, size_t errlen)
{
  struct s4k_wlog_reader *r = calloc (1, sizeof *r);
  if (!r || !(r->path = strdup (path))) {
    free (r);
    snprintf (err, errlen, "%s: out of memory", path);
    return -1;
  }
  r->flags = flags;
  int fd = open (path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd == -1 || fstat (fd, &st) == -1) {
    snprintf (err, errlen, "%s: %s", path, s4k_strerror (errno));
    goto fail;
  }
  r->size = st.st_size;
  if (r->size < SUPER_BYTES) {
    snprintf (err, errlen, "%s: not a write log: %" PRIu64 " bytes, shorter "
              "than a super block", path, r->size);
    goto fail;
  }
  r->map = mmap (NULL, r->size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (r->map == MAP_FAILED) {
    r->map = NULL;
    snprintf (err, errlen, "%s: %s", path, s4k_strerror (errno));
    goto fail;
  }
  close (fd);
  fd = -1;
  uint64_t magic = get64 (r->map), version = get64 (r->map + 8);
  uint32_t ss;
  memcpy (&ss, r->map + 24, 4);
  r->sectorsize = le32toh (ss);
  r->nr_entries = get64 (r->map + 16);
  if (magic != S4K_WLOG_MAGIC) {
    snprintf (err, errlen, "%s: not a write log: magic 0x%" PRIx64
              " (dm-log-writes' is 0x%llx)", path, magic,
              (unsigned long long) S4K_WLOG_MAGIC);
    goto fail;
  }
  if (version != S4K_WLOG_VERSION) {
    snprintf (err, errlen, "%s: write log version %" PRIu64 " (only %u is "
              "known)", path, version, S4K_WLOG_VERSION);
    goto fail;
  }
  if (r->sectorsize < 512 || r->sectorsize > 65536 ||
      (r->sectorsize & (r->sectorsize - 1))) {
    snprintf (err, errlen, "%s: super block: sector size %" PRIu32 " is not "
              "a power of two in 512..65536", path, r->sectorsize);
    goto fail;
  }
  s4k_wlog_rewind (r);
  /* The geometry entry, if the first entry is one. */
  struct s4k_wlog_entry e;
  int n = s4k_wlog_next (r, &e, err, errlen);
  if (n == -1)
    goto fail;
  if (n == 1 && e.geometry && !parse_geometry (e.mark, &r->info)) {
    snprintf (err, errlen, "%s: entry 0 at byte %" PRIu64 ": a geometry "
              "entry that does not parse: \"%s\"", path, e.pos, e.mark);
    goto fail;
  }
  /* A zoned device's layout, entry 1 (a bad entry there is reported
   * when it is read). */
  char ignored[256];
  if (n == 1 && e.geometry)
    n = s4k_wlog_next (r, &e, ignored, sizeof ignored);
  if (n == 1 && e.zones) {
    char why[256];
    if (!parse_zones (e.mark, &r->info, why, sizeof why)) {
      snprintf (err, errlen, "%s: entry 1 at byte %" PRIu64 ": a zone "
                "layout entry that does not parse: \"%s\": %s", path, e.pos,
                e.mark, why);
      goto fail;
    }
  }
  s4k_wlog_rewind (r);
  *out = r;
  return 0;

fail:
  if (fd != -1)
    close (fd);
  s4k_wlog_close (r);
  return -1;
}

int
s4k_wlog_next (struct s4k_wlog_reader *r, struct s4k_wlog_entry *e,
               char *err, size_t errlen)
{
  const bool tail = r->index >= r->nr_entries;
  if (tail && !(r->flags & S4K_WLOG_READ_TAIL))
    return 0;
  const uint64_t ss = r->sectorsize, pos = r->pos;
  const char *why = NULL;
  char buf[160];

  memset (e, 0, sizeof *e);
  e->index = r->index;
  e->pos = pos;
  e->past_count = tail;
  if (pos > r->size || r->size - pos < ss) {
    if (tail)
      return 0;
    snprintf (buf, sizeof buf, "truncated: the header needs bytes up to %"
              PRIu64 ", the log has %" PRIu64 " (the super block counts %"
              PRIu64 " entries)", pos + ss, r->size, r->nr_entries);
    why = buf;
    goto bad;
  }
  const unsigned char *h = r->map + pos;
  e->sector = get64 (h);
  e->nr_sectors = get64 (h + 8);
  e->flags = get64 (h + 16);
  e->data_len = get64 (h + 24);
  /* Past the count, a header never written reads as zeroes, and one
   * with bits nobody sets is not a header. */
  if (tail && ((e->flags == 0 && e->nr_sectors == 0) ||
               (e->flags & ~(uint64_t) KNOWN_FLAGS)))
    return 0;
  if (e->nr_sectors > UINT64_MAX / ss || e->sector > UINT64_MAX / ss ||
      e->sector * ss > UINT64_MAX - e->nr_sectors * ss) {
    snprintf (buf, sizeof buf, "sector %" PRIu64 " + %" PRIu64 " overflows",
              e->sector, e->nr_sectors);
    why = buf;
    goto bad;
  }
  uint64_t data_bytes = 0;
  if (e->flags & S4K_WLOG_MARK) {
    if (e->data_len > ss - ENTRY_BYTES) {
      snprintf (buf, sizeof buf, "a mark of %" PRIu64 " bytes does not fit "
                "its %" PRIu64 "-byte block", e->data_len, ss);
      why = buf;
      goto bad;
    }
    memcpy (r->mark, h + ENTRY_BYTES, e->data_len);
    r->mark[e->data_len] = '\0';
    e->mark = r->mark;
    /* Ours is the first entry: a plain mark with our prefix, or (logs
     * written before) the private bit. */
    e->geometry = e->index == 0 &&
                  (e->flags & S4K_WLOG_GEOMETRY ||
                   strncmp (e->mark, GEOMETRY_PREFIX,
                            strlen (GEOMETRY_PREFIX)) == 0);
    /* A zoned device's: its layout, entry 1, and its zone operations. */
    e->zones = e->index == 1 &&
               strncmp (e->mark, S4K_WLOG_ZONES_PREFIX,
                        strlen (S4K_WLOG_ZONES_PREFIX)) == 0;
    if (!e->geometry && !e->zones &&
        strncmp (e->mark, S4K_WLOG_ZONE_OP_PREFIX,
                 strlen (S4K_WLOG_ZONE_OP_PREFIX)) == 0 &&
        !parse_zone_op (e->mark, e)) {
      snprintf (buf, sizeof buf, "a zone operation entry that does not "
                "parse: \"%.80s\"", e->mark);
      why = buf;
      goto bad;
    }
  } else {
    e->off = e->sector * ss;
    e->len = e->nr_sectors * ss;
    if (!(e->flags & S4K_WLOG_DISCARD))
      data_bytes = e->len;
  }
  if (r->size - pos - ss < data_bytes) {
    if (tail)
      return 0;
    snprintf (buf, sizeof buf, "truncated: %" PRIu64 " bytes of data need "
              "bytes up to %" PRIu64 ", the log has %" PRIu64, data_bytes,
              pos + ss + data_bytes, r->size);
    why = buf;
    goto bad;
  }
  if (r->info.known && e->off + e->len > r->info.geom.size) {
    if (tail)
      return 0;
    snprintf (buf, sizeof buf, "bytes [%" PRIu64 ", %" PRIu64 ") are past "
              "the end of the device (size %" PRIu64 ")", e->off,
              e->off + e->len, r->info.geom.size);
    why = buf;
    goto bad;
  }
  if (data_bytes)
    e->data = h + ss;
  r->pos = pos + ss + data_bytes;
  r->index++;
  return 1;

bad:
  snprintf (err, errlen, "%s: entry %" PRIu64 " at byte %" PRIu64 ": %s",
            r->path, e->index, pos, why);
  return -1;
}
