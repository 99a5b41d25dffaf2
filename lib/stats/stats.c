/* SPDX-License-Identifier: BSD-3-Clause */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "stats.h"

const char *const s4k_op_names[S4K_NOPS] = {
  "read", "write", "zero", "trim", "flush", "extents", "cache",
};

/* Mirrors struct s4k_op_stats; only its owning thread writes it. */
struct op_counters {
#define FIELD(name, description) _Atomic uint64_t name;
  S4K_OP_COUNTERS (FIELD)
#undef FIELD
  _Atomic uint64_t size_hist[S4K_SIZE_BUCKETS];
  _Atomic uint64_t offset_hist[S4K_OFFSET_BUCKETS];
  _Atomic uint64_t latency_hist[S4K_LATENCY_BUCKETS];
};

struct stats_block {
  struct stats_block *next;
  struct op_counters op[S4K_NOPS];
};

_Thread_local __attribute__ ((tls_model ("initial-exec")))
  struct fault_tally fault_tally;

static _Atomic uint64_t next_stats_id = 1;
static _Thread_local __attribute__ ((tls_model ("initial-exec"))) struct {
  uint64_t id;
  struct stats_block *block;
} tl_stats;

/* Plain add: a single writer, so no locked instruction is needed, and
 * relaxed atomics keep concurrent summing well defined. */
static inline void
add (_Atomic uint64_t *c, uint64_t v)
{
  atomic_store_explicit (c, atomic_load_explicit (c, memory_order_relaxed) + v,
                         memory_order_relaxed);
}

static struct stats_block *
my_block (struct stats_state *st)
{
  if (tl_stats.id == st->id)
    return tl_stats.block;
  struct stats_block *b = calloc (1, sizeof *b);
  if (!b)
    return NULL;
  b->next = atomic_load (&st->blocks);
  while (!atomic_compare_exchange_weak (&st->blocks, &b->next, b))
    ;
  tl_stats.id = st->id;
  tl_stats.block = b;
  return b;
}

static unsigned
size_bucket (uint64_t len)
{
  if (len < 512)
    return 0;
  unsigned b = 63 - __builtin_clzll (len) - 8;      /* 512..1023 -> 1 */
  return b < S4K_SIZE_BUCKETS ? b : S4K_SIZE_BUCKETS - 1;
}

void
stats_count (struct stats_state *st, const struct s4k_geometry *g,
             enum s4k_op op, uint64_t len, uint64_t off, int result,
             bool refused, const struct tally *t)
{
  struct stats_block *b = my_block (st);
  if (!b)
    return;
  struct op_counters *c = &b->op[op];
  add (&c->requests, 1);
  if (result)
    add (&c->errors, 1);
  if (result == -EIO && fault_tally.bad_sector_hit)
    add (&c->bad_sector_errors, 1);
  add (&c->bad_sectors_cleared, fault_tally.bad_sectors_cleared);
  fault_tally = (struct fault_tally) { 0 };
  if (op == S4K_OP_FLUSH)
    return;
  add (&c->bytes, len);
  bool cut;
  uint64_t sectors = 0;
  if (t->placed) {
    cut = t->cut;
    sectors = t->sectors;
  }
  else {
    cut = !s4k_is_boundary (g, off) || !s4k_is_boundary (g, off + len);
    if (len && off < g->size) {
      uint64_t end = off + len <= g->size ? off + len : g->size;
      sectors = s4k_sector_index (g, end - 1) - s4k_sector_index (g, off) + 1;
    }
  }
  if (!cut)
    add (&c->aligned_physical, 1);
  else if (((off | len) & (g->logical - 1)) == 0)
    add (&c->aligned_logical, 1);
  else
    add (&c->unaligned, 1);
  if (refused)
    add (&c->refused, 1);
  add (&c->size_hist[size_bucket (len)], 1);
  add (&c->offset_hist[((off + s4k_sector_shift (g)) & (g->physical - 1))
                       >> st->offset_bucket_bits], 1);
  add (&c->sectors_touched, sectors);
  if (sectors > (len + g->physical - 1) >> __builtin_ctz (g->physical))
    add (&c->extra_sectors, 1);
  add (&c->rmw_sectors, t->rmw_sectors);
  add (&c->rmw_read_bytes, t->rmw_read_bytes);
  add (&c->store_write_bytes, t->store_write_bytes);
}

void
stats_count_time (struct stats_state *st, enum s4k_op op,
                  const struct s4k_timing_cost *t)
{
  struct stats_block *b = my_block (st);
  if (!b)
    return;
  struct op_counters *c = &b->op[op];
  const uint64_t service = t->base + t->transfer + t->rmw;
  const uint64_t us = (service + t->wait) / 1000;
  unsigned k = us ? 64 - __builtin_clzll (us) : 0;      /* 1 us -> 1 */
  add (&c->modelled_requests, 1);
  add (&c->modelled_ns, service);
  add (&c->modelled_base_ns, t->base);
  add (&c->modelled_transfer_ns, t->transfer);
  add (&c->modelled_rmw_ns, t->rmw);
  add (&c->modelled_wait_ns, t->wait);
  add (&c->latency_hist[k < S4K_LATENCY_BUCKETS ? k
                                                : S4K_LATENCY_BUCKETS - 1], 1);
}

void
stats_sum (struct stats_state *st, struct s4k_stats *out)
{
  struct timespec now;
  memset (out, 0, sizeof *out);
  clock_gettime (CLOCK_MONOTONIC, &now);
  out->elapsed = (now.tv_sec - st->start.tv_sec) +
                 (now.tv_nsec - st->start.tv_nsec) / 1e9;
  out->offset_bucket = st->offset_bucket;
  out->offset_buckets = st->offset_buckets;
#define SUM(f) o->f += atomic_load_explicit (&c->f, memory_order_relaxed)
#define SUM_COUNTER(name, description) SUM (name);
  for (struct stats_block *b = atomic_load (&st->blocks); b; b = b->next)
    for (unsigned i = 0; i < S4K_NOPS; i++) {
      struct s4k_op_stats *o = &out->op[i];
      const struct op_counters *c = &b->op[i];
      S4K_OP_COUNTERS (SUM_COUNTER)
      for (unsigned k = 0; k < S4K_SIZE_BUCKETS; k++)
        SUM (size_hist[k]);
      for (unsigned k = 0; k < S4K_OFFSET_BUCKETS; k++)
        SUM (offset_hist[k]);
      for (unsigned k = 0; k < S4K_LATENCY_BUCKETS; k++)
        SUM (latency_hist[k]);
    }
#undef SUM_COUNTER
#undef SUM
}

void
stats_init (struct stats_state *st, const struct s4k_geometry *g)
{
  memset (st, 0, sizeof *st);
  st->id = atomic_fetch_add (&next_stats_id, 1);
  clock_gettime (CLOCK_MONOTONIC, &st->start);
  st->offset_bucket = g->physical / S4K_OFFSET_BUCKETS > g->logical
                      ? g->physical / S4K_OFFSET_BUCKETS : g->logical;
  st->offset_bucket_bits = __builtin_ctz (st->offset_bucket);
  st->offset_buckets = g->physical / st->offset_bucket;   /* <= 64 */
}

void
stats_free (struct stats_state *st)
{
  for (struct stats_block *b = atomic_load (&st->blocks), *n; b; b = n) {
    n = b->next;
    free (b);
  }
}
