/* SPDX-License-Identifier: BSD-3-Clause */
/* Zoned drives (issue 33): the zone layout (keys zoned=, zone-size=,
 * zone-conventional=, zone-max-open=, zone-max-active=) and the zone
 * state machine of ZBC-2 (SCSI) and ZAC-2 (ATA): zone types, conditions,
 * write pointers, the open and active limits, the checks a write or read
 * must pass, and the zone operations (report, open, close, finish, reset
 * write pointer).  Plain C, no front end; lib/zone/zone.c.  What is wired and
 * what is not: docs/zoned.md.
 *
 * Units: the model counts logical blocks (LBAs), as ZBC does; the keys
 * count bytes, as every sect4k size key does. */
#ifndef SECT4K_ZONE_H
#define SECT4K_ZONE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sect4k/sect4k.h"

/* The keys (enum s4k_zoned, struct s4k_zone_config, s4k_zone_set,
 * s4k_zone_finish, S4K_ZONE_HELP) are in sect4k/sect4k.h, with the
 * other keys of struct s4k_config. */

/* ---- the zones --------------------------------------------------------- */

/* ZBC-2 zone types (REPORT ZONES ZONE TYPE field). */
enum s4k_zone_type {
  S4K_ZT_CONVENTIONAL = 0x1,
  S4K_ZT_SEQ_REQUIRED = 0x2,    /* host-managed */
  S4K_ZT_SEQ_PREFERRED = 0x3,   /* host-aware */
};

/* ZBC-2 zone conditions (ZONE CONDITION field). */
enum s4k_zone_cond {
  S4K_ZC_NOT_WP = 0x0,          /* conventional: no write pointer */
  S4K_ZC_EMPTY = 0x1,
  S4K_ZC_IMP_OPEN = 0x2,
  S4K_ZC_EXP_OPEN = 0x3,
  S4K_ZC_CLOSED = 0x4,
  S4K_ZC_READ_ONLY = 0xd,
  S4K_ZC_FULL = 0xe,
  S4K_ZC_OFFLINE = 0xf,
};

/* What a zone check or operation fails with, returned negated.  Each is
 * distinct; s4k_zone_sense gives the sense a SCSI front end returns for
 * it (ZBC-2; the same as scsi_debug and libzbc's test suite expect):
 *
 *   error                      key              ASC/ASCQ  ZBC-2 name
 *   LBA_OUT_OF_RANGE           ILLEGAL REQUEST  21h/00h   LOGICAL BLOCK
 *                                                         ADDRESS OUT OF RANGE
 *   NOT_ZONE_START             ILLEGAL REQUEST  24h/00h   INVALID FIELD IN CDB
 *   NOT_WRITE_POINTER_ZONE     ILLEGAL REQUEST  24h/00h   INVALID FIELD IN CDB
 *   BAD_REPORTING_OPTION       ILLEGAL REQUEST  24h/00h   INVALID FIELD IN CDB
 *   ZONE_FULL                  ILLEGAL REQUEST  24h/00h   INVALID FIELD IN CDB
 *   UNALIGNED_WRITE            ILLEGAL REQUEST  21h/04h   UNALIGNED WRITE
 *                                                         COMMAND
 *   UNALIGNED_PHYSICAL         ILLEGAL REQUEST  21h/04h   UNALIGNED WRITE
 *                                                         COMMAND
 *   WRITE_BOUNDARY             ILLEGAL REQUEST  21h/05h   WRITE BOUNDARY
 *                                                         VIOLATION
 *   READ_CROSS_TYPE            ILLEGAL REQUEST  21h/06h   ATTEMPT TO READ
 *                                                         INVALID DATA
 *   READ_ONLY                  DATA PROTECT     27h/08h   ZONE IS READ ONLY
 *   OFFLINE                    DATA PROTECT     2Ch/0Eh   ZONE IS OFFLINE
 *   INSUFFICIENT_RESOURCES     DATA PROTECT     55h/0Eh   INSUFFICIENT ZONE
 *                                                         RESOURCES
 */
enum s4k_zone_err {
  S4K_ZERR_LBA_OUT_OF_RANGE = 1,
  S4K_ZERR_NOT_ZONE_START,        /* an operation's zone id is not the
                                     first LBA of a zone */
  S4K_ZERR_NOT_WRITE_POINTER_ZONE,  /* an operation on a conventional zone */
  S4K_ZERR_BAD_REPORTING_OPTION,  /* a reserved REPORT ZONES option */
  S4K_ZERR_ZONE_FULL,             /* a write to a full sequential write
                                     required zone */
  S4K_ZERR_UNALIGNED_WRITE,       /* not at the write pointer */
  S4K_ZERR_UNALIGNED_PHYSICAL,    /* at the write pointer, but not whole
                                     physical blocks (512e host-managed) */
  S4K_ZERR_WRITE_BOUNDARY,        /* crosses the end of its zone */
  S4K_ZERR_READ_CROSS_TYPE,       /* host-managed: a read from a
                                     conventional into a sequential zone */
  S4K_ZERR_READ_ONLY,
  S4K_ZERR_OFFLINE,
  S4K_ZERR_INSUFFICIENT_RESOURCES,  /* the open or active limit */
  S4K_ZERR_MAX
};

