/* SPDX-License-Identifier: BSD-3-Clause */
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

#include <stdatomic.h>
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

/* ---- timing model: what a request would cost a real drive ------------- */

/* Keys latency-read=, latency-write=, latency-rmw=, rate=, queue-depth=,
 * timing= (lib/timing.c).  All zero: no timing, and no cost. */
struct s4k_timing_params {
  uint64_t read_ns, write_ns;  /* base service time per request */
  uint64_t rmw_ns;             /* per physical sector read-modify-written */
  uint64_t rate;               /* bytes/s over the sectors touched; 0: free */
  uint32_t queue_depth;        /* requests served at once; 0: unlimited */
  const char *preset;          /* timing=: hdd7200, ssd, none, or NULL */
  bool have_read, have_write, have_rmw, have_rate, have_queue_depth;
};

/* What the model charges one request, in ns.  service = base + transfer +
 * rmw; wait is the time it queued (queue-depth, or an earlier RMW of the
 * same physical sector). */
struct s4k_timing_cost {
  uint64_t base, transfer, rmw, wait;
  uint64_t sectors, rmw_sectors;        /* physical sectors touched, RMW'd */
};

/* ---- configuration (shared key=value parser of plugin and server) ------ */

/* Fault keys (write-cache=, power-cut-after=, torn=, seed=, cut-report=,
 * bad-sectors=, control=): parsed by lib/fault/fault_config.c. */
enum s4k_torn { S4K_TORN_NONE, S4K_TORN_SECTOR, S4K_TORN_UNREADABLE,
                S4K_TORN_GARBAGE, S4K_TORN_ZERO };
struct s4k_fault_config {
  bool on;                    /* some key asks for the fault layer */
  bool write_cache;
  uint64_t write_cache_size;  /* bytes of volatile data (default 64M) */
  uint64_t power_cut_after;   /* cut at the Nth write reaching the store */
  enum s4k_torn torn;         /* default S4K_TORN_SECTOR */
  bool have_torn, have_seed;
  uint64_t seed;
  const char *cut_report;     /* JSON report of each cut */
  const char *bad_sectors;    /* LBA[-LBA],... as given */
  const char *control;        /* control socket path */
};

/* Untorn (atomic) writes (atomic-write-max=, atomic-write-min=,
 * atomic-write-boundary=, atomic-writes=): an atomic write is all or
 * nothing to a power cut and to concurrent reads.  max 0: none. */
struct s4k_atomic {
  uint32_t max;          /* bytes; 0: the device has no atomic writes */
  uint32_t min;          /* granularity and alignment, bytes */
  uint32_t boundary;     /* bytes; 0: no boundary */
  bool explicit_only;    /* atomic-writes=explicit: only S4K_ATOMIC writes;
                            implicit (default): every write that fits */
};

/* Whether a write of [off, off+len) marked atomic (S4K_ATOMIC, SCSI
 * WRITE ATOMIC(16)) is one the device does whole: a multiple of min
 * between min and max, at a multiple of min; it may cross a multiple
 * of max or of the boundary (SBC-4 has no field for either).  False
 * when a->max is 0. */
bool s4k_atomic_allowed (const struct s4k_atomic *a, uint64_t len,
                         uint64_t off);
/* Whether an unmarked write of [off, off+len) is atomic under
 * atomic-writes=implicit (it fits): allowed, and within one naturally
 * aligned max-sized unit and one boundary (NVMe's AWUPF and NABSPF). */
bool s4k_atomic_fits (const struct s4k_atomic *a, uint64_t len,
                      uint64_t off);
/* The atomic keys (lib/atomic.c): 1 if key is not one of them, else 0
 * or -1 (err filled).  finish checks them against the geometry and
 * fills the defaults (min: the physical sector). */
int s4k_atomic_set (struct s4k_atomic *a, const char *key,
                    const char *value, char *err, size_t errlen);
int s4k_atomic_finish (struct s4k_atomic *a, const struct s4k_geometry *g,
                       uint32_t max_request, char *err, size_t errlen);
