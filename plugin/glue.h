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
