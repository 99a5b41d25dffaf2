/* SPDX-License-Identifier: BSD-3-Clause */
/* The engine against a plain byte-array model, through a recording store
 * that checks the store only ever sees whole physical sectors and counts
 * how each request was split. */
#include <errno.h>
#include <string.h>

#include "sect4k/sect4k.h"
#include "store/store.h"
#include "tap.h"

/* ---- reference geometry (DESIGN.md, written the plain way) ----------- */

static struct s4k_geometry G;

static uint64_t
ref_sector_start (uint64_t off)
{
  if (off < G.alignment)
    return 0;
  return G.alignment + (off - G.alignment) / G.physical * G.physical;
}
static uint64_t
ref_sector_end (uint64_t off)
{
  uint64_t e = off < G.alignment ? G.alignment
                                 : ref_sector_start (off) + G.physical;
  return e < G.size ? e : G.size;
}
static int
ref_boundary (uint64_t off)
{
  return off == G.size || ref_sector_start (off) == off;
}

/* ---- recording store -------------------------------------------------- */

struct rec_store {
  struct s4k_store base;
  struct s4k_store *inner;
  unsigned read_calls, read_pieces, write_calls, bad;
  uint64_t read_bytes;
};

static void
check_piece (struct rec_store *r, uint64_t len, uint64_t off)
{
  if (!ref_boundary (off) || !ref_boundary (off + len) || len == 0) {
    if (!r->bad++)
      diag ("store saw [%" PRIu64 ", +%" PRIu64 ") off sector boundaries",
            off, len);
  }
}
static int
rec_read (struct s4k_store *s, const struct s4k_io *io, unsigned n)
{
  struct rec_store *r = (struct rec_store *) s;
  r->read_calls++;
  r->read_pieces += n;
  for (unsigned i = 0; i < n; i++) {
    check_piece (r, io[i].len, io[i].off);
    r->read_bytes += io[i].len;
  }
  return r->inner->ops->read (r->inner, io, n);
}
static int
rec_write (struct s4k_store *s, const struct s4k_io *io, unsigned n, bool fua)
{
  struct rec_store *r = (struct rec_store *) s;
  r->write_calls++;
  for (unsigned i = 0; i < n; i++)
    check_piece (r, io[i].len, io[i].off);
  return r->inner->ops->write (r->inner, io, n, fua);
}
static int
rec_zero (struct s4k_store *s, uint64_t len, uint64_t off, bool t, bool f)
{
  struct rec_store *r = (struct rec_store *) s;
  check_piece (r, len, off);
  return r->inner->ops->zero (r->inner, len, off, t, f);
}
static int
rec_trim (struct s4k_store *s, uint64_t len, uint64_t off, bool f)
{
  struct rec_store *r = (struct rec_store *) s;
  check_piece (r, len, off);
  return r->inner->ops->trim (r->inner, len, off, f);
}
static int
rec_flush (struct s4k_store *s)
{
  return ((struct rec_store *) s)->inner->ops->flush (
    ((struct rec_store *) s)->inner);
}
static int
rec_extents (struct s4k_store *s, uint64_t len, uint64_t off,
             s4k_extent_fn *fn, void *opaque)
{
  struct rec_store *r = (struct rec_store *) s;
  check_piece (r, len, off);
  return r->inner->ops->extents (r->inner, len, off, fn, opaque);
}
static bool
rec_can_fast_zero (struct s4k_store *s)
{
  (void) s;
  return true;
}
static void
rec_close (struct s4k_store *s)
{
  struct rec_store *r = (struct rec_store *) s;
  r->inner->ops->close (r->inner);
}
static const struct s4k_store_ops rec_ops = {
  .name = "recording",
  .read = rec_read,
  .write = rec_write,
  .zero = rec_zero,
  .trim = rec_trim,
  .flush = rec_flush,
  .extents = rec_extents,
  .can_fast_zero = rec_can_fast_zero,
  .close = rec_close,
};

/* ---- random operations ------------------------------------------------ */

static uint64_t rng = 88172645463325252ull;
static uint64_t
rnd (void)
{
  return xorshift64 (&rng);
}

/* Mostly logical-aligned pieces near sector edges, sometimes any bytes. */
static void
pick (uint64_t *off, uint64_t *len, int aligned)
{
  uint64_t unit = aligned ? G.logical : 1;
  uint64_t max = 3 * (uint64_t) G.physical;
  if (max > G.size)
    max = G.size;
  *len = (1 + rnd () % (max / unit)) * unit;
  if (rnd () % 4 == 0)
    *len = unit;
  *off = rnd () % ((G.size - *len) / unit + 1) * unit;
}

