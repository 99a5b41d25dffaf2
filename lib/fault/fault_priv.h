/* SPDX-License-Identifier: BSD-3-Clause */
/* The fault layer's private parts, shared by its files:
 *   fault.c        the layer as a store: its operations, the connection
 *                  epoch, setting it up, its status;
 *   fault_bad.c    bad sectors: the set of runs, repairs, the run-time
 *                  calls that change and list it;
 *   fault_cache.c  the write cache: dirty sectors, staging, reading
 *                  through, destaging, writing back;
 *   fault_cut.c    the power cut: outcomes, the cut report, the run-time
 *                  calls;
 *   fault_zone.c   zoned devices: the power cut of the sequential zones
 *                  (a prefix each, write pointers back), and what makes
 *                  a zone's writes durable (FUA, zero, CLOSE, FINISH).
 * The layer's mutex (m) serializes them: what is declared here runs with
 * it held (or before the layer is shared), except fault_after_cut and
 * sector_of. */
#ifndef S4K_FAULT_PRIV_H
#define S4K_FAULT_PRIV_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "fault.h"

/* ---- bad sectors: sorted, disjoint, non-adjacent runs of sectors ------ */

struct run {
  uint64_t first, last;
};

struct badset {
  struct run *r;
  size_t n, cap;
};

/* A dirty physical sector: its new contents, not yet durable.  The
 * sectors of an atomic write stay one unit while dirty, [gfirst, glast]
 * (every one of them dirty, with the same range): destaged together,
 * kept or dropped together at a cut.  Any other write, zero or trim
 * touching one of them first makes the unit durable (settle), unless
 * it is an atomic write whose sectors hold the whole unit (it takes
 * the unit in), so a unit's sectors never hold part of a request that
 * is not in the unit. */
struct entry {
  uint64_t k;
  bool atomic;
  uint64_t gfirst, glast;
  uint64_t aoff, aend;                  /* the unit's atomic writes, as the
                                           cut report lists them: bytes
                                           from the first any covers to
                                           the end of the last */
  struct entry *hnext;                  /* hash chain */
  struct entry *prev, *next;            /* oldest first */
  char data[];
};

struct s4k_fault {
  struct s4k_store base;
  struct s4k_store *inner;
  char info[640];                       /* the inner store's line, and
                                           what the layer changes */
  struct s4k_geometry g;
  struct s4k_fault_config cfg;
  pthread_mutex_t m;
  struct badset bad;
  uint64_t repaired;                    /* bad sectors writes repaired */
  struct entry **bucket;
  unsigned bucket_bits;
  struct entry *oldest, *newest;
  uint64_t dirty_bytes, dirty_sectors;
  uint64_t atomic_sectors;              /* dirty sectors in atomic units */
  uint64_t writes;                      /* store writes, for power-cut-after */
  uint64_t prng;
  uint64_t seed;
  _Atomic unsigned cuts;
  void (*on_cut) (void *opaque);
  void *on_cut_opaque;
  struct control *control;
  /* zoned=: the device's zones (fault_set_zones), or NULL. */
  struct s4k_zones *zones;
  uint32_t zone_shift;                  /* log2 of a zone's LBAs */
  uint32_t zone_conv, nr_zones;         /* conventional zones, all */
  uint64_t *dwp;                        /* each zone's durable write
                                           pointer: no cut moves the
                                           pointer below it */
  uint64_t *hw;                         /* each zone's end of the writes
                                           that reached the layer: a
                                           flush makes it durable */
  uint64_t *mwp;                        /* each zone's end of the highest
                                           sector on the medium since its
                                           pointer was last durable
                                           (destaged, or kept or torn by
                                           a cut): a cut gives a zone
                                           written off its pointer
                                           (NON_SEQ) max(dwp, mwp) */
  uint64_t *pub;                        /* write-cache=true: each zone's
                                           dwp as the zones last had it
                                           (their records, file=) */
  /* The write in flight at a power-cut-after cut: never acknowledged,
   * so no zone keeps it (its first sector may be the torn one). */
  bool pending;
  uint64_t pending_off;
};

static inline uint64_t
sector_of (const struct s4k_fault *f, uint64_t off)
{
  return s4k_sector_index (&f->g, off);
}

/* ---- fault_bad.c ------------------------------------------------------- */

bool fault_bad_any (const struct badset *b, uint64_t first, uint64_t last);
int fault_bad_add (struct badset *b, uint64_t first, uint64_t last);
/* Returns how many sectors were bad, or -ENOMEM. */
int64_t fault_bad_remove (struct badset *b, uint64_t first, uint64_t last);
/* A write of [off, off+len) made its bad sectors good again; counts them
 * for the statistics. */
