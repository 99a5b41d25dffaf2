/* sect4k engine: block devices with any sector geometry.
 *
 * Plain C, no nbdkit types.  The plugin (plugin/) and the standalone server
 * (server/) are glue around this API.
 *
 * Errors: functions return 0 on success and a negative errno on failure.
 * Functions that can fail for a reason a user must read take an error
 * buffer (err, errlen) and fill it with one line naming the key, the value
 * and the rule.
 */
#ifndef SECT4K_H
#define SECT4K_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define S4K_VERSION "0.1.0"

#define S4K_MIN_LOGICAL 512u
#define S4K_MAX_LOGICAL 65536u             /* NBD caps the minimum at 64 KiB */
#define S4K_MAX_PHYSICAL (32u << 20)       /* nbdkit caps preferred at 32 MiB */
#define S4K_DEFAULT_MAX_REQUEST (32u << 20)
#define S4K_MAX_MAX_REQUEST (64u << 20)    /* nbdkit's own request limit */

/* ---- geometry ---------------------------------------------------------- */

struct s4k_geometry {
  uint64_t size;        /* bytes, multiple of logical */
  uint32_t logical;     /* L: power of two, 512..64K */
  uint32_t physical;    /* P: power of two, L..32M */
  uint32_t alignment;   /* A: multiple of L, 0 <= A < P */
};

/* Checks the geometry contract; fills err on failure. */
int s4k_geometry_check (const struct s4k_geometry *g, char *err, size_t errlen);

/* Shifting offsets by (P - A) mod P puts every physical boundary on a
 * multiple of P, so sector k is simply [kP, (k+1)P) in shifted space.
 * These run for every request: inline, and shifts rather than divisions
 * (P is a power of two). */
static inline uint64_t
s4k_sector_shift (const struct s4k_geometry *g)
{
  return (g->physical - g->alignment) & (g->physical - 1);
}

/* Index of the physical sector holding byte off (off < size). */
static inline uint64_t
s4k_sector_index (const struct s4k_geometry *g, uint64_t off)
{
  return (off + s4k_sector_shift (g)) >> __builtin_ctz (g->physical);
}

/* Byte range [*start, *end) of physical sector k, clipped to [0, size). */
static inline void
s4k_sector_range (const struct s4k_geometry *g, uint64_t k,
                  uint64_t *start, uint64_t *end)
{
  const uint64_t shift = s4k_sector_shift (g);
  const uint64_t s = k << __builtin_ctz (g->physical), e = s + g->physical;
  *start = s > shift ? s - shift : 0;
  *end = e - shift < g->size ? e - shift : g->size;
}

/* True if off is a physical boundary (0, size, or off = A mod P). */
static inline bool
s4k_is_boundary (const struct s4k_geometry *g, uint64_t off)
{
  return off == 0 || off == g->size ||
         ((off + s4k_sector_shift (g)) & (g->physical - 1)) == 0;
}

/* Number of physical sectors (including short first/last ones). */
uint64_t s4k_sector_count (const struct s4k_geometry *g);
/* Lowest aligned LBA as scsi_debug means it: A / L. */
uint64_t s4k_lowest_aligned (const struct s4k_geometry *g);

/* ---- configuration (shared key=value parser of plugin and server) ------ */

struct s4k_config {
  struct s4k_geometry geom;
  uint32_t max_request;
  bool strict;
  bool readonly;              /* set by the front end (nbdkit -r, server -r) */
  const char *model;          /* preset name or NULL */
  /* Which keys the user gave, so presets never override them. */
  bool have_size, have_logical, have_physical, have_alignment,
       have_lowest_aligned, have_max_request;
  uint64_t lowest_aligned;
  /* File store (file=, direct=, io=). */
  const char *file;           /* NULL: memory store */
  bool direct;                /* O_DIRECT */
  bool no_uring;              /* io=sync, or SECT4K_NO_URING=1 */
  /* Upstream store (upstream=, upstream-connections=). */
  const char *upstream;       /* NBD URI; NULL: not upstream */
  uint32_t upstream_connections;  /* 0: the default */
  bool store_sized;           /* the front end's store gives the size
                                 (the nbdkit filter): size= not needed */
  /* Statistics (statsfile=, stats-interval=, stats=). */
  const char *statsfile;      /* JSON written at close and every interval */
  uint32_t stats_interval;    /* seconds; 0: at close only */
  bool stats_summary;         /* human summary to stderr at close */
  bool stats_count;           /* count requests: set by config_finish when
                                 statsfile= or stats= asks for them */
};

