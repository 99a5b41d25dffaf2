/* SPDX-License-Identifier: BSD-3-Clause */
/* The SCSI command layer (include/sect4k/scsi.h): SPC-5 and SBC-4 as far
 * as a Linux initiator (sd.c, sg3-utils) needs them, over the engine's
 * geometry.  Pure: every command either completes here or becomes a list
 * of engine operations that the caller runs.
 *
 * One table (commands[]) names each command with its CDB length and the
 * bits of each CDB byte it interprets (the CDB usage data REPORT SUPPORTED
 * OPERATION CODES returns): any other bit set is refused with INVALID
 * FIELD IN CDB and a field pointer to it, before anything else runs.
 *
 * This file: the LUN, the command table and REPORT SUPPORTED OPERATION
 * CODES (which reads it), s4k_scsi_exec / s4k_scsi_done.  The commands
 * are in scsi_spc.c (primary commands) and scsi_sbc.c (block commands),
 * sense data in scsi_sense.c; scsi_priv.h is what they share. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scsi_priv.h"
#include "sect4k/zone.h"

/* ---- the LUN ------------------------------------------------------------ */

/* FNV-1a: a stable identity from the name and geometry. */
static uint64_t
fnv1a (uint64_t h, const void *p, size_t n)
{
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++)
    h = (h ^ b[i]) * UINT64_C (0x100000001b3);
  return h;
}

static void
size_name (char *buf, size_t len, uint32_t bytes)
{
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0)
    snprintf (buf, len, "%" PRIu32 "M", bytes >> 20);
  else if (bytes >= 1024 && bytes % 1024 == 0)
    snprintf (buf, len, "%" PRIu32 "k", bytes >> 10);
  else
    snprintf (buf, len, "%" PRIu32, bytes);
}

/* The product name, serial and NAA id: stable per name and geometry.
 * g is the geometry the keys gave, so a FORMAT UNIT to another block
 * length (kept across restarts beside file=) leaves them as they were,
 * as on a drive. */
static void
identity (struct s4k_scsi_params *p, const struct s4k_geometry *g,
          const char *name)
{
  char model[32], l[12], ph[12];
  if (g->logical == 512 && g->physical == 512)
    snprintf (model, sizeof model, "512n");
  else if (g->logical == 512 && g->physical == 4096 && g->alignment == 0)
    snprintf (model, sizeof model, "512e");
  else if (g->logical == 512 && g->physical == 4096 && g->alignment == 3584)
    snprintf (model, sizeof model, "512e-xp");
  else if (g->logical == 4096 && g->physical == 4096)
    snprintf (model, sizeof model, "4kn");
  else {
    size_name (l, sizeof l, g->logical);
    size_name (ph, sizeof ph, g->physical);
    snprintf (model, sizeof model, "%sx%s%s", l, ph, g->alignment ? "+a" : "");
  }
  snprintf (p->product, sizeof p->product, "sect4k %.9s", model);
  /* "0.1.0" -> "0.1 ": the first four characters. */
  snprintf (p->revision, sizeof p->revision, "%.4s", S4K_VERSION);
  uint64_t h = UINT64_C (0xcbf29ce484222325);
  if (name)
    h = fnv1a (h, name, strlen (name));
  h = fnv1a (h, &g->size, sizeof g->size);
  h = fnv1a (h, &g->logical, sizeof g->logical);
  h = fnv1a (h, &g->physical, sizeof g->physical);
  h = fnv1a (h, &g->alignment, sizeof g->alignment);
  snprintf (p->serial, sizeof p->serial, "%016" PRIX64, h);
  p->naa_id = h & ((UINT64_C (1) << 60) - 1);
}

void
s4k_scsi_params_init (struct s4k_scsi_params *p, const struct s4k_geometry *g,
                      uint32_t max_request, const char *name)
{
  memset (p, 0, sizeof *p);
  p->geom = *g;
  p->max_request = max_request;
  p->lbprz = true;
  p->format_lengths = 1u << __builtin_ctz (g->logical);
  p->rotation_rate = 1;         /* no timing model: non-rotating */
  snprintf (p->vendor, sizeof p->vendor, "SECT4K");
  /* The model as the presets name it, else LxP (+A). */
  identity (p, g, name);
}

