/* SPDX-License-Identifier: BSD-3-Clause */
/* The SCSI layer's SATA identity (interface=sata, lib/scsi/scsi_ata.c, issue
 * 34): the IDENTIFY DEVICE image of every preset and of odd geometries,
 * word by word as ACS-4 computes it, its checksum, and the inverse
 * (libata's formulas applied to the words give back the geometry); the
 * same image through VPD 89h, ATA PASS-THROUGH(12)/(16) and the IDENTIFY
 * DEVICE data log; the logs, SMART following the fault layer's bad
 * sectors, the registers in the ATA Status Return descriptor, and CDBs
 * with bad fields refused before anything runs. */
#include <errno.h>
#include <string.h>

#include "sect4k/scsi.h"
#include "sect4k/zone.h"
#include "tap.h"
#include "devrig.h"
#include "scsirig.h"

struct geo {
  const char *name;
  const char *keys[4];
  uint32_t L, P, A;
};
static const struct geo geos[] = {
  { "512n", { "model=512n" }, 512, 512, 0 },
  { "512e", { "model=512e" }, 512, 4096, 0 },
  { "512e-xp", { "model=512e-xp" }, 512, 4096, 3584 },
  { "4kn", { "model=4kn" }, 4096, 4096, 0 },
  { "4096/16384+8192", { "logical=4096", "physical=16384",
                         "alignment-offset=8192" }, 4096, 16384, 8192 },
  { "4096/16384+4096", { "logical=4096", "physical=16384",
                         "alignment-offset=4096" }, 4096, 16384, 4096 },
  { "512/65536", { "logical=512", "physical=65536" }, 512, 65536, 0 },
  { "512/65536+512", { "logical=512", "physical=65536",
                       "alignment-offset=512" }, 512, 65536, 512 },
  { "65536/65536", { "logical=65536" }, 65536, 65536, 0 },
};
#define NGEOS (sizeof geos / sizeof geos[0])

static void
counts_cb (void *opaque, uint64_t *bad, uint64_t *repaired)
{
  s4k_dev_bad_counts (opaque, bad, repaired);
}

/* Opens a LUN of geometry g with the extra keys; NULL-terminated. */
static void
rig_open (struct scsi_rig *t, const struct geo *g, const char *const *extra)
{
  static const char *const base[] = { "size=8M", "interface=sata", NULL };
  const char *keys[5] = { 0 };
  for (unsigned i = 0; i < 4 && g->keys[i]; i++)
    keys[i] = g->keys[i];
  scsi_rig_config (t, base, keys, extra);
  scsi_rig_dev (t);
  t->p.bad_counts = counts_cb;
  t->p.bad_opaque = t->d;
  scsi_rig_lun (t);
}

static void
clear_ua (struct scsi_rig *t)
{
  uint8_t tur[6] = { 0 };
  scsi_rig_run (t, tur, 6, NULL, 0);
}

/* ATA PASS-THROUGH(16): protocol, flags byte, and the registers. */
static void
ata16 (uint8_t *c, unsigned proto, uint8_t flags, uint8_t command,
       uint16_t features, uint16_t count, uint64_t lba, bool ext)
{
  memset (c, 0, 16);
  c[0] = 0x85;
  c[1] = (uint8_t) (proto << 1 | ext);
  c[2] = flags;
  c[3] = (uint8_t) (features >> 8);
  c[4] = (uint8_t) features;
  c[5] = (uint8_t) (count >> 8);
  c[6] = (uint8_t) count;
  c[7] = (uint8_t) (lba >> 24);
  c[8] = (uint8_t) lba;
  c[9] = (uint8_t) (lba >> 32);
  c[10] = (uint8_t) (lba >> 8);
  c[11] = (uint8_t) (lba >> 40);
  c[12] = (uint8_t) (lba >> 16);
  c[13] = 0x40;
  c[14] = command;
}

/* PIO data-in, T_LENGTH in COUNT, in 512-byte blocks. */
#define PIO_IN 4
#define NON_DATA 3
#define IN_BLOCKS 0x0e
#define CK_COND 0x20

/* The descriptor sense of the last command: key, asc, ascq and the ATA
 * Status Return descriptor. */
static bool
ata_sense_is (uint8_t key, uint8_t asc, uint8_t ascq, uint8_t status,
              uint8_t error)
{
  const uint8_t *s = last.sense, *d = s + 8;
  if (last.status != S4K_SCSI_CHECK_CONDITION || s[0] != 0x72 ||
      s[1] != key || s[2] != asc || s[3] != ascq || s[7] != 14 ||
      d[0] != 0x09 || d[1] != 0x0c || d[13] != status || d[3] != error) {
    diag ("sense %02x %02x %02x %02x .. desc %02x %02x err %02x st %02x",
          s[0], s[1], s[2], s[3], d[0], d[1], d[3], d[13]);
    return false;
  }
  return true;
}

static bool
bad_field (int byte, int bit)
{
  const uint8_t *s = last.sense;
  return last.status == S4K_SCSI_CHECK_CONDITION && s[0] == 0x70 &&
         s[2] == S4K_SENSE_ILLEGAL_REQUEST && s[12] == 0x24 &&
         (s[15] & 0xc0) == 0xc0 && ((s[16] << 8) | s[17]) == byte &&
         (bit < 0 ? !(s[15] & 0x08) : (s[15] & 0x0f) == (0x08 | bit)) &&
         last_ops == 0;
}

