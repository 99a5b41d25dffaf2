/* SPDX-License-Identifier: BSD-3-Clause */
/* Sector-size conversion in place (lib/scsi/scsi_format.c, issue 34): what
 * `sg_format --format --size=N` sends (MODE SENSE(10) with the block
 * descriptor, MODE SELECT(10) with SP=1 then SP=0 and the new BLOCK
 * LENGTH, FORMAT UNIT with FMTDATA and CMPLST), 512e -> 4096 -> 512: the
 * capacity in blocks, the engine's logical size, zeroes, the UNIT
 * ATTENTION; the lengths listed in VPD B4h; the refusals with their sense
 * and field pointers. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sect4k/scsi.h"
#include "tap.h"
#include "devrig.h"
#include "scsirig.h"

/* Opens a LUN with the keys (NULL-terminated) after size=8M, with the
 * lengths the device can switch to, as sect4k-server does. */
static void
rig_open (struct scsi_rig *t, const char *const *keys)
{
  static const char *const base[] = { "size=8M", NULL };
  scsi_rig_config (t, base, keys, NULL);
  scsi_rig_dev (t);
  s4k_scsi_params_formats (&t->p, t->d);
  scsi_rig_lun (t);
}

/* The last command failed with key/asc/ascq (and, field >= 0, a field
 * pointer to byte field, in the CDB or not, bit or -1). */
static bool
sense_at (uint8_t key, uint8_t asc, uint8_t ascq, int field, bool cdb,
          int bit)
{
  const uint8_t *s = last.sense;
  if (last.status != S4K_SCSI_CHECK_CONDITION || (s[2] & 0x0f) != key ||
      s[12] != asc || s[13] != ascq)
    return false;
  if (field < 0)
    return true;
  const uint8_t want = 0x80 | (cdb ? 0x40 : 0) |
                       (bit >= 0 ? 0x08 | (uint8_t) bit : 0);
  return s[15] == want && (s[16] << 8 | s[17]) == field;
}

static uint8_t tur[6];

static void
clear_ua (struct scsi_rig *t)
{
  scsi_rig_run (t, tur, 6, NULL, 0);
}

static uint32_t
be32 (const uint8_t *p)
{
  return (uint32_t) p[0] << 24 | p[1] << 16 | p[2] << 8 | p[3];
}

/* What sg_format does: MODE SENSE(10) of page 01h with the block
 * descriptor, then MODE SELECT(10) of it with NUMBER OF LOGICAL BLOCKS
 * 0 and the new BLOCK LENGTH, SP=1 then (refused) SP=0.  The status of
 * the last MODE SELECT. */
static uint8_t
select_length (struct scsi_rig *t, uint32_t bl, bool six)
{
  uint8_t ms[10] = { 0x5a, 0, 0x01, 0, 0, 0, 0, 0, 255 };
  uint8_t ms6[6] = { 0x1a, 0, 0x01, 0, 255 };
  uint8_t b[256] = { 0 };
  if (scsi_rig_run (t, six ? ms6 : ms, six ? 6 : 10, b, six ? 255 : 255))
    return last.status;
  const size_t hdr = six ? 4 : 8;
  const size_t len = six ? (size_t) b[0] + 1 : (size_t) (b[0] << 8 | b[1]) + 2;
  memset (b, 0, six ? 3 : 4);   /* mode data length, medium type, DSP */
  memset (b + hdr, 0, 4);       /* NUMBER OF LOGICAL BLOCKS 0 */
  b[hdr + 5] = (uint8_t) (bl >> 16);
  b[hdr + 6] = (uint8_t) (bl >> 8);
  b[hdr + 7] = (uint8_t) bl;
  b[hdr + 8] &= 0x7f;           /* PS */
  uint8_t sel[10] = { 0x55, 0x11, 0, 0, 0, 0, 0, 0, (uint8_t) len };
  uint8_t sel6[6] = { 0x15, 0x11, 0, 0, (uint8_t) len };
  if (scsi_rig_run (t, six ? sel6 : sel, six ? 6 : 10, b, len) &&
      sense_at (S4K_SENSE_ILLEGAL_REQUEST, 0x24, 0, 1, true, 0)) {
    sel[1] = sel6[1] = 0x10;    /* "Try MODE SELECT again with SP=0" */
    scsi_rig_run (t, six ? sel6 : sel, six ? 6 : 10, b, len);
  }
  return last.status;
}

