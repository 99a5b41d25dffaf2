/* SPDX-License-Identifier: BSD-3-Clause */
/* The SCSI layer's SATA identity (interface=sata, issue 34): the LUN
 * answers as a SATA drive behind a SCSI/ATA Translation layer (SAT-4), as
 * libata or a USB/SAS bridge presents one.  The drive's IDENTIFY DEVICE
 * data (ACS-4 7.12.7) states the geometry the ATA way: words 106, 117-118
 * and 209.  It is in the ATA Information VPD page (89h) and is what ATA
 * PASS-THROUGH(12)/(16) IDENTIFY DEVICE returns; the pass-through also
 * runs READ LOG (DMA) EXT of the General Purpose Log directory and the
 * IDENTIFY DEVICE data log (30h), SMART (READ DATA, READ THRESHOLDS, READ
 * LOG, RETURN STATUS, ENABLE OPERATIONS), CHECK POWER MODE and FLUSH
 * CACHE (EXT).  Any other ATA command ends as the drive ends it: with
 * ERR and ABRT, which the SATL reports as ABORTED COMMAND with the ATA
 * Status Return descriptor.  SMART's sector counts follow the fault
 * layer's bad sectors (params.bad_counts).
 *
 * A zoned LUN (zoned=) is a ZAC drive (ACS-4, ZAC-2): host-aware says so
 * in IDENTIFY word 69, host-managed by its signature (ABCDh in VPD 89h's
 * Register D2H FIS), and either has the Zoned Device Information page
 * (09h) of the IDENTIFY DEVICE data log, stating what VPD B6h states, as
 * libata translates the one into the other.  The ZAC commands themselves
 * (REPORT ZONES EXT, ZAC MANAGEMENT IN/OUT) end in ABORT: the zones are
 * driven through ZBC IN/OUT, as Linux's sd does through a SATL. */
#include <string.h>

#include "sect4k/zone.h"

#include "scsi_priv.h"

/* ATA status and error bits (ACS-4 6.2, 6.3). */
enum { ATA_ERR = 0x01, ATA_DRDY = 0x40, ATA_DSC = 0x10, ATA_ABRT = 0x04 };
#define ATA_OK (ATA_DRDY | ATA_DSC)
/* Blocks of LBA range entries one DATA SET MANAGEMENT takes (IDENTIFY
 * word 105): 8 x 64 ranges, twice UNMAP's 256 descriptors, as many
 * drives report. */
#define ATA_DSM_BLOCKS 8u

/* The logs: the IDENTIFY DEVICE data log has pages 00h (list), 01h (copy
 * of IDENTIFY DEVICE), 02h (capacity and sector sizes) and, zoned, 09h
 * (Zoned Device Information; pages 03h-08h then read as zeroes, listed
 * as absent). */
enum { LOG_DIRECTORY = 0x00, LOG_SECTOR_CONFIG = 0x2f, LOG_IDENTIFY = 0x30,
       IDENTIFY_PAGES = 3, PAGE_ZONED = 0x09 };

static enum s4k_zoned
ata_zoned (const struct s4k_scsi_params *p)
{
  struct s4k_zones_info zi = { 0 };
  if (p->zones)
    s4k_zones_info (p->zones, &zi);
  return zi.model;
}

/* The pages of the IDENTIFY DEVICE data log there are to read. */
static uint32_t
identify_pages (const struct s4k_scsi_lun *lun)
{
  return ata_zoned (&lun->p) != S4K_ZONED_NONE ? PAGE_ZONED + 1
                                               : IDENTIFY_PAGES;
}

/* SMART's attributes: id, flags, threshold.  5 is pre-failure: its value
 * falls by one per reallocated (repaired) sector from 100, and at the
 * threshold (90 sectors) SMART RETURN STATUS reports the drive failing,
 * as a drive's does; 197 and 198 count the bad sectors now (they fail
 * reads until written), 12 the power cycles (cuts plus the first
 * power-on). */
static const struct { uint8_t id; uint16_t flags; uint8_t thresh; }
attrs[] = {
  { 5, 0x0033, 10 },            /* Reallocated_Sector_Ct: prefail */
  { 12, 0x0032, 0 },            /* Power_Cycle_Count */
  { 197, 0x0032, 0 },           /* Current_Pending_Sector */
  { 198, 0x0030, 0 },           /* Offline_Uncorrectable */
};
#define NATTRS (sizeof attrs / sizeof attrs[0])

