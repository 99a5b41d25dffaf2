/* SPDX-License-Identifier: BSD-3-Clause */
/* The SCSI command layer's private parts, shared by its files:
 *   scsi.c        the LUN, the command table and REPORT SUPPORTED
 *                 OPERATION CODES, s4k_scsi_exec / s4k_scsi_done;
 *   scsi_spc.c    primary commands: INQUIRY and its VPD pages, REQUEST
 *                 SENSE, TEST UNIT READY, MODE SENSE / MODE SELECT;
 *   scsi_sbc.c    block commands: START STOP UNIT, READ CAPACITY, READ,
 *                 WRITE, SYNCHRONIZE CACHE, WRITE SAME, UNMAP, VERIFY,
 *                 WRITE ATOMIC;
 *   scsi_ata.c    the SATA identity (interface=sata): VPD page 89h, ATA
 *                 PASS-THROUGH;
 *   scsi_format.c FORMAT UNIT with a new block length from MODE SELECT
 *                 (sector-size conversion in place), VPD page B4h;
 *   scsi_sense.c  sense data: building it, the sense for an engine
 *                 error, parsing and naming it. */
#ifndef S4K_SCSI_PRIV_H
#define S4K_SCSI_PRIV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sect4k/scsi.h"

/* ---- big-endian fields ------------------------------------------------- */

static inline uint16_t get16 (const uint8_t *p) { return (uint16_t) (p[0] << 8 | p[1]); }
static inline uint32_t get32 (const uint8_t *p) { return (uint32_t) get16 (p) << 16 | get16 (p + 2); }
static inline uint64_t get64 (const uint8_t *p) { return (uint64_t) get32 (p) << 32 | get32 (p + 4); }
static inline void put16 (uint8_t *p, uint16_t v) { p[0] = v >> 8; p[1] = v; }
static inline void put32 (uint8_t *p, uint32_t v) { put16 (p, v >> 16); put16 (p + 2, v); }
static inline void put64 (uint8_t *p, uint64_t v) { put32 (p, v >> 32); put32 (p + 4, v); }

/* ---- additional sense codes the layer reports ------------------------- */

#define ASC(asc, ascq) ((uint16_t) ((asc) << 8 | (ascq)))
enum {
  NO_ADDITIONAL_SENSE = ASC (0x00, 0x00),
  LUN_NOT_READY = ASC (0x04, 0x00),
  LUN_COMMUNICATION_FAILURE = ASC (0x08, 0x00),
  WRITE_ERROR = ASC (0x0c, 0x00),
  UNRECOVERED_READ_ERROR = ASC (0x11, 0x00),
  PARAMETER_LIST_LENGTH_ERROR = ASC (0x1a, 0x00),
  MISCOMPARE_DURING_VERIFY = ASC (0x1d, 0x00),
  INVALID_COMMAND_OPERATION_CODE = ASC (0x20, 0x00),
  LBA_OUT_OF_RANGE = ASC (0x21, 0x00),
  INVALID_FIELD_IN_CDB = ASC (0x24, 0x00),
  INVALID_FIELD_IN_PARAMETER_LIST = ASC (0x26, 0x00),
  WRITE_PROTECTED = ASC (0x27, 0x00),
  SPACE_ALLOCATION_FAILED = ASC (0x27, 0x07),
  POWER_ON_RESET = ASC (0x29, 0x00),
  POWER_ON_OCCURRED = ASC (0x29, 0x01),
  CAPACITY_DATA_HAS_CHANGED = ASC (0x2a, 0x09),
  FORMAT_COMMAND_FAILED = ASC (0x31, 0x01),
  SAVING_PARAMETERS_NOT_SUPPORTED = ASC (0x39, 0x00),
  INTERNAL_TARGET_FAILURE = ASC (0x44, 0x00),
  INSUFFICIENT_RESOURCES = ASC (0x55, 0x03),
};

/* ---- the LUN ------------------------------------------------------------ */

struct s4k_scsi_lun {
  struct s4k_scsi_params p;
  uint64_t blocks;              /* logical blocks on the device */
  unsigned lshift;              /* log2 (L) */
  unsigned cuts;                /* power-cut count last seen */
  uint16_t ua;                  /* pending UNIT ATTENTION (asc/ascq), or 0 */
  uint32_t pending_length;      /* MODE SELECT's block length for the next
                                   FORMAT UNIT, or 0: the current one */
  uint8_t zoned;                /* enum s4k_zoned (p.zones) */
  uint32_t max_open;            /* the zones' open limit (0: none) */
};

