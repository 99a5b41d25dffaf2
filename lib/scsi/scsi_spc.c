/* SPDX-License-Identifier: BSD-3-Clause */
/* The SCSI command layer's primary commands (SPC-5) that complete here:
 * INQUIRY and its VPD pages, REQUEST SENSE, TEST UNIT READY, MODE SENSE
 * and MODE SELECT.  REPORT SUPPORTED OPERATION CODES is in scsi.c, with
 * the command table it reports. */
#include <string.h>

#include "scsi_priv.h"

static void
pad_copy (uint8_t *dst, const char *src, size_t n)
{
  size_t l = strlen (src);
  memset (dst, ' ', n);
  memcpy (dst, src, l < n ? l : n);
}

/* -- INQUIRY -- */

static const uint8_t vpd_pages[] = { 0x00, 0x80, 0x83, 0xb0, 0xb1, 0xb2, 0xb4 };

static size_t
vpd_page (const struct s4k_scsi_lun *lun, uint8_t page, uint8_t *b)
{
  const struct s4k_scsi_params *p = &lun->p;
  const struct s4k_geometry *g = &p->geom;
  const uint32_t L = g->logical;
  size_t n;
  b[1] = page;
  switch (page) {
  case 0x00:                    /* supported VPD pages */
    n = 4;
    for (size_t i = 0; i < sizeof vpd_pages; i++) {
      if (p->sata && vpd_pages[i] == 0xb0)
        b[n++] = 0x89;          /* ATA Information, in order */
      b[n++] = vpd_pages[i];
    }
    if (p->zones)
      b[n++] = 0xb6;            /* zoned block device characteristics */
    break;
  case 0x89:                    /* ATA Information (SAT-4) */
    if (!p->sata)
      return 0;
    n = scsi_ata_vpd89 (lun, b);
    break;
  case 0x80: {                  /* unit serial number */
    size_t l = strlen (p->serial);
    memcpy (b + 4, p->serial, l);
    n = 4 + l;
    break;
  }
  case 0x83: {                  /* device identification */
    uint8_t *d = b + 4;
    d[0] = 0x01;                /* binary */
    d[1] = 0x03;                /* logical unit, NAA */
    d[3] = 8;
    put64 (d + 4, UINT64_C (3) << 60 | (p->naa_id & ((UINT64_C (1) << 60) - 1)));
    d += 12;
    size_t l = strlen (p->serial);
    d[0] = 0x02;                /* ASCII */
    d[1] = 0x01;                /* logical unit, T10 vendor ID */
    d[3] = (uint8_t) (8 + l);
    pad_copy (d + 4, p->vendor, 8);
    memcpy (d + 12, p->serial, l);
    d += 12 + l;
    n = (size_t) (d - b);
    break;
  }
  case 0xb0: {                  /* block limits */
    const uint32_t ratio = g->physical / L;
    n = 64;
    b[4] = 0x01;                /* WSNZ: WRITE SAME of 0 blocks refused */
    put16 (b + 6, ratio > 0xffff ? 0xffff : (uint16_t) ratio);
    put32 (b + 8, p->max_request / L);
    put32 (b + 12, p->opt_transfer / L);
    put32 (b + 20, (uint32_t) (S4K_SCSI_MAX_UNMAP_BYTES / L));
    put32 (b + 24, S4K_SCSI_MAX_UNMAP_DESCRIPTORS);
    put32 (b + 28, ratio);
    put32 (b + 32, 0x80000000u | (uint32_t) s4k_lowest_aligned (g));
    put64 (b + 36, S4K_SCSI_MAX_WRITE_SAME_BYTES / L);
    /* SBC-4 6.6.4's atomic fields, which Linux (sd_read_block_limits,
     * 6.11 on) reads from a page of 0x3c bytes: MAXIMUM ATOMIC TRANSFER
     * LENGTH, ATOMIC ALIGNMENT, ATOMIC TRANSFER LENGTH GRANULARITY, in
     * logical blocks.  MAXIMUM ATOMIC TRANSFER LENGTH WITH ATOMIC
     * BOUNDARY and MAXIMUM ATOMIC BOUNDARY SIZE stay 0: WRITE ATOMIC(16)
     * takes no ATOMIC BOUNDARY. */
    if (p->atomic.max) {
      put32 (b + 44, atomic_max_blocks (lun));
      put32 (b + 48, atomic_min_blocks (lun));
      put32 (b + 52, atomic_min_blocks (lun));
    }
    break;
  }
  case 0xb1:                    /* block device characteristics */
    n = 64;
    put16 (b + 4, p->rotation_rate);
    scsi_zbc_vpd (lun, page, b);
    break;
  case 0xb6:                    /* zoned block device characteristics */
    if (!(n = scsi_zbc_vpd (lun, page, b)))
      return 0;
    break;
  case 0xb2:                    /* logical block provisioning */
    n = 8;
    /* LBPU, LBPWS, LBPWS10, LBPRZ 001b */
    b[5] = 0x80 | 0x40 | 0x20 | (p->lbprz ? 0x04 : 0);
    b[6] = 0x02;                /* thin provisioned */
    break;
  case 0xb4:                    /* supported block lengths */
    n = scsi_format_vpd_b4 (lun, b);
    break;
  default:
    return 0;
  }
  put16 (b + 2, (uint16_t) (n - 4));
  return n;
}