/* An ATA string: two characters a word, the first in the high byte,
 * space-padded. */
static void
ata_string (uint16_t *w, const char *s, size_t words)
{
  const size_t l = strlen (s);
  for (size_t i = 0; i < words; i++) {
    const uint8_t hi = 2 * i < l ? (uint8_t) s[2 * i] : ' ';
    const uint8_t lo = 2 * i + 1 < l ? (uint8_t) s[2 * i + 1] : ' ';
    w[i] = (uint16_t) (hi << 8 | lo);
  }
}

/* The position of LBA 0 in its physical sector, in logical sectors
 * (word 209): alignment= bytes lie between LBA 0 and the first physical
 * boundary, so LBA 0 is (P - A) / L sectors into the physical sector
 * before it. */
uint32_t
scsi_ata_lba0_offset (const struct s4k_geometry *g)
{
  const uint32_t ratio = g->physical / g->logical;
  return (ratio - g->alignment / g->logical) % ratio;
}

void
s4k_scsi_ata_identify (const struct s4k_scsi_params *p, uint16_t id[256])
{
  const struct s4k_geometry *g = &p->geom;
  const uint64_t blocks = g->size / g->logical;
  const uint32_t ratio = g->physical / g->logical;
  memset (id, 0, 256 * sizeof *id);
  id[0] = 0x0040;               /* fixed device, ATA */
  id[1] = 16383;                /* obsolete CHS: the usual maximum */
  id[2] = 0xc837;               /* no SET FEATURES spin-up needed */
  id[3] = 16;
  id[6] = 63;
  ata_string (id + 10, p->serial, 10);
  ata_string (id + 23, S4K_VERSION, 4);
  ata_string (id + 27, p->product, 20);
  id[47] = 0x8010;              /* READ/WRITE MULTIPLE: 16 sectors */
  id[48] = 0x4000;
  id[49] = 0x0f00;              /* IORDY, LBA, DMA */
  id[50] = 0x4000;
  id[53] = 0x0006;              /* words 64-70 and 88 valid */
  id[59] = 0x0110;              /* multiple sector setting 16, valid */
  id[60] = (uint16_t) (blocks > 0x0fffffff ? 0x0fffffff : blocks);
  id[61] = (uint16_t) ((blocks > 0x0fffffff ? 0x0fffffff : blocks) >> 16);
  id[63] = 0x0007;              /* multiword DMA 0-2 */
  id[64] = 0x0003;              /* PIO 3-4 */
  id[65] = id[66] = id[67] = id[68] = 120;
  /* Deterministic data after TRIM (bit 14), and it is zeroes (bit 5):
   * the store's trim reads back zeroes unless it is an NBD upstream. */
  id[69] = p->lbprz ? 0x4020 : 0;
  /* Zoned capabilities (bits 1:0): host-aware 01b; a host-managed drive
   * has 00b and its own signature (VPD 89h). */
  if (ata_zoned (p) == S4K_ZONED_HOST_AWARE)
    id[69] |= 0x0001;
  id[76] = 0x000e;              /* SATA 1.5, 3.0, 6.0 Gb/s; no NCQ */
  id[80] = 0x0ff0;              /* ATA/ATAPI-4 .. ACS-4 */
  /* Supported: SMART (0), power management (3), volatile write cache
   * (5), look-ahead (6), NOP (14). */
  id[82] = 0x4069;
  /* FLUSH CACHE EXT (13), FLUSH CACHE (12), 48-bit addresses (10). */
  id[83] = 0x4000 | 0x2000 | 0x1000 | 0x0400;
  id[84] = 0x4020;              /* General Purpose Logging */
  id[85] = (uint16_t) (0x4049 | (p->write_cache ? 0x0020 : 0));
  id[86] = 0x8000 | 0x2000 | 0x1000 | 0x0400; /* 119-120 valid */
  id[87] = 0x4020;
  id[88] = 0x407f;              /* UDMA 0-6, 6 selected */
  for (int i = 0; i < 4; i++)
    id[100 + i] = (uint16_t) (blocks >> (16 * i));
  /* Physical / logical sector size (ACS-4 7.12.7.37): bit 14 valid,
   * bit 13 several logical sectors per physical one, bits 3:0 log2 of
   * how many; bit 12 logical sectors longer than 256 words, whose length
   * in words is in 117-118. */
  id[106] = 0x4000;
  if (ratio > 1)
    id[106] |= (uint16_t) (0x2000 | __builtin_ctz (ratio));
  if (g->logical > 512) {
    id[106] |= 0x1000;
    id[117] = (uint16_t) (g->logical / 2);
    id[118] = (uint16_t) ((g->logical / 2) >> 16);
  }
  id[119] = 0x4008;             /* READ LOG DMA EXT */
  id[120] = 0x4008;
  id[105] = ATA_DSM_BLOCKS;      /* DATA SET MANAGEMENT: blocks of ranges */
  id[169] = 0x0001;             /* TRIM */
  /* Alignment (ACS-4 7.12.7.64): bit 14 valid, bits 13:0 where LBA 0
   * lies in its physical sector. */
  id[209] = (uint16_t) (0x4000 | scsi_ata_lba0_offset (g));
  id[217] = p->rotation_rate;
  id[222] = 0x103f;             /* serial: ATA8-AST, SATA 1.0a .. 3.0 */
  /* Integrity word: signature A5h, and a checksum that makes the 512
   * bytes sum to 0 modulo 256. */
  uint8_t sum = 0xa5;
  for (int i = 0; i < 255; i++)
    sum = (uint8_t) (sum + (id[i] & 0xff) + (id[i] >> 8));
  id[255] = (uint16_t) ((uint8_t) -sum << 8 | 0xa5);
}

