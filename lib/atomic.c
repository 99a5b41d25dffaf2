/* SPDX-License-Identifier: BSD-3-Clause */
/* Untorn (atomic) writes (issue 27): the keys, their limits, and which
 * writes fit them.  How the device keeps a fitting write whole is in
 * dev_plan.h (locks), the memory store (reads) and the fault layer (cuts);
 * README "Atomic writes". */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "sect4k/sect4k.h"

static bool
pow2 (uint64_t v)
{
  return v && (v & (v - 1)) == 0;
}

int
s4k_atomic_set (struct s4k_atomic *a, const char *key, const char *value,
                char *err, size_t errlen)
{
  uint32_t *out = strcmp (key, "atomic-write-max") == 0 ? &a->max
                : strcmp (key, "atomic-write-min") == 0 ? &a->min
                : strcmp (key, "atomic-write-boundary") == 0 ? &a->boundary
                : NULL;
  if (out) {
    uint64_t v;
    if (s4k_parse_size (value, &v) == -1 || v > UINT32_MAX ||
        (v && !pow2 (v))) {
      snprintf (err, errlen, "%s=%s: not a power of two below 4G (a number "
                "with an optional k/M suffix, e.g. 16K; 0: none)",
                key, value);
      return -1;
    }
    *out = v;
    return 0;
  }
  if (strcmp (key, "atomic-writes") == 0) {
    if (strcmp (value, "implicit") == 0)
      a->explicit_only = false;
    else if (strcmp (value, "explicit") == 0)
      a->explicit_only = true;
    else {
      snprintf (err, errlen, "atomic-writes=%s: must be implicit (every "
                "write that fits is atomic) or explicit (only writes "
                "marked atomic)", value);
      return -1;
    }
    return 0;
  }
  return 1;
}

int
s4k_atomic_finish (struct s4k_atomic *a, const struct s4k_geometry *g,
                   uint32_t max_request, char *err, size_t errlen)
{
  if (!a->max) {
    char k[64];
    if (a->min)
      snprintf (k, sizeof k, "atomic-write-min=%" PRIu32, a->min);
    else if (a->boundary)
      snprintf (k, sizeof k, "atomic-write-boundary=%" PRIu32, a->boundary);
    else if (a->explicit_only)
      snprintf (k, sizeof k, "atomic-writes=explicit");
    else
      return 0;
    snprintf (err, errlen, "%s: needs atomic-write-max= (the device has "
              "no atomic writes without it)", k);
    return -1;
  }
  if (a->max % g->physical || a->max > max_request) {
    snprintf (err, errlen, "atomic-write-max=%" PRIu32 ": must be a "
              "multiple of physical=%" PRIu32 " and at most max-request=%"
              PRIu32, a->max, g->physical, max_request);
    return -1;
  }
  if (!a->min)
    a->min = g->physical;
  else if (a->min % g->logical || a->min > a->max) {
    snprintf (err, errlen, "atomic-write-min=%" PRIu32 ": must be a "
              "multiple of logical=%" PRIu32 " and at most "
              "atomic-write-max=%" PRIu32, a->min, g->logical, a->max);
    return -1;
  }
  if (a->boundary && a->boundary < a->max) {
    snprintf (err, errlen, "atomic-write-boundary=%" PRIu32 ": must be at "
              "least atomic-write-max=%" PRIu32 " (or 0: none)",
              a->boundary, a->max);
    return -1;
  }
  return 0;
}

/* min and max are powers of two: masks, no division.  SBC-4's rule for
 * WRITE ATOMIC(16), which is all Block Limits can state: no alignment
 * beyond min, no boundary (its MAXIMUM ATOMIC BOUNDARY SIZE is 0). */
bool
s4k_atomic_allowed (const struct s4k_atomic *a, uint64_t len, uint64_t off)
{
  return a->max && len >= a->min && len <= a->max &&
         !((len | off) & (a->min - 1));
}

bool
s4k_atomic_fits (const struct s4k_atomic *a, uint64_t len, uint64_t off)
{
  if (!s4k_atomic_allowed (a, len, off))
    return false;
  const uint64_t last = off + len - 1;
  /* Within one naturally aligned max-sized unit (NVMe's AWUPF with
   * NABSPF; Linux's power-of-two, naturally aligned writes are). */
  if ((off ^ last) & ~(uint64_t) (a->max - 1))
    return false;
  /* Implied by the unit above while boundary >= max; kept so that the
   * rule reads as NVMe's and stays right if that ever changes. */
  return !a->boundary || !((off ^ last) & ~(uint64_t) (a->boundary - 1));
}