/* FORMAT UNIT as sg_format --wait sends it: FMTDATA, CMPLST, a short
 * header with nothing set. */
static const uint8_t fu[6] = { 0x04, 0x18, 0, 0, 0, 0 };

static void
capacity (struct scsi_rig *t, uint64_t *blocks, uint32_t *length)
{
  uint8_t rc[16] = { 0x9e, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32 };
  uint8_t b[32] = { 0 };
  scsi_rig_run (t, rc, 16, b, sizeof b);
  *blocks = ((uint64_t) be32 (b) << 32 | be32 (b + 4)) + 1;
  *length = be32 (b + 8);
}

static bool
all_zero (const uint8_t *p, size_t n)
{
  for (size_t i = 0; i < n; i++)
    if (p[i])
      return false;
  return true;
}

/* Writes 0xab over the first 8 KiB and the last block. */
static void
fill (struct scsi_rig *t, uint32_t L, uint64_t blocks)
{
  static uint8_t b[8192];
  memset (b, 0xab, sizeof b);
  const uint16_t n = (uint16_t) (8192 / L);
  uint8_t w[10] = { 0x2a, 0, 0, 0, 0, 0, 0, (uint8_t) (n >> 8), (uint8_t) n };
  if (scsi_rig_run (t, w, 10, b, sizeof b))
    bail ("WRITE(10) failed");
  const uint32_t lba = (uint32_t) (blocks - 1);
  uint8_t w1[10] = { 0x2a, 0, (uint8_t) (lba >> 24), (uint8_t) (lba >> 16),
                     (uint8_t) (lba >> 8), (uint8_t) lba, 0, 0, 1 };
  if (scsi_rig_run (t, w1, 10, b, L))
    bail ("WRITE(10) of the last block failed");
}

/* The first 8 KiB and the last block read as zeroes. */
static bool
zeroes (struct scsi_rig *t, uint32_t L, uint64_t blocks)
{
  static uint8_t b[8192];
  memset (b, 0xee, sizeof b);
  const uint16_t n = (uint16_t) (8192 / L);
  uint8_t r[10] = { 0x28, 0, 0, 0, 0, 0, 0, (uint8_t) (n >> 8), (uint8_t) n };
  if (scsi_rig_run (t, r, 10, b, sizeof b) || !all_zero (b, sizeof b))
    return false;
  const uint32_t lba = (uint32_t) (blocks - 1);
  uint8_t r1[10] = { 0x28, 0, (uint8_t) (lba >> 24), (uint8_t) (lba >> 16),
                     (uint8_t) (lba >> 8), (uint8_t) lba, 0, 0, 1 };
  memset (b, 0xee, L);
  return scsi_rig_run (t, r1, 10, b, L) == 0 && all_zero (b, L);
}

/* The lengths VPD B4h lists, as a bit set (bit n: 2^n bytes). */
static uint32_t
b4_lengths (struct scsi_rig *t)
{
  uint8_t inq[6] = { 0x12, 0x01, 0xb4, 0, 255 };
  uint8_t b[256] = { 0 };
  if (scsi_rig_run (t, inq, 6, b, 255))
    return 0;
  uint32_t set = 0;
  const size_t n = (size_t) (b[2] << 8 | b[3]);
  for (size_t i = 4; i + 8 <= 4 + n; i += 8)
    set |= 1u << __builtin_ctz (be32 (b + i));
  return set;
}