static void
put_words (uint8_t *b, const uint16_t *w, size_t n)
{
  for (size_t i = 0; i < n; i++) {
    b[2 * i] = (uint8_t) w[i];
    b[2 * i + 1] = (uint8_t) (w[i] >> 8);
  }
}

static void
put64le (uint8_t *b, uint64_t v)
{
  for (int i = 0; i < 8; i++)
    b[i] = (uint8_t) (v >> (8 * i));
}

/* ---- VPD page 89h -------------------------------------------------------- */

size_t
scsi_ata_vpd89 (const struct s4k_scsi_lun *lun, uint8_t *b)
{
  /* SAT-4 12.4.2: the SATL's identification, the device signature (a
   * Register D2H FIS), the command that read the IDENTIFY data, the
   * data.  b[0..3] (header) is the caller's. */
  memcpy (b + 8, "SECT4K  ", 8);
  memcpy (b + 16, "sect4k SATL     ", 16);
  memcpy (b + 32, lun->p.revision, strnlen (lun->p.revision, 4));
  for (size_t i = strnlen (lun->p.revision, 4); i < 4; i++)
    b[32 + i] = ' ';
  uint8_t *fis = b + 36;
  fis[0] = 0x34;                /* Register D2H */
  fis[2] = ATA_OK;
  fis[3] = 0x01;                /* diagnostics passed */
  fis[4] = 0x01;                /* ATA signature: LBA 0x000001, count 1 */
  fis[12] = 0x01;
  if (ata_zoned (&lun->p) == S4K_ZONED_HOST_MANAGED) {
    fis[5] = 0xcd;              /* ZAC host-managed: LBA 0xABCD01 */
    fis[6] = 0xab;
  }
  b[56] = 0xec;                 /* IDENTIFY DEVICE */
  uint16_t id[256];
  s4k_scsi_ata_identify (&lun->p, id);
  put_words (b + 60, id, 256);
  return 572;
}

/* ---- ATA PASS-THROUGH ---------------------------------------------------- */

/* The ATA registers of a command and of its result. */
struct ata_regs {
  bool ext;
  uint8_t error, device, status;
  uint16_t features, count;
  uint64_t lba;
};

/* The command ends with the registers r: CHECK CONDITION with descriptor
 * sense and the ATA Status Return descriptor (SAT-4 12.2.2.7), as libata
 * and SAT-4 give it: ABORTED COMMAND after an ATA error, else (CK_COND)
 * RECOVERED ERROR / ATA PASS-THROUGH INFORMATION AVAILABLE.  Data-in
 * already in place stays. */
