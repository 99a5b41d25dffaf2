/* SPDX-License-Identifier: BSD-3-Clause */
/* The SCSI layer's zoned block commands (ZBC-2, issue 33; lib/scsi/scsi_zbc.c)
 * against a real zoned memory-store device, in tests/unit/scsi.c's style:
 * the peripheral device type, VPD pages B1h and B6h byte for byte, READ
 * CAPACITY(16)'s RC BASIS, REPORT SUPPORTED OPERATION CODES, REPORT ZONES
 * (header, descriptors, reporting options, the partial bit, allocation
 * lengths), ZBC OUT (open, close, finish, reset, ALL, ZONE COUNT) and the sense of
 * every zone error, exact, as scsi_debug returns them. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sect4k/scsi.h"
#include "sect4k/zone.h"
#include "tap.h"
#include "devrig.h"
#include "scsirig.h"

/* A 64 MiB device of 4 MiB zones, with the keys given. */
static void
rig_open (struct scsi_rig *t, const char *keys, bool readonly)
{
  char err[256];
  if (configure (&t->c, keys, err, sizeof err))
    bail ("%s: %s", keys, err);
  scsi_rig_dev (t);
  t->p.zones = s4k_dev_zones (t->d);
  t->p.readonly = readonly;
  scsi_rig_lun (t);
}

static void
put64 (uint8_t *p, uint64_t v)
{
  for (int i = 7; i >= 0; i--, v >>= 8)
    p[i] = (uint8_t) v;
}

static uint64_t
get64 (const uint8_t *p)
{
  uint64_t v = 0;
  for (int i = 0; i < 8; i++)
    v = v << 8 | p[i];
  return v;
}

static uint32_t
get32 (const uint8_t *p)
{
  return (uint32_t) p[0] << 24 | p[1] << 16 | p[2] << 8 | p[3];
}

static uint8_t data[1 << 20];

/* WRITE(16) or READ(16) of n blocks at lba. */
static uint8_t
rw16 (struct scsi_rig *t, bool write, uint64_t lba, uint32_t n)
{
  uint8_t c[16] = { write ? 0x8a : 0x88 };
  put64 (c + 2, lba);
  c[10] = n >> 24; c[11] = n >> 16; c[12] = n >> 8; c[13] = n;
  return scsi_rig_run (t, c, 16, data, (size_t) n * t->L);
}

/* ZBC OUT service action sa on zone id (ALL if all). */
static uint8_t
zone_out (struct scsi_rig *t, uint8_t sa, uint64_t id, bool all)
{
  uint8_t c[16] = { 0x94, sa };
  put64 (c + 2, id);
  c[14] = all;
  return scsi_rig_run (t, c, 16, NULL, 0);
}

/* REPORT ZONES from lba with option (bit 7: PARTIAL), alloc bytes. */
static uint8_t
report (struct scsi_rig *t, uint64_t lba, uint8_t option, uint32_t alloc)
{
  uint8_t c[16] = { 0x95, 0x00 };
  put64 (c + 2, lba);
  c[10] = alloc >> 24; c[11] = alloc >> 16; c[12] = alloc >> 8; c[13] = alloc;
  c[14] = option;
  memset (data, 0xee, alloc + 64 < sizeof data ? alloc + 64 : sizeof data);
  return scsi_rig_run (t, c, 16, data, alloc);
}

/* Descriptor i of the last report: type, condition byte, length, start
 * and write pointer. */
static bool
desc_is (unsigned i, uint8_t type, uint8_t cond, uint64_t len,
         uint64_t start, uint64_t wp)
{
  const uint8_t *d = data + 64 * (i + 1);
  bool r = d[0] == type && d[1] == cond && get64 (d + 8) == len &&
           get64 (d + 16) == start && get64 (d + 24) == wp;
  for (int k = 32; r && k < 64; k++)
    r = d[k] == 0;
  if (!r)
    diag ("descriptor %u: type %x cond %02x len %llu start %llu wp %llx", i,
          d[0], d[1], (unsigned long long) get64 (d + 8),
          (unsigned long long) get64 (d + 16),
          (unsigned long long) get64 (d + 24));
  return r;
}

