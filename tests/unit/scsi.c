/* SPDX-License-Identifier: BSD-3-Clause */
/* The SCSI command layer (lib/scsi/scsi.c, issue 22): every command it knows
 * and every sense it produces, the pages byte for byte on five
 * geometries, media commands run against a real memory-store device
 * (bad sectors and power cuts through the fault layer), and malformed
 * CDBs that must never become an operation. */
#include <errno.h>
#include <string.h>

#include "sect4k/scsi.h"
#include "tap.h"
#include "devrig.h"
#include "scsirig.h"

struct model {
  const char *name;
  const char *keys[3];
  uint32_t L, P, A;
};
static const struct model models[] = {
  { "512n", { "model=512n" }, 512, 512, 0 },
  { "512e", { "model=512e" }, 512, 4096, 0 },
  { "512e-xp", { "model=512e-xp" }, 512, 4096, 3584 },
  { "4kn", { "model=4kn" }, 4096, 4096, 0 },
  { "1024/8192", { "logical=1024", "physical=8192" }, 1024, 8192, 0 },
};
#define NMODELS (sizeof models / sizeof models[0])

#define SIZE (4 * 1024 * 1024)

/* Atomic write limits the next rig_open gives the device and the LUN
 * (what atomic-write-max=, atomic-write-min=, atomic-write-boundary= set
 * in the configuration); max 0: none. */
static struct s4k_atomic rig_atomic;

static void
rig_open (struct scsi_rig *t, const struct model *m, const char *const *extra)
{
  static const char *const base[] = { "size=4M", NULL };
  const char *keys[4] = { 0 };
  for (unsigned i = 0; i < 3 && m->keys[i]; i++)
    keys[i] = m->keys[i];
  scsi_rig_config (t, base, keys, extra);
  if (rig_atomic.max)
    t->c.atomic = rig_atomic;
  scsi_rig_dev (t);
  scsi_rig_lun (t);
}

/* What the last command ran, beyond scsirig.h's. */
static unsigned last_flags;         /* flags of every op, or'ed */
static bool ops_in_bounds;

static int
run_op (struct s4k_dev *d, const struct s4k_scsi_op *op)
{
  last_ops++;
  last_kinds |= 1u << op->kind;
  last_flags |= op->flags;
  const uint64_t size = s4k_dev_geometry (d)->size;
  if (op->kind != S4K_SCSI_OP_FLUSH && op->kind != S4K_SCSI_OP_ZONE &&
      op->kind != S4K_SCSI_OP_SET_LOGICAL &&
      (op->len == 0 || op->off > size || op->len > size - op->off))
    ops_in_bounds = false;
  return s4k_scsi_op_run (d, op);
}

/* Runs one command as a front end does; returns its status.  cut_at:
 * cut the power before running op number cut_at (1-based), 0 never. */
static uint8_t
run_cut (struct scsi_rig *t, const uint8_t *cdb, size_t cdb_len, void *data,
         size_t data_len, unsigned cut_at)
{
  last_ops = last_kinds = last_flags = 0;
  ops_in_bounds = true;
  unsigned cuts = s4k_dev_power_cuts (t->d);
  s4k_fault_epoch (cuts);
  unsigned n = s4k_scsi_exec (t->lun, &last, cdb, cdb_len, data, data_len,
                              cuts);
  while (n > 0) {
    unsigned i = 0;
    int r = 0;
    for (; i < n; i++) {
      if (cut_at && last_ops + 1 == cut_at) {
        char *rep = NULL;
        s4k_dev_power_cut (t->d, S4K_TORN_NONE, &rep);
        free (rep);
      }
      if ((r = run_op (t->d, &last.ops[i])) != 0)
        break;
    }
    n = s4k_scsi_done (t->lun, &last, i, r, s4k_dev_power_cuts (t->d));
  }
  s4k_scsi_cmd_release (&last);
  s4k_fault_epoch (~0u);
  return last.status;
}

static uint8_t
run (struct scsi_rig *t, const uint8_t *cdb, size_t cdb_len, void *data,
     size_t data_len)
{
  return run_cut (t, cdb, cdb_len, data, data_len, 0);
}

static bool
info_is (uint64_t want)
{
  uint8_t k, a, q;
  bool iv;
  uint64_t info;
  if (s4k_scsi_sense_parse (last.sense, last.sense_len, &k, &a, &q, &iv,
                            &info) || !iv) {
    diag ("no INFORMATION");
    return false;
  }
  if (info != want)
    diag ("INFORMATION %" PRIu64 ", want %" PRIu64, info, want);
  return info == want;
}

/* The sense-key specific field pointer: CDB byte, bit (-1: none). */
static bool
field_is (bool cdb, int byte, int bit)
{
  const uint8_t *s = last.sense;
  if (!(s[15] & 0x80) || !!(s[15] & 0x40) != cdb ||
      ((s[16] << 8) | s[17]) != byte ||
      (bit < 0 ? (s[15] & 0x08) != 0 : (s[15] & 0x0f) != (0x08 | bit))) {
    diag ("field pointer %02x %02x %02x", s[15], s[16], s[17]);
    return false;
  }
  return true;
}

static bool
bytes_are (const uint8_t *got, const uint8_t *want, size_t n)
{
  if (memcmp (got, want, n) == 0)
    return true;
  for (size_t i = 0; i < n; i++)
    if (got[i] != want[i]) {
      diag ("byte %zu: got %02x, want %02x", i, got[i], want[i]);
      break;
    }
  return false;
}

static void
put32 (uint8_t *p, uint32_t v)
{
  p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v;
}

static void
put64 (uint8_t *p, uint64_t v)
{
  put32 (p, v >> 32);
  put32 (p + 4, (uint32_t) v);
}

/* Clears the UNIT ATTENTION a new LUN has, checking it. */
static void
clear_ua (struct scsi_rig *t, const char *name)
{
  uint8_t tur[6] = { 0 };
  run (t, tur, 6, NULL, 0);
  ok (sense_is (S4K_SENSE_UNIT_ATTENTION, 0x29, 0x00),
      "%s: a new LUN reports POWER ON, RESET OCCURRED once", name);
  ok (run (t, tur, 6, NULL, 0) == S4K_SCSI_GOOD,
      "%s: then TEST UNIT READY is GOOD", name);
}

static uint8_t buf[SIZE], buf2[SIZE];

/* ---- identity and pages: byte for byte -------------------------------- */

