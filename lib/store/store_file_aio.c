/* SPDX-License-Identifier: BSD-3-Clause */
/* The file store's asynchronous path: requests an event loop
 * (sect4k-server) submits to its own ring, so nothing there waits for
 * the disk.  A request's pieces are queued together; a write's sectors
 * are allocated (all of them) before any of its writes is sent, since a
 * failed fallocate does not cancel a linked write. */
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

/* ---- asynchronous requests, on a front end's ring --------------------- */

static void piece_done (struct s4k_completion *c, int res);

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
  struct io_uring_sqe *sqe = s4k_ring_sqe (ring);
  if (q->kind == S4K_REQ_FLUSH || (zero_or_trim (q) && p != q->piece))
    io_uring_prep_fsync (sqe, f->fd, IORING_FSYNC_DATASYNC);
  else if (zero_or_trim (q))
    io_uring_prep_fallocate (sqe, f->fd, falloc_mode (f, q), p->off, p->left);
  else if (p->alloc)
    io_uring_prep_fallocate (sqe, f->fd, FALLOC_FL_KEEP_SIZE, p->off, p->left);
  else
    file_prep_rw (sqe, f, q->kind == S4K_REQ_WRITE, p, q->fua);
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
    r = file_piece_result (p, res, true);
    if (r == 0) {
      const struct s4k_io *io = &q->io[p - q->piece];
      file_note_alloc (f, io->off, io->len, true);
    }
  }
  else
    r = file_piece_result (p, res, false);
  if (r < 0 && !q->err)
    q->err = r;
  else if (r == 1 && !q->err)
    queue_piece (f, q, p);
  if (q->inflight)
    return;
  if (!q->err && q->kind == S4K_REQ_READ && q->bounce)
    file_unbounce_reads (f, q->io, q->n, q->bounce);
  q->done (q, q->err);
}

/* Reads what the page cache holds at once; everything else (cache
 * misses, writes, zeroes and trims by fallocate, flushes) goes through
 * the loop's ring, so a slow disk holds up only the requests waiting for
 * it.  Buffered writes too, though on file systems without async
 * buffered writes (ext4) the kernel runs them on its worker threads:
 * blocking the loop on a dirty-page throttle would stall every
 * connection it serves. */
int
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
    file_note_alloc (f, q->io[0].off, q->io[0].len, false);
    if (!falloc_mode (f, q))
      return q->kind == S4K_REQ_ZERO
             ? file_zero (s, q->io[0].len, q->io[0].off, q->may_trim, q->fua)
             : file_trim (s, q->io[0].len, q->io[0].off, q->fua);
    q->piece[0] = (piece) { .c.fn = piece_done, .req = q,
                            .off = q->io[0].off, .left = q->io[0].len };
    queue_piece (f, q, &q->piece[0]);
    return 1;
  }
  size_t need = file_bounce_need (f, q->io, q->n);
  if (need > q->bounce_len) {
    free (q->bounce);
    q->bounce_len = 0;
    if (posix_memalign (&q->bounce, 4096, need) != 0) {
      q->bounce = NULL;
      return -ENOMEM;
    }
    q->bounce_len = need;
  }
  file_set_pieces (f, write, q->io, q->n, q->piece, q->bounce);
  if (!write && !f->direct)
    file_cached_reads (f, q->piece, q->n);
  /* Sectors not known to be allocated are allocated first, all of them
   * before any write (piece_done then queues the writes): ENOSPC then
   * leaves every sector as it was. */
  for (unsigned i = 0; i < q->n; i++) {
    piece *p = &q->piece[i];
    p->c.fn = piece_done;
    p->req = q;
    p->alloc = write && p->left && file_needs_alloc (f, p->off, p->left);
    if (p->alloc)
      queue_piece (f, q, p);
  }
  if (!q->inflight)
    queue_rw (f, q);
  return q->inflight ? 1 : 0;
}

