/* SPDX-License-Identifier: BSD-3-Clause */
/* sect4k's SCSI command layer (issue 22): one LUN's SCSI device, pure.
 *
 * CDB bytes and data-out bytes in; status, fixed-format sense and data-in
 * bytes out.  No I/O and no system calls of its own: a media command
 * (READ, WRITE, WRITE SAME, UNMAP, VERIFY, SYNCHRONIZE CACHE) decodes into
 * a list of engine operations that the caller runs with the s4k_* calls
 * (synchronous or s4k_aio_*), then hands the results back; the layer maps
 * them to status and sense.  Everything else (INQUIRY, READ CAPACITY,
 * MODE SENSE, ...) completes at once.
 *
 * A command, as the caller runs it:
 *
 *   struct s4k_scsi_cmd cmd;
 *   unsigned cuts = s4k_dev_power_cuts (dev);
 *   s4k_fault_epoch (cuts);                  // this thread's requests
 *   unsigned n = s4k_scsi_exec (lun, &cmd, cdb, cdb_len, data, data_len,
 *                               cuts);
 *   while (n > 0) {
 *     unsigned i = 0; int r = 0;
 *     for (; i < n; i++)                     // in order; stop at a failure
 *       if ((r = run (dev, &cmd.ops[i])) != 0)
 *         break;
 *     n = s4k_scsi_done (lun, &cmd, i, r, s4k_dev_power_cuts (dev));
 *   }
 *   // cmd.status, cmd.sense[0..sense_len), data[0..data_in_len)
 *   s4k_scsi_cmd_release (&cmd);
 *
 * where run() is s4k_read/s4k_write/s4k_zero/s4k_trim/s4k_flush with the
 * op's buffer, length, offset and flags.  s4k_scsi_done may hand out a
 * second list (after a read fails with EIO it asks for the range again,
 * one physical sector per op, to learn the first failing LBA: a drive
 * returns the data before it and names it in INFORMATION).
 *
 * Ops of one command may run concurrently only if the caller keeps their
 * order of completion irrelevant: they never overlap, except the repeated
 * reads of a VERIFY into one scratch buffer.  Simplest: run them in order.
 *
 * Power cuts (the fault layer): the caller passes the device's power-cut
 * count (s4k_dev_power_cuts) to exec and done.  A count that changed since
 * the previous command makes the next command (other than INQUIRY, REPORT
 * LUNS and REQUEST SENSE) fail with UNIT ATTENTION / POWER ON OCCURRED, as
 * a disk does after power-on; a command whose ops failed while the count
 * changed under it (it was in flight at the cut), or failed with
 * -ESHUTDOWN, fails with NOT READY / LOGICAL UNIT NOT READY, which Linux
 * does not retry.  A new LUN has UNIT ATTENTION / POWER ON, RESET, OR BUS
 * DEVICE RESET OCCURRED pending, like a disk just attached.
 *
 * Thread safety: one LUN is used by one thread at a time (the caller
 * serializes s4k_scsi_exec/s4k_scsi_done of a LUN); commands of one LUN
 * may be in flight together. */
#ifndef SECT4K_SCSI_H
#define SECT4K_SCSI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sect4k/sect4k.h"

/* ---- status, sense keys, additional sense codes ----------------------- */

#define S4K_SCSI_GOOD             0x00
#define S4K_SCSI_CHECK_CONDITION  0x02

#define S4K_SENSE_NO_SENSE        0x0
#define S4K_SENSE_NOT_READY       0x2
#define S4K_SENSE_MEDIUM_ERROR    0x3
#define S4K_SENSE_HARDWARE_ERROR  0x4
#define S4K_SENSE_ILLEGAL_REQUEST 0x5
#define S4K_SENSE_UNIT_ATTENTION  0x6
#define S4K_SENSE_DATA_PROTECT    0x7
#define S4K_SENSE_ABORTED_COMMAND 0xb
#define S4K_SENSE_MISCOMPARE      0xe

/* Fixed-format sense data (SPC-5 4.4.3): 18 bytes; the buffer has room
 * for more. */
#define S4K_SCSI_SENSE_LEN 18
#define S4K_SCSI_SENSE_MAX 32