#define HM "size=64M zoned=host-managed zone-size=4M zone-conventional=1 " \
           "zone-max-open=2 "

static void
test_identity (void)
{
  struct scsi_rig t;
  uint8_t inq[6] = { 0x12, 0, 0, 0, 255, 0 };
  uint8_t vpd[6] = { 0x12, 1, 0xb6, 0, 255, 0 };
  rig_open (&t, HM "model=512e", false);
  scsi_rig_run (&t, (uint8_t[6]) { 0 }, 6, NULL, 0);     /* the power-on UA */
  ok (scsi_rig_run (&t, inq, 6, data, 255) == S4K_SCSI_GOOD && data[0] == 0x14,
      "host-managed: INQUIRY peripheral device type 14h");
  static const uint8_t b6[64] = {
    0x14, 0xb6, 0x00, 0x3c, 0x01, 0, 0, 0, 0xff, 0xff, 0xff, 0xff,
    0xff, 0xff, 0xff, 0xff, 0, 0, 0, 2,
  };
  ok (scsi_rig_run (&t, vpd, 6, data, 255) == S4K_SCSI_GOOD &&
      last.data_in_len == 64 && memcmp (data, b6, 64) == 0,
      "VPD B6h: URSWRZ, optimal counts not reported, max open 2, byte "
      "for byte");
  vpd[2] = 0x00;
  ok (scsi_rig_run (&t, vpd, 6, data, 255) == S4K_SCSI_GOOD && data[0] == 0x14 &&
      data[3] == 8 && data[10] == 0xb4 && data[11] == 0xb6,
      "VPD 00h lists B6h (after B4h)");
  vpd[2] = 0xb1;
  ok (scsi_rig_run (&t, vpd, 6, data, 255) == S4K_SCSI_GOOD && data[8] == 0,
      "VPD B1h: ZONED 00b on a host-managed drive (its type says it)");
  uint8_t rc16[16] = { 0x9e, 0x10 };
  rc16[13] = 32;
  ok (scsi_rig_run (&t, rc16, 16, data, 32) == S4K_SCSI_GOOD &&
      get64 (data) == 131071 && data[12] == 0x10 && data[13] == 3,
      "READ CAPACITY(16): the last LBA, RC BASIS 01b, 512e exponent 3");
  uint8_t rsoc[12] = { 0xa3, 0x0c, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0 };
  ok (scsi_rig_run (&t, rsoc, 12, data, 4096) == S4K_SCSI_GOOD, "RSOC: all commands");
  unsigned found = 0;
  for (uint32_t i = 4; i < 4 + get32 (data); i += 8)
    if ((data[i] == 0x94 || data[i] == 0x95) && (data[i + 5] & 1))
      found |= 1u << ((data[i] - 0x94) * 5 + data[i + 3]);
  ok (found == (1u << 1 | 1u << 2 | 1u << 3 | 1u << 4 | 1u << 5),
      "RSOC lists ZBC OUT 01h-04h and ZBC IN 00h with service actions");
  uint8_t one[12] = { 0xa3, 0x0c, 2, 0x95, 0, 0x00, 0, 0, 0, 64, 0, 0 };
  static const uint8_t usage[20] = {
    0, 3, 0, 16, 0x95, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xff, 0xff, 0xff, 0xff, 0xbf, 0,
  };
  ok (scsi_rig_run (&t, one, 12, data, 64) == S4K_SCSI_GOOD &&
      last.data_in_len == 20 && memcmp (data, usage, 20) == 0,
      "RSOC of REPORT ZONES: supported, its CDB usage data");
  one[3] = 0x94;
  one[5] = 0x04;
  ok (scsi_rig_run (&t, one, 12, data, 64) == S4K_SCSI_GOOD && data[1] == 3 &&
      data[5] == 0x04 && data[18] == 0x01 && data[16] == 0xff &&
      data[17] == 0xff && data[14] == 0 && data[19] == 0,
      "RSOC of RESET WRITE POINTER: supported, ZONE COUNT in bytes 12-13, "
      "ALL the only bit of byte 14");
  scsi_rig_close (&t);

  rig_open (&t, "size=64M zoned=host-aware zone-size=4M model=4kn", false);
  scsi_rig_run (&t, (uint8_t[6]) { 0 }, 6, NULL, 0);
  ok (scsi_rig_run (&t, inq, 6, data, 255) == S4K_SCSI_GOOD && data[0] == 0x00,
      "host-aware: device type 00h");
  vpd[2] = 0xb1;
  ok (scsi_rig_run (&t, vpd, 6, data, 255) == S4K_SCSI_GOOD && data[8] == 0x10,
      "host-aware: VPD B1h ZONED field 01b");
  vpd[2] = 0xb6;
  ok (scsi_rig_run (&t, vpd, 6, data, 255) == S4K_SCSI_GOOD &&
      get32 (data + 16) == 0xffffffff,
      "host-aware: B6h max open not reported");
  scsi_rig_close (&t);

  rig_open (&t, "size=64M model=512e", false);
  scsi_rig_run (&t, (uint8_t[6]) { 0 }, 6, NULL, 0);
  vpd[2] = 0xb6;
  ok (scsi_rig_run (&t, vpd, 6, data, 255) == S4K_SCSI_CHECK_CONDITION &&
      sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x24, 0x00),
      "not zoned: no B6h page");
  ok (report (&t, 0, 0, 4096) == S4K_SCSI_CHECK_CONDITION &&
      sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x20, 0x00) &&
      zone_out (&t, 4, 0, true) == S4K_SCSI_CHECK_CONDITION &&
      sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x20, 0x00),
      "not zoned: ZBC IN and OUT are INVALID COMMAND OPERATION CODE");
  scsi_rig_close (&t);

  /* zone-max-active: SCSI has no field for it. */
  struct s4k_config c;
  struct s4k_dev *d;
  char err[256];
  s4k_config_init (&c);
  if (s4k_config_set (&c, "size", "64M", err, sizeof err) ||
      s4k_config_set (&c, "zoned", "host-managed", err, sizeof err) ||
      s4k_config_set (&c, "zone-size", "4M", err, sizeof err) ||
      s4k_config_set (&c, "zone-max-active", "4", err, sizeof err) ||
      s4k_config_finish (&c, err, sizeof err) ||
      s4k_dev_open (&d, &c, err, sizeof err))
    bail ("%s", err);
  struct s4k_scsi_params p;
  s4k_scsi_params_from_config (&p, &c, s4k_dev_geometry (d),
                               s4k_dev_max_request (d));
  p.zones = s4k_dev_zones (d);
  ok (s4k_scsi_lun_new (&p, err, sizeof err) == NULL &&
      strcmp (err, "zone-max-active=4: SCSI has no field for it (ZBC-2 "
              "states the open limit only): use zone-max-open=") == 0,
      "zone-max-active refused for a SCSI LUN: %s", err);
  s4k_dev_close (d);
}

