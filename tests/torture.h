/* SPDX-License-Identifier: BSD-3-Clause */
/* Concurrency torture: several writers race read-modify-writes on the
 * same physical sectors, each writer owning one logical slot in every
 * sector, mixed with aligned whole-sector writes, zeroes and trims.
 *
 * The run goes in rounds.  In a round every writer walks the sectors in
 * the same order (so all writers hammer the same sector at the same
 * time), writing its own slot of each and now and then writing, zeroing
 * or trimming the whole sector.  After each round the region is checked.
 *
 * Every op is logged with the time it started and ended.  Afterwards each
 * slot must hold the content of an op that no other op on that slot
 * started after (real-time order, i.e. a linearisation exists).  A lost
 * update leaves a slot with content an op later in real time overwrote;
 * a torn slot has mixed stamps.  Either is a failure.
 *
 * Writers also read their own slot back now and then, while the others
 * RMW theirs in the same sector (reads may take no sector lock).  A read
 * that no op on its slot overlapped in time must return what the same
 * rule allows at the time it started; a read that overlapped one is
 * unordered with it (as NBD has it) and is not checked. */
#ifndef S4K_TORTURE_H
#define S4K_TORTURE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tap.h"

#define TORTURE_MAGIC 0x53344b54u       /* "S4KT" */
#define TORTURE_ALL 0xffffu             /* op covers the whole sector */

enum torture_kind { T_WRITE, T_ZERO, T_READ };
/* What a read found. */
enum torture_got { GOT_ZERO, GOT_STAMP, GOT_BAD };

struct torture_geom {
  uint64_t base;                /* offset of sector 0: a physical boundary */
  uint32_t logical, physical;
  uint32_t nsectors;
};

struct torture_op {
  uint32_t sector;
  uint16_t slot;                /* or TORTURE_ALL */
  uint8_t kind;
  uint8_t got;                  /* a read's result: enum torture_got */
  uint16_t got_writer;          /* with its stamp */
  uint32_t got_seq;
  uint64_t start, end;          /* ns, CLOCK_MONOTONIC */
};

struct torture_log {
  struct torture_op *ops;
  uint32_t n, cap;
  uint64_t sub_writes;          /* sub-physical writes and zeroes */
  uint64_t reads;
};

struct stamp {
  uint32_t magic;
  uint16_t writer, slot;
  uint32_t seq, sector;
};

