/* SPDX-License-Identifier: BSD-3-Clause */
/* Rounding a store's extents to whole physical sectors: for stores whose
 * own layer reports finer runs (an upstream NBD server, the next layer
 * of an nbdkit filter).  A sector reads as zeroes only if all of it
 * does. */
#ifndef SECT4K_EXTENTS_H
#define SECT4K_EXTENTS_H

#include "sect4k/sect4k.h"

struct s4k_extent_rounder {
  const struct s4k_geometry *g;
  s4k_extent_fn *fn;
  void *opaque;
  uint64_t pos;                  /* runs seen up to here */
  uint64_t zstart;               /* the zero run in progress, if in_zero */
  bool in_zero;
  uint64_t out_start, out_end;   /* the run not yet passed on */
  bool out_zero;
  int stop;                      /* fn's non-zero answer: stop feeding */
};

/* Runs start at off (a physical boundary) and go to fn. */
void s4k_extent_round_init (struct s4k_extent_rounder *w,
                            const struct s4k_geometry *g, uint64_t off,
                            s4k_extent_fn *fn, void *opaque);
/* The next run underneath: [w->pos, w->pos + len). */
void s4k_extent_round_add (struct s4k_extent_rounder *w, uint64_t len,
                           bool zero);
/* Passes on what is left up to end (a physical boundary, or the size);
 * returns fn's error, or 0. */
int s4k_extent_round_end (struct s4k_extent_rounder *w, uint64_t end);

#endif
