/* SPDX-License-Identifier: BSD-3-Clause */
/* The fault keys (issue 11): parsed here so config.c only hands them on. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sect4k/sect4k.h"

/* Decimal, no sign, no suffix. */
static int
parse_u64 (const char **p, uint64_t *out)
{
  const char *s = *p;
  uint64_t v = 0;
  if (*s < '0' || *s > '9')
    return -1;
  for (; *s >= '0' && *s <= '9'; s++) {
    if (v > (UINT64_MAX - (*s - '0')) / 10)
      return -1;
    v = v * 10 + (*s - '0');
  }
  *p = s;
  *out = v;
  return 0;
}

int
s4k_parse_lba_list (const char *str,
                    int (*fn) (void *opaque, uint64_t first, uint64_t last),
                    void *opaque)
{
  const char *p = str;
  for (;;) {
    uint64_t a, b;
    if (parse_u64 (&p, &a) == -1)
      return -1;
    b = a;
    if (*p == '-') {
      p++;
      if (parse_u64 (&p, &b) == -1 || b < a)
        return -1;
    }
    if (fn) {
      int r = fn (opaque, a, b);
      if (r)
        return r;
    }
    if (*p == '\0')
      return 0;
    if (*p++ != ',')
      return -1;
  }
}

int
s4k_fault_config_set (struct s4k_fault_config *f, const char *key,
                      const char *value, char *err, size_t errlen)
{
  if (strcmp (key, "write-cache") == 0) {
    if (s4k_parse_bool (value, &f->write_cache) == -1) {
      snprintf (err, errlen, "write-cache=%s: not a boolean (true/false, "
                "on/off, yes/no, 1/0)", value);
      return -1;
    }
  }
  else if (strcmp (key, "write-cache-size") == 0) {
    if (s4k_parse_size (value, &f->write_cache_size) == -1 ||
        f->write_cache_size == 0) {
      snprintf (err, errlen, "write-cache-size=%s: not a valid size above "
                "zero (a number with an optional k/M/G suffix)", value);
      return -1;
    }
  }
  else if (strcmp (key, "power-cut-after") == 0) {
    const char *p = value;
    if (parse_u64 (&p, &f->power_cut_after) == -1 || *p ||
        f->power_cut_after == 0) {
      snprintf (err, errlen, "power-cut-after=%s: must be a number of "
                "writes, at least 1", value);
      return -1;
    }
  }
  else if (strcmp (key, "torn") == 0) {
    if (strcmp (value, "none") == 0)
      f->torn = S4K_TORN_NONE;
    else if (strcmp (value, "sector") == 0)
      f->torn = S4K_TORN_SECTOR;
    else if (strcmp (value, "unreadable") == 0)
      f->torn = S4K_TORN_UNREADABLE;
    else if (strcmp (value, "garbage") == 0)
      f->torn = S4K_TORN_GARBAGE;
    else if (strcmp (value, "zero") == 0)
      f->torn = S4K_TORN_ZERO;
    else {
      snprintf (err, errlen, "torn=%s: must be none, sector, unreadable, "
                "garbage or zero", value);
      return -1;
    }
    f->have_torn = true;
  }
  else if (strcmp (key, "seed") == 0) {
    const char *p = value;
    if (parse_u64 (&p, &f->seed) == -1 || *p) {
      snprintf (err, errlen, "seed=%s: must be a whole number", value);
      return -1;
    }
    f->have_seed = true;
  }
  else if (strcmp (key, "cut-report") == 0 || strcmp (key, "control") == 0) {
    if (*value == '\0') {
      snprintf (err, errlen, "%s=: the path is empty", key);
      return -1;
    }
    *(key[0] == 'c' && key[1] == 'u' ? &f->cut_report : &f->control) = value;
  }
  else if (strcmp (key, "bad-sectors") == 0) {
    if (s4k_parse_lba_list (value, NULL, NULL) == -1) {
      snprintf (err, errlen, "bad-sectors=%s: must be LBA[-LBA][,...] "
                "(decimal LBAs, FIRST <= LAST)", value);
      return -1;
    }
    f->bad_sectors = value;
  }
  else
    return 1;
  return 0;
}

struct lba_check {
  uint64_t lbas;
  uint64_t bad;
};

static int
check_lba (void *opaque, uint64_t first, uint64_t last)
{
  struct lba_check *c = opaque;
  (void) first;
  if (last >= c->lbas) {
    c->bad = last;
    return -1;
  }
  return 0;
}

int
s4k_fault_config_finish (struct s4k_fault_config *f,
                         const struct s4k_geometry *g,
                         char *err, size_t errlen)
{
  if (!f->write_cache_size)
    f->write_cache_size = 64u << 20;
  else if (!f->write_cache) {
    snprintf (err, errlen, "write-cache-size=%" PRIu64 ": needs "
              "write-cache=true", f->write_cache_size);
    return -1;
  }
  if (f->write_cache_size < g->physical) {
    snprintf (err, errlen, "write-cache-size=%" PRIu64 ": must be at least "
              "physical=%" PRIu32, f->write_cache_size, g->physical);
    return -1;
  }
  if (!f->have_torn)
    f->torn = S4K_TORN_SECTOR;
  const bool cuts = f->power_cut_after || f->control;
  if (!cuts && (f->have_torn || f->have_seed || f->cut_report)) {
    snprintf (err, errlen, "%s: needs power-cut-after= or control= (no "
              "power cut can happen otherwise)",
              f->have_torn ? "torn=" : f->have_seed ? "seed=" : "cut-report=");
    return -1;
  }
  /* The size may come from file= later: checked again at open. */
  if (f->bad_sectors && g->size) {
    struct lba_check c = { g->size / g->logical, 0 };
    if (s4k_parse_lba_list (f->bad_sectors, check_lba, &c) == -1) {
      snprintf (err, errlen, "bad-sectors=%s: LBA %" PRIu64 " is beyond the "
                "last LBA %" PRIu64, f->bad_sectors, c.bad, c.lbas - 1);
      return -1;
    }
  }
  f->on = f->write_cache || cuts || f->bad_sectors;
  return 0;
}