void
s4k_scsi_params_from_config (struct s4k_scsi_params *p,
                             const struct s4k_config *c,
                             const struct s4k_geometry *g,
                             uint32_t max_request)
{
  s4k_scsi_params_init (p, g, max_request, c->name);
  /* The identity of the keys' geometry, not of a block length a FORMAT
   * UNIT of an earlier start left (lib/dev/dev_format.c). */
  struct s4k_geometry keys_geom = *g;
  keys_geom.logical = c->geom.logical;
  identity (p, &keys_geom, c->name);
  p->write_cache = c->fault.write_cache;
  p->readonly = c->readonly;
  p->lbprz = c->upstream == NULL;
  p->rotation_rate = s4k_timing_rotation_rate (&c->timing);
  p->atomic = c->atomic;
  p->sata = c->sata;
  if (p->sata)                  /* a SATL's INQUIRY (SAT-4 12.4.1) */
    snprintf (p->vendor, sizeof p->vendor, "ATA");
}

static unsigned
lun_shift (const struct s4k_geometry *g)
{
  return (unsigned) __builtin_ctz (g->logical);
}

/* The rules a LUN's parameters keep: 0, or -1 with err filled. */
int
scsi_lun_check (const struct s4k_scsi_params *p, char *err, size_t errlen)
{
  const struct s4k_geometry *g = &p->geom;
  if (s4k_geometry_check (g, err, errlen) == -1)
    return -1;
  const uint32_t ratio = g->physical / g->logical;
  /* READ CAPACITY(16) has 4 bits for the exponent, 14 for the lowest
   * aligned LBA. */
  if (ratio > 32768) {
    snprintf (err, errlen, "physical=%" PRIu32 " logical=%" PRIu32 ": SCSI "
              "cannot state more than 32768 logical blocks per physical "
              "block", g->physical, g->logical);
    return -1;
  }
  if (s4k_lowest_aligned (g) > 0x3fff) {
    snprintf (err, errlen, "alignment-offset=%" PRIu32 ": SCSI cannot state "
              "a lowest aligned LBA above 16383", g->alignment);
    return -1;
  }
  /* ATA has 14 bits for LBA 0's offset (word 209), 48 for the
   * capacity. */
  if (p->sata && scsi_ata_lba0_offset (g) > 0x3fff) {
    snprintf (err, errlen, "alignment-offset=%" PRIu32 ": ATA cannot state "
              "LBA 0 more than 16383 logical sectors into its physical "
              "sector (IDENTIFY word 209)", g->alignment);
    return -1;
  }
  if (p->sata && (g->size >> lun_shift (g)) >> 48) {
    snprintf (err, errlen, "size=%" PRIu64 ": ATA addresses at most 2^48 "
              "logical sectors", g->size);
    return -1;
  }
  if (p->max_request < g->logical) {
    snprintf (err, errlen, "max-request=%" PRIu32 ": smaller than logical=%"
              PRIu32, p->max_request, g->logical);
    return -1;
  }
  const struct s4k_atomic *a = &p->atomic;
  if (a->max && (a->max % g->logical || a->min % g->logical ||
                 a->boundary % g->logical || a->max > p->max_request)) {
    snprintf (err, errlen, "atomic-write-max=%" PRIu32 " atomic-write-min=%"
              PRIu32 " atomic-write-boundary=%" PRIu32 ": SCSI states atomic "
              "limits in logical blocks of %" PRIu32 " bytes, at most "
              "max-request=%" PRIu32, a->max, a->min, a->boundary,
              g->logical, p->max_request);
    return -1;
  }
  if (p->zones) {
    struct s4k_zones_info zi = { 0 };
    s4k_zones_info (p->zones, &zi);
    /* ZBC-2 reports the open limit only (B6h); Linux's max_active_zones
     * is 0 for SCSI: a host would meet a limit it was never told of. */
    if (zi.max_active) {
      snprintf (err, errlen, "zone-max-active=%" PRIu32 ": SCSI has no "
                "field for it (ZBC-2 states the open limit only): use "
                "zone-max-open=", zi.max_active);
      return -1;
    }
  }
  return 0;
}