static void
test_report (void)
{
  struct scsi_rig t;
  rig_open (&t, HM "model=4kn", false);          /* 1024 LBAs a zone */
  scsi_rig_run (&t, (uint8_t[6]) { 0 }, 6, NULL, 0);
  memset (data, 0x5a, sizeof data);
  ok (rw16 (&t, true, 1024, 8) == S4K_SCSI_GOOD, "WRITE(16) at zone 1");
  ok (report (&t, 0, 0x00, 64 + 3 * 64) == S4K_SCSI_GOOD &&
      last.data_in_len == 256 && get32 (data) == 16 * 64 &&
      get64 (data + 8) == 16383 && data[4] == 0 &&
      desc_is (0, 0x1, 0x00, 1024, 0, UINT64_MAX) &&
      desc_is (1, 0x2, 0x20, 1024, 1024, 1032) &&
      desc_is (2, 0x2, 0x10, 1024, 2048, 2048),
      "REPORT ZONES: ZONE LIST LENGTH of every zone, MAXIMUM LBA, the "
      "descriptors that fit (conventional, implicitly open, empty)");
  ok (report (&t, 0, 0x80, 64 + 3 * 64) == S4K_SCSI_GOOD &&
      get32 (data) == 3 * 64, "PARTIAL: the list length counts those sent");
  ok (report (&t, 1500, 0x00, 128) == S4K_SCSI_GOOD &&
      last.data_in_len == 128 && get32 (data) == 15 * 64 &&
      desc_is (0, 0x2, 0x20, 1024, 1024, 1032),
      "from an LBA inside a zone: that zone first");
  ok (report (&t, 0, 0x02, 4096) == S4K_SCSI_GOOD &&
      get32 (data) == 64 && last.data_in_len == 128 &&
      desc_is (0, 0x2, 0x20, 1024, 1024, 1032),
      "option 02h: the implicitly open zone only");
  ok (report (&t, 0, 0x3f, 4096) == S4K_SCSI_GOOD && get32 (data) == 64 &&
      desc_is (0, 0x1, 0x00, 1024, 0, UINT64_MAX),
      "option 3Fh: not write pointer zones");
  ok (report (&t, 0, 0x01, 4096) == S4K_SCSI_GOOD && get32 (data) == 14 * 64,
      "option 01h: 14 empty zones");
  ok (report (&t, 0, 0x00, 200) == S4K_SCSI_GOOD &&
      last.data_in_len == 200 && get32 (data) == 16 * 64 &&
      data[192] == 0x2 && data[193] == 0x10 && data[200] == 0xee,
      "an allocation length inside a descriptor: the data up to it, that "
      "descriptor cut (SPC; scsi_debug)");
  ok (report (&t, 0, 0x80, 200) == S4K_SCSI_GOOD &&
      last.data_in_len == 200 && get32 (data) == 3 * 64,
      "PARTIAL, cut inside the third descriptor: the list length counts "
      "three (scsi_debug)");
  ok (report (&t, 0, 0x00, 32) == S4K_SCSI_GOOD && last.data_in_len == 32 &&
      get32 (data) == 16 * 64 && data[32] == 0xee,
      "an allocation length below the header: the header cut to it");
  ok (report (&t, 0, 0x00, 0) == S4K_SCSI_GOOD && last.data_in_len == 0,
      "allocation length 0: GOOD, no data");
  ok (report (&t, 0, 0x09, 4096) == S4K_SCSI_CHECK_CONDITION &&
      sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x24, 0x00),
      "a reserved reporting option: INVALID FIELD IN CDB");
  ok (report (&t, 16384, 0x00, 4096) == S4K_SCSI_CHECK_CONDITION &&
      sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x21, 0x00),
      "a start LBA past the end: LBA OUT OF RANGE");
  uint8_t c[16] = { 0x95, 0x00 };
  c[15] = 0x01;
  ok (scsi_rig_run (&t, c, 16, data, 4096) == S4K_SCSI_CHECK_CONDITION &&
      sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x24, 0x00),
      "a stray CDB bit: INVALID FIELD IN CDB");
  scsi_rig_close (&t);
}