/* Attribute idn of SMART data b: its raw value, its value; -1 if
 * absent. */
static int64_t
RAW (const uint8_t *b, uint8_t idn)
{
  for (int i = 0; i < 30; i++)
    if (b[2 + 12 * i] == idn) {
      int64_t r = 0;
      for (int k = 5; k >= 0; k--)
        r = r << 8 | b[2 + 12 * i + 5 + k];
      return r;
    }
  return -1;
}

static int
VAL (const uint8_t *b, uint8_t idn)
{
  for (int i = 0; i < 30; i++)
    if (b[2 + 12 * i] == idn)
      return b[2 + 12 * i + 3];
  return -1;
}

static void
ata_str (const uint16_t *w, size_t words, char *out)
{
  for (size_t i = 0; i < words; i++) {
    out[2 * i] = (char) (w[i] >> 8);
    out[2 * i + 1] = (char) w[i];
  }
  size_t n = 2 * words;
  while (n && out[n - 1] == ' ')
    n--;
  out[n] = '\0';
}

/* libata's reading of the words (include/linux/ata.h, from the
 * standard): the logical size, log2 logical per physical, and the
 * lowest aligned LBA (ata_id_logical_sector_offset, which libata-scsi
 * puts in READ CAPACITY(16)). */
static uint32_t
libata_logical (const uint16_t *id)
{
  if ((id[106] & 0xd000) == 0x5000)
    return ((uint32_t) id[118] << 16 | id[117]) * 2;
  return 512;
}
static unsigned
libata_log2_per_phys (const uint16_t *id)
{
  if ((id[106] & 0xc000) != 0x4000)
    return 0;
  return id[106] & 0x2000 ? id[106] & 0xf : 0;
}
static uint32_t
libata_lowest_aligned (const uint16_t *id, unsigned l2)
{
  if (l2 > 1 && (id[209] & 0xc000) == 0x4000) {
    const uint32_t first = id[209] & 0x3fff;
    if (first > 0)
      return (1u << l2) - first;
  }
  return 0;
}