static void
test_pages (const struct model *m)
{
  struct scsi_rig t;
  rig_open (&t, m, NULL);
  const uint32_t L = m->L, ratio = m->P / m->L, lowest = m->A / m->L;
  const uint64_t blocks = SIZE / L;

  uint8_t inq[6] = { 0x12, 0, 0, 0, 255, 0 };
  ok (run (&t, inq, 6, buf, sizeof buf) == S4K_SCSI_GOOD &&
      last.data_in_len == 36, "%s: INQUIRY runs despite the UNIT ATTENTION, "
      "36 bytes", m->name);
  uint8_t std[36] = { 0, 0, 7, 0x12, 31, 0, 0, 0x02,
                      'S', 'E', 'C', 'T', '4', 'K', ' ', ' ' };
  char prod[17];
  snprintf (prod, sizeof prod, "sect4k %-9s", strcmp (m->name, "1024/8192") == 0
            ? "1kx8k" : m->name);
  memcpy (std + 16, prod, 16);
  memcpy (std + 32, S4K_VERSION, 4);
  ok (bytes_are (buf, std, 36), "%s: standard INQUIRY data", m->name);

  clear_ua (&t, m->name);

  inq[1] = 1;
  inq[2] = 0x00;
  const uint8_t p00[] = { 0, 0, 0, 7, 0x00, 0x80, 0x83, 0xb0, 0xb1, 0xb2,
                          0xb4 };
  ok (run (&t, inq, 6, buf, sizeof buf) == S4K_SCSI_GOOD &&
      last.data_in_len == sizeof p00 && bytes_are (buf, p00, sizeof p00),
      "%s: VPD 00h lists 00 80 83 B0 B1 B2 B4", m->name);

  const struct s4k_scsi_params *p = s4k_scsi_lun_params (t.lun);
  inq[2] = 0x80;
  ok (run (&t, inq, 6, buf, sizeof buf) == S4K_SCSI_GOOD &&
      last.data_in_len == 4 + 16 && buf[1] == 0x80 && buf[3] == 16 &&
      memcmp (buf + 4, p->serial, 16) == 0, "%s: VPD 80h serial %s",
      m->name, p->serial);

  inq[2] = 0x83;
  uint8_t p83[4 + 12 + 4 + 8 + 16] = { 0, 0x83, 0, 40, 0x01, 0x03, 0, 8 };
  put64 (p83 + 8, UINT64_C (3) << 60 | p->naa_id);
  memcpy (p83 + 16, "\x02\x01\x00\x18SECT4K  ", 12);
  memcpy (p83 + 28, p->serial, 16);
  ok (run (&t, inq, 6, buf, sizeof buf) == S4K_SCSI_GOOD &&
      last.data_in_len == sizeof p83 && bytes_are (buf, p83, sizeof p83),
      "%s: VPD 83h: NAA 3 (locally assigned) and a T10 vendor id", m->name);

  inq[2] = 0xb0;
  uint8_t pb0[64] = { 0, 0xb0, 0, 0x3c, 0x01, 0 };
  pb0[6] = ratio >> 8;
  pb0[7] = (uint8_t) ratio;
  put32 (pb0 + 8, S4K_DEFAULT_MAX_REQUEST / L);
  put32 (pb0 + 20, (1u << 30) / L);
  put32 (pb0 + 24, 256);
  put32 (pb0 + 28, ratio);
  put32 (pb0 + 32, 0x80000000u | lowest);
  put64 (pb0 + 36, (1u << 30) / L);
  ok (run (&t, inq, 6, buf, sizeof buf) == S4K_SCSI_GOOD &&
      last.data_in_len == 64 && bytes_are (buf, pb0, 64),
      "%s: VPD B0h: granularity %u, max transfer %u, unmap granularity %u "
      "aligned at %u (UGAVALID)", m->name, ratio,
      S4K_DEFAULT_MAX_REQUEST / L, ratio, lowest);

  inq[2] = 0xb1;
  uint8_t pb1[64] = { 0, 0xb1, 0, 0x3c, 0, 1 };
  ok (run (&t, inq, 6, buf, sizeof buf) == S4K_SCSI_GOOD &&
      last.data_in_len == 64 && bytes_are (buf, pb1, 64),
      "%s: VPD B1h: rotation rate 1 (non-rotating) without timing=, as "
      "the NBD flags say", m->name);

  inq[2] = 0xb2;
  const uint8_t pb2[8] = { 0, 0xb2, 0, 4, 0, 0xe4, 0x02, 0 };
  ok (run (&t, inq, 6, buf, sizeof buf) == S4K_SCSI_GOOD &&
      last.data_in_len == 8 && bytes_are (buf, pb2, 8),
      "%s: VPD B2h: LBPU, LBPWS, LBPWS10, LBPRZ, thin", m->name);

  inq[2] = 0x89;
  run (&t, inq, 6, buf, sizeof buf);
  ok (sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x24, 0) && field_is (true, 2, -1),
      "%s: VPD 89h: INVALID FIELD IN CDB at byte 2", m->name);
  inq[1] = 0;
  inq[2] = 0x80;
  run (&t, inq, 6, buf, sizeof buf);
  ok (sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x24, 0),
      "%s: a page code without EVPD: INVALID FIELD IN CDB", m->name);
  inq[2] = 0;
  inq[4] = 5;
  memset (buf, 0xee, 64);
  ok (run (&t, inq, 6, buf, sizeof buf) == S4K_SCSI_GOOD &&
      last.data_in_len == 5 && buf[5] == 0xee,
      "%s: INQUIRY allocation length 5: 5 bytes, nothing past them", m->name);
  ok (run (&t, inq, 6, buf, 3) == S4K_SCSI_GOOD && last.data_in_len == 3,
      "%s: a 3-byte buffer: 3 bytes", m->name);

  /* READ CAPACITY */
  uint8_t rc10[10] = { 0x25 };
  uint8_t want10[8];
  put32 (want10, (uint32_t) (blocks - 1));
  put32 (want10 + 4, L);
  ok (run (&t, rc10, 10, buf, sizeof buf) == S4K_SCSI_GOOD &&
      last.data_in_len == 8 && bytes_are (buf, want10, 8),
      "%s: READ CAPACITY(10)", m->name);
  uint8_t rc16[16] = { 0x9e, 0x10 };
  put32 (rc16 + 10, 32);
  uint8_t want16[32] = { 0 };
  put64 (want16, blocks - 1);
  put32 (want16 + 8, L);
  want16[12] = 0x10;
  want16[13] = (uint8_t) __builtin_ctz (ratio);
  want16[14] = 0xc0 | (lowest >> 8);
  want16[15] = (uint8_t) lowest;
  ok (run (&t, rc16, 16, buf, sizeof buf) == S4K_SCSI_GOOD &&
      last.data_in_len == 32 && bytes_are (buf, want16, 32),
      "%s: READ CAPACITY(16): exponent %d, lowest aligned LBA %u, LBPME, "
      "LBPRZ", m->name, __builtin_ctz (ratio), lowest);
  put32 (rc16 + 10, 12);
  ok (run (&t, rc16, 16, buf, sizeof buf) == S4K_SCSI_GOOD &&
      last.data_in_len == 12, "%s: READ CAPACITY(16) allocation 12: 12 bytes",
      m->name);

  /* MODE SENSE(6) of the Caching page, with the block descriptor. */
  uint8_t ms6[6] = { 0x1a, 0, 0x08, 0, 255, 0 };
  uint8_t want_ms[4 + 8 + 20] = { 4 + 8 + 20 - 1, 0, 0x10, 8 };
  put32 (want_ms + 4, (uint32_t) blocks);
  put32 (want_ms + 8, L);
  want_ms[12] = 0x08;
  want_ms[13] = 0x12;
  ok (run (&t, ms6, 6, buf, sizeof buf) == S4K_SCSI_GOOD &&
      last.data_in_len == sizeof want_ms &&
      bytes_are (buf, want_ms, sizeof want_ms),
      "%s: MODE SENSE(6) 08h: DPOFUA, block descriptor, WCE 0", m->name);
  scsi_rig_close (&t);
}

/* ---- mode pages, RSOC, identity options ------------------------------- */

