/* SPDX-License-Identifier: BSD-3-Clause */
/* The SCSI command layer's sense data (SPC-5 4.4): the fixed-format sense
 * a failing command returns, the sense for an engine error, and reading
 * and naming sense for the front ends. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "scsi_priv.h"
#include "sect4k/zone.h"

static const struct { uint16_t code; const char *name; } asc_names[] = {
  { NO_ADDITIONAL_SENSE, "NO ADDITIONAL SENSE INFORMATION" },
  { LUN_NOT_READY, "LOGICAL UNIT NOT READY, CAUSE NOT REPORTABLE" },
  { LUN_COMMUNICATION_FAILURE, "LOGICAL UNIT COMMUNICATION FAILURE" },
  { WRITE_ERROR, "WRITE ERROR" },
  { UNRECOVERED_READ_ERROR, "UNRECOVERED READ ERROR" },
  { PARAMETER_LIST_LENGTH_ERROR, "PARAMETER LIST LENGTH ERROR" },
  { MISCOMPARE_DURING_VERIFY, "MISCOMPARE DURING VERIFY OPERATION" },
  { INVALID_COMMAND_OPERATION_CODE, "INVALID COMMAND OPERATION CODE" },
  { LBA_OUT_OF_RANGE, "LOGICAL BLOCK ADDRESS OUT OF RANGE" },
  { INVALID_FIELD_IN_CDB, "INVALID FIELD IN CDB" },
  { INVALID_FIELD_IN_PARAMETER_LIST, "INVALID FIELD IN PARAMETER LIST" },
  { WRITE_PROTECTED, "WRITE PROTECTED" },
  { SPACE_ALLOCATION_FAILED, "SPACE ALLOCATION FAILED WRITE PROTECT" },
  { POWER_ON_RESET, "POWER ON, RESET, OR BUS DEVICE RESET OCCURRED" },
  { POWER_ON_OCCURRED, "POWER ON OCCURRED" },
  { SAVING_PARAMETERS_NOT_SUPPORTED, "SAVING PARAMETERS NOT SUPPORTED" },
  { INTERNAL_TARGET_FAILURE, "INTERNAL TARGET FAILURE" },
  { INSUFFICIENT_RESOURCES, "INSUFFICIENT RESOURCES" },
};

static const char *const key_names[16] = {
  "NO SENSE", "RECOVERED ERROR", "NOT READY", "MEDIUM ERROR",
  "HARDWARE ERROR", "ILLEGAL REQUEST", "UNIT ATTENTION", "DATA PROTECT",
  "BLANK CHECK", "VENDOR SPECIFIC", "COPY ABORTED", "ABORTED COMMAND",
  "RESERVED (0Ch)", "VOLUME OVERFLOW", "MISCOMPARE", "COMPLETED",
};

/* ---- sense ---------------------------------------------------------------- */

unsigned
scsi_fail_info (struct s4k_scsi_cmd *cmd, uint8_t key, uint16_t asc,
                bool info_valid, uint64_t info, struct field f)
{
  uint8_t *s = cmd->sense;
  memset (s, 0, sizeof cmd->sense);
  cmd->status = S4K_SCSI_CHECK_CONDITION;
  cmd->sense_len = S4K_SCSI_SENSE_LEN;
  s[0] = 0x70;                          /* current error, fixed format */
  if (info_valid && info <= UINT32_MAX) {
    s[0] |= 0x80;                       /* VALID */
    put32 (s + 3, (uint32_t) info);
  }
  s[2] = key;
  s[7] = S4K_SCSI_SENSE_LEN - 8;        /* additional sense length */
  s[12] = asc >> 8;
  s[13] = asc & 0xff;
  if (f.byte != NO_FIELD) {
    s[15] = 0x80 | (f.cdb ? 0x40 : 0) | (f.bit >= 0 ? 0x08 | f.bit : 0);
    put16 (s + 16, (uint16_t) f.byte);
  }
  cmd->nops = 0;
  cmd->ops = NULL;
  return 0;
}

unsigned
scsi_fail (struct s4k_scsi_cmd *cmd, uint8_t key, uint16_t asc)
{
  return scsi_fail_info (cmd, key, asc, false, 0, NO_FIELD_PTR);
}

unsigned
scsi_bad_cdb (struct s4k_scsi_cmd *cmd, int byte, int bit)
{
  return scsi_fail_info (cmd, S4K_SENSE_ILLEGAL_REQUEST, INVALID_FIELD_IN_CDB,
                         false, 0, CDB_FIELD (byte, bit));
}

unsigned
scsi_bad_param (struct s4k_scsi_cmd *cmd, int byte, int bit)
{
  return scsi_fail_info (cmd, S4K_SENSE_ILLEGAL_REQUEST,
                         INVALID_FIELD_IN_PARAMETER_LIST, false, 0,
                         PARAM_FIELD (byte, bit));
}

