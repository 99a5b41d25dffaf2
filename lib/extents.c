/* SPDX-License-Identifier: BSD-3-Clause */
/* Extents rounded to whole physical sectors (see sect4k/extents.h). */
#include "sect4k/extents.h"

/* The first physical boundary at or after off, and at or before it. */
static uint64_t
boundary_up (const struct s4k_geometry *g, uint64_t off)
{
  if (off == 0)
    return 0;
  uint64_t sh = s4k_sector_shift (g);
  uint64_t b = ((off + sh + g->physical - 1) & ~(uint64_t) (g->physical - 1)) - sh;
  return b < g->size ? b : g->size;
}
static uint64_t
boundary_down (const struct s4k_geometry *g, uint64_t off)
{
  if (off >= g->size)
    return g->size;
  uint64_t sh = s4k_sector_shift (g);
  uint64_t b = (off + sh) & ~(uint64_t) (g->physical - 1);
  return b > sh ? b - sh : 0;
}

/* Extends the outgoing run to end, passing on the one before if the
 * kind changes. */
static void
out (struct s4k_extent_rounder *w, uint64_t end, bool zero)
{
  if (w->stop || end <= w->out_end)
    return;
  if (w->out_end > w->out_start && zero != w->out_zero) {
    w->stop = w->fn (w->opaque, w->out_start, w->out_end - w->out_start,
                     w->out_zero);
    w->out_start = w->out_end;
  }
  w->out_zero = zero;
  w->out_end = end;
}

/* A zero run underneath is zero for us only over the whole sectors in
 * it. */
static void
zero_run (struct s4k_extent_rounder *w, uint64_t start, uint64_t end)
{
  uint64_t zs = boundary_up (w->g, start), ze = boundary_down (w->g, end);
  if (zs < ze) {
    out (w, zs, false);
    out (w, ze, true);
  }
  out (w, end, false);
}

void
s4k_extent_round_init (struct s4k_extent_rounder *w,
                       const struct s4k_geometry *g, uint64_t off,
                       s4k_extent_fn *fn, void *opaque)
{
  *w = (struct s4k_extent_rounder) { .g = g, .fn = fn, .opaque = opaque,
                                     .pos = off, .out_start = off,
                                     .out_end = off };
}

void
s4k_extent_round_add (struct s4k_extent_rounder *w, uint64_t len, bool zero)
{
  uint64_t end = w->pos + len;
  if (zero && !w->in_zero) {
    w->in_zero = true;
    w->zstart = w->pos;
  }
  else if (!zero && w->in_zero) {
    w->in_zero = false;
    zero_run (w, w->zstart, w->pos);
  }
  if (!zero)
    out (w, end, false);
  w->pos = end;
}

int
s4k_extent_round_end (struct s4k_extent_rounder *w, uint64_t end)
{
  if (w->in_zero) {
    w->in_zero = false;
    zero_run (w, w->zstart, w->pos < end ? w->pos : end);
  }
  if (!w->stop && w->out_end > w->out_start)
    w->stop = w->fn (w->opaque, w->out_start, w->out_end - w->out_start,
                     w->out_zero);
  w->out_start = w->out_end;
  return w->stop < 0 ? w->stop : 0;
}