static void
test_identify (const struct geo *g, const char *const *extra,
               const char *what, bool wc, uint16_t rpm)
{
  struct scsi_rig t;
  rig_open (&t, g, extra);
  clear_ua (&t);
  uint16_t id[256];
  s4k_scsi_ata_identify (&t.p, id);
  const uint64_t blocks = (8u << 20) / g->L;
  const uint32_t ratio = g->P / g->L;
  char name[64];
  snprintf (name, sizeof name, "%s%s", g->name, what);

  /* Each word as ACS-4 7.12.7 computes it. */
  uint16_t w106 = 0x4000;
  if (ratio > 1)
    w106 |= (uint16_t) (0x2000 | (31 - __builtin_clz (ratio)));
  if (g->L > 512)
    w106 |= 0x1000;
  ok (id[106] == w106, "%s: word 106 %04x (want %04x)", name, id[106], w106);
  ok (g->L > 512 ? ((uint32_t) id[118] << 16 | id[117]) == g->L / 2
                 : id[117] == 0 && id[118] == 0,
      "%s: words 117-118: %u words per logical sector", name,
      (uint32_t) id[118] << 16 | id[117]);
  /* LBA 0 sits (P - A) / L logical sectors into its physical sector. */
  const uint16_t w209 = (uint16_t) (0x4000 | ((g->P - g->A) / g->L) % ratio);
  ok (id[209] == w209, "%s: word 209 %04x (want %04x)", name, id[209], w209);
  const uint64_t b28 = blocks > 0x0fffffff ? 0x0fffffff : blocks;
  ok (((uint32_t) id[61] << 16 | id[60]) == b28 &&
      ((uint64_t) id[103] << 48 | (uint64_t) id[102] << 32 |
       (uint64_t) id[101] << 16 | id[100]) == blocks,
      "%s: words 60-61 and 100-103: %" PRIu64 " sectors", name, blocks);
  ok ((id[83] & 0xc000) == 0x4000 && (id[83] & 0x2400) == 0x2400 &&
      (id[86] & 0x2400) == 0x2400,
      "%s: 48-bit and FLUSH CACHE EXT supported and enabled (83, 86)", name);
  ok ((id[82] & 0x20) && !!(id[85] & 0x20) == wc,
      "%s: volatile write cache supported, %s (82/85 bit 5)", name,
      wc ? "enabled" : "disabled");
  ok ((id[169] & 1) && (id[69] & 0x4020) == 0x4020,
      "%s: TRIM, deterministic zeroes after it (169, 69)", name);
  ok (id[217] == rpm, "%s: word 217 rotation rate %u", name, id[217]);
  ok ((id[0] & 0x8000) == 0 && (id[84] & 0xc020) == 0x4020 &&
      (id[87] & 0xc020) == 0x4020 && (id[119] & 0xc008) == 0x4008,
      "%s: ATA device, GPL and READ LOG DMA EXT supported", name);
  char model[41], serial[21], fw[9];
  ata_str (id + 27, 20, model);
  ata_str (id + 10, 10, serial);
  ata_str (id + 23, 4, fw);
  ok (strcmp (model, t.p.product) == 0 && strcmp (serial, t.p.serial) == 0
      && strcmp (fw, S4K_VERSION) == 0,
      "%s: model '%s', serial '%s', firmware '%s'", name, model, serial, fw);
  uint8_t sum = 0;
  for (int i = 0; i < 256; i++)
    sum = (uint8_t) (sum + (id[i] & 0xff) + (id[i] >> 8));
  ok ((id[255] & 0xff) == 0xa5 && sum == 0,
      "%s: word 255: signature A5h, checksum %02x (bytes sum to 0)", name,
      id[255] >> 8);

  /* The inverse: libata's formulas give back the geometry. */
  const unsigned l2 = libata_log2_per_phys (id);
  const uint32_t L = libata_logical (id), P = L << l2;
  const uint32_t lowest = libata_lowest_aligned (id, l2);
  /* libata ignores word 209 with two logical per physical (l2 > 1):
   * none of these geometries has that. */
  ok (L == g->L && P == g->P && lowest == g->A / g->L,
      "%s: libata reads logical %u, physical %u, lowest aligned LBA %u",
      name, L, P, lowest);

  /* The same bytes through every way of reading them. */
  uint8_t img[512];
  for (int i = 0; i < 256; i++) {
    img[2 * i] = (uint8_t) id[i];
    img[2 * i + 1] = (uint8_t) (id[i] >> 8);
  }
  uint8_t buf[2048], c[16];
  uint8_t inq[6] = { 0x12, 0x01, 0x89, 0x02, 0x40, 0 };
  ok (scsi_rig_run (&t, inq, 6, buf, sizeof buf) == S4K_SCSI_GOOD &&
      last.data_in_len == 572 && buf[1] == 0x89 && buf[2] == 0x02 &&
      buf[3] == 0x38 && buf[36] == 0x34 && buf[56] == 0xec &&
      memcmp (buf + 60, img, 512) == 0,
      "%s: VPD 89h: 572 bytes, the image at byte 60", name);
  memset (buf, 0x55, sizeof buf);
  ata16 (c, PIO_IN, IN_BLOCKS, 0xec, 0, 1, 0, false);
  ok (scsi_rig_run (&t, c, 16, buf, 512) == S4K_SCSI_GOOD &&
      last.data_in_len == 512 && memcmp (buf, img, 512) == 0,
      "%s: ATA PASS-THROUGH(16) IDENTIFY DEVICE: the image", name);
  uint8_t c12[12] = { 0xa1, PIO_IN << 1, IN_BLOCKS, 0, 1, 0, 0, 0, 0x40,
                      0xec, 0, 0 };
  memset (buf, 0x55, sizeof buf);
  ok (scsi_rig_run (&t, c12, 12, buf, 512) == S4K_SCSI_GOOD &&
      last.data_in_len == 512 && memcmp (buf, img, 512) == 0,
      "%s: ATA PASS-THROUGH(12) IDENTIFY DEVICE: the image", name);
  /* READ LOG EXT: log 30h pages 00h-02h. */
  ata16 (c, PIO_IN, IN_BLOCKS, 0x2f, 0, 3, 0x30, true);
  ok (scsi_rig_run (&t, c, 16, buf, 1536) == S4K_SCSI_GOOD &&
      last.data_in_len == 1536 && buf[8] == 3 && buf[9] == 0 &&
      buf[10] == 1 && buf[11] == 2 && memcmp (buf + 512, img, 512) == 0,
      "%s: READ LOG EXT 30h: pages 00h-02h listed, 01h the image", name);
  const uint8_t *p2 = buf + 1024;
  uint64_t q1 = 0, q2 = 0, q3 = 0;
  for (int i = 7; i >= 0; i--) {
    q1 = q1 << 8 | p2[8 + i];
    q2 = q2 << 8 | p2[16 + i];
    q3 = q3 << 8 | p2[24 + i];
  }
  ok (p2[2] == 2 && (q1 >> 63) && (q1 & 0xffffffffffffULL) == blocks &&
      (q2 >> 63) && !!(q2 & (1ULL << 62)) == (ratio > 1) &&
      !!(q2 & (1ULL << 61)) == (g->L > 512) &&
      ((q2 >> 16) & 0xf) == (unsigned) __builtin_ctz (ratio) &&
      (q2 & 0xffff) == (w209 & 0x3fff) && (q3 >> 63) &&
      (q3 & 0xffffffff) == g->L / 2,
      "%s: log 30h page 02h: capacity, sector sizes as words 106/117/209",
      name);
  scsi_rig_close (&t);
}

