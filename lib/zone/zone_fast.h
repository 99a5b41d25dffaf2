/* SPDX-License-Identifier: BSD-3-Clause */
/* The zone checks without the lock, inline where the device's fast
 * paths call them (lib/dev/dev_sync.c) as well as in s4k_zones_write: a
 * call would cost a zoned write a tenth of what the check saves.  The
 * arming protocol the write check relies on is in lib/zone/zone.c ("writes
 * without the lock"); the read check's, at s4k_zones_read there. */
#ifndef S4K_ZONE_FAST_H
#define S4K_ZONE_FAST_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "zone_priv.h"

/* The write [off, off + len) of whole physical blocks (len > 0, inside
 * the device; bytes) without the lock: true if it was taken (the
 * pointer moved), false to call s4k_zones_write.  Only host-managed
 * sequential zones are ever armed, so fwp says it all. */
static inline bool
s4k_zones_write_fast (struct s4k_zones *z, uint64_t off, uint64_t len)
{
  struct zone *zn = &z->z[off >> z->byte_shift];
  uint64_t w = atomic_load_explicit (&zn->fwp, memory_order_relaxed);
  return w == off + 1 && len < zn->fend - off &&
         atomic_compare_exchange_strong_explicit (&zn->fwp, &w,
                                                  off + len + 1,
                                                  memory_order_acq_rel,
                                                  memory_order_relaxed);
}

/* The read [off, off + len) (len > 0, inside the device; bytes): true if
 * it passes the zone checks, as the common read does (one zone, not
 * offline: no boundary to cross); false to call s4k_zones_read, which
 * says why, or tests each zone of a read across several. */
static inline bool
s4k_zones_read_fast (const struct s4k_zones *z, uint64_t off, uint64_t len)
{
  const uint64_t i = off >> z->byte_shift;
  return i == (off + len - 1) >> z->byte_shift &&
         !atomic_load_explicit (&z->z[i].offline, memory_order_acquire);
}

#endif
