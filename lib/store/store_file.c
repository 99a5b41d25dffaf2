/* SPDX-License-Identifier: BSD-3-Clause */
/* The file and block-device store: opening and validating the file,
 * the store's ops, close.  Its I/O is in store_file_io.c (synchronous)
 * and store_file_aio.c (event loops). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <liburing.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

#include "sect4k/sect4k.h"
#include "store_file.h"

/* ---- lifecycle --------------------------------------------------------- */

static void
file_close (struct s4k_store *s)
{
  struct file_store *f = (struct file_store *) s;
  close (f->fd);
  munmap ((void *) f->zeroes, ZERO_BUF_BYTES);
  if (f->alloc_map)
    munmap ((void *) f->alloc_map, f->alloc_map_bytes);
  free (f);
}

static const struct s4k_store_ops file_ops = {
  .name = "file",
  .read = file_read,
  .write = file_write,
  .zero = file_zero,
  .trim = file_trim,
  .flush = file_flush,
  .extents = file_extents,
  .can_fast_zero = file_can_fast_zero,
  .readonly = s4k_file_store_readonly,
  .info = s4k_file_store_info,
  .close = file_close,
  .submit = file_submit,
};

const char *
s4k_file_store_info (const struct s4k_store *s)
{
  return ((const struct file_store *) s)->info;
}

bool
s4k_file_store_readonly (const struct s4k_store *s)
{
  return ((const struct file_store *) s)->readonly;
}

bool
s4k_file_store_uring (const struct s4k_store *s)
{
  return ((const struct file_store *) s)->uring;
}

/* Empty if io_uring can serve, else why not. */
static void
probe_uring (char *why, size_t len)
{
  struct io_uring ring;
  int r = io_uring_queue_init (4, &ring, 0);
  if (r < 0) {
    snprintf (why, len, "io_uring unavailable (io_uring_setup: %s)",
              s4k_strerror (-r));
    return;
  }
  struct io_uring_probe *p = io_uring_get_probe_ring (&ring);
  if (!p || !io_uring_opcode_supported (p, IORING_OP_READ) ||
      !io_uring_opcode_supported (p, IORING_OP_WRITE) ||
      !io_uring_opcode_supported (p, IORING_OP_FSYNC))
    snprintf (why, len, "io_uring lacks read, write or fsync");
  else
    why[0] = '\0';
  if (p)
    io_uring_free_probe (p);
  io_uring_queue_exit (&ring);
}

/* Whether a block device can write zeroes without sending data. */
static bool
blockdev_writes_zeroes (dev_t rdev)
{
  char path[128];
  const char *fmt[] = { "/sys/dev/block/%u:%u/queue/write_zeroes_max_bytes",
                        "/sys/dev/block/%u:%u/../queue/write_zeroes_max_bytes" };
  for (int i = 0; i < 2; i++) {
    snprintf (path, sizeof path, fmt[i], major (rdev), minor (rdev));
    FILE *fp = fopen (path, "r");
    if (fp) {
      unsigned long long v = 0;
      int n = fscanf (fp, "%llu", &v);
      fclose (fp);
      return n == 1 && v > 0;
    }
  }
  return false;
}

static uint64_t
lowbit (uint64_t x)
{
  return x & -x;
}

/* direct=true: every offset and length the store uses must suit O_DIRECT.
 * They are multiples of gran; checks the file system agrees, by asking
 * (statx) and by trying. */