struct s4k_scsi_lun *
s4k_scsi_lun_new (const struct s4k_scsi_params *p, char *err, size_t errlen)
{
  if (scsi_lun_check (p, err, errlen) == -1)
    return NULL;
  const struct s4k_geometry *g = &p->geom;
  struct s4k_zones_info zi = { 0 };
  if (p->zones)
    s4k_zones_info (p->zones, &zi);
  struct s4k_scsi_lun *lun = calloc (1, sizeof *lun);
  if (!lun) {
    snprintf (err, errlen, "out of memory");
    return NULL;
  }
  lun->zoned = (uint8_t) zi.model;
  lun->max_open = zi.max_open;
  lun->p = *p;
  lun->lshift = __builtin_ctz (g->logical);
  lun->blocks = g->size >> lun->lshift;
  lun->ua = POWER_ON_RESET;     /* a disk just attached */
  scsi_format_lengths_check (lun);
  return lun;
}

void
s4k_scsi_lun_free (struct s4k_scsi_lun *lun)
{
  free (lun);
}

const struct s4k_scsi_params *
s4k_scsi_lun_params (const struct s4k_scsi_lun *lun)
{
  return &lun->p;
}

void
s4k_scsi_unit_attention (struct s4k_scsi_lun *lun, uint8_t asc, uint8_t ascq)
{
  lun->ua = ASC (asc, ascq);
}

/* ---- completing a command ------------------------------------------------ */

/* Data-in of a command that completes here: n bytes of buf, cut to the
 * allocation length and to the caller's buffer. */
unsigned
scsi_data_in (struct ctx *x, const void *buf, size_t n, uint64_t alloc)
{
  if (n > alloc)
    n = alloc;
  if (n > x->data_len)
    n = x->data_len;
  if (n)
    memcpy (x->data, buf, n);
  x->cmd->data_in_len = n;
  return scsi_good (x->cmd);
}

/* Operations the command owns: its inline pair, else an array. */
struct s4k_scsi_op *
scsi_ops_alloc (struct s4k_scsi_cmd *cmd, size_t n)
{
  struct s4k_scsi_op *ops = cmd->priv.inline_ops;
  if (n > sizeof cmd->priv.inline_ops / sizeof cmd->priv.inline_ops[0]) {
    ops = calloc (n, sizeof *ops);
    if (!ops)
      return NULL;
    free (cmd->priv.owned_ops);
    cmd->priv.owned_ops = ops;
  }
  memset (ops, 0, n * sizeof *ops);
  cmd->ops = ops;
  cmd->nops = (unsigned) n;
  return ops;
}

unsigned
scsi_one_op (struct s4k_scsi_cmd *cmd, enum s4k_scsi_op_kind kind, void *buf,
             uint64_t len, uint64_t off, unsigned flags)
{
  struct s4k_scsi_op *op = scsi_ops_alloc (cmd, 1);
  op->kind = kind;
  op->buf = buf;
  op->len = len;
  op->off = off;
  op->flags = flags;
  return 1;
}

/* -- REPORT SUPPORTED OPERATION CODES -- */

static unsigned cmd_rsoc (struct ctx *x);