static void
test_out_and_errors (void)
{
  struct scsi_rig t;
  rig_open (&t, HM "model=512e", false);         /* 8192 LBAs a zone */
  scsi_rig_run (&t, (uint8_t[6]) { 0 }, 6, NULL, 0);
  memset (data, 0x5a, sizeof data);
  ok (rw16 (&t, true, 8192, 8) == S4K_SCSI_GOOD, "a write at zone 1");
  ok (rw16 (&t, true, 8192, 8) == S4K_SCSI_CHECK_CONDITION &&
      sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x21, 0x04),
      "off the write pointer: UNALIGNED WRITE COMMAND 21h/04h");
  ok (rw16 (&t, true, 8200, 1) == S4K_SCSI_CHECK_CONDITION &&
      sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x21, 0x04),
      "512e: one logical block at the pointer: 21h/04h");
  ok (rw16 (&t, true, 8200, 8192) == S4K_SCSI_CHECK_CONDITION &&
      sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x21, 0x05),
      "across the zone's end: WRITE BOUNDARY VIOLATION 21h/05h");
  ok (rw16 (&t, false, 8184, 16) == S4K_SCSI_CHECK_CONDITION &&
      sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x21, 0x06),
      "a read across the conventional boundary: ATTEMPT TO READ INVALID "
      "DATA 21h/06h");
  ok (zone_out (&t, 0x03, 16384, false) == S4K_SCSI_GOOD &&
      zone_out (&t, 0x03, 24576, false) == S4K_SCSI_GOOD &&
      report (&t, 8192, 0x00, 64 * 4) == S4K_SCSI_GOOD &&
      desc_is (0, 0x2, 0x40, 8192, 8192, 8200) &&
      desc_is (1, 0x2, 0x30, 8192, 16384, 16384) &&
      desc_is (2, 0x2, 0x30, 8192, 24576, 24576),
      "OPEN ZONE twice at the limit: both explicitly open, the implicitly "
      "open one closed");
  ok (rw16 (&t, true, 32768, 8) == S4K_SCSI_CHECK_CONDITION &&
      sense_is (S4K_SENSE_DATA_PROTECT, 0x55, 0x0e) &&
      zone_out (&t, 0x03, 32768, false) == S4K_SCSI_CHECK_CONDITION &&
      sense_is (S4K_SENSE_DATA_PROTECT, 0x55, 0x0e),
      "a write or OPEN past the limit: INSUFFICIENT ZONE RESOURCES "
      "7h/55h/0Eh");
  ok (zone_out (&t, 0x01, 0, true) == S4K_SCSI_GOOD &&
      report (&t, 8192, 0x00, 64 * 4) == S4K_SCSI_GOOD &&
      desc_is (0, 0x2, 0x40, 8192, 8192, 8200) &&
      desc_is (1, 0x2, 0x10, 8192, 16384, 16384),
      "CLOSE ALL: written zones closed, empty ones empty");
  ok (zone_out (&t, 0x02, 8192, false) == S4K_SCSI_GOOD &&
      report (&t, 8192, 0x00, 128) == S4K_SCSI_GOOD &&
      desc_is (0, 0x2, 0xe0, 8192, 8192, 16384),
      "FINISH ZONE: full, the pointer at its end");
  ok (rw16 (&t, true, 8192, 8) == S4K_SCSI_CHECK_CONDITION &&
      sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x24, 0x00),
      "a write to a full zone: INVALID FIELD IN CDB 24h/00h");
  ok (zone_out (&t, 0x04, 8193, false) == S4K_SCSI_CHECK_CONDITION &&
      sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x24, 0x00) &&
      zone_out (&t, 0x04, 0, false) == S4K_SCSI_CHECK_CONDITION &&
      sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x24, 0x00) &&
      zone_out (&t, 0x04, 131072, false) == S4K_SCSI_CHECK_CONDITION &&
      sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x21, 0x00),
      "ZBC OUT on no zone start, a conventional zone, past the end: "
      "24h/00h, 24h/00h, 21h/00h");
  ok (zone_out (&t, 0x04, 8192, false) == S4K_SCSI_GOOD &&
      (last_kinds & 1u << S4K_SCSI_OP_ZONE) &&
      rw16 (&t, false, 8192, 16) == S4K_SCSI_GOOD &&
      data[0] == 0 && data[16 * 512 - 1] == 0 &&
      report (&t, 8192, 0x00, 128) == S4K_SCSI_GOOD &&
      desc_is (0, 0x2, 0x10, 8192, 8192, 8192),
      "RESET WRITE POINTER: empty, and the zone reads zeroes");

  /* Faults the control socket will set: offline and read only. */
  struct s4k_zones *z = s4k_dev_zones (t.d);
  ok (s4k_zones_set_cond (z, 40960, S4K_ZC_OFFLINE) == 0 &&
      s4k_zones_set_cond (z, 49152, S4K_ZC_READ_ONLY) == 0, "zones 5 and 6 "
      "offline and read only");
  ok (rw16 (&t, false, 40960, 8) == S4K_SCSI_CHECK_CONDITION &&
      sense_is (S4K_SENSE_DATA_PROTECT, 0x2c, 0x0e) &&
      rw16 (&t, true, 49152, 8) == S4K_SCSI_CHECK_CONDITION &&
      sense_is (S4K_SENSE_DATA_PROTECT, 0x27, 0x08) &&
      zone_out (&t, 0x03, 40960, false) == S4K_SCSI_CHECK_CONDITION &&
      sense_is (S4K_SENSE_DATA_PROTECT, 0x2c, 0x0e),
      "offline: ZONE IS OFFLINE 7h/2Ch/0Eh; read only: ZONE IS READ ONLY "
      "7h/27h/08h");
  ok (report (&t, 40960, 0x00, 192) == S4K_SCSI_GOOD &&
      desc_is (0, 0x2, 0xf0, 8192, 40960, UINT64_MAX) &&
      desc_is (1, 0x2, 0xd0, 8192, 49152, UINT64_MAX),
      "REPORT ZONES: offline Fh, read only Dh, write pointer invalid");
  scsi_rig_close (&t);

  rig_open (&t, HM "model=512e", true);
  scsi_rig_run (&t, (uint8_t[6]) { 0 }, 6, NULL, 0);
  ok (zone_out (&t, 0x04, 0, true) == S4K_SCSI_CHECK_CONDITION &&
      sense_is (S4K_SENSE_DATA_PROTECT, 0x27, 0x00),
      "a read-only LUN: ZBC OUT is WRITE PROTECTED");
  scsi_rig_close (&t);
}

