/* SPDX-License-Identifier: BSD-3-Clause */
/* The file store's synchronous I/O (see store_file.h for the other two
 * files).
 *
 * Whole physical sectors go to a regular file or a block device through
 * io_uring.  Each worker thread has its own ring, created on first use and
 * destroyed when the thread exits, so threads share no lock; the pieces
 * of one engine call (an RMW's head and tail reads, the writes of one
 * request) go to the kernel in one submission.  Buffered I/O that is
 * only a memory copy is the exception, because the ring costs more than
 * a syscall there: writes into the page cache (which io_uring hands to a
 * worker thread on file systems without async buffered writes, such as
 * ext4) go by one pwritev2 per request, and reads first take what the
 * page cache holds with preadv2 (RWF_NOWAIT).  Flush is
 * fdatasync through the ring, FUA is RWF_DSYNC.  Where io_uring cannot be
 * set up (old kernel, seccomp) or io=sync, pread/pwrite do the same work.
 *
 * Event loops (sect4k-server) instead submit requests to their own ring
 * (file_submit): nothing there waits for the disk.
 *
 * direct=true opens with O_DIRECT; buffers that are not aligned for it
 * (the client's, the engine's RMW buffer) bounce through an aligned
 * per-thread buffer.
 *
 * A write into a regular file first allocates the physical sectors it
 * touches (fallocate KEEP_SIZE) unless they are known to be allocated
 * already, so that a full file system fails the write with ENOSPC before
 * a byte of it lands, instead of tearing a sector (see alloc_map).
 *
 * Zero and trim use fallocate: PUNCH_HOLE frees whole sectors, ZERO_RANGE
 * zeroes without freeing; where the file system has neither, zeroes are
 * written (and fast-zero says no).  Extents come from SEEK_DATA/SEEK_HOLE,
 * holes shrunk to whole logical sectors. */
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

/* ---- per-thread ring and bounce buffer -------------------------------- */

struct thread_ctx {
  struct io_uring ring;
  int ring_state;               /* 0 untried, 1 ready, -errno failed */
  char *bounce;                 /* page-aligned, for O_DIRECT */
  size_t bounce_len;
};

static pthread_key_t ctx_key;
static pthread_once_t ctx_once = PTHREAD_ONCE_INIT;
static _Thread_local struct thread_ctx *tl_ctx;

static void
ctx_free (void *p)
{
  struct thread_ctx *c = p;
  if (c->ring_state == 1)
    io_uring_queue_exit (&c->ring);
  free (c->bounce);
  free (c);
}

static void
ctx_key_init (void)
{
  pthread_key_create (&ctx_key, ctx_free);
}

static struct thread_ctx *
thread_ctx (void)
{
  if (!tl_ctx) {
    pthread_once (&ctx_once, ctx_key_init);
    struct thread_ctx *c = calloc (1, sizeof *c);
    if (!c)
      return NULL;
    tl_ctx = c;
    pthread_setspecific (ctx_key, c);
  }
  return tl_ctx;
}

/* This thread's ring, or NULL: then the caller uses pread/pwrite. */
static struct io_uring *
thread_ring (struct file_store *f)
{
  if (!f->uring)
    return NULL;
  struct thread_ctx *c = thread_ctx ();
  if (!c)
    return NULL;
  if (c->ring_state == 0)
    c->ring_state = s4k_ring_init (&c->ring, RING_ENTRIES) == 0 ? 1 : -1;
  return c->ring_state == 1 ? &c->ring : NULL;
}

/* Gives up this thread's ring after the kernel refused it. */
static void
drop_ring (void)
{
  if (tl_ctx && tl_ctx->ring_state == 1) {
    io_uring_queue_exit (&tl_ctx->ring);
    tl_ctx->ring_state = -1;
  }
}

