/* SPDX-License-Identifier: BSD-3-Clause */
/* The store interface: private to the engine (lib/) and the tests that
 * build stores.  Front ends use the device API in sect4k/sect4k.h.
 *
 * A store reads and writes whole physical sectors, unless it says it can
 * do more (struct s4k_store's properties); the engine (dev_plan.h) owns the
 * RMW and holds the sector locks of every sector a store call touches. */
#ifndef S4K_STORE_H
#define S4K_STORE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "sect4k/extents.h"
#include "sect4k/sect4k.h"

/* One contiguous piece of I/O.  For store calls, off and off+len are
 * physical sector boundaries. */
struct s4k_io {
  void *buf;
  uint64_t len;
  uint64_t off;
};

struct s4k_store;

/* An asynchronous read, write, zero, trim or flush of whole physical
 * sectors (stores whose `async` is true), or the extents of whole
 * sectors (stores whose `async_extents` is true).  Zero, trim and
 * extents cover io[0] (buf NULL).  The engine fills the first part; the
 * rest is the store's. */
#define S4K_REQ_PIECES 3
struct s4k_store_req {
  struct s4k_loop *loop;
  enum { S4K_REQ_READ, S4K_REQ_WRITE, S4K_REQ_ZERO, S4K_REQ_TRIM,
         S4K_REQ_FLUSH, S4K_REQ_EXTENTS } kind;
  bool fua;
  bool may_trim;                   /* zero: may free the sectors */
  struct s4k_io io[S4K_REQ_PIECES];
  unsigned n;
  /* Extents: the runs go to extent_fn, as the extents op's fn, on the
   * loop's thread before done. */
  s4k_extent_fn *extent_fn;
  void *extent_opaque;
  /* Called on the loop's thread once every piece has finished, unless
   * submit returned the result at once. */
  void (*done) (struct s4k_store_req *r, int res);
  /* The store's own. */
  struct s4k_store *store;
  struct s4k_store_piece {
    struct s4k_completion c;
    struct s4k_store_req *req;
    char *buf;
    uint64_t off, left;
    bool alloc;                    /* a write's fallocate comes first */
  } piece[S4K_REQ_PIECES];
  unsigned inflight;
  int err;
  void *bounce;                    /* malloc'd; freed with the request */
  size_t bounce_len;
  uint64_t cover_last, cover_clock; /* the upstream store: what a flush
                                       covers (struct flush_cover), */
  unsigned cover_gen;              /* and the connection it went on */
  struct s4k_extent_rounder round; /* the upstream store: extents so far, */
  uint64_t round_from;             /* and where its last block status began */
};

/* A store sees whole physical sectors, or (partial_writes) a write of
 * any range, or (lockfree_reads) a read of any range. */
struct s4k_store_ops {
  const char *name;
  /* n pieces submitted together (an RMW reads head and tail at once). */
  int (*read) (struct s4k_store *s, const struct s4k_io *io, unsigned n);
  int (*write) (struct s4k_store *s, const struct s4k_io *io, unsigned n,
                bool fua);
  /* Optional: a write the device does atomically (README "Atomic
   * writes"): all of it or none at a power cut.  Only a synchronous
   * store that can lose part of a write (the fault layer) has it; the
   * others get write, which no power cut interrupts.  [off, off+len):
   * the request's own bytes within io's (whole physical sectors, after
   * an RMW), which the cut report names. */
  int (*write_atomic) (struct s4k_store *s, const struct s4k_io *io,
                       unsigned n, bool fua, uint64_t len, uint64_t off);
  /* Optional, with lockfree_reads: a read the caller holds the shared
   * sector locks of (see `contended` in struct s4k_store). */
  int (*read_locked) (struct s4k_store *s, const struct s4k_io *io,
                      unsigned n);
  /* Optional, with lockfree_reads, for s4k_read_iov: [off, off+len)
   * (any range inside the device) as at most max pieces, pointers into
   * memory that stays in place until close (iov_base NULL: zeroes).
   * Returns the number of pieces, or -ENOBUFS. */
  int (*read_iov) (struct s4k_store *s, uint64_t len, uint64_t off,
                   struct iovec *iov, unsigned max);
  /* Whole physical sectors. */
  int (*zero) (struct s4k_store *s, uint64_t len, uint64_t off,
               bool may_trim, bool fua);
  int (*trim) (struct s4k_store *s, uint64_t len, uint64_t off, bool fua);
  int (*flush) (struct s4k_store *s);
  /* Calls fn for consecutive runs covering [off, off+len) (it may stop
   * early, and may go past the end); zero = reads as zeroes (a hole). */
  int (*extents) (struct s4k_store *s, uint64_t len, uint64_t off,
                  s4k_extent_fn *fn, void *opaque);
  /* True if zeroing whole sectors is cheap (fast-zero). */
  bool (*can_fast_zero) (struct s4k_store *s);
  /* Optional: true if the store can only be read (writes get EROFS). */
  bool (*readonly) (const struct s4k_store *s);
  /* Optional: one line on where the data lives and how it is reached. */
  const char *(*info) (const struct s4k_store *s);
  void (*close) (struct s4k_store *s);
  /* With async: starts req on req->loop's ring.  Returns 1 if it is in
   * flight (req->done follows), else its result (0 or -errno) now.
   * S4K_REQ_EXTENTS only with async_extents. */
  int (*submit) (struct s4k_store *s, struct s4k_store_req *req);
  /* Optional, with async: the loop stops before the store closes
   * (s4k_dev_loop_gone); a store that keeps anything of a loop's lets
   * go of it, and never touches the loop again. */
  void (*loop_gone) (struct s4k_store *s, struct s4k_loop *loop);
  /* Optional: the front end stops (s4k_dev_stop, from any thread, maybe
   * more than once): requests still in flight, the final flush and close
   * must end; a store whose waits may have none (the upstream's with
   * upstream-timeout=0) bounds them from now on, those already waiting
   * too. */
  void (*stop) (struct s4k_store *s);
};
/* A store and what the engine may ask of it beyond whole sectors (set
 * by whoever builds it; a layer over a store, such as the fault layer,
 * offers none of them unless it can keep the promise itself). */
