/* SPDX-License-Identifier: BSD-3-Clause */
/* The memory store at the sizes NBD allows (up to 2^63 bytes less a
 * logical sector): opening, hole reads and whole-device extents cost
 * nothing that grows with the size, extents skip what was never written,
 * and data written far apart reads back, its extents exactly the physical
 * sectors written (issue 15). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sect4k/sect4k.h"
#include "store/store.h"
#include "tap.h"

#define MAX_RUNS 64

struct runs {
  unsigned n;
  uint64_t next;
  int bad;
  struct { uint64_t off, len; bool zero; } r[MAX_RUNS];
};

static int
on_run (void *opaque, uint64_t off, uint64_t len, bool zero)
{
  struct runs *rs = opaque;
  if (off != rs->next || len == 0 || rs->n == MAX_RUNS)
    rs->bad = 1;
  else
    rs->r[rs->n++] = (typeof (rs->r[0])) { off, len, zero };
  rs->next = off + len;
  return 0;
}

/* Resident memory of this process, in KiB. */
static long
rss_kib (void)
{
  FILE *f = fopen ("/proc/self/status", "r");
  char line[256];
  long kib = -1;
  while (f && fgets (line, sizeof line, f))
    if (strncmp (line, "VmRSS:", 6) == 0)
      kib = atol (line + 6);
  if (f)
    fclose (f);
  return kib;
}

static void
run (const char *model, uint64_t size)
{
  struct s4k_config c;
  struct s4k_dev *d;
  char err[256], sz[32];
  const bool san = getenv ("SECT4K_SAN") && *getenv ("SECT4K_SAN");

  snprintf (sz, sizeof sz, "%" PRIu64, size);
  s4k_config_init (&c);
  long rss0 = rss_kib ();
  if (s4k_config_set (&c, "size", sz, err, sizeof err) ||
      s4k_config_set (&c, "model", model, err, sizeof err) ||
      s4k_config_finish (&c, err, sizeof err) ||
      s4k_dev_open (&d, &c, err, sizeof err)) {
    ok (0, "%s size=%s opens: %s", model, sz, err);
    return;
  }
  ok (1, "%s size=%s opens", model, sz);
  const struct s4k_geometry *g = s4k_dev_geometry (d);
  const uint32_t L = g->logical;

  /* Hole reads, spread over the whole device. */
  char *buf = malloc (1 << 16), *pat = malloc (1 << 16);
  uint64_t x = 88172645463325252ull;
  int bad = 0;
  for (unsigned i = 0; i < 10000; i++) {
    uint64_t off = xorshift64 (&x) % (size / L) * L;
    memset (buf, 1, L);
    if (s4k_read (d, buf, L, off) != 0 || buf[0] || buf[L - 1])
      bad++;
  }
  ok (!bad, "%s: 10000 random hole reads are zeroes", model);

  struct runs rs = { 0 };
  int r = s4k_extents (d, size, 0, on_run, &rs);
  ok (r == 0 && !rs.bad && rs.n == 1 && rs.r[0].zero && rs.next == size,
      "%s: extents of the whole idle device: one hole", model);
  long grown = rss_kib () - rss0;
  if (san)
    printf ("ok %u # skip RSS means nothing under a sanitizer\n", ++tap_n);
  else
    ok (grown < 2048, "%s: opening, hole reads and extents cost %ld KiB "
        "of RSS (< 2 MiB)", model, grown);

  /* Far-apart writes; every offset is logical-aligned. */
  const uint64_t offs[] = {
    0, (1ull << 40) + L, size / 3 / L * L, size / 2 / L * L + 3 * L,
    size - L,
  };
  const unsigned n = sizeof offs / sizeof offs[0];
  bad = 0;
  for (unsigned i = 0; i < n; i++) {
    memset (pat, 'a' + i, L);
    if (s4k_write (d, pat, L, offs[i], 0) != 0)
      bad++;
  }
  for (unsigned i = 0; i < n; i++) {
    memset (pat, 'a' + i, L);
    if (s4k_read (d, buf, L, offs[i]) != 0 || memcmp (buf, pat, L) != 0)
      bad++;
  }
  ok (!bad, "%s: writes at %u far-apart offsets read back", model, n);

  /* Extents: data exactly on the physical sectors written. */
  rs = (struct runs) { 0 };
  r = s4k_extents (d, size, 0, on_run, &rs);
  bad = r != 0 || rs.bad || rs.next != size;
  for (unsigned i = 0; !bad && i < rs.n; i++) {
    bool data = false;
    for (unsigned j = 0; j < n; j++)
      if (offs[j] >= rs.r[i].off && offs[j] < rs.r[i].off + rs.r[i].len)
        data = true;
    uint64_t first = s4k_sector_index (g, rs.r[i].off);
    uint64_t last = s4k_sector_index (g, rs.r[i].off + rs.r[i].len - 1);
    uint64_t s, e, s2, e2;
    s4k_sector_range (g, first, &s, &e);
    s4k_sector_range (g, last, &s2, &e2);
    if (data == rs.r[i].zero || s != rs.r[i].off ||
        e2 != rs.r[i].off + rs.r[i].len || (data && first != last)) {
      diag ("run %u: [%" PRIu64 ", +%" PRIu64 ") %s", i, rs.r[i].off,
            rs.r[i].len, rs.r[i].zero ? "hole" : "data");
      bad = 1;
    }
  }
  ok (!bad && rs.n == 2 * n - 1,
      "%s: whole-device extents: %u runs, data exactly on the %u physical "
      "sectors written", model, rs.n, n);

  /* Zeroing them all makes the device one hole again and frees it all. */
  bad = 0;
  for (unsigned i = 0; i < n; i++)
    if (s4k_zero (d, L, offs[i], 0) != 0)
      bad++;
  rs = (struct runs) { 0 };
  r = s4k_extents (d, size, 0, on_run, &rs);
  ok (!bad && r == 0 && !rs.bad && rs.n == 1 && rs.r[0].zero,
      "%s: zeroed again, the device is one hole", model);
  s4k_dev_close (d);
  free (buf);
  free (pat);
}

