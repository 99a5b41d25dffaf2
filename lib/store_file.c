/* File and block-device store.
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
#include "store.h"

#define RING_ENTRIES 16u
#define MAX_PIECES 8u               /* pieces in one submission */
#define MAX_SQE_BYTES (1u << 30)    /* below the kernel's MAX_RW_COUNT */
#define ZERO_BUF_BYTES (1u << 20)   /* written when fallocate cannot zero */
#define MAX_ALLOC_MAP (256u << 20)  /* bytes: 8T of 4K sectors, 1T of 512 */

struct file_store {
  struct s4k_store base;
  int fd;
  uint64_t size;
  uint32_t logical;
  bool blockdev, readonly, direct, uring;
  size_t mem_align;             /* O_DIRECT buffer alignment (1: buffered) */
  _Atomic bool no_punch, no_zero_range, fast_zero;
  /* One bit per physical sector, set once we have written or allocated
   * it since open and not punched it since: writes into those need no
   * fallocate.  Sector k is bit (off + shift) / physical.  NULL (block
   * device, or a map over MAX_ALLOC_MAP): every write allocates first. */
  _Atomic uint64_t *alloc_map;
  uint64_t alloc_map_bytes, alloc_bits;
  uint32_t physical, shift;
  _Atomic bool no_alloc;        /* fallocate unsupported: writes unguarded */
  const char *zeroes;           /* ZERO_BUF_BYTES of read-only zeroes */
  char info[1024];
};

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