static void
test_commands (void)
{
  struct scsi_rig t;
  const char *extra[] = { "bad-sectors=40", NULL };
  rig_open (&t, &geos[1], extra);       /* 512e */
  clear_ua (&t);
  uint8_t c[16], buf[4096];

  /* General Purpose Log directory. */
  ata16 (c, 6, IN_BLOCKS, 0x47, 0, 1, 0, true);
  ok (scsi_rig_run (&t, c, 16, buf, 512) == S4K_SCSI_GOOD && buf[0] == 1 &&
      buf[1] == 0 && buf[0x60] == 3,
      "READ LOG DMA EXT 00h: GPL version 1, log 30h has 3 pages");
  ata16 (c, 6, IN_BLOCKS, 0x47, 0, 1, 0x11, true);
  ok (scsi_rig_run (&t, c, 16, buf, 512) == S4K_SCSI_CHECK_CONDITION &&
      ata_sense_is (S4K_SENSE_ABORTED_COMMAND, 0, 0, 0x51, 0x04) &&
      last.data_in_len == 0,
      "READ LOG DMA EXT of a log it lacks: ABORT (ABORTED COMMAND, "
      "status 51h, error 04h)");
  ata16 (c, PIO_IN, IN_BLOCKS, 0x2f, 0, 1, 0x30 | 3 << 8, true);
  ok (scsi_rig_run (&t, c, 16, buf, 512) == S4K_SCSI_CHECK_CONDITION &&
      ata_sense_is (S4K_SENSE_ABORTED_COMMAND, 0, 0, 0x51, 0x04),
      "READ LOG EXT 30h page 03h (absent): ABORT");

  /* SMART: RETURN STATUS passes; attributes count the bad sector. */
  ata16 (c, NON_DATA, CK_COND, 0xb0, 0xda, 0, 0xc24f00, false);
  ok (scsi_rig_run (&t, c, 16, NULL, 0) == S4K_SCSI_CHECK_CONDITION &&
      ata_sense_is (0x01, 0x00, 0x1d, 0x50, 0) &&
      last.sense[8 + 9] == 0x4f && last.sense[8 + 11] == 0xc2,
      "SMART RETURN STATUS with CK_COND: RECOVERED ERROR, ATA PASS-THROUGH "
      "INFORMATION AVAILABLE, LBA 23:8 C24Fh (passed)");
  ata16 (c, NON_DATA, 0, 0xb0, 0xda, 0, 0xc24f00, false);
  ok (scsi_rig_run (&t, c, 16, NULL, 0) == S4K_SCSI_GOOD && last.sense_len == 0,
      "SMART RETURN STATUS without CK_COND: GOOD, no sense");
  uint8_t smart[512], thr[512];
  ata16 (c, PIO_IN, IN_BLOCKS, 0xb0, 0xd0, 1, 0xc24f00, false);
  ok (scsi_rig_run (&t, c, 16, smart, 512) == S4K_SCSI_GOOD, "SMART READ DATA");
  ata16 (c, PIO_IN, IN_BLOCKS, 0xb0, 0xd1, 1, 0xc24f00, false);
  ok (scsi_rig_run (&t, c, 16, thr, 512) == S4K_SCSI_GOOD,
      "SMART READ ATTRIBUTE THRESHOLDS");
  uint8_t s1 = 0, s2 = 0;
  for (int i = 0; i < 512; i++)
    s1 = (uint8_t) (s1 + smart[i]), s2 = (uint8_t) (s2 + thr[i]);
  ok (s1 == 0 && s2 == 0 && smart[0] == 0x10 && thr[0] == 0x10,
      "SMART data and thresholds: revision 16, checksums");
  ok (RAW (smart, 5) == 0 && RAW (smart, 197) == 1 && RAW (smart, 198) == 1
      && VAL (smart, 5) == 100,
      "bad-sectors=40: Current_Pending 1, Offline_Uncorrectable 1, "
      "Reallocated 0 (100)");
  char err[128];
  ok (s4k_dev_bad_add (t.d, 100, 100, err, sizeof err) == 0 &&
      s4k_dev_bad_add (t.d, 1000, 1023, err, sizeof err) == 0,
      "bad add 100, 1000-1023 (1 + 3 physical sectors)");
  ata16 (c, PIO_IN, IN_BLOCKS, 0xb0, 0xd0, 1, 0xc24f00, false);
  scsi_rig_run (&t, c, 16, smart, 512);
  ok (RAW (smart, 197) == 5 && RAW (smart, 198) == 5 && RAW (smart, 5) == 0,
      "SMART follows: 5 pending and uncorrectable");
  /* A whole-sector write repairs (reallocates) one. */
  uint8_t w10[10] = { 0x2a, 0, 0, 0, 0, 96, 0, 0, 8, 0 };
  memset (buf, 0xab, 4096);
  ok (scsi_rig_run (&t, w10, 10, buf, 4096) == S4K_SCSI_GOOD, "WRITE LBA 96-103");
  scsi_rig_run (&t, c, 16, smart, 512);
  ok (RAW (smart, 197) == 4 && RAW (smart, 5) == 1 && VAL (smart, 5) == 99,
      "after the write: 4 pending, 1 reallocated (value 99)");
  ata16 (c, NON_DATA, CK_COND, 0xb0, 0xda, 0, 0xc24f00, false);
  scsi_rig_run (&t, c, 16, NULL, 0);
  ok (last.sense[8 + 9] == 0x4f && last.sense[8 + 11] == 0xc2,
      "SMART RETURN STATUS still passes (value above threshold 10)");
  /* Ninety reallocations cross the threshold. */
  for (uint64_t s = 0; s < 89; s++) {
    const uint64_t lba = 2048 + 8 * s;
    s4k_dev_bad_add (t.d, lba, lba, err, sizeof err);
    w10[2] = (uint8_t) (lba >> 24), w10[3] = (uint8_t) (lba >> 16);
    w10[4] = (uint8_t) (lba >> 8), w10[5] = (uint8_t) lba;
    scsi_rig_run (&t, w10, 10, buf, 4096);
  }
  scsi_rig_run (&t, c, 16, NULL, 0);
  ok (last.sense[8 + 9] == 0xf4 && last.sense[8 + 11] == 0x2c,
      "90 reallocated: SMART RETURN STATUS F42Ch (threshold exceeded)");
  ata16 (c, NON_DATA, CK_COND, 0xb0, 0xda, 0, 0x000000, false);
  scsi_rig_run (&t, c, 16, NULL, 0);
  ok (ata_sense_is (S4K_SENSE_ABORTED_COMMAND, 0, 0, 0x51, 0x04),
      "SMART without the C24Fh key: ABORT");
  ata16 (c, PIO_IN, IN_BLOCKS, 0xb0, 0xd5, 1, 0xc24f30, false);
  ok (scsi_rig_run (&t, c, 16, buf, 512) == S4K_SCSI_GOOD && buf[8] == 3,
      "SMART READ LOG 30h: page 00h");

  /* CHECK POWER MODE, FLUSH CACHE EXT. */
  ata16 (c, NON_DATA, CK_COND, 0xe5, 0, 0, 0, false);
  ok (scsi_rig_run (&t, c, 16, NULL, 0) == S4K_SCSI_CHECK_CONDITION &&
      ata_sense_is (0x01, 0, 0x1d, 0x50, 0) && last.sense[8 + 5] == 0xff,
      "CHECK POWER MODE: count FFh (active or idle)");
  ata16 (c, NON_DATA, 0, 0xea, 0, 0, 0, true);
  ok (scsi_rig_run (&t, c, 16, NULL, 0) == S4K_SCSI_GOOD && last_ops == 1,
      "FLUSH CACHE EXT: one flush, GOOD");
  ata16 (c, NON_DATA, CK_COND, 0xea, 0, 0, 0, true);
  ok (scsi_rig_run (&t, c, 16, NULL, 0) == S4K_SCSI_CHECK_CONDITION &&
      last_ops == 1 && ata_sense_is (0x01, 0, 0x1d, 0x50, 0) &&
      (last.sense[8 + 2] & 1),
      "FLUSH CACHE EXT with CK_COND: flushed, the registers (EXTEND)");
  /* Any other ATA command: ABORT, as the drive. */
  ata16 (c, NON_DATA, 0, 0x00, 0, 0, 0, false);           /* NOP */
  ok (scsi_rig_run (&t, c, 16, NULL, 0) == S4K_SCSI_CHECK_CONDITION &&
      ata_sense_is (S4K_SENSE_ABORTED_COMMAND, 0, 0, 0x51, 0x04) &&
      last_ops == 0, "NOP: ABORT");
  ata16 (c, 6, IN_BLOCKS, 0x25, 0, 1, 0, true);           /* READ DMA EXT */
  ok (scsi_rig_run (&t, c, 16, buf, 512) == S4K_SCSI_CHECK_CONDITION &&
      ata_sense_is (S4K_SENSE_ABORTED_COMMAND, 0, 0, 0x51, 0x04) &&
      last_ops == 0, "READ DMA EXT: ABORT");

  /* Bad fields: refused, nothing runs. */
  ata16 (c, 0, 0, 0xea, 0, 0, 0, true);                    /* hard reset */
  scsi_rig_run (&t, c, 16, NULL, 0);
  ok (bad_field (1, 4), "protocol 0 (hard reset): INVALID FIELD IN CDB, "
      "byte 1 bit 4");
  ata16 (c, 12, IN_BLOCKS, 0xec, 0, 1, 0, false);          /* NCQ */
  scsi_rig_run (&t, c, 16, buf, 512);
  ok (bad_field (1, 4), "protocol 12 (FPDMA): refused");
  ata16 (c, PIO_IN, 0, 0xec, 0, 1, 0, false);             /* no T_LENGTH */
  scsi_rig_run (&t, c, 16, buf, 512);
  ok (bad_field (2, 1), "PIO data-in without T_LENGTH: refused, byte 2");
  ata16 (c, PIO_IN, 0x06, 0xec, 0, 1, 0, false);          /* T_DIR out */
  scsi_rig_run (&t, c, 16, buf, 512);
  ok (bad_field (2, 3), "PIO data-in with T_DIR to the device: refused");
  ata16 (c, NON_DATA, IN_BLOCKS, 0xea, 0, 0, 0, true);
  scsi_rig_run (&t, c, 16, buf, 512);
  ok (bad_field (2, 1), "non-data with a T_LENGTH: refused");
  ata16 (c, NON_DATA, 0, 0xec, 0, 0, 0, false);
  scsi_rig_run (&t, c, 16, NULL, 0);
  ok (bad_field (1, 4), "IDENTIFY DEVICE as non-data: refused (protocol)");
  ata16 (c, PIO_IN, IN_BLOCKS, 0xec, 0, 1, 0, false);
  c[15] = 0x01;                                           /* control */
  scsi_rig_run (&t, c, 16, buf, 512);
  ok (bad_field (15, 0), "a bit in CONTROL: refused");
  uint8_t c12[12] = { 0xa1, PIO_IN << 1 | 1, IN_BLOCKS, 0, 1, 0, 0, 0, 0,
                      0xec, 0, 0 };
  scsi_rig_run (&t, c12, 12, buf, 512);
  ok (bad_field (1, 0), "ATA PASS-THROUGH(12) with bit 0 of byte 1 "
      "(reserved): refused");
  c12[1] = PIO_IN << 1;
  c12[10] = 1;
  scsi_rig_run (&t, c12, 12, buf, 512);
  ok (bad_field (10, 0), "ATA PASS-THROUGH(12) byte 10 (reserved): refused");
  /* IDENTIFY cut to what the initiator asked: 1 block is 512 bytes. */
  ata16 (c, PIO_IN, 0x0a, 0xec, 0, 100, 0, false);        /* bytes */
  ok (scsi_rig_run (&t, c, 16, buf, 512) == S4K_SCSI_GOOD && last.data_in_len == 100,
      "IDENTIFY with a byte count of 100: 100 bytes");
  scsi_rig_close (&t);
}