void s4k_config_init (struct s4k_config *c);
/* Applies one key=value.  Unknown key, malformed number, unknown model:
 * returns -1 with err filled. */
int s4k_config_set (struct s4k_config *c, const char *key, const char *value,
                    char *err, size_t errlen);
/* Applies the preset, fills defaults, checks every rule. */
int s4k_config_finish (struct s4k_config *c, char *err, size_t errlen);
/* "key=VALUE  description (default ...)" lines for --help. */
extern const char s4k_config_help[];
/* Parses nbdkit's size syntax: digits with optional b/k/M/G/T/P/E suffix
 * (powers of 1024).  Returns -1 if malformed or out of range. */
int s4k_parse_size (const char *str, uint64_t *out);
int s4k_parse_bool (const char *str, bool *out);
/* strerror without its locale lookup: thread-safe, and no gettext lock
 * (which deadlocks nbdkit's exit under ASan once strerror has run). */
const char *s4k_strerror (int errnum);

/* ---- stores: whole physical sectors, no RMW ---------------------------- */

/* One contiguous piece of I/O.  For store calls, off and off+len are
 * physical sector boundaries. */
struct s4k_io {
  void *buf;
  uint64_t len;
  uint64_t off;
};

typedef int s4k_extent_fn (void *opaque, uint64_t off, uint64_t len,
                           bool zero);

/* ---- event loops: how asynchronous requests reach a front end's ring --- */

struct io_uring;

/* The structure of type T whose member m is at p. */
#define s4k_container_of(p, T, m) ((T *) ((char *) (p) - offsetof (T, m)))

/* Every io_uring submission the engine makes on a front end's ring carries
 * a pointer to one of these as its user data: the loop hands each
 * completion to c->fn (res is cqe->res).  Front ends may use the same
 * convention for their own operations. */
struct s4k_completion {
  void (*fn) (struct s4k_completion *c, int res);
  struct s4k_completion *next;     /* for the loop's post queue */
};

/* One event-loop thread, as the engine sees it. */
struct s4k_loop {
  struct io_uring *ring;           /* the engine queues store I/O here;
                                      the loop submits it */
  /* Runs c->fn (c, 0) soon on the loop's own thread.  Any thread may call
   * it (a sector lock is released by whichever thread held it). */
  void (*post) (struct s4k_loop *loop, struct s4k_completion *c);
};

/* Hands every completion the ring holds to its s4k_completion (skipping
 * user data NULL) and marks them seen; returns how many there were. */
unsigned s4k_loop_reap (struct io_uring *ring);
/* Runs a post queue kept as a stack (newest first, linked by next)
 * oldest first: c->fn (c, 0) each. */
void s4k_loop_run_posted (struct s4k_completion *newest);

struct s4k_store;

/* An asynchronous read, write, zero, trim or flush of whole physical
 * sectors (stores whose `async` is true).  Zero and trim cover io[0]
 * (buf NULL).  The engine fills the first part; the rest is the
 * store's. */
#define S4K_REQ_PIECES 3
struct s4k_store_req {
  struct s4k_loop *loop;
  enum { S4K_REQ_READ, S4K_REQ_WRITE, S4K_REQ_ZERO, S4K_REQ_TRIM,
         S4K_REQ_FLUSH } kind;
  bool fua;
  bool may_trim;                   /* zero: may free the sectors */
  struct s4k_io io[S4K_REQ_PIECES];
  unsigned n;
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
  } piece[S4K_REQ_PIECES];
  unsigned inflight;
  int err;
  void *bounce;                    /* malloc'd; freed with the request */
  size_t bounce_len;
};

struct s4k_store_ops {
  const char *name;
  /* n pieces submitted together (an RMW reads head and tail at once). */
  int (*read) (struct s4k_store *s, const struct s4k_io *io, unsigned n);
  int (*write) (struct s4k_store *s, const struct s4k_io *io, unsigned n,
                bool fua);
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
   * flight (req->done follows), else its result (0 or -errno) now. */
  int (*submit) (struct s4k_store *s, struct s4k_store_req *req);
};
struct s4k_store {
  const struct s4k_store_ops *ops;
  bool async;                      /* submit works: requests can go
                                      through a ring */
};

