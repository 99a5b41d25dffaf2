/* SPDX-License-Identifier: BSD-3-Clause */
/* The SCSI command layer's block commands (SBC-4): START STOP UNIT, READ
 * CAPACITY, READ and WRITE, SYNCHRONIZE CACHE, WRITE SAME, UNMAP, VERIFY
 * and WRITE ATOMIC, each decoded into the engine operations that carry it
 * out. */
#include <stdlib.h>
#include <string.h>

#include "scsi_priv.h"

/* -- START STOP UNIT -- */

unsigned
scsi_cmd_start_stop_unit (struct ctx *x)
{
  /* Stopping writes the cache back unless NO_FLUSH; the unit stays
   * ready (no NOT READY until a START), and LOEJ has nothing to eject. */
  const uint8_t c4 = x->cdb[4];
  if ((c4 & 0xf0) == 0 && !(c4 & 0x01) && !(c4 & 0x04))
    return scsi_one_op (x->cmd, S4K_SCSI_OP_FLUSH, NULL, 0, 0, 0);
  return scsi_good (x->cmd);
}

/* -- READ CAPACITY -- */

unsigned
scsi_cmd_read_capacity10 (struct ctx *x)
{
  const struct s4k_scsi_lun *lun = x->lun;
  uint8_t b[8];
  const uint64_t last = lun->blocks - 1;
  put32 (b, last > 0xfffffffe ? 0xffffffff : (uint32_t) last);
  put32 (b + 4, lun->p.geom.logical);
  return scsi_data_in (x, b, sizeof b, 8);
}

unsigned
scsi_cmd_read_capacity16 (struct ctx *x)
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
  return scsi_data_in (x, b, sizeof b, get32 (x->cdb + 10));
}

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
  return scsi_fail (cmd, S4K_SENSE_DATA_PROTECT, WRITE_PROTECTED);
}

/* READ and WRITE of every size: LBA and length already decoded. */
static unsigned
read_write (struct ctx *x, bool write, uint64_t lba, uint64_t n, bool fua,
            int len_byte)
{
  struct s4k_scsi_lun *lun = x->lun;
  struct s4k_scsi_cmd *cmd = x->cmd;
  if (n > lun->p.max_request >> lun->lshift)
    return scsi_bad_cdb (cmd, len_byte, -1);
  if (n == 0 ? lba > lun->blocks : !in_range (lun, lba, n))
    return scsi_out_of_range (cmd);
  if (write && lun->p.readonly)
    return write_protected (cmd);
  if (n == 0)
    return scsi_good (cmd);
  const uint64_t bytes = n << lun->lshift;
  if (bytes > x->data_len)
    return scsi_bad_cdb (cmd, len_byte, -1);
  cmd->priv.lba = lba;
  cmd->priv.blocks = n;
  cmd->priv.kind = write ? KIND_PLAIN : KIND_READ;
  /* FUA on a read asks for the medium's data: the engine's reads are
   * coherent with its cache, so only writes carry it. */
  return scsi_one_op (cmd, write ? S4K_SCSI_OP_WRITE : S4K_SCSI_OP_READ,
                      x->data, bytes, lba << lun->lshift,
                      write && fua ? S4K_FUA : 0);
}

unsigned
scsi_cmd_rw6 (struct ctx *x)
{
  const uint8_t *c = x->cdb;
  const uint64_t lba = (uint64_t) (c[1] & 0x1f) << 16 | get16 (c + 2);
  return read_write (x, c[0] == 0x0a, lba, c[4] ? c[4] : 256, false, 4);
}

unsigned
scsi_cmd_rw10 (struct ctx *x)
{
  const uint8_t *c = x->cdb;
  return read_write (x, c[0] == 0x2a, get32 (c + 2), get16 (c + 7),
                     c[1] & 0x08, 7);
}

unsigned
scsi_cmd_rw12 (struct ctx *x)
{
  const uint8_t *c = x->cdb;
  return read_write (x, c[0] == 0xaa, get32 (c + 2), get32 (c + 6),
                     c[1] & 0x08, 6);
}

unsigned
scsi_cmd_rw16 (struct ctx *x)
{
  const uint8_t *c = x->cdb;
  return read_write (x, c[0] == 0x8a, get64 (c + 2), get32 (c + 10),
                     c[1] & 0x08, 10);
}

/* -- WRITE ATOMIC(16) -- */

/* SBC-4 5.48: one write, all or nothing (the engine's S4K_ATOMIC), within
 * the Block Limits page's atomic fields.  Only on a LUN with atomic
 * writes (s4k_scsi_exec refuses the opcode otherwise). */
