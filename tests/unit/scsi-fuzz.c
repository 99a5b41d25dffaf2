/* SPDX-License-Identifier: BSD-3-Clause */
/* Fuzz target of the SCSI command layer (lib/scsi/scsi.c): CDBs and data-out
 * bytes from the input, run as a front end runs them against a small
 * memory-store device, and the invariants that keep stored data safe:
 *
 *   - every operation lies within the device, on logical boundaries, with
 *     the flags its kind takes; a buffer in the caller's data lies within
 *     it (and ASan watches the rest: the data buffer is allocated to its
 *     exact length);
 *   - only the commands that write produce writes, zeroes or trims, and
 *     never on a read-only LUN; only SYNCHRONIZE CACHE and START STOP UNIT
 *     flush; only WRITE ATOMIC(16) writes with S4K_ATOMIC, on a LUN with
 *     atomic writes, one write within their limits;
 *   - the result is GOOD without sense, or CHECK CONDITION with 18 bytes
 *     of well-formed fixed sense; data-in never exceeds the buffer, and
 *     only commands that return data return any;
 *   - the op rounds of one command end (a read's salvage is bounded).
 *
 *   - ATA PASS-THROUGH (on a SATA LUN) fails with fixed sense like the
 *     rest or with 22 bytes of descriptor sense holding the ATA Status
 *     Return descriptor, and only its FLUSH CACHE flushes.
 *
 * Input: byte 0 picks the LUN: bits 0-2 the geometry (of five; 5-7 are
 * 512n, 512e and 512e-xp with interface=sata), bit 3
 * write-cache=true, bit 4 read-only, bit 5 no LBPRZ, bit 6 bad-sectors=9,
 * bit 7 atomic writes (max 16 KiB, granularity the physical sector).
 * Then commands, each: a header byte (bits 0-4 the CDB length, bit 5
 * "fail an op", bit 6 "cut the power after exec", bit 7 "two-byte data
 * length"), the CDB, the data length (one or two bytes), the data (what
 * the input holds of it; zeroes after), and with bit 5 one byte: the op
 * to fail (low nibble) and the errno (high nibble).
 *
 * Built with clang -fsanitize=fuzzer by `make fuzz-scsi` (S4K_LIBFUZZER
 * defined); otherwise it is a plain program that runs the files or
 * directories named on its command line (the corpus, in `make check`). */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "sect4k/scsi.h"
#include "sect4k/zone.h"

