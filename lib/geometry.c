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

/* Shifting offsets by (P - A) mod P puts every physical boundary on a
 * multiple of P, so sector k is simply [kP, (k+1)P) in shifted space. */
static inline uint64_t
shift_of (const struct s4k_geometry *g)
{
  return (g->physical - g->alignment) & (g->physical - 1);
}

uint64_t
s4k_sector_index (const struct s4k_geometry *g, uint64_t off)
{
  /* P is a power of two: a shift, not a division, on the data path. */
  return (off + shift_of (g)) >> __builtin_ctz (g->physical);
}

void
s4k_sector_range (const struct s4k_geometry *g, uint64_t k,
                  uint64_t *start, uint64_t *end)
{
  const uint64_t shift = shift_of (g);
  const uint64_t s = k * g->physical, e = s + g->physical;

  *start = s > shift ? s - shift : 0;
  *end = e - shift < g->size ? e - shift : g->size;
}

uint64_t
s4k_sector_count (const struct s4k_geometry *g)
{
  return (g->size + shift_of (g) + g->physical - 1) / g->physical;
}

bool
s4k_is_boundary (const struct s4k_geometry *g, uint64_t off)
{
  return off == 0 || off == g->size ||
         ((off + shift_of (g)) & (g->physical - 1)) == 0;
}

uint64_t
s4k_lowest_aligned (const struct s4k_geometry *g)
{
  return g->alignment / g->logical;
}