unsigned
scsi_cmd_write_atomic16 (struct ctx *x)
{
  struct s4k_scsi_lun *lun = x->lun;
  struct s4k_scsi_cmd *cmd = x->cmd;
  const uint8_t *c = x->cdb;
  const uint64_t lba = get64 (c + 2);
  const uint32_t n = get16 (c + 12);
  const uint32_t gran = atomic_min_blocks (lun), unit = atomic_max_blocks (lun);
  /* ATOMIC BOUNDARY: MAXIMUM ATOMIC BOUNDARY SIZE is 0, so only 0. */
  if (get16 (c + 10))
    return scsi_bad_cdb (cmd, 10, -1);
  /* TRANSFER LENGTH above MAXIMUM ATOMIC TRANSFER LENGTH, or not a
   * multiple of ATOMIC TRANSFER LENGTH GRANULARITY. */
  if (n > unit || (gran && n % gran))
    return scsi_bad_cdb (cmd, 12, -1);
  if (n == 0 ? lba > lun->blocks : !in_range (lun, lba, n))
    return scsi_out_of_range (cmd);
  /* The LBA not a multiple of ATOMIC ALIGNMENT.  Nothing else: a write
   * across a multiple of the maximum is atomic too (the engine's
   * s4k_atomic_allowed), as Block Limits has no field to forbid it. */
  if (gran && lba % gran)
    return scsi_bad_cdb (cmd, 2, -1);
  if (lun->p.readonly)
    return write_protected (cmd);
  if (n == 0)
    return scsi_good (cmd);
  const uint64_t bytes = (uint64_t) n << lun->lshift;
  if (bytes > x->data_len)
    return scsi_bad_cdb (cmd, 12, -1);
  cmd->priv.lba = lba;
  cmd->priv.blocks = n;
  cmd->priv.kind = KIND_PLAIN;
  return scsi_one_op (cmd, S4K_SCSI_OP_WRITE, x->data, bytes,
                      lba << lun->lshift,
                      S4K_ATOMIC | (c[1] & 0x08 ? S4K_FUA : 0));
}

/* -- SYNCHRONIZE CACHE -- */

static unsigned
sync_cache (struct ctx *x, uint64_t lba, uint64_t n)
{
  /* The whole cache is written back; the range must still be valid.
   * 0 blocks: from lba to the end. */
  if (n == 0 ? lba >= x->lun->blocks : !in_range (x->lun, lba, n))
    return scsi_out_of_range (x->cmd);
  return scsi_one_op (x->cmd, S4K_SCSI_OP_FLUSH, NULL, 0, 0, 0);
}

unsigned
scsi_cmd_sync10 (struct ctx *x)
{
  return sync_cache (x, get32 (x->cdb + 2), get16 (x->cdb + 7));
}

unsigned
scsi_cmd_sync16 (struct ctx *x)
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
    return scsi_bad_cdb (cmd, len_byte, -1);
  if (n > S4K_SCSI_MAX_WRITE_SAME_BYTES >> lun->lshift)
    return scsi_bad_cdb (cmd, len_byte, -1);
  if (!in_range (lun, lba, n))
    return scsi_out_of_range (cmd);
  if (lun->p.readonly)
    return write_protected (cmd);
  if (!ndob && x->data_len < L)
    return scsi_fail (cmd, S4K_SENSE_ILLEGAL_REQUEST,
                      PARAMETER_LIST_LENGTH_ERROR);
  const uint64_t off = lba << lun->lshift, len = n << lun->lshift;
  cmd->priv.lba = lba;
  cmd->priv.blocks = n;
  if (ndob || all_zero (x->data, L))
    /* Zeroes: with UNMAP the sectors may be deallocated (they read as
     * zeroes either way, which s4k_zero promises, unlike trim). */
    return scsi_one_op (cmd, S4K_SCSI_OP_ZERO, NULL, len, off,
                        unmap ? S4K_MAY_TRIM : 0);
  /* A pattern: a buffer of it repeated, written piece by piece. */
  const uint64_t per = PATTERN_BYTES > L ? PATTERN_BYTES / L : 1;
  const uint64_t piece_blocks = n < per ? n : per;
  uint8_t *pat = malloc (piece_blocks * L);
  if (!pat)
    return scsi_no_memory (cmd);
  for (uint64_t i = 0; i < piece_blocks; i++)
    memcpy (pat + i * L, x->data, L);
  cmd->priv.scratch = pat;
  const uint64_t pieces = (n + piece_blocks - 1) / piece_blocks;
  struct s4k_scsi_op *ops = scsi_ops_alloc (cmd, pieces);
  if (!ops)
    return scsi_no_memory (cmd);
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

unsigned
scsi_cmd_write_same10 (struct ctx *x)
{
  return write_same (x, get32 (x->cdb + 2), get16 (x->cdb + 7), 7);
}

