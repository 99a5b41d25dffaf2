/* SPDX-License-Identifier: BSD-3-Clause */
/* Sector-size conversion in place (issue 34), as "fast format" drives do
 * it: MODE SELECT's block descriptor names a new BLOCK LENGTH, FORMAT
 * UNIT applies it.  The physical sector stays (512e <-> 4Kn): the engine
 * switches its logical size (s4k_dev_set_logical, an op the caller runs),
 * the LUN its block count, the data is erased (zeroes, deallocated), and
 * the next command gets UNIT ATTENTION, CAPACITY DATA HAS CHANGED.  The
 * lengths the LUN takes are p.format_lengths, listed in the Supported
 * Block Lengths And Protection Types VPD page (B4h). */
#include <errno.h>
#include <string.h>

#include "scsi_priv.h"

static bool
has_length (const struct s4k_scsi_params *p, uint32_t bl)
{
  return bl >= S4K_MIN_LOGICAL && bl <= S4K_MAX_LOGICAL && !(bl & (bl - 1)) &&
         (p->format_lengths >> __builtin_ctz (bl)) & 1;
}

void
s4k_scsi_params_formats (struct s4k_scsi_params *p, const struct s4k_dev *d)
{
  static const uint32_t lengths[] = { 512, 4096 };
  char err[256];
  for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++)
    if (s4k_dev_logical_ok (d, lengths[i], err, sizeof err) == 0)
      p->format_lengths |= 1u << __builtin_ctz (lengths[i]);
}

void
scsi_format_lengths_check (struct s4k_scsi_lun *lun)
{
  struct s4k_scsi_params q = lun->p;
  char err[256];
  uint32_t keep = 1u << lun->lshift;    /* the current one, always */
  for (unsigned n = 9; n <= 16; n++) {
    if (!((lun->p.format_lengths >> n) & 1))
      continue;
    /* What the LUN's rules say of the same LUN with that length. */
    q.geom.logical = 1u << n;
    if (scsi_lun_check (&q, err, sizeof err) == 0)
      keep |= 1u << n;
  }
  lun->p.format_lengths = keep;
}

uint32_t
scsi_format_length (const struct s4k_scsi_lun *lun)
{
  return lun->pending_length ? lun->pending_length : lun->p.geom.logical;
}

bool
scsi_format_supported (const struct s4k_scsi_lun *lun, uint32_t bl)
{
  return bl == lun->p.geom.logical || has_length (&lun->p, bl);
}

void
scsi_format_select (struct s4k_scsi_lun *lun, uint32_t bl)
{
  lun->pending_length = bl == lun->p.geom.logical ? 0 : bl;
}

size_t
scsi_format_vpd_b4 (const struct s4k_scsi_lun *lun, uint8_t *b)
{
  /* SBC-4 6.6.8: one 8-byte descriptor per length, LOGICAL BLOCK LENGTH
   * then the protection bits: none (no protection information). */
  size_t n = 4;
  for (unsigned i = 9; i <= 16; i++)
    if ((lun->p.format_lengths >> i) & 1) {
      memset (b + n, 0, 8);
      put32 (b + n, 1u << i);
      n += 8;
    }
  return n;
}

/* -- FORMAT UNIT -- */

/* SBC-4 5.3.  CDB: FMTPINFO 0 (no protection information: the usage
 * data refuses it), LONGLIST, FMTDATA, CMPLST and DEFECT LIST FORMAT
 * (there is no defect list to keep or replace), FFMT (every format is
 * fast here: the erase is a deallocation).  Parameter list (FMTDATA): the
 * short or long header, with no defect list and no initialization
 * pattern; IMMED is taken, but the format completes before the command
 * does. */
