/* SPDX-License-Identifier: BSD-3-Clause */
/* The geometry contract: which byte ranges form physical sectors. */
#include <inttypes.h>
#include <stdio.h>

#include "sect4k/sect4k.h"

static bool
is_pow2 (uint64_t x)
{
  return x && !(x & (x - 1));
}

int
s4k_geometry_check (const struct s4k_geometry *g, char *err, size_t errlen)
{
  const uint32_t L = g->logical, P = g->physical, A = g->alignment;

  if (!is_pow2 (L) || L < S4K_MIN_LOGICAL || L > S4K_MAX_LOGICAL) {
    snprintf (err, errlen, "logical=%" PRIu32 ": must be a power of two "
              "from 512 to 65536", L);
    return -1;
  }
  if (!is_pow2 (P) || P > S4K_MAX_PHYSICAL) {
    snprintf (err, errlen, "physical=%" PRIu32 ": must be a power of two "
              "no larger than 33554432 (32M)", P);
    return -1;
  }
  if (P < L) {
    snprintf (err, errlen, "physical=%" PRIu32 ": must not be smaller than "
              "logical=%" PRIu32, P, L);
    return -1;
  }
  if (A % L != 0 || A >= P) {
    snprintf (err, errlen, "alignment-offset=%" PRIu32 ": must be a multiple "
              "of logical=%" PRIu32 " and smaller than physical=%" PRIu32,
              A, L, P);
    return -1;
  }
  if (g->size == 0 || g->size % L != 0) {
    snprintf (err, errlen, "size=%" PRIu64 ": must be a non-zero multiple "
              "of logical=%" PRIu32, g->size, L);
    return -1;
  }
  if (g->size > (uint64_t) INT64_MAX) {
    snprintf (err, errlen, "size=%" PRIu64 ": larger than NBD allows "
              "(%" PRId64 ")", g->size, INT64_MAX);
    return -1;
  }
  return 0;
}

uint64_t
s4k_sector_count (const struct s4k_geometry *g)
{
  return (g->size + s4k_sector_shift (g) + g->physical - 1) / g->physical;
}

uint64_t
s4k_lowest_aligned (const struct s4k_geometry *g)
{
  return g->alignment / g->logical;
}