static void
test_modes (void)
{
  struct scsi_rig t;
  const char *wc[] = { "write-cache=true", "timing=hdd7200", NULL };
  rig_open (&t, &models[1], wc);
  clear_ua (&t, "512e write-cache");

  uint8_t inq[6] = { 0x12, 1, 0xb1, 0, 255, 0 };
  ok (run (&t, inq, 6, buf, sizeof buf) == S4K_SCSI_GOOD &&
      buf[4] == 0x1c && buf[5] == 0x20, "timing=hdd7200: rotation rate 7200");
  /* Whatever else models time, only a rotating preset rotates. */
  static const char *const not_rotating[][2] = {
    { "timing=ssd", NULL }, { "timing=none", NULL },
    { "latency-read=8ms", "latency-rmw=8ms" },
  };
  for (size_t i = 0; i < 3; i++) {
    struct scsi_rig r;
    const char *keys[] = { not_rotating[i][0], not_rotating[i][1], NULL };
    rig_open (&r, &models[1], keys);
    ok (run (&r, inq, 6, buf, sizeof buf) == S4K_SCSI_GOOD &&
        buf[4] == 0 && buf[5] == 1, "%s%s%s: rotation rate 1 (non-rotating)",
        keys[0], keys[1] ? " " : "", keys[1] ? keys[1] : "");
    scsi_rig_close (&r);
  }

  uint8_t ms6[6] = { 0x1a, 0x08, 0x08, 0, 255, 0 };
  ok (run (&t, ms6, 6, buf, sizeof buf) == S4K_SCSI_GOOD &&
      last.data_in_len == 24 && buf[3] == 0 && buf[4] == 0x08 &&
      buf[6] == 0x04, "write-cache=true: WCE in the Caching page (DBD: no "
      "block descriptor)");
  uint8_t cache_page[24];
  memcpy (cache_page, buf, 24);

  ms6[2] = 0x3f;
  const uint8_t all[4 + 12 + 20 + 12] = {
    47, 0, 0x10, 0,
    0x01, 0x0a, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0x08, 0x12, 0x04, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0x0a, 0x0a, 0x02, 0x10, 0, 0, 0, 0, 0, 0, 0, 0,
  };
  ok (run (&t, ms6, 6, buf, sizeof buf) == S4K_SCSI_GOOD &&
      last.data_in_len == sizeof all && bytes_are (buf, all, sizeof all),
      "MODE SENSE(6) 3Fh: pages 01h, 08h, 0Ah in order");
  ms6[3] = 0xff;
  ok (run (&t, ms6, 6, buf, sizeof buf) == S4K_SCSI_GOOD &&
      last.data_in_len == sizeof all, "3Fh/FFh: the same (no subpages)");
  ms6[3] = 0x01;
  run (&t, ms6, 6, buf, sizeof buf);
  ok (sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x24, 0) && field_is (true, 3, -1),
      "a subpage: INVALID FIELD IN CDB at byte 3");
  ms6[3] = 0;
  ms6[2] = 0x48;                /* changeable, caching */
  ok (run (&t, ms6, 6, buf, sizeof buf) == S4K_SCSI_GOOD && buf[6] == 0 &&
      buf[4] == 0x08 && buf[5] == 0x12, "changeable values: none");
  ms6[2] = 0x88;                /* default */
  ok (run (&t, ms6, 6, buf, sizeof buf) == S4K_SCSI_GOOD && buf[6] == 0x04,
      "default values: the current ones");
  ms6[2] = 0xc8;                /* saved */
  run (&t, ms6, 6, buf, sizeof buf);
  ok (sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x39, 0),
      "saved values: SAVING PARAMETERS NOT SUPPORTED");
  ms6[2] = 0x1c;
  run (&t, ms6, 6, buf, sizeof buf);
  ok (sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x24, 0) && field_is (true, 2, 5),
      "an unknown page: INVALID FIELD IN CDB");

  uint8_t ms10[10] = { 0x5a, 0x10, 0x0a, 0, 0, 0, 0, 0, 255, 0 };
  const uint8_t want10[8 + 16 + 12] = {
    0, 34, 0, 0x10, 0x01, 0, 0, 16,
    0, 0, 0, 0, 0, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0x02, 0,
    0x0a, 0x0a, 0x02, 0x10, 0, 0, 0, 0, 0, 0, 0, 0,
  };
  ok (run (&t, ms10, 10, buf, sizeof buf) == S4K_SCSI_GOOD &&
      last.data_in_len == sizeof want10 &&
      bytes_are (buf, want10, sizeof want10),
      "MODE SENSE(10) LLBAA 0Ah: long block descriptor, Control page");

  /* MODE SELECT: the current values are accepted, a change is not. */
  uint8_t sel6[6] = { 0x15, 0x10, 0, 0, 24, 0 };
  cache_page[0] = 0;            /* mode data length: reserved in SELECT */
  memcpy (buf, cache_page, 24);
  ok (run (&t, sel6, 6, buf, 24) == S4K_SCSI_GOOD,
      "MODE SELECT(6) of the current Caching page: GOOD");
  buf[6] = 0;                   /* WCE off */
  run (&t, sel6, 6, buf, 24);
  ok (sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x26, 0) && field_is (false, 6, -1),
      "MODE SELECT turning WCE off: INVALID FIELD IN PARAMETER LIST at 6");
  sel6[1] = 0x11;
  run (&t, sel6, 6, buf, 24);
  ok (sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x24, 0) && field_is (true, 1, 0),
      "MODE SELECT with SP: INVALID FIELD IN CDB at byte 1 bit 0");
  sel6[1] = 0x10;
  run (&t, sel6, 6, buf, 10);
  ok (sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x1a, 0),
      "MODE SELECT with less data than its length: PARAMETER LIST LENGTH "
      "ERROR");
  uint8_t sel10[10] = { 0x55, 0x10, 0, 0, 0, 0, 0, 0, 0, 0 };
  ok (run (&t, sel10, 10, NULL, 0) == S4K_SCSI_GOOD,
      "MODE SELECT(10) of nothing: GOOD");

  /* REPORT SUPPORTED OPERATION CODES */
  uint8_t rsoc[12] = { 0xa3, 0x0c, 0x01, 0x93, 0, 0, 0, 0, 1, 0, 0, 0 };
  const uint8_t ws16[4 + 16] = { 0, 0x03, 0, 16, 0x93, 0x09, 0xff, 0xff,
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x3f, 0 };
  ok (run (&t, rsoc, 12, buf, sizeof buf) == S4K_SCSI_GOOD &&
      last.data_in_len == 20 && bytes_are (buf, ws16, 20),
      "RSOC of WRITE SAME(16): supported, its CDB usage data");
  rsoc[3] = 0x9e;
  rsoc[2] = 0x02;
  rsoc[5] = 0x10;
  ok (run (&t, rsoc, 12, buf, sizeof buf) == S4K_SCSI_GOOD &&
      buf[1] == 0x03 && buf[3] == 16, "RSOC of READ CAPACITY(16) by "
      "service action: supported");
  rsoc[5] = 0x11;
  ok (run (&t, rsoc, 12, buf, sizeof buf) == S4K_SCSI_GOOD &&
      buf[1] == 0x01 && last.data_in_len == 4,
      "RSOC of service action 11h: not supported");
  rsoc[2] = 0x01;
  run (&t, rsoc, 12, buf, sizeof buf);
  ok (sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x24, 0),
      "RSOC option 1 of an opcode with service actions: INVALID FIELD");
  rsoc[3] = 0x85;
  ok (run (&t, rsoc, 12, buf, sizeof buf) == S4K_SCSI_GOOD && buf[1] == 0x01,
      "RSOC of ATA PASS-THROUGH(16): not supported");
  rsoc[2] = 0;
  ok (run (&t, rsoc, 12, buf, sizeof buf) == S4K_SCSI_GOOD &&
      last.data_in_len > 4 + 20 * 8 && (last.data_in_len - 4) % 8 == 0 &&
      buf[4] == 0x00, "RSOC all: %" PRIu64 " bytes of 8-byte descriptors",
      last.data_in_len);
  scsi_rig_close (&t);

  /* Identity from the parameters, and geometries SCSI cannot state. */
  struct s4k_scsi_params p;
  struct s4k_geometry g = { UINT64_C (1) << 42, 512, 4096, 0 };
  s4k_scsi_params_init (&p, &g, 1 << 20, "disk");
  char err[256];
  struct s4k_scsi_lun *lun = s4k_scsi_lun_new (&p, err, sizeof err);
  struct s4k_scsi_cmd cmd;
  uint8_t rc10[10] = { 0x25 };
  uint8_t tur[6] = { 0 };
  s4k_scsi_exec (lun, &cmd, tur, 6, NULL, 0, 0);
  s4k_scsi_exec (lun, &cmd, rc10, 10, buf, 8, 0);
  ok (cmd.status == 0 && cmd.data_in_len == 8 &&
      memcmp (buf, "\xff\xff\xff\xff\x00\x00\x02\x00", 8) == 0,
      "READ CAPACITY(10) of 4 TiB of 512: FFFFFFFFh");
  s4k_scsi_lun_free (lun);
  struct s4k_scsi_params p2;
  s4k_scsi_params_init (&p2, &g, 1 << 20, "other");
  ok (strcmp (p.serial, p2.serial) != 0 && p.naa_id != p2.naa_id &&
      strlen (p.serial) == 16, "serial and NAA id differ by export name");
  ok (p.rotation_rate == 1, "s4k_scsi_params_init: non-rotating");
  g.physical = 32u << 20;
  s4k_scsi_params_init (&p, &g, 1 << 20, NULL);
  ok (s4k_scsi_lun_new (&p, err, sizeof err) == NULL &&
      strstr (err, "32768"), "physical 32M over logical 512: refused (%s)",
      err);
}

static bool
all_zero_check (const uint8_t *p, size_t n)
{
  for (size_t i = 0; i < n; i++)
    if (p[i])
      return false;
  return true;
}