static void
convert (void)
{
  struct scsi_rig t;
  rig_open (&t, (const char *[]) { "model=512e", NULL });
  clear_ua (&t);
  uint64_t blocks;
  uint32_t L;
  ok (b4_lengths (&t) == (1u << 9 | 1u << 12),
      "512e: VPD B4h lists 512 and 4096");
  fill (&t, 512, 16384);

  /* Not changeable without FORMAT UNIT: MODE SENSE says the chosen
   * length, READ CAPACITY the one in effect. */
  ok (select_length (&t, 4096, false) == S4K_SCSI_GOOD,
      "512e: MODE SELECT(10) of block length 4096 (SP=1 refused, SP=0 "
      "taken)");
  uint8_t ms[10] = { 0x5a, 0, 0x01, 0, 0, 0, 0, 0, 255 };
  uint8_t b[256] = { 0 };
  scsi_rig_run (&t, ms, 10, b, 255);
  capacity (&t, &blocks, &L);
  ok (be32 (b + 8) == 2048 && be32 (b + 12) == 4096 && blocks == 16384 &&
      L == 512, "512e: MODE SENSE's descriptor says 2048 x 4096, READ "
      "CAPACITY still 16384 x 512");

  ok (scsi_rig_run (&t, fu, 6, (uint8_t[4]) { 0 }, 4) == S4K_SCSI_GOOD &&
      (last_kinds & (1u << S4K_SCSI_OP_SET_LOGICAL)),
      "512e: FORMAT UNIT (FMTDATA, CMPLST) switches the engine");
  scsi_rig_run (&t, tur, 6, NULL, 0);
  ok (sense_at (S4K_SENSE_UNIT_ATTENTION, 0x2a, 0x09, -1, false, -1),
      "then: UNIT ATTENTION, CAPACITY DATA HAS CHANGED");
  ok (scsi_rig_run (&t, tur, 6, NULL, 0) == S4K_SCSI_GOOD, "once");
  capacity (&t, &blocks, &L);
  const struct s4k_geometry *g = s4k_dev_geometry (t.d);
  ok (blocks == 2048 && L == 4096 && g->logical == 4096 &&
      g->physical == 4096 && g->size == 8u << 20,
      "READ CAPACITY(16): 2048 x 4096, the engine logical 4096, physical "
      "4096, the same bytes");
  uint8_t rc16[16] = { 0x9e, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32 };
  scsi_rig_run (&t, rc16, 16, b, 32);
  ok ((b[13] & 0x0f) == 0 && (b[14] & 0x3f) == 0 && b[15] == 0,
      "4Kn: one logical block per physical block, lowest aligned LBA 0");
  uint8_t rc10[10] = { 0x25 };
  scsi_rig_run (&t, rc10, 10, b, 8);
  ok (be32 (b) == 2047 && be32 (b + 4) == 4096,
      "READ CAPACITY(10): last LBA 2047, 4096 bytes");
  ok (zeroes (&t, 4096, 2048), "the data reads as zeroes");
  uint8_t rd[10] = { 0x28, 0, 0, 0, 0x08, 0, 0, 0, 1 };
  scsi_rig_run (&t, rd, 10, b, 4096 > sizeof b ? sizeof b : 4096);
  ok (sense_at (S4K_SENSE_ILLEGAL_REQUEST, 0x21, 0, -1, false, -1),
      "LBA 2048: LOGICAL BLOCK ADDRESS OUT OF RANGE");
  uint16_t id[256];
  s4k_scsi_ata_identify (s4k_scsi_lun_params (t.lun), id);
  ok ((id[106] & 0x1000) && (id[117] | (uint32_t) id[118] << 16) == 2048,
      "IDENTIFY words 106/117-118 follow: 2048-word logical sectors");
  fill (&t, 4096, 2048);

  ok (select_length (&t, 512, true) == S4K_SCSI_GOOD &&
      scsi_rig_run (&t, fu, 6, (uint8_t[4]) { 0 }, 4) == S4K_SCSI_GOOD,
      "and back: MODE SELECT(6) of 512, FORMAT UNIT");
  scsi_rig_run (&t, tur, 6, NULL, 0);
  ok (sense_at (S4K_SENSE_UNIT_ATTENTION, 0x2a, 0x09, -1, false, -1),
      "UNIT ATTENTION, CAPACITY DATA HAS CHANGED");
  capacity (&t, &blocks, &L);
  ok (blocks == 16384 && L == 512 && g->logical == 512 && zeroes (&t, 512,
                                                                   16384),
      "16384 x 512 again, zeroes");

  /* A FORMAT UNIT with no new length erases, and changes nothing
   * else. */
  fill (&t, 512, 16384);
  const uint8_t fu0[6] = { 0x04 };
  ok (scsi_rig_run (&t, fu0, 6, NULL, 0) == S4K_SCSI_GOOD &&
      !(last_kinds & (1u << S4K_SCSI_OP_SET_LOGICAL)) &&
      scsi_rig_run (&t, tur, 6, NULL, 0) == S4K_SCSI_GOOD && zeroes (&t, 512, 16384),
      "FORMAT UNIT without FMTDATA, same length: zeroes, no UNIT "
      "ATTENTION");
  scsi_rig_close (&t);
}

