/* SPDX-License-Identifier: BSD-3-Clause */
/* What the nbdkit plugin and the nbdkit filter share: engine results in
 * nbdkit's convention, request flags, extents.  Include after
 * nbdkit-plugin.h or nbdkit-filter.h. */
#ifndef S4K_GLUE_H
#define S4K_GLUE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "sect4k/sect4k.h"

/* 0, or -1 with nbdkit's error set (and logged: a strict refusal once per
 * connection, *refused_once remembering it, then as debug messages). */
int s4k_glue_result (struct s4k_dev *dev, atomic_bool *refused_once, int r,
                     enum s4k_op op, uint64_t len, uint64_t off);
/* nbdkit 1.32 cannot drop a connection: after a power cut, every request
 * on one opened before it (epoch: the device's power cuts then) fails
 * with EIO instead, and the engine refuses those still in flight.  Sets
 * the thread's epoch (s4k_fault_epoch) for the engine call to follow;
 * true, with nbdkit's error set (and logged once per connection,
 * *cut_logged remembering it), if the connection is cut off. */
bool s4k_glue_cut_off (struct s4k_dev *dev, unsigned epoch,
                       atomic_bool *cut_logged);
/* NBDKIT_FLAG_... to S4K_FUA, S4K_MAY_TRIM, S4K_FAST_ZERO. */
unsigned s4k_glue_flags (uint32_t flags);

/* s4k_extents' callback adding runs to nbdkit's list. */
struct s4k_glue_extents {
  struct nbdkit_extents *extents;
  bool req_one;                 /* one extent is all the client wants */
};
int s4k_glue_add_extent (void *opaque, uint64_t off, uint64_t len,
                         bool zero);

#endif