/* ---- media commands ---------------------------------------------------- */

static void
fill_pattern (uint8_t *b, size_t n, unsigned salt)
{
  for (size_t i = 0; i < n; i++)
    b[i] = (uint8_t) (i * 7 + salt + i / 512);
}

static void
test_media (const struct model *m)
{
  struct scsi_rig t;
  rig_open (&t, m, NULL);
  const uint32_t L = t.L;
  const uint64_t blocks = SIZE / L;
  clear_ua (&t, m->name);

  /* WRITE(10) then READ of every size. */
  fill_pattern (buf, 16 * L, 1);
  uint8_t w10[10] = { 0x2a, 0x08, 0, 0, 0, 3, 0, 0, 16, 0 };
  ok (run (&t, w10, 10, buf, 16 * L) == S4K_SCSI_GOOD && last_ops == 1 &&
      last_kinds == 1u << S4K_SCSI_OP_WRITE && last_flags == S4K_FUA,
      "%s: WRITE(10) FUA: one write op with FUA", m->name);
  const uint8_t r6[6] = { 0x08, 0, 0, 3, 16, 0 };
  const uint8_t r10[10] = { 0x28, 0x10, 0, 0, 0, 3, 0, 0, 16, 0 };
  const uint8_t r12[12] = { 0xa8, 0, 0, 0, 0, 3, 0, 0, 0, 16, 0, 0 };
  const uint8_t r16[16] = { 0x88, 0x08, 0, 0, 0, 0, 0, 0, 0, 3,
                            0, 0, 0, 16, 0, 0 };
  const uint8_t *reads[] = { r6, r10, r12, r16 };
  const size_t lens[] = { 6, 10, 12, 16 };
  for (int i = 0; i < 4; i++) {
    memset (buf2, 0, 16 * L);
    ok (run (&t, reads[i], lens[i], buf2, SIZE) == S4K_SCSI_GOOD &&
        last.data_in_len == 16 * L && memcmp (buf, buf2, 16 * L) == 0,
        "%s: READ(%zu) returns what WRITE(10) wrote", m->name, lens[i]);
  }

  uint8_t w6[6] = { 0x0a, 0, 0, 40, 0, 0 };      /* 0 = 256 blocks */
  fill_pattern (buf, 256 * L, 2);
  ok (run (&t, w6, 6, buf, 256 * L) == S4K_SCSI_GOOD &&
      s4k_read (t.d, buf2, 256 * L, 40 * L) == 0 &&
      memcmp (buf, buf2, 256 * L) == 0,
      "%s: WRITE(6) length 0 writes 256 blocks", m->name);
  uint8_t w12[12] = { 0xaa, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0 };
  uint8_t w16[16] = { 0x8a, 0, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 1, 0, 0 };
  fill_pattern (buf, 2 * L, 3);
  ok (run (&t, w12, 12, buf, 2 * L) == S4K_SCSI_GOOD &&
      s4k_read (t.d, buf2, 2 * L, L) == 0 && memcmp (buf, buf2, 2 * L) == 0,
      "%s: WRITE(12)", m->name);
  ok (run (&t, w16, 16, buf, L) == S4K_SCSI_GOOD && last_flags == 0 &&
      s4k_read (t.d, buf2, L, 9 * L) == 0 && memcmp (buf, buf2, L) == 0,
      "%s: WRITE(16) without FUA", m->name);

  uint8_t r10z[10] = { 0x28, 0, 0, 0, 0, 5, 0, 0, 0, 0 };
  ok (run (&t, r10z, 10, buf2, SIZE) == S4K_SCSI_GOOD && last_ops == 0 &&
      last.data_in_len == 0, "%s: READ(10) of 0 blocks: GOOD, nothing read",
      m->name);

  /* Range, limits, buffers. */
  uint8_t r16o[16] = { 0x88, 0 };
  put64 (r16o + 2, blocks - 1);
  put32 (r16o + 10, 2);
  run (&t, r16o, 16, buf2, SIZE);
  ok (sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x21, 0) && last_ops == 0,
      "%s: READ(16) past the end: LBA OUT OF RANGE", m->name);
  put64 (r16o + 2, UINT64_MAX);
  put32 (r16o + 10, 2);
  run (&t, r16o, 16, buf2, SIZE);
  ok (sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x21, 0) && last_ops == 0,
      "%s: READ(16) at LBA 2^64-1 (wrapping): LBA OUT OF RANGE", m->name);
  uint8_t w16o[16] = { 0x8a, 0 };
  put64 (w16o + 2, blocks);
  put32 (w16o + 10, 1);
  run (&t, w16o, 16, buf, SIZE);
  ok (sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x21, 0) && last_ops == 0,
      "%s: WRITE(16) at the capacity: LBA OUT OF RANGE", m->name);
  put64 (w16o + 2, 0);
  put32 (w16o + 10, S4K_DEFAULT_MAX_REQUEST / L + 1);
  run (&t, w16o, 16, buf, SIZE);
  ok (sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x24, 0) &&
      field_is (true, 10, -1) && last_ops == 0,
      "%s: WRITE(16) over max-request: INVALID FIELD IN CDB at byte 10",
      m->name);
  put32 (w16o + 10, 4);
  run (&t, w16o, 16, buf, 4 * L - 1);
  ok (sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x24, 0) && last_ops == 0,
      "%s: WRITE(16) with less data than its length: refused", m->name);
  w16o[1] = 0x20;               /* WRPROTECT */
  run (&t, w16o, 16, buf, SIZE);
  ok (sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x24, 0) && field_is (true, 1, 5)
      && last_ops == 0, "%s: WRITE(16) with WRPROTECT: INVALID FIELD IN CDB "
      "at byte 1 bit 5", m->name);
  w16o[1] = 0;
  w16o[15] = 0x04;              /* NACA */
  run (&t, w16o, 16, buf, SIZE);
  ok (sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x24, 0) && field_is (true, 15, 2),
      "%s: NACA in the control byte: INVALID FIELD IN CDB", m->name);
  run (&t, w16o, 9, buf, SIZE);
  ok (sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x24, 0) && last_ops == 0,
      "%s: a 9-byte WRITE(16): INVALID FIELD IN CDB", m->name);

  /* SYNCHRONIZE CACHE */
  uint8_t s10[10] = { 0x35 };
  uint8_t s16[16] = { 0x91 };
  ok (run (&t, s10, 10, NULL, 0) == S4K_SCSI_GOOD &&
      last_kinds == 1u << S4K_SCSI_OP_FLUSH, "%s: SYNCHRONIZE CACHE(10): a "
      "flush", m->name);
  put64 (s16 + 2, blocks);
  run (&t, s16, 16, NULL, 0);
  ok (sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x21, 0),
      "%s: SYNCHRONIZE CACHE(16) past the end: LBA OUT OF RANGE", m->name);

  /* WRITE SAME */
  memset (buf, 0, L);
  uint8_t ws16[16] = { 0x93, 0x08 };
  put64 (ws16 + 2, 3);
  put32 (ws16 + 10, 16);
  ok (run (&t, ws16, 16, buf, L) == S4K_SCSI_GOOD &&
      last_kinds == 1u << S4K_SCSI_OP_ZERO && last_flags == S4K_MAY_TRIM &&
      s4k_read (t.d, buf2, 16 * L, 3 * L) == 0 && all_zero_check (buf2, 16 * L),
      "%s: WRITE SAME(16) UNMAP of zeroes: a zero that may trim", m->name);
  ws16[1] = 0x01;               /* NDOB */
  ok (run (&t, ws16, 16, NULL, 0) == S4K_SCSI_GOOD &&
      last_kinds == 1u << S4K_SCSI_OP_ZERO && last_flags == 0,
      "%s: WRITE SAME(16) NDOB: a zero, no data-out", m->name);
  ws16[1] = 0;
  memset (buf, 0x5a, L);
  put32 (ws16 + 10, 300);
  ok (run (&t, ws16, 16, buf, L) == S4K_SCSI_GOOD &&
      last_kinds == 1u << S4K_SCSI_OP_WRITE, "%s: WRITE SAME(16) of a "
      "pattern: writes (%u)", m->name, last_ops);
  memset (buf2, 0, 302 * L);
  s4k_read (t.d, buf2, 302 * L, 2 * L);
  bool same = true;
  for (uint64_t i = 0; i < 300 * L; i++)
    same &= buf2[L + i] == 0x5a;
  ok (same && buf2[L - 1] != 0x5a, "%s: ... exactly the 300 blocks hold it",
      m->name);
  put32 (ws16 + 10, 0);
  run (&t, ws16, 16, buf, L);
  ok (sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x24, 0) && last_ops == 0,
      "%s: WRITE SAME of 0 blocks (WSNZ): INVALID FIELD IN CDB", m->name);
  put32 (ws16 + 10, (uint32_t) ((1u << 30) / L + 1));
  run (&t, ws16, 16, buf, L);
  ok (sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x24, 0) && last_ops == 0,
      "%s: WRITE SAME over its maximum: INVALID FIELD IN CDB", m->name);
  put32 (ws16 + 10, 1);
  run (&t, ws16, 16, buf, L - 1);
  ok (sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x1a, 0) && last_ops == 0,
      "%s: WRITE SAME without its block: PARAMETER LIST LENGTH ERROR",
      m->name);
  uint8_t ws10[10] = { 0x41, 0x08, 0, 0, 0, 2, 0, 0, 4, 0 };
  memset (buf, 0, L);
  ok (run (&t, ws10, 10, buf, L) == S4K_SCSI_GOOD &&
      last_kinds == 1u << S4K_SCSI_OP_ZERO, "%s: WRITE SAME(10) UNMAP",
      m->name);
  ws10[1] = 0x01;
  run (&t, ws10, 10, buf, L);
  ok (sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x24, 0) && last_ops == 0,
      "%s: WRITE SAME(10) has no NDOB: INVALID FIELD IN CDB", m->name);

  /* UNMAP */
  uint8_t um[10] = { 0x42, 0, 0, 0, 0, 0, 0, 0, 40, 0 };
  uint8_t pl[40] = { 0, 38, 0, 32 };
  put64 (pl + 8, 0);
  put32 (pl + 16, (uint32_t) (m->P / L * 2));
  put64 (pl + 24, 100);
  put32 (pl + 32, 1);
  ok (run (&t, um, 10, pl, 40) == S4K_SCSI_GOOD && last_ops == 2 &&
      last_kinds == 1u << S4K_SCSI_OP_TRIM, "%s: UNMAP of 2 descriptors: 2 "
      "trims", m->name);
  um[8] = 36;                   /* the second descriptor cut: ignored */
  ok (run (&t, um, 10, pl, 40) == S4K_SCSI_GOOD && last_ops == 1,
      "%s: UNMAP whose list cuts a descriptor: the whole ones only", m->name);
  um[8] = 6;
  run (&t, um, 10, pl, 40);
  ok (sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x1a, 0) && last_ops == 0,
      "%s: UNMAP list of 6 bytes: PARAMETER LIST LENGTH ERROR", m->name);
  um[8] = 40;
  run (&t, um, 10, pl, 39);
  ok (sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x1a, 0) && last_ops == 0,
      "%s: UNMAP list past the data: PARAMETER LIST LENGTH ERROR", m->name);
  put64 (pl + 24, blocks);
  run (&t, um, 10, pl, 40);
  ok (sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x21, 0) && last_ops == 0,
      "%s: UNMAP past the end: LBA OUT OF RANGE, nothing trimmed", m->name);
  put64 (pl + 24, 0);
  put32 (pl + 32, (uint32_t) ((1u << 30) / L + 1));
  run (&t, um, 10, pl, 40);
  ok (sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x26, 0) &&
      field_is (false, 32, -1) && last_ops == 0,
      "%s: UNMAP count over the maximum: INVALID FIELD IN PARAMETER LIST",
      m->name);
  um[8] = 0;
  ok (run (&t, um, 10, NULL, 0) == S4K_SCSI_GOOD && last_ops == 0,
      "%s: UNMAP of an empty list: GOOD", m->name);
  um[1] = 0x01;
  run (&t, um, 10, pl, 40);
  ok (sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x24, 0),
      "%s: UNMAP ANCHOR: INVALID FIELD IN CDB", m->name);

  /* VERIFY */
  fill_pattern (buf, 8 * L, 4);
  s4k_write (t.d, buf, 8 * L, 20 * L, 0);
  uint8_t v10[10] = { 0x2f, 0, 0, 0, 0, 20, 0, 0, 8, 0 };
  ok (run (&t, v10, 10, NULL, 0) == S4K_SCSI_GOOD &&
      last_kinds == 1u << S4K_SCSI_OP_READ && last.data_in_len == 0,
      "%s: VERIFY(10) BYTCHK=0: reads the medium", m->name);
  v10[1] = 0x02;
  ok (run (&t, v10, 10, buf, 8 * L) == S4K_SCSI_GOOD,
      "%s: VERIFY(10) BYTCHK=1 of the same data: GOOD", m->name);
  buf[3 * L + 5] ^= 1;
  run (&t, v10, 10, buf, 8 * L);
  ok (sense_is (S4K_SENSE_MISCOMPARE, 0x1d, 0) && info_is (3 * L + 5),
      "%s: VERIFY BYTCHK=1 of other data: MISCOMPARE at byte %u", m->name,
      3 * L + 5);
  v10[1] = 0x04;
  run (&t, v10, 10, buf, 8 * L);
  ok (sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x24, 0) && field_is (true, 1, 2),
      "%s: VERIFY BYTCHK=2: INVALID FIELD IN CDB", m->name);
  uint8_t v16[16] = { 0x8f, 0x06 };
  put64 (v16 + 2, 200);
  put32 (v16 + 10, 3);
  memset (buf, 0x5a, L);
  ok (run (&t, v16, 16, buf, L) == S4K_SCSI_GOOD,
      "%s: VERIFY(16) BYTCHK=3: every block equals the one sent", m->name);

  /* TEST UNIT READY, START STOP UNIT, REQUEST SENSE, unknown ops. */
  uint8_t ssu[6] = { 0x1b, 0, 0, 0, 0, 0 };
  ok (run (&t, ssu, 6, NULL, 0) == S4K_SCSI_GOOD &&
      last_kinds == 1u << S4K_SCSI_OP_FLUSH, "%s: STOP UNIT flushes",
      m->name);
  ssu[4] = 0x05;
  ok (run (&t, ssu, 6, NULL, 0) == S4K_SCSI_GOOD && last_ops == 0,
      "%s: START UNIT: GOOD", m->name);
  uint8_t rs[6] = { 0x03, 0, 0, 0, 252, 0 };
  ok (run (&t, rs, 6, buf, sizeof buf) == S4K_SCSI_GOOD &&
      last.data_in_len == 18 && buf[0] == 0x70 && buf[2] == 0 &&
      buf[12] == 0, "%s: REQUEST SENSE: NO SENSE", m->name);
  rs[1] = 1;
  run (&t, rs, 6, buf, sizeof buf);
  ok (sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x24, 0),
      "%s: REQUEST SENSE DESC=1: INVALID FIELD IN CDB (fixed format only)",
      m->name);
  const uint8_t unknown[][16] = { { 0x07 }, { 0x85 }, { 0xa0 }, { 0x7f },
                                  { 0x4d }, { 0x9e, 0x11 } };
  for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
    run (&t, unknown[i], 16, buf, sizeof buf);
    const bool sa = unknown[i][0] == 0x9e;
    ok (sense_is (S4K_SENSE_ILLEGAL_REQUEST, sa ? 0x24 : 0x20, 0) &&
        last_ops == 0, "%s: %02Xh%s: %s", m->name, unknown[i][0],
        sa ? "/11h" : "", sa ? "INVALID FIELD IN CDB"
                             : "INVALID COMMAND OPERATION CODE");
  }
  run (&t, unknown[0], 0, NULL, 0);
  ok (sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x20, 0),
      "%s: an empty CDB: INVALID COMMAND OPERATION CODE", m->name);
  scsi_rig_close (&t);
}