unsigned
scsi_cmd_write_same16 (struct ctx *x)
{
  return write_same (x, get64 (x->cdb + 2), get32 (x->cdb + 10), 10);
}

/* -- UNMAP -- */

unsigned
scsi_cmd_unmap (struct ctx *x)
{
  struct s4k_scsi_lun *lun = x->lun;
  struct s4k_scsi_cmd *cmd = x->cmd;
  const size_t len = get16 (x->cdb + 7);
  const uint8_t *d = x->data;
  if (len == 0)
    return scsi_good (cmd);
  if (len < 8 || len > x->data_len)
    return scsi_fail (cmd, S4K_SENSE_ILLEGAL_REQUEST,
                      PARAMETER_LIST_LENGTH_ERROR);
  if (lun->p.readonly)
    return write_protected (cmd);
  /* Whole descriptors only: a cut one at the end is ignored (SBC-4). */
  const size_t bddl = get16 (d + 2);
  const size_t avail = len - 8 < bddl ? len - 8 : bddl;
  const size_t nd = avail / 16;
  if (nd > S4K_SCSI_MAX_UNMAP_DESCRIPTORS)
    return scsi_bad_param (cmd, 2, -1);
  size_t nops = 0;
  for (size_t i = 0; i < nd; i++) {
    const uint8_t *e = d + 8 + 16 * i;
    const uint64_t lba = get64 (e);
    const uint32_t cnt = get32 (e + 8);
    if (cnt > S4K_SCSI_MAX_UNMAP_BYTES >> lun->lshift)
      return scsi_bad_param (cmd, (int) (8 + 16 * i + 8), -1);
    if (cnt == 0 ? lba > lun->blocks : !in_range (lun, lba, cnt))
      return scsi_out_of_range (cmd);
    nops += cnt != 0;
  }
  if (nops == 0)
    return scsi_good (cmd);
  struct s4k_scsi_op *ops = scsi_ops_alloc (cmd, nops);
  if (!ops)
    return scsi_no_memory (cmd);
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
    return scsi_bad_cdb (cmd, 1, 2);
  if (n > lun->p.max_request >> lun->lshift)
    return scsi_bad_cdb (cmd, len_byte, -1);
  if (n == 0 ? lba > lun->blocks : !in_range (lun, lba, n))
    return scsi_out_of_range (cmd);
  if (n == 0)
    return scsi_good (cmd);
  const uint64_t off = lba << lun->lshift, len = n << lun->lshift;
  const uint64_t want = bytchk == 0 ? 0 : bytchk == 1 ? len : L;
  if (want > x->data_len)
    return scsi_bad_cdb (cmd, len_byte, -1);
  cmd->priv.lba = lba;
  cmd->priv.blocks = n;
  cmd->priv.bytchk = bytchk;
  cmd->priv.kind = KIND_VERIFY;
  const uint64_t piece = bytchk ? len : len < VERIFY_PIECE ? len
                                                            : VERIFY_PIECE;
  uint8_t *s = malloc (piece);
  if (!s)
    return scsi_no_memory (cmd);
  cmd->priv.scratch = s;
  const uint64_t pieces = (len + piece - 1) / piece;
  struct s4k_scsi_op *ops = scsi_ops_alloc (cmd, pieces);
  if (!ops)
    return scsi_no_memory (cmd);
  for (uint64_t i = 0; i < pieces; i++) {
    ops[i].kind = S4K_SCSI_OP_READ;
    ops[i].buf = s;
    ops[i].off = off + i * piece;
    ops[i].len = len - i * piece < piece ? len - i * piece : piece;
  }
  return cmd->nops;
}

unsigned
scsi_cmd_verify10 (struct ctx *x)
{
  return verify (x, get32 (x->cdb + 2), get16 (x->cdb + 7), 7);
}

unsigned
scsi_cmd_verify16 (struct ctx *x)
{
  return verify (x, get64 (x->cdb + 2), get32 (x->cdb + 10), 10);
}

/* VERIFY with BYTCHK: the medium (scratch) against the data-out. */
unsigned
scsi_verify_compare (struct s4k_scsi_lun *lun, struct s4k_scsi_cmd *cmd)
{
  const uint8_t *m = cmd->priv.scratch, *d = cmd->priv.data;
  const uint64_t len = cmd->priv.blocks << lun->lshift;
  const uint32_t L = lun->p.geom.logical;
  for (uint64_t i = 0; i < len; i++) {
    const uint8_t want = cmd->priv.bytchk == 1 ? d[i] : d[i % L];
    if (m[i] != want)
      /* INFORMATION: the offset of the first byte that differs. */
      return scsi_fail_info (cmd, S4K_SENSE_MISCOMPARE,
                             MISCOMPARE_DURING_VERIFY, true, i, NO_FIELD_PTR);
  }
  return scsi_good (cmd);
}