/* One LBA range entry of DATA SET MANAGEMENT, little-endian. */
static void
dsm_entry (uint8_t *e, uint64_t lba, uint16_t n)
{
  const uint64_t v = lba | (uint64_t) n << 48;
  for (int b = 0; b < 8; b++)
    e[b] = (uint8_t) (v >> (8 * b));
}

/* DATA SET MANAGEMENT TRIM as hdparm --trim-sector-ranges sends it (DMA,
 * T_DIR to the device, COUNT blocks of ranges): one trim per range,
 * whole physical sectors read zeroes after, a cut one keeps its data
 * (as UNMAP); the refusals are ABORT with nothing run. */
static void
test_trim (void)
{
  struct scsi_rig t;
  rig_open (&t, &geos[1], NULL);                          /* 512e */
  clear_ua (&t);
  static uint8_t buf[64 * 512], ranges[512 * 9];
  uint8_t c[16], id[512];
  ata16 (c, PIO_IN, IN_BLOCKS, 0xec, 0, 1, 0, false);
  scsi_rig_run (&t, c, 16, id, 512);
  ok (id[2 * 105] == 8 && id[2 * 105 + 1] == 0 && (id[2 * 169] & 1),
      "IDENTIFY: TRIM supported (169), 8 blocks of ranges (105)");
  memset (buf, 0xab, sizeof buf);
  uint8_t w10[10] = { 0x2a, 0, 0, 0, 0, 0, 0, 0, 64, 0 };
  scsi_rig_run (&t, w10, 10, buf, sizeof buf);
  memset (ranges, 0, sizeof ranges);
  dsm_entry (ranges, 8, 8);             /* physical sector 1 */
  dsm_entry (ranges + 16, 40, 4);       /* half of physical sector 5 */
  dsm_entry (ranges + 504, 48, 16);     /* the last entry: sectors 6-7 */
  const uint8_t dma_out = 0x06;         /* BYT_BLOCK, T_LENGTH in COUNT */
  ata16 (c, 6, dma_out, 0x06, 0x01, 1, 0, true);
  ok (scsi_rig_run (&t, c, 16, ranges, 512) == S4K_SCSI_GOOD &&
      last_ops == 3 && last_kinds == 1u << S4K_SCSI_OP_TRIM,
      "DSM TRIM of 3 ranges (one unused between): 3 trims, GOOD");
  uint8_t r10[10] = { 0x28, 0, 0, 0, 0, 0, 0, 0, 64, 0 };
  memset (buf, 0x55, sizeof buf);
  scsi_rig_run (&t, r10, 10, buf, sizeof buf);
  bool zero = true, kept = true;
  for (unsigned lba = 0; lba < 64; lba++)
    for (unsigned i = 0; i < 512; i++) {
      const bool trimmed = (lba >= 8 && lba < 16) || lba >= 48;
      if (trimmed && buf[512 * lba + i] != 0)
        zero = false;
      if (!trimmed && buf[512 * lba + i] != 0xab)
        kept = false;
    }
  ok (zero && kept, "whole physical sectors trimmed read zeroes; the rest, "
      "and the cut sector 5, keep their data");
  ata16 (c, 6, dma_out, 0x06, 0x01, 1, 0, true);
  memset (ranges, 0, 512);
  dsm_entry (ranges, 16383, 2);         /* past the 8 MiB end */
  ok (scsi_rig_run (&t, c, 16, ranges, 512) == S4K_SCSI_CHECK_CONDITION &&
      ata_sense_is (S4K_SENSE_ABORTED_COMMAND, 0, 0, 0x51, 0x04) &&
      last_ops == 0, "a range past the end: ABORT, nothing trimmed");
  dsm_entry (ranges, 0, 8);
  ata16 (c, 6, dma_out, 0x06, 0x00, 1, 0, true);
  ok (scsi_rig_run (&t, c, 16, ranges, 512) == S4K_SCSI_CHECK_CONDITION &&
      last_ops == 0, "DSM without the TRIM bit: ABORT");
  ata16 (c, 6, dma_out, 0x06, 0x01, 9, 0, true);
  ok (scsi_rig_run (&t, c, 16, ranges, sizeof ranges) ==
      S4K_SCSI_CHECK_CONDITION && last_ops == 0,
      "9 blocks of ranges (word 105 says 8): ABORT");
  ata16 (c, 6, IN_BLOCKS, 0x06, 0x01, 1, 0, true);
  scsi_rig_run (&t, c, 16, ranges, 512);
  ok (bad_field (1, 4), "DSM as DMA from the device: refused (protocol)");
  scsi_rig_close (&t);
}