/* ---- errors: bad sectors, power cuts, read-only, the errno map -------- */

static void
test_faults (const struct model *m)
{
  struct scsi_rig t;
  const char *extra[] = { "bad-sectors=9", "write-cache=true", NULL };
  rig_open (&t, m, extra);
  const uint32_t L = t.L;
  clear_ua (&t, m->name);
  uint64_t s, e;
  s4k_sector_range (t.g, s4k_sector_index (t.g, 9 * L), &s, &e);
  const uint64_t first = s / L;
  /* Data around the bad sector (whole sectors elsewhere; the bad one's
   * own contents never got written). */
  fill_pattern (buf, 64 * L, 5);
  if (first > 0)
    s4k_write (t.d, buf, first * L, 0, 0);
  s4k_write (t.d, buf + e, 64 * L - e, e, 0);

  uint8_t r10[10] = { 0x28, 0, 0, 0, 0, 0, 0, 0, 32, 0 };
  memset (buf2, 0, 32 * L);
  run (&t, r10, 10, buf2, SIZE);
  ok (sense_is (S4K_SENSE_MEDIUM_ERROR, 0x11, 0) && info_is (first) &&
      last.data_in_len == first * L && memcmp (buf, buf2, first * L) == 0,
      "%s: READ over bad LBA 9: UNRECOVERED READ ERROR at LBA %" PRIu64
      ", the %" PRIu64 " bytes before it returned", m->name, first,
      first * L);
  uint8_t v16[16] = { 0x8f, 0 };
  put32 (v16 + 10, 32);
  run (&t, v16, 16, NULL, 0);
  ok (sense_is (S4K_SENSE_MEDIUM_ERROR, 0x11, 0) && info_is (first),
      "%s: VERIFY over it: UNRECOVERED READ ERROR at LBA %" PRIu64, m->name,
      first);
  r10[5] = (uint8_t) (e / L);
  r10[8] = 4;
  ok (run (&t, r10, 10, buf2, SIZE) == S4K_SCSI_GOOD,
      "%s: READ after the bad sector: GOOD", m->name);
  if (m->P > m->L) {
    uint8_t w10[10] = { 0x2a, 0, 0, 0, 0, 9, 0, 0, 1, 0 };
    run (&t, w10, 10, buf, L);
    ok (sense_is (S4K_SENSE_MEDIUM_ERROR, 0x0c, 0) && info_is (9),
        "%s: a partial WRITE into the bad sector: WRITE ERROR at LBA 9",
        m->name);
  }
  /* A whole-sector write repairs it. */
  uint8_t w16[16] = { 0x8a, 0 };
  put64 (w16 + 2, first);
  put32 (w16 + 10, (uint32_t) ((e - s) / L));
  ok (run (&t, w16, 16, buf, SIZE) == S4K_SCSI_GOOD,
      "%s: a whole-sector WRITE of it: GOOD", m->name);
  r10[5] = 0;
  r10[8] = 32;
  ok (run (&t, r10, 10, buf2, SIZE) == S4K_SCSI_GOOD &&
      last.data_in_len == 32 * L, "%s: then the READ is GOOD", m->name);

  /* A power cut between commands: the next one gets the UNIT ATTENTION
   * (INQUIRY does not take it), then all is well. */
  char *rep = NULL;
  s4k_dev_power_cut (t.d, S4K_TORN_NONE, &rep);
  free (rep);
  uint8_t inq[6] = { 0x12, 0, 0, 0, 36, 0 };
  ok (run (&t, inq, 6, buf2, SIZE) == S4K_SCSI_GOOD,
      "%s: INQUIRY after a power cut: GOOD", m->name);
  run (&t, r10, 10, buf2, SIZE);
  ok (sense_is (S4K_SENSE_UNIT_ATTENTION, 0x29, 0x01) && last_ops == 0,
      "%s: the next READ: UNIT ATTENTION / POWER ON OCCURRED", m->name);
  ok (run (&t, r10, 10, buf2, SIZE) == S4K_SCSI_GOOD,
      "%s: and the one after it is GOOD", m->name);
  /* A cut while a write is in flight: NOT READY, not retried. */
  uint8_t w10[10] = { 0x2a, 0, 0, 0, 0, 0, 0, 0, 8, 0 };
  run_cut (&t, w10, 10, buf, SIZE, 1);
  ok (sense_is (S4K_SENSE_NOT_READY, 0x04, 0x00),
      "%s: a WRITE in flight at a cut: NOT READY", m->name);
  uint8_t rs[6] = { 0x03, 0, 0, 0, 18, 0 };
  ok (run (&t, rs, 6, buf2, SIZE) == S4K_SCSI_GOOD && buf2[2] == 6 &&
      buf2[12] == 0x29 && buf2[13] == 0x01,
      "%s: REQUEST SENSE then returns the UNIT ATTENTION", m->name);
  ok (run (&t, w10, 10, buf, SIZE) == S4K_SCSI_GOOD,
      "%s: ... which it cleared: the WRITE is GOOD", m->name);
  scsi_rig_close (&t);
}