/* The atomic write limits in logical blocks, as the Block Limits page
 * states them and WRITE ATOMIC(16) enforces (p.atomic.max 0: none):
 * every write they allow is atomic (s4k_atomic_allowed), wherever it
 * lies.  SBC-4 has no field for a naturally aligned unit nor for a
 * boundary no write may cross (Linux's atomic_write_boundary_bytes,
 * which sd.c sets to 0), so neither applies to WRITE ATOMIC(16); the
 * engine keeps them for implicit atomicity (s4k_atomic_fits).  A
 * boundary below the maximum, which the configuration refuses, would
 * lower the maximum to it. */
static inline uint32_t
atomic_max_blocks (const struct s4k_scsi_lun *lun)
{
  const struct s4k_atomic *a = &lun->p.atomic;
  const uint32_t m = a->boundary && a->boundary < a->max ? a->boundary
                                                         : a->max;
  return m >> lun->lshift;
}
/* ATOMIC ALIGNMENT and ATOMIC TRANSFER LENGTH GRANULARITY (0: none). */
static inline uint32_t
atomic_min_blocks (const struct s4k_scsi_lun *lun)
{
  return lun->p.atomic.max ? lun->p.atomic.min >> lun->lshift : 0;
}

/* ---- sense ---------------------------------------------------------------- */

/* Field pointers (SPC-5 4.4.2.4.2): in the CDB or the parameter list. */
enum { NO_FIELD = -1 };
struct field {
  int byte;                     /* NO_FIELD: none */
  int bit;                      /* -1: the whole byte */
  bool cdb;
};
#define CDB_FIELD(b, bit) ((struct field) { (b), (bit), true })
#define PARAM_FIELD(b, bit) ((struct field) { (b), (bit), false })
#define NO_FIELD_PTR ((struct field) { NO_FIELD, -1, true })

/* ---- the commands --------------------------------------------------------- */

struct ctx {
  struct s4k_scsi_lun *lun;
  struct s4k_scsi_cmd *cmd;
  const uint8_t *cdb;
  uint8_t *data;
  size_t data_len;
};

typedef unsigned handler (struct ctx *x);

/* What s4k_scsi_done finishes once the ops ran (cmd->priv.kind). */
enum { KIND_PLAIN, KIND_READ, KIND_VERIFY, KIND_ATA, KIND_FORMAT };

struct command {
  uint8_t opcode;
  int16_t sa;                   /* service action, or -1 */
  uint8_t len;                  /* CDB length */
  bool ua_exempt;               /* runs with a UNIT ATTENTION pending */
  const char *name;
  handler *fn;
  uint8_t usage[16];            /* CDB usage data: the bits interpreted */
};

/* ---- scsi.c --------------------------------------------------------------- */

/* The rules a LUN's parameters keep: 0, or -1 with err filled. */
int scsi_lun_check (const struct s4k_scsi_params *p, char *err,
                    size_t errlen);

/* Data-in of a command that completes here: n bytes of buf, cut to the
 * allocation length and to the caller's buffer. */
unsigned scsi_data_in (struct ctx *x, const void *buf, size_t n,
                       uint64_t alloc);
/* Operations the command owns: its inline pair, else an array. */
struct s4k_scsi_op *scsi_ops_alloc (struct s4k_scsi_cmd *cmd, size_t n);
/* The command becomes one op. */
unsigned scsi_one_op (struct s4k_scsi_cmd *cmd, enum s4k_scsi_op_kind kind,
                      void *buf, uint64_t len, uint64_t off, unsigned flags);

/* ---- scsi_sense.c: the command fails (CHECK CONDITION) or succeeds -------- */

unsigned scsi_fail_info (struct s4k_scsi_cmd *cmd, uint8_t key, uint16_t asc,
                         bool info_valid, uint64_t info, struct field f);
unsigned scsi_fail (struct s4k_scsi_cmd *cmd, uint8_t key, uint16_t asc);
/* ILLEGAL REQUEST, INVALID FIELD IN CDB / IN PARAMETER LIST, pointing at
 * byte (and bit, or -1: the whole byte). */
unsigned scsi_bad_cdb (struct s4k_scsi_cmd *cmd, int byte, int bit);
unsigned scsi_bad_param (struct s4k_scsi_cmd *cmd, int byte, int bit);
unsigned scsi_out_of_range (struct s4k_scsi_cmd *cmd);
unsigned scsi_good (struct s4k_scsi_cmd *cmd);
/* ABORTED COMMAND, INSUFFICIENT RESOURCES. */
unsigned scsi_no_memory (struct s4k_scsi_cmd *cmd);
/* The sense for result r of op (a command whose ops began at LBA
 * cmd->priv.lba). */
