/* The SCSI command layer (include/sect4k/scsi.h): SPC-5 and SBC-4 as far
 * as a Linux initiator (sd.c, sg3-utils) needs them, over the engine's
 * geometry.  Pure: every command either completes here or becomes a list
 * of engine operations that the caller runs.
 *
 * One table (commands[]) names each command with its CDB length and the
 * bits of each CDB byte it interprets (the CDB usage data REPORT SUPPORTED
 * OPERATION CODES returns): any other bit set is refused with INVALID
 * FIELD IN CDB and a field pointer to it, before anything else runs. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sect4k/scsi.h"

/* ---- big-endian fields ------------------------------------------------- */

static uint16_t get16 (const uint8_t *p) { return (uint16_t) (p[0] << 8 | p[1]); }
static uint32_t get32 (const uint8_t *p) { return (uint32_t) get16 (p) << 16 | get16 (p + 2); }
static uint64_t get64 (const uint8_t *p) { return (uint64_t) get32 (p) << 32 | get32 (p + 4); }
static void put16 (uint8_t *p, uint16_t v) { p[0] = v >> 8; p[1] = v; }
static void put32 (uint8_t *p, uint32_t v) { put16 (p, v >> 16); put16 (p + 2, v); }
static void put64 (uint8_t *p, uint64_t v) { put32 (p, v >> 32); put32 (p + 4, v); }

/* ---- additional sense codes the layer reports ------------------------- */

#define ASC(asc, ascq) ((uint16_t) ((asc) << 8 | (ascq)))
enum {
  NO_ADDITIONAL_SENSE = ASC (0x00, 0x00),
  LUN_NOT_READY = ASC (0x04, 0x00),
  LUN_COMMUNICATION_FAILURE = ASC (0x08, 0x00),
  WRITE_ERROR = ASC (0x0c, 0x00),
  UNRECOVERED_READ_ERROR = ASC (0x11, 0x00),
  PARAMETER_LIST_LENGTH_ERROR = ASC (0x1a, 0x00),
  MISCOMPARE_DURING_VERIFY = ASC (0x1d, 0x00),
  INVALID_COMMAND_OPERATION_CODE = ASC (0x20, 0x00),
  LBA_OUT_OF_RANGE = ASC (0x21, 0x00),
  INVALID_FIELD_IN_CDB = ASC (0x24, 0x00),
  INVALID_FIELD_IN_PARAMETER_LIST = ASC (0x26, 0x00),
  WRITE_PROTECTED = ASC (0x27, 0x00),
  SPACE_ALLOCATION_FAILED = ASC (0x27, 0x07),
  POWER_ON_RESET = ASC (0x29, 0x00),
  POWER_ON_OCCURRED = ASC (0x29, 0x01),
  SAVING_PARAMETERS_NOT_SUPPORTED = ASC (0x39, 0x00),
  INTERNAL_TARGET_FAILURE = ASC (0x44, 0x00),
  INSUFFICIENT_RESOURCES = ASC (0x55, 0x03),
};

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

/* ---- the LUN ------------------------------------------------------------ */

struct s4k_scsi_lun {
  struct s4k_scsi_params p;
  uint64_t blocks;              /* logical blocks on the device */
  unsigned lshift;              /* log2 (L) */
  unsigned cuts;                /* power-cut count last seen */
  uint16_t ua;                  /* pending UNIT ATTENTION (asc/ascq), or 0 */
};

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