/* The device's requests fail with a zone error as -(S4K_EZONE + err), a
 * value no errno takes, so that a SCSI front end can give its sense. */
#define S4K_EZONE 0x10000
static inline int s4k_zone_errno (int err) { return -(S4K_EZONE + err); }
/* The zone error of a request's result r, or 0 if r is not one. */
static inline int
s4k_zone_err_of (int r)
{
  return r <= -S4K_EZONE - 1 && r > -S4K_EZONE - S4K_ZERR_MAX
         ? -r - S4K_EZONE : 0;
}

/* The sense of err (positive, an enum s4k_zone_err): false if unknown. */
bool s4k_zone_sense (int err, uint8_t *key, uint8_t *asc, uint8_t *ascq);
/* Its ZBC-2 name and why, one short line. */
const char *s4k_zone_strerror (int err);

/* The zones of one device.  Thread-safe: one mutex guards them, taken
 * by every call below for a short scan at most and never held across
 * I/O or another lock, so a caller may hold its sector locks (lib/
 * dev_plan.h) or none when it calls; docs/zoned.md "Concurrency". */
struct s4k_zones;

/* The zones of a device of geometry g laid out as c says (after
 * s4k_zone_finish; c->model not NONE): all sequential zones empty.
 * 0, -EINVAL (not zoned) or -ENOMEM. */
int s4k_zones_new (struct s4k_zones **out, const struct s4k_zone_config *c,
                   const struct s4k_geometry *g);
void s4k_zones_free (struct s4k_zones *z);

/* One zone, as REPORT ZONES describes it. */
struct s4k_zone_desc {
  uint64_t start, len;          /* LBAs */
  uint64_t wp;                  /* the write pointer; the zone's end when
                                   FULL (as scsi_debug reports it);
                                   UINT64_MAX where ZBC-2 says it is
                                   invalid: conventional, read only,
                                   offline */
  uint8_t type, cond;           /* enum s4k_zone_type, s4k_zone_cond */
  bool non_seq;                 /* NON_SEQ: a host-aware zone written off
                                   its write pointer since its reset */
  bool reset_recommended;       /* RESET: never set by this model */
};

/* Layout, fixed at creation. */
struct s4k_zones_info {
  enum s4k_zoned model;
  uint64_t capacity;            /* LBAs */
  uint64_t zone_lbas;           /* every zone's length but the last */
  uint32_t nr_zones, conventional;
  uint32_t max_open, max_active;  /* 0: no limit */
};
void s4k_zones_info (const struct s4k_zones *z, struct s4k_zones_info *out);

/* Resource counts (sequential zones), under the lock. */
struct s4k_zones_counts {
  uint32_t imp_open, exp_open, closed;
};
void s4k_zones_counts (struct s4k_zones *z, struct s4k_zones_counts *out);

/* A write of nlba blocks at lba: checks it and, when it passes, moves the
 * write pointers and conditions as the drive does once it accepts the
 * command (implicit open, implicit close of another zone at the open
 * limit, full at the zone's end), all under the lock, so that two writes
 * at one write pointer are never both accepted.  0 or -S4K_ZERR_*; a
 * refused write changes nothing.  nlba 0: only the range is checked. */
int s4k_zones_write (struct s4k_zones *z, uint64_t lba, uint64_t nlba);
/* Zone append (NVMe ZNS, ublk's UBLK_IO_OP_ZONE_APPEND): a write of nlba
 * blocks at the write pointer of the host-managed sequential zone
 * starting at zone_lba, the pointer read, checked and moved as
 * s4k_zones_write does, under one lock, so that appends racing each
 * other (or writes) each get their own blocks.  0 with *lba where it
 * goes, or -S4K_ZERR_* (NOT_ZONE_START, NOT_WRITE_POINTER_ZONE for a
 * conventional zone or a host-aware drive, WRITE_BOUNDARY past the
 * zone's end, and the write's errors); a refused append changes
 * nothing. */
int s4k_zones_append (struct s4k_zones *z, uint64_t zone_lba, uint64_t nlba,
                      uint64_t *lba);