static unsigned
ata_sense (struct s4k_scsi_cmd *cmd, const struct ata_regs *r)
{
  uint8_t *s = cmd->sense;
  memset (s, 0, sizeof cmd->sense);
  cmd->status = S4K_SCSI_CHECK_CONDITION;
  s[0] = 0x72;
  if (r->status & ATA_ERR)
    s[1] = S4K_SENSE_ABORTED_COMMAND;
  else {
    s[1] = 0x01;                /* RECOVERED ERROR */
    s[3] = 0x1d;
  }
  s[7] = 14;
  uint8_t *d = s + 8;
  d[0] = 0x09;
  d[1] = 0x0c;
  d[2] = r->ext;
  d[3] = r->error;
  d[4] = (uint8_t) (r->count >> 8);
  d[5] = (uint8_t) r->count;
  d[6] = (uint8_t) (r->lba >> 24);
  d[7] = (uint8_t) r->lba;
  d[8] = (uint8_t) (r->lba >> 32);
  d[9] = (uint8_t) (r->lba >> 8);
  d[10] = (uint8_t) (r->lba >> 40);
  d[11] = (uint8_t) (r->lba >> 16);
  d[12] = r->device;
  d[13] = r->status;
  cmd->sense_len = 8 + 14;
  cmd->nops = 0;
  cmd->ops = NULL;
  return 0;
}

/* The end of a command the drive ran: good, or the registers when
 * CK_COND asked for them. */
static unsigned
ata_end (struct s4k_scsi_cmd *cmd, struct ata_regs *r, bool ck_cond)
{
  r->status = ATA_OK;
  r->error = 0;
  if (ck_cond)
    return ata_sense (cmd, r);
  return scsi_good (cmd);
}

static unsigned
ata_abort (struct s4k_scsi_cmd *cmd, struct ata_regs *r)
{
  cmd->data_in_len = 0;
  r->status = ATA_OK | ATA_ERR;
  r->error = ATA_ABRT;
  return ata_sense (cmd, r);
}

static uint8_t
checksum (const uint8_t *b)
{
  uint8_t sum = 0;
  for (int i = 0; i < 511; i++)
    sum = (uint8_t) (sum + b[i]);
  return (uint8_t) -sum;
}

static uint8_t
attr_value (unsigned i, uint64_t realloc)
{
  if (attrs[i].id == 5)
    return (uint8_t) (realloc >= 99 ? 1 : 100 - realloc);
  return 100;
}

static void
counts (const struct s4k_scsi_lun *lun, uint64_t *bad, uint64_t *realloc)
{
  *bad = *realloc = 0;
  if (lun->p.bad_counts)
    lun->p.bad_counts (lun->p.bad_opaque, bad, realloc);
}

/* SMART READ DATA (ACS-3 7.48.7.4, the attribute table as drives
 * lay it out). */
static void
smart_data (const struct s4k_scsi_lun *lun, uint8_t *b)
{
  uint64_t bad, realloc;
  counts (lun, &bad, &realloc);
  b[0] = 0x10;                  /* data structure revision 16 */
  for (unsigned i = 0; i < NATTRS; i++) {
    uint8_t *a = b + 2 + 12 * i;
    const uint64_t raw = attrs[i].id == 5 ? realloc
                       : attrs[i].id == 12 ? (uint64_t) lun->cuts + 1 : bad;
    a[0] = attrs[i].id;
    a[1] = (uint8_t) attrs[i].flags;
    a[2] = (uint8_t) (attrs[i].flags >> 8);
    a[3] = a[4] = attr_value (i, realloc);
    for (int k = 0; k < 6; k++)
      a[5 + k] = (uint8_t) (raw >> (8 * k));
  }
  b[368] = 0x03;                /* SMART capability: saves data, autosave */
  b[511] = checksum (b);
}

static void
smart_thresholds (uint8_t *b)
{
  b[0] = 0x10;
  for (unsigned i = 0; i < NATTRS; i++) {
    b[2 + 12 * i] = attrs[i].id;
    b[3 + 12 * i] = attrs[i].thresh;
  }
  b[511] = checksum (b);
}

