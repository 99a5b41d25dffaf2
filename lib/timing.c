/* SPDX-License-Identifier: BSD-3-Clause */
/* The timing model: what a request would cost a real drive.  Pure
 * arithmetic over the geometry (s4k_timing_cost) and a virtual timeline
 * (s4k_timing_schedule) that says when each request completes; the front
 * ends wait until then without holding a thread or a loop from other
 * requests, and the data work itself is done (and its locks released)
 * before.  Nothing here runs unless a timing key is given. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sect4k/sect4k.h"

/* Presets, justified in the man pages:
 * hdd7200: a 7200 rpm disk.  One revolution is 60 s / 7200 = 8.33 ms; an
 *   access costs about half of one on average (4.17 ms) plus a short seek:
 *   4 ms; RMW costs a revolution (read the sector, wait for it to come
 *   round again, write it); 180 MB/s media rate; NCQ depth 32.
 * ssd: a SATA TLC SSD.  4 KiB reads about 80 us, writes 30 us (they land
 *   in the drive's cache), an RMW reads a NAND page (50 us), 500 MB/s
 *   (SATA 6 Gb/s), NCQ depth 32.
 * rpm: the rotation rate the front ends report, 1 for a non-rotating
 * medium (s4k_timing_rotation_rate). */
struct timing_preset {
  const char *name;
  uint64_t read_ns, write_ns, rmw_ns, rate;
  uint32_t queue_depth;
  uint16_t rpm;
};
static const struct timing_preset presets[] = {
  { "hdd7200", 4000000, 4000000, 8333333, 180000000, 32, 7200 },
  { "ssd", 80000, 30000, 50000, 500000000, 32, 1 },
  { "none", 0, 0, 0, 0, 0, 1 },
};
#define NPRESETS (sizeof presets / sizeof presets[0])
#define MAX_QUEUE_DEPTH 4096u

int
s4k_parse_duration (const char *str, uint64_t *ns)
{
  const char *p = str;
  uint64_t whole = 0, frac = 0, frac_div = 1;
  if (!isdigit ((unsigned char) *p))
    return -1;
  for (; isdigit ((unsigned char) *p); p++) {
    whole = whole * 10 + (*p - '0');
    if (whole > 3600000000000ull)
      return -1;
  }
  if (*p == '.') {
    p++;
    if (!isdigit ((unsigned char) *p))
      return -1;
    for (; isdigit ((unsigned char) *p); p++)
      if (frac_div < 1000000000) {
        frac = frac * 10 + (*p - '0');
        frac_div *= 10;
      }
  }
  uint64_t unit;
  if (*p == '\0' || strcmp (p, "s") == 0)
    unit = 1000000000;
  else if (strcmp (p, "ms") == 0)
    unit = 1000000;
  else if (strcmp (p, "us") == 0)
    unit = 1000;
  else if (strcmp (p, "ns") == 0)
    unit = 1;
  else
    return -1;
  if (whole > 3600000000000ull / unit)
    return -1;
  uint64_t v = whole * unit + frac * unit / frac_div;
  if (v > 3600000000000ull)
    return -1;
  *ns = v;
  return 0;
}