void
s4k_scsi_params_init (struct s4k_scsi_params *p, const struct s4k_geometry *g,
                      uint32_t max_request, const char *name)
{
  memset (p, 0, sizeof *p);
  p->geom = *g;
  p->max_request = max_request;
  p->lbprz = true;
  snprintf (p->vendor, sizeof p->vendor, "SECT4K");
  /* The model as the presets name it, else LxP (+A). */
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
s4k_scsi_params_from_config (struct s4k_scsi_params *p,
                             const struct s4k_config *c,
                             const struct s4k_geometry *g,
                             uint32_t max_request)
{
  s4k_scsi_params_init (p, g, max_request, c->name);
  p->write_cache = c->fault.write_cache;
  p->readonly = c->readonly;
  p->lbprz = c->upstream == NULL;
  const char *preset = c->timing.preset;
  if (preset && strcmp (preset, "hdd7200") == 0)
    p->rotation_rate = 7200;
  else if (preset && strcmp (preset, "ssd") == 0)
    p->rotation_rate = 1;
}

struct s4k_scsi_lun *
s4k_scsi_lun_new (const struct s4k_scsi_params *p, char *err, size_t errlen)
{
  const struct s4k_geometry *g = &p->geom;
  if (s4k_geometry_check (g, err, errlen) == -1)
    return NULL;
  const uint32_t ratio = g->physical / g->logical;
  /* READ CAPACITY(16) has 4 bits for the exponent, 14 for the lowest
   * aligned LBA. */
  if (ratio > 32768) {
    snprintf (err, errlen, "physical=%" PRIu32 " logical=%" PRIu32 ": SCSI "
              "cannot state more than 32768 logical blocks per physical "
              "block", g->physical, g->logical);
    return NULL;
  }
  if (s4k_lowest_aligned (g) > 0x3fff) {
    snprintf (err, errlen, "alignment-offset=%" PRIu32 ": SCSI cannot state "
              "a lowest aligned LBA above 16383", g->alignment);
    return NULL;
  }
  if (p->max_request < g->logical) {
    snprintf (err, errlen, "max-request=%" PRIu32 ": smaller than logical=%"
              PRIu32, p->max_request, g->logical);
    return NULL;
  }
  struct s4k_scsi_lun *lun = calloc (1, sizeof *lun);
  if (!lun) {
    snprintf (err, errlen, "out of memory");
    return NULL;
  }
  lun->p = *p;
  lun->lshift = __builtin_ctz (g->logical);
  lun->blocks = g->size >> lun->lshift;
  lun->ua = POWER_ON_RESET;     /* a disk just attached */
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

/* ---- sense ---------------------------------------------------------------- */

/* Field pointers (SPC-5 4.4.2.4.2): in the CDB or the parameter list. */
enum { NO_FIELD = -1 };
struct field {
  int byte;                     /* NO_FIELD: none */
  int bit;                      /* -1: the whole byte */
  bool cdb;
};
#define CDB_FIELD(b, bit) ((struct field) { (b), (bit), true })
#define PARAM_FIELD(b, bit) ((struct field) { (b), (bit), false })
#define NO_FIELD_PTR ((struct field) { NO_FIELD, -1, true })

static unsigned
fail_info (struct s4k_scsi_cmd *cmd, uint8_t key, uint16_t asc,
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

static unsigned
fail (struct s4k_scsi_cmd *cmd, uint8_t key, uint16_t asc)
{
  return fail_info (cmd, key, asc, false, 0, NO_FIELD_PTR);
}

static unsigned
bad_cdb (struct s4k_scsi_cmd *cmd, int byte, int bit)
{
  return fail_info (cmd, S4K_SENSE_ILLEGAL_REQUEST, INVALID_FIELD_IN_CDB,
                    false, 0, CDB_FIELD (byte, bit));
}

static unsigned
bad_param (struct s4k_scsi_cmd *cmd, int byte, int bit)
{
  return fail_info (cmd, S4K_SENSE_ILLEGAL_REQUEST,
                    INVALID_FIELD_IN_PARAMETER_LIST, false, 0,
                    PARAM_FIELD (byte, bit));
}

static unsigned
out_of_range (struct s4k_scsi_cmd *cmd)
{
  return fail (cmd, S4K_SENSE_ILLEGAL_REQUEST, LBA_OUT_OF_RANGE);
}

static unsigned
good (struct s4k_scsi_cmd *cmd)
{
  cmd->status = S4K_SCSI_GOOD;
  cmd->sense_len = 0;
  cmd->nops = 0;
  cmd->ops = NULL;
  return 0;
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

/* ---- the commands --------------------------------------------------------- */

struct ctx {
  struct s4k_scsi_lun *lun;
  struct s4k_scsi_cmd *cmd;
  const uint8_t *cdb;
  uint8_t *data;
  size_t data_len;
};

typedef unsigned handler (struct ctx *x);

/* What s4k_scsi_done finishes once the ops ran (cmd->priv.kind). */
enum { KIND_PLAIN, KIND_READ, KIND_VERIFY };

struct command {
  uint8_t opcode;
  int16_t sa;                   /* service action, or -1 */
  uint8_t len;                  /* CDB length */
  bool ua_exempt;               /* runs with a UNIT ATTENTION pending */
  const char *name;
  handler *fn;
  uint8_t usage[16];            /* CDB usage data: the bits interpreted */
};

/* Data-in of a command that completes here: n bytes of buf, cut to the
 * allocation length and to the caller's buffer. */
static unsigned
data_in (struct ctx *x, const void *buf, size_t n, uint64_t alloc)
{
  if (n > alloc)
    n = alloc;
  if (n > x->data_len)
    n = x->data_len;
  if (n)
    memcpy (x->data, buf, n);
  x->cmd->data_in_len = n;
  return good (x->cmd);
}

static void
pad_copy (uint8_t *dst, const char *src, size_t n)
{
  size_t l = strlen (src);
  memset (dst, ' ', n);
  memcpy (dst, src, l < n ? l : n);
}

/* -- INQUIRY -- */

static const uint8_t vpd_pages[] = { 0x00, 0x80, 0x83, 0xb0, 0xb1, 0xb2 };

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
    memcpy (b + 4, vpd_pages, sizeof vpd_pages);
    n = 4 + sizeof vpd_pages;
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
    break;
  }
  case 0xb1:                    /* block device characteristics */
    n = 64;
    put16 (b + 4, p->rotation_rate);
    break;
  case 0xb2:                    /* logical block provisioning */
    n = 8;
    /* LBPU, LBPWS, LBPWS10, LBPRZ 001b */
    b[5] = 0x80 | 0x40 | 0x20 | (p->lbprz ? 0x04 : 0);
    b[6] = 0x02;                /* thin provisioned */
    break;
  default:
    return 0;
  }
  put16 (b + 2, (uint16_t) (n - 4));
  return n;
}

static unsigned
cmd_inquiry (struct ctx *x)
{
  const uint8_t *c = x->cdb;
  const struct s4k_scsi_params *p = &x->lun->p;
  uint8_t b[256] = { 0 };
  size_t n;
  if (c[1] & 0x01) {
    n = vpd_page (x->lun, c[2], b);
    if (n == 0)
      return bad_cdb (x->cmd, 2, -1);
  }
  else {
    if (c[2])                   /* a page code without EVPD */
      return bad_cdb (x->cmd, 2, -1);
    n = 36;
    b[2] = 0x07;                /* SPC-5 */
    b[3] = 0x12;                /* HISUP, response data format 2 */
    b[4] = (uint8_t) (n - 5);
    b[7] = 0x02;                /* CMDQUE */
    pad_copy (b + 8, p->vendor, 8);
    pad_copy (b + 16, p->product, 16);
    pad_copy (b + 32, p->revision, 4);
  }
  return data_in (x, b, n, get16 (c + 3));
}

/* -- REQUEST SENSE, TEST UNIT READY, START STOP UNIT -- */

static unsigned
cmd_request_sense (struct ctx *x)
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
  return data_in (x, b, sizeof b, x->cdb[4]);
}