static char *
thread_bounce (size_t len)
{
  struct thread_ctx *c = thread_ctx ();
  if (!c)
    return NULL;
  if (c->bounce_len < len) {
    void *p;
    if (posix_memalign (&p, 4096, len) != 0)
      return NULL;
    free (c->bounce);
    c->bounce = p;
    c->bounce_len = len;
  }
  return c->bounce;
}

/* ---- reads and writes -------------------------------------------------- */


/* Advances p by a completed transfer of res bytes (res >= 0).  A read
 * at the end of the file (someone shrank it) reads zeroes. */
static int
advance (piece *p, int64_t res, bool write)
{
  if (res == 0) {
    if (write)
      return -EIO;
    memset (p->buf, 0, p->left);
    res = p->left;
  }
  p->buf += res;
  p->off += res;
  p->left -= res;
  return 0;
}

/* pread/pwrite: one vectored call for each run of contiguous pieces (the
 * head, middle and tail sectors of an RMW write are one run). */
static int
sync_rw (struct file_store *f, bool write, piece *p, unsigned n,
         bool fua)
{
  unsigned i = 0;
  while (i < n) {
    if (!p[i].left) {
      i++;
      continue;
    }
    struct iovec iov[MAX_PIECES];
    unsigned k = 0;
    size_t total = 0;
    for (unsigned j = i; j < n && total < MAX_SQE_BYTES; j++) {
      if (j > i && p[j].off != p[j - 1].off + p[j - 1].left)
        break;
      size_t len = p[j].left;
      if (len > MAX_SQE_BYTES - total)
        len = MAX_SQE_BYTES - total;
      iov[k++] = (struct iovec) { p[j].buf, len };
      total += len;
    }
    ssize_t r = write ? pwritev2 (f->fd, iov, k, p[i].off,
                                  fua ? RWF_DSYNC : 0)
                      : preadv (f->fd, iov, k, p[i].off);
    if (r == -1) {
      if (errno == EINTR)
        continue;
      return -errno;
    }
    if (r == 0) {
      int e = advance (&p[i], 0, write);
      if (e)
        return e;
      continue;
    }
    while (r > 0) {
      uint64_t a = (uint64_t) r < p[i].left ? (uint64_t) r : p[i].left;
      advance (&p[i], a, write);
      r -= a;
      if (!p[i].left)
        i++;
    }
  }
  return 0;
}

void
file_prep_rw (struct io_uring_sqe *sqe, struct file_store *f, bool write,
              const piece *p, bool fua)
{
  unsigned len = p->left < MAX_SQE_BYTES ? p->left : MAX_SQE_BYTES;
  if (write) {
    io_uring_prep_write (sqe, f->fd, p->buf, len, p->off);
    sqe->rw_flags = fua ? RWF_DSYNC : 0;
  }
  else
    io_uring_prep_read (sqe, f->fd, p->buf, len, p->off);
}

/* A piece's transfer completed with res: 1 if it needs another
 * submission (interrupted, or short), 0 once it is whole, or -errno (the
 * piece is given up). */
int
file_piece_result (piece *p, int res, bool write)
{
  if (res == -EINTR || res == -EAGAIN)
    return 1;
  int r = res < 0 ? res : advance (p, res, write);
  if (r) {
    p->left = 0;
    return r;
  }
  return p->left ? 1 : 0;
}

/* On this thread's own ring (room for MAX_PIECES). */
static void
ring_queue (struct io_uring *ring, struct file_store *f, bool write,
            piece *p, unsigned i, bool fua)
{
  struct io_uring_sqe *sqe = io_uring_get_sqe (ring);
  file_prep_rw (sqe, f, write, &p[i], fua);
  io_uring_sqe_set_data64 (sqe, i);
}

/* All pieces in one submission; short transfers are resubmitted.  Every
 * piece has completed (or failed) when this returns. */