static void
test_errno_map (void)
{
  struct scsi_rig t;
  rig_open (&t, &models[1], NULL);
  clear_ua (&t, "errno");
  struct { int r; uint8_t op, key, asc, ascq; bool info; } map[] = {
    { -EIO, 0x28, S4K_SENSE_MEDIUM_ERROR, 0x11, 0, true },
    { -EIO, 0x2a, S4K_SENSE_MEDIUM_ERROR, 0x0c, 0, true },
    { -ENOSPC, 0x2a, S4K_SENSE_DATA_PROTECT, 0x27, 0x07, false },
    { -EROFS, 0x2a, S4K_SENSE_DATA_PROTECT, 0x27, 0x00, false },
    { -ESHUTDOWN, 0x28, S4K_SENSE_NOT_READY, 0x04, 0x00, false },
    { -ECONNRESET, 0x28, S4K_SENSE_ABORTED_COMMAND, 0x08, 0x00, false },
    { -ENOMEM, 0x2a, S4K_SENSE_ABORTED_COMMAND, 0x55, 0x03, false },
    { -EINVAL, 0x2a, S4K_SENSE_ILLEGAL_REQUEST, 0x24, 0x00, false },
    { -EBADF, 0x28, S4K_SENSE_HARDWARE_ERROR, 0x44, 0x00, false },
  };
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
    uint8_t cdb[10] = { map[i].op, 0, 0, 0, 0, 7, 0, 0, 2, 0 };
    struct s4k_scsi_cmd *c = &last;
    unsigned n = s4k_scsi_exec (t.lun, c, cdb, 10, buf, SIZE, 0);
    unsigned more = n ? s4k_scsi_done (t.lun, c, 0, map[i].r, 0) : 99;
    /* A read's EIO first asks for the sectors one by one: fail the
     * first. */
    if (more)
      more = s4k_scsi_done (t.lun, c, 0, map[i].r, 0);
    s4k_scsi_cmd_release (c);
    char d[128];
    s4k_scsi_sense_describe (map[i].key, map[i].asc, map[i].ascq, d,
                             sizeof d);
    ok (n == 1 && more == 0 && sense_is (map[i].key, map[i].asc, map[i].ascq)
        && (!map[i].info || info_is (7)),
        "%s %s -> %s", map[i].op == 0x28 ? "read" : "write",
        s4k_strerror (-map[i].r), d);
  }
  scsi_rig_close (&t);

  const char *ro[] = { NULL };
  rig_open (&t, &models[0], ro);
  struct s4k_scsi_params p = *s4k_scsi_lun_params (t.lun);
  s4k_scsi_lun_free (t.lun);
  p.readonly = true;
  char err[256];
  t.lun = s4k_scsi_lun_new (&p, err, sizeof err);
  clear_ua (&t, "read-only");
  const uint8_t writes[][16] = {
    { 0x2a, 0, 0, 0, 0, 0, 0, 0, 1 }, { 0x0a, 0, 0, 0, 1 },
    { 0x93, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1 },
    { 0x42, 0, 0, 0, 0, 0, 0, 0, 24 },
  };
  uint8_t pl[24] = { 0, 22, 0, 16 };
  pl[19] = 1;
  for (size_t i = 0; i < 4; i++) {
    memcpy (buf, pl, 24);
    run (&t, writes[i], 16, buf, SIZE);
    ok (sense_is (S4K_SENSE_DATA_PROTECT, 0x27, 0) && last_ops == 0,
        "read-only: %s: DATA PROTECT / WRITE PROTECTED",
        s4k_scsi_opcode_name (writes[i][0]));
  }
  uint8_t ms6[6] = { 0x1a, 0x08, 0x3f, 0, 4, 0 };
  ok (run (&t, ms6, 6, buf, SIZE) == S4K_SCSI_GOOD && buf[2] == 0x90,
      "read-only: WP and DPOFUA in MODE SENSE");
  scsi_rig_close (&t);
}