static unsigned
cmd_test_unit_ready (struct ctx *x)
{
  return good (x->cmd);
}

/* Operations the command owns: its inline pair, else an array. */
static struct s4k_scsi_op *
ops_alloc (struct s4k_scsi_cmd *cmd, size_t n)
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

static unsigned
no_memory (struct s4k_scsi_cmd *cmd)
{
  return fail (cmd, S4K_SENSE_ABORTED_COMMAND, INSUFFICIENT_RESOURCES);
}

static unsigned
one_op (struct s4k_scsi_cmd *cmd, enum s4k_scsi_op_kind kind, void *buf,
        uint64_t len, uint64_t off, unsigned flags)
{
  struct s4k_scsi_op *op = ops_alloc (cmd, 1);
  op->kind = kind;
  op->buf = buf;
  op->len = len;
  op->off = off;
  op->flags = flags;
  return 1;
}

static unsigned
cmd_start_stop_unit (struct ctx *x)
{
  /* Stopping writes the cache back unless NO_FLUSH; the unit stays
   * ready (no NOT READY until a START), and LOEJ has nothing to eject. */
  const uint8_t c4 = x->cdb[4];
  if ((c4 & 0xf0) == 0 && !(c4 & 0x01) && !(c4 & 0x04))
    return one_op (x->cmd, S4K_SCSI_OP_FLUSH, NULL, 0, 0, 0);
  return good (x->cmd);
}

/* -- READ CAPACITY -- */

static unsigned
cmd_read_capacity10 (struct ctx *x)
{
  const struct s4k_scsi_lun *lun = x->lun;
  uint8_t b[8];
  const uint64_t last = lun->blocks - 1;
  put32 (b, last > 0xfffffffe ? 0xffffffff : (uint32_t) last);
  put32 (b + 4, lun->p.geom.logical);
  return data_in (x, b, sizeof b, 8);
}