static int
check_direct (struct file_store *f, const struct s4k_geometry *g,
              const char *path, char *err, size_t errlen)
{
  uint64_t gran = g->physical;
  if (g->alignment && lowbit (g->alignment) < gran)
    gran = lowbit (g->alignment);
  if (lowbit (f->size) < gran)
    gran = lowbit (f->size);
  unsigned offset_align = 0;
  f->mem_align = 4096;

  struct statx stx;
  if (statx (f->fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 &&
      (stx.stx_mask & STATX_DIOALIGN) && stx.stx_dio_offset_align) {
    offset_align = stx.stx_dio_offset_align;
    f->mem_align = stx.stx_dio_mem_align ? stx.stx_dio_mem_align : 4096;
  }
  else if (f->blockdev) {
    int bs;
    if (ioctl (f->fd, BLKSSZGET, &bs) == 0)
      offset_align = bs;
  }
  if (offset_align && gran % offset_align) {
    snprintf (err, errlen, "direct=true: file=%s needs O_DIRECT I/O in "
              "multiples of %u bytes, but physical sectors here fall on "
              "%" PRIu64 "-byte boundaries (physical=%" PRIu32
              ", alignment-offset=%" PRIu32 ", size %" PRIu64 ")", path,
              offset_align, gran, g->physical, g->alignment, f->size);
    return -1;
  }
  void *buf;
  if (posix_memalign (&buf, 4096, gran) != 0) {
    snprintf (err, errlen, "direct=true: out of memory");
    return -1;
  }
  ssize_t r = pread (f->fd, buf, gran, 0);
  int e = errno;
  free (buf);
  if (r == -1) {
    snprintf (err, errlen, "direct=true: file=%s: the file system refuses "
              "an O_DIRECT read of %" PRIu64 " bytes (physical=%" PRIu32
              ", alignment-offset=%" PRIu32 "): %s", path, gran, g->physical,
              g->alignment, s4k_strerror (e));
    return -1;
  }
  return 0;
}

/* Sets the file to serve, its size and read-only state; fills err and
 * returns -1 on failure. */
static int
open_file (struct file_store *f, const struct s4k_config *c, char *ro_why,
           size_t ro_len, char *err, size_t errlen)
{
  const char *path = c->file;
  const struct s4k_geometry *g = &c->geom;
  const bool have_size = g->size != 0;
  const int flags = O_CLOEXEC | (c->direct ? O_DIRECT : 0);
  bool created = false;
  struct stat st;

  f->readonly = c->readonly;
  if (f->readonly) {
    snprintf (ro_why, ro_len, "read-only: asked for");
    f->fd = open (path, O_RDONLY | flags);
  }
  else {
    f->fd = open (path, O_RDWR | flags);
    if (f->fd == -1 && errno == ENOENT && have_size) {
      f->fd = open (path, O_RDWR | O_CREAT | O_EXCL | flags, 0644);
      created = f->fd != -1 || errno == EINVAL;
      if (f->fd == -1 && errno != EINVAL) {
        snprintf (err, errlen, "file=%s: cannot create it: %s", path,
                  s4k_strerror (errno));
        return -1;
      }
    }
    else if (f->fd == -1 && (errno == EACCES || errno == EROFS ||
                             errno == EPERM || errno == ETXTBSY)) {
      snprintf (ro_why, ro_len, "read-only: file=%s cannot be opened for "
                "writing (%s)", path, s4k_strerror (errno));
      f->fd = open (path, O_RDONLY | flags);
      f->readonly = true;
    }
  }
  if (f->fd == -1) {
    int e = errno;
    if (created)
      unlink (path);
    if (e == ENOENT)
      snprintf (err, errlen, "file=%s: does not exist (give size= to "
                "create it)", path);
    else if (e == EINVAL && c->direct)
      snprintf (err, errlen, "direct=true: the file system of file=%s does "
                "not support O_DIRECT", path);
    else
      snprintf (err, errlen, "file=%s: cannot open it: %s", path,
                s4k_strerror (e));
    return -1;
  }
  if (fstat (f->fd, &st) == -1) {
    snprintf (err, errlen, "file=%s: fstat: %s", path, s4k_strerror (errno));
    return -1;
  }

  if (S_ISBLK (st.st_mode)) {
    f->blockdev = true;
    if (ioctl (f->fd, BLKGETSIZE64, &f->size) == -1) {
      snprintf (err, errlen, "file=%s: BLKGETSIZE64: %s", path,
                s4k_strerror (errno));
      return -1;
    }
    if (have_size) {
      snprintf (err, errlen, "size=%" PRIu64 ": not allowed with a block "
                "device (file=%s has its own size, %" PRIu64 " bytes)",
                g->size, path, f->size);
      return -1;
    }
    f->fast_zero = blockdev_writes_zeroes (st.st_rdev);
  }
  else if (S_ISREG (st.st_mode)) {
    uint64_t fsize = st.st_size;
    f->size = have_size ? g->size : fsize;
    if (!have_size && fsize == 0) {
      snprintf (err, errlen, "file=%s: the file is empty (give size= to "
                "grow it)", path);
      return -1;
    }
    if (have_size && g->size < fsize) {
      snprintf (err, errlen, "size=%" PRIu64 ": smaller than file=%s "
                "(%" PRIu64 " bytes); refusing to truncate it (leave size= "
                "out to use the file's size)", g->size, path, fsize);
      return -1;
    }
    if (have_size && g->size > fsize) {
      if (f->readonly) {
        snprintf (err, errlen, "size=%" PRIu64 ": larger than file=%s "
                  "(%" PRIu64 " bytes), which is open read-only", g->size,
                  path, fsize);
        return -1;
      }
      if (ftruncate (f->fd, g->size) == -1) {
        int e = errno;
        if (created)
          unlink (path);
        snprintf (err, errlen, "file=%s: cannot grow it to size=%" PRIu64
                  ": %s", path, g->size, s4k_strerror (e));
        return -1;
      }
    }
    /* Fast zero needs hole punching; ask beyond the end of the file,
     * where it changes nothing. */
    f->fast_zero = true;
    if (!f->readonly &&
        unsupported (-file_falloc (f,
                                   FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                   f->size, g->logical))) {
      f->no_punch = true;
      f->fast_zero = false;
    }
  }
  else {
    snprintf (err, errlen, "file=%s: not a regular file or block device",
              path);
    return -1;
  }
  if (f->size % g->logical) {
    snprintf (err, errlen, "file=%s: its size %" PRIu64 " is not a multiple "
              "of logical=%" PRIu32, path, f->size, g->logical);
    return -1;
  }
  if (c->direct && check_direct (f, g, path, err, errlen) == -1) {
    if (created)
      unlink (path);
    return -1;
  }
  return 0;
}

struct s4k_store *
s4k_file_store_new (const struct s4k_config *c, uint64_t *size, char *err,
                    size_t errlen)
{
  char ro_why[256] = "read-write", io_why[128] = "";

  if (!c->file || c->geom.logical == 0 || c->geom.physical == 0) {
    snprintf (err, errlen, "file store: no file= or no geometry");
    return NULL;
  }
  struct file_store *f = calloc (1, sizeof *f);
  if (!f) {
    snprintf (err, errlen, "file store: out of memory");
    return NULL;
  }
  f->base.ops = &file_ops;
  f->fd = -1;
  f->logical = c->geom.logical;
  f->direct = c->direct;
  f->mem_align = 1;
  f->zeroes = mmap (NULL, ZERO_BUF_BYTES, PROT_READ,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (f->zeroes == MAP_FAILED) {
    snprintf (err, errlen, "file store: mmap: %s", s4k_strerror (errno));
    free (f);
    return NULL;
  }
  if (open_file (f, c, ro_why, sizeof ro_why, err, errlen) == -1) {
    if (f->fd >= 0)
      close (f->fd);
    munmap ((void *) f->zeroes, ZERO_BUF_BYTES);
    free (f);
    return NULL;
  }
  file_alloc_map_new (f, &c->geom);
  if (c->no_uring)
    snprintf (io_why, sizeof io_why, "io=sync");
  else
    probe_uring (io_why, sizeof io_why);
  f->uring = io_why[0] == '\0';
  f->base.async = f->uring;
  snprintf (f->info, sizeof f->info, "file=%s: %s, %" PRIu64 " bytes, %s%s%s"
            ", %s, %s", c->file, f->blockdev ? "block device" : "regular file",
            f->size, f->uring ? (f->direct ? "io_uring"
                                           : "io_uring (page-cache hits read at "
                                             "once; buffered writes by pwritev2 "
                                             "except from an event loop)")
                              : "pread/pwrite (", io_why,
            f->uring ? "" : ")", f->direct ? "O_DIRECT" : "buffered", ro_why);
  *size = f->size;
  return &f->base;
}