struct s4k_store *s4k_mem_store_new (const struct s4k_geometry *g,
                                     char *err, size_t errlen);
/* File or block device store.  Sets *size to the device size it serves
 * (from the file when c->geom.size is 0). */
struct s4k_store *s4k_file_store_new (const struct s4k_config *c,
                                      uint64_t *size, char *err,
                                      size_t errlen);
/* Bytes of data memory held by a memory store (for tests). */
uint64_t s4k_mem_store_bytes (struct s4k_store *s);

/* ---- the device: geometry + RMW + per-sector locking over a store ------ */

#define S4K_FUA        1u
#define S4K_MAY_TRIM   2u
#define S4K_FAST_ZERO  4u

#define S4K_DEBUG_RMW  1u

typedef void s4k_debug_fn (void *opaque, const char *msg);

struct s4k_dev;

/* Takes ownership of store (closed on failure too). */
int s4k_dev_new (struct s4k_dev **out, const struct s4k_config *c,
                 struct s4k_store *store, char *err, size_t errlen);
/* Builds the store the config asks for (memory for now), then the device. */
int s4k_dev_open (struct s4k_dev **out, const struct s4k_config *c,
                  char *err, size_t errlen);
/* Starts the device's background work (the periodic statistics saver).
 * Call it after any fork: threads do not survive one. */
void s4k_dev_start (struct s4k_dev *d);
/* Stops it, writes the final statistics, frees everything. */
void s4k_dev_close (struct s4k_dev *d);

const struct s4k_geometry *s4k_dev_geometry (const struct s4k_dev *d);
uint32_t s4k_dev_max_request (const struct s4k_dev *d);
bool s4k_dev_can_fast_zero (const struct s4k_dev *d);
/* True if the store can only be read (file= opened read-only). */
bool s4k_dev_readonly (const struct s4k_dev *d);
/* One line on where the data lives and how it is reached, e.g.
 * "file=/x/disk.img: regular file, ..., io_uring, buffered, read-write". */
const char *s4k_dev_store_info (const struct s4k_dev *d);
void s4k_dev_set_debug (struct s4k_dev *d, unsigned mask,
                        s4k_debug_fn *fn, void *opaque);
/* Export description, e.g. "512e: logical 512, physical 4096, alignment
 * offset 3584 (lowest aligned LBA 7)". */
void s4k_dev_describe (const struct s4k_dev *d, char *buf, size_t len);

/* Data path.  -EINVAL: refused under strict (see s4k_refused), or a read
 * or trim out of range; -ENOSPC: a write or zero out of range; -ENOTSUP:
 * fast-zero refused; other -errno from the store. */
int s4k_read (struct s4k_dev *d, void *buf, uint64_t len, uint64_t off);
int s4k_write (struct s4k_dev *d, const void *buf, uint64_t len,
               uint64_t off, unsigned flags);
int s4k_zero (struct s4k_dev *d, uint64_t len, uint64_t off, unsigned flags);
int s4k_trim (struct s4k_dev *d, uint64_t len, uint64_t off, unsigned flags);
int s4k_flush (struct s4k_dev *d);
int s4k_cache (struct s4k_dev *d, uint64_t len, uint64_t off);
/* Runs are reported at logical granularity. */
int s4k_extents (struct s4k_dev *d, uint64_t len, uint64_t off,
                 s4k_extent_fn *fn, void *opaque);

/* ---- asynchronous requests (event-loop front ends) -------------------- */

/* True if the store can run requests through an event loop's ring (the
 * file store with io_uring).  Otherwise (the memory store) the s4k_aio
 * calls below answer at once through the synchronous ones, which never
 * wait on a disk. */
bool s4k_dev_async (const struct s4k_dev *d);

/* A slot for one asynchronous request at a time, bound to one loop (and
 * used only on its thread).  On such a thread, use these for every
 * request that takes sector locks (read, write, zero, trim): the
 * synchronous calls would sleep on a lock that a request in flight on
 * the same loop holds, and never wake.  Cache and extents take no lock
 * and are only synchronous. */
struct s4k_aio;
typedef void s4k_aio_done_fn (void *opaque, int r);
struct s4k_aio *s4k_aio_new (struct s4k_dev *d, struct s4k_loop *loop,
                             s4k_aio_done_fn *done, void *opaque);