static void
test_scsi_default (void)
{
  /* Without interface=sata: no 89h, ATA PASS-THROUGH unknown (as
   * scsi_debug). */
  struct scsi_rig t;
  char err[256];
  s4k_config_init (&t.c);
  ok (s4k_config_set (&t.c, "interface", "ide", err, sizeof err) == -1 &&
      strcmp (err, "interface=ide: must be scsi or sata") == 0,
      "interface=ide: refused in one line (%s)", err);
  if (s4k_config_set (&t.c, "size", "1M", err, sizeof err) ||
      s4k_config_set (&t.c, "interface", "scsi", err, sizeof err) ||
      s4k_config_finish (&t.c, err, sizeof err) ||
      s4k_dev_open (&t.d, &t.c, err, sizeof err))
    bail ("%s", err);
  s4k_scsi_params_from_config (&t.p, &t.c, s4k_dev_geometry (t.d),
                               s4k_dev_max_request (t.d));
  t.lun = s4k_scsi_lun_new (&t.p, err, sizeof err);
  clear_ua (&t);
  uint8_t c[16], buf[600];
  ata16 (c, PIO_IN, IN_BLOCKS, 0xec, 0, 1, 0, false);
  scsi_rig_run (&t, c, 16, buf, 512);
  ok (last.status == S4K_SCSI_CHECK_CONDITION && last.sense[2] == 5 &&
      last.sense[12] == 0x20, "interface=scsi: ATA PASS-THROUGH(16) is "
      "INVALID COMMAND OPERATION CODE");
  uint8_t c12[12] = { 0xa1, PIO_IN << 1, IN_BLOCKS, 0, 1, 0, 0, 0, 0, 0xec };
  scsi_rig_run (&t, c12, 12, buf, 512);
  ok (last.sense[12] == 0x20, "interface=scsi: ATA PASS-THROUGH(12) too");
  uint8_t inq[6] = { 0x12, 0x01, 0x00, 0x02, 0x00, 0 };
  scsi_rig_run (&t, inq, 6, buf, sizeof buf);
  ok (last.status == 0 && memchr (buf + 4, 0x89, buf[3]) == NULL &&
      memcmp (t.p.vendor, "SECT4K", 6) == 0,
      "interface=scsi: 00h lists no 89h, vendor SECT4K");
  inq[2] = 0x89;
  scsi_rig_run (&t, inq, 6, buf, sizeof buf);
  ok (last.sense[12] == 0x24, "interface=scsi: 89h is INVALID FIELD IN CDB");
  scsi_rig_close (&t);

  rig_open (&t, &geos[0], NULL);
  clear_ua (&t);
  inq[2] = 0;
  scsi_rig_run (&t, inq, 6, buf, sizeof buf);
  ok (buf[3] == 8 && buf[4 + 3] == 0x89 && buf[4 + 4] == 0xb0,
      "interface=sata: 00h lists 89h before B0h");
  uint8_t std[6] = { 0x12, 0, 0, 0, 36, 0 };
  scsi_rig_run (&t, std, 6, buf, sizeof buf);
  ok (memcmp (buf + 8, "ATA     ", 8) == 0,
      "interface=sata: INQUIRY vendor 'ATA' (SAT-4)");
  scsi_rig_close (&t);
}

