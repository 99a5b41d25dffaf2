/* SPDX-License-Identifier: BSD-3-Clause */
/* The file store's private parts, shared by its three files:
 *   store_file.c       opening and validating the file, the ops, close;
 *   store_file_io.c    the synchronous I/O the plugin's threads do
 *                      (per-thread rings), flush, zero, trim, extents, and
 *                      the allocation before writes;
 *   store_file_aio.c   requests submitted to an event loop's ring
 *                      (sect4k-server): submit and complete. */
#ifndef S4K_STORE_FILE_H
#define S4K_STORE_FILE_H

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

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


/* One piece in progress: buf, off and left of struct s4k_store_piece
 * (the synchronous paths leave its completion unused). */
typedef struct s4k_store_piece piece;

static inline bool
unsupported (int e)
{
  return e == EOPNOTSUPP || e == ENOSYS;
}

/* fallocate's mode 0 cannot be done here (EINVAL: not this mode). */
static inline bool
falloc_unsupported (int e)
{
  return unsupported (e) || e == EINVAL;
}

/* store_file_io.c: the ops the synchronous path serves (also the
 * fallbacks of the asynchronous one). */
int file_read (struct s4k_store *s, const struct s4k_io *io, unsigned n);
int file_write (struct s4k_store *s, const struct s4k_io *io, unsigned n,
                bool fua);
int file_zero (struct s4k_store *s, uint64_t len, uint64_t off,
               bool may_trim, bool fua);
int file_trim (struct s4k_store *s, uint64_t len, uint64_t off, bool fua);
int file_flush (struct s4k_store *s);
int file_extents (struct s4k_store *s, uint64_t len, uint64_t off,
                  s4k_extent_fn *fn, void *opaque);
bool file_can_fast_zero (struct s4k_store *s);
int file_falloc (struct file_store *f, int mode, uint64_t off, uint64_t len);

/* store_file_io.c: the allocation before writes (alloc_map). */
void file_alloc_map_new (struct file_store *f, const struct s4k_geometry *g);
bool file_needs_alloc (struct file_store *f, uint64_t off, uint64_t len);
void file_note_alloc (struct file_store *f, uint64_t off, uint64_t len,
                      bool allocated);

/* store_file_io.c: pieces and bounce buffers, one way for both paths. */
struct io_uring_sqe;
void file_prep_rw (struct io_uring_sqe *sqe, struct file_store *f, bool write,
                   const piece *p, bool fua);
int file_piece_result (piece *p, int res, bool write);
void file_cached_reads (struct file_store *f, piece *p, unsigned n);
size_t file_bounce_need (const struct file_store *f, const struct s4k_io *io,
                         unsigned n);
void file_set_pieces (const struct file_store *f, bool write,
                      const struct s4k_io *io, unsigned n, piece *p,
                      char *bounce);
void file_unbounce_reads (const struct file_store *f, const struct s4k_io *io,
                          unsigned n, const char *bounce);

/* store_file_aio.c */
int file_submit (struct s4k_store *s, struct s4k_store_req *q);

#endif