/* Distinct physical sectors the request covers only partly. */
static unsigned
ref_cut_sectors (uint64_t off, uint64_t len)
{
  uint64_t end = off + len;
  uint64_t hs = ref_sector_start (off), he = ref_sector_end (off);
  uint64_t ts = ref_sector_start (end - 1), te = ref_sector_end (end - 1);
  unsigned n = (off != hs || (hs == ts && end != he));
  if (ts != hs && end != te)
    n++;
  return n;
}

struct extent_check {
  const unsigned char *model;
  uint64_t next, end;
  int bad;
};
static int
on_extent (void *opaque, uint64_t off, uint64_t len, bool zero)
{
  struct extent_check *c = opaque;
  if (off != c->next || len == 0)
    c->bad = 1;
  if (zero)
    for (uint64_t i = 0; i < len; i++)
      if (c->model[off + i]) {
        c->bad = 2;
        break;
      }
  /* The memory store reports at physical-sector granularity. */
  if (!s4k_is_boundary (&G, off + len) && off + len != c->end)
    c->bad = 3;
  c->next = off + len;
  return 0;
}

static void
run_model (uint32_t L, uint32_t P, uint32_t A, uint64_t size, int strict,
           unsigned nops)
{
  G = (struct s4k_geometry) { size, L, P, A };
  char err[256], name[64];
  snprintf (name, sizeof name, "L=%u P=%u A=%u size=%" PRIu64 "%s",
            L, P, A, size, strict ? "" : " strict=false");
  struct s4k_config c;
  s4k_config_init (&c);
  c.geom = G;
  c.strict = strict;
  c.max_request = S4K_DEFAULT_MAX_REQUEST;
  struct rec_store rec = { { .ops = &rec_ops }, s4k_mem_store_new (&G, err, sizeof err),
                           0, 0, 0, 0, 0 };
  struct s4k_dev *d;
  if (!rec.inner || s4k_dev_new (&d, &c, &rec.base, err, sizeof err) < 0)
    bail ("%s: %s", name, err);

  unsigned char *model = calloc (1, size), *buf = malloc (4 * P),
    *got = malloc (size);
  unsigned mismatch = 0, split_bad = 0, refused_bad = 0, ops = 0;
  for (unsigned i = 0; i < nops; i++) {
    int aligned = strict || rnd () % 3;
    uint64_t off, len;
    pick (&off, &len, aligned);
    unsigned kind = rnd () % 10, cut = ref_cut_sectors (off, len);
    unsigned rc0 = rec.read_calls, rp0 = rec.read_pieces,
      wc0 = rec.write_calls;
    int r;
    if (kind < 5) {
      for (uint64_t j = 0; j < len; j++)
        buf[j] = rnd ();
      r = s4k_write (d, buf, len, off, rnd () % 2 ? S4K_FUA : 0);
      if (r == 0) {
        memcpy (model + off, buf, len);
        /* One read call for all cut sectors, one write call. */
        if ((cut && (rec.read_calls - rc0 != 1 ||
                     rec.read_pieces - rp0 != cut)) ||
            (!cut && rec.read_calls != rc0) || rec.write_calls - wc0 != 1) {
          if (!split_bad++)
            diag ("write [%" PRIu64 ", +%" PRIu64 "): %u cut sectors, %u "
                  "read calls with %u pieces", off, len, cut,
                  rec.read_calls - rc0, rec.read_pieces - rp0);
        }
      }
    }
    else if (kind < 7) {
      r = s4k_zero (d, len, off, rnd () % 2 ? S4K_MAY_TRIM : 0);
      if (r == 0)
        memset (model + off, 0, len);
    }
    else if (kind < 8) {
      r = s4k_trim (d, len, off, 0);
      /* Whole physical sectors inside the range read as zeroes. */
      if (r == 0) {
        uint64_t s = ref_boundary (off) ? off : ref_sector_end (off);
        uint64_t e = ref_boundary (off + len) ? off + len
                                              : ref_sector_start (off + len);
        if (s < e)
          memset (model + s, 0, e - s);
      }
    }
    else {
      r = s4k_read (d, buf, len, off);
      if (r == 0 && memcmp (buf, model + off, len) != 0 && !mismatch++)
        diag ("read [%" PRIu64 ", +%" PRIu64 ") differs", off, len);
    }
    if (strict && (off % L || len % L)) {
      if (r != -EINVAL)
        refused_bad++;
    }
    else if (r != 0) {
      if (!refused_bad++)
        diag ("op %u [%" PRIu64 ", +%" PRIu64 ") failed: %d", kind, off,
              len, r);
    }
    else
      ops++;
  }
  ok (s4k_read (d, got, size, 0) == 0 && memcmp (got, model, size) == 0 &&
      !mismatch, "%s: %u random ops match the model byte for byte",
      name, ops);
  ok (!rec.bad, "%s: the store saw whole physical sectors only", name);
  ok (!split_bad, "%s: each write did one read (of all cut sectors) and "
      "one write", name);
  ok (!refused_bad, "%s: only misaligned requests refused, with EINVAL",
      name);

  struct extent_check ec = { model, 0, size, 0 };
  int r = s4k_extents (d, size, 0, on_extent, &ec);
  ok (r == 0 && !ec.bad && ec.next == size,
      "%s: extents tile the device at physical-sector granularity, holes "
      "are zero",
      name);
  uint64_t off = size / 3 / L * L + L, len = size / 3 / L * L;
  ec = (struct extent_check) { model, off, off + len, 0 };
  r = s4k_extents (d, len, off, on_extent, &ec);
  ok (r == 0 && !ec.bad && ec.next >= off + len,
      "%s: extents of a sub-range start at its offset", name);

  /* Trimming everything gives the memory back. */
  ok (s4k_trim (d, size, 0, 0) == 0 &&
      s4k_mem_store_bytes (rec.inner) == 0,
      "%s: trimming the whole device frees all data memory", name);
  s4k_dev_close (d);
  free (model);
  free (buf);
  free (got);
}