int fault_clear_bad (struct s4k_fault *f, uint64_t len, uint64_t off);

/* ---- fault_cache.c ----------------------------------------------------- */

/* The dirty sector k, or NULL. */
struct entry *fault_lookup (struct s4k_fault *f, uint64_t k);
/* Forgets a dirty sector (and frees it). */
void fault_drop (struct s4k_fault *f, struct entry *e);
/* Drops the dirty sectors in [off, off+len) (whole sectors). */
void fault_drop_range (struct s4k_fault *f, uint64_t len, uint64_t off);
/* An atomic write's own bytes, [off, end). */
struct fault_span {
  uint64_t off, end;
};
/* Puts a write's sectors in the table as dirty (atomic, not NULL: as one
 * unit, the write's bytes being *atomic). */
int fault_stage (struct s4k_fault *f, const struct s4k_io *io, unsigned n,
                 const struct fault_span *atomic);
/* Makes a dirty sector durable (with its atomic unit, if it has one). */
int fault_destage (struct s4k_fault *f, struct entry *e);
/* Makes the atomic units among the dirty sectors of [off, off+len)
 * durable, before a request changes part of them. */
int fault_settle_units (struct s4k_fault *f, uint64_t len, uint64_t off);
static inline int
settle (struct s4k_fault *f, uint64_t len, uint64_t off)
{
  return f->atomic_sectors ? fault_settle_units (f, len, off) : 0;
}
/* Dirty sectors from the cache, runs of the others from the store. */
int fault_read_cached (struct s4k_fault *f, const struct s4k_io *io,
                       unsigned n);
/* Writes the whole cache back, then flushes the store. */
int fault_flush_locked (struct s4k_fault *f);

/* ---- fault_cut.c ------------------------------------------------------- */

/* A sector's outcome at a cut. */
enum fault_outcome { FO_KEPT, FO_REVERTED, FO_TORN, FO_UNREADABLE,
                     FO_GARBAGE, FO_ZEROED, FO_N };
/* A cut's report as it is written, and its counts. */
struct cut_out {
  FILE *fp;                             /* the report ("sectors" open) */
  FILE *units;                          /* "atomic" */
  const char *sep;                      /* before the next sector */
  unsigned nunits, unit_counts[2];      /* kept, dropped */
  unsigned counts[FO_N];
  char *old;                            /* a physical sector's buffer */
};
/* A number below n from the seeded PRNG. */
unsigned fault_prng_below (struct s4k_fault *f, unsigned n);
/* A dirty sector's outcome, forced (FO_KEPT, FO_REVERTED, FO_TORN: the
 * policy's interrupted write) or -1 (from the PRNG): reported in o and
 * applied. */
int fault_cut_sector (struct s4k_fault *f, struct entry *e,
                      enum s4k_torn torn, int forced, struct cut_out *o);
/* An atomic unit's outcome (forced FO_KEPT or FO_REVERTED, or -1). */
int fault_cut_unit (struct s4k_fault *f, struct entry *e, enum s4k_torn torn,
                    int forced, struct cut_out *o);
/* The torn= policies' names, by enum s4k_torn. */
extern const char *const fault_torn_names[];
/* Gives every dirty sector its outcome, oldest first, and reports it
 * (*report, if report is not NULL). */
int fault_cut_locked (struct s4k_fault *f, enum s4k_torn torn,
                      const char *trigger, char **report);
/* After a cut, without the mutex: the device's on-cut callback. */
void fault_after_cut (struct s4k_fault *f);

/* ---- fault_zone.c ------------------------------------------------------ */

/* The sequential zones' part of a cut (before the other sectors): each
 * zone with unflushed writes keeps a prefix of them, its write pointer
 * moves back to the prefix's end, every open zone closes; zones gets the
 * report's "zones" entries. */
int fault_zone_cut (struct s4k_fault *f, enum s4k_torn torn,
                    struct cut_out *o, FILE *zones);
/* A FUA write or a zero of [off, end), written through: first the dirty
 * sectors of its sequential zone below it (a zone is written in order,
 * so they are durable with it, and the zone's pointer up to end). */
int fault_zone_settle (struct s4k_fault *f, uint64_t off, uint64_t end);
/* The cache was written back: every write pointer is durable. */
void fault_zone_flushed (struct s4k_fault *f);
/* A write or zero of [off, end) reached the layer (cached or written). */
void fault_zone_wrote (struct s4k_fault *f, uint64_t off, uint64_t end);
/* The physical sector [off, end) is on the medium with new data
 * (destaged, or kept or torn by a cut). */
void fault_zone_medium (struct s4k_fault *f, uint64_t off, uint64_t end);

#endif
