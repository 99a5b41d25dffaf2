/* SPDX-License-Identifier: BSD-3-Clause */
/* Geometry and configuration against a brute-force reference. */
#include <string.h>

#include "sect4k/sect4k.h"
#include "tap.h"

/* The contract in DESIGN.md, written the plain way. */
static int
ref_boundary (const struct s4k_geometry *g, uint64_t off)
{
  return off == 0 || off == g->size ||
         (off >= g->alignment && (off - g->alignment) % g->physical == 0);
}

static void
check_geometry (uint32_t L, uint32_t P, uint32_t A, uint64_t size)
{
  struct s4k_geometry g = { size, L, P, A };
  char err[256];
  int good = 1;

  if (!ok (s4k_geometry_check (&g, err, sizeof err) == 0,
           "L=%u P=%u A=%u size=%" PRIu64 " is valid", L, P, A, size))
    return;
  for (uint64_t off = 0; off <= size; off += L)
    if (s4k_is_boundary (&g, off) != ref_boundary (&g, off)) {
      diag ("boundary mismatch at %" PRIu64, off);
      good = 0;
      break;
    }
  ok (good, "boundaries match the reference");

  /* Sectors tile [0, size), start and end on boundaries, and hold no
   * boundary inside. */
  uint64_t prev_end = 0, k, n = s4k_sector_count (&g);
  good = 1;
  for (k = 0; k < n && good; k++) {
    uint64_t s, e;
    s4k_sector_range (&g, k, &s, &e);
    if (s != prev_end || e <= s || e - s > P || !ref_boundary (&g, e) ||
        s4k_sector_index (&g, s) != k || s4k_sector_index (&g, e - 1) != k) {
      diag ("sector %" PRIu64 " = [%" PRIu64 ", %" PRIu64 ")", k, s, e);
      good = 0;
    }
    for (uint64_t off = s + L; off < e && good; off += L)
      if (ref_boundary (&g, off)) {
        diag ("boundary %" PRIu64 " inside sector %" PRIu64, off, k);
        good = 0;
      }
    prev_end = e;
  }
  ok (good && prev_end == size, "%" PRIu64 " sectors tile the device", n);
  if (A) {
    uint64_t s, e;
    s4k_sector_range (&g, 0, &s, &e);
    ok (s == 0 && e == (A < size ? A : size), "first sector is short");
  }
}

static int
config (const char *const *kv, struct s4k_config *c, char *err, size_t len)
{
  s4k_config_init (c);
  for (; kv[0]; kv += 2)
    if (s4k_config_set (c, kv[0], kv[1], err, len) == -1)
      return -1;
  return s4k_config_finish (c, err, len);
}

static void
check_preset (const char *model, uint32_t L, uint32_t P, uint32_t A)
{
  const char *kv[] = { "size", "1G", "model", model, NULL };
  struct s4k_config c;
  char err[256];
  int r = config (kv, &c, err, sizeof err);
  ok (r == 0 && c.geom.logical == L && c.geom.physical == P &&
      c.geom.alignment == A && c.geom.size == 1ull << 30,
      "model=%s gives %u/%u/%u", model, L, P, A);
}

/* A bad configuration fails with one line naming key and value. */
static void
check_bad (const char *what, const char *const *kv, const char *needle)
{
  struct s4k_config c;
  char err[256] = "";
  int r = config (kv, &c, err, sizeof err);
  if (!ok (r == -1 && strstr (err, needle) && !strchr (err, '\n'),
           "refused: %s", what))
    diag ("message: '%s' (want '%s')", err, needle);
}