/* ZBC OUT service action sa on count zones from id (ZONE COUNT). */
static uint8_t
zone_count (struct scsi_rig *t, uint8_t sa, uint64_t id, uint16_t count)
{
  uint8_t c[16] = { 0x94, sa };
  put64 (c + 2, id);
  c[12] = count >> 8;
  c[13] = (uint8_t) count;
  return scsi_rig_run (t, c, 16, NULL, 0);
}

/* ZBC-2's ZONE COUNT: that many zones from ZONE ID, checked before any
 * is touched (scsi_debug ignores the field: the kernel suite's sg_zone
 * --count checks compare sect4k with this, not with it). */
static void
test_zone_count (void)
{
  struct scsi_rig t;
  const uint64_t Z = 8192;
  rig_open (&t, HM "model=512e", false);
  scsi_rig_run (&t, (uint8_t[6]) { 0 }, 6, NULL, 0);
  ok (zone_count (&t, 0x03, 8 * Z, 1) == S4K_SCSI_GOOD &&
      report (&t, 8 * Z, 0x00, 64 * 3) == S4K_SCSI_GOOD &&
      desc_is (0, 0x2, 0x30, Z, 8 * Z, 8 * Z) &&
      desc_is (1, 0x2, 0x10, Z, 9 * Z, 9 * Z),
      "OPEN ZONE, ZONE COUNT 1: the one zone, as 0");
  ok (zone_count (&t, 0x03, 8 * Z, 2) == S4K_SCSI_GOOD &&
      (last_kinds & 1u << S4K_SCSI_OP_ZONE) &&
      report (&t, 8 * Z, 0x00, 64 * 3) == S4K_SCSI_GOOD &&
      desc_is (0, 0x2, 0x30, Z, 8 * Z, 8 * Z) &&
      desc_is (1, 0x2, 0x30, Z, 9 * Z, 9 * Z),
      "ZONE COUNT 2: zones 8 and 9 explicitly open (the limit)");
  ok (zone_count (&t, 0x03, 10 * Z, 2) == S4K_SCSI_CHECK_CONDITION &&
      sense_is (S4K_SENSE_DATA_PROTECT, 0x55, 0x0e) &&
      report (&t, 10 * Z, 0x00, 64 * 3) == S4K_SCSI_GOOD &&
      desc_is (0, 0x2, 0x10, Z, 10 * Z, 10 * Z) &&
      desc_is (1, 0x2, 0x10, Z, 11 * Z, 11 * Z),
      "two more past the limit: INSUFFICIENT ZONE RESOURCES, none opened");
  ok (zone_count (&t, 0x01, 8 * Z, 2) == S4K_SCSI_GOOD &&
      report (&t, 8 * Z, 0x00, 64 * 3) == S4K_SCSI_GOOD &&
      desc_is (0, 0x2, 0x10, Z, 8 * Z, 8 * Z) &&
      desc_is (1, 0x2, 0x10, Z, 9 * Z, 9 * Z),
      "CLOSE ZONE, ZONE COUNT 2: both empty again");
  ok (zone_count (&t, 0x02, 10 * Z, 3) == S4K_SCSI_GOOD &&
      report (&t, 10 * Z, 0x00, 64 * 4) == S4K_SCSI_GOOD &&
      desc_is (0, 0x2, 0xe0, Z, 10 * Z, 11 * Z) &&
      desc_is (1, 0x2, 0xe0, Z, 11 * Z, 12 * Z) &&
      desc_is (2, 0x2, 0xe0, Z, 12 * Z, 13 * Z),
      "FINISH ZONE, ZONE COUNT 3: zones 10-12 full");
  ok (zone_count (&t, 0x04, 10 * Z, 2) == S4K_SCSI_GOOD &&
      report (&t, 10 * Z, 0x00, 64 * 4) == S4K_SCSI_GOOD &&
      desc_is (0, 0x2, 0x10, Z, 10 * Z, 10 * Z) &&
      desc_is (1, 0x2, 0x10, Z, 11 * Z, 11 * Z) &&
      desc_is (2, 0x2, 0xe0, Z, 12 * Z, 13 * Z),
      "RESET WRITE POINTER, ZONE COUNT 2: zones 10 and 11 empty, 12 full");
  ok (zone_count (&t, 0x02, 14 * Z, 2) == S4K_SCSI_GOOD &&
      zone_count (&t, 0x03, 15 * Z, 2) == S4K_SCSI_CHECK_CONDITION &&
      sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x21, 0x00),
      "the last two zones; one past the last: LBA OUT OF RANGE");
  ok (zone_count (&t, 0x04, 0, 2) == S4K_SCSI_CHECK_CONDITION &&
      sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x24, 0x00) &&
      zone_count (&t, 0x04, Z + 8, 2) == S4K_SCSI_CHECK_CONDITION &&
      sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x24, 0x00) &&
      report (&t, 12 * Z, 0x00, 64 * 2) == S4K_SCSI_GOOD &&
      desc_is (0, 0x2, 0xe0, Z, 12 * Z, 13 * Z),
      "from the conventional zone, or not a zone start: INVALID FIELD IN "
      "CDB, nothing reset");
  ok (zone_count (&t, 0x04, 0, 2) == S4K_SCSI_CHECK_CONDITION &&
      zone_count (&t, 0x04, 12 * Z, 0) == S4K_SCSI_GOOD &&
      report (&t, 12 * Z, 0x00, 64 * 2) == S4K_SCSI_GOOD &&
      desc_is (0, 0x2, 0x10, Z, 12 * Z, 12 * Z), "ZONE COUNT 0: one zone");
  struct s4k_zones *z = s4k_dev_zones (t.d);
  ok (s4k_zones_set_cond (z, 6 * Z, S4K_ZC_READ_ONLY) == 0 &&
      zone_count (&t, 0x02, 5 * Z, 2) == S4K_SCSI_CHECK_CONDITION &&
      sense_is (S4K_SENSE_DATA_PROTECT, 0x27, 0x08) &&
      report (&t, 5 * Z, 0x00, 64 * 2) == S4K_SCSI_GOOD &&
      desc_is (0, 0x2, 0x10, Z, 5 * Z, 5 * Z),
      "a read-only zone among them: ZONE IS READ ONLY, zone 5 not finished");
  uint8_t one[12] = { 0xa3, 0x0c, 2, 0x94, 0, 0x03, 0, 0, 0, 64, 0, 0 };
  ok (scsi_rig_run (&t, one, 12, data, 64) == S4K_SCSI_GOOD &&
      data[16] == 0xff && data[17] == 0xff && data[18] == 0x01,
      "RSOC of OPEN ZONE: ZONE COUNT (bytes 12-13) in its CDB usage data");
  scsi_rig_close (&t);
}

int
main (void)
{
  test_identity ();
  test_report ();
  test_out_and_errors ();
  test_zone_count ();
  return done_testing ();
}
