/* SPDX-License-Identifier: BSD-3-Clause */
/* The SCSI command layer's zoned block commands (ZBC-2, issue 33): ZBC IN
 * (REPORT ZONES), ZBC OUT (CLOSE, FINISH, OPEN ZONE, RESET WRITE POINTER),
 * the Zoned Block Device Characteristics VPD page (B6h), the peripheral
 * device type and the sense of each zone error.  The zones are the
 * device's (s4k_dev_zones, include/sect4k/zone.h): REPORT ZONES reads
 * them here; ZBC OUT becomes one S4K_SCSI_OP_ZONE op that the caller runs
 * with s4k_scsi_zone_op.  Compared with scsi_debug (resp_report_zones,
 * resp_*_zone, inquiry_vpd_b6) and libzbc's test suite: docs/zoned.md. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "scsi_priv.h"
#include "sect4k/zone.h"

#define ZONE_DESC 64            /* REPORT ZONES header and descriptor */

uint8_t
scsi_zbc_device_type (const struct s4k_scsi_lun *lun)
{
  return lun->p.zones && lun->zoned == S4K_ZONED_HOST_MANAGED ? 0x14 : 0x00;
}

size_t
scsi_zbc_vpd (const struct s4k_scsi_lun *lun, uint8_t page, uint8_t *b)
{
  if (!lun->p.zones)
    return 0;
  if (page == 0xb1) {           /* ZONED field: host-aware 01b */
    if (lun->zoned == S4K_ZONED_HOST_AWARE)
      b[8] |= 0x10;
    return 0;
  }
  /* B6h: URSWRZ (reads unrestricted, which Linux requires of a
   * host-managed drive); the optimal numbers of open and of
   * non-sequentially written sequential write preferred zones not
   * reported; the maximum number of open sequential write required
   * zones (FFFFFFFFh: no limit, as on a host-aware drive). */
  b[4] = 0x01;
  put32 (b + 8, 0xffffffff);
  put32 (b + 12, 0xffffffff);
  put32 (b + 16, lun->zoned == S4K_ZONED_HOST_MANAGED && lun->max_open
                 ? lun->max_open : 0xffffffff);
  return 64;
}

unsigned
scsi_zbc_fail (struct s4k_scsi_cmd *cmd, int zerr)
{
  uint8_t key, asc, ascq;
  if (!s4k_zone_sense (zerr, &key, &asc, &ascq))
    return scsi_fail (cmd, S4K_SENSE_HARDWARE_ERROR, INTERNAL_TARGET_FAILURE);
  return scsi_fail (cmd, key, ASC (asc, ascq));
}

/* ZBC IN, REPORT ZONES: the header (ZONE LIST LENGTH, MAXIMUM LBA) and a
 * descriptor per zone that fits the allocation length. */
unsigned
scsi_cmd_report_zones (struct ctx *x)
{
  const uint8_t *c = x->cdb;
  const struct s4k_scsi_lun *lun = x->lun;
  const uint64_t lba = get64 (c + 2);
  uint64_t alloc = get32 (c + 10);
  const unsigned option = c[14] & 0x3f;
  const bool partial = c[14] & 0x80;
  if (alloc == 0)               /* not an error (SPC: nothing to send) */
    return scsi_good (x->cmd);
  if (alloc > x->data_len)
    alloc = x->data_len;
  struct s4k_zones_info zi;
  s4k_zones_info (lun->p.zones, &zi);
  /* Every descriptor the allocation length reaches, the last maybe cut
   * (SPC: the data up to the allocation length; with PARTIAL the list
   * length counts it too, as scsi_debug since its fix of the alloc_len
   * underflow rounds up). */
  uint64_t room = alloc > ZONE_DESC ?
                  (alloc - ZONE_DESC + ZONE_DESC - 1) / ZONE_DESC : 0;
  if (room > zi.nr_zones)
    room = zi.nr_zones;
  struct s4k_zone_desc *d = calloc (room ? room : 1, sizeof *d);
  uint8_t *b = calloc (1, ZONE_DESC * (room + 1));
  if (!d || !b) {
    free (d);
    free (b);
    return scsi_no_memory (x->cmd);
  }
  uint64_t listed;
  const int n = s4k_zones_report (lun->p.zones, lba, option, partial, d,
                                  (uint32_t) room, &listed);
  unsigned ret;
  if (n < 0)
    ret = scsi_zbc_fail (x->cmd, -n);
  else {
    put32 (b, (uint32_t) (listed * ZONE_DESC));
    put64 (b + 8, lun->blocks - 1);
    for (int i = 0; i < n; i++) {
      uint8_t *p = b + ZONE_DESC * (i + 1);
      p[0] = d[i].type;
      p[1] = (uint8_t) (d[i].cond << 4 | d[i].non_seq << 1 |
                        d[i].reset_recommended);
      put64 (p + 8, d[i].len);
      put64 (p + 16, d[i].start);
      put64 (p + 24, d[i].wp);
    }
    ret = scsi_data_in (x, b, ZONE_DESC * ((size_t) n + 1), alloc);
  }
  free (d);
  free (b);
  return ret;
}