/* ---- malformed input: never an operation that could harm data -------- */

static uint64_t rng = 0x9e3779b97f4a7c15;
static uint64_t
next_rand (void)
{
  return xorshift64 (&rng);
}

static void
test_random (const struct model *m, unsigned rounds)
{
  struct scsi_rig t;
  rig_open (&t, m, NULL);
  static const uint8_t ops[] = { 0x00, 0x03, 0x08, 0x0a, 0x12, 0x15, 0x1a,
    0x1b, 0x25, 0x28, 0x2a, 0x2f, 0x35, 0x41, 0x42, 0x55, 0x5a, 0x88, 0x8a,
    0x8f, 0x91, 0x93, 0x9e, 0xa3, 0xa8, 0xaa };
  unsigned bad_bounds = 0, bad_sense = 0, bad_data = 0, writes = 0;
  for (unsigned i = 0; i < rounds; i++) {
    uint8_t cdb[16];
    for (int k = 0; k < 16; k++)
      cdb[k] = (uint8_t) next_rand ();
    /* Mostly small LBAs and lengths, so some commands pass. */
    const uint64_t r = next_rand ();
    cdb[0] = ops[r % sizeof ops];
    if (r & 0x100)
      /* Mostly zero, small LBAs and lengths, some flag bits: commands
       * that pass the checks and run. */
      for (int k = 1; k < 16; k++)
        cdb[k] = k == 1 ? cdb[k] & ((r & 0x200) ? 0x0a : 0x18)
               : ((k == 4 && (r & 0x1000)) || k == 5 || k == 8 || k == 9 ||
                  k == 13)
                   ? cdb[k] & 0x1f : 0;
    size_t len = (r & 0x800) ? 16 : (r >> 12) % 17;
    size_t data_len = (r >> 20) % 3 == 0 ? 0 : (r >> 22) % (64 * 1024);
    for (size_t k = 0; k < data_len && k < 256; k++)
      buf[k] = (uint8_t) next_rand ();
    uint8_t st = run (&t, cdb, len, buf, data_len);
    bad_bounds += !ops_in_bounds;
    writes += (last_kinds & ((1u << S4K_SCSI_OP_WRITE) |
                             (1u << S4K_SCSI_OP_ZERO) |
                             (1u << S4K_SCSI_OP_TRIM))) != 0;
    bad_data += last.data_in_len > data_len;
    uint8_t k, a, q;
    bool iv;
    uint64_t info;
    if (st == S4K_SCSI_CHECK_CONDITION)
      bad_sense += last.sense_len != 18 ||
                   s4k_scsi_sense_parse (last.sense, last.sense_len, &k, &a,
                                         &q, &iv, &info) != 0;
    else
      bad_sense += st != S4K_SCSI_GOOD || last.sense_len != 0;
  }
  ok (bad_bounds == 0 && bad_sense == 0 && bad_data == 0,
      "%s: %u random CDBs: every op within the device, sense well-formed, "
      "data-in within the buffer (%u wrote)", m->name, rounds, writes);
  scsi_rig_close (&t);
}

/* ---- atomic writes: Block Limits, RSOC, WRITE ATOMIC(16) --------------- */

/* WRITE ATOMIC(16): LBA, ATOMIC BOUNDARY, TRANSFER LENGTH, FUA. */
static void
wa16 (uint8_t *c, uint64_t lba, uint16_t boundary, uint16_t n, bool fua)
{
  memset (c, 0, 16);
  c[0] = 0x9c;
  c[1] = fua ? 0x08 : 0;
  put64 (c + 2, lba);
  c[10] = boundary >> 8;
  c[11] = (uint8_t) boundary;
  c[12] = n >> 8;
  c[13] = (uint8_t) n;
}