/* A write of [lba, lba + nlba) that s4k_zones_write accepted failed in
 * the store: its zone's write pointer moves back to lba if no later
 * write was accepted there (the pointer is still at the write's end),
 * and the zone's condition with it (EMPTY again at its start, a FULL
 * zone open or closed again).  Host-managed sequential zones only: a
 * host-aware zone's pointer stays.  True if the pointer moved. */
bool s4k_zones_rewind (struct s4k_zones *z, uint64_t lba, uint64_t nlba);
/* A read: 0, or -S4K_ZERR_* (out of range, offline, or host-managed
 * across a conventional/sequential boundary).  Reads are otherwise
 * unrestricted (URSWRZ = 1, which Linux requires of host-managed
 * drives): below or above the write pointer, across sequential zones.
 * Takes no lock: a read racing a zone going offline or coming back
 * sees one side or the other. */
int s4k_zones_read (struct s4k_zones *z, uint64_t lba, uint64_t nlba);

/* ZBC OUT service actions (ZBC-2 5.x: CLOSE ZONE 01h, FINISH ZONE 02h,
 * OPEN ZONE 03h, RESET WRITE POINTER 04h). */
enum s4k_zone_op {
  S4K_ZOP_CLOSE = 0x1,
  S4K_ZOP_FINISH = 0x2,
  S4K_ZOP_OPEN = 0x3,
  S4K_ZOP_RESET = 0x4,
};
/* One zone (zone_lba: its first LBA) or, all set, every zone the
 * operation applies to (zone_lba ignored).  0 or -S4K_ZERR_*; a refused
 * operation changes nothing.  RESET only moves write pointers: the data
 * the zone held is the caller's to discard (trim [start, old wp)). */
int s4k_zones_op (struct s4k_zones *z, enum s4k_zone_op op,
                  uint64_t zone_lba, bool all);

/* REPORT ZONES (ZBC IN 00h): the zones from the one holding lba that
 * match the reporting option (0x00-0x3F: 00h all, 01h empty, 02h
 * implicitly open, 03h explicitly open, 04h closed, 05h full, 06h read
 * only, 07h offline, 08h inactive, 10h reset recommended, 11h non-seq
 * write resources active, 3Eh all but gap zones, 3Fh not write pointer;
 * others are reserved).  Fills out[0..max) and returns how many it
 * filled, or -S4K_ZERR_*.  *listed gets what the ZONE LIST LENGTH counts:
 * every matching zone, or with partial at most max (ZBC-2's PARTIAL
 * bit). */
int s4k_zones_report (struct s4k_zones *z, uint64_t lba, unsigned option,
                      bool partial, struct s4k_zone_desc *out, uint32_t max,
                      uint64_t *listed);

/* Faults: puts the zone starting at zone_lba in READ_ONLY or OFFLINE (any
 * type), or back to EMPTY (write pointer zones) or NOT_WP (conventional)
 * from either, as a drive's firmware does.  0 or -S4K_ZERR_* (not a zone
 * start), -EINVAL for another condition. */
int s4k_zones_set_cond (struct s4k_zones *z, uint64_t zone_lba,
                        enum s4k_zone_cond cond);

/* Power cuts (the fault layer).  s4k_zones_cut_wp: the sequential zone
 * starting at zone_lba keeps its data below wp only: the pointer moves
 * back to wp, the condition becomes EMPTY (wp at the start), FULL (at the
 * end) or CLOSED.  A pointer already at or below wp stays (a reset the
 * model took while the cut was being decided, its zeroes not yet
 * written): *now is the pointer after, which the caller's data must
 * follow.  0, -S4K_ZERR_* (not a zone start, a conventional zone) or
 * -EINVAL (read only, offline, wp below the start).  s4k_zones_power_loss: every open zone
 * closes (CLOSED, or EMPTY if nothing was written), as open zone
 * resources do not survive a power loss. */
int s4k_zones_cut_wp (struct s4k_zones *z, uint64_t zone_lba, uint64_t wp,
                      uint64_t *now);
void s4k_zones_power_loss (struct s4k_zones *z);
/* Every zone's write pointer (a FULL zone's end; a conventional zone's
 * start) into out[0..nr_zones), at one moment. */
void s4k_zones_wps (struct s4k_zones *z, uint64_t *out);
/* With a write cache (the fault layer, lib/fault/fault_zone.c): the
 * records of FILE.sect4k-zones hold each sequential zone's durable
 * pointer, not its write pointer, so a restart after a SIGKILL finds the
 * zones a power cut keeping nothing unflushed would leave.
 * s4k_zones_durable_init: from now on, every durable pointer at its
 * write pointer (0 or -ENOMEM); s4k_zones_set_durable: one zone's (its
 * record stored at once, file=). */