/* Only when no request is in flight. */
void s4k_aio_free (struct s4k_aio *a);
/* Each returns 1 if the request is in flight: done (opaque, r) then runs
 * later on the loop's thread, and the buffer must stay as it is until
 * then; done is the engine's last use of the slot, so it may free it.
 * Otherwise it returns the result (0 or -errno, as the synchronous
 * calls) and done is not called.  A request waiting for a sector lock
 * holds none, so requests of one thread never deadlock each other. */
int s4k_aio_read (struct s4k_aio *a, void *buf, uint64_t len, uint64_t off);
int s4k_aio_write (struct s4k_aio *a, const void *buf, uint64_t len,
                   uint64_t off, unsigned flags);
int s4k_aio_zero (struct s4k_aio *a, uint64_t len, uint64_t off,
                  unsigned flags);
int s4k_aio_trim (struct s4k_aio *a, uint64_t len, uint64_t off,
                  unsigned flags);
int s4k_aio_flush (struct s4k_aio *a);

/* ---- statistics ------------------------------------------------------ */

enum s4k_op {
  S4K_OP_READ, S4K_OP_WRITE, S4K_OP_ZERO, S4K_OP_TRIM, S4K_OP_FLUSH,
  S4K_OP_EXTENTS, S4K_OP_CACHE, S4K_NOPS
};
extern const char *const s4k_op_names[S4K_NOPS];

/* Request sizes: bucket 0 is < 512 bytes, bucket i >= 1 is
 * [256 << i, 512 << i); the last bucket takes everything larger. */
#define S4K_SIZE_BUCKETS 19
/* Offsets within the physical sector, (off - A) mod P, in buckets of
 * s4k_stats.offset_bucket bytes (the logical size, or P/64 if larger). */
#define S4K_OFFSET_BUCKETS 64

/* The counters of each op, in JSON order, one line each: the fields of
 * s4k_op_stats, the per-thread blocks, their sum and the JSON all expand
 * this list, so a new counter is a new line here (and its description
 * in docs/stats.schema.json). */
#define S4K_OP_COUNTERS(X)                                                   \
  X (requests, "requests")                                                   \
  X (bytes, "bytes the client asked for")                                    \
  X (errors, "requests that failed, refused ones included")                  \
  /* Data ops: how the request sits on the sectors. */                       \
  X (aligned_physical, "starts and ends on physical boundaries")             \
  X (aligned_logical, "on logical boundaries only: writes RMW")              \
  X (unaligned, "off logical boundaries")                                    \
  X (refused, "refused by strict: EINVAL")                                   \
  X (rmw_sectors, "physical sectors read-modify-written")                    \
  X (rmw_read_bytes, "bytes the RMWs read")                                  \
  X (store_write_bytes, "bytes written to the store")                        \
  X (sectors_touched, "physical sectors the requests touched")               \
  X (extra_sectors, "requests touching more sectors than their length needs")

struct s4k_op_stats {
#define S4K_FIELD(name, description) uint64_t name;
  S4K_OP_COUNTERS (S4K_FIELD)
#undef S4K_FIELD
  uint64_t size_hist[S4K_SIZE_BUCKETS];
  uint64_t offset_hist[S4K_OFFSET_BUCKETS];
};

struct s4k_stats {
  double elapsed;               /* seconds since the device opened */
  uint32_t offset_bucket;       /* bytes per offset_hist bucket */
  uint32_t offset_buckets;      /* buckets in use: P / offset_bucket */
  struct s4k_op_stats op[S4K_NOPS];
};

/* True if strict mode refuses the request (EINVAL) because it breaks the
 * advertised block-size constraints: offset or length not a multiple of
 * the logical size, or a read or write longer than max-request. */
bool s4k_refused (const struct s4k_dev *d, enum s4k_op op, uint64_t len,
                  uint64_t off);
/* One line saying which rule the request broke. */
void s4k_explain_refusal (const struct s4k_dev *d, enum s4k_op op,
                          uint64_t len, uint64_t off, char *buf,
                          size_t buflen);

/* Sums every thread's counters. */
void s4k_dev_stats (const struct s4k_dev *d, struct s4k_stats *out);
/* The JSON document (schema in docs/stats.schema.json). */
int s4k_stats_write_json (const struct s4k_dev *d, FILE *fp);
/* Writes the JSON to path atomically (temporary file, then rename). */
int s4k_stats_save (const struct s4k_dev *d, const char *path);
/* The one-screen human summary. */
void s4k_stats_print (const struct s4k_dev *d, FILE *fp);

#endif