/* The limits the Block Limits page states (and the layer enforces). */
#define S4K_SCSI_MAX_UNMAP_DESCRIPTORS 256u
#define S4K_SCSI_MAX_UNMAP_BYTES (1ull << 30)      /* per descriptor */
#define S4K_SCSI_MAX_WRITE_SAME_BYTES (1ull << 30)

/* ---- the LUN's description -------------------------------------------- */

struct s4k_scsi_params {
  struct s4k_geometry geom;   /* s4k_dev_geometry () */
  uint32_t max_request;       /* s4k_dev_max_request (): bytes per READ,
                                 WRITE or VERIFY (MAXIMUM TRANSFER LENGTH) */
  uint32_t opt_transfer;      /* OPTIMAL TRANSFER LENGTH in bytes; 0: not
                                 reported (the default) */
  bool write_cache;           /* WCE in the Caching page (write-cache=) */
  bool readonly;              /* writes fail: DATA PROTECT / WRITE
                                 PROTECTED; WP in MODE SENSE */
  bool lbprz;                 /* unmapped (trimmed) sectors read as zeroes
                                 (LBPRZ): true unless the store is an NBD
                                 upstream, whose trim promises nothing */
  uint16_t rotation_rate;     /* B1h: 0 not reported, 1 non-rotating,
                                 else rpm */
  struct s4k_atomic atomic;   /* atomic write limits in bytes (max 0:
                                 none): the Block Limits page's atomic
                                 fields and WRITE ATOMIC(16), which is
                                 refused as an unknown command without
                                 them.  max, min and boundary must be
                                 multiples of the logical block size */
  struct s4k_zones *zones;    /* s4k_dev_zones (): a zoned LUN (ZBC-2:
                                 REPORT ZONES, ZBC OUT, VPD B6h, device
                                 type 14h when host-managed), or NULL */
  bool sata;                  /* interface=sata: a SATA drive behind a SCSI/ATA
                                 Translation layer (SAT-4): INQUIRY vendor
                                 "ATA", the ATA Information VPD page (89h),
                                 ATA PASS-THROUGH(12) and (16) (lib/scsi/scsi_ata.c);
                                 else those are refused as on scsi_debug */
  /* The fault layer's bad sectors, for SMART (NULL: none): fills
   * *pending with the physical sectors that are bad now and
   * *reallocated with those writes have repaired since the start. */
  void (*bad_counts) (void *opaque, uint64_t *pending,
                      uint64_t *reallocated);
  void *bad_opaque;
  uint32_t format_lengths;    /* the logical block lengths FORMAT UNIT can
                                 take (MODE SELECT's block descriptor, VPD
                                 page B4h): bit n for 2^n bytes.  The
                                 current one always; others with
                                 s4k_scsi_params_formats */
  char vendor[9];             /* INQUIRY T10 vendor: "SECT4K" ("ATA" with
                                 sata) */
  char product[17];           /* INQUIRY product, e.g. "sect4k 512e" */
  char revision[5];           /* INQUIRY revision, from S4K_VERSION */
  char serial[33];            /* VPD 80h and the T10 vendor id of 83h */
  uint64_t naa_id;            /* low 60 bits: VPD 83h NAA 3 (locally
                                 assigned) identifier */
};

/* Defaults for geometry g and max_request: vendor SECT4K, product "sect4k
 * MODEL" (512n, 512e, 512e-xp, 4kn or LxP), revision from S4K_VERSION,
 * serial and NAA id from a hash of the geometry and name (the export name;
 * NULL or "" for the default export), no write cache, writable, LBPRZ,
 * rotation rate 1 (non-rotating, as without a timing model). */
void s4k_scsi_params_init (struct s4k_scsi_params *p,
                           const struct s4k_geometry *g,
                           uint32_t max_request, const char *name);
/* The same from an export's finished configuration plus the geometry and
 * max_request its device reports: also write-cache=, read-only, timing=
 * (the rotation rate every front end reports, s4k_timing_rotation_rate:
 * 7200 rpm under hdd7200, else non-rotating), upstream= (no LBPRZ) and
 * the atomic write limits (atomic-write-*=, c->atomic). */