static int
ring_rw (struct io_uring *ring, struct file_store *f, bool write,
         piece *p, unsigned n, bool fua)
{
  unsigned inflight = 0;
  int err = 0;

  for (unsigned i = 0; i < n; i++)
    if (p[i].left) {
      ring_queue (ring, f, write, p, i, fua);
      inflight++;
    }
  while (inflight) {
    int r = io_uring_submit_and_wait (ring, 1);
    if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY) {
      /* The kernel refuses the ring itself: nothing more will complete
       * through it.  Finish the remaining pieces with pread/pwrite. */
      drop_ring ();
      return err ? err : sync_rw (f, write, p, n, fua);
    }
    struct io_uring_cqe *cqe;
    while (io_uring_peek_cqe (ring, &cqe) == 0) {
      unsigned i = io_uring_cqe_get_data64 (cqe);
      int res = cqe->res;
      io_uring_cqe_seen (ring, cqe);
      inflight--;
      r = file_piece_result (&p[i], res, write);
      if (r < 0 && !err)
        err = r;
      else if (r == 1 && !err) {
        ring_queue (ring, f, write, p, i, fua);
        inflight++;
      }
    }
  }
  return err;
}

/* Reads what the page cache holds without waiting (RWF_NOWAIT): a hit
 * costs one plain syscall, less than a trip through the ring.  What
 * would block is left for the ring. */
void
file_cached_reads (struct file_store *f, piece *p, unsigned n)
{
  for (unsigned i = 0; i < n; i++) {
    struct iovec iov = { p[i].buf, p[i].left };
    ssize_t r = preadv2 (f->fd, &iov, 1, p[i].off, RWF_NOWAIT);
    if (r > 0)
      advance (&p[i], r, false);
  }
}

/* O_DIRECT needs aligned buffers (f->mem_align is 1 for buffered I/O):
 * pieces whose buffer is not go through a bounce buffer of this size. */
static bool
unaligned (const struct file_store *f, const void *buf)
{
  return (uintptr_t) buf % f->mem_align != 0;
}

size_t
file_bounce_need (const struct file_store *f, const struct s4k_io *io,
                  unsigned n)
{
  size_t len = 0;
  for (unsigned i = 0; i < n; i++)
    if (unaligned (f, io[i].buf))
      len += (io[i].len + 4095) & ~(size_t) 4095;
  return len;
}

void
file_set_pieces (const struct file_store *f, bool write,
                 const struct s4k_io *io, unsigned n, piece *p, char *bounce)
{
  for (unsigned i = 0, b = 0; i < n; i++) {
    p[i] = (piece) { .buf = io[i].buf, .off = io[i].off, .left = io[i].len };
    if (unaligned (f, io[i].buf)) {
      p[i].buf = bounce + b;
      if (write)
        memcpy (p[i].buf, io[i].buf, io[i].len);
      b += (io[i].len + 4095) & ~(size_t) 4095;
    }
  }
}

void
file_unbounce_reads (const struct file_store *f, const struct s4k_io *io,
                     unsigned n, const char *bounce)
{
  for (unsigned i = 0, b = 0; i < n; i++)
    if (unaligned (f, io[i].buf)) {
      memcpy (io[i].buf, bounce + b, io[i].len);
      b += (io[i].len + 4095) & ~(size_t) 4095;
    }
}

/* ---- allocation before writes ----------------------------------------- */

/* A write that finds its file system full part way through lands short
 * (the blocks already allocated are written, the rest are not): a torn
 * sector reported as ENOSPC.  Allocating the sectors first makes ENOSPC
 * come before anything is written.  fallocate costs a syscall (+1.5 us
 * on tmpfs, +5 us on ext4 per 4 KiB buffered write, measured), so it is
 * done once per sector: alloc_map remembers what is allocated. */