unsigned
scsi_out_of_range (struct s4k_scsi_cmd *cmd)
{
  return scsi_fail (cmd, S4K_SENSE_ILLEGAL_REQUEST, LBA_OUT_OF_RANGE);
}

unsigned
scsi_good (struct s4k_scsi_cmd *cmd)
{
  cmd->status = S4K_SCSI_GOOD;
  cmd->sense_len = 0;
  cmd->nops = 0;
  cmd->ops = NULL;
  return 0;
}

unsigned
scsi_no_memory (struct s4k_scsi_cmd *cmd)
{
  return scsi_fail (cmd, S4K_SENSE_ABORTED_COMMAND, INSUFFICIENT_RESOURCES);
}

/* The sense for result r of op (a command whose ops began at LBA
 * cmd->priv.lba). */
unsigned
scsi_map_error (struct s4k_scsi_lun *lun, struct s4k_scsi_cmd *cmd,
                const struct s4k_scsi_op *op, int r)
{
  const uint64_t lba = op->off >> lun->lshift;
  const bool media = op->kind != S4K_SCSI_OP_FLUSH &&
                     op->kind != S4K_SCSI_OP_ZONE;
  if (s4k_zone_err_of (r))
    return scsi_zbc_fail (cmd, s4k_zone_err_of (r));
  switch (-r) {
  case EIO:
    return scsi_fail_info (cmd, S4K_SENSE_MEDIUM_ERROR,
                           op->kind == S4K_SCSI_OP_READ
                           ? UNRECOVERED_READ_ERROR : WRITE_ERROR,
                           media, lba, NO_FIELD_PTR);
  case ENOSPC:
    return scsi_fail (cmd, S4K_SENSE_DATA_PROTECT, SPACE_ALLOCATION_FAILED);
  case EROFS: case EPERM: case EACCES:
    return scsi_fail (cmd, S4K_SENSE_DATA_PROTECT, WRITE_PROTECTED);
  case ESHUTDOWN:
    return scsi_fail (cmd, S4K_SENSE_NOT_READY, LUN_NOT_READY);
  case EINVAL:
    return scsi_fail (cmd, S4K_SENSE_ILLEGAL_REQUEST, INVALID_FIELD_IN_CDB);
  case ETIMEDOUT: case ECONNRESET: case ECONNREFUSED: case EPIPE:
  case ENOTCONN: case ECONNABORTED: case EHOSTUNREACH:
    return scsi_fail (cmd, S4K_SENSE_ABORTED_COMMAND,
                      LUN_COMMUNICATION_FAILURE);
  case ENOMEM: case EAGAIN: case EBUSY: case ENOBUFS:
    return scsi_no_memory (cmd);
  default:
    return scsi_fail (cmd, S4K_SENSE_HARDWARE_ERROR, INTERNAL_TARGET_FAILURE);
  }
}

int
s4k_scsi_sense_parse (const uint8_t *s, size_t len, uint8_t *key,
                      uint8_t *asc, uint8_t *ascq, bool *info_valid,
                      uint64_t *info)
{
  *info_valid = false;
  *info = 0;
  if (len < 8)
    return -1;
  const uint8_t code = s[0] & 0x7f;
  if (code == 0x70 || code == 0x71) {
    if (len < 14 || (size_t) s[7] + 8 > len || s[7] < 6)
      return -1;
    *key = s[2] & 0x0f;
    *asc = s[12];
    *ascq = s[13];
    if (s[0] & 0x80) {
      *info_valid = true;
      *info = get32 (s + 3);
    }
    return 0;
  }
  if (code == 0x72 || code == 0x73) {
    if ((size_t) s[7] + 8 > len)
      return -1;
    *key = s[1] & 0x0f;
    *asc = s[2];
    *ascq = s[3];
    for (size_t i = 8; i + 2 <= (size_t) s[7] + 8; i += 2 + s[i + 1]) {
      if (i + 2 + s[i + 1] > (size_t) s[7] + 8)
        return -1;
      if (s[i] == 0x00 && s[i + 1] == 0x0a) {   /* information */
        *info_valid = s[i + 2] & 0x80;
        *info = get64 (s + i + 4);
      }
    }
    return 0;
  }
  return -1;
}

void
s4k_scsi_sense_describe (uint8_t key, uint8_t asc, uint8_t ascq, char *buf,
                         size_t len)
{
  const uint16_t code = ASC (asc, ascq);
  for (size_t i = 0; i < sizeof asc_names / sizeof asc_names[0]; i++)
    if (asc_names[i].code == code) {
      snprintf (buf, len, "%s: %s", key_names[key & 0xf], asc_names[i].name);
      return;
    }
  snprintf (buf, len, "%s: ASC %02Xh ASCQ %02Xh", key_names[key & 0xf], asc,
            ascq);
}
