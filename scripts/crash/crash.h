/* SPDX-License-Identifier: BSD-3-Clause */
/* sect4k-crash's private header: the types and functions its files share
 * (the program: crash.c's comment in main.c; the model and the options:
 * sect4k-crash.pod).
 *
 *   main.c      options, --geometry, --output, main
 *   log.c       the log: its writes and crash points
 *   image.c     sector maps and the durable image of a crash point
 *   state.c     a state: the kept writes, each sector's outcome, images
 *   state-id.c  state IDs: printing and parsing them
 *   nbd.c       the NBD server that serves a state
 *   checker.c   running the checker while serving
 *   report.c    the JSON report and the summary
 *   explore.c   every state, or seeded samples, of each crash point */
#ifndef SECT4K_CRASH_H
#define SECT4K_CRASH_H

#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sect4k/sect4k.h"
#include "sect4k/wlog.h"
#include "../../server/nbd.h"

#define PROG "sect4k-crash"

/* main.c: errors, memory, the options */
void die (const char *fmt, ...)
  __attribute__ ((format (printf, 1, 2), noreturn));
void *xcalloc (size_t n, size_t size);
void *xrealloc (void *p, size_t n);
void write_output (const char *path, bool eio);
extern const char *log_path, *base_path, *until_mark, *state_id, *output,
  *report_path, *geometry_arg;
extern uint64_t states_limit;
extern enum s4k_torn torn;
extern uint64_t seed;
extern double timeout_s;
extern char **checker;
extern const char *const torn_names[];

/* log.c: the geometry, the log's writes and crash points */
extern struct s4k_geometry g;
extern uint32_t L, P;
void sector_range (uint64_t k, uint64_t *s, uint64_t *e);

struct wr {
  uint64_t entry;                       /* log entry number */
  uint64_t off, len;
  const unsigned char *data;            /* NULL: zeroes (zero, trim) */
  bool durable_early;                   /* FUA, zero, trim: durable when
                                           done, as the fault layer does */
  bool atomic;                          /* S4K_WLOG_ATOMIC: kept or dropped
                                           whole, never torn */
  int64_t zone;                         /* its sequential zone, or -1 */
  uint64_t settled;                     /* the entry that made it durable
                                           without a flush (a later FUA
                                           write, zero, reset or finish in
                                           its zone), or UINT64_MAX */
  bool reset_zero;                      /* a reset's zeroes (logged after
                                           its mark): no pointer moves */
  bool trim;                            /* a trim: no pointer moves */
};
extern struct wr *writes;

/* A crash point: the crash comes before log entry `before`, when writes
 * [0, nw) were done and [0, f) were flushed; gen counts the zone
 * settlements before it. */
struct cp {
  uint64_t before;
  size_t f, nw;
  unsigned gen;
};
/* Write w (done before crash point c) is durable there. */
static inline bool
durable_at (const struct wr *w, const struct cp *c)
{
  return w->durable_early || w->settled < c->before;
}
/* The log's zones (its layout entry, docs/write-log.md "Zones"):
 * sequential zones from byte zone_seq_start; aware: host-aware, whose
 * zones written off their pointer (NON_SEQ) are conventional at a cut. */
extern bool zoned, aware;
extern uint64_t zone_bytes, zone_seq_start;
/* The sequential zone of byte off, or -1. */
int64_t zone_of (uint64_t off);
/* Zone z is NON_SEQ at the crash point before entry `before` (never on a
 * host-managed log): a write off its pointer since its last reset. */
bool nonseq_at (int64_t z, uint64_t before);
/* Each zone's pointer where the log starts (LBA): its start, or what a
 * "sect4k-zonewp" entry says (docs/write-log.md "Zones"). */
extern uint64_t *zone_wp0;
/* The log's resets and finishes (of one zone, or ALL), for the zones'
 * pointers in the report. */
struct zev {
  uint64_t entry;
  unsigned op;                          /* S4K_ZOP_RESET or _FINISH */
  int64_t zone;                         /* -2: ALL */
};
extern struct zev *zevs;
extern size_t nzevs;
extern struct cp *cps;
extern size_t ncps;
extern uint64_t log_entries;
extern struct s4k_wlog_reader *reader;
void read_log (void);

/* image.c: sector maps (physical sector -> image), the durable image */
struct sec {
  uint64_t k;
  bool unreadable;
  unsigned char *data;                  /* the sector's bytes (end - s) */
};

struct map {
  struct sec *slot;
  size_t cap, n;                        /* cap: power of two */
};

size_t hash_k (uint64_t k, size_t cap);
struct sec *map_find (const struct map *m, uint64_t k);
struct sec *map_add (struct map *m, uint64_t k);
void map_clear (struct map *m);
extern int base_fd;
extern uint64_t base_size;
extern struct map flushed, cpmap;
void read_flushed (uint64_t k, unsigned char *buf);
void read_durable (uint64_t k, unsigned char *buf);
void apply (const struct wr *w, uint64_t k, unsigned char *buf);
uint64_t first_sector (const struct wr *w);
uint64_t last_sector (const struct wr *w);
void enter_cp (const struct cp *c);