/* Sets, clears or tests (test: true if all are set) bits [a, b). */
enum map_op { MAP_SET, MAP_CLEAR, MAP_TEST };
static bool
alloc_map_op (struct file_store *f, uint64_t a, uint64_t b, enum map_op op)
{
  while (a < b) {
    uint64_t w = a / 64, lo = a % 64, n = 64 - lo < b - a ? 64 - lo : b - a;
    uint64_t m = (n == 64 ? ~(uint64_t) 0 : ((uint64_t) 1 << n) - 1) << lo;
    /* Loads first: untouched words of the map stay untouched. */
    uint64_t v = atomic_load_explicit (&f->alloc_map[w], memory_order_relaxed);
    if (op == MAP_TEST && (v & m) != m)
      return false;
    if (op == MAP_SET && (v & m) != m)
      atomic_fetch_or_explicit (&f->alloc_map[w], m, memory_order_relaxed);
    if (op == MAP_CLEAR && (v & m))
      atomic_fetch_and_explicit (&f->alloc_map[w], ~m, memory_order_relaxed);
    a += n;
  }
  return true;
}

/* The sectors [off, off+len) touches: all of them, or (whole) only those
 * it covers entirely. */
static void
sector_span (const struct file_store *f, uint64_t off, uint64_t len,
             bool whole, uint64_t *a, uint64_t *b)
{
  const uint64_t P = f->physical, s = off + f->shift, e = s + len;
  *a = whole && off ? (s + P - 1) / P : s / P;
  *b = whole && off + len < f->size ? e / P : (e + P - 1) / P;
  if (*b > f->alloc_bits)
    *b = f->alloc_bits;
}

/* Whether a write of [off, off+len) must allocate first. */
bool
file_needs_alloc (struct file_store *f, uint64_t off, uint64_t len)
{
  if (f->blockdev || f->no_alloc)
    return false;
  if (!f->alloc_map)
    return true;
  uint64_t a, b;
  sector_span (f, off, len, false, &a, &b);
  return !alloc_map_op (f, a, b, MAP_TEST);
}

/* After a write of [off, off+len), or before a punch (allocated = false). */
void
file_note_alloc (struct file_store *f, uint64_t off, uint64_t len,
                 bool allocated)
{
  if (!f->alloc_map)
    return;
  uint64_t a, b;
  sector_span (f, off, len, allocated, &a, &b);
  alloc_map_op (f, a, b, allocated ? MAP_SET : MAP_CLEAR);
}

/* Allocates [off, off+len) before writing it: 0 (also where the file
 * system cannot, remembered) or -errno, and then nothing is written. */
static int
alloc_range (struct file_store *f, uint64_t off, uint64_t len)
{
  int r = file_falloc (f, FALLOC_FL_KEEP_SIZE, off, len);
  if (falloc_unsupported (-r)) {
    f->no_alloc = true;
    r = 0;
  }
  return r;
}

void
file_alloc_map_new (struct file_store *f, const struct s4k_geometry *g)
{
  f->physical = g->physical;
  f->shift = (g->physical - g->alignment) % g->physical;
  f->alloc_bits = (f->size + f->shift + f->physical - 1) / f->physical;
  uint64_t bytes = (f->alloc_bits + 63) / 64 * 8;
  if (f->blockdev || f->readonly || bytes > MAX_ALLOC_MAP)
    return;
  /* Pages of it are only touched where sectors are written. */
  void *m = mmap (NULL, bytes, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED)
    return;
  madvise (m, bytes, MADV_NOHUGEPAGE);
  f->alloc_map = m;
  f->alloc_map_bytes = bytes;
}

/* Reads or writes the engine's pieces on this thread's ring (or with
 * pread/pwrite). */