unsigned scsi_map_error (struct s4k_scsi_lun *lun, struct s4k_scsi_cmd *cmd,
                         const struct s4k_scsi_op *op, int r);

/* ---- the commands: scsi_spc.c, scsi_sbc.c --------------------------------- */

handler scsi_cmd_inquiry, scsi_cmd_request_sense, scsi_cmd_test_unit_ready,
        scsi_cmd_mode_sense6, scsi_cmd_mode_sense10, scsi_cmd_mode_select6,
        scsi_cmd_mode_select10;
handler scsi_cmd_start_stop_unit, scsi_cmd_read_capacity10,
        scsi_cmd_read_capacity16, scsi_cmd_rw6, scsi_cmd_rw10, scsi_cmd_rw12,
        scsi_cmd_rw16, scsi_cmd_sync10, scsi_cmd_sync16,
        scsi_cmd_write_same10, scsi_cmd_write_same16, scsi_cmd_unmap,
        scsi_cmd_verify10, scsi_cmd_verify16, scsi_cmd_write_atomic16;
/* scsi_ata.c: ATA PASS-THROUGH(12) and (16) (on a LUN with p.sata). */
handler scsi_cmd_ata_passthru;
/* The ATA Information VPD page (89h) into b (the header's page length
 * is the caller's); its length. */
size_t scsi_ata_vpd89 (const struct s4k_scsi_lun *lun, uint8_t *b);
/* A pass-through FLUSH CACHE (EXT) whose flush ran. */
unsigned scsi_ata_done (struct s4k_scsi_cmd *cmd);
/* Where LBA 0 lies in its physical sector, in logical sectors (IDENTIFY
 * word 209). */
uint32_t scsi_ata_lba0_offset (const struct s4k_geometry *g);
/* scsi_format.c: FORMAT UNIT, and the block length MODE SELECT chose. */
handler scsi_cmd_format_unit;
/* Drops from p.format_lengths what this LUN's other parameters forbid. */
void scsi_format_lengths_check (struct s4k_scsi_lun *lun);
/* The block length MODE SENSE states (the one the next FORMAT UNIT
 * takes). */
uint32_t scsi_format_length (const struct s4k_scsi_lun *lun);
/* MODE SELECT's block descriptor asks for length bl: false if the LUN
 * cannot take it; else it is what the next FORMAT UNIT formats with. */
bool scsi_format_supported (const struct s4k_scsi_lun *lun, uint32_t bl);
void scsi_format_select (struct s4k_scsi_lun *lun, uint32_t bl);
/* The Supported Block Lengths And Protection Types VPD page (B4h) into
 * b; its length. */
size_t scsi_format_vpd_b4 (const struct s4k_scsi_lun *lun, uint8_t *b);
/* The ops of a format to block length bl (FORMAT UNIT, SET SECTOR
 * CONFIGURATION EXT): the switch, then the erase. */
unsigned scsi_format_start (struct ctx *x, uint32_t bl);
/* SET SECTOR CONFIGURATION EXT's end: the registers, or ABORT. */
unsigned scsi_ata_format_end (struct s4k_scsi_cmd *cmd, bool ok);
/* FORMAT UNIT's ops ran (s4k_scsi_done). */
unsigned scsi_format_done (struct s4k_scsi_lun *lun, struct s4k_scsi_cmd *cmd,
                           unsigned failed, int r, unsigned cuts);
/* scsi_zbc.c: the zoned block commands and what they add elsewhere. */
handler scsi_cmd_report_zones, scsi_cmd_zone_out;
/* INQUIRY's peripheral device type: 14h for host-managed, else 00h. */
uint8_t scsi_zbc_device_type (const struct s4k_scsi_lun *lun);
/* VPD page B6h into b (its length, 0 if the LUN is not zoned); for page
 * B1h, sets the ZONED field in b and returns 0. */
size_t scsi_zbc_vpd (const struct s4k_scsi_lun *lun, uint8_t page,
                     uint8_t *b);
/* The command fails with the sense of zone error zerr. */
unsigned scsi_zbc_fail (struct s4k_scsi_cmd *cmd, int zerr);
/* VERIFY with BYTCHK, once its reads ran: the medium against the
 * data-out. */
unsigned scsi_verify_compare (struct s4k_scsi_lun *lun,
                              struct s4k_scsi_cmd *cmd);

#endif