/* ZBC OUT: an op per zone that the caller runs (s4k_scsi_zone_op).  One
 * zone (ZONE COUNT 0 or 1): its id is checked there, by the zones.  ZBC-2's
 * ZONE COUNT above one (bytes 12-13, ignored with ALL) names that many
 * zones from ZONE ID, checked here before any runs: ZONE ID a zone start,
 * every zone within the device (LBA OUT OF RANGE) and with a write
 * pointer, none read only or offline, and an OPEN finds room for all of
 * them or opens none (INSUFFICIENT ZONE RESOURCES).  scsi_debug ignores
 * the field (one zone). */
unsigned
scsi_cmd_zone_out (struct ctx *x)
{
  const uint8_t *c = x->cdb;
  const bool all = c[14] & 0x01;
  const uint64_t id = all ? 0 : get64 (c + 2);
  const unsigned count = all ? 1 : get16 (c + 12);
  const unsigned sa = c[1] & 0x1f;
  const struct s4k_scsi_lun *lun = x->lun;
  if (lun->p.readonly)
    return scsi_fail (x->cmd, S4K_SENSE_DATA_PROTECT, WRITE_PROTECTED);
  if (!all && id >= lun->blocks)
    return scsi_out_of_range (x->cmd);
  if (count <= 1)
    return scsi_one_op (x->cmd, S4K_SCSI_OP_ZONE, NULL, 0,
                        id << lun->lshift,
                        sa | (all ? S4K_SCSI_ZONE_ALL : 0));
  struct s4k_zones_info zi;
  s4k_zones_info (lun->p.zones, &zi);
  const uint64_t first = id / zi.zone_lbas;
  if (id % zi.zone_lbas)
    return scsi_zbc_fail (x->cmd, S4K_ZERR_NOT_ZONE_START);
  if (count > zi.nr_zones - first)
    return scsi_out_of_range (x->cmd);
  struct s4k_zone_desc *d = calloc (count, sizeof *d);
  if (!d)
    return scsi_no_memory (x->cmd);
  uint64_t listed;
  const int n = s4k_zones_report (lun->p.zones, id, 0, true, d, count,
                                  &listed);
  int zerr = n < 0 ? -n : 0;
  uint32_t to_open = 0;
  for (int i = 0; !zerr && i < n; i++)
    if (d[i].type == S4K_ZT_CONVENTIONAL)
      zerr = S4K_ZERR_NOT_WRITE_POINTER_ZONE;
    else if (d[i].cond == S4K_ZC_READ_ONLY)
      zerr = S4K_ZERR_READ_ONLY;
    else if (d[i].cond == S4K_ZC_OFFLINE)
      zerr = S4K_ZERR_OFFLINE;
    else if (d[i].cond != S4K_ZC_EXP_OPEN && d[i].cond != S4K_ZC_FULL)
      to_open++;                /* explicitly open once it ran */
  free (d);
  if (!zerr && sa == S4K_ZOP_OPEN && zi.max_open) {
    struct s4k_zones_counts k;
    s4k_zones_counts (lun->p.zones, &k);
    if (k.exp_open + to_open > zi.max_open)
      zerr = S4K_ZERR_INSUFFICIENT_RESOURCES;
  }
  if (zerr)
    return scsi_zbc_fail (x->cmd, zerr);
  struct s4k_scsi_op *ops = scsi_ops_alloc (x->cmd, count);
  if (!ops)
    return scsi_no_memory (x->cmd);
  for (unsigned i = 0; i < count; i++) {
    ops[i].kind = S4K_SCSI_OP_ZONE;
    ops[i].off = (id + i * zi.zone_lbas) << lun->lshift;
    ops[i].flags = sa;
  }
  return count;
}

int
s4k_scsi_zone_op (struct s4k_dev *d, const struct s4k_scsi_op *op)
{
  if (op->kind != S4K_SCSI_OP_ZONE)
    return -EINVAL;
  const struct s4k_geometry *g = s4k_dev_geometry (d);
  return s4k_dev_zone_op (d, (enum s4k_zone_op) (op->flags & 0xff),
                          op->off / g->logical,
                          op->flags & S4K_SCSI_ZONE_ALL);
}
