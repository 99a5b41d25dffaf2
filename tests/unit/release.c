/* SPDX-License-Identifier: BSD-3-Clause */
/* The memory store's released chunks against a shadow copy: zeroes and
 * trims that release runs of chunks (a zone reset releases thousands, in
 * runs across leaves; a trim hands their pages back after the run, a
 * zero that may not trim keeps them), writes of a whole released chunk
 * (the rewrite after a reset, which skips the slow path) and partial
 * writes into released chunks (whose other bytes must read as zeroes:
 * the pages went back, or were zeroed by that writer).  After every request the
 * whole device reads back as the shadow, and the store holds exactly as
 * many bytes as a whole-device write then zero says it should. */
#include <stdlib.h>
#include <string.h>

#include "sect4k/sect4k.h"
#include "store/store.h"
#include "tap.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t
next (uint64_t n)
{
  return xorshift64 (&rng) % n;
}

static void
check (uint32_t L, uint32_t P, uint32_t A, uint64_t size, unsigned steps)
{
  struct s4k_config c;
  struct s4k_dev *d;
  char err[256];
  s4k_config_init (&c);
  c.geom = (struct s4k_geometry) { size, L, P, A };
  c.have_size = c.have_logical = c.have_physical = c.have_alignment = true;
  if (s4k_config_finish (&c, err, sizeof err))
    bail ("%s", err);
  struct s4k_store *mem = s4k_mem_store_new (&c.geom, err, sizeof err);
  if (!mem || s4k_dev_new (&d, &c, mem, err, sizeof err) < 0)
    bail ("L=%u P=%u A=%u: %s", L, P, A, err);
  char *shadow = calloc (1, size), *got = malloc (size), *buf = malloc (size);
  if (!shadow || !got || !buf)
    bail ("out of memory");
  /* The store's chunk: a physical sector, at least a page. */
  const uint64_t chunk = P > 4096 ? P : 4096;
  const uint64_t lbas = size / L;
  int bad = 0;
  unsigned step;
  for (step = 0; step < steps && !bad; step++) {
    uint64_t off, len;
    const unsigned kind = next (6);
    if (kind == 5) {                    /* all of it */
      off = 0;
      len = size;
    }
    else if (kind >= 3) {               /* runs of whole chunks, or more */
      off = next (lbas) * L;
      len = (1 + next (4 * (128 * 1024 / L))) * L;
    }
    else {                              /* a few sectors */
      off = next (lbas) * L;
      len = (1 + next (2 * chunk / L)) * L;
    }
    if (len > size - off)
      len = size - off;
    int r;
    switch (next (3)) {
    case 0:
      for (uint64_t i = 0; i < len; i++)
        buf[i] = 1 + next (255);
      memcpy (shadow + off, buf, len);
      r = s4k_write (d, buf, len, off, 0);
      break;
    case 1:
      memset (shadow + off, 0, len);
      r = s4k_zero (d, len, off, 0);
      break;
    default:
      memset (shadow + off, 0, len);
      r = s4k_zero (d, len, off, S4K_MAY_TRIM);
      break;
    }
    if (r || s4k_read (d, got, size, 0) || memcmp (got, shadow, size)) {
      diag ("step %u: [%" PRIu64 ", +%" PRIu64 "): r %d, device differs "
            "from the shadow", step, off, len, r);
      bad = 1;
    }
  }
  ok (!bad, "L=%u P=%u A=%u: %u random writes, zeroes and trims read back "
      "as the shadow", L, P, A, step);
  /* Every chunk written whole, then all released: the count follows. */
  memset (buf, 0x5a, size);
  uint64_t full = 0, empty = 1;
  if (s4k_write (d, buf, size, 0, 0) == 0)
    full = s4k_mem_store_bytes (mem);
  if (s4k_zero (d, size, 0, 0) == 0)
    empty = s4k_mem_store_bytes (mem);
  const uint64_t shift = s4k_sector_shift (&c.geom);
  const uint64_t chunks = (shift + size + chunk - 1) / chunk;
  ok (full == chunks * chunk && empty == 0,
      "L=%u P=%u A=%u: the store holds %" PRIu64 " bytes written whole "
      "(%" PRIu64 " chunks), %" PRIu64 " after all is zeroed", L, P, A,
      full, chunks, empty);
  /* A released chunk rewritten in part: its other bytes are zeroes,
   * whether its pages went back (a trim) or were kept (a zero that may
   * not trim: NO_HOLE, a zone reset). */
  for (int trim = 0; trim <= 1; trim++) {
    memset (buf, 0x77, chunk);
    memset (got, 1, chunk);
    const uint64_t at = 5 * chunk - shift;  /* a chunk's start */
    if (s4k_write (d, buf, chunk, at, 0) ||
        s4k_zero (d, chunk, at, trim ? S4K_MAY_TRIM : 0) ||
        s4k_write (d, buf, L, at + L, 0) || s4k_read (d, got, chunk, at))
      bail ("L=%u P=%u A=%u: a request failed", L, P, A);
    bool zeroes = true;
    for (uint64_t i = 0; i < chunk; i++)
      if (got[i] != (i >= L && i < 2 * L ? 0x77 : 0))
        zeroes = false;
    ok (zeroes, "L=%u P=%u A=%u: a write into a chunk zeroed whole (%s): "
        "the rest of it reads as zeroes", L, P, A,
        trim ? "may trim: pages handed back" : "pages kept");
  }
  s4k_dev_close (d);
  free (shadow);
  free (got);
  free (buf);
}

int
main (void)
{
  /* Sizes spanning many leaves (32 chunks each) with a short last one. */
  check (512, 4096, 0, (3u << 20) + 8192, 400);
  check (512, 512, 0, (3u << 20) + 1536, 400);    /* sector bits */
  check (512, 4096, 3584, (3u << 20) + 512, 400); /* alignment offset */
  check (4096, 16384, 0, (5u << 20) + 16384, 300);
  return done_testing ();
}