#define CHECK(cond)                                                        \
  do {                                                                     \
    if (!(cond)) {                                                         \
      fprintf (stderr, "fuzz-scsi: invariant broken: %s (line %d)\n",      \
               #cond, __LINE__);                                           \
      abort ();                                                            \
    }                                                                      \
  } while (0)

static const char *const geometries[][2] = {
  { "model=512n", NULL }, { "model=512e", NULL }, { "model=512e-xp", NULL },
  { "model=4kn", NULL }, { "logical=1024", "physical=8192" },
};

static const int errnos[16] = {
  EIO, EIO, EIO, ENOSPC, ESHUTDOWN, EROFS, EINVAL, ENOMEM, ECONNRESET,
  EBADF, ETIMEDOUT, EPERM, EAGAIN, ENOTSUP, EPIPE, 0,
};

#define DEV_SIZE (256 * 1024)

static void
set (struct s4k_config *c, const char *kv)
{
  static char store[16][64];
  static unsigned n;
  char *s = store[n++ % 16], err[256];
  snprintf (s, 64, "%s", kv);
  char *eq = strchr (s, '=');
  *eq = '\0';
  if (s4k_config_set (c, s, eq + 1, err, sizeof err)) {
    fprintf (stderr, "fuzz-scsi: %s\n", err);
    abort ();
  }
}

struct input {
  const uint8_t *p;
  size_t n;
};

static uint8_t
take (struct input *in)
{
  if (in->n == 0)
    return 0;
  in->n--;
  return *in->p++;
}

static bool
writes (uint8_t op)
{
  return op == 0x0a || op == 0x2a || op == 0xaa || op == 0x8a ||
         op == 0x41 || op == 0x93 || op == 0x42 || op == 0x9c || op == 0x94 ||
         op == 0x04;
}

static bool
is_ata (uint8_t op)
{
  return op == 0x85 || op == 0xa1;
}

static bool
returns_data (uint8_t op)
{
  return op == 0x03 || op == 0x08 || op == 0x12 || op == 0x1a ||
         op == 0x25 || op == 0x28 || op == 0x5a || op == 0x88 ||
         op == 0x9e || op == 0xa3 || op == 0xa8 || is_ata (op) || op == 0x95;
}

/* The op as the invariants allow it. */
static void
check_op (const struct s4k_scsi_op *op, uint8_t opcode, bool readonly,
          const struct s4k_geometry *g, const struct s4k_atomic *a,
          const uint8_t *data, size_t data_len)
{
  if (op->kind == S4K_SCSI_OP_FLUSH) {
    CHECK (op->len == 0 && op->off == 0 && op->buf == NULL &&
           op->flags == 0);
    CHECK (opcode == 0x35 || opcode == 0x91 || opcode == 0x1b ||
           is_ata (opcode));
    return;
  }
  if (op->kind == S4K_SCSI_OP_ZONE) {
    /* ZBC OUT: a zone an op (its first byte, checked by the zones; ZONE
     * COUNT: one op each), or ALL. */
    CHECK (opcode == 0x94 && !readonly && op->len == 0 && op->buf == NULL);
    CHECK ((op->flags & 0xff) >= 1 && (op->flags & 0xff) <= 4 &&
           (op->flags & ~(0xffu | S4K_SCSI_ZONE_ALL)) == 0);
    CHECK (op->off < g->size && op->off % g->logical == 0);
    CHECK (!(op->flags & S4K_SCSI_ZONE_ALL) || op->off == 0);
    return;
  }
  if (op->kind == S4K_SCSI_OP_SET_LOGICAL) {
    /* FORMAT UNIT's switch: to a length the device can take. */
    CHECK ((opcode == 0x04 || is_ata (opcode)) && !readonly && !op->buf &&
           op->off == 0 &&
           op->flags == 0 && (op->len == 512 || op->len == 4096));
    return;
  }
  CHECK (op->kind <= S4K_SCSI_OP_TRIM);
  CHECK (op->len > 0 && op->off < g->size && op->len <= g->size - op->off);
  CHECK (op->off % g->logical == 0 && op->len % g->logical == 0);
  switch (op->kind) {
  case S4K_SCSI_OP_READ:
    CHECK (op->buf && op->flags == 0);
    break;
  case S4K_SCSI_OP_WRITE:
    CHECK (op->buf && (op->flags & ~(S4K_FUA | S4K_ATOMIC)) == 0);
    CHECK (!(op->flags & S4K_ATOMIC) == (opcode != 0x9c));
    if (op->flags & S4K_ATOMIC)
      CHECK (s4k_atomic_allowed (a, op->len, op->off));
    break;
  case S4K_SCSI_OP_ZERO:
    CHECK (!op->buf && (op->flags & ~S4K_MAY_TRIM) == 0);
    break;
  case S4K_SCSI_OP_TRIM:
    CHECK (!op->buf && op->flags == 0);
    break;
  default:
    break;
  }
  if (op->kind != S4K_SCSI_OP_READ)   /* ATA: SET SECTOR CONFIGURATION */
    CHECK ((writes (opcode) || is_ata (opcode)) && !readonly);
  const uint8_t *b = op->buf;
  if (b && data && b >= data && b < data + data_len)
    CHECK (op->len <= (size_t) (data + data_len - b));
}

static void
check_result (const struct s4k_scsi_cmd *cmd, uint8_t opcode, size_t data_len)
{
  CHECK (cmd->data_in_len <= data_len);
  if (cmd->data_in_len)
    CHECK (returns_data (opcode));
  if (cmd->status == S4K_SCSI_GOOD) {
    CHECK (cmd->sense_len == 0);
    return;
  }
  CHECK (cmd->status == S4K_SCSI_CHECK_CONDITION);
  if (is_ata (opcode) && cmd->sense[0] == 0x72) {
    /* The ATA registers: ABORTED COMMAND after ABRT, or CK_COND's
     * RECOVERED ERROR / ATA PASS-THROUGH INFORMATION AVAILABLE. */
    const uint8_t *d = cmd->sense + 8;
    CHECK (cmd->sense_len == 22 && cmd->sense[7] == 14 && d[0] == 0x09 &&
           d[1] == 0x0c);
    CHECK ((cmd->sense[1] == S4K_SENSE_ABORTED_COMMAND && d[13] == 0x51 &&
            d[3] == 0x04 && cmd->data_in_len == 0) ||
           (cmd->sense[1] == 0x01 && cmd->sense[2] == 0 &&
            cmd->sense[3] == 0x1d && d[13] == 0x50 && d[3] == 0));
    return;
  }
  CHECK (cmd->sense_len == S4K_SCSI_SENSE_LEN);
  uint8_t key, asc, ascq;
  bool iv;
  uint64_t info;
  CHECK (s4k_scsi_sense_parse (cmd->sense, cmd->sense_len, &key, &asc, &ascq,
                               &iv, &info) == 0);
  CHECK ((cmd->sense[0] & 0x7f) == 0x70 && cmd->sense[7] == 10);
  CHECK (key != S4K_SENSE_NO_SENSE && asc != 0);
}

static int
run_op (struct s4k_dev *d, const struct s4k_scsi_op *op)
{
  return s4k_scsi_op_run (d, op);
}

int LLVMFuzzerTestOneInput (const uint8_t *p, size_t n);

int
LLVMFuzzerTestOneInput (const uint8_t *p, size_t n)
{
  struct input in = { p, n };
  const uint8_t b0 = take (&in);
  struct s4k_config c;
  char err[256];
  s4k_config_init (&c);
  set (&c, "size=256k");
  set (&c, "max-request=64k");
  const char *const *gk = geometries[(b0 & 7) % 5];
  for (int i = 0; i < 2 && gk[i]; i++)
    set (&c, gk[i]);
  if ((b0 & 7) >= 5)
    set (&c, "interface=sata");
  /* Geometry 5, 6, 7 with bit 3 (the write cache, which zoned= refuses
   * for now): zoned (issue 33), host-managed on 512n and 512e,
   * host-aware on 512e-xp's geometry without its offset (512e). */
  const bool zoned = (b0 & 7) >= 5 && (b0 & 0x08);
  if (zoned) {
    set (&c, (b0 & 7) == 7 ? "zoned=host-aware" : "zoned=host-managed");
    if ((b0 & 7) == 7)
      set (&c, "lowest-aligned=0");
    set (&c, "zone-size=32k");
    if ((b0 & 7) != 7) {
      set (&c, "zone-conventional=1");
      set (&c, "zone-max-open=2");
    }
  }
  if ((b0 & 0x08) && !zoned)
    set (&c, "write-cache=true");
  if (b0 & 0x40)
    set (&c, "bad-sectors=9");

  if (s4k_config_finish (&c, err, sizeof err)) {
    fprintf (stderr, "fuzz-scsi: %s\n", err);
    abort ();
  }
  if (b0 & 0x80) {
    /* Atomic writes: what atomic-write-max=16k with the physical sector
     * as granularity gives the engine and the LUN. */
    c.atomic.max = 16384;
    c.atomic.min = c.geom.physical;
  }
  struct s4k_dev *d;
  if (s4k_dev_open (&d, &c, err, sizeof err)) {
    fprintf (stderr, "fuzz-scsi: %s\n", err);
    abort ();
  }
  const struct s4k_geometry *g = s4k_dev_geometry (d);
  struct s4k_scsi_params prm;
  s4k_scsi_params_from_config (&prm, &c, g, s4k_dev_max_request (d));
  prm.zones = s4k_dev_zones (d);
  prm.readonly = b0 & 0x10;
  prm.lbprz = !(b0 & 0x20);
  s4k_scsi_params_formats (&prm, d);
  struct s4k_scsi_lun *lun = s4k_scsi_lun_new (&prm, err, sizeof err);
  CHECK (lun != NULL);

  for (unsigned cmds = 0; in.n > 0 && cmds < 64; cmds++) {
    const uint8_t h = take (&in);
    uint8_t cdb[32] = { 0 };
    const size_t cdb_len = h & 0x1f;
    for (size_t i = 0; i < cdb_len; i++)
      cdb[i] = take (&in);
    size_t data_len = take (&in);
    if (h & 0x80)
      data_len = data_len << 8 | take (&in);
    uint8_t *data = data_len ? calloc (1, data_len) : NULL;
    CHECK (data_len == 0 || data);
    for (size_t i = 0; i < data_len && in.n > 0; i++)
      data[i] = take (&in);
    unsigned fail_op = ~0u;
    int fail_errno = 0;
    if (h & 0x20) {
      const uint8_t f = take (&in);
      fail_op = f & 0x0f;
      fail_errno = errnos[f >> 4];
    }

    unsigned cuts = s4k_dev_power_cuts (d);
    s4k_fault_epoch (cuts);
    struct s4k_scsi_cmd cmd;
    unsigned nops = s4k_scsi_exec (lun, &cmd, cdb, cdb_len, data, data_len,
                                   cuts);
    if (h & 0x40) {
      char *rep = NULL;
      s4k_dev_power_cut (d, -1, &rep);      /* -ENOTSUP without faults */
      free (rep);
    }
    unsigned rounds = 0, opno = 0;
    while (nops > 0) {
      CHECK (++rounds <= 2 + (DEV_SIZE / 512) / 1024 + 1);
      CHECK (cmd.nops == nops && cmd.ops);
      unsigned i = 0;
      int r = 0;
      for (; i < nops; i++, opno++) {
        check_op (&cmd.ops[i], cdb[0], prm.readonly, g, &prm.atomic, data,
                  data_len);
        r = opno == fail_op && fail_errno ? -fail_errno
                                          : run_op (d, &cmd.ops[i]);
        if (r)
          break;
      }
      nops = s4k_scsi_done (lun, &cmd, i, r, s4k_dev_power_cuts (d));
    }
    check_result (&cmd, cdb_len ? cdb[0] : 0, data_len);
    s4k_scsi_cmd_release (&cmd);
    s4k_fault_epoch (~0u);
    free (data);
  }
  s4k_scsi_lun_free (lun);
  s4k_dev_close (d);
  return 0;
}

#ifndef S4K_LIBFUZZER
/* Replays files, or every file of directories, named on the command
 * line. */
static int
replay (const char *path)
{
  FILE *fp = fopen (path, "rb");
  if (!fp) {
    perror (path);
    return 1;
  }
  static uint8_t buf[1 << 20];
  size_t n = fread (buf, 1, sizeof buf, fp);
  fclose (fp);
  LLVMFuzzerTestOneInput (buf, n);
  return 0;
}

int
main (int argc, char **argv)
{
  int r = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat (argv[i], &st) == 0 && S_ISDIR (st.st_mode)) {
      DIR *dir = opendir (argv[i]);
      struct dirent *e;
      unsigned files = 0;
      while (dir && (e = readdir (dir))) {
        if (e->d_name[0] == '.')
          continue;
        char path[4096];
        snprintf (path, sizeof path, "%s/%s", argv[i], e->d_name);
        r |= replay (path);
        files++;
      }
      if (dir)
        closedir (dir);
      printf ("%s: %u inputs replayed\n", argv[i], files);
    }
    else
      r |= replay (argv[i]);
  }
  return r;
}
#endif