static uint64_t
le64_at (const uint8_t *b)
{
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = v << 8 | b[i];
  return v;
}

static uint32_t
be32_at (const uint8_t *b)
{
  return (uint32_t) b[0] << 24 | b[1] << 16 | b[2] << 8 | b[3];
}

/* A zoned LUN is a ZAC drive: host-aware in IDENTIFY word 69,
 * host-managed by its signature in VPD 89h, and the Zoned Device
 * Information page (log 30h, 09h) states what VPD B6h does, field by
 * field as libata's ata_dev_config_zac reads it (a qword without bit 63
 * is FFFFFFFFh) and ata_scsiop_inq_b6 writes B6h from it. */
static void
test_zoned (const char *model, const char *max_open, bool hm)
{
  struct scsi_rig t;
  const char *extra[] = { "size=64M", model, "zone-size=8192",
                          "zone-conventional=1", max_open, NULL };
  static const char *const base[] = { "interface=sata", "model=512e",
                                      NULL };
  scsi_rig_config (&t, base, extra, NULL);
  scsi_rig_dev (&t);
  t.p.zones = s4k_dev_zones (t.d);
  scsi_rig_lun (&t);
  clear_ua (&t);
  const char *name = extra[1];
  uint8_t c[16], buf[8192], b6[64];

  uint16_t id[256];
  s4k_scsi_ata_identify (&t.p, id);
  ok ((id[69] & 3) == (hm ? 0 : 1), "%s %s: IDENTIFY word 69 zoned "
      "capabilities %u (want %u)", name, extra[4], id[69] & 3, hm ? 0 : 1);
  uint8_t inq[6] = { 0x12, 0x01, 0x89, 0x02, 0x40, 0 };
  unsigned st = scsi_rig_run (&t, inq, 6, buf, sizeof buf);
  ok (st == S4K_SCSI_GOOD && buf[36] == 0x34 && buf[36 + 4] == 1 && buf[36 + 12] == 1 &&
      buf[36 + 5] == (hm ? 0xcd : 0) && buf[36 + 6] == (hm ? 0xab : 0),
      "%s: VPD 89h signature LBA mid/high %02x%02x (want %s)", name,
      buf[36 + 6], buf[36 + 5], hm ? "abcd" : "0000");
  uint8_t vpd[6] = { 0x12, 0x01, 0xb6, 0, 64, 0 };
  ok (scsi_rig_run (&t, vpd, 6, b6, sizeof b6) == S4K_SCSI_GOOD &&
      b6[1] == 0xb6, "%s: VPD B6h", name);

  /* The directory: log 30h has pages 00h-09h. */
  ata16 (c, PIO_IN, IN_BLOCKS, 0x2f, 0, 1, 0, true);
  st = scsi_rig_run (&t, c, 16, buf, 512);
  ok (st == S4K_SCSI_GOOD && buf[2 * 0x30] == 10, "%s: GPL directory: log 30h has %u pages "
      "(want 10)", name, buf[2 * 0x30]);
  ata16 (c, PIO_IN, IN_BLOCKS, 0x2f, 0, 10, 0x30, true);
  ok (scsi_rig_run (&t, c, 16, buf, 5120) == S4K_SCSI_GOOD &&
      last.data_in_len == 5120 && buf[8] == 4 && buf[9] == 0 &&
      buf[10] == 1 && buf[11] == 2 && buf[12] == 9,
      "%s: READ LOG EXT 30h pages 00h-09h: 00h lists 00h, 01h, 02h, 09h",
      name);
  bool zero = true;
  for (int i = 3 * 512; i < 9 * 512; i++)
    zero = zero && buf[i] == 0;
  ok (zero, "%s: pages 03h-08h, not listed, read as zeroes", name);
  const uint8_t *p9 = buf + 9 * 512;
  const uint64_t h = le64_at (p9), cap = le64_at (p9 + 8);
  ok ((h >> 63) && (h & 0xffffff) == (0x09u << 16 | 1) && (cap >> 63) &&
      (cap & 1) == (b6[4] & 1) && (le64_at (p9 + 16) >> 63),
      "%s: page 09h: header, URSWRZ %u as B6h's", name,
      (unsigned) (cap & 1));
  static const char *const fields[] = { "optimal open", "optimal "
                                        "non-sequentially written",
                                        "maximum open" };
  for (int i = 0; i < 3; i++) {
    const uint64_t q = le64_at (p9 + 24 + 8 * i);
    const uint32_t as_libata = q >> 63 ? (uint32_t) q : UINT32_MAX;
    ok (as_libata == be32_at (b6 + 8 + 4 * i), "%s: page 09h %s: %u as "
        "B6h's %u", name, fields[i], as_libata, be32_at (b6 + 8 + 4 * i));
  }
  if (hm && strcmp (max_open, "zone-max-open=3") == 0)
    ok (le64_at (p9 + 40) == (UINT64_C (1) << 63 | 3),
        "%s: page 09h: maximum open 3, valid", name);
  /* The ZAC commands are not taken: ABORT. */
  ata16 (c, 6, IN_BLOCKS, 0x4a, 0, 1, 0, true);
  ok (scsi_rig_run (&t, c, 16, buf, 512) == S4K_SCSI_CHECK_CONDITION &&
      ata_sense_is (S4K_SENSE_ABORTED_COMMAND, 0, 0, 0x51, 0x04),
      "%s: REPORT ZONES EXT: ABORT (zones through ZBC IN/OUT)", name);
  scsi_rig_close (&t);
}

int
main (void)
{
  for (size_t i = 0; i < NGEOS; i++)
    test_identify (&geos[i], NULL, "", false, 1);
  const char *wc[] = { "write-cache=true", "timing=hdd7200", NULL };
  test_identify (&geos[1], wc, " write-cache hdd7200", true, 7200);
  test_commands ();
  test_trim ();
  test_scsi_default ();
  test_zoned ("zoned=host-managed", "zone-max-open=3", true);
  test_zoned ("zoned=host-managed", "zone-max-open=0", true);
  test_zoned ("zoned=host-aware", "zone-max-open=0", false);
  printf ("1..%u\n", tap_n);
  return tap_failed != 0;
}
