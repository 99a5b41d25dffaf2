/* SPDX-License-Identifier: BSD-3-Clause */
/* Request statistics: per-thread counter blocks, summed on demand, so
 * counting never makes threads share a cache line.  Knows nothing of the
 * device: saving them is stats_save.h's. */
#ifndef S4K_STATS_H
#define S4K_STATS_H

#include <stdatomic.h>
#include <time.h>

#include "sect4k/sect4k.h"

struct stats_block;

struct stats_state {
  uint64_t id;                          /* tells thread-local blocks apart */
  _Atomic (struct stats_block *) blocks;
  struct timespec start;
  uint32_t offset_bucket, offset_bucket_bits, offset_buckets;
};

/* What one request did, for counting.  The data path fills in how the
 * request sits on the sectors (it has worked that out anyway); a request
 * refused before that leaves `placed` false and stats work it out. */
struct tally {
  bool placed;
  bool cut;                     /* cuts a physical sector */
  uint64_t sectors;             /* physical sectors touched */
  uint64_t rmw_sectors, rmw_read_bytes, store_write_bytes;
};

/* What the fault layer (lib/fault/fault.c) saw during the thread's current
 * request, taken by its stats_count. */
struct fault_tally {
  bool bad_sector_hit;          /* the request failed on a bad sector */
  uint64_t bad_sectors_cleared;
};
extern _Thread_local __attribute__ ((tls_model ("initial-exec")))
  struct fault_tally fault_tally;

void stats_init (struct stats_state *st, const struct s4k_geometry *g);
void stats_free (struct stats_state *st);
void stats_count (struct stats_state *st, const struct s4k_geometry *g,
                  enum s4k_op op, uint64_t len, uint64_t off, int result,
                  bool refused, const struct tally *t);
void stats_sum (struct stats_state *st, struct s4k_stats *out);
/* The timing model's charge for one request (s4k_dev_timing). */
void stats_count_time (struct stats_state *st, enum s4k_op op,
                       const struct s4k_timing_cost *c);

#endif