static void
refusals (void)
{
  struct scsi_rig t;
  uint8_t z[8] = { 0 };
  rig_open (&t, (const char *[]) { "model=512n", NULL });
  clear_ua (&t);
  ok (b4_lengths (&t) == 1u << 9, "512n: VPD B4h lists 512 only");
  select_length (&t, 4096, false);
  ok (sense_at (S4K_SENSE_ILLEGAL_REQUEST, 0x26, 0, 13, false, -1),
      "512n: MODE SELECT of 4096: INVALID FIELD IN PARAMETER LIST at "
      "BLOCK LENGTH (byte 13)");
  select_length (&t, 4096, true);
  ok (sense_at (S4K_SENSE_ILLEGAL_REQUEST, 0x26, 0, 9, false, -1),
      "512n: MODE SELECT(6): at byte 9");
  scsi_rig_close (&t);

  rig_open (&t, (const char *[]) { "model=512e", NULL });
  clear_ua (&t);
  const uint32_t bad[] = { 520, 1024, 2048, 8192, 0 };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    select_length (&t, bad[i], false);
    ok (sense_at (S4K_SENSE_ILLEGAL_REQUEST, 0x26, 0, 13, false, -1),
        "512e: MODE SELECT of %u refused at byte 13", bad[i]);
  }
  const uint8_t pinfo[6] = { 0x04, 0x40 };
  scsi_rig_run (&t, pinfo, 6, NULL, 0);
  ok (sense_at (S4K_SENSE_ILLEGAL_REQUEST, 0x24, 0, 1, true, 6),
      "FORMAT UNIT FMTPINFO=01b: INVALID FIELD IN CDB, byte 1 bit 6");
  const uint8_t ffmt3[6] = { 0x04, 0, 0, 0, 0x03 };
  scsi_rig_run (&t, ffmt3, 6, NULL, 0);
  ok (sense_at (S4K_SENSE_ILLEGAL_REQUEST, 0x24, 0, 4, true, 1),
      "FFMT 11b (reserved): byte 4 bit 1");
  scsi_rig_run (&t, fu, 6, (uint8_t[4]) { 0, 0x08 }, 4);
  ok (sense_at (S4K_SENSE_ILLEGAL_REQUEST, 0x26, 0, 1, false, 3),
      "IP (an initialization pattern): INVALID FIELD IN PARAMETER LIST, "
      "byte 1 bit 3");
  scsi_rig_run (&t, fu, 6, (uint8_t[4]) { 0, 0, 0, 8 }, 4);
  ok (sense_at (S4K_SENSE_ILLEGAL_REQUEST, 0x26, 0, 2, false, -1),
      "a DEFECT LIST LENGTH: byte 2");
  scsi_rig_run (&t, fu, 6, (uint8_t[4]) { 0x01 }, 4);
  ok (sense_at (S4K_SENSE_ILLEGAL_REQUEST, 0x26, 0, 0, false, 2),
      "PROTECTION FIELD USAGE: byte 0 bit 2");
  scsi_rig_run (&t, fu, 6, z, 2);
  ok (sense_at (S4K_SENSE_ILLEGAL_REQUEST, 0x1a, 0, -1, false, -1),
      "a header cut short: PARAMETER LIST LENGTH ERROR");
  scsi_rig_close (&t);

  rig_open (&t, (const char *[]) { "model=512e-xp", NULL });
  clear_ua (&t);
  const uint32_t xp = b4_lengths (&t);
  select_length (&t, 4096, false);
  ok (xp == 1u << 9 &&
      sense_at (S4K_SENSE_ILLEGAL_REQUEST, 0x26, 0, 13, false, -1),
      "512e-xp (LBA 0 at 3584): 4096 not listed, refused");
  scsi_rig_close (&t);

  rig_open (&t, (const char *[]) { "model=4kn", NULL });
  clear_ua (&t);
  ok (b4_lengths (&t) == (1u << 9 | 1u << 12) &&
      select_length (&t, 512, false) == S4K_SCSI_GOOD &&
      scsi_rig_run (&t, fu, 6, z, 4) == S4K_SCSI_GOOD,
      "4kn: lists 512 and 4096, formats to 512");
  scsi_rig_close (&t);

  /* file=: the new size is recorded beside the file, and the next open
   * takes it. */
  char path[] = "/tmp/sect4k-format-XXXXXX";
  int fd = mkstemp (path);
  if (fd == -1 || ftruncate (fd, 8 << 20) == -1)
    bail ("mkstemp");
  close (fd);
  char fkey[64], wkey[64], rec[64], err[256];
  snprintf (fkey, sizeof fkey, "file=%s", path);
  snprintf (rec, sizeof rec, "%s.sect4k-geometry", path);
  rig_open (&t, (const char *[]) { "model=512e", fkey, NULL });
  char serial[sizeof t.p.serial], product[sizeof t.p.product];
  snprintf (serial, sizeof serial, "%s", t.p.serial);
  snprintf (product, sizeof product, "%s", t.p.product);
  clear_ua (&t);
  ok (b4_lengths (&t) == (1u << 9 | 1u << 12) &&
      select_length (&t, 4096, false) == S4K_SCSI_GOOD &&
      scsi_rig_run (&t, fu, 6, z, 4) == S4K_SCSI_GOOD, "file=: 512e formatted to 4096");
  clear_ua (&t);
  fill (&t, 4096, 2048);
  scsi_rig_close (&t);
  char line[128] = "";
  FILE *fp = fopen (rec, "r");
  if (fp) {
    if (!fgets (line, sizeof line, fp))
      line[0] = '\0';
    fclose (fp);
  }
  ok (strcmp (line, "sect4k-geometry logical=4096 physical=4096 "
              "alignment=0\n") == 0, "file=: FILE.sect4k-geometry records "
      "it: %.*s", (int) strcspn (line, "\n"), line);
  rig_open (&t, (const char *[]) { "model=512e", fkey, NULL });
  clear_ua (&t);
  uint64_t blocks;
  uint32_t L;
  capacity (&t, &blocks, &L);
  static uint8_t b[4096];
  uint8_t rd[10] = { 0x28, 0, 0, 0, 0, 0, 0, 0, 1 };
  ok (blocks == 2048 && L == 4096 && s4k_dev_geometry (t.d)->logical == 4096 &&
      scsi_rig_run (&t, rd, 10, b, 4096) == S4K_SCSI_GOOD && b[0] == 0xab &&
      b[4095] == 0xab, "file=: the next open (model=512e again) is 2048 x "
      "4096, with the data written after the format");
  ok (strcmp (t.p.serial, serial) == 0 && strcmp (t.p.product, product) == 0,
      "file=: the same drive after the restart: serial %s (was %s), "
      "product '%s' (was '%s')", t.p.serial, serial, t.p.product, product);
  ok (select_length (&t, 512, false) == S4K_SCSI_GOOD &&
      scsi_rig_run (&t, fu, 6, z, 4) == S4K_SCSI_GOOD, "file=: and back to 512");
  scsi_rig_close (&t);
  rig_open (&t, (const char *[]) { "model=512e", fkey, NULL });
  ok (s4k_dev_geometry (t.d)->logical == 512, "file=: opens as 512e again");
  scsi_rig_close (&t);
  /* A record that does not fit the keys: refused, one line. */
  struct s4k_config c;
  struct s4k_dev *d = NULL;
  char keys[128];
  snprintf (keys, sizeof keys, "model=512n %s", fkey);
  if (configure (&c, keys, err, sizeof err))
    bail ("%s", err);
  int r = s4k_dev_open (&d, &c, err, sizeof err);
  ok (r == -EINVAL && strstr (err, "FORMAT UNIT left physical=4096") &&
      !strchr (err, '\n'), "file=: model=512n over a 4096-physical record "
      "refused: %s", err);
  if (r == 0)
    s4k_dev_close (d);
  fp = fopen (rec, "w");
  fputs ("garbage\n", fp);
  fclose (fp);
  snprintf (keys, sizeof keys, "model=512e %s", fkey);
  if (configure (&c, keys, err, sizeof err))
    bail ("%s", err);
  r = s4k_dev_open (&d, &c, err, sizeof err);
  ok (r == -EINVAL && strstr (err, "not a sect4k geometry record"),
      "file=: a record that does not parse refused: %s", err);
  if (r == 0)
    s4k_dev_close (d);
  unlink (rec);
  unlink (path);
  snprintf (wkey, sizeof wkey, "write-log=%s.log", path);
  rig_open (&t, (const char *[]) { "model=512e", wkey, NULL });
  clear_ua (&t);
  ok (b4_lengths (&t) == 1u << 9 &&
      s4k_dev_logical_ok (t.d, 4096, err, sizeof err) == -ENOTSUP,
      "write-log=: 4096 not listed (%s)", err);
  scsi_rig_close (&t);
  snprintf (wkey, sizeof wkey, "%s.log", path);
  unlink (wkey);
}

