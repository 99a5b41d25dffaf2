/* SPDX-License-Identifier: BSD-3-Clause */
/* The device's private parts, shared by its files:
 *   dev.c        the device: opening it over its store stack (the fault
 *                layer, the write log, timing, statistics) and closing
 *                it, what it says about itself, what strict refuses,
 *                lost writes per client connection, write log marks;
 *   dev_plan.h   the plan every request runs (checks, the span of
 *                sectors, the stages, the write log's entries), inlined
 *                into each of the two drivers:
 *   dev_sync.c   the synchronous driver (s4k_read..., the plugin): the
 *                plan run to its end, the fast paths of whole sectors,
 *                the per-thread bounce buffer, extents;
 *   dev_aio.c    the asynchronous driver (s4k_aio_..., sect4k-server):
 *                the plan submitted to a loop and resumed at the stage
 *                that waited.
 * This header: the device. */
#ifndef S4K_DEV_PRIV_H
#define S4K_DEV_PRIV_H

#include <stdbool.h>
#include <stdint.h>

#include "sect4k/sect4k.h"
#include "sect4k/wlog.h"
#include "sect4k/zone.h"
#include "store/store.h"
#include "lock.h"
#include "stats/stats.h"
#include "stats/stats_save.h"

/* For what runs on every request: inline into each caller, so that the
 * synchronous calls fold the plan into straight code. */
#define S4K_INLINE static inline __attribute__ ((always_inline))

struct s4k_dev {
  struct s4k_geometry g;
  bool counting;                /* keep statistics */
  bool lockfree_reads;          /* the store's reads need no sector lock */
  bool partial_writes;          /* the store merges writes that cut
                                   sectors itself */
  uint64_t shift, pmask;        /* s4k_sector_shift, physical - 1 */
  uint64_t fast_max;            /* longest fast-path request: 0 when
                                   counting (every request is planned) */
  uint64_t fast_write_max;      /* the same for writes: 0 also when
                                   logging them; on a zoned device, after
                                   the zone check (s4k_write) */
  uint64_t fast_zoned_read_max; /* a zoned device's fast_max for reads,
                                   after the zone check (planned_read);
                                   0 if not zoned */
  unsigned pbits;               /* log2 physical */
  uint32_t max_request;
  bool strict;
  struct s4k_store *store;
  struct s4k_locks *locks;
  unsigned debug_mask;
  s4k_debug_fn *debug_fn;
  void *debug_opaque;
  struct stats_state stats;
  struct stats_saver saver;
  struct s4k_fault *fault;      /* the fault layer over the store, or NULL */
  const char *name;             /* export name or NULL: for statistics */
  struct s4k_timing *timing;    /* NULL unless a timing key asks */
  struct s4k_wlog *wlog;        /* write-log=, or NULL */
  struct s4k_atomic atomic;     /* atomic-write-*=: max 0, none */
  bool write_atomic;            /* atomic writes go to the store's
                                   write_atomic (the fault layer's) */
  _Atomic uint64_t *losses;     /* the store's (under any layer) */
  struct s4k_zones *zones;      /* zoned=: the zones, or NULL */
  unsigned lbits;               /* log2 logical */
  bool volatile_store;          /* memory: no geometry outlives the device */
  bool upstream;                /* upstream=: its losses are in the stats */
  char *geom_record;            /* file= a regular file: where FORMAT UNIT
                                   records the logical size (dev_format.c) */
  void *zmap;                   /* zoned= and file=: FILE.sect4k-zones,
                                   mapped (dev_zones.c), or NULL */
  size_t zmap_len;
};

/* A request the device makes itself on a zoned device (the data a zone
 * reset discards): not checked against the zones. */
#define S4K_ZONE_RAW 0x80000000u
/* A write at its zone's write pointer (s4k_dev_zone_append): the offset
 * it comes with is the zone's start; the zones say where it goes. */
#define S4K_ZONE_APPEND 0x40000000u

/* dev_format.c: the record of a logical size FORMAT UNIT set on a file=
 * store, FILE.sect4k-geometry.  init: d->geom_record for a regular file
 * (-1: out of memory); apply: the record's logical size into c->geom
 * (-1 with err: a record that does not fit the keys' geometry). */
int dev_format_record_init (struct s4k_dev *d, const char *file, char *err,
                            size_t errlen);
int dev_format_record_apply (struct s4k_config *c, char *err, size_t errlen);
/* A file beside the data file (FILE.sect4k-geometry, FILE.sect4k-zones):
 * written whole to PATH.tmp, synced, renamed over path, the directory
 * synced.  0 or -errno. */
int dev_sidecar_write (const char *path, const void *buf, size_t len);

/* dev_zones.c: the zone state of a file= device in FILE.sect4k-zones,
 * mapped.  open: after the zones are made (0, or -1 with err: a layout
 * that is not the keys', a file with data and no zone state); sync:
 * the records of the zone holding lba (UINT64_MAX: all) to the disk, as
 * a flush or FUA makes the data durable (0 or -errno); close: unmaps. */
int dev_zones_file_open (struct s4k_dev *d, const struct s4k_config *c,
                         char *err, size_t errlen);
/* Before the store opens the file (size= may grow it): -1 with err if
 * FILE.sect4k-zones names another layout than the keys'. */
int dev_zones_file_check (const struct s4k_config *c, char *err,
                          size_t errlen);
int dev_zones_file_sync (struct s4k_dev *d, uint64_t lba);
void dev_zones_file_close (struct s4k_dev *d);
/* zone-reformat=true, once the store has the file open and before the
 * zone state is written: the whole file reads zeroes (0, or -1 with err;
 * refused on a read-only start). */
int dev_zones_reformat_data (const struct s4k_config *c,
                             struct s4k_store *store, char *err,
                             size_t errlen);

#endif