#define C6 { 0xff, 0xff, 0xff, 0xff, 0xff, 0 }
static const struct command commands[] = {
  { 0x00, -1, 6, false, "TEST UNIT READY", scsi_cmd_test_unit_ready,
    { 0xff, 0, 0, 0, 0, 0 } },
  { 0x03, -1, 6, true, "REQUEST SENSE", scsi_cmd_request_sense,
    { 0xff, 0, 0, 0, 0xff, 0 } },
  { 0x04, -1, 6, false, "FORMAT UNIT", scsi_cmd_format_unit,
    { 0xff, 0x3f, 0, 0, 0x03, 0 } },
  { 0x08, -1, 6, false, "READ(6)", scsi_cmd_rw6, { 0xff, 0x1f, 0xff, 0xff, 0xff, 0 } },
  { 0x0a, -1, 6, false, "WRITE(6)", scsi_cmd_rw6, { 0xff, 0x1f, 0xff, 0xff, 0xff, 0 } },
  { 0x12, -1, 6, true, "INQUIRY", scsi_cmd_inquiry, { 0xff, 0x01, 0xff, 0xff, 0xff, 0 } },
  { 0x15, -1, 6, false, "MODE SELECT(6)", scsi_cmd_mode_select6,
    { 0xff, 0x10, 0, 0, 0xff, 0 } },
  { 0x1a, -1, 6, false, "MODE SENSE(6)", scsi_cmd_mode_sense6,
    { 0xff, 0x08, 0xff, 0xff, 0xff, 0 } },
  { 0x1b, -1, 6, false, "START STOP UNIT", scsi_cmd_start_stop_unit,
    { 0xff, 0x01, 0, 0x0f, 0xf7, 0 } },
  { 0x25, -1, 10, false, "READ CAPACITY(10)", scsi_cmd_read_capacity10,
    { 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0 } },
  { 0x28, -1, 10, false, "READ(10)", scsi_cmd_rw10,
    { 0xff, 0x18, 0xff, 0xff, 0xff, 0xff, 0x1f, 0xff, 0xff, 0 } },
  { 0x2a, -1, 10, false, "WRITE(10)", scsi_cmd_rw10,
    { 0xff, 0x18, 0xff, 0xff, 0xff, 0xff, 0x1f, 0xff, 0xff, 0 } },
  { 0x2f, -1, 10, false, "VERIFY(10)", scsi_cmd_verify10,
    { 0xff, 0x16, 0xff, 0xff, 0xff, 0xff, 0x1f, 0xff, 0xff, 0 } },
  { 0x35, -1, 10, false, "SYNCHRONIZE CACHE(10)", scsi_cmd_sync10,
    { 0xff, 0x02, 0xff, 0xff, 0xff, 0xff, 0x1f, 0xff, 0xff, 0 } },
  { 0x41, -1, 10, false, "WRITE SAME(10)", scsi_cmd_write_same10,
    { 0xff, 0x08, 0xff, 0xff, 0xff, 0xff, 0x1f, 0xff, 0xff, 0 } },
  { 0x42, -1, 10, false, "UNMAP", scsi_cmd_unmap,
    { 0xff, 0, 0, 0, 0, 0, 0x1f, 0xff, 0xff, 0 } },
  { 0x55, -1, 10, false, "MODE SELECT(10)", scsi_cmd_mode_select10,
    { 0xff, 0x10, 0, 0, 0, 0, 0, 0xff, 0xff, 0 } },
  { 0x5a, -1, 10, false, "MODE SENSE(10)", scsi_cmd_mode_sense10,
    { 0xff, 0x18, 0xff, 0xff, 0, 0, 0, 0xff, 0xff, 0 } },
  /* Listed and run only on a LUN with the SATA identity (p.sata). */
  { 0x85, -1, 16, false, "ATA PASS-THROUGH(16)", scsi_cmd_ata_passthru,
    { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
      0xff, 0xff, 0xff, 0xff, 0xff, 0 } },
  { 0x88, -1, 16, false, "READ(16)", scsi_cmd_rw16,
    { 0xff, 0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
      0xff, 0xff, 0xff, 0xff, 0x3f, 0 } },
  { 0x8a, -1, 16, false, "WRITE(16)", scsi_cmd_rw16,
    { 0xff, 0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
      0xff, 0xff, 0xff, 0xff, 0x3f, 0 } },
  { 0x8f, -1, 16, false, "VERIFY(16)", scsi_cmd_verify16,
    { 0xff, 0x16, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
      0xff, 0xff, 0xff, 0xff, 0x3f, 0 } },
  { 0x91, -1, 16, false, "SYNCHRONIZE CACHE(16)", scsi_cmd_sync16,
    { 0xff, 0x02, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
      0xff, 0xff, 0xff, 0xff, 0x3f, 0 } },
  { 0x93, -1, 16, false, "WRITE SAME(16)", scsi_cmd_write_same16,
    { 0xff, 0x09, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
      0xff, 0xff, 0xff, 0xff, 0x3f, 0 } },
  /* Listed and run only on a LUN with atomic writes (p.atomic.max). */
  { 0x9c, -1, 16, false, "WRITE ATOMIC(16)", scsi_cmd_write_atomic16,
    { 0xff, 0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
      0xff, 0xff, 0xff, 0xff, 0x3f, 0 } },
  /* ZBC-2, listed and run only on a zoned LUN (p.zones): scsi_zbc.c. */
  { 0x94, 0x01, 16, false, "CLOSE ZONE", scsi_cmd_zone_out,
    { 0xff, 0x1f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
      0, 0, 0xff, 0xff, 0x01, 0 } },
  { 0x94, 0x02, 16, false, "FINISH ZONE", scsi_cmd_zone_out,
    { 0xff, 0x1f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
      0, 0, 0xff, 0xff, 0x01, 0 } },
  { 0x94, 0x03, 16, false, "OPEN ZONE", scsi_cmd_zone_out,
    { 0xff, 0x1f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
      0, 0, 0xff, 0xff, 0x01, 0 } },
  { 0x94, 0x04, 16, false, "RESET WRITE POINTER", scsi_cmd_zone_out,
    { 0xff, 0x1f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
      0, 0, 0xff, 0xff, 0x01, 0 } },
  { 0x95, 0x00, 16, false, "REPORT ZONES", scsi_cmd_report_zones,
    { 0xff, 0x1f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
      0xff, 0xff, 0xff, 0xff, 0xbf, 0 } },
  { 0x9e, 0x10, 16, false, "READ CAPACITY(16)", scsi_cmd_read_capacity16,
    { 0xff, 0x1f, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0 } },
  { 0xa8, -1, 12, false, "READ(12)", scsi_cmd_rw12,
    { 0xff, 0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1f, 0 } },
  { 0xaa, -1, 12, false, "WRITE(12)", scsi_cmd_rw12,
    { 0xff, 0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1f, 0 } },
  { 0xa1, -1, 12, false, "ATA PASS-THROUGH(12)", scsi_cmd_ata_passthru,
    { 0xff, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0 } },
  { 0xa3, 0x0c, 12, false, "REPORT SUPPORTED OPERATION CODES", cmd_rsoc,
    { 0xff, 0x1f, 0x07, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0 } },
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static bool
has_service_actions (uint8_t opcode)
{
  return opcode == 0x94 || opcode == 0x95 || opcode == 0x9e ||
         opcode == 0xa3;
}

/* Whether the LUN has command cm: WRITE ATOMIC(16) only with atomic
 * writes, ATA PASS-THROUGH only with the SATA identity, ZBC IN and OUT
 * only when zoned. */
static bool
lun_has (const struct s4k_scsi_lun *lun, const struct command *cm)
{
  if (cm->opcode == 0x85 || cm->opcode == 0xa1)
    return lun->p.sata;
  if (cm->opcode == 0x94 || cm->opcode == 0x95)
    return lun->p.zones != NULL;
  return cm->opcode != 0x9c || lun->p.atomic.max != 0;
}

static const struct command *
find_command (const struct s4k_scsi_lun *lun, uint8_t opcode, int sa)
{
  for (size_t i = 0; i < NCOMMANDS; i++)
    if (commands[i].opcode == opcode && (commands[i].sa < 0 ||
                                         commands[i].sa == sa))
      return lun_has (lun, &commands[i]) ? &commands[i] : NULL;
  return NULL;
}

const char *
s4k_scsi_opcode_name (uint8_t opcode)
{
  for (size_t i = 0; i < NCOMMANDS; i++)
    if (commands[i].opcode == opcode)
      return commands[i].name;
  return NULL;
}

static unsigned
cmd_rsoc (struct ctx *x)
{
  const uint8_t *c = x->cdb;
  const uint8_t options = c[2] & 0x07;
  const uint8_t opcode = c[3];
  const uint16_t sa = get16 (c + 4);
  uint8_t b[4 + NCOMMANDS * 8];
  size_t n;
  memset (b, 0, sizeof b);
  if (options == 0) {           /* all commands */
    n = 4;
    for (size_t i = 0; i < NCOMMANDS; i++) {
      if (!lun_has (x->lun, &commands[i]))
        continue;
      uint8_t *d = b + n;
      d[0] = commands[i].opcode;
      if (commands[i].sa >= 0) {
        put16 (d + 2, (uint16_t) commands[i].sa);
        d[5] = 0x01;            /* SERVACTV */
      }
      put16 (d + 6, commands[i].len);
      n += 8;
    }
    put32 (b, (uint32_t) (n - 4));
  }
  else if (options == 1 || options == 2) {
    /* One command: 1 names an opcode without service actions, 2 one
     * with them; asking the other way is an invalid field. */
    if (options == 1 && has_service_actions (opcode))
      return scsi_bad_cdb (x->cmd, 3, -1);
    if (options == 2 && !has_service_actions (opcode) &&
        s4k_scsi_opcode_name (opcode))
      return scsi_bad_cdb (x->cmd, 3, -1);
    const struct command *cm =
      find_command (x->lun, opcode, options == 2 ? sa : -1);
    uint8_t one[4 + 16] = { 0 };
    if (!cm) {
      one[1] = 0x01;            /* not supported */
      n = 4;
    }
    else {
      one[1] = 0x03;            /* supported as the standard says */
      put16 (one + 2, cm->len);
      memcpy (one + 4, cm->usage, cm->len);
      /* The usage data begins with the opcode and service action. */
      one[4] = cm->opcode;
      if (cm->sa >= 0)
        one[5] = (uint8_t) ((cm->usage[1] & ~0x1f) | cm->sa);
      n = 4 + cm->len;
    }
    return scsi_data_in (x, one, n, get32 (c + 6));
  }
  else
    return scsi_bad_cdb (x->cmd, 2, 2);
  return scsi_data_in (x, b, n, get32 (c + 6));
}

/* ---- exec / done ---------------------------------------------------------- */

unsigned
s4k_scsi_exec (struct s4k_scsi_lun *lun, struct s4k_scsi_cmd *cmd,
               const uint8_t *cdb, size_t cdb_len, void *data,
               size_t data_len, unsigned cuts)
{
  memset (cmd, 0, sizeof *cmd);
  cmd->priv.epoch = cuts;
  cmd->priv.data = data;
  cmd->priv.data_len = data ? data_len : 0;
  if (cuts != lun->cuts) {
    lun->cuts = cuts;
    lun->ua = POWER_ON_OCCURRED;
  }
  if (cdb_len == 0)
    return scsi_fail (cmd, S4K_SENSE_ILLEGAL_REQUEST,
                      INVALID_COMMAND_OPERATION_CODE);
  cmd->priv.opcode = cdb[0];
  const int sa = cdb_len > 1 ? cdb[1] & 0x1f : -1;
  const struct command *cm = find_command (lun, cdb[0], sa);
  if (!cm) {
    /* ZBC IN and OUT do not exist on a LUN that is not zoned. */
    if (has_service_actions (cdb[0]) &&
        (lun->p.zones || (cdb[0] != 0x94 && cdb[0] != 0x95)))
      return scsi_fail_info (cmd, S4K_SENSE_ILLEGAL_REQUEST,
                             INVALID_FIELD_IN_CDB, false, 0, CDB_FIELD (1, 4));
    return scsi_fail_info (cmd, S4K_SENSE_ILLEGAL_REQUEST,
                           INVALID_COMMAND_OPERATION_CODE, false, 0,
                           CDB_FIELD (0, -1));
  }
  if (lun->ua && !cm->ua_exempt) {
    const uint16_t ua = lun->ua;
    lun->ua = 0;
    return scsi_fail (cmd, S4K_SENSE_UNIT_ATTENTION, ua);
  }
  if (cdb_len < cm->len)
    return scsi_bad_cdb (cmd, (int) cdb_len, -1);
  for (unsigned i = 1; i < cm->len; i++) {
    const uint8_t stray = cdb[i] & (uint8_t) ~cm->usage[i];
    if (stray)
      return scsi_bad_cdb (cmd, (int) i, 31 - __builtin_clz (stray));
  }
  struct ctx x = { lun, cmd, cdb, cmd->priv.data, cmd->priv.data_len };
  return cm->fn (&x);
}

/* A read op failed with EIO: read the rest of it again one physical
 * sector at a time (at most this many ops per round), so that the first
 * failing LBA is known and the data before it is in place. */
#define SALVAGE_OPS 1024u

static unsigned
salvage_round (struct s4k_scsi_lun *lun, struct s4k_scsi_cmd *cmd)
{
  const struct s4k_geometry *g = &lun->p.geom;
  uint64_t pos = cmd->priv.salvage_pos, end = cmd->priv.salvage_end;
  unsigned n = 0;
  for (uint64_t p = pos; p < end && n < SALVAGE_OPS; n++) {
    uint64_t s, e;
    s4k_sector_range (g, s4k_sector_index (g, p), &s, &e);
    p = e < end ? e : end;
  }
  struct s4k_scsi_op *ops = scsi_ops_alloc (cmd, n);
  if (!ops)
    return scsi_no_memory (cmd);
  for (unsigned i = 0; i < n; i++) {
    uint64_t s, e;
    s4k_sector_range (g, s4k_sector_index (g, pos), &s, &e);
    if (e > end)
      e = end;
    ops[i].kind = S4K_SCSI_OP_READ;
    ops[i].buf = cmd->priv.salvage_buf + (pos - cmd->priv.salvage_start);
    ops[i].off = pos;
    ops[i].len = e - pos;
    pos = e;
  }
  cmd->priv.salvage_pos = pos;
  return n;
}

int
s4k_scsi_op_run (struct s4k_dev *d, const struct s4k_scsi_op *op)
{
  switch (op->kind) {
  case S4K_SCSI_OP_READ: return s4k_read (d, op->buf, op->len, op->off);
  case S4K_SCSI_OP_WRITE:
    return s4k_write (d, op->buf, op->len, op->off, op->flags);
  case S4K_SCSI_OP_ZERO: return s4k_zero (d, op->len, op->off, op->flags);
  case S4K_SCSI_OP_TRIM: return s4k_trim (d, op->len, op->off, op->flags);
  case S4K_SCSI_OP_FLUSH: return s4k_flush (d);
  case S4K_SCSI_OP_ZONE: return s4k_scsi_zone_op (d, op);
  case S4K_SCSI_OP_SET_LOGICAL:
    return s4k_dev_set_logical (d, (uint32_t) op->len);
  }
  return -EINVAL;
}

unsigned
s4k_scsi_done (struct s4k_scsi_lun *lun, struct s4k_scsi_cmd *cmd,
               unsigned failed, int r, unsigned cuts)
{
  if (cmd->nops == 0)           /* complete already */
    return 0;
  if (cmd->priv.kind == KIND_FORMAT)
    return scsi_format_done (lun, cmd, failed, r, cuts);
  const bool salvaging = cmd->priv.salvage_end != 0;
  if (failed >= cmd->nops)
    r = 0;
  else if (r == 0)
    r = -EIO;                   /* a failed op must say why */
  if (r != 0 && (cuts != cmd->priv.epoch || r == -ESHUTDOWN))
    /* In flight at a power cut: lost, and not to be retried. */
    return scsi_fail (cmd, S4K_SENSE_NOT_READY, LUN_NOT_READY);
  if (r == -EIO && cmd->ops[failed].kind == S4K_SCSI_OP_READ) {
    const struct s4k_scsi_op op = cmd->ops[failed];
    if (salvaging) {
      /* The first failing physical sector; the data before it is in
       * place. */
      if (cmd->priv.kind == KIND_READ)
        cmd->data_in_len = op.off - (cmd->priv.lba << lun->lshift);
      return scsi_fail_info (cmd, S4K_SENSE_MEDIUM_ERROR,
                             UNRECOVERED_READ_ERROR, true,
                             op.off >> lun->lshift, NO_FIELD_PTR);
    }
    cmd->priv.salvage_start = cmd->priv.salvage_pos = op.off;
    cmd->priv.salvage_end = op.off + op.len;
    cmd->priv.salvage_buf = op.buf;
    return salvage_round (lun, cmd);
  }
  if (r != 0) {
    const struct s4k_scsi_op op = cmd->ops[failed];
    return scsi_map_error (lun, cmd, &op, r);
  }
  if (salvaging) {
    if (cmd->priv.salvage_pos < cmd->priv.salvage_end)
      return salvage_round (lun, cmd);
    /* The sectors read one by one all read: the error went away.  A
     * READ has all its data now; a VERIFY's later pieces never ran, so
     * it reports the failure it saw. */
    if (cmd->priv.kind == KIND_VERIFY)
      return scsi_fail_info (cmd, S4K_SENSE_MEDIUM_ERROR,
                             UNRECOVERED_READ_ERROR, true,
                             cmd->priv.salvage_start >> lun->lshift,
                             NO_FIELD_PTR);
  }
  if (cmd->priv.kind == KIND_ATA)
    return scsi_ata_done (cmd);
  if (cmd->priv.kind == KIND_VERIFY && cmd->priv.bytchk)
    return scsi_verify_compare (lun, cmd);
  if (cmd->priv.kind == KIND_READ)
    cmd->data_in_len = cmd->priv.blocks << lun->lshift;
  return scsi_good (cmd);
}

void
s4k_scsi_cmd_release (struct s4k_scsi_cmd *cmd)
{
  free (cmd->priv.owned_ops);
  free (cmd->priv.scratch);
  cmd->priv.owned_ops = NULL;
  cmd->priv.scratch = NULL;
  cmd->ops = NULL;
  cmd->nops = 0;
}