void s4k_scsi_params_from_config (struct s4k_scsi_params *p,
                                  const struct s4k_config *c,
                                  const struct s4k_geometry *g,
                                  uint32_t max_request);

/* Adds to p->format_lengths the lengths 512 and 4096 that device d can
 * switch to in place (s4k_dev_logical_ok): a "fast format" drive's 512e
 * <-> 4Kn.  The LUN then takes them from MODE SELECT's block descriptor
 * and applies them with FORMAT UNIT, which erases the data. */
void s4k_scsi_params_formats (struct s4k_scsi_params *p,
                              const struct s4k_dev *d);

struct s4k_scsi_lun;
/* NULL with err filled if the parameters break a rule (geometry). */
struct s4k_scsi_lun *s4k_scsi_lun_new (const struct s4k_scsi_params *p,
                                       char *err, size_t errlen);
void s4k_scsi_lun_free (struct s4k_scsi_lun *lun);
const struct s4k_scsi_params *s4k_scsi_lun_params
  (const struct s4k_scsi_lun *lun);

/* The IDENTIFY DEVICE data (ACS-4 7.12.7) of the SATA identity, as words
 * (id[i] is word i; on the wire little-endian): what ATA PASS-THROUGH
 * IDENTIFY DEVICE returns and VPD page 89h holds.  The geometry is in
 * words 106, 117-118 and 209, the capacity in 60-61 and 100-103. */
void s4k_scsi_ata_identify (const struct s4k_scsi_params *p,
                            uint16_t id[256]);

/* ---- one command ------------------------------------------------------- */

enum s4k_scsi_op_kind {
  S4K_SCSI_OP_READ,           /* s4k_read (buf, len, off) */
  S4K_SCSI_OP_WRITE,          /* s4k_write (buf, len, off, flags) */
  S4K_SCSI_OP_ZERO,           /* s4k_zero (len, off, flags) */
  S4K_SCSI_OP_TRIM,           /* s4k_trim (len, off, flags) */
  S4K_SCSI_OP_FLUSH,          /* s4k_flush () */
  S4K_SCSI_OP_ZONE,           /* s4k_scsi_zone_op (dev, op): ZBC OUT on a
                                 zoned LUN (flags: the zone operation,
                                 S4K_SCSI_ZONE_ALL; off: the zone's
                                 first byte; len 0) */
  S4K_SCSI_OP_SET_LOGICAL,    /* s4k_dev_set_logical (len): FORMAT UNIT
                                 with a new block length (buf NULL, off 0,
                                 len the new logical size) */
};
#define S4K_SCSI_ZONE_ALL 0x100u

struct s4k_scsi_op {
  enum s4k_scsi_op_kind kind;
  void *buf;                  /* READ: where the bytes go; WRITE: the
                                 bytes; NULL otherwise.  Points into the
                                 caller's data buffer or into memory the
                                 command owns (released with it) */
  uint64_t len, off;          /* device bytes (0, 0 for FLUSH); len > 0
                                 otherwise, within the device */
  unsigned flags;             /* S4K_FUA, S4K_MAY_TRIM, S4K_ATOMIC (WRITE
                                 ATOMIC(16)), for the s4k_* call as they
                                 are */
};

struct s4k_scsi_cmd {
  /* The result, valid once s4k_scsi_exec or s4k_scsi_done returned 0. */
  uint8_t status;             /* S4K_SCSI_GOOD or _CHECK_CONDITION */
  uint8_t sense[S4K_SCSI_SENSE_MAX];
  uint32_t sense_len;         /* 0 with GOOD, else S4K_SCSI_SENSE_LEN
                                 (fixed format), or 22: descriptor sense
                                 with the ATA Status Return descriptor
                                 (ATA PASS-THROUGH, p.sata) */
  uint64_t data_in_len;       /* data-in bytes at the start of the
                                 caller's data buffer (the residual is
                                 what the initiator expected minus this) */

  /* The operations to run now (valid while exec/done return nops > 0). */
  struct s4k_scsi_op *ops;
  unsigned nops;