#define S4K_ATOMIC_HELP                                                      \
  "atomic-write-max=SIZE Largest atomic (untorn) write: a power of two, a\n" \
  "                      multiple of physical, at most max-request (default\n" \
  "                      0: no atomic writes).\n"                           \
  "atomic-write-min=SIZE Atomic granularity and alignment: a power of two,\n" \
  "                      a multiple of logical (default: physical).\n"     \
  "atomic-write-boundary=SIZE  No write atomic by implicit crosses a\n" \
  "                      multiple of it (WRITE ATOMIC(16) may): a power\n" \
  "                      of two >= atomic-write-max (default 0: none).\n" \
  "atomic-writes=implicit|explicit  Every write that fits the limits is\n" \
  "                      atomic (default implicit), or only writes marked\n" \
  "                      atomic (SCSI WRITE ATOMIC(16)).\n"

/* Zoned drives (issue 33; the zones: include/sect4k/zone.h, docs/
 * zoned.md): the zone keys, parsed by lib/zone/zone.c. */

enum s4k_zoned {
  S4K_ZONED_NONE,               /* default: a conventional drive */
  S4K_ZONED_HOST_MANAGED,       /* ZBC peripheral device type 14h */
  S4K_ZONED_HOST_AWARE,         /* type 00h, ZONED field 01b (B1h page) */
};

/* Real SMR drives (and f2fs, btrfs, dm-zoned, which expect it) use 256 MiB
 * zones. */
#define S4K_ZONE_DEFAULT_SIZE (256ull << 20)

struct s4k_zone_config {
  enum s4k_zoned model;
  uint64_t size;                /* bytes; finish sets the default */
  uint32_t conventional;        /* conventional zones from LBA 0 */
  uint32_t max_open;            /* open sequential write required zones
                                   (implicit + explicit); 0: no limit */
  uint32_t max_active;          /* open + closed; 0: no limit */
  bool reformat;                /* zone-reformat=true: with file=, every
                                   zone starts empty, whatever the zone
                                   state file holds (lib/dev/dev_zones.c) */
  const char *first_key;        /* the first zone-* key given, for the
                                   refusal without zoned= */
  char first_value[32];
  char size_text[32];           /* zone-size= as given, for refusals */
};

/* 1 if key is not a zone key, else 0, or -1 with err filled (one line). */
int s4k_zone_set (struct s4k_zone_config *c, const char *key,
                  const char *value, char *err, size_t errlen);
/* Checks the keys against the geometry and fills the default size: 0 or
 * -1 with err filled.  Not zoned and no zone key: 0, nothing to do. */
int s4k_zone_finish (struct s4k_zone_config *c, const struct s4k_geometry *g,
                     char *err, size_t errlen);
/* The NBD front ends (plugin, filter, sect4k-server serving NBD): NBD
 * has no zone commands, and a client must not see a zoned drive as a
 * plain disk.  0 if c is not zoned, else -1 with err: one line naming
 * the export (name, or NULL), the key, and where a zoned drive is served:
 * --scsi, or --ublk too when host-managed, of prog ("sect4k-server " for
 * nbdkit, "" for the server itself), alone when the server was given a
 * kernel path beside its NBD sockets. */
int s4k_zone_refuse_nbd (const struct s4k_zone_config *c, const char *name,
                         const char *prog, bool alone, char *err,
                         size_t errlen);
#define S4K_ZONE_HELP                                                        \
  "zoned=host-managed|host-aware  A zoned (SMR) drive, ZBC-2 (default: not\n" \
  "                      zoned).\n"                                         \
  "zone-size=SIZE        Zone size: a power of two, a multiple of physical,\n" \
  "                      at most the device (default 256M); the last zone\n" \
  "                      is smaller when size= is not a multiple.\n"       \
  "zone-conventional=N   Conventional zones from LBA 0 (default 0).\n"      \
  "zone-max-open=N       Open sequential zones at most, host-managed only\n" \
  "                      (default 0: no limit).\n"                          \
  "zone-max-active=N     Open and closed sequential zones at most,\n"       \
  "                      host-managed only (default 0: no limit).\n"       \
  "zone-reformat=BOOL    With file=: start with every zone empty, whatever\n" \
  "                      FILE.sect4k-zones holds (default false).\n"

