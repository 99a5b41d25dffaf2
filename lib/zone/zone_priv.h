/* SPDX-License-Identifier: BSD-3-Clause */
/* The zone table, shared by lib/zone/zone.c (the state machine) and
 * lib/zone/zone_file.c (its records in FILE.sect4k-zones). */
#ifndef S4K_ZONE_PRIV_H
#define S4K_ZONE_PRIV_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "sect4k/zone.h"

struct zone {
  uint64_t start, len, wp;      /* LBAs; wp is start + len when FULL */
  uint8_t type, cond;
  bool non_seq;
  bool mark;                    /* OPEN ALL: closed when it began */
  /* 0, or the write pointer's byte offset + 1 while the zone is armed
   * for writes without the lock (zone.c, s4k_zones_write_fast): then
   * it, not wp, is the write pointer.  Bytes, as the device's requests
   * come: no conversion on the way. */
  _Atomic uint64_t fwp;
  uint64_t fend;                /* the zone's end, in bytes */
  /* cond == OFFLINE, for the read check without the lock
   * (s4k_zones_read_fast, s4k_zones_read): set with cond
   * (zone_set_cond), read anywhere.  A zone's type never changes, so
   * the rest of the read check needs no lock. */
  _Atomic bool offline;
};

/* Zones changed under the lock since it was taken, whose records
 * zone_file_save writes before it is released. */
#define ZONE_TOUCHED_MAX 4

/* One mutex for the whole table: a write to one zone can close another
 * (the open limit), so the counts and every condition change together. */
struct s4k_zones {
  pthread_mutex_t lock;
  struct s4k_zones_info info;
  unsigned shift;               /* log2 zone_lbas */
  uint64_t pblk;                /* logical blocks per physical block */
  uint32_t logical;             /* bytes per LBA */
  unsigned lbits;               /* log2 logical */
  unsigned byte_shift;          /* log2 of a zone's bytes */
  uint32_t imp_open, exp_open, closed;
  struct zone *z;
  /* Persistence (zone_file.c), NULL rec without file=. */
  uint64_t *rec;                /* one record per zone, mapped */
  uint32_t touched[ZONE_TOUCHED_MAX];
  unsigned ntouched;            /* more than the array: save every zone */
  /* With a write cache (the fault layer): each zone's durable pointer,
   * what its record holds in place of wp; NULL without. */
  uint64_t *dur;
};

/* Under the lock (or before the table is shared): zn's condition, and
 * the flag that reads test without the lock. */
static inline void
zone_set_cond (struct zone *zn, uint8_t cond)
{
  zn->cond = cond;
  atomic_store_explicit (&zn->offline, cond == S4K_ZC_OFFLINE,
                         memory_order_release);
}

/* zn changed: its record is written before the lock is released. */
static inline void
zone_touch (struct s4k_zones *z, const struct zone *zn)
{
  if (__builtin_expect (z->rec != NULL, 0)) {
    if (z->ntouched < ZONE_TOUCHED_MAX)
      z->touched[z->ntouched] = (uint32_t) (zn - z->z);
    z->ntouched++;
  }
}

/* zone_file.c: the touched zones' records, under the lock. */
void zone_file_save (struct s4k_zones *z);

/* Releases the lock of a call that changed zones, their records written
 * first (so a write is on record before the device acknowledges it). */
static inline void
zone_unlock (struct s4k_zones *z)
{
  if (__builtin_expect (z->ntouched != 0, 0))
    zone_file_save (z);
  pthread_mutex_unlock (&z->lock);
}

#endif