int
s4k_timing_set (struct s4k_timing_params *p, const char *key,
                const char *value, char *err, size_t errlen)
{
  uint64_t *dur = NULL;
  bool *have = NULL;
  if (strcmp (key, "latency-read") == 0)
    dur = &p->read_ns, have = &p->have_read;
  else if (strcmp (key, "latency-write") == 0)
    dur = &p->write_ns, have = &p->have_write;
  else if (strcmp (key, "latency-rmw") == 0)
    dur = &p->rmw_ns, have = &p->have_rmw;
  if (dur) {
    if (s4k_parse_duration (value, dur) == -1) {
      snprintf (err, errlen, "%s=%s: not a duration (a number with s, ms, "
                "us or ns, e.g. 500us or 2ms; at most 3600s)", key, value);
      return -1;
    }
    *have = true;
    return 0;
  }
  if (strcmp (key, "rate") == 0) {
    if (s4k_parse_size (value, &p->rate) == -1) {
      snprintf (err, errlen, "rate=%s: not a rate in bytes per second (a "
                "number with an optional k/M/G suffix, e.g. 200M; 0: no "
                "transfer cost)", value);
      return -1;
    }
    p->have_rate = true;
    return 0;
  }
  if (strcmp (key, "queue-depth") == 0) {
    uint64_t v;
    if (strcmp (value, "unlimited") == 0)
      v = 0;
    else if (s4k_parse_size (value, &v) == -1 || v == 0 ||
             v > MAX_QUEUE_DEPTH) {
      snprintf (err, errlen, "queue-depth=%s: must be a number of requests "
                "from 1 to %u, or unlimited", value, MAX_QUEUE_DEPTH);
      return -1;
    }
    p->queue_depth = v;
    p->have_queue_depth = true;
    return 0;
  }
  if (strcmp (key, "timing") == 0) {
    for (size_t i = 0; i < NPRESETS; i++)
      if (strcmp (value, presets[i].name) == 0) {
        p->preset = presets[i].name;
        return 0;
      }
    snprintf (err, errlen, "timing=%s: unknown timing model (known: "
              "hdd7200, ssd, none)", value);
    return -1;
  }
  return 1;
}

int
s4k_timing_finish (struct s4k_timing_params *p, char *err, size_t errlen)
{
  (void) err;
  (void) errlen;
  const struct timing_preset *t = NULL;
  for (size_t i = 0; p->preset && i < NPRESETS; i++)
    if (strcmp (p->preset, presets[i].name) == 0)
      t = &presets[i];
  if (!t)
    return 0;
  if (!p->have_read)
    p->read_ns = t->read_ns;
  if (!p->have_write)
    p->write_ns = t->write_ns;
  if (!p->have_rmw)
    p->rmw_ns = t->rmw_ns;
  if (!p->have_rate)
    p->rate = t->rate;
  if (!p->have_queue_depth)
    p->queue_depth = t->queue_depth;
  return 0;
}

bool
s4k_timing_enabled (const struct s4k_timing_params *p)
{
  return p->read_ns || p->write_ns || p->rmw_ns || p->rate;
}

uint16_t
s4k_timing_rotation_rate (const struct s4k_timing_params *p)
{
  for (size_t i = 0; p->preset && i < NPRESETS; i++)
    if (strcmp (p->preset, presets[i].name) == 0)
      return presets[i].rpm;
  return 1;
}

/* The physical sectors a write of [off, off+len) only partly covers,
 * which are read, merged and written back (as lib/dev/dev_plan.h's RMW): the
 * first and/or the last.  Returns how many. */
static unsigned
rmw_ends (const struct s4k_geometry *g, uint64_t len, uint64_t off,
          uint64_t rs[2])
{
  const uint64_t end = off + len;
  const uint64_t first = s4k_sector_index (g, off);
  const uint64_t last = s4k_sector_index (g, end - 1);
  unsigned n = 0;
  if (!s4k_is_boundary (g, off) || (first == last && !s4k_is_boundary (g, end)))
    rs[n++] = first;
  if (first != last && !s4k_is_boundary (g, end))
    rs[n++] = last;
  return n;
}