int
main (void)
{
  check_geometry (512, 512, 0, 1 << 20);
  check_geometry (512, 4096, 0, (1 << 20) + 3 * 512);
  check_geometry (512, 4096, 3584, (1 << 20) + 3 * 512);
  check_geometry (512, 4096, 512, 8192);
  check_geometry (4096, 4096, 0, 1 << 20);
  check_geometry (1024, 8192, 2048, (1 << 20) + 1024);
  check_geometry (2048, 65536, 63488, 1 << 22);
  check_geometry (4096, 16384, 12288, 4096);          /* one short sector */
  check_geometry (512, 32u << 20, 5 * 512, (64u << 20) + 512);
  check_geometry (65536, 65536, 0, 1 << 24);

  /* The XP-jumper drive: LBA 63 sits on a physical boundary. */
  struct s4k_geometry xp = { 1 << 20, 512, 4096, 3584 };
  ok (s4k_is_boundary (&xp, 63 * 512) && !s4k_is_boundary (&xp, 64 * 512),
      "512e-xp: LBA 63 starts a physical sector, LBA 64 does not");
  is_u64 (s4k_lowest_aligned (&xp), 7, "512e-xp: lowest aligned LBA 7");

  check_preset ("512n", 512, 512, 0);
  check_preset ("512e", 512, 4096, 0);
  check_preset ("512e-xp", 512, 4096, 3584);
  check_preset ("4kn", 4096, 4096, 0);

  {
    const char *kv[] = { "model", "512e-xp", "alignment-offset", "0",
                         "size", "1G", NULL };
    struct s4k_config c;
    char err[256];
    ok (config (kv, &c, err, sizeof err) == 0 && c.geom.alignment == 0,
        "explicit alignment-offset overrides the preset");
  }
  {
    const char *kv[] = { "size", "1G", "physical", "4096",
                         "lowest-aligned", "15", NULL };
    struct s4k_config c;
    char err[256];
    ok (config (kv, &c, err, sizeof err) == 0 && c.geom.alignment == 3584,
        "lowest-aligned=15 means (15*512) mod 4096 = 3584, as scsi_debug");
  }
  {
    const char *kv[] = { "size", "10G", NULL };
    struct s4k_config c;
    char err[256];
    ok (config (kv, &c, err, sizeof err) == 0 && c.geom.logical == 512 &&
        c.geom.physical == 512 && c.strict && c.max_request == 32u << 20,
        "defaults: 512/512, strict, max-request 32M");
  }
  uint64_t v;
  ok (s4k_parse_size ("10G", &v) == 0 && v == 10ull << 30, "parse 10G");
  ok (s4k_parse_size ("4k", &v) == 0 && v == 4096, "parse 4k");
  ok (s4k_parse_size ("20E", &v) == -1, "20E overflows");
  ok (s4k_parse_size ("-1", &v) == -1 && s4k_parse_size ("", &v) == -1 &&
      s4k_parse_size ("1.5G", &v) == -1 && s4k_parse_size ("4kk", &v) == -1,
      "malformed sizes are refused");

#define BAD(what, needle, ...)                                          \
  do {                                                                  \
    const char *kv_[] = { __VA_ARGS__, NULL };                          \
    check_bad (what, kv_, needle);                                      \
  } while (0)
  BAD ("logical not a power of two", "logical=1000", "size", "1G",
       "logical", "1000");
  BAD ("physical not a power of two", "physical=3000", "size", "1G",
       "physical", "3000");
  BAD ("physical < logical", "physical=512", "size", "1G",
       "logical", "4096", "physical", "512");
  BAD ("logical < 512", "logical=256", "size", "1G", "logical", "256");
  BAD ("logical > 64K", "logical=131072", "size", "1G", "logical", "128K");
  BAD ("physical > 32M", "physical=67108864", "size", "1G",
       "physical", "64M");
  BAD ("alignment not a multiple of logical", "alignment-offset=100",
       "size", "1G", "physical", "4096", "alignment-offset", "100");
  BAD ("alignment >= physical", "alignment-offset=4096",
       "size", "1G", "physical", "4096", "alignment-offset", "4096");
  BAD ("size 0", "size=0", "size", "0");
  BAD ("size not a multiple of logical", "size=1000", "size", "1000");
  BAD ("size not a multiple of logical (4kn)", "size=1049088",
       "size", "1049088", "model", "4kn");
  BAD ("both alignment keys", "lowest-aligned=7", "size", "1G",
       "physical", "4096", "alignment-offset", "3584", "lowest-aligned", "7");
  BAD ("unknown key", "foo=bar", "size", "1G", "foo", "bar");
  BAD ("unknown model", "model=520e", "size", "1G", "model", "520e");
  BAD ("malformed size", "size=12X", "size", "12X");
  BAD ("malformed logical", "logical=abc", "size", "1G", "logical", "abc");
  BAD ("malformed boolean", "strict=maybe", "size", "1G", "strict", "maybe");
  BAD ("max-request not a multiple of logical", "max-request=1000",
       "size", "1G", "max-request", "1000");
  BAD ("max-request below physical", "max-request=512",
       "size", "1G", "physical", "4096", "max-request", "512");
  BAD ("missing size", "size", "logical", "512");
  return done_testing ();
}