/* What an NBD client of the same device meets after the switch: its
 * 512-byte requests still served (read-modify-write), refused under
 * strict=true as on a 4Kn export; the physical sectors unchanged. */
static void
engine (void)
{
  static uint8_t b[4096];
  memset (b, 0x5a, 512);
  for (int strict = 0; strict < 2; strict++) {
    struct scsi_rig t;
    rig_open (&t, (const char *[]) { "model=512e",
                                     strict ? "strict=true" : "strict=false",
                                     NULL });
    ok (s4k_dev_set_logical (t.d, 4096) == 0 &&
        s4k_dev_set_logical (t.d, 8192) == -EINVAL &&
        s4k_dev_geometry (t.d)->logical == 4096, "%s: the engine switches "
        "to 4096, refuses 8192 (above physical)",
        strict ? "strict" : "not strict");
    int w = s4k_write (t.d, b, 512, 512, 0);
    memset (b + 2048, 0, 1024);
    int r = s4k_read (t.d, b + 2048, 1024, 0);
    if (strict)
      ok (w == -EINVAL && r == -EINVAL, "strict: a 512-byte write and a "
          "1024-byte read are misaligned now (EINVAL)");
    else
      ok (w == 0 && r == 0 && all_zero (b + 2048, 512) &&
          b[2048 + 512] == 0x5a, "not strict: a 512-byte write at 512 and "
          "the read back are served (read-modify-write)");
    scsi_rig_close (&t);
  }
}