/* Each physical sector in turn, written (one logical sector of it) then
 * zeroed or trimmed: extents show exactly that sector as data, then none
 * (physical-sector granularity, the short first and last sectors too). */
static void
granularity (uint32_t L, uint32_t P, uint32_t A, uint64_t size)
{
  struct s4k_config c;
  struct s4k_dev *d;
  char err[256], buf[4096];
  s4k_config_init (&c);
  c.geom = (struct s4k_geometry) { size, L, P, A };
  c.have_size = c.have_logical = c.have_physical = c.have_alignment = true;
  if (s4k_config_finish (&c, err, sizeof err) ||
      s4k_dev_open (&d, &c, err, sizeof err))
    bail ("L=%u P=%u A=%u: %s", L, P, A, err);
  const struct s4k_geometry *g = s4k_dev_geometry (d);
  int bad = 0;
  memset (buf, 7, sizeof buf);
  for (uint64_t k = 0; k < s4k_sector_count (g) && !bad; k++) {
    uint64_t s, e;
    s4k_sector_range (g, k, &s, &e);
    struct runs rs = { 0 };
    if (s4k_write (d, buf, L, s, 0) ||
        s4k_extents (d, size, 0, on_run, &rs) || rs.bad)
      bad = 1;
    unsigned i = 0;
    if (s > 0 && !(rs.r[i].off == 0 && rs.r[i].len == s && rs.r[i++].zero))
      bad = 2;
    if (!(rs.r[i].off == s && rs.r[i].len == e - s && !rs.r[i++].zero))
      bad = 3;
    if (e < size && !(rs.r[i].len == size - e && rs.r[i++].zero))
      bad = 4;
    if (rs.n != i)
      bad = 5;
    int r = k % 2 ? s4k_trim (d, e - s, s, 0) : s4k_zero (d, L, s, 0);
    rs = (struct runs) { 0 };
    if (r || s4k_extents (d, size, 0, on_run, &rs) || rs.n != 1 ||
        !rs.r[0].zero)
      bad = 6;
    if (bad)
      diag ("sector %" PRIu64 " [%" PRIu64 ", %" PRIu64 "): case %d", k,
            s, e, bad);
  }
  ok (!bad, "L=%u P=%u A=%u: a write makes exactly its physical sector "
      "data; a zero or trim makes it a hole again", L, P, A);
  s4k_dev_close (d);
}

int
main (void)
{
  const uint64_t top = (uint64_t) INT64_MAX;   /* NBD's largest size */
  /* A walk whose cost grows with the size would take hours: fail. */
  alarm (120);
  granularity (512, 512, 0, 16384 + 512);
  granularity (512, 1024, 512, 16384 + 1024);
  granularity (1024, 2048, 1024, 32768 + 1024);
  granularity (512, 4096, 3584, 32768 + 512);
  granularity (4096, 8192, 4096, 65536 + 4096);
  run ("512n", top / 512 * 512);
  run ("512e-xp", top / 512 * 512);
  run ("4kn", top / 4096 * 4096);
  run ("512e", 64ull << 40);
  return done_testing ();
}