unsigned
scsi_cmd_inquiry (struct ctx *x)
{
  const uint8_t *c = x->cdb;
  const struct s4k_scsi_params *p = &x->lun->p;
  uint8_t b[600] = { 0 };       /* the longest page: 89h, 572 bytes */
  size_t n;
  if (c[1] & 0x01) {
    n = vpd_page (x->lun, c[2], b);
    if (n == 0)
      return scsi_bad_cdb (x->cmd, 2, -1);
    b[0] = scsi_zbc_device_type (x->lun);
  }
  else {
    if (c[2])                   /* a page code without EVPD */
      return scsi_bad_cdb (x->cmd, 2, -1);
    n = 36;
    b[0] = scsi_zbc_device_type (x->lun);
    b[2] = 0x07;                /* SPC-5 */
    b[3] = 0x12;                /* HISUP, response data format 2 */
    b[4] = (uint8_t) (n - 5);
    b[7] = 0x02;                /* CMDQUE */
    pad_copy (b + 8, p->vendor, 8);
    pad_copy (b + 16, p->product, 16);
    pad_copy (b + 32, p->revision, 4);
  }
  return scsi_data_in (x, b, n, get16 (c + 3));
}

/* -- REQUEST SENSE, TEST UNIT READY -- */

unsigned
scsi_cmd_request_sense (struct ctx *x)
{
  struct s4k_scsi_lun *lun = x->lun;
  /* Sense is returned with the CHECK CONDITION itself (autosense): what
   * is left to report is a pending UNIT ATTENTION, once. */
  uint8_t b[S4K_SCSI_SENSE_LEN] = { 0x70 };
  b[7] = S4K_SCSI_SENSE_LEN - 8;
  if (lun->ua) {
    b[2] = S4K_SENSE_UNIT_ATTENTION;
    b[12] = lun->ua >> 8;
    b[13] = lun->ua & 0xff;
    lun->ua = 0;
  }
  return scsi_data_in (x, b, sizeof b, x->cdb[4]);
}

unsigned
scsi_cmd_test_unit_ready (struct ctx *x)
{
  return scsi_good (x->cmd);
}

/* -- MODE SENSE / MODE SELECT -- */

enum { PC_CURRENT, PC_CHANGEABLE, PC_DEFAULT, PC_SAVED };

/* Page `page` (01h, 08h, 0Ah) as page control pc asks; its length. */
static size_t
mode_page (const struct s4k_scsi_lun *lun, uint8_t page, int pc, uint8_t *b)
{
  size_t n;
  switch (page) {
  case 0x01:                    /* read-write error recovery */
    n = 12;
    break;
  case 0x08:                    /* caching */
    n = 20;
    if (pc != PC_CHANGEABLE && lun->p.write_cache)
      b[2] = 0x04;              /* WCE */
    break;
  case 0x0a:                    /* control */
    n = 12;
    if (pc != PC_CHANGEABLE) {
      b[2] = 0x02;              /* GLTSD: no implicit log saving */
      b[3] = 0x10;              /* queue algorithm modifier: unrestricted */
    }
    break;
  default:
    return 0;
  }
  b[0] = page;
  b[1] = (uint8_t) (n - 2);
  return n;
}

static const uint8_t mode_pages[] = { 0x01, 0x08, 0x0a };