int s4k_zones_durable_init (struct s4k_zones *z);
void s4k_zones_set_durable (struct s4k_zones *z, uint32_t zone, uint64_t wp);

/* ---- the device's zones (lib/dev/dev.c, lib/dev/dev_sync.c) -------------------

 * On a device with zoned=, s4k_write and s4k_zero (and their s4k_aio_
 * twins) pass s4k_zones_write before they take a sector lock and fail
 * with s4k_zone_errno when it refuses; s4k_read passes s4k_zones_read;
 * on a host-managed device s4k_trim frees conventional zones only (a
 * sequential zone keeps its blocks mapped, as SBC allows: its data goes
 * with RESET WRITE POINTER). */

/* The zones of device d, or NULL if it is not zoned. */
struct s4k_zones *s4k_dev_zones (const struct s4k_dev *d);
/* ZBC OUT on device d: s4k_zones_op, and for RESET WRITE POINTER the data
 * below each reset zone's old write pointer discarded (reads return
 * zeroes, as scsi_debug's reset does).  0, -EINVAL (not zoned), the
 * store's -errno, or s4k_zone_errno. */
int s4k_dev_zone_op (struct s4k_dev *d, enum s4k_zone_op op,
                     uint64_t zone_lba, bool all);
/* Zone append on device d (S4K_ZONE_APPEND): len bytes written at the
 * write pointer of the zone starting at byte *off, *off set to where
 * (bytes) once the zones accepted it, before the call returns (also
 * when s4k_aio_zone_append returns 1, in flight); otherwise as
 * s4k_write / s4k_aio_write (a store that fails moves the pointer back).
 * A zone error is s4k_zone_errno. */
int s4k_dev_zone_append (struct s4k_dev *d, const void *buf, uint64_t len,
                         uint64_t *off, unsigned flags);
int s4k_aio_zone_append (struct s4k_aio *a, const void *buf, uint64_t len,
                         uint64_t *off, unsigned flags);

/* ---- the zone state in a file (lib/zone/zone_file.c) -------------------

 * With file=, the device keeps the zones' conditions, write pointers
 * and NON_SEQ in FILE.sect4k-zones (lib/dev/dev_zones.c maps it): a
 * header naming the layout, then one 8-byte record per zone, stored by
 * every call above that changes the zone before it returns. */

/* Bytes of z's file; the offset of the record of the zone holding lba. */
size_t s4k_zones_file_size (const struct s4k_zones *z);
size_t s4k_zones_file_offset (const struct s4k_zones *z, uint64_t lba);
/* Fills buf (s4k_zones_file_size bytes) with z's header and records. */
void s4k_zones_file_image (struct s4k_zones *z, void *buf);
/* Takes the state recorded in map (len bytes of the file at path) and
 * keeps it there from now on.  Open zones come back CLOSED (EMPTY when
 * nothing was written), as after a power cycle.  0, or -1 with err (one
 * line): the layout recorded is not z's (what differs), or a record is
 * not valid; z is unchanged then. */
int s4k_zones_file_attach (struct s4k_zones *z, void *map, size_t len,
                           const char *path, char *err, size_t errlen);
/* Only the header of map (len bytes: at least its first 4096): 0 if it
 * names z's layout, else -1 with err as s4k_zones_file_attach. */
int s4k_zones_file_check (const struct s4k_zones *z, const void *map,
                          size_t len, const char *path, char *err,
                          size_t errlen);
/* Stops storing records (before map is unmapped). */
void s4k_zones_file_detach (struct s4k_zones *z);

/* ---- the device's zone faults (lib/dev/dev_zones.c) --------------------- */

/* The control socket's zone commands: s4k_zones_set_cond on device d's
 * zone starting at lba (READ_ONLY, OFFLINE, or EMPTY/NOT_WP: "repair",
 * which picks the one the zone's type takes), on record with file= and
 * synced.  0, or -1 with err (one line). */
int s4k_dev_zone_fault (struct s4k_dev *d, uint64_t lba,
                        enum s4k_zone_cond cond, char *err, size_t errlen);
/* Every zone of d, one line each:
 *   start=LBA len=LBAS type=TYPE cond=COND wp=LBA|- non-seq=0|1
 * (TYPE conventional, seq-required, seq-preferred; COND not-wp, empty,
 * imp-open, exp-open, closed, read-only, full, offline).  0, or -1 with
 * err (not zoned). */
int s4k_dev_zone_list (struct s4k_dev *d, FILE *out, char *err,
                       size_t errlen);

#endif