struct s4k_config {
  struct s4k_geometry geom;
  uint32_t max_request;
  bool strict;
  bool readonly;              /* set by the front end (nbdkit -r, server -r) */
  bool readonly_per_connection;  /* set by a front end that learns
                                 read-only only when a client connects
                                 (the plugin: nbdkit -r reaches open, not
                                 config): a store that can only be read
                                 (a read-only upstream) is served
                                 read-only, and the front end refuses
                                 writable connections to it */
  const char *model;          /* preset name or NULL */
  /* Which keys the user gave, so presets never override them. */
  bool have_size, have_logical, have_physical, have_alignment,
       have_lowest_aligned, have_max_request;
  uint64_t lowest_aligned;
  /* File store (file=, direct=, io=). */
  const char *file;           /* NULL: memory store */
  bool direct;                /* O_DIRECT */
  bool no_uring;              /* io=sync, or SECT4K_NO_URING=1 */
  /* Upstream store (upstream=, upstream-connections=,
   * upstream-partial-writes=). */
  const char *upstream;       /* NBD URI; NULL: not upstream */
  uint32_t upstream_connections;  /* 0: the default */
  uint64_t upstream_timeout;  /* ns the upstream may say nothing while a
                                 connect or request waits on it (default
                                 30 s; 0: forever) */
  bool have_upstream_timeout;
  bool partial_writes;        /* the upstream may get writes that cut
                                 sectors (default true) */
  bool have_partial_writes;
  bool store_sized;           /* the front end's store is an upstream
                                 that gives the size (the nbdkit
                                 filter's next layer): size= not needed */
  /* Statistics (statsfile=, stats-interval=, stats=). */
  const char *statsfile;      /* JSON written at close and every interval */
  uint32_t stats_interval;    /* seconds; 0: at close only */
  bool stats_summary;         /* human summary to stderr at close */
  bool stats_count;           /* count requests: set by config_finish when
                                 statsfile= or stats= asks for them */
  struct s4k_fault_config fault;
  bool sata;                  /* interface=sata: the SCSI disk (--scsi) is
                                 a SATA drive behind a SATL */
  const char *write_log;      /* write-log=: the log of every write, flush
                                 and mark (include/sect4k/wlog.h) */
  const char *name;           /* export name (export=), NULL if unnamed;
                                 set by the export table (exports.h) */
  struct s4k_timing_params timing;   /* latency-*=, rate=, timing=, ... */
  struct s4k_atomic atomic;          /* atomic-write-*=, atomic-writes= */
  struct s4k_zone_config zone;       /* zoned=, zone-*= */
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
/* The fault keys: 1 if key is not one of them, else 0 or -1 (err
 * filled).  Called by s4k_config_set and s4k_config_finish. */
int s4k_fault_config_set (struct s4k_fault_config *f, const char *key,
                          const char *value, char *err, size_t errlen);
int s4k_fault_config_finish (struct s4k_fault_config *f,
                             const struct s4k_geometry *g,
                             char *err, size_t errlen);
/* Parses "LBA[-LBA][,LBA[-LBA]...]", calling fn for each range. */
int s4k_parse_lba_list (const char *str,
                        int (*fn) (void *opaque, uint64_t first,
                                   uint64_t last),
                        void *opaque);
#define S4K_FAULT_HELP                                                       \
  "write-cache=BOOL      Volatile write cache: writes are durable only after\n" \
  "                      flush, FUA or destaging (default false).\n"        \
  "write-cache-size=SIZE Volatile data at most (default 64M); the oldest\n" \
  "                      dirty physical sectors are destaged beyond it.\n"  \
  "power-cut-after=N     Cut the power at the Nth write reaching the store.\n" \
  "torn=none|sector|unreadable|garbage|zero  What a cut does to unflushed\n" \
  "                      physical sectors (default sector).\n"              \
  "seed=N                Seed of the cut outcomes (default: from the clock,\n" \
  "                      written in the report).\n"                         \
  "cut-report=PATH       Write a JSON report of each power cut.\n"          \
  "bad-sectors=LBA[-LBA],...  Physical sectors holding these LBAs are bad:\n" \
  "                      reads fail with EIO until a whole-sector write.\n" \
  "control=PATH          Control socket (mode 0600): power-cut, bad, stats,\n" \
  "                      status (see scripts/sect4k-ctl); refused if a\n"  \
  "                      server answers at PATH.\n"
/* Parses nbdkit's size syntax: digits with optional b/k/M/G/T/P/E suffix
 * (powers of 1024).  Returns -1 if malformed or out of range. */
int s4k_parse_size (const char *str, uint64_t *out);
int s4k_parse_bool (const char *str, bool *out);
/* strerror without its locale lookup: thread-safe, and no gettext lock
 * (which deadlocks nbdkit's exit under ASan once strerror has run). */
const char *s4k_strerror (int errnum);

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

/* Sets up a ring used by one thread only, with the cheapest setup flags
 * the kernel takes.  0 or -errno. */
int s4k_ring_init (struct io_uring *ring, unsigned entries);
/* The ring's next SQE, submitting first if the queue is full; stops the
 * process (with a message) if even that leaves no room. */
struct io_uring_sqe;
struct io_uring_sqe *s4k_ring_sqe (struct io_uring *ring);
/* Hands every completion the ring holds to its s4k_completion (skipping
 * user data NULL) and marks them seen; returns how many there were. */
unsigned s4k_loop_reap (struct io_uring *ring);
/* Runs a post queue kept as a stack (newest first, linked by next)
 * oldest first: c->fn (c, 0) each. */
void s4k_loop_run_posted (struct s4k_completion *newest);

/* ---- the device: geometry + RMW + per-sector locking over a store ------ */

#define S4K_FUA        1u
#define S4K_MAY_TRIM   2u
#define S4K_FAST_ZERO  4u
/* A write the client asks to be atomic (SCSI WRITE ATOMIC(16)): it must
 * be within the device's atomic limits (s4k_atomic_allowed), else
 * -EINVAL and nothing is written.  Issue 27; README "Atomic writes". */
#define S4K_ATOMIC     8u

#define S4K_DEBUG_RMW  1u

typedef void s4k_debug_fn (void *opaque, const char *msg);

struct s4k_dev;

/* Builds the store the config asks for (memory or file=), then the device. */
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
/* The export name (s4k_config.name), or NULL for the unnamed export. */
const char *s4k_dev_name (const struct s4k_dev *d);
/* The device's atomic write limits (max 0: none). */
const struct s4k_atomic *s4k_dev_atomic (const struct s4k_dev *d);
void s4k_dev_set_debug (struct s4k_dev *d, unsigned mask,
                        s4k_debug_fn *fn, void *opaque);
/* Sector-size conversion in place (SCSI FORMAT UNIT with a new block
 * length, issue 34): whether the device can take logical size L, 0 or a
 * -errno with the reason in err: -EINVAL when the geometry forbids it
 * (L not a power of two from 512 up to the physical size, the alignment
 * offset or the size not a multiple of L), -ENOTSUP when the geometry
 * would not survive the device (file= and upstream= keep the data but not
 * the geometry, which the next start takes from its keys; write-log=
 * records one geometry). */
int s4k_dev_logical_ok (const struct s4k_dev *d, uint32_t logical,
                        char *err, size_t errlen);
/* Switches the logical size to L (s4k_dev_logical_ok first): the physical
 * sectors, the alignment and so the sector locks stay as they are; what
 * follows the logical size (strict's alignment check, the fault layer's
 * LBAs and torn writes, the statistics' aligned-logical count, extents)
 * follows the new one.  The caller has no request of its own in flight;
 * another front end's request in flight sees the old size or the new. */
int s4k_dev_set_logical (struct s4k_dev *d, uint32_t logical);
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

/* A read answered by reference, for a front end that sends the data
 * without copying it (sect4k-server's replies, sendmsg with iovecs):
 * fills iov[0..n) with the pieces of [off, off+len) in order, each a
 * pointer into the store's memory or, iov_base NULL, a run that reads
 * as zeroes (a hole), and returns n (0 if len is 0).  Counted in the
 * statistics exactly as s4k_read counts the same read.
 * -ENOTSUP: the store cannot (only one whose memory stays in place
 * while the device is open can: the memory store, without the fault
 * layer); -ENOBUFS: more than max pieces.  Neither is counted: do the
 * read with s4k_read instead.  Otherwise the errors of s4k_read.
 * The memory is never freed, moved or reused for other data before
 * s4k_dev_close, so the pointers stay valid until then; its bytes
 * change only by writes, zeroes and trims of the same range, so a
 * pointer's bytes copied while such a write is in flight may be a mix
 * of old and new within one logical sector: a caller that must not
 * send a torn sector copies the data pieces with s4k_read_piece.  A
 * hole's bytes may become data the same way: the caller sends zeroes
 * for it (the old bytes, whole). */
struct iovec;
/* Copies a data piece of an s4k_read_iov answer, [off, off+len), into
 * buf: each logical sector whole, old or new, whatever writes are in
 * flight.  Not counted (s4k_read_iov counted the read). */
int s4k_read_piece (struct s4k_dev *d, void *buf, uint64_t len,
                    uint64_t off);
int s4k_read_iov (struct s4k_dev *d, uint64_t len, uint64_t off,
                  struct iovec *iov, unsigned max);
/* Extents: fn gets consecutive runs covering [off, off+len) (it may stop
 * early); zero = reads as zeroes (a hole). */
typedef int s4k_extent_fn (void *opaque, uint64_t off, uint64_t len,
                           bool zero);
/* Runs are reported at logical granularity. */
int s4k_extents (struct s4k_dev *d, uint64_t len, uint64_t off,
                 s4k_extent_fn *fn, void *opaque);

/* The operations, as the statistics and refusals name them. */
enum s4k_op {
  S4K_OP_READ, S4K_OP_WRITE, S4K_OP_ZERO, S4K_OP_TRIM, S4K_OP_FLUSH,
  S4K_OP_EXTENTS, S4K_OP_CACHE, S4K_NOPS
};
extern const char *const s4k_op_names[S4K_NOPS];

/* ---- lost writes, told to each client connection ---------------------- */

/* A store can lose writes it acknowledged: an upstream (upstream=) that
 * crashed before a flush covered them.  NBD promises every client that
 * a flush that succeeds made its completed writes durable, so each
 * client connection (an NBD connection, a SCSI LUN) keeps one of these,
 * zeroed, and its front end brackets its writes, zeroes, trims and
 * flushes with the two calls below.  The connection's next flush after a
 * loss that may have taken a write of its own which its own flushes had
 * not covered fails with EIO, once; that flush still flushes the rest.
 * A FUA request that succeeds is durable by itself: it neither counts
 * as unflushed nor reports or clears a loss (the next flush does).
 * Requests without a client (a front end's flush at exit) report
 * nothing.  Over a store that cannot lose writes, it costs an atomic
 * load per request. */
struct s4k_client {
  _Atomic uint64_t since;       /* 1 + the store's losses when its oldest
                                   unflushed write began; 0: none */
};
/* Before request op (with S4K_FUA in flags or not) of c: a tag for
 * s4k_client_end. */
uint64_t s4k_client_begin (struct s4k_dev *d, struct s4k_client *c,
                           enum s4k_op op, unsigned flags);
/* The request ended with r (0 or -errno): its result for the client, r
 * or, for a flush that must report a loss, -EIO. */
int s4k_client_end (struct s4k_dev *d, struct s4k_client *c,
                    enum s4k_op op, uint64_t tag, int r);

/* True if strict mode refuses the request (EINVAL) because it breaks the
 * advertised block-size constraints: offset or length not a multiple of
 * the logical size, or a read or write longer than max-request. */
bool s4k_refused (const struct s4k_dev *d, enum s4k_op op, uint64_t len,
                  uint64_t off);
/* One line saying which rule the request broke. */
void s4k_explain_refusal (const struct s4k_dev *d, enum s4k_op op,
                          uint64_t len, uint64_t off, char *buf,
                          size_t buflen);

/* ---- asynchronous requests (event-loop front ends) -------------------- */

/* True if the store can run requests through an event loop's ring (the
 * file store with io_uring).  Otherwise (the memory store) the s4k_aio
 * calls below answer at once through the synchronous ones, which never
 * wait on a disk. */
bool s4k_dev_async (const struct s4k_dev *d);
/* True if extents go through the ring too (the upstream store, whose
 * block status is a round trip); otherwise s4k_aio_extents answers at
 * once (the memory and file stores). */
bool s4k_dev_async_extents (const struct s4k_dev *d);

/* An aio handle runs one asynchronous request at a time, bound to one
 * loop (and used only on its thread).  On such a thread, use these for
 * every request that takes sector locks (read, write, zero, trim): the
 * synchronous calls would sleep on a lock that a request in flight on
 * the same loop holds, and never wake.  Cache and extents take no lock;
 * cache is only synchronous, and extents may be either (s4k_aio_extents,
 * so that a loop does not wait a round trip for an upstream's block
 * status). */
struct s4k_aio;
typedef void s4k_aio_done_fn (void *opaque, int r);
struct s4k_aio *s4k_aio_new (struct s4k_dev *d, struct s4k_loop *loop,
                             s4k_aio_done_fn *done, void *opaque);
/* Only when no request is in flight. */
void s4k_aio_free (struct s4k_aio *a);
/* A loop that stops while d stays open (the NBD loops before the ublk
 * queues at shutdown, one ublk queue before another) calls this on its
 * own thread, once none of its requests on d is in flight and before
 * its memory goes: the store lets go of what it keeps of the loop (the
 * upstream store flushes and closes the loop's connection, and other
 * loops stop asking it to flush).  Nothing is posted to the loop after
 * it returns.  A loop that outlives d need not call it. */
void s4k_dev_loop_gone (struct s4k_dev *d, struct s4k_loop *loop);
/* The front end stops: called at its signal (any thread; requests may
 * still be in flight, and end), again before the final flush
 * (s4k_flush), and by s4k_dev_close.  From the first call every wait
 * ends: the upstream store with upstream-timeout=0, which lets a request
 * wait forever, gives each 30 s of silence from then (a request already
 * waiting too), and says in one line what failed or what the final
 * flush could not cover (counted as a loss); the flush then returns 0,
 * as a stopping loop's final flush ends its stop. */
void s4k_dev_stop (struct s4k_dev *d);
/* Each returns 1 if the request is in flight: done (opaque, r) then runs
 * later on the loop's thread, and the buffer must stay as it is until
 * then; done is the engine's last use of the handle, so it may free it.
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
/* As s4k_extents, the same runs and result; fn runs on the loop's
 * thread (before done, if the request is in flight), and may have been
 * given runs before the request fails, as with s4k_extents. */
int s4k_aio_extents (struct s4k_aio *a, uint64_t len, uint64_t off,
                     s4k_extent_fn *fn, void *opaque);

/* ---- statistics ------------------------------------------------------ */

/* Request sizes: bucket 0 is < 512 bytes, bucket i >= 1 is
 * [256 << i, 512 << i); the last bucket takes everything larger. */
#define S4K_SIZE_BUCKETS 19
/* Offsets within the physical sector, (off - A) mod P, in buckets of
 * s4k_stats.offset_bucket bytes (the logical size, or P/64 if larger). */
#define S4K_OFFSET_BUCKETS 64
/* Modelled latency (wait + service) of the requests the timing model
 * served: bucket 0 is < 1 us, bucket i >= 1 is [2^(i-1), 2^i) us; the last
 * takes everything longer. */
#define S4K_LATENCY_BUCKETS 24

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
  X (extra_sectors, "requests touching more sectors than their length needs") \
  /* Faults (bad-sectors=, the control socket). */                          \
  X (bad_sector_errors, "requests failed with EIO by a bad sector")          \
  X (bad_sectors_cleared, "bad sectors a whole-sector write, zero or trim repaired") \
  /* The timing model (timing=, latency-*=, rate=): service = base +      \
   * transfer + rmw, in ns. */                                               \
  X (modelled_requests, "requests the timing model served")                 \
  X (modelled_ns, "modelled service time, ns: base + transfer + RMW")       \
  X (modelled_base_ns, "of which base latency (latency-read/write=)")       \
  X (modelled_transfer_ns, "of which transfer of the sectors touched")      \
  X (modelled_rmw_ns, "of which read-modify-writes (latency-rmw=)")         \
  X (modelled_wait_ns, "modelled queueing: queue-depth=, same-sector RMW")

struct s4k_op_stats {
#define S4K_FIELD(name, description) uint64_t name;
  S4K_OP_COUNTERS (S4K_FIELD)
#undef S4K_FIELD
  uint64_t size_hist[S4K_SIZE_BUCKETS];
  uint64_t offset_hist[S4K_OFFSET_BUCKETS];
  uint64_t latency_hist[S4K_LATENCY_BUCKETS];
};

struct s4k_stats {
  double elapsed;               /* seconds since the device opened */
  uint32_t offset_bucket;       /* bytes per offset_hist bucket */
  uint32_t offset_buckets;      /* buckets in use: P / offset_bucket */
  struct s4k_op_stats op[S4K_NOPS];
  /* upstream=: incidents in which writes the upstream had acknowledged
   * but no flush had covered may have been lost (a connection to it
   * died, or it said nothing for upstream-timeout=): one per incident,
   * however many connections noticed it.  Each client connection with
   * such writes gets EIO on its next flush. */
  bool upstream;
  uint64_t upstream_losses;
};

/* Sums every thread's counters. */
void s4k_dev_stats (const struct s4k_dev *d, struct s4k_stats *out);
/* The JSON document (schema in docs/stats.schema.json). */
int s4k_stats_write_json (const struct s4k_dev *d, FILE *fp);
/* Writes the JSON to path atomically (temporary file, then rename). */
int s4k_stats_save (const struct s4k_dev *d, const char *path);
/* The one-screen human summary. */
void s4k_stats_print (const struct s4k_dev *d, FILE *fp);

/* ---- faults (lib/fault/fault.c): off unless a fault key is given ------------ */

/* Cuts the power now (torn: the policy, or -1 for torn=).  Fills *report
 * (malloc'd JSON, may be NULL) and returns 0, or -ENOTSUP without the
 * fault layer. */
int s4k_dev_power_cut (struct s4k_dev *d, int torn, char **report);
/* Power cuts so far: a connection opened before the latest must see
 * nothing but errors. */
unsigned s4k_dev_power_cuts (const struct s4k_dev *d);
/* Called (from the cutting thread, no lock held) after every cut. */
void s4k_dev_on_power_cut (struct s4k_dev *d, void (*fn) (void *opaque),
                           void *opaque);
/* Marks the calling thread's next requests as coming from a connection
 * opened at power cut `cuts`: once the power has been cut since, they
 * fail with EIO and change nothing. */
void s4k_fault_epoch (unsigned cuts);
/* Bad physical sectors, named by the LBAs they hold. */
int s4k_dev_bad_add (struct s4k_dev *d, uint64_t first_lba,
                     uint64_t last_lba, char *err, size_t errlen);
int s4k_dev_bad_remove (struct s4k_dev *d, uint64_t first_lba,
                        uint64_t last_lba, char *err, size_t errlen);
/* Physical sectors bad now, and bad ones a write has repaired since the
 * device opened (0 and 0 without the fault layer): SMART's counts. */
void s4k_dev_bad_counts (struct s4k_dev *d, uint64_t *bad,
                         uint64_t *repaired);
/* One line "FIRST-LAST" (LBAs) per run of bad sectors. */
int s4k_dev_bad_list (struct s4k_dev *d, FILE *fp);
/* key=value lines: geometry, cache fill, cuts. */
void s4k_dev_fault_status (struct s4k_dev *d, FILE *fp);

/* ---- timing model (lib/timing.c) --------------------------------------- */

/* Applies key=value if key is a timing key: 0, or -1 with err filled;
 * 1 if key is not one of them. */
int s4k_timing_set (struct s4k_timing_params *p, const char *key,
                    const char *value, char *err, size_t errlen);
/* Fills the preset's values into the keys not given. */
int s4k_timing_finish (struct s4k_timing_params *p, char *err,
                       size_t errlen);
/* True if a request can cost anything. */
bool s4k_timing_enabled (const struct s4k_timing_params *p);
/* The medium's rotation rate, what every front end reports (NBD's
 * ROTATIONAL flag when above 1, SCSI's Block Device Characteristics
 * page): the preset's rpm, 7200 under timing=hdd7200; else 1, a
 * non-rotating medium (SBC-4's code): no timing model, timing=ssd or
 * none, or latency keys alone, model no rotation. */
uint16_t s4k_timing_rotation_rate (const struct s4k_timing_params *p);
/* nbdkit's duration syntax: a number (decimals allowed) with s, ms, us or
 * ns; a bare number is seconds.  -1 if malformed or above an hour. */
int s4k_parse_duration (const char *str, uint64_t *ns);
/* Pure: the service time of one request (wait 0), from the geometry. */
void s4k_timing_cost (const struct s4k_timing_params *p,
                      const struct s4k_geometry *g, enum s4k_op op,
                      uint64_t len, uint64_t off, struct s4k_timing_cost *c);

/* The drive's queue: which requests it serves at once, and in what order
 * an RMW of one physical sector follows another.  Thread-safe. */
struct s4k_timing;
struct s4k_timing *s4k_timing_new (const struct s4k_timing_params *p,
                                   const struct s4k_geometry *g);
void s4k_timing_free (struct s4k_timing *t);
/* A request arriving at now (ns): when it completes, with c filled.  A
 * request that costs nothing completes at now and holds no queue slot. */
uint64_t s4k_timing_schedule (struct s4k_timing *t, enum s4k_op op,
                              uint64_t len, uint64_t off, uint64_t now,
                              struct s4k_timing_cost *c);

/* CLOCK_MONOTONIC in ns. */
uint64_t s4k_now_ns (void);
/* True if the device models service times (timing= or a latency key). */
bool s4k_dev_timed (const struct s4k_dev *d);
/* Call once a request has finished with r (0 or -errno): its modelled
 * completion time (CLOCK_MONOTONIC ns), counted in the statistics; 0 if
 * it need not wait (not timed, failed, or free). */
uint64_t s4k_dev_timing (struct s4k_dev *d, enum s4k_op op, uint64_t len,
                         uint64_t off, int r);

/* Runs c->fn (c, res) on the loop's thread once CLOCK_MONOTONIC reaches
 * *at (an absolute IORING_OP_TIMEOUT: res is -ETIME); *at must stay as it
 * is until the loop has submitted it. */
struct __kernel_timespec;
void s4k_loop_timeout (struct s4k_loop *loop, struct s4k_completion *c,
                       struct __kernel_timespec *at);

#endif