/* state.c: a state: which volatile writes were kept, each sector's
 * outcome */
enum { O_KEPT, O_REVERTED, O_TORN, O_UNREADABLE, O_GARBAGE, O_ZERO };
extern const char outcome_char[];
extern const char *const outcome_names[];

struct outcome {
  unsigned kind;
  uint64_t arg;                 /* torn: the new LBAs (bit i: the sector's
                                   i-th); garbage: from its arg-th LBA */
  unsigned base;                /* reverted, torn: the older image is the
                                   sector's base `base` (0: old) */
};

/* One touched sector of a state.  Its bases: base b is the durable image
 * with the sector's first b kept writes (b = 0: old, b = nk: new), what
 * the device holds durable once those were destaged or settled before
 * the cut (lib/fault/fault_cache.c): reverting or tearing goes back to one. */
struct tsec {
  uint64_t k;
  unsigned lbas;
  uint64_t diff;                /* bit i: old and new differ in LBA i */
  unsigned char *old, *new, *img;
  struct outcome o;
  bool unreadable;
  unsigned nk;                  /* the kept unflushed writes touching it */
  unsigned amin;                /* the lowest base allowed: the last kept
                                   atomic write among them is in every
                                   base from it on (0: none) */
  unsigned char *bases;         /* nk + 1 images of P bytes */
  unsigned *xb;                 /* the bases past old (and >= amin) whose
                                   images differ from old, new and each
                                   other, for enumerating */
  uint64_t *xdiff;              /* each one's diff from new */
  unsigned nxb;
};

/* The volatile writes of one sequential write required zone, in log
 * (acknowledged) order: a state keeps a prefix of them (p). */
struct zgroup {
  int64_t zone;
  size_t *v;                    /* indices into vol */
  size_t n, p;
};

/* What the enumeration varies once the kept set is built: one sector's
 * outcome (a sector outside the sequential zones), or the cut in a
 * zone's last kept write (group g: its sectors t[t0, t0 + nt)). */
struct digit {
  size_t t0, nt;
  int64_t g;                    /* -1: one sector */
  uint64_t n;                   /* its values */
};

struct state {
  size_t cpi;
  size_t *vol;                  /* the crash point's volatile writes */
  size_t nvol;
  uint64_t *kept;               /* bitset over vol */
  struct tsec *t;
  size_t nt, tcap;
  size_t *freev, nfree;         /* vol indices outside sequential zones */
  struct zgroup *zg;
  size_t nzg;
  struct digit *dg;
  size_t ndg;
};

bool bit (const uint64_t *b, size_t i);
size_t bitwords (size_t n);
void state_set_cp (struct state *st, size_t cpi);
void state_build (struct state *st);
uint64_t n_kept_sets (const struct state *st);
void kept_set_at (struct state *st, uint64_t idx);
void kept_set_random (struct state *st, uint64_t *x, bool all);
void state_digits (struct state *st);
void digit_set (struct state *st, const struct digit *d, uint64_t x);
const char *zone_check (struct state *st);
uint64_t n_outcomes (const struct tsec *t);
struct outcome outcome_at (const struct tsec *t, uint64_t i);
bool base_allowed (const struct tsec *t, unsigned b);
bool outcome_allowed (const struct tsec *t, struct outcome o);
uint64_t mix64 (uint64_t z);
void state_images (struct state *st);
uint64_t state_hash (const struct state *st);

/* state-id.c */
char *state_id_of (const struct state *st);
void state_parse (struct state *st, const char *id);

/* nbd.c: the NBD server */
extern struct state cur;                /* the state being served */
extern struct map scratch;              /* the checker's own writes */
extern int listen_fd;
extern char sock_path[108];
struct tsec *state_sector (uint64_t k);
int read_sector (uint64_t k, unsigned char *buf);
int handshake (int fd);
int serve_request (int fd);
void open_socket (void);
void cleanup_socket (void);

/* checker.c: running the checker */
enum result { R_CONSISTENT, R_FAILED, R_TIMEOUT, R_SIGNAL, R_EXEC };
extern const char *const result_names[];

struct run {
  enum result result;
  int status;                   /* exit status or signal */
};

/* The start of what the checker printed (stdout and stderr), for the
 * report. */
#define OUTPUT_MAX 2048
extern char checker_out[OUTPUT_MAX + 1];
extern size_t checker_out_len;
double now_s (void);
struct run run_checker (const char *id);
void catch_signals (void);

/* report.c */
struct tally {
  uint64_t states, checked, consistent, failed, not_checked;
};

void json_str (FILE *fp, const char *s);
char *reason_of (struct run r);
void report_state (FILE *fp, FILE *sum, const char *id, struct run r,
                   bool first);

/* explore.c */
extern bool is_tty;
extern FILE *rep_fp, *sum_fp;
extern struct tally tally;
void progress (struct tally *t, bool final);
void explore_cp (size_t cpi);

#endif