void
s4k_timing_cost (const struct s4k_timing_params *p,
                 const struct s4k_geometry *g, enum s4k_op op, uint64_t len,
                 uint64_t off, struct s4k_timing_cost *c)
{
  memset (c, 0, sizeof *c);
  if (op == S4K_OP_FLUSH) {
    c->base = p->write_ns;      /* the drive writes its cache back */
    return;
  }
  if (len == 0 || off >= g->size || len > g->size - off ||
      op == S4K_OP_EXTENTS || op == S4K_OP_CACHE)
    return;                     /* nothing the media does */
  const uint64_t end = off + len;
  const uint64_t first = s4k_sector_index (g, off);
  const uint64_t last = s4k_sector_index (g, end - 1);
  uint64_t start, stop, unused;
  s4k_sector_range (g, first, &start, &unused);
  s4k_sector_range (g, last, &unused, &stop);
  c->sectors = last - first + 1;
  c->base = op == S4K_OP_READ ? p->read_ns : p->write_ns;
  if (op == S4K_OP_TRIM)
    return;                     /* unmapping moves no data */
  /* The media moves whole physical sectors: a 4 KiB read straddling two
   * of them moves 8 KiB. */
  if (p->rate)
    c->transfer = (uint64_t) ((unsigned __int128) (stop - start) *
                              1000000000u / p->rate);
  if (op == S4K_OP_WRITE || op == S4K_OP_ZERO) {
    uint64_t rs[2];
    c->rmw_sectors = rmw_ends (g, len, off, rs);
    c->rmw = c->rmw_sectors * p->rmw_ns;
  }
}

/* ---- the drive's queue -------------------------------------------------- */

/* Stripes of the per-sector RMW timeline: a sector hashing to a stripe
 * an RMW of another sector holds waits for it too (rare at this size). */
#define RMW_STRIPES 4096u

struct s4k_timing {
  struct s4k_timing_params p;
  struct s4k_geometry g;
  pthread_mutex_t lock;
  uint32_t depth;               /* 0: unlimited */
  uint64_t *slot_free;          /* depth entries: when each slot frees */
  uint64_t rmw_free[RMW_STRIPES];       /* when a sector's last RMW ends */
};

struct s4k_timing *
s4k_timing_new (const struct s4k_timing_params *p,
                const struct s4k_geometry *g)
{
  struct s4k_timing *t = calloc (1, sizeof *t);
  if (!t)
    return NULL;
  t->p = *p;
  t->g = *g;
  t->depth = p->queue_depth;
  if (t->depth && !(t->slot_free = calloc (t->depth, sizeof (uint64_t)))) {
    free (t);
    return NULL;
  }
  pthread_mutex_init (&t->lock, NULL);
  return t;
}

void
s4k_timing_free (struct s4k_timing *t)
{
  if (!t)
    return;
  pthread_mutex_destroy (&t->lock);
  free (t->slot_free);
  free (t);
}

static inline uint64_t
max64 (uint64_t a, uint64_t b)
{
  return a > b ? a : b;
}

static unsigned
stripe (uint64_t sector)
{
  return (sector * 0x9e3779b97f4a7c15ull) >> 52;        /* 12 bits */
}

uint64_t
s4k_timing_schedule (struct s4k_timing *t, enum s4k_op op, uint64_t len,
                     uint64_t off, uint64_t now, struct s4k_timing_cost *c)
{
  s4k_timing_cost (&t->p, &t->g, op, len, off, c);
  const uint64_t service = c->base + c->transfer + c->rmw;
  if (service == 0)
    return now;
  uint64_t rs[2];
  const unsigned nr = c->rmw_sectors ? rmw_ends (&t->g, len, off, rs) : 0;

  pthread_mutex_lock (&t->lock);
  uint64_t start = now;
  uint32_t slot = 0;
  if (t->depth) {
    /* The slot that frees first: requests beyond the depth start in the
     * order they arrived. */
    for (uint32_t i = 1; i < t->depth; i++)
      if (t->slot_free[i] < t->slot_free[slot])
        slot = i;
    start = max64 (start, t->slot_free[slot]);
  }
  /* A drive serialises RMWs of one sector: this one starts once the
   * last one queued for it has ended. */
  for (unsigned i = 0; i < nr; i++)
    start = max64 (start, t->rmw_free[stripe (rs[i])]);
  const uint64_t done = start + service;
  for (unsigned i = 0; i < nr; i++)
    t->rmw_free[stripe (rs[i])] = done;
  if (t->depth)
    t->slot_free[slot] = done;
  pthread_mutex_unlock (&t->lock);
  c->wait = start - now;
  return done;
}

uint64_t
s4k_now_ns (void)
{
  struct timespec ts;
  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (uint64_t) ts.tv_sec * 1000000000u + ts.tv_nsec;
}