static bool
smart_failing (const struct s4k_scsi_lun *lun)
{
  uint64_t bad, realloc;
  counts (lun, &bad, &realloc);
  for (unsigned i = 0; i < NATTRS; i++)
    if ((attrs[i].flags & 1) && attr_value (i, realloc) <= attrs[i].thresh)
      return true;
  return false;
}

/* The Sector Configuration log's descriptor i: the i-th length of
 * p.format_lengths, smallest first, or 0. */
enum { SECTOR_CONFIGS = 8 };
static uint32_t
sector_config (const struct s4k_scsi_lun *lun, unsigned i)
{
  for (unsigned n = 9; n <= 16; n++)
    if ((lun->p.format_lengths >> n) & 1 && i-- == 0)
      return 1u << n;
  return 0;
}

/* Page `page` of log `log` into b (512 bytes, zeroed): false if the log
 * or page does not exist.  smart: read through SMART READ LOG. */
static bool
log_page (const struct s4k_scsi_lun *lun, uint8_t log, uint32_t page,
          uint8_t *b)
{
  const struct s4k_geometry *g = &lun->p.geom;
  if (log == LOG_DIRECTORY) {
    if (page != 0)
      return false;
    b[0] = 0x01;                /* version 1 */
    b[2 * LOG_SECTOR_CONFIG] = 1;
    b[2 * LOG_IDENTIFY] = (uint8_t) identify_pages (lun);
    return true;
  }
  if (log == LOG_SECTOR_CONFIG) {
    /* Sector Configuration log (ACS-4 9.21): a descriptor per length
     * the drive takes (lib/scsi/scsi_format.c), as hdparm --set-sector-size
     * reads it: byte 0 bit 7 valid, 3:2 DESCRIPTOR CHECK, 7:4 the
     * logical sector size in bytes (little-endian).  The check's low
     * byte is 0: hdparm (9.65) sends only the high byte of it. */
    if (page != 0)
      return false;
    for (unsigned i = 0; i < SECTOR_CONFIGS; i++) {
      const uint32_t L = sector_config (lun, i);
      if (!L)
        continue;
      uint8_t *d = b + 16 * i;
      d[0] = 0x80;
      d[3] = (uint8_t) (L >> 9);  /* the check: L / 512 * 256 */
      d[4] = (uint8_t) L;
      d[5] = (uint8_t) (L >> 8);
      d[6] = (uint8_t) (L >> 16);
      d[7] = (uint8_t) (L >> 24);
    }
    return true;
  }
  if (log != LOG_IDENTIFY || page >= identify_pages (lun))
    return false;
  if (page >= IDENTIFY_PAGES && page != PAGE_ZONED)
    return true;                /* not listed: zeroes */
  /* Every page but 01h begins with a header: revision 0001h, the page
   * number; pages after 00h also set bit 63. */
  if (page != 1)
    put64le (b, 0x0001 | (uint64_t) page << 16 |
                (page ? UINT64_C (1) << 63 : 0));
  switch (page) {
  case 0:                       /* the pages there are */
    b[8] = IDENTIFY_PAGES;
    for (int i = 0; i < IDENTIFY_PAGES; i++)
      b[9 + i] = (uint8_t) i;
    if (identify_pages (lun) > PAGE_ZONED)
      b[9 + b[8]++] = PAGE_ZONED;
    break;
  case 1: {                     /* a copy of IDENTIFY DEVICE */
    uint16_t id[256];
    s4k_scsi_ata_identify (&lun->p, id);
    put_words (b, id, 256);
    break;
  }
  case 2: {                     /* capacity (ACS-4 9.11.4) */
    const uint32_t ratio = g->physical / g->logical;
    const uint64_t valid = UINT64_C (1) << 63;
    put64le (b + 8, valid | lun->blocks);
    /* Physical/logical sector size: bit 62 the relationship (word 106
     * bit 13), bit 61 a logical size over 256 words (bit 12), 19:16
     * log2 logical per physical, 15:0 LBA 0's offset (word 209). */
    put64le (b + 16, valid | (ratio > 1 ? UINT64_C (1) << 62 : 0) |
                     (g->logical > 512 ? UINT64_C (1) << 61 : 0) |
                     (uint64_t) __builtin_ctz (ratio) << 16 |
                     scsi_ata_lba0_offset (g));
    /* Logical sector size in words, as words 117-118. */
    put64le (b + 24, valid | g->logical / 2);
    break;
  }
  case PAGE_ZONED: {
    /* Zoned Device Information (ACS-4 9.11.9), from VPD B6h's fields:
     * URSWRZ; the optimal open and non-sequentially written zones and
     * the open limit valid (bit 63) where B6h reports one, not where it
     * says FFFFFFFFh (libata reads an invalid one as that). */
    uint8_t b6[64] = { 0 };
    scsi_zbc_vpd (lun, 0xb6, b6);
    const uint64_t valid = UINT64_C (1) << 63;
    put64le (b + 8, valid | (b6[4] & 0x01));
    put64le (b + 16, valid);    /* zoned settings: none */
    for (int i = 0; i < 3; i++) {
      const uint32_t v = get32 (b6 + 8 + 4 * i);
      if (v != UINT32_MAX)
        put64le (b + 24 + 8 * i, valid | v);
    }
    break;
  }
  }
  return true;
}