static int
file_rw (struct file_store *f, bool write, const struct s4k_io *io,
         unsigned n, bool fua)
{
  piece p[MAX_PIECES];
  char *bounce = NULL;
  int r;

  /* The engine sends at most 3 pieces; split longer lists. */
  while (n > MAX_PIECES) {
    if ((r = file_rw (f, write, io, MAX_PIECES, fua)) != 0)
      return r;
    io += MAX_PIECES;
    n -= MAX_PIECES;
  }
  if (write && f->readonly)
    return -EROFS;
  for (unsigned i = 0; write && i < n; i++)
    if (file_needs_alloc (f, io[i].off, io[i].len) &&
        (r = alloc_range (f, io[i].off, io[i].len)) != 0)
      return r;
  size_t need = file_bounce_need (f, io, n);
  if (need && !(bounce = thread_bounce (need)))
    return -ENOMEM;
  file_set_pieces (f, write, io, n, p, bounce);

  /* Buffered writes are plain copies into the page cache, and file
   * systems without async buffered writes (ext4) make io_uring hand each
   * one to a worker thread: measured 2.5x slower than pwritev.  So those
   * go straight to pwritev2, one call per request. */
  struct io_uring *ring = write && !f->direct ? NULL : thread_ring (f);
  if (ring && !write && !f->direct)
    file_cached_reads (f, p, n);
  r = ring ? ring_rw (ring, f, write, p, n, fua)
           : sync_rw (f, write, p, n, fua);
  if (r == 0 && !write && need)
    file_unbounce_reads (f, io, n, bounce);
  for (unsigned i = 0; r == 0 && write && i < n; i++)
    file_note_alloc (f, io[i].off, io[i].len, true);
  return r;
}

int
file_read (struct s4k_store *s, const struct s4k_io *io, unsigned n)
{
  return file_rw ((struct file_store *) s, false, io, n, false);
}

int
file_write (struct s4k_store *s, const struct s4k_io *io, unsigned n,
            bool fua)
{
  return file_rw ((struct file_store *) s, true, io, n, fua);
}

/* ---- flush, zero, trim ------------------------------------------------- */

int
file_flush (struct s4k_store *s)
{
  struct file_store *f = (struct file_store *) s;
  struct io_uring *ring = thread_ring (f);

  if (ring) {
    struct io_uring_sqe *sqe = io_uring_get_sqe (ring);
    io_uring_prep_fsync (sqe, f->fd, IORING_FSYNC_DATASYNC);
    for (;;) {
      int r = io_uring_submit_and_wait (ring, 1);
      if (r == -EINTR || r == -EAGAIN || r == -EBUSY)
        continue;
      if (r < 0) {
        drop_ring ();
        break;                  /* fdatasync below */
      }
      struct io_uring_cqe *cqe;
      if (io_uring_peek_cqe (ring, &cqe) != 0)
        continue;
      r = cqe->res;
      io_uring_cqe_seen (ring, cqe);
      if (r != -EINTR)
        return r;
      sqe = io_uring_get_sqe (ring);
      io_uring_prep_fsync (sqe, f->fd, IORING_FSYNC_DATASYNC);
    }
  }
  while (fdatasync (f->fd) == -1)
    if (errno != EINTR)
      return -errno;
  return 0;
}

/* fallocate, or -errno. */
int
file_falloc (struct file_store *f, int mode, uint64_t off, uint64_t len)
{
  while (fallocate (f->fd, mode, off, len) == -1)
    if (errno != EINTR)
      return -errno;
  return 0;
}

/* The slow way: writes zeroes. */
static int
write_zeroes (struct file_store *f, uint64_t len, uint64_t off, bool fua)
{
  while (len) {
    struct s4k_io io[MAX_PIECES];
    unsigned n = 0;
    for (; n < MAX_PIECES && len; n++) {
      uint64_t k = len < ZERO_BUF_BYTES ? len : ZERO_BUF_BYTES;
      io[n] = (struct s4k_io) { (void *) f->zeroes, k, off };
      off += k;
      len -= k;
    }
    int r = file_rw (f, true, io, n, fua);
    if (r)
      return r;
  }
  return 0;
}