unsigned
scsi_cmd_format_unit (struct ctx *x)
{
  struct s4k_scsi_lun *lun = x->lun;
  struct s4k_scsi_cmd *cmd = x->cmd;
  const uint8_t *c = x->cdb;
  const bool longlist = c[1] & 0x20, fmtdata = c[1] & 0x10;
  if ((c[4] & 0x03) == 0x03)    /* FFMT 11b: reserved */
    return scsi_bad_cdb (cmd, 4, 1);
  if (fmtdata) {
    const size_t hdr = longlist ? 8 : 4;
    const uint8_t *d = x->data;
    if (x->data_len < hdr)
      return scsi_fail (cmd, S4K_SENSE_ILLEGAL_REQUEST,
                        PARAMETER_LIST_LENGTH_ERROR);
    if (d[0] & 0x07)            /* PROTECTION FIELD USAGE */
      return scsi_bad_param (cmd, 0, 2);
    if (d[1] & 0x08)            /* IP: an initialization pattern */
      return scsi_bad_param (cmd, 1, 3);
    if (longlist && d[3])       /* P_I_INFORMATION, PI EXPONENT */
      return scsi_bad_param (cmd, 3, -1);
    if (longlist ? get32 (d + 4) : get16 (d + 2))
      return scsi_bad_param (cmd, longlist ? 4 : 2, -1);
  }
  if (lun->p.readonly)
    return scsi_fail (cmd, S4K_SENSE_DATA_PROTECT, WRITE_PROTECTED);
  return scsi_format_start (x, scsi_format_length (lun));
}

unsigned
scsi_format_start (struct ctx *x, uint32_t bl)
{
  struct s4k_scsi_lun *lun = x->lun;
  struct s4k_scsi_cmd *cmd = x->cmd;
  const uint64_t size = lun->p.geom.size;
  const bool change = bl != lun->p.geom.logical;
  /* The erase, in pieces as WRITE SAME's limit; the switch first. */
  const uint64_t piece = S4K_SCSI_MAX_WRITE_SAME_BYTES;
  const uint64_t pieces = (size + piece - 1) / piece;
  struct s4k_scsi_op *ops = scsi_ops_alloc (cmd, pieces + change);
  if (!ops)
    return scsi_no_memory (cmd);
  unsigned k = 0;
  if (change) {
    ops[k].kind = S4K_SCSI_OP_SET_LOGICAL;
    ops[k].len = bl;
    k++;
  }
  for (uint64_t i = 0; i < pieces; i++, k++) {
    ops[k].kind = S4K_SCSI_OP_ZERO;
    ops[k].off = i * piece;
    ops[k].len = size - i * piece < piece ? size - i * piece : piece;
    ops[k].flags = lun->p.lbprz ? S4K_MAY_TRIM : 0;
  }
  cmd->priv.kind = KIND_FORMAT;
  cmd->priv.blocks = bl;        /* the length being formatted to */
  return cmd->nops;
}

unsigned
scsi_format_done (struct s4k_scsi_lun *lun, struct s4k_scsi_cmd *cmd,
                  unsigned failed, int r, unsigned cuts)
{
  const uint32_t bl = (uint32_t) cmd->priv.blocks;
  if (failed >= cmd->nops)
    r = 0;
  else if (r == 0)
    r = -EIO;
  /* Once the engine switched (op 0 ran), the LUN follows it whatever
   * came after: its geometry and the engine's never differ. */
  if (bl != lun->p.geom.logical &&
      cmd->ops[0].kind == S4K_SCSI_OP_SET_LOGICAL && failed > 0) {
    lun->p.geom.logical = bl;
    lun->lshift = (unsigned) __builtin_ctz (bl);
    lun->blocks = lun->p.geom.size >> lun->lshift;
    lun->ua = CAPACITY_DATA_HAS_CHANGED;
  }
  if (failed > 0 || r == 0)
    lun->pending_length = 0;
  if (cmd->priv.opcode == 0x85 || cmd->priv.opcode == 0xa1)
    /* SET SECTOR CONFIGURATION EXT: the drive's registers. */
    return scsi_ata_format_end (cmd, r == 0);
  if (r == 0)
    return scsi_good (cmd);
  if (cuts != cmd->priv.epoch || r == -ESHUTDOWN)
    return scsi_fail (cmd, S4K_SENSE_NOT_READY, LUN_NOT_READY);
  /* The switch refused (the engine's rules changed under the LUN), or
   * the erase failed part way: the medium is not formatted. */
  return scsi_fail (cmd, S4K_SENSE_MEDIUM_ERROR, FORMAT_COMMAND_FAILED);
}