/* The logs' pages [page, page + n) into buf; false (ABORT) if one is
 * missing or n is 0. */
static bool
read_log (const struct s4k_scsi_lun *lun, uint8_t log, uint32_t page,
          uint32_t n, uint8_t *buf)
{
  if (n == 0)
    return false;
  for (uint32_t i = 0; i < n; i++)
    if (!log_page (lun, log, page + i, buf + 512 * i))
      return false;
  return true;
}

/* The protocols (SAT-4 12.2.2.3) the layer takes: non-data, PIO and DMA
 * in either direction (DMA's is T_DIR's: hdparm sends DATA SET
 * MANAGEMENT as DMA with T_DIR 0). */
enum dir { DIR_BAD, DIR_NONE, DIR_IN, DIR_OUT };
static enum dir
protocol_dir (unsigned proto, bool t_dir)
{
  switch (proto) {
  case 3: return DIR_NONE;
  case 4: case 10: return DIR_IN;           /* PIO in, UDMA in */
  case 5: case 11: return DIR_OUT;          /* PIO out, UDMA out */
  case 6: return t_dir ? DIR_IN : DIR_OUT;  /* DMA */
  default: return DIR_BAD;  /* resets, diagnostics, NCQ, reserved */
  }
}

/* DATA SET MANAGEMENT with TRIM (ACS-4 7.5): COUNT blocks of 512 bytes
 * of LBA range entries, 8 bytes each, little-endian: LBA in bits 47:0,
 * logical sectors in 63:48, 0 for an unused entry.  One trim op per
 * range, as UNMAP's descriptors.  Out of range, or a read-only LUN:
 * ABORT, as a drive answers (ATA has no write protection). */
static unsigned
ata_trim (struct ctx *x, struct ata_regs *r, bool ck_cond)
{
  struct s4k_scsi_lun *lun = x->lun;
  struct s4k_scsi_cmd *cmd = x->cmd;
  const uint8_t *d = x->data;
  if (!(r->features & 0x01) || r->count == 0 ||
      r->count > ATA_DSM_BLOCKS || 512u * r->count > x->data_len ||
      lun->p.readonly)
    return ata_abort (cmd, r);
  const size_t entries = 512u / 8 * r->count;
  size_t nops = 0;
  for (size_t i = 0; i < entries; i++) {
    uint64_t e = 0;
    for (int b = 7; b >= 0; b--)
      e = e << 8 | d[8 * i + b];
    const uint64_t lba = e & ((UINT64_C (1) << 48) - 1), cnt = e >> 48;
    if (cnt && (lba >= lun->blocks || cnt > lun->blocks - lba))
      return ata_abort (cmd, r);
    nops += cnt != 0;
  }
  cmd->priv.kind = KIND_ATA;
  cmd->priv.lba = r->lba;
  cmd->priv.blocks = (uint64_t) r->count | (uint64_t) r->device << 16 |
                     (uint64_t) r->ext << 24 | (uint64_t) ck_cond << 25;
  if (nops == 0)
    return scsi_ata_done (cmd);
  struct s4k_scsi_op *ops = scsi_ops_alloc (cmd, nops);
  if (!ops)
    return scsi_no_memory (cmd);
  for (size_t i = 0, k = 0; i < entries; i++) {
    uint64_t e = 0;
    for (int b = 7; b >= 0; b--)
      e = e << 8 | d[8 * i + b];
    if (!(e >> 48))
      continue;
    ops[k].kind = S4K_SCSI_OP_TRIM;
    ops[k].off = (e & ((UINT64_C (1) << 48) - 1)) << lun->lshift;
    ops[k].len = (e >> 48) << lun->lshift;
    k++;
  }
  return cmd->nops;
}