static inline uint64_t
torture_now (void)
{
  struct timespec ts;
  clock_gettime (CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static inline uint32_t
torture_slots (const struct torture_geom *g)
{
  return g->physical / g->logical;
}

/* Starts logging an op; returns its sequence number. */
static inline uint32_t
torture_begin (struct torture_log *log, uint32_t sector, uint16_t slot,
               enum torture_kind kind)
{
  if (log->n == log->cap) {
    log->cap = log->cap ? log->cap * 2 : 4096;
    log->ops = realloc (log->ops, log->cap * sizeof *log->ops);
    if (!log->ops)
      abort ();
  }
  if (kind == T_READ)
    log->reads++;
  else if (slot != TORTURE_ALL)
    log->sub_writes++;
  log->ops[log->n] = (struct torture_op) { .sector = sector, .slot = slot,
                                           .kind = kind,
                                           .start = torture_now () };
  return log->n++;
}

static inline void
torture_end (struct torture_log *log, uint32_t seq)
{
  log->ops[seq].end = torture_now ();
}

/* What writer w does to one sector in a round: its own slot, and
 * sometimes the whole sector too. */
enum torture_what { DO_WRITE, DO_ZERO, DO_TRIM, DO_READ };
struct torture_step {
  uint16_t slot;                /* the writer's slot or TORTURE_ALL */
  uint8_t what;
  uint8_t may_trim;
};

static inline uint64_t
torture_rand (uint64_t *s)
{
  return xorshift64 (s);
}

static inline unsigned
torture_steps (uint64_t *rng, uint16_t writer, struct torture_step out[3])
{
  unsigned n = 0, dice = torture_rand (rng) % 100;
  out[n++] = (struct torture_step) { writer, dice < 95 ? DO_WRITE : DO_ZERO,
                                     0 };
  dice = torture_rand (rng) % 100;
  if (dice < 6)
    out[n++] = (struct torture_step) {
      TORTURE_ALL, dice < 3 ? DO_WRITE : dice < 5 ? DO_ZERO : DO_TRIM,
      dice & 1 };
  if (n == 2 && torture_rand (rng) % 2) {   /* either order */
    struct torture_step t = out[0];
    out[0] = out[1];
    out[1] = t;
  }
  if (torture_rand (rng) % 2)                 /* read the slot back */
    out[n++] = (struct torture_step) { writer, DO_READ, 0 };
  return n;
}

/* Called for each op of a round, after torture_begin gave it seq: the
 * driver fills the data (torture_fill) and submits the op, and calls
 * torture_end when it completes.  Returns -1 to stop. */
typedef int torture_submit_fn (void *ctx, const struct torture_step *step,
                               uint32_t sector, uint64_t off, uint64_t len,
                               uint32_t seq);

static inline int
torture_round (const struct torture_geom *g, struct torture_log *log,
               uint16_t writer, uint64_t *rng, torture_submit_fn *submit,
               void *ctx)
{
  for (uint32_t sector = 0; sector < g->nsectors; sector++) {
    struct torture_step step[3];
    unsigned n = torture_steps (rng, writer, step);
    uint64_t soff = g->base + (uint64_t) sector * g->physical;
    for (unsigned i = 0; i < n; i++) {
      int all = step[i].slot == TORTURE_ALL;
      uint64_t off = all ? soff : soff + (uint64_t) writer * g->logical;
      uint64_t len = all ? g->physical : g->logical;
      uint32_t seq = torture_begin (log, sector, step[i].slot,
                                    step[i].what == DO_WRITE ? T_WRITE
                                    : step[i].what == DO_READ ? T_READ
                                                              : T_ZERO);
      if (submit (ctx, &step[i], sector, off, len, seq) == -1)
        return -1;
    }
  }
  return 0;
}

/* Fills the bytes an op writes: one stamp repeated through each slot. */
static inline void
torture_fill (const struct torture_geom *g, char *buf, uint16_t writer,
              uint32_t seq, uint32_t sector, uint16_t slot)
{
  uint32_t first = slot == TORTURE_ALL ? 0 : slot;
  uint32_t last = slot == TORTURE_ALL ? torture_slots (g) - 1 : slot;
  for (uint32_t s = first; s <= last; s++) {
    struct stamp st = { TORTURE_MAGIC, writer, (uint16_t) s, seq, sector };
    char *p = buf + (s - first) * g->logical;
    for (uint32_t i = 0; i < g->logical; i += sizeof st)
      memcpy (p + i, &st, sizeof st);
  }
}

/* Records what read seq found in its slot (g->logical bytes at data);
 * call it before torture_end. */
static inline void
torture_read_done (const struct torture_geom *g, struct torture_log *log,
                   uint32_t seq, const char *data)
{
  struct torture_op *op = &log->ops[seq];
  struct stamp st;
  memcpy (&st, data, sizeof st);
  int allzero = 1;
  for (uint32_t i = 0; i < g->logical && allzero; i++)
    allzero = data[i] == 0;
  op->got = allzero ? GOT_ZERO : GOT_STAMP;
  for (uint32_t i = sizeof st; i < g->logical && !allzero; i += sizeof st)
    if (memcmp (data + i, &st, sizeof st) != 0)
      op->got = GOT_BAD;
  if (op->got == GOT_STAMP && (st.magic != TORTURE_MAGIC ||
                               st.slot != op->slot ||
                               st.sector != op->sector))
    op->got = GOT_BAD;
  op->got_writer = st.writer;
  op->got_seq = st.seq;
}

/* Calls fn for every write and zero in the logs and every slot it
 * covered (all of its sector's for TORTURE_ALL), with the op, where it
 * stands in the logs (writer w, index i) and the slot's index
 * k = sector * slots + slot. */
typedef void torture_update_fn (void *ctx, const struct torture_op *op,
                                unsigned w, uint32_t i, size_t k);
static inline void
torture_each_update (const struct torture_geom *g,
                     const struct torture_log *logs, unsigned nwriters,
                     torture_update_fn *fn, void *ctx)
{
  const uint32_t slots = torture_slots (g);
  for (unsigned w = 0; w < nwriters; w++)
    for (uint32_t i = 0; i < logs[w].n; i++) {
      const struct torture_op *op = &logs[w].ops[i];
      if (op->kind == T_READ)
        continue;
      uint32_t a = op->slot == TORTURE_ALL ? 0 : op->slot;
      uint32_t b = op->slot == TORTURE_ALL ? slots - 1 : op->slot;
      for (uint32_t s = a; s <= b; s++)
        fn (ctx, op, w, i, (size_t) op->sector * slots + s);
    }
}

/* The updates of each slot k, as (writer, index) pairs in
 * idx[first[k]] .. idx[first[k + 1] - 1]: counted, then filled. */
struct torture_index {
  size_t *first, *fill;
  uint32_t (*idx)[2];
};

static inline void
torture_count_update (void *ctx, const struct torture_op *op, unsigned w,
                      uint32_t i, size_t k)
{
  (void) op, (void) w, (void) i;
  ((struct torture_index *) ctx)->first[k + 1]++;
}

static inline void
torture_index_update (void *ctx, const struct torture_op *op, unsigned w,
                      uint32_t i, size_t k)
{
  struct torture_index *x = ctx;
  (void) op;
  x->idx[x->first[k] + x->fill[k]][0] = w;
  x->idx[x->first[k] + x->fill[k]++][1] = i;
}

/* Per slot, the latest start of an update and the latest end of a zero. */
struct torture_latest {
  uint64_t *maxstart, *maxzeroend;
};

static inline void
torture_latest_update (void *ctx, const struct torture_op *op, unsigned w,
                       uint32_t i, size_t k)
{
  struct torture_latest *x = ctx;
  (void) w, (void) i;
  if (op->start > x->maxstart[k])
    x->maxstart[k] = op->start;
  if (op->kind == T_ZERO && op->end > x->maxzeroend[k])
    x->maxzeroend[k] = op->end;
}

/* Checks every read that no op on its slot overlapped (see the top).
 * Returns the number of bad reads, and the number checked in *checked;
 * describes the first few in msg. */
static inline unsigned
torture_verify_reads (const struct torture_geom *g, struct torture_log *logs,
                      unsigned nwriters, uint64_t *checked,
                      void (*report) (const char *msg))
{
  const uint32_t slots = torture_slots (g);
  const size_t nslots = (size_t) g->nsectors * slots;
  /* The writes and zeroes of each slot: count, then index them. */
  struct torture_index x = { calloc (nslots + 1, sizeof *x.first),
                             calloc (nslots ? nslots : 1, sizeof *x.fill),
                             NULL };
  unsigned bad = 0;
  char msg[256];
  if (!x.first || !x.fill)
    abort ();
  torture_each_update (g, logs, nwriters, torture_count_update, &x);
  for (size_t k = 0; k < nslots; k++)
    x.first[k + 1] += x.first[k];
  x.idx = malloc ((x.first[nslots] ? x.first[nslots] : 1) * sizeof *x.idx);
  if (!x.idx)
    abort ();
  torture_each_update (g, logs, nwriters, torture_index_update, &x);

  *checked = 0;
  for (unsigned w = 0; w < nwriters; w++)
    for (uint32_t i = 0; i < logs[w].n; i++) {
      const struct torture_op *r = &logs[w].ops[i];
      if (r->kind != T_READ)
        continue;
      size_t k = (size_t) r->sector * slots + r->slot;
      uint64_t maxstart = 0, maxzeroend = 0;
      bool overlap = false;
      for (size_t j = x.first[k]; j < x.first[k + 1] && !overlap; j++) {
        const struct torture_op *op = &logs[x.idx[j][0]].ops[x.idx[j][1]];
        if (op->start < r->end && r->start < op->end)
          overlap = true;
        else if (op->end <= r->start) {
          if (op->start > maxstart)
            maxstart = op->start;
          if (op->kind == T_ZERO && op->end > maxzeroend)
            maxzeroend = op->end;
        }
      }
      if (overlap)
        continue;
      ++*checked;
      const char *why = NULL;
      if (r->got == GOT_BAD)
        why = "torn or foreign content";
      else if (r->got == GOT_ZERO) {
        if (maxstart && maxzeroend < maxstart)
          why = "zeroes, but a write had completed";
      }
      else if (r->got_writer >= nwriters ||
               r->got_seq >= logs[r->got_writer].n)
        why = "content no op wrote";
      else {
        const struct torture_op *op = &logs[r->got_writer].ops[r->got_seq];
        if (op->kind != T_WRITE || op->sector != r->sector ||
            (op->slot != TORTURE_ALL && op->slot != r->slot))
          why = "content of an op on another slot";
        else if (op->end > r->start)
          why = "content of a write that had not completed";
        else if (op->end < maxstart)
          why = "stale: a later completed op's data is missing";
      }
      if (why && bad++ < 5 && report) {
        snprintf (msg, sizeof msg, "read of sector %u slot %u: %s",
                  r->sector, r->slot, why);
        report (msg);
      }
    }
  free (x.first);
  free (x.fill);
  free (x.idx);
  return bad;
}

/* Checks the final content of the region (nsectors * physical bytes).
 * Returns the number of bad slots; describes the first few in msg. */
static inline unsigned
torture_verify (const struct torture_geom *g, const char *data,
                struct torture_log *logs, unsigned nwriters,
                void (*report) (const char *msg))
{
  const uint32_t slots = torture_slots (g);
  const size_t nslots = (size_t) g->nsectors * slots;
  uint64_t *maxstart = calloc (nslots, sizeof *maxstart);
  uint64_t *maxzeroend = calloc (nslots, sizeof *maxzeroend);
  unsigned bad = 0;
  char msg[256];

  if (!maxstart || !maxzeroend)
    abort ();
  struct torture_latest x = { maxstart, maxzeroend };
  torture_each_update (g, logs, nwriters, torture_latest_update, &x);

  for (size_t k = 0; k < nslots; k++) {
    const char *p = data + k * g->logical;
    uint32_t sector = k / slots, slot = k % slots;
    const char *why = NULL;
    struct stamp st;
    memcpy (&st, p, sizeof st);
    int allzero = 1;
    for (uint32_t i = 0; i < g->logical && allzero; i++)
      allzero = p[i] == 0;
    if (allzero) {
      if (maxstart[k] && maxzeroend[k] < maxstart[k])
        why = "zeroes, but a later write was lost";
    }
    else {
      for (uint32_t i = sizeof st; i < g->logical && !why; i += sizeof st)
        if (memcmp (p + i, &st, sizeof st) != 0)
          why = "torn: mixed contents";
      if (!why && (st.magic != TORTURE_MAGIC || st.writer >= nwriters ||
                   st.seq >= logs[st.writer].n || st.slot != slot ||
                   st.sector != sector))
        why = "content no op wrote";
      if (!why) {
        const struct torture_op *op = &logs[st.writer].ops[st.seq];
        if (op->kind != T_WRITE || op->sector != sector ||
            (op->slot != TORTURE_ALL && op->slot != slot))
          why = "content of an op on another slot";
        else if (op->end < maxstart[k])
          why = "lost update: a later op's data is gone";
      }
    }
    if (why && bad++ < 5 && report) {
      snprintf (msg, sizeof msg, "sector %u slot %u: %s", sector, slot, why);
      report (msg);
    }
  }
  free (maxstart);
  free (maxzeroend);
  return bad;
}

#endif