static void
test_atomic (const struct model *m)
{
  struct scsi_rig t;
  const uint32_t L = m->L, P = m->P;
  const uint32_t max = P * 4 > 16384 ? P * 4 : 16384;
  rig_atomic = (struct s4k_atomic) { .max = max, .min = P };
  rig_open (&t, m, NULL);
  rig_atomic = (struct s4k_atomic) { 0 };
  clear_ua (&t, m->name);
  const uint32_t maxb = max / L, gran = P / L;

  /* Block Limits: the atomic fields where sd_read_block_limits reads
   * them (bytes 44-63 of a 0x3c page), in logical blocks. */
  uint8_t inq[6] = { 0x12, 1, 0xb0, 0, 255, 0 };
  uint8_t want[20] = { 0 };
  put32 (want, maxb);
  put32 (want + 4, gran);
  put32 (want + 8, gran);
  ok (run (&t, inq, 6, buf, sizeof buf) == S4K_SCSI_GOOD &&
      last.data_in_len == 64 && buf[2] == 0 && buf[3] == 0x3c &&
      bytes_are (buf + 44, want, sizeof want),
      "%s: VPD B0h atomic fields: MAXIMUM ATOMIC TRANSFER LENGTH %u, ATOMIC "
      "ALIGNMENT %u, GRANULARITY %u blocks, no boundary fields", m->name,
      maxb, gran, gran);

  /* REPORT SUPPORTED OPERATION CODES lists it. */
  uint8_t rsoc[12] = { 0xa3, 0x0c, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0 };
  bool listed = false;
  if (run (&t, rsoc, 12, buf, sizeof buf) == S4K_SCSI_GOOD)
    for (uint64_t i = 4; i + 8 <= last.data_in_len; i += 8)
      listed |= buf[i] == 0x9c && buf[i + 7] == 16;
  ok (listed, "%s: REPORT SUPPORTED OPERATION CODES lists WRITE ATOMIC(16) "
      "(9Ch, 16 bytes)", m->name);
  uint8_t rsoc1[12] = { 0xa3, 0x0c, 1, 0x9c, 0, 0, 0, 0, 0, 64, 0, 0 };
  const uint8_t usage[4 + 16] = { 0, 0x03, 0, 16, 0x9c, 0x18, 0xff, 0xff,
                                  0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                  0xff, 0xff, 0xff, 0x3f, 0 };
  ok (run (&t, rsoc1, 12, buf, sizeof buf) == S4K_SCSI_GOOD &&
      last.data_in_len == sizeof usage && bytes_are (buf, usage, sizeof usage),
      "%s: RSOC of 9Ch: supported, CDB usage DPO FUA, LBA, ATOMIC BOUNDARY, "
      "TRANSFER LENGTH, GROUP NUMBER", m->name);

  /* The largest atomic write, with FUA: one S4K_ATOMIC | S4K_FUA write,
   * the data on the medium. */
  uint8_t c[16];
  const uint64_t lba = 2 * (uint64_t) maxb;
  fill_pattern (buf2, max, 27);
  wa16 (c, lba, 0, (uint16_t) maxb, true);
  ok (run (&t, c, 16, buf2, max) == S4K_SCSI_GOOD && last_ops == 1 &&
      last_flags == (S4K_ATOMIC | S4K_FUA),
      "%s: WRITE ATOMIC(16) of %u blocks with FUA: GOOD, one write with "
      "S4K_ATOMIC | S4K_FUA", m->name, maxb);
  ok (s4k_read (t.d, buf, max, lba * L) == 0 && memcmp (buf, buf2, max) == 0,
      "%s: WRITE ATOMIC(16): the data is on the device", m->name);
  wa16 (c, lba, 0, (uint16_t) gran, false);
  ok (run (&t, c, 16, buf2, gran * L) == S4K_SCSI_GOOD &&
      last_flags == S4K_ATOMIC,
      "%s: WRITE ATOMIC(16) of the granularity (%u blocks) without FUA: "
      "S4K_ATOMIC alone", m->name, gran);
  wa16 (c, lba, 0, 0, false);
  ok (run (&t, c, 16, NULL, 0) == S4K_SCSI_GOOD && last_ops == 0,
      "%s: WRITE ATOMIC(16) of 0 blocks: GOOD, nothing written", m->name);

  /* The refusals: ILLEGAL REQUEST, INVALID FIELD IN CDB at the field. */
  wa16 (c, lba, 0, (uint16_t) (maxb + gran), false);
  run (&t, c, 16, buf2, sizeof buf2);
  ok (sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x24, 0) && field_is (true, 12, -1)
      && last_ops == 0, "%s: TRANSFER LENGTH %u above MAXIMUM ATOMIC "
      "TRANSFER LENGTH: INVALID FIELD IN CDB at byte 12", m->name,
      maxb + gran);
  if (gran > 1) {
    wa16 (c, lba, 0, (uint16_t) (gran + 1), false);
    run (&t, c, 16, buf2, sizeof buf2);
    ok (sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x24, 0) &&
        field_is (true, 12, -1) && last_ops == 0,
        "%s: TRANSFER LENGTH %u not a multiple of the GRANULARITY %u: "
        "INVALID FIELD IN CDB at byte 12", m->name, gran + 1, gran);
    wa16 (c, lba + 1, 0, (uint16_t) gran, false);
    run (&t, c, 16, buf2, sizeof buf2);
    ok (sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x24, 0) &&
        field_is (true, 2, -1) && last_ops == 0,
        "%s: LBA %" PRIu64 " not a multiple of the ATOMIC ALIGNMENT %u: "
        "INVALID FIELD IN CDB at byte 2", m->name, lba + 1, gran);
  }
  /* Across a multiple of the maximum: Block Limits allows it (SBC-4
   * has no naturally aligned unit), so it is GOOD and atomic (issue 32:
   * on 4kn with max 16K, 2 blocks at LBA 3; scsi_debug takes it too). */
  const uint64_t xlba = maxb - gran;
  fill_pattern (buf2, 2 * gran * L, 28);
  wa16 (c, xlba, 0, (uint16_t) (2 * gran), false);
  ok (run (&t, c, 16, buf2, 2 * gran * L) == S4K_SCSI_GOOD &&
      last_ops == 1 && last_flags == S4K_ATOMIC &&
      s4k_read (t.d, buf, 2 * gran * L, xlba * L) == 0 &&
      memcmp (buf, buf2, 2 * gran * L) == 0,
      "%s: WRITE ATOMIC(16) of %u blocks at LBA %" PRIu64 ", across a "
      "multiple of the maximum: GOOD, one S4K_ATOMIC write, the data on "
      "the device", m->name, 2 * gran, xlba);
  fill_pattern (buf2, max, 29);
  wa16 (c, lba + gran, 0, (uint16_t) maxb, false);
  ok (run (&t, c, 16, buf2, max) == S4K_SCSI_GOOD &&
      last_ops == 1 && last_flags == S4K_ATOMIC,
      "%s: WRITE ATOMIC(16) of the maximum at LBA %" PRIu64 " (not a "
      "multiple of it): GOOD", m->name, lba + gran);
  wa16 (c, lba + maxb - gran, 0, (uint16_t) gran, false);
  ok (run (&t, c, 16, buf2, sizeof buf2) == S4K_SCSI_GOOD &&
      last_flags == S4K_ATOMIC, "%s: %u blocks at LBA %" PRIu64 ", within "
      "the unit: GOOD", m->name, gran, lba + maxb - gran);
  wa16 (c, lba, (uint16_t) gran, (uint16_t) gran, false);
  run (&t, c, 16, buf2, sizeof buf2);
  ok (sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x24, 0) && field_is (true, 10, -1)
      && last_ops == 0, "%s: an ATOMIC BOUNDARY (MAXIMUM ATOMIC BOUNDARY "
      "SIZE 0): INVALID FIELD IN CDB at byte 10", m->name);
  wa16 (c, lba, 0, (uint16_t) gran, false);
  run (&t, c, 16, buf2, gran * L - 1);
  ok (sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x24, 0) && field_is (true, 12, -1)
      && last_ops == 0, "%s: WRITE ATOMIC(16) with less data than its "
      "length: INVALID FIELD IN CDB", m->name);
  wa16 (c, SIZE / L, 0, (uint16_t) gran, false);
  run (&t, c, 16, buf2, sizeof buf2);
  ok (sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x21, 0) && last_ops == 0,
      "%s: WRITE ATOMIC(16) past the end: LBA OUT OF RANGE", m->name);
  wa16 (c, lba, 0, (uint16_t) gran, false);
  c[1] |= 0x04;
  run (&t, c, 16, buf2, sizeof buf2);
  ok (sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x24, 0) && field_is (true, 1, 2),
      "%s: WRITE ATOMIC(16) with a reserved bit: INVALID FIELD IN CDB at "
      "byte 1 bit 2", m->name);

  /* A read-only LUN on it: DATA PROTECT. */
  char err[256];
  struct s4k_scsi_params p = *s4k_scsi_lun_params (t.lun);
  p.readonly = true;
  struct s4k_scsi_lun *ro = s4k_scsi_lun_new (&p, err, sizeof err), *rw = t.lun;
  t.lun = ro;
  clear_ua (&t, m->name);
  wa16 (c, lba, 0, (uint16_t) gran, false);
  run (&t, c, 16, buf2, sizeof buf2);
  ok (sense_is (S4K_SENSE_DATA_PROTECT, 0x27, 0) && last_ops == 0,
      "%s: WRITE ATOMIC(16) on a read-only LUN: DATA PROTECT, WRITE "
      "PROTECTED", m->name);
  t.lun = rw;
  s4k_scsi_lun_free (ro);

  /* Limits SCSI cannot state. */
  p.readonly = false;
  p.atomic.max = max + L / 2;
  ok (L > 1 && s4k_scsi_lun_new (&p, err, sizeof err) == NULL,
      "%s: atomic max not a multiple of the logical block refused: %s",
      m->name, err);
  p.atomic.max = p.max_request * 2;
  ok (s4k_scsi_lun_new (&p, err, sizeof err) == NULL,
      "%s: atomic max above max-request refused", m->name);
  scsi_rig_close (&t);

  /* Without atomic writes: no fields, not listed, not run. */
  rig_open (&t, m, NULL);
  clear_ua (&t, m->name);
  ok (run (&t, inq, 6, buf, sizeof buf) == S4K_SCSI_GOOD &&
      all_zero_check (buf + 44, 20),
      "%s: without atomic writes the B0h atomic fields are 0", m->name);
  listed = false;
  if (run (&t, rsoc, 12, buf, sizeof buf) == S4K_SCSI_GOOD)
    for (uint64_t i = 4; i + 8 <= last.data_in_len; i += 8)
      listed |= buf[i] == 0x9c;
  ok (!listed && run (&t, rsoc1, 12, buf, sizeof buf) == S4K_SCSI_GOOD &&
      buf[1] == 0x01, "%s: without atomic writes RSOC does not list 9Ch "
      "(SUPPORT 001b)", m->name);
  wa16 (c, 0, 0, 1, false);
  run (&t, c, 16, buf2, sizeof buf2);
  ok (sense_is (S4K_SENSE_ILLEGAL_REQUEST, 0x20, 0) && field_is (true, 0, -1)
      && last_ops == 0, "%s: without atomic writes WRITE ATOMIC(16) is "
      "INVALID COMMAND OPERATION CODE", m->name);
  scsi_rig_close (&t);
}

int
main (void)
{
  const bool san = getenv ("SECT4K_SAN") && *getenv ("SECT4K_SAN");
  for (size_t i = 0; i < NMODELS; i++)
    test_pages (&models[i]);
  test_modes ();
  for (size_t i = 0; i < NMODELS; i++)
    test_media (&models[i]);
  for (size_t i = 0; i < NMODELS; i++)
    test_faults (&models[i]);
  test_errno_map ();
  for (size_t i = 0; i < NMODELS; i++)
    test_atomic (&models[i]);
  for (size_t i = 0; i < NMODELS; i++)
    test_random (&models[i], san ? 2000 : 20000);
  printf ("1..%u\n", tap_n);
  return tap_failed != 0;
}