struct s4k_store {
  const struct s4k_store_ops *ops;
  bool async;                      /* submit works: requests can go
                                      through a ring */
  bool async_extents;              /* submit takes extents too (a store
                                      whose extents wait on the network;
                                      the others answer them at once) */
  /* Reads need no sector lock: a read never touches memory a concurrent
   * write, zero or trim of any sector frees or moves, a write or zero
   * changes only the bytes it covers, and a read overlapping a write in
   * flight gets, for each logical sector, the old or the new bytes,
   * never a mix (the memory store checks a sequence word, see its top;
   * read_locked above when it gives up).  Such a store also reads any
   * byte range, so a read gets just its own bytes, not whole sectors.
   * Stores that cannot promise it (a bounce buffer, a torn-write fault
   * model, a file's page cache) leave it false, and reads take the
   * shared locks of their physical sectors, which keep every writer of
   * those sectors out. */
  bool lockfree_reads;
  /* Set by the engine over a store with lockfree_reads (NULL under a
   * layer, which serializes its calls): a lock-free read that met
   * writers of its sectors too often calls it for the piece io; it
   * takes the shared locks of the piece's physical sectors, which keep
   * those writers out, and calls read_locked. */
  int (*contended) (void *opaque, const struct s4k_io *io);
  void *contended_opaque;
  /* Writes of any byte range, done in place: a write changes exactly
   * the bytes it covers and keeps the rest of every sector it cuts (the
   * memory store copies them into its chunk; an upstream whose minimum
   * block size divides every request the device lets through does its
   * own merge).  The engine then sends a write that cuts physical
   * sectors as it is, in one write, under the exclusive locks of the
   * sectors it touches, instead of reading, merging and writing back
   * whole sectors: the same result for every other sect4k request, one
   * store call instead of two.  Zeroes keep the engine's RMW (it learns
   * whether a cut sector is left all zero, so the store can zero it
   * whole and stay sparse).  A store that must see whole sectors (a
   * torn-write model, an upstream asked for whole sectors) leaves it
   * false. */
  bool partial_writes;
  /* Set by the engine (0: none): a write of at most this many bytes may
   * be atomic (README "Atomic writes"), so a store with lockfree_reads
   * must keep every such write whole to a read, across its chunks too
   * (the memory store: see "Atomic writes" at its top). */
  uint32_t atomic_max;
  /* Times writes the store had acknowledged may have been lost (an
   * upstream connection died before a flush covered them); 0 for a store
   * that cannot lose any.  The engine tells each client connection at
   * its next flush (struct s4k_client). */
  _Atomic uint64_t losses;
};

/* True if a store over an upstream (another NBD server, nbdkit's next
 * layer) whose minimum block size is min (0: none said, so 1 as the NBD
 * spec asks) may set partial_writes: the user did not turn it off
 * (upstream-partial-writes=false) and every write the device lets
 * through is a multiple of min (under strict=true, multiples of the
 * logical size; otherwise any byte). */
bool s4k_upstream_partial_writes (const struct s4k_config *c, uint64_t min);

struct s4k_store *s4k_mem_store_new (const struct s4k_geometry *g,
                                     char *err, size_t errlen);
/* File or block device store.  Sets *size to the device size it serves
 * (from the file when c->geom.size is 0). */
struct s4k_store *s4k_file_store_new (const struct s4k_config *c,
                                      uint64_t *size, char *err,
                                      size_t errlen);
/* Bytes of data memory held by a memory store (for tests). */
uint64_t s4k_mem_store_bytes (struct s4k_store *s);

/* A device over a store built by the caller. */
/* Takes ownership of store (closed on failure too). */
int s4k_dev_new (struct s4k_dev **out, const struct s4k_config *c,
                 struct s4k_store *store, char *err, size_t errlen);

/* File store queries for the tests (front ends use s4k_dev_readonly and
 * s4k_dev_store_info). */
/* One line saying how the store serves, e.g. "file=/x/disk.img: regular
 * file, 1073741824 bytes, io_uring, buffered, read-write". */
const char *s4k_file_store_info (const struct s4k_store *s);
/* True if the store was opened read-only (asked for, or the file cannot
 * be opened for writing); writes then fail with EROFS. */
bool s4k_file_store_readonly (const struct s4k_store *s);
/* True if reads and writes go through io_uring, false for pread/pwrite. */
bool s4k_file_store_uring (const struct s4k_store *s);

#endif