static unsigned
cmd_read_capacity16 (struct ctx *x)
{
  const struct s4k_scsi_lun *lun = x->lun;
  const struct s4k_geometry *g = &lun->p.geom;
  uint8_t b[32] = { 0 };
  put64 (b, lun->blocks - 1);
  put32 (b + 8, g->logical);
  b[12] = 0x10;                 /* RC BASIS: the last LBA of the unit */
  b[13] = (uint8_t) __builtin_ctz (g->physical / g->logical);
  put16 (b + 14, (uint16_t) (0x8000 |                      /* LBPME */
                             (lun->p.lbprz ? 0x4000 : 0) | /* LBPRZ */
                             s4k_lowest_aligned (g)));
  return data_in (x, b, sizeof b, get32 (x->cdb + 10));
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
    return fail_info (x->cmd, S4K_SENSE_ILLEGAL_REQUEST,
                      SAVING_PARAMETERS_NOT_SUPPORTED, false, 0,
                      CDB_FIELD (2, 7));
  if (subpage != 0 && !(page == 0x3f && subpage == 0xff))
    return bad_cdb (x->cmd, 3, -1);
  uint8_t b[256] = { 0 };
  const size_t hdr = ten ? 8 : 4;
  size_t n = hdr;
  /* Device-specific parameter: WP, DPOFUA. */
  b[ten ? 3 : 2] = (lun->p.readonly ? 0x80 : 0) | 0x10;
  if (!dbd) {
    const size_t bd = llbaa ? 16 : 8;
    if (llbaa) {
      b[4] = 0x01;              /* LONGLBA */
      put64 (b + n, lun->blocks);
      put32 (b + n + 12, g->logical);
    }
    else {
      put32 (b + n, lun->blocks > 0xffffffff ? 0xffffffff
                                             : (uint32_t) lun->blocks);
      put32 (b + n + 4, g->logical & 0xffffff);
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
      return bad_cdb (x->cmd, 2, 5);
    n += l;
  }
  if (ten)
    put16 (b, (uint16_t) (n - 2));
  else
    b[0] = (uint8_t) (n - 1);
  return data_in (x, b, n, ten ? get16 (c + 7) : c[4]);
}

static unsigned cmd_mode_sense6 (struct ctx *x) { return mode_sense (x, false); }
static unsigned cmd_mode_sense10 (struct ctx *x) { return mode_sense (x, true); }

/* MODE SELECT changes nothing (every field reads as not changeable in
 * MODE SENSE): a parameter list that repeats the current values is
 * accepted, any other value is refused, as drives with fixed settings
 * do. */
static unsigned
mode_select (struct ctx *x, bool ten)
{
  const uint8_t *c = x->cdb;
  const struct s4k_scsi_lun *lun = x->lun;
  const size_t len = ten ? get16 (c + 7) : c[4];
  const size_t hdr = ten ? 8 : 4;
  if (len == 0)
    return good (x->cmd);
  if (len < hdr || len > x->data_len)
    return fail (x->cmd, S4K_SENSE_ILLEGAL_REQUEST,
                 PARAMETER_LIST_LENGTH_ERROR);
  const uint8_t *d = x->data;
  const size_t bdl = ten ? get16 (d + 6) : d[3];
  const bool longlba = ten && (d[4] & 0x01);
  size_t i = hdr;
  if (bdl) {
    const size_t one = longlba ? 16 : 8;
    if (bdl != one)
      return bad_param (x->cmd, ten ? 6 : 3, -1);
    if (hdr + bdl > len)
      return fail (x->cmd, S4K_SENSE_ILLEGAL_REQUEST,
                   PARAMETER_LIST_LENGTH_ERROR);
    const uint32_t bl = longlba ? get32 (d + hdr + 12)
                                : get32 (d + hdr + 4) & 0xffffff;
    if (bl != lun->p.geom.logical)
      return bad_param (x->cmd, (int) (hdr + (longlba ? 12 : 5)), -1);
    i += bdl;
  }
  while (i < len) {
    if (i + 2 > len)
      return fail (x->cmd, S4K_SENSE_ILLEGAL_REQUEST,
                   PARAMETER_LIST_LENGTH_ERROR);
    if (d[i] & 0x40)            /* SPF: subpages, none here */
      return bad_param (x->cmd, (int) i, 6);
    uint8_t cur[64] = { 0 };
    const size_t pl = mode_page (lun, d[i] & 0x3f, PC_CURRENT, cur);
    if (pl == 0)
      return bad_param (x->cmd, (int) i, 5);
    if ((size_t) d[i + 1] + 2 != pl)
      return bad_param (x->cmd, (int) i + 1, -1);
    if (i + pl > len)
      return fail (x->cmd, S4K_SENSE_ILLEGAL_REQUEST,
                   PARAMETER_LIST_LENGTH_ERROR);
    for (size_t j = 2; j < pl; j++)
      if (d[i + j] != cur[j])
        return bad_param (x->cmd, (int) (i + j), -1);
    i += pl;
  }
  return good (x->cmd);
}

static unsigned cmd_mode_select6 (struct ctx *x) { return mode_select (x, false); }
static unsigned cmd_mode_select10 (struct ctx *x) { return mode_select (x, true); }

/* -- media access -- */

/* The LBA range [lba, lba + n) against the device: 0, or the command
 * fails. */
static bool
in_range (const struct s4k_scsi_lun *lun, uint64_t lba, uint64_t n)
{
  return lba < lun->blocks && n <= lun->blocks - lba;
}

static unsigned
write_protected (struct s4k_scsi_cmd *cmd)
{
  return fail (cmd, S4K_SENSE_DATA_PROTECT, WRITE_PROTECTED);
}

/* READ and WRITE of every size: LBA and length already decoded. */
static unsigned
read_write (struct ctx *x, bool write, uint64_t lba, uint64_t n, bool fua,
            int len_byte)
{
  struct s4k_scsi_lun *lun = x->lun;
  struct s4k_scsi_cmd *cmd = x->cmd;
  if (n > lun->p.max_request >> lun->lshift)
    return bad_cdb (cmd, len_byte, -1);
  if (n == 0 ? lba > lun->blocks : !in_range (lun, lba, n))
    return out_of_range (cmd);
  if (write && lun->p.readonly)
    return write_protected (cmd);
  if (n == 0)
    return good (cmd);
  const uint64_t bytes = n << lun->lshift;
  if (bytes > x->data_len)
    return bad_cdb (cmd, len_byte, -1);
  cmd->priv.lba = lba;
  cmd->priv.blocks = n;
  cmd->priv.kind = write ? KIND_PLAIN : KIND_READ;
  /* FUA on a read asks for the medium's data: the engine's reads are
   * coherent with its cache, so only writes carry it. */
  return one_op (cmd, write ? S4K_SCSI_OP_WRITE : S4K_SCSI_OP_READ, x->data,
                 bytes, lba << lun->lshift, write && fua ? S4K_FUA : 0);
}

static unsigned
cmd_rw6 (struct ctx *x)
{
  const uint8_t *c = x->cdb;
  const uint64_t lba = (uint64_t) (c[1] & 0x1f) << 16 | get16 (c + 2);
  return read_write (x, c[0] == 0x0a, lba, c[4] ? c[4] : 256, false, 4);
}

static unsigned
cmd_rw10 (struct ctx *x)
{
  const uint8_t *c = x->cdb;
  return read_write (x, c[0] == 0x2a, get32 (c + 2), get16 (c + 7),
                     c[1] & 0x08, 7);
}

static unsigned
cmd_rw12 (struct ctx *x)
{
  const uint8_t *c = x->cdb;
  return read_write (x, c[0] == 0xaa, get32 (c + 2), get32 (c + 6),
                     c[1] & 0x08, 6);
}

static unsigned
cmd_rw16 (struct ctx *x)
{
  const uint8_t *c = x->cdb;
  return read_write (x, c[0] == 0x8a, get64 (c + 2), get32 (c + 10),
                     c[1] & 0x08, 10);
}

/* -- SYNCHRONIZE CACHE -- */

static unsigned
sync_cache (struct ctx *x, uint64_t lba, uint64_t n)
{
  /* The whole cache is written back; the range must still be valid.
   * 0 blocks: from lba to the end. */
  if (n == 0 ? lba >= x->lun->blocks : !in_range (x->lun, lba, n))
    return out_of_range (x->cmd);
  return one_op (x->cmd, S4K_SCSI_OP_FLUSH, NULL, 0, 0, 0);
}

static unsigned
cmd_sync10 (struct ctx *x)
{
  return sync_cache (x, get32 (x->cdb + 2), get16 (x->cdb + 7));
}

static unsigned
cmd_sync16 (struct ctx *x)
{
  return sync_cache (x, get64 (x->cdb + 2), get32 (x->cdb + 10));
}

/* -- WRITE SAME -- */

static bool
all_zero (const uint8_t *p, size_t n)
{
  for (size_t i = 0; i < n; i++)
    if (p[i])
      return false;
  return true;
}

/* Pattern writes go out in pieces of at most this many bytes. */
#define PATTERN_BYTES (1u << 20)

static unsigned
write_same (struct ctx *x, uint64_t lba, uint64_t n, int len_byte)
{
  struct s4k_scsi_lun *lun = x->lun;
  struct s4k_scsi_cmd *cmd = x->cmd;
  const uint8_t *c = x->cdb;
  const bool unmap = c[1] & 0x08, ndob = c[0] == 0x93 && (c[1] & 0x01);
  const uint32_t L = lun->p.geom.logical;
  if (n == 0)                   /* WSNZ */
    return bad_cdb (cmd, len_byte, -1);
  if (n > S4K_SCSI_MAX_WRITE_SAME_BYTES >> lun->lshift)
    return bad_cdb (cmd, len_byte, -1);
  if (!in_range (lun, lba, n))
    return out_of_range (cmd);
  if (lun->p.readonly)
    return write_protected (cmd);
  if (!ndob && x->data_len < L)
    return fail (cmd, S4K_SENSE_ILLEGAL_REQUEST, PARAMETER_LIST_LENGTH_ERROR);
  const uint64_t off = lba << lun->lshift, len = n << lun->lshift;
  cmd->priv.lba = lba;
  cmd->priv.blocks = n;
  if (ndob || all_zero (x->data, L))
    /* Zeroes: with UNMAP the sectors may be deallocated (they read as
     * zeroes either way, which s4k_zero promises, unlike trim). */
    return one_op (cmd, S4K_SCSI_OP_ZERO, NULL, len, off,
                   unmap ? S4K_MAY_TRIM : 0);
  /* A pattern: a buffer of it repeated, written piece by piece. */
  const uint64_t per = PATTERN_BYTES > L ? PATTERN_BYTES / L : 1;
  const uint64_t piece_blocks = n < per ? n : per;
  uint8_t *pat = malloc (piece_blocks * L);
  if (!pat)
    return no_memory (cmd);
  for (uint64_t i = 0; i < piece_blocks; i++)
    memcpy (pat + i * L, x->data, L);
  cmd->priv.scratch = pat;
  const uint64_t pieces = (n + piece_blocks - 1) / piece_blocks;
  struct s4k_scsi_op *ops = ops_alloc (cmd, pieces);
  if (!ops)
    return no_memory (cmd);
  for (uint64_t i = 0; i < pieces; i++) {
    const uint64_t first = i * piece_blocks;
    const uint64_t cnt = n - first < piece_blocks ? n - first : piece_blocks;
    ops[i].kind = S4K_SCSI_OP_WRITE;
    ops[i].buf = pat;
    ops[i].off = off + (first << lun->lshift);
    ops[i].len = cnt << lun->lshift;
  }
  return cmd->nops;
}

static unsigned
cmd_write_same10 (struct ctx *x)
{
  return write_same (x, get32 (x->cdb + 2), get16 (x->cdb + 7), 7);
}

static unsigned
cmd_write_same16 (struct ctx *x)
{
  return write_same (x, get64 (x->cdb + 2), get32 (x->cdb + 10), 10);
}

/* -- UNMAP -- */

static unsigned
cmd_unmap (struct ctx *x)
{
  struct s4k_scsi_lun *lun = x->lun;
  struct s4k_scsi_cmd *cmd = x->cmd;
  const size_t len = get16 (x->cdb + 7);
  const uint8_t *d = x->data;
  if (len == 0)
    return good (cmd);
  if (len < 8 || len > x->data_len)
    return fail (cmd, S4K_SENSE_ILLEGAL_REQUEST, PARAMETER_LIST_LENGTH_ERROR);
  if (lun->p.readonly)
    return write_protected (cmd);
  /* Whole descriptors only: a cut one at the end is ignored (SBC-4). */
  const size_t bddl = get16 (d + 2);
  const size_t avail = len - 8 < bddl ? len - 8 : bddl;
  const size_t nd = avail / 16;
  if (nd > S4K_SCSI_MAX_UNMAP_DESCRIPTORS)
    return bad_param (cmd, 2, -1);
  size_t nops = 0;
  for (size_t i = 0; i < nd; i++) {
    const uint8_t *e = d + 8 + 16 * i;
    const uint64_t lba = get64 (e);
    const uint32_t cnt = get32 (e + 8);
    if (cnt > S4K_SCSI_MAX_UNMAP_BYTES >> lun->lshift)
      return bad_param (cmd, (int) (8 + 16 * i + 8), -1);
    if (cnt == 0 ? lba > lun->blocks : !in_range (lun, lba, cnt))
      return out_of_range (cmd);
    nops += cnt != 0;
  }
  if (nops == 0)
    return good (cmd);
  struct s4k_scsi_op *ops = ops_alloc (cmd, nops);
  if (!ops)
    return no_memory (cmd);
  for (size_t i = 0, k = 0; i < nd; i++) {
    const uint8_t *e = d + 8 + 16 * i;
    const uint32_t cnt = get32 (e + 8);
    if (cnt == 0)
      continue;
    /* LBPRZ promises zeroes only where the sectors were deallocated;
     * trim leaves a cut physical sector as it was, still mapped. */
    ops[k].kind = S4K_SCSI_OP_TRIM;
    ops[k].off = get64 (e) << lun->lshift;
    ops[k].len = (uint64_t) cnt << lun->lshift;
    k++;
  }
  return cmd->nops;
}

/* -- VERIFY -- */

/* BYTCHK=0 reads into a scratch buffer of at most this much, reused. */
#define VERIFY_PIECE (1u << 20)

static unsigned
verify (struct ctx *x, uint64_t lba, uint64_t n, int len_byte)
{
  struct s4k_scsi_lun *lun = x->lun;
  struct s4k_scsi_cmd *cmd = x->cmd;
  const uint8_t bytchk = (x->cdb[1] >> 1) & 0x03;
  const uint32_t L = lun->p.geom.logical;
  if (bytchk == 0x02)
    return bad_cdb (cmd, 1, 2);
  if (n > lun->p.max_request >> lun->lshift)
    return bad_cdb (cmd, len_byte, -1);
  if (n == 0 ? lba > lun->blocks : !in_range (lun, lba, n))
    return out_of_range (cmd);
  if (n == 0)
    return good (cmd);
  const uint64_t off = lba << lun->lshift, len = n << lun->lshift;
  const uint64_t want = bytchk == 0 ? 0 : bytchk == 1 ? len : L;
  if (want > x->data_len)
    return bad_cdb (cmd, len_byte, -1);
  cmd->priv.lba = lba;
  cmd->priv.blocks = n;
  cmd->priv.bytchk = bytchk;
  cmd->priv.kind = KIND_VERIFY;
  const uint64_t piece = bytchk ? len : len < VERIFY_PIECE ? len
                                                            : VERIFY_PIECE;
  uint8_t *s = malloc (piece);
  if (!s)
    return no_memory (cmd);
  cmd->priv.scratch = s;
  const uint64_t pieces = (len + piece - 1) / piece;
  struct s4k_scsi_op *ops = ops_alloc (cmd, pieces);
  if (!ops)
    return no_memory (cmd);
  for (uint64_t i = 0; i < pieces; i++) {
    ops[i].kind = S4K_SCSI_OP_READ;
    ops[i].buf = s;
    ops[i].off = off + i * piece;
    ops[i].len = len - i * piece < piece ? len - i * piece : piece;
  }
  return cmd->nops;
}

static unsigned
cmd_verify10 (struct ctx *x)
{
  return verify (x, get32 (x->cdb + 2), get16 (x->cdb + 7), 7);
}

static unsigned
cmd_verify16 (struct ctx *x)
{
  return verify (x, get64 (x->cdb + 2), get32 (x->cdb + 10), 10);
}

/* -- REPORT SUPPORTED OPERATION CODES -- */

static unsigned cmd_rsoc (struct ctx *x);

#define C6 { 0xff, 0xff, 0xff, 0xff, 0xff, 0 }
static const struct command commands[] = {
  { 0x00, -1, 6, false, "TEST UNIT READY", cmd_test_unit_ready,
    { 0xff, 0, 0, 0, 0, 0 } },
  { 0x03, -1, 6, true, "REQUEST SENSE", cmd_request_sense,
    { 0xff, 0, 0, 0, 0xff, 0 } },
  { 0x08, -1, 6, false, "READ(6)", cmd_rw6, { 0xff, 0x1f, 0xff, 0xff, 0xff, 0 } },
  { 0x0a, -1, 6, false, "WRITE(6)", cmd_rw6, { 0xff, 0x1f, 0xff, 0xff, 0xff, 0 } },
  { 0x12, -1, 6, true, "INQUIRY", cmd_inquiry, { 0xff, 0x01, 0xff, 0xff, 0xff, 0 } },
  { 0x15, -1, 6, false, "MODE SELECT(6)", cmd_mode_select6,
    { 0xff, 0x10, 0, 0, 0xff, 0 } },
  { 0x1a, -1, 6, false, "MODE SENSE(6)", cmd_mode_sense6,
    { 0xff, 0x08, 0xff, 0xff, 0xff, 0 } },
  { 0x1b, -1, 6, false, "START STOP UNIT", cmd_start_stop_unit,
    { 0xff, 0x01, 0, 0x0f, 0xf7, 0 } },
  { 0x25, -1, 10, false, "READ CAPACITY(10)", cmd_read_capacity10,
    { 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0 } },
  { 0x28, -1, 10, false, "READ(10)", cmd_rw10,
    { 0xff, 0x18, 0xff, 0xff, 0xff, 0xff, 0x1f, 0xff, 0xff, 0 } },
  { 0x2a, -1, 10, false, "WRITE(10)", cmd_rw10,
    { 0xff, 0x18, 0xff, 0xff, 0xff, 0xff, 0x1f, 0xff, 0xff, 0 } },
  { 0x2f, -1, 10, false, "VERIFY(10)", cmd_verify10,
    { 0xff, 0x16, 0xff, 0xff, 0xff, 0xff, 0x1f, 0xff, 0xff, 0 } },
  { 0x35, -1, 10, false, "SYNCHRONIZE CACHE(10)", cmd_sync10,
    { 0xff, 0x02, 0xff, 0xff, 0xff, 0xff, 0x1f, 0xff, 0xff, 0 } },
  { 0x41, -1, 10, false, "WRITE SAME(10)", cmd_write_same10,
    { 0xff, 0x08, 0xff, 0xff, 0xff, 0xff, 0x1f, 0xff, 0xff, 0 } },
  { 0x42, -1, 10, false, "UNMAP", cmd_unmap,
    { 0xff, 0, 0, 0, 0, 0, 0x1f, 0xff, 0xff, 0 } },
  { 0x55, -1, 10, false, "MODE SELECT(10)", cmd_mode_select10,
    { 0xff, 0x10, 0, 0, 0, 0, 0, 0xff, 0xff, 0 } },
  { 0x5a, -1, 10, false, "MODE SENSE(10)", cmd_mode_sense10,
    { 0xff, 0x18, 0xff, 0xff, 0, 0, 0, 0xff, 0xff, 0 } },
  { 0x88, -1, 16, false, "READ(16)", cmd_rw16,
    { 0xff, 0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
      0xff, 0xff, 0xff, 0xff, 0x3f, 0 } },
  { 0x8a, -1, 16, false, "WRITE(16)", cmd_rw16,
    { 0xff, 0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
      0xff, 0xff, 0xff, 0xff, 0x3f, 0 } },
  { 0x8f, -1, 16, false, "VERIFY(16)", cmd_verify16,
    { 0xff, 0x16, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
      0xff, 0xff, 0xff, 0xff, 0x3f, 0 } },
  { 0x91, -1, 16, false, "SYNCHRONIZE CACHE(16)", cmd_sync16,
    { 0xff, 0x02, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
      0xff, 0xff, 0xff, 0xff, 0x3f, 0 } },
  { 0x93, -1, 16, false, "WRITE SAME(16)", cmd_write_same16,
    { 0xff, 0x09, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
      0xff, 0xff, 0xff, 0xff, 0x3f, 0 } },
  { 0x9e, 0x10, 16, false, "READ CAPACITY(16)", cmd_read_capacity16,
    { 0xff, 0x1f, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0 } },
  { 0xa8, -1, 12, false, "READ(12)", cmd_rw12,
    { 0xff, 0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1f, 0 } },
  { 0xaa, -1, 12, false, "WRITE(12)", cmd_rw12,
    { 0xff, 0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1f, 0 } },
  { 0xa3, 0x0c, 12, false, "REPORT SUPPORTED OPERATION CODES", cmd_rsoc,
    { 0xff, 0x1f, 0x07, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0 } },
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static bool
has_service_actions (uint8_t opcode)
{
  return opcode == 0x9e || opcode == 0xa3;
}

static const struct command *
find_command (uint8_t opcode, int sa)
{
  for (size_t i = 0; i < NCOMMANDS; i++)
    if (commands[i].opcode == opcode && (commands[i].sa < 0 ||
                                         commands[i].sa == sa))
      return &commands[i];
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
      return bad_cdb (x->cmd, 3, -1);
    if (options == 2 && !has_service_actions (opcode) &&
        s4k_scsi_opcode_name (opcode))
      return bad_cdb (x->cmd, 3, -1);
    const struct command *cm =
      find_command (opcode, options == 2 ? sa : -1);
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
    return data_in (x, one, n, get32 (c + 6));
  }
  else
    return bad_cdb (x->cmd, 2, 2);
  return data_in (x, b, n, get32 (c + 6));
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
    return fail (cmd, S4K_SENSE_ILLEGAL_REQUEST,
                 INVALID_COMMAND_OPERATION_CODE);
  cmd->priv.opcode = cdb[0];
  const int sa = cdb_len > 1 ? cdb[1] & 0x1f : -1;
  const struct command *cm = find_command (cdb[0], sa);
  if (!cm) {
    if (has_service_actions (cdb[0]))
      return fail_info (cmd, S4K_SENSE_ILLEGAL_REQUEST, INVALID_FIELD_IN_CDB,
                        false, 0, CDB_FIELD (1, 4));
    return fail_info (cmd, S4K_SENSE_ILLEGAL_REQUEST,
                      INVALID_COMMAND_OPERATION_CODE, false, 0,
                      CDB_FIELD (0, -1));
  }
  if (lun->ua && !cm->ua_exempt) {
    const uint16_t ua = lun->ua;
    lun->ua = 0;
    return fail (cmd, S4K_SENSE_UNIT_ATTENTION, ua);
  }
  if (cdb_len < cm->len)
    return bad_cdb (cmd, (int) cdb_len, -1);
  for (unsigned i = 1; i < cm->len; i++) {
    const uint8_t stray = cdb[i] & (uint8_t) ~cm->usage[i];
    if (stray)
      return bad_cdb (cmd, (int) i, 31 - __builtin_clz (stray));
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
  struct s4k_scsi_op *ops = ops_alloc (cmd, n);
  if (!ops)
    return no_memory (cmd);
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

/* The sense for result r of op (a command whose ops began at LBA
 * cmd->priv.lba). */
static unsigned
map_error (struct s4k_scsi_lun *lun, struct s4k_scsi_cmd *cmd,
           const struct s4k_scsi_op *op, int r)
{
  const uint64_t lba = op->off >> lun->lshift;
  const bool media = op->kind != S4K_SCSI_OP_FLUSH;
  switch (-r) {
  case EIO:
    return fail_info (cmd, S4K_SENSE_MEDIUM_ERROR,
                      op->kind == S4K_SCSI_OP_READ ? UNRECOVERED_READ_ERROR
                                                   : WRITE_ERROR,
                      media, lba, NO_FIELD_PTR);
  case ENOSPC:
    return fail (cmd, S4K_SENSE_DATA_PROTECT, SPACE_ALLOCATION_FAILED);
  case EROFS: case EPERM: case EACCES:
    return fail (cmd, S4K_SENSE_DATA_PROTECT, WRITE_PROTECTED);
  case ESHUTDOWN:
    return fail (cmd, S4K_SENSE_NOT_READY, LUN_NOT_READY);
  case EINVAL:
    return fail (cmd, S4K_SENSE_ILLEGAL_REQUEST, INVALID_FIELD_IN_CDB);
  case ETIMEDOUT: case ECONNRESET: case ECONNREFUSED: case EPIPE:
  case ENOTCONN: case ECONNABORTED: case EHOSTUNREACH:
    return fail (cmd, S4K_SENSE_ABORTED_COMMAND, LUN_COMMUNICATION_FAILURE);
  case ENOMEM: case EAGAIN: case EBUSY: case ENOBUFS:
    return no_memory (cmd);
  default:
    return fail (cmd, S4K_SENSE_HARDWARE_ERROR, INTERNAL_TARGET_FAILURE);
  }
}

/* VERIFY with BYTCHK: the medium (scratch) against the data-out. */
static unsigned
verify_compare (struct s4k_scsi_lun *lun, struct s4k_scsi_cmd *cmd)
{
  const uint8_t *m = cmd->priv.scratch, *d = cmd->priv.data;
  const uint64_t len = cmd->priv.blocks << lun->lshift;
  const uint32_t L = lun->p.geom.logical;
  for (uint64_t i = 0; i < len; i++) {
    const uint8_t want = cmd->priv.bytchk == 1 ? d[i] : d[i % L];
    if (m[i] != want)
      /* INFORMATION: the offset of the first byte that differs. */
      return fail_info (cmd, S4K_SENSE_MISCOMPARE, MISCOMPARE_DURING_VERIFY,
                        true, i, NO_FIELD_PTR);
  }
  return good (cmd);
}

unsigned
s4k_scsi_done (struct s4k_scsi_lun *lun, struct s4k_scsi_cmd *cmd,
               unsigned failed, int r, unsigned cuts)
{
  if (cmd->nops == 0)           /* complete already */
    return 0;
  const bool salvaging = cmd->priv.salvage_end != 0;
  if (failed >= cmd->nops)
    r = 0;
  else if (r == 0)
    r = -EIO;                   /* a failed op must say why */
  if (r != 0 && (cuts != cmd->priv.epoch || r == -ESHUTDOWN))
    /* In flight at a power cut: lost, and not to be retried. */
    return fail (cmd, S4K_SENSE_NOT_READY, LUN_NOT_READY);
  if (r == -EIO && cmd->ops[failed].kind == S4K_SCSI_OP_READ) {
    const struct s4k_scsi_op op = cmd->ops[failed];
    if (salvaging) {
      /* The first failing physical sector; the data before it is in
       * place. */
      if (cmd->priv.kind == KIND_READ)
        cmd->data_in_len = op.off - (cmd->priv.lba << lun->lshift);
      return fail_info (cmd, S4K_SENSE_MEDIUM_ERROR, UNRECOVERED_READ_ERROR,
                        true, op.off >> lun->lshift, NO_FIELD_PTR);
    }
    cmd->priv.salvage_start = cmd->priv.salvage_pos = op.off;
    cmd->priv.salvage_end = op.off + op.len;
    cmd->priv.salvage_buf = op.buf;
    return salvage_round (lun, cmd);
  }
  if (r != 0) {
    const struct s4k_scsi_op op = cmd->ops[failed];
    return map_error (lun, cmd, &op, r);
  }
  if (salvaging) {
    if (cmd->priv.salvage_pos < cmd->priv.salvage_end)
      return salvage_round (lun, cmd);
    /* The sectors read one by one all read: the error went away.  A
     * READ has all its data now; a VERIFY's later pieces never ran, so
     * it reports the failure it saw. */
    if (cmd->priv.kind == KIND_VERIFY)
      return fail_info (cmd, S4K_SENSE_MEDIUM_ERROR, UNRECOVERED_READ_ERROR,
                        true, cmd->priv.salvage_start >> lun->lshift,
                        NO_FIELD_PTR);
  }
  if (cmd->priv.kind == KIND_VERIFY && cmd->priv.bytchk)
    return verify_compare (lun, cmd);
  if (cmd->priv.kind == KIND_READ)
    cmd->data_in_len = cmd->priv.blocks << lun->lshift;
  return good (cmd);
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