/* A ring for this thread only: the cheapest setup flags the kernel has. */
static int
ring_init (struct io_uring *ring)
{
  static const unsigned flags[] = {
    IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
    IORING_SETUP_COOP_TASKRUN,
    0,
  };
  int r = -EINVAL;
  for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
    if ((r = io_uring_queue_init (RING_ENTRIES, ring, flags[i])) != -EINVAL)
      break;
  return r;
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
    c->ring_state = ring_init (&c->ring) == 0 ? 1 : -1;
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

/* One piece in progress: buf, off and left of struct s4k_store_piece
 * (the synchronous paths leave its completion unused). */
typedef struct s4k_store_piece piece;

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

static void
prep_rw (struct io_uring_sqe *sqe, struct file_store *f, bool write,
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
static int
piece_result (piece *p, int res, bool write)
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
  prep_rw (sqe, f, write, &p[i], fua);
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
      r = piece_result (&p[i], res, write);
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
static void
cached_reads (struct file_store *f, piece *p, unsigned n)
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

static size_t
bounce_need (const struct file_store *f, const struct s4k_io *io, unsigned n)
{
  size_t len = 0;
  for (unsigned i = 0; i < n; i++)
    if (unaligned (f, io[i].buf))
      len += (io[i].len + 4095) & ~(size_t) 4095;
  return len;
}

static void
set_pieces (const struct file_store *f, bool write, const struct s4k_io *io,
            unsigned n, piece *p, char *bounce)
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

static void
unbounce_reads (const struct file_store *f, const struct s4k_io *io,
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

static bool falloc_unsupported (int e);
static int falloc (struct file_store *f, int mode, uint64_t off,
                   uint64_t len);

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
static bool
needs_alloc (struct file_store *f, uint64_t off, uint64_t len)
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
static void
note_alloc (struct file_store *f, uint64_t off, uint64_t len, bool allocated)
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
  int r = falloc (f, FALLOC_FL_KEEP_SIZE, off, len);
  if (falloc_unsupported (-r)) {
    f->no_alloc = true;
    r = 0;
  }
  return r;
}

static void
alloc_map_new (struct file_store *f, const struct s4k_geometry *g)
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
    if (needs_alloc (f, io[i].off, io[i].len) &&
        (r = alloc_range (f, io[i].off, io[i].len)) != 0)
      return r;
  size_t need = bounce_need (f, io, n);
  if (need && !(bounce = thread_bounce (need)))
    return -ENOMEM;
  set_pieces (f, write, io, n, p, bounce);

  /* Buffered writes are plain copies into the page cache, and file
   * systems without async buffered writes (ext4) make io_uring hand each
   * one to a worker thread: measured 2.5x slower than pwritev.  So those
   * go straight to pwritev2, one call per request. */
  struct io_uring *ring = write && !f->direct ? NULL : thread_ring (f);
  if (ring && !write && !f->direct)
    cached_reads (f, p, n);
  r = ring ? ring_rw (ring, f, write, p, n, fua)
           : sync_rw (f, write, p, n, fua);
  if (r == 0 && !write && need)
    unbounce_reads (f, io, n, bounce);
  for (unsigned i = 0; r == 0 && write && i < n; i++)
    note_alloc (f, io[i].off, io[i].len, true);
  return r;
}

static int
file_read (struct s4k_store *s, const struct s4k_io *io, unsigned n)
{
  return file_rw ((struct file_store *) s, false, io, n, false);
}

static int
file_write (struct s4k_store *s, const struct s4k_io *io, unsigned n,
            bool fua)
{
  return file_rw ((struct file_store *) s, true, io, n, fua);
}

/* ---- asynchronous requests, on a front end's ring --------------------- */

static bool
unsupported (int e)
{
  return e == EOPNOTSUPP || e == ENOSYS;
}

/* fallocate's mode 0 cannot be done here (EINVAL: not this mode). */
static bool
falloc_unsupported (int e)
{
  return unsupported (e) || e == EINVAL;
}

static void piece_done (struct s4k_completion *c, int res);
static int file_zero (struct s4k_store *s, uint64_t len, uint64_t off,
                      bool may_trim, bool fua);
static int file_trim (struct s4k_store *s, uint64_t len, uint64_t off,
                      bool fua);

static bool
zero_or_trim (const struct s4k_store_req *q)
{
  return q->kind == S4K_REQ_ZERO || q->kind == S4K_REQ_TRIM;
}

/* The fallocate mode for a zero or trim on the ring, or 0 where only the
 * synchronous path's fallbacks (zeroes written, discard) can do it. */
static int
falloc_mode (const struct file_store *f, const struct s4k_store_req *q)
{
  if ((q->kind == S4K_REQ_TRIM || q->may_trim) && !f->no_punch)
    return FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE;
  if (q->kind == S4K_REQ_ZERO && !f->no_zero_range)
    return FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE;
  return 0;
}

/* Queues a piece on the loop's ring; the loop submits it and hands the
 * completion to piece_done.  A flush, and the second piece of a zero or
 * trim with FUA, is an fdatasync; a write piece first allocates (alloc). */
static void
queue_piece (struct file_store *f, struct s4k_store_req *q, piece *p)
{
  struct io_uring *ring = q->loop->ring;
  struct io_uring_sqe *sqe = io_uring_get_sqe (ring);
  if (!sqe) {
    io_uring_submit (ring);     /* empties the submission queue */
    sqe = io_uring_get_sqe (ring);
  }
  if (!sqe) {
    /* The kernel took none of a full queue: no way to go on. */
    fputs ("sect4k: io_uring submission queue full\n", stderr);
    abort ();
  }
  if (q->kind == S4K_REQ_FLUSH || (zero_or_trim (q) && p != q->piece))
    io_uring_prep_fsync (sqe, f->fd, IORING_FSYNC_DATASYNC);
  else if (zero_or_trim (q))
    io_uring_prep_fallocate (sqe, f->fd, falloc_mode (f, q), p->off, p->left);
  else if (p->alloc)
    io_uring_prep_fallocate (sqe, f->fd, FALLOC_FL_KEEP_SIZE, p->off, p->left);
  else
    prep_rw (sqe, f, q->kind == S4K_REQ_WRITE, p, q->fua);
  io_uring_sqe_set_data (sqe, &p->c);
  q->inflight++;
}

/* A zero's or trim's fallocate finished with res: 0 once done, 1 if an
 * fdatasync (FUA) or another try was queued, or -errno.  What the file
 * system does not support goes the synchronous way, whose fallbacks are
 * remembered for the next time. */
static int
falloc_result (struct file_store *f, struct s4k_store_req *q, int res)
{
  if (res == -EINTR || res == -EAGAIN)
    return 1;
  if (unsupported (-res) || (res == -EINVAL && f->blockdev) ||
      (res < 0 && q->kind == S4K_REQ_TRIM && f->blockdev)) {
    struct s4k_store *s = &f->base;
    const struct s4k_io *io = &q->io[0];
    return q->kind == S4K_REQ_ZERO
           ? file_zero (s, io->len, io->off, q->may_trim, q->fua)
           : file_trim (s, io->len, io->off, q->fua);
  }
  if (res < 0)
    return res;
  if (q->fua) {
    q->piece[1] = (piece) { .c.fn = piece_done, .req = q };
    queue_piece (f, q, &q->piece[1]);
  }
  return 0;
}

/* Queues the reads or writes of a request's pieces. */
static void
queue_rw (struct file_store *f, struct s4k_store_req *q)
{
  for (unsigned i = 0; i < q->n; i++)
    if (q->piece[i].left)
      queue_piece (f, q, &q->piece[i]);
}

/* A write piece's fallocate finished with res: 1 to try it again, 0 once
 * done (also where the file system cannot: remembered), or -errno.  (A
 * fallocate failing does not cancel a write linked to it, on Linux 6.18:
 * so the writes wait for every allocation.) */
static int
alloc_result (struct file_store *f, int res)
{
  if (res == -EINTR || res == -EAGAIN)
    return 1;
  if (res < 0 && falloc_unsupported (-res)) {
    f->no_alloc = true;
    return 0;
  }
  return res < 0 ? res : 0;
}

static void
piece_done (struct s4k_completion *c, int res)
{
  piece *p = s4k_container_of (c, piece, c);
  struct s4k_store_req *q = p->req;
  struct file_store *f = (struct file_store *) q->store;
  int r;

  q->inflight--;
  if (q->kind == S4K_REQ_FLUSH || (zero_or_trim (q) && p != q->piece))
    r = res == -EINTR || res == -EAGAIN ? 1 : res < 0 ? res : 0;
  else if (zero_or_trim (q)) {
    r = falloc_result (f, q, res);
    if (r == 0 && q->inflight)
      return;                   /* the FUA fdatasync follows */
  }
  else if (p->alloc) {
    r = alloc_result (f, res);
    p->alloc = r == 1;
    if (r == 0 && !q->inflight && !q->err) {
      queue_rw (f, q);          /* all allocated: now the writes */
      return;
    }
  }
  else if (q->kind == S4K_REQ_WRITE) {
    r = piece_result (p, res, true);
    if (r == 0) {
      const struct s4k_io *io = &q->io[p - q->piece];
      note_alloc (f, io->off, io->len, true);
    }
  }
  else
    r = piece_result (p, res, false);
  if (r < 0 && !q->err)
    q->err = r;
  else if (r == 1 && !q->err)
    queue_piece (f, q, p);
  if (q->inflight)
    return;
  if (!q->err && q->kind == S4K_REQ_READ && q->bounce)
    unbounce_reads (f, q->io, q->n, q->bounce);
  q->done (q, q->err);
}

/* Reads what the page cache holds at once; everything else (cache
 * misses, writes, zeroes and trims by fallocate, flushes) goes through
 * the loop's ring, so a slow disk holds up only the requests waiting for
 * it.  Buffered writes too, though on file systems without async
 * buffered writes (ext4) the kernel runs them on its worker threads:
 * blocking the loop on a dirty-page throttle would stall every
 * connection it serves. */
static int
file_submit (struct s4k_store *s, struct s4k_store_req *q)
{
  struct file_store *f = (struct file_store *) s;
  const bool write = q->kind == S4K_REQ_WRITE;

  q->store = s;
  q->err = 0;
  q->inflight = 0;
  if ((write || zero_or_trim (q)) && f->readonly)
    return -EROFS;
  if (q->kind == S4K_REQ_FLUSH) {
    q->piece[0] = (piece) { .c.fn = piece_done, .req = q };
    queue_piece (f, q, &q->piece[0]);
    return 1;
  }
  if (zero_or_trim (q)) {
    note_alloc (f, q->io[0].off, q->io[0].len, false);
    if (!falloc_mode (f, q))
      return q->kind == S4K_REQ_ZERO
             ? file_zero (s, q->io[0].len, q->io[0].off, q->may_trim, q->fua)
             : file_trim (s, q->io[0].len, q->io[0].off, q->fua);
    q->piece[0] = (piece) { .c.fn = piece_done, .req = q,
                            .off = q->io[0].off, .left = q->io[0].len };
    queue_piece (f, q, &q->piece[0]);
    return 1;
  }
  size_t need = bounce_need (f, q->io, q->n);
  if (need > q->bounce_len) {
    free (q->bounce);
    q->bounce_len = 0;
    if (posix_memalign (&q->bounce, 4096, need) != 0) {
      q->bounce = NULL;
      return -ENOMEM;
    }
    q->bounce_len = need;
  }
  set_pieces (f, write, q->io, q->n, q->piece, q->bounce);
  if (!write && !f->direct)
    cached_reads (f, q->piece, q->n);
  /* Sectors not known to be allocated are allocated first, all of them
   * before any write (piece_done then queues the writes): ENOSPC then
   * leaves every sector as it was. */
  for (unsigned i = 0; i < q->n; i++) {
    piece *p = &q->piece[i];
    p->c.fn = piece_done;
    p->req = q;
    p->alloc = write && p->left && needs_alloc (f, p->off, p->left);
    if (p->alloc)
      queue_piece (f, q, p);
  }
  if (!q->inflight)
    queue_rw (f, q);
  return q->inflight ? 1 : 0;
}

/* ---- flush, zero, trim ------------------------------------------------- */

static int
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
static int
falloc (struct file_store *f, int mode, uint64_t off, uint64_t len)
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

static int
file_zero (struct s4k_store *s, uint64_t len, uint64_t off, bool may_trim,
           bool fua)
{
  struct file_store *f = (struct file_store *) s;
  int r = -EOPNOTSUPP;

  if (f->readonly)
    return -EROFS;
  note_alloc (f, off, len, false);
  if (may_trim && !f->no_punch) {
    r = falloc (f, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, len);
    if (unsupported (-r))
      f->no_punch = true;
  }
  if (r && !f->no_zero_range) {
    r = falloc (f, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, off, len);
    if (unsupported (-r))
      f->no_zero_range = true;
  }
  if (r && !f->blockdev && !f->no_punch && f->no_zero_range) {
    /* tmpfs and friends: punch, then allocate again (a hint only: the
     * hole already reads as zeroes). */
    r = falloc (f, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, len);
    if (unsupported (-r))
      f->no_punch = true;
    else if (r == 0 && !may_trim)
      falloc (f, FALLOC_FL_KEEP_SIZE, off, len);
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
static int
file_trim (struct s4k_store *s, uint64_t len, uint64_t off, bool fua)
{
  struct file_store *f = (struct file_store *) s;
  int r = -EOPNOTSUPP;

  if (f->readonly)
    return -EROFS;
  note_alloc (f, off, len, false);
  if (!f->no_punch) {
    r = falloc (f, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, len);
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

static bool
file_can_fast_zero (struct s4k_store *s)
{
  return ((struct file_store *) s)->fast_zero;
}

/* ---- extents ----------------------------------------------------------- */

static int
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
        unsupported (-falloc (f, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
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
  alloc_map_new (f, &c->geom);
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