static unsigned
mode_sense (struct ctx *x, bool ten)
{
  const uint8_t *c = x->cdb;
  const struct s4k_scsi_lun *lun = x->lun;
  const struct s4k_geometry *g = &lun->p.geom;
  const bool dbd = c[1] & 0x08, llbaa = ten && (c[1] & 0x10);
  const int pc = c[2] >> 6;
  const uint8_t page = c[2] & 0x3f, subpage = c[3];
  if (pc == PC_SAVED)
    return scsi_fail_info (x->cmd, S4K_SENSE_ILLEGAL_REQUEST,
                           SAVING_PARAMETERS_NOT_SUPPORTED, false, 0,
                           CDB_FIELD (2, 7));
  if (subpage != 0 && !(page == 0x3f && subpage == 0xff))
    return scsi_bad_cdb (x->cmd, 3, -1);
  uint8_t b[256] = { 0 };
  const size_t hdr = ten ? 8 : 4;
  size_t n = hdr;
  /* Device-specific parameter: WP, DPOFUA. */
  b[ten ? 3 : 2] = (lun->p.readonly ? 0x80 : 0) | 0x10;
  if (!dbd) {
    const size_t bd = llbaa ? 16 : 8;
    /* The length MODE SELECT chose, in effect from the next FORMAT
     * UNIT, with the blocks it gives. */
    const uint32_t bl = scsi_format_length (lun);
    const uint64_t blocks = g->size / bl;
    if (llbaa) {
      b[4] = 0x01;              /* LONGLBA */
      put64 (b + n, blocks);
      put32 (b + n + 12, bl);
    }
    else {
      put32 (b + n, blocks > 0xffffffff ? 0xffffffff : (uint32_t) blocks);
      put32 (b + n + 4, bl & 0xffffff);
    }
    if (ten)
      put16 (b + 6, (uint16_t) bd);
    else
      b[3] = (uint8_t) bd;
    n += bd;
  }
  if (page == 0x3f)
    for (size_t i = 0; i < sizeof mode_pages; i++)
      n += mode_page (lun, mode_pages[i], pc, b + n);
  else {
    size_t l = mode_page (lun, page, pc, b + n);
    if (l == 0)
      return scsi_bad_cdb (x->cmd, 2, 5);
    n += l;
  }
  if (ten)
    put16 (b, (uint16_t) (n - 2));
  else
    b[0] = (uint8_t) (n - 1);
  return scsi_data_in (x, b, n, ten ? get16 (c + 7) : c[4]);
}

unsigned scsi_cmd_mode_sense6 (struct ctx *x) { return mode_sense (x, false); }
unsigned scsi_cmd_mode_sense10 (struct ctx *x) { return mode_sense (x, true); }

/* MODE SELECT changes no page (every field reads as not changeable in
 * MODE SENSE): a parameter list that repeats the current values is
 * accepted, any other value is refused, as drives with fixed settings
 * do.  The block descriptor's BLOCK LENGTH may name another length the
 * LUN supports (p.format_lengths), which the next FORMAT UNIT applies;
 * NUMBER OF LOGICAL BLOCKS is ignored (capacity is not changeable). */
static unsigned
mode_select (struct ctx *x, bool ten)
{
  const uint8_t *c = x->cdb;
  struct s4k_scsi_lun *lun = x->lun;
  uint32_t bl = 0;
  const size_t len = ten ? get16 (c + 7) : c[4];
  const size_t hdr = ten ? 8 : 4;
  if (len == 0)
    return scsi_good (x->cmd);
  if (len < hdr || len > x->data_len)
    return scsi_fail (x->cmd, S4K_SENSE_ILLEGAL_REQUEST,
                      PARAMETER_LIST_LENGTH_ERROR);
  const uint8_t *d = x->data;
  const size_t bdl = ten ? get16 (d + 6) : d[3];
  const bool longlba = ten && (d[4] & 0x01);
  size_t i = hdr;
  if (bdl) {
    const size_t one = longlba ? 16 : 8;
    if (bdl != one)
      return scsi_bad_param (x->cmd, ten ? 6 : 3, -1);
    if (hdr + bdl > len)
      return scsi_fail (x->cmd, S4K_SENSE_ILLEGAL_REQUEST,
                        PARAMETER_LIST_LENGTH_ERROR);
    bl = longlba ? get32 (d + hdr + 12) : get32 (d + hdr + 4) & 0xffffff;
    if (!scsi_format_supported (lun, bl))
      return scsi_bad_param (x->cmd, (int) (hdr + (longlba ? 12 : 5)), -1);
    i += bdl;
  }
  while (i < len) {
    if (i + 2 > len)
      return scsi_fail (x->cmd, S4K_SENSE_ILLEGAL_REQUEST,
                        PARAMETER_LIST_LENGTH_ERROR);
    if (d[i] & 0x40)            /* SPF: subpages, none here */
      return scsi_bad_param (x->cmd, (int) i, 6);
    uint8_t cur[64] = { 0 };
    const size_t pl = mode_page (lun, d[i] & 0x3f, PC_CURRENT, cur);
    if (pl == 0)
      return scsi_bad_param (x->cmd, (int) i, 5);
    if ((size_t) d[i + 1] + 2 != pl)
      return scsi_bad_param (x->cmd, (int) i + 1, -1);
    if (i + pl > len)
      return scsi_fail (x->cmd, S4K_SENSE_ILLEGAL_REQUEST,
                        PARAMETER_LIST_LENGTH_ERROR);
    for (size_t j = 2; j < pl; j++)
      if (d[i + j] != cur[j])
        return scsi_bad_param (x->cmd, (int) (i + j), -1);
    i += pl;
  }
  if (bl)
    scsi_format_select (lun, bl);
  return scsi_good (x->cmd);
}

unsigned scsi_cmd_mode_select6 (struct ctx *x) { return mode_select (x, false); }
unsigned scsi_cmd_mode_select10 (struct ctx *x) { return mode_select (x, true); }