/* ATA PASS-THROUGH(16), non-data or PIO in (blocks of 512 in COUNT). */
static void
ata16 (uint8_t *c, uint8_t command, uint16_t features, uint16_t count,
       uint8_t lba_low, bool in, bool ck_cond)
{
  memset (c, 0, 16);
  c[0] = 0x85;
  c[1] = (uint8_t) ((in ? 4 : 3) << 1 | 1);
  c[2] = (uint8_t) ((ck_cond ? 0x20 : 0) | (in ? 0x0e : 0));
  c[3] = (uint8_t) (features >> 8);
  c[4] = (uint8_t) features;
  c[5] = (uint8_t) (count >> 8);
  c[6] = (uint8_t) count;
  c[8] = lba_low;
  c[14] = command;
}

/* hdparm --set-sector-size: the Sector Configuration log (2Fh), then SET
 * SECTOR CONFIGURATION EXT (B2h) with its descriptor's index and
 * check. */
static void
sata (void)
{
  struct scsi_rig t;
  uint8_t c[16], b[512];
  rig_open (&t, (const char *[]) { "model=512e", "interface=sata", NULL });
  clear_ua (&t);
  ata16 (c, 0x2f, 0, 1, 0x00, true, false);
  scsi_rig_run (&t, c, 16, b, 512);
  ok (b[2 * 0x2f] == 1, "SATA: the GPL directory lists log 2Fh, 1 page");
  ata16 (c, 0x2f, 0, 1, 0x2f, true, false);
  memset (b, 0xee, sizeof b);
  ok (scsi_rig_run (&t, c, 16, b, 512) == S4K_SCSI_GOOD && b[0] == 0x80 &&
      b[2] == 0 && b[3] == 1 && (b[4] | b[5] << 8) == 512 &&
      b[16] == 0x80 && b[18] == 0 && b[19] == 8 &&
      (b[20] | b[21] << 8) == 4096 && b[32] == 0,
      "READ LOG EXT 2Fh: descriptors 0 (512, check 0100h) and 1 (4096, "
      "check 0800h)");
  fill (&t, 512, 16384);
  ata16 (c, 0xb2, 0x100, 1, 0, false, false); /* the check of 512 */
  scsi_rig_run (&t, c, 16, NULL, 0);
  ok (last.sense[0] == 0x72 && last.sense[1] == S4K_SENSE_ABORTED_COMMAND &&
      last.sense[8 + 3] == 0x04 && s4k_dev_geometry (t.d)->logical == 512,
      "SET SECTOR CONFIGURATION EXT, index 1 with the wrong check: ABORT");
  ata16 (c, 0xb2, 0x800, 2, 0, false, false);
  scsi_rig_run (&t, c, 16, NULL, 0);
  ok (last.sense[0] == 0x72 && last.sense[1] == S4K_SENSE_ABORTED_COMMAND,
      "index 2 (no descriptor): ABORT");
  ata16 (c, 0xb2, 0x800, 1, 0, false, true);
  scsi_rig_run (&t, c, 16, NULL, 0);
  ok (last.sense[0] == 0x72 && last.sense[1] == 0x01 &&
      last.sense[8 + 13] == 0x50 && s4k_dev_geometry (t.d)->logical == 4096,
      "index 1, check 0800h, CK_COND: done (status 50h), the engine at 4096");
  scsi_rig_run (&t, tur, 6, NULL, 0);
  ok (sense_at (S4K_SENSE_UNIT_ATTENTION, 0x2a, 0x09, -1, false, -1),
      "then UNIT ATTENTION, CAPACITY DATA HAS CHANGED");
  /* As hdparm 9.65 sends it: non-data, CK_COND, FEATURE 7:0 left 0. */
  ata16 (c, 0xb2, 0x100, 0, 0, false, true);
  ok (scsi_rig_run (&t, c, 16, NULL, 0) == S4K_SCSI_CHECK_CONDITION &&
      last.sense[1] == 0x01 && s4k_dev_geometry (t.d)->logical == 512,
      "index 0, check 0100h: back to 512");
  clear_ua (&t);
  ata16 (c, 0xb2, 0x800, 1, 0, false, false);
  ok (scsi_rig_run (&t, c, 16, NULL, 0) == S4K_SCSI_GOOD, "and to 4096 again");
  clear_ua (&t);
  uint64_t blocks;
  uint32_t L;
  capacity (&t, &blocks, &L);
  uint16_t id[256];
  s4k_scsi_ata_identify (s4k_scsi_lun_params (t.lun), id);
  ok (blocks == 2048 && L == 4096 && zeroes (&t, 4096, 2048) &&
      (id[117] | (uint32_t) id[118] << 16) == 2048 &&
      (id[100] | (uint64_t) id[101] << 16) == 2048,
      "2048 x 4096, zeroes; IDENTIFY: 2048-word sectors, 2048 of them");
  scsi_rig_close (&t);
}

int
main (void)
{
  convert ();
  engine ();
  sata ();
  refusals ();
  done_testing ();
}