int
main (void)
{
  run_model (512, 512, 0, 256 * 1024, 1, 4000);
  run_model (512, 4096, 0, 256 * 1024 + 1536, 1, 4000);
  run_model (512, 4096, 3584, 256 * 1024 + 1536, 1, 4000);
  run_model (512, 4096, 3584, 256 * 1024 + 1536, 0, 4000);
  run_model (4096, 4096, 0, 256 * 1024, 1, 4000);
  run_model (4096, 4096, 0, 256 * 1024, 0, 4000);
  run_model (1024, 8192, 2048, 256 * 1024 + 1024, 1, 4000);
  run_model (512, 2048, 1024, 64 * 1024 + 512, 0, 4000);
  run_model (2048, 65536, 63488, 1024 * 1024, 1, 1000);
  run_model (512, 1 << 20, 512 * 7, 4 << 20, 1, 300);

  /* Bounds. */
  G = (struct s4k_geometry) { 1 << 20, 512, 4096, 0 };
  struct s4k_config c;
  char err[256], b[4096];
  struct s4k_dev *d;
  s4k_config_init (&c);
  c.geom = G;
  c.max_request = S4K_DEFAULT_MAX_REQUEST;
  struct s4k_store *mem = s4k_mem_store_new (&G, err, sizeof err);
  if (!mem || s4k_dev_new (&d, &c, mem, err, sizeof err) < 0)
    bail ("%s", err);
  ok (s4k_write (d, b, 4096, (1 << 20) - 512, 0) == -ENOSPC,
      "a write past the end gets ENOSPC");
  ok (s4k_read (d, b, 512, 1 << 20) == -EINVAL,
      "a read past the end gets EINVAL");
  ok (s4k_zero (d, 4096, (1 << 20) - 512, 0) == -ENOSPC,
      "a zero past the end gets ENOSPC");
  ok (s4k_trim (d, 4096, (1 << 20) - 512, 0) == -EINVAL,
      "a trim past the end gets EINVAL (the NBD spec)");
  ok (s4k_read (d, b, 0, (1 << 20) + 512) == -EINVAL,
      "a read of nothing past the end gets EINVAL");
  ok (s4k_zero (d, 512, 0, S4K_FAST_ZERO) == 0, "fast zero on memory");
  memset (b, 1, 512);
  ok (s4k_write (d, b, 512, 8192 + 1024, 0) == 0, "a 512-byte write");
  is_u64 (s4k_mem_store_bytes (mem), 4096, "it holds one 4 KiB chunk");
  ok (s4k_zero (d, 1024, 8192 + 512, 0) == 0 &&
      s4k_read (d, b, 512, 8192 + 1024) == 0 && b[0] == 0 && b[511] == 0,
      "a sub-sector zero over it reads back zero");
  is_u64 (s4k_mem_store_bytes (mem), 0,
          "a zero that leaves a cut sector all zero frees it");
  char desc[256];
  s4k_dev_describe (d, desc, sizeof desc);
  ok (strcmp (desc, "512e: logical 512, physical 4096, alignment offset 0 "
              "(lowest aligned LBA 0)") == 0, "description: %s", desc);
  s4k_dev_close (d);
  return done_testing ();
}