unsigned
scsi_cmd_ata_passthru (struct ctx *x)
{
  const uint8_t *c = x->cdb;
  const bool sixteen = c[0] == 0x85;
  struct s4k_scsi_cmd *cmd = x->cmd;
  struct ata_regs r = { 0 };
  uint8_t command;
  if (sixteen) {
    r.ext = c[1] & 0x01;
    r.features = (uint16_t) ((r.ext ? c[3] << 8 : 0) | c[4]);
    r.count = (uint16_t) ((r.ext ? c[5] << 8 : 0) | c[6]);
    r.lba = (uint64_t) c[8] | (uint64_t) c[10] << 8 | (uint64_t) c[12] << 16;
    if (r.ext)
      r.lba |= (uint64_t) c[7] << 24 | (uint64_t) c[9] << 32 |
               (uint64_t) c[11] << 40;
    r.device = c[13];
    command = c[14];
  }
  else {
    r.features = c[3];
    r.count = c[4];
    r.lba = (uint64_t) c[5] | (uint64_t) c[6] << 8 | (uint64_t) c[7] << 16;
    r.device = c[8];
    command = c[9];
  }
  const unsigned proto = (c[1] >> 1) & 0x0f;
  const bool ck_cond = c[2] & 0x20, t_dir = c[2] & 0x08,
             byte_block = c[2] & 0x04, t_type = c[2] & 0x10;
  const unsigned t_length = c[2] & 0x03;
  const enum dir dir = protocol_dir (proto, t_dir);
  if (dir == DIR_BAD)
    return scsi_bad_cdb (cmd, 1, 4);
  /* T_LENGTH says whether data moves and T_DIR which way: both must
   * agree with the protocol (SAT-4 12.2.2.2). */
  if ((dir == DIR_NONE) != (t_length == 0))
    return scsi_bad_cdb (cmd, 2, 1);
  if (dir != DIR_NONE && (dir == DIR_IN) != t_dir)
    return scsi_bad_cdb (cmd, 2, 3);
  /* The bytes the initiator expects. */
  uint64_t want = x->data_len;
  if (t_length == 1 || t_length == 2) {
    const uint64_t n = t_length == 1 ? r.features : r.count;
    want = !byte_block ? n
         : n * (t_type ? x->lun->p.geom.logical : 512u);
  }
  /* What each command transfers: data-in commands need a data-in
   * protocol, the others none; a mismatch is the initiator's error. */
  enum dir need = DIR_NONE;
  uint8_t page[512 * 16];        /* a log read of up to 16 pages */
  uint8_t *buf = page;
  size_t n = 0;
  const uint8_t lbal = (uint8_t) r.lba, lbam = (uint8_t) (r.lba >> 8),
                lbah = (uint8_t) (r.lba >> 16);
  switch (command) {
  case 0xec:                    /* IDENTIFY DEVICE */
    need = DIR_IN;
    break;
  case 0x2f: case 0x47:         /* READ LOG EXT, READ LOG DMA EXT */
    need = DIR_IN;
    break;
  case 0xb0:                    /* SMART */
    switch (r.features & 0xff) {
    case 0xd0: case 0xd1: case 0xd5: need = DIR_IN; break;
    default: need = DIR_NONE; break;
    }
    break;
  case 0xe5: case 0x98:         /* CHECK POWER MODE */
  case 0xe7: case 0xea:         /* FLUSH CACHE, FLUSH CACHE EXT */
  case 0xb2:                    /* SET SECTOR CONFIGURATION EXT */
    need = DIR_NONE;
    break;
  case 0x06:                    /* DATA SET MANAGEMENT */
    need = DIR_OUT;
    break;
  default:
    return ata_abort (cmd, &r);
  }
  if (need != dir)
    return scsi_bad_cdb (cmd, 1, 4);
  if (need == DIR_IN)
    memset (page, 0, sizeof page);
  switch (command) {
  case 0xec:
    log_page (x->lun, LOG_IDENTIFY, 1, page);  /* the same 512 bytes */
    n = 512;
    break;
  case 0x2f: case 0x47: {
    /* LBA 7:0 the log, 15:8 and 47:40 the first page, COUNT the
     * pages. */
    const uint32_t first = (uint32_t) (lbam | ((r.lba >> 40) & 0xff) << 8);
    const uint32_t pages = r.count;
    if (pages > sizeof page / 512 ||
        !read_log (x->lun, lbal, first, pages, page))
      return ata_abort (cmd, &r);
    n = 512u * pages;
    break;
  }
  case 0xb0:
    /* SMART commands carry the key C24Fh in LBA 23:8. */
    if (lbam != 0x4f || lbah != 0xc2)
      return ata_abort (cmd, &r);
    switch (r.features & 0xff) {
    case 0xd0:                  /* READ DATA */
      smart_data (x->lun, page);
      n = 512;
      break;
    case 0xd1:                  /* READ ATTRIBUTE THRESHOLDS */
      smart_thresholds (page);
      n = 512;
      break;
    case 0xd5:                  /* READ LOG: LBA 7:0 the log, COUNT pages */
      if ((r.count & 0xff) > sizeof page / 512 ||
          !read_log (x->lun, lbal, 0, r.count & 0xff, page))
        return ata_abort (cmd, &r);
      n = 512u * (r.count & 0xff);
      break;
    case 0xd8:                  /* ENABLE OPERATIONS: always on */
      return ata_end (cmd, &r, ck_cond);
    case 0xda:                  /* RETURN STATUS */
      if (smart_failing (x->lun))
        r.lba = (r.lba & ~UINT64_C (0xffff00)) | 0x2cf400;
      return ata_end (cmd, &r, ck_cond);
    default:
      return ata_abort (cmd, &r);
    }
    break;
  case 0xe5: case 0x98:
    r.count = 0xff;             /* active or idle */
    return ata_end (cmd, &r, ck_cond);
  case 0xb2: {
    /* COUNT 2:0 the descriptor of the Sector Configuration log, FEATURE
     * its DESCRIPTOR CHECK (ACS-4 7.42); the format as FORMAT UNIT's
     * (scsi_format_done ends it with scsi_ata_format_end). */
    const uint32_t L = r.ext && (r.count & ~7u) == 0
                       ? sector_config (x->lun, r.count & 7) : 0;
    if (!L || r.features != (L >> 9) << 8 || x->lun->p.readonly)
      return ata_abort (cmd, &r);
    cmd->priv.ata_ck = 1 | ck_cond << 1;
    return scsi_format_start (x, L);
  }
  case 0x06:
    return ata_trim (x, &r, ck_cond);
  case 0xe7: case 0xea:
    /* The registers wait for the flush (scsi_ata_done). */
    cmd->priv.kind = KIND_ATA;
    cmd->priv.lba = r.lba;
    cmd->priv.blocks = (uint64_t) r.count | (uint64_t) r.device << 16 |
                       (uint64_t) r.ext << 24 | (uint64_t) ck_cond << 25;
    return scsi_one_op (cmd, S4K_SCSI_OP_FLUSH, NULL, 0, 0, 0);
  }
  /* Data-in: what the command has, cut to what the initiator expects. */
  if (n > want)
    n = want;
  if (n > x->data_len)
    n = x->data_len;
  memcpy (x->data, buf, n);
  cmd->data_in_len = n;
  return ata_end (cmd, &r, ck_cond);
}

unsigned
scsi_ata_done (struct s4k_scsi_cmd *cmd)
{
  const uint64_t v = cmd->priv.blocks;
  struct ata_regs r = { .lba = cmd->priv.lba, .count = (uint16_t) v,
                        .device = (uint8_t) (v >> 16),
                        .ext = (v >> 24) & 1 };
  return ata_end (cmd, &r, (v >> 25) & 1);
}

unsigned
scsi_ata_format_end (struct s4k_scsi_cmd *cmd, bool ok)
{
  struct ata_regs r = { .ext = true };
  if (!ok)
    return ata_abort (cmd, &r);
  return ata_end (cmd, &r, cmd->priv.ata_ck & 2);
}