int
file_zero (struct s4k_store *s, uint64_t len, uint64_t off, bool may_trim,
           bool fua)
{
  struct file_store *f = (struct file_store *) s;
  int r = -EOPNOTSUPP;

  if (f->readonly)
    return -EROFS;
  file_note_alloc (f, off, len, false);
  if (may_trim && !f->no_punch) {
    r = file_falloc (f, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, len);
    if (unsupported (-r))
      f->no_punch = true;
  }
  if (r && !f->no_zero_range) {
    r = file_falloc (f, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, off, len);
    if (unsupported (-r))
      f->no_zero_range = true;
  }
  if (r && !f->blockdev && !f->no_punch && f->no_zero_range) {
    /* tmpfs and friends: punch, then allocate again (a hint only: the
     * hole already reads as zeroes). */
    r = file_falloc (f, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, len);
    if (unsupported (-r))
      f->no_punch = true;
    else if (r == 0 && !may_trim)
      file_falloc (f, FALLOC_FL_KEEP_SIZE, off, len);
  }
  if (f->no_punch && f->no_zero_range)
    f->fast_zero = false;
  if (r == -EOPNOTSUPP || r == -ENOSYS || (r == -EINVAL && f->blockdev))
    return write_zeroes (f, len, off, fua);
  if (r == 0 && fua)
    r = file_flush (s);
  return r;
}

/* Regular files: a punched hole reads as zeroes.  Block devices: zeroes
 * if the device can write them without data, else a plain discard.
 * Where neither works, trim is only advice and does nothing. */
int
file_trim (struct s4k_store *s, uint64_t len, uint64_t off, bool fua)
{
  struct file_store *f = (struct file_store *) s;
  int r = -EOPNOTSUPP;

  if (f->readonly)
    return -EROFS;
  file_note_alloc (f, off, len, false);
  if (!f->no_punch) {
    r = file_falloc (f, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, len);
    if (unsupported (-r))
      f->no_punch = true;
  }
  if (r && f->blockdev) {
    uint64_t range[2] = { off, len };
    r = ioctl (f->fd, BLKDISCARD, range) == -1 ? -errno : 0;
  }
  if (r == -EOPNOTSUPP || r == -ENOSYS || r == -EINVAL)
    r = 0;
  if (r == 0 && fua)
    r = file_flush (s);
  return r;
}

bool
file_can_fast_zero (struct s4k_store *s)
{
  return ((struct file_store *) s)->fast_zero;
}

/* ---- extents ----------------------------------------------------------- */

int
file_extents (struct s4k_store *s, uint64_t len, uint64_t off,
              s4k_extent_fn *fn, void *opaque)
{
  struct file_store *f = (struct file_store *) s;
  const uint64_t L = f->logical, end = off + len;
  uint64_t pos = off, done = off;  /* runs reported up to done */
  int r;

  if (f->blockdev)
    return (r = fn (opaque, off, len, false)) < 0 ? r : 0;
  while (pos < end) {
    off_t data = lseek (f->fd, pos, SEEK_DATA);
    if (data == -1 && errno == ENXIO)
      data = end;               /* a hole up to the end of the file */
    else if (data == -1)
      break;                    /* no SEEK_DATA: all data */
    if ((uint64_t) data > pos) {
      /* A hole [pos, data): report only whole logical sectors of it. */
      uint64_t hs = (pos + L - 1) / L * L;
      uint64_t he = ((uint64_t) data < end ? (uint64_t) data : end) / L * L;
      if (hs < he) {
        if (done < hs && (r = fn (opaque, done, hs - done, false)) != 0)
          return r < 0 ? r : 0;
        if ((r = fn (opaque, hs, he - hs, true)) != 0)
          return r < 0 ? r : 0;
        done = he;
      }
      pos = data;
      continue;
    }
    off_t hole = lseek (f->fd, pos, SEEK_HOLE);
    if (hole == -1 || (uint64_t) hole <= pos)
      break;
    pos = hole;
  }
  if (done < end && (r = fn (opaque, done, end - done, false)) < 0)
    return r;
  return 0;
}