  /* Private to the layer (lib/scsi*.c). */
  struct {
    struct s4k_scsi_op inline_ops[2];
    struct s4k_scsi_op *owned_ops;  /* when more than two */
    uint8_t *scratch;         /* VERIFY's reads, WRITE SAME's pattern */
    uint8_t *data;
    size_t data_len;
    uint64_t lba, blocks;     /* the command's range */
    uint64_t salvage_start, salvage_pos, salvage_end;
    uint8_t *salvage_buf;     /* where salvage_start's bytes go */
    unsigned epoch;           /* power cuts at exec */
    uint8_t opcode;
    uint8_t kind;             /* what done finishes (KIND_*, scsi_priv.h) */
    uint8_t bytchk;           /* VERIFY: 0, 1 (all data), 3 (one block) */
    uint8_t ata_ck;           /* SET SECTOR CONFIGURATION EXT: 1, | 2
                                 with CK_COND */
  } priv;
};

/* Decodes cdb[0..cdb_len) with the data buffer data[0..data_len): the
 * data-out bytes of a command that sends data (WRITE, UNMAP's parameter
 * list, MODE SELECT, ...), or room for the data-in of one that returns
 * data (at most the initiator's allocation length; the layer writes no
 * further than data_len).  A READ or WRITE whose transfer length needs
 * more than data_len bytes fails with INVALID FIELD IN CDB.  cuts: the
 * device's power-cut count now (0 without the fault layer).
 *
 * Returns cmd->nops: the number of operations in cmd->ops to run before
 * calling s4k_scsi_done; 0 when the command is complete. */
unsigned s4k_scsi_exec (struct s4k_scsi_lun *lun, struct s4k_scsi_cmd *cmd,
                        const uint8_t *cdb, size_t cdb_len,
                        void *data, size_t data_len, unsigned cuts);

/* The ops ran: ops[0..failed) succeeded, and if failed < nops, ops[failed]
 * returned r (a negative errno; the rest did not run).  failed == nops
 * (r 0): all succeeded.  cuts: the power-cut count now.  Returns the
 * number of further ops (cmd->ops, cmd->nops) to run the same way, or 0:
 * the command is complete. */
unsigned s4k_scsi_done (struct s4k_scsi_lun *lun, struct s4k_scsi_cmd *cmd,
                        unsigned failed, int r, unsigned cuts);

/* Runs an S4K_SCSI_OP_ZONE op on device d (s4k_dev_zone_op): 0 or the
 * -errno to hand to s4k_scsi_done. */
int s4k_scsi_zone_op (struct s4k_dev *d, const struct s4k_scsi_op *op);

/* Runs any op on device d, as its kind says: 0 or the -errno to hand to
 * s4k_scsi_done.  (A front end that also counts requests per client or
 * times them wraps this.) */
int s4k_scsi_op_run (struct s4k_dev *d, const struct s4k_scsi_op *op);

/* Frees what the command holds.  Call once per exec, after the result
 * (and data-in) has been copied out. */
void s4k_scsi_cmd_release (struct s4k_scsi_cmd *cmd);

/* The LUN's pending UNIT ATTENTION, as a caller that resets the LUN (a
 * power cut it learns of otherwise) sets it: asc/ascq, e.g. 0x29/0x01
 * POWER ON OCCURRED. */
void s4k_scsi_unit_attention (struct s4k_scsi_lun *lun, uint8_t asc,
                              uint8_t ascq);

/* Parses fixed or descriptor sense: key, asc, ascq, and the INFORMATION
 * field if valid (*info_valid).  -1 if it is not well-formed sense data.
 * For tests and logs. */
int s4k_scsi_sense_parse (const uint8_t *sense, size_t len, uint8_t *key,
                          uint8_t *asc, uint8_t *ascq, bool *info_valid,
                          uint64_t *info);
/* "MEDIUM ERROR: UNRECOVERED READ ERROR" for logs; the codes in hex when
 * the layer does not name them. */
void s4k_scsi_sense_describe (uint8_t key, uint8_t asc, uint8_t ascq,
                              char *buf, size_t len);
/* The command's name ("READ(10)"), or NULL if the layer does not know it. */
const char *s4k_scsi_opcode_name (uint8_t opcode);

#endif
