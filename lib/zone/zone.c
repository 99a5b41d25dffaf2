/* SPDX-License-Identifier: BSD-3-Clause */
/* Zoned drives (issue 33): the zone keys and the ZBC-2 zone state
 * machine.  include/sect4k/zone.h says what each call does; docs/zoned.md
 * which rules come from where and what is not wired yet. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sect4k/scsi.h"          /* the sense keys */
#include "sect4k/zone.h"
#include "zone_fast.h"

/* ---- keys -------------------------------------------------------------- */

static bool
pow2 (uint64_t v)
{
  return v && (v & (v - 1)) == 0;
}

/* A count key: digits only, below 2^32. */
static int
parse_count (const char *s, uint32_t *out)
{
  if (!*s)
    return -1;
  uint64_t v = 0;
  for (const char *p = s; *p; p++) {
    if (*p < '0' || *p > '9' || (v = v * 10 + (*p - '0')) > UINT32_MAX)
      return -1;
  }
  *out = v;
  return 0;
}

int
s4k_zone_set (struct s4k_zone_config *c, const char *key, const char *value,
              char *err, size_t errlen)
{
  if (strcmp (key, "zoned") == 0) {
    if (strcmp (value, "host-managed") == 0)
      c->model = S4K_ZONED_HOST_MANAGED;
    else if (strcmp (value, "host-aware") == 0)
      c->model = S4K_ZONED_HOST_AWARE;
    else if (strcmp (value, "none") == 0)
      c->model = S4K_ZONED_NONE;
    else {
      snprintf (err, errlen, "zoned=%s: must be host-managed, host-aware "
                "or none", value);
      return -1;
    }
    return 0;
  }
  uint32_t *count = strcmp (key, "zone-conventional") == 0 ? &c->conventional
                  : strcmp (key, "zone-max-open") == 0 ? &c->max_open
                  : strcmp (key, "zone-max-active") == 0 ? &c->max_active
                  : NULL;
  if (count) {
    if (parse_count (value, count) == -1) {
      snprintf (err, errlen, "%s=%s: not a number of zones (0 to %u)",
                key, value, UINT32_MAX);
      return -1;
    }
  }
  else if (strcmp (key, "zone-reformat") == 0) {
    if (s4k_parse_bool (value, &c->reformat) == -1) {
      snprintf (err, errlen, "zone-reformat=%s: not a boolean (true/false, "
                "on/off, yes/no, 1/0)", value);
      return -1;
    }
  }
  else if (strcmp (key, "zone-size") == 0) {
    uint64_t v;
    if (s4k_parse_size (value, &v) == -1 || !pow2 (v)) {
      snprintf (err, errlen, "zone-size=%s: not a power of two (a number "
                "with an optional k/M/G suffix, e.g. 256M)", value);
      return -1;
    }
    c->size = v;
    snprintf (c->size_text, sizeof c->size_text, "%s", value);
  }
  else
    return 1;
  if (!c->first_key) {
    c->first_key = strcmp (key, "zone-size") == 0 ? "zone-size"
                 : strcmp (key, "zone-conventional") == 0 ? "zone-conventional"
                 : strcmp (key, "zone-max-open") == 0 ? "zone-max-open"
                 : strcmp (key, "zone-reformat") == 0 ? "zone-reformat"
                 : "zone-max-active";
    snprintf (c->first_value, sizeof c->first_value, "%s", value);
  }
  return 0;
}

int
s4k_zone_finish (struct s4k_zone_config *c, const struct s4k_geometry *g,
                 char *err, size_t errlen)
{
  if (c->model == S4K_ZONED_NONE) {
    if (!c->first_key)
      return 0;
    snprintf (err, errlen, "%s=%s: needs zoned=host-managed or "
              "zoned=host-aware", c->first_key, c->first_value);
    return -1;
  }
  /* Zones start on physical boundaries, at multiples of the zone size
   * from LBA 0; no zoned drive we know of has an alignment offset. */
  if (g->alignment) {
    snprintf (err, errlen, "alignment-offset=%" PRIu32 ": a zoned device "
              "has none (its zones start at LBA 0, on physical boundaries)",
              g->alignment);
    return -1;
  }
  if (!c->size) {
    c->size = S4K_ZONE_DEFAULT_SIZE;
    snprintf (c->size_text, sizeof c->size_text, "256M (the default)");
  }
  char zs[64];
  snprintf (zs, sizeof zs, "zone-size=%s", c->size_text);
  /* Linux's sd_zbc_check_capacity takes a power of two of at most
   * UINT_MAX 512-byte sectors; the drive's own writes are whole physical
   * blocks. */
  if (c->size < g->physical || c->size % g->physical ||
      c->size > (1ull << 40)) {
    snprintf (err, errlen, "%s: must be a multiple of physical=%" PRIu32
              " and at most 1T (Linux's zone size limit)", zs, g->physical);
    return -1;
  }
  if (c->size > g->size) {
    snprintf (err, errlen, "%s: larger than the device (size=%" PRIu64 "): "
              "give a smaller zone-size=", zs, g->size);
    return -1;
  }
  const uint64_t nr = (g->size + c->size - 1) / c->size;
  if (nr > UINT32_MAX) {
    snprintf (err, errlen, "%s: more than 2^32 zones on size=%" PRIu64
              ": give a larger zone-size=", zs, g->size);
    return -1;
  }
  if (c->conventional >= nr) {
    snprintf (err, errlen, "zone-conventional=%" PRIu32 ": must leave a "
              "sequential zone (the device has %" PRIu64 " zones of %" PRIu64
              " bytes)", c->conventional, nr, c->size);
    return -1;
  }
  if (c->model == S4K_ZONED_HOST_AWARE && (c->max_open || c->max_active)) {
    snprintf (err, errlen, "%s=%" PRIu32 ": host-aware zones have no limit "
              "(ZBC-2 limits open zones of host-managed drives only)",
              c->max_open ? "zone-max-open" : "zone-max-active",
              c->max_open ? c->max_open : c->max_active);
    return -1;
  }
  if (c->max_open && c->max_active && c->max_open > c->max_active) {
    snprintf (err, errlen, "zone-max-open=%" PRIu32 ": must be at most "
              "zone-max-active=%" PRIu32 " (an open zone is active)",
              c->max_open, c->max_active);
    return -1;
  }
  return 0;
}

int
s4k_zone_refuse_nbd (const struct s4k_zone_config *c, const char *name,
                     const char *prog, bool alone, char *err, size_t errlen)
{
  if (c->model == S4K_ZONED_NONE)
    return 0;
  const bool hm = c->model == S4K_ZONED_HOST_MANAGED;
  /* ublk's zones are host-managed only. */
  snprintf (err, errlen, "%s%s%szoned=%s: NBD has no zone commands (a "
            "client would see a plain disk): serve a zoned drive with "
            "%s--scsi%s%s",
            name ? "export=" : "", name ? name : "", name ? ": " : "",
            hm ? "host-managed" : "host-aware", prog,
            hm ? " or --ublk" : "",
            alone ? " alone (no --unix, --listen or socket activation)"
                  : "");
  return -1;
}

/* ---- errors ------------------------------------------------------------ */

static const struct {
  uint8_t key, asc, ascq;
  const char *name;
} errs[S4K_ZERR_MAX] = {
  [S4K_ZERR_LBA_OUT_OF_RANGE] = { S4K_SENSE_ILLEGAL_REQUEST, 0x21, 0x00,
    "logical block address out of range" },
  [S4K_ZERR_NOT_ZONE_START] = { S4K_SENSE_ILLEGAL_REQUEST, 0x24, 0x00,
    "invalid field in CDB: not the first LBA of a zone" },
  [S4K_ZERR_NOT_WRITE_POINTER_ZONE] = { S4K_SENSE_ILLEGAL_REQUEST, 0x24, 0x00,
    "invalid field in CDB: a conventional zone" },
  [S4K_ZERR_BAD_REPORTING_OPTION] = { S4K_SENSE_ILLEGAL_REQUEST, 0x24, 0x00,
    "invalid field in CDB: a reserved reporting option" },
  [S4K_ZERR_ZONE_FULL] = { S4K_SENSE_ILLEGAL_REQUEST, 0x24, 0x00,
    "invalid field in CDB: the zone is full" },
  [S4K_ZERR_UNALIGNED_WRITE] = { S4K_SENSE_ILLEGAL_REQUEST, 0x21, 0x04,
    "unaligned write command: not at the write pointer" },
  [S4K_ZERR_UNALIGNED_PHYSICAL] = { S4K_SENSE_ILLEGAL_REQUEST, 0x21, 0x04,
    "unaligned write command: not whole physical blocks" },
  [S4K_ZERR_WRITE_BOUNDARY] = { S4K_SENSE_ILLEGAL_REQUEST, 0x21, 0x05,
    "write boundary violation" },
  [S4K_ZERR_READ_CROSS_TYPE] = { S4K_SENSE_ILLEGAL_REQUEST, 0x21, 0x06,
    "attempt to read invalid data: across zone types" },
  [S4K_ZERR_READ_ONLY] = { S4K_SENSE_DATA_PROTECT, 0x27, 0x08,
    "zone is read only" },
  [S4K_ZERR_OFFLINE] = { S4K_SENSE_DATA_PROTECT, 0x2c, 0x0e,
    "zone is offline" },
  [S4K_ZERR_INSUFFICIENT_RESOURCES] = { S4K_SENSE_DATA_PROTECT, 0x55, 0x0e,
    "insufficient zone resources" },
};

bool
s4k_zone_sense (int err, uint8_t *key, uint8_t *asc, uint8_t *ascq)
{
  if (err <= 0 || err >= S4K_ZERR_MAX)
    return false;
  *key = errs[err].key;
  *asc = errs[err].asc;
  *ascq = errs[err].ascq;
  return true;
}

const char *
s4k_zone_strerror (int err)
{
  return err > 0 && err < S4K_ZERR_MAX ? errs[err].name : "not a zone error";
}

/* ---- the state machine ------------------------------------------------- */

int
s4k_zones_new (struct s4k_zones **out, const struct s4k_zone_config *c,
               const struct s4k_geometry *g)
{
  if (c->model == S4K_ZONED_NONE || !pow2 (c->size) || c->size > g->size ||
      c->size % g->logical)
    return -EINVAL;
  struct s4k_zones *z = calloc (1, sizeof *z);
  if (!z)
    return -ENOMEM;
  z->info.model = c->model;
  z->info.capacity = g->size / g->logical;
  z->info.zone_lbas = c->size / g->logical;
  z->shift = __builtin_ctzll (z->info.zone_lbas);
  z->info.nr_zones = (z->info.capacity + z->info.zone_lbas - 1) >> z->shift;
  z->info.conventional = c->conventional;
  z->info.max_open = c->max_open;
  z->info.max_active = c->max_active;
  z->pblk = g->physical / g->logical;
  z->logical = g->logical;
  z->lbits = __builtin_ctz (g->logical);
  z->byte_shift = z->shift + z->lbits;
  z->z = calloc (z->info.nr_zones, sizeof *z->z);
  if (!z->z) {
    free (z);
    return -ENOMEM;
  }
  for (uint32_t i = 0; i < z->info.nr_zones; i++) {
    struct zone *zn = &z->z[i];
    zn->start = (uint64_t) i << z->shift;
    zn->len = z->info.capacity - zn->start < z->info.zone_lbas
              ? z->info.capacity - zn->start : z->info.zone_lbas;
    zn->fend = (zn->start + zn->len) << z->lbits;
    if (i < c->conventional) {
      zn->type = S4K_ZT_CONVENTIONAL;
      zn->cond = S4K_ZC_NOT_WP;
    }
    else {
      zn->type = c->model == S4K_ZONED_HOST_MANAGED ? S4K_ZT_SEQ_REQUIRED
                                                   : S4K_ZT_SEQ_PREFERRED;
      zn->cond = S4K_ZC_EMPTY;
    }
    zn->wp = zn->start;
  }
  pthread_mutex_init (&z->lock, NULL);
  *out = z;
  return 0;
}

void
s4k_zones_free (struct s4k_zones *z)
{
  if (!z)
    return;
  pthread_mutex_destroy (&z->lock);
  free (z->z);
  free (z->dur);
  free (z);
}

void
s4k_zones_info (const struct s4k_zones *z, struct s4k_zones_info *out)
{
  *out = z->info;
}

void
s4k_zones_counts (struct s4k_zones *z, struct s4k_zones_counts *out)
{
  pthread_mutex_lock (&z->lock);
  *out = (struct s4k_zones_counts) { z->imp_open, z->exp_open, z->closed };
  pthread_mutex_unlock (&z->lock);
}

static struct zone *
zone_of (struct s4k_zones *z, uint64_t lba)
{
  return &z->z[lba >> z->shift];
}

static bool
is_open (const struct zone *zn)
{
  return zn->cond == S4K_ZC_IMP_OPEN || zn->cond == S4K_ZC_EXP_OPEN;
}

/* ---- writes without the lock ------------------------------------------
 *
 * The common write of a host-managed drive (an open zone, at its
 * pointer, whole physical blocks, not reaching the zone's end) changes
 * the write pointer only.  A zone a locked write left so (with no
 * records to keep: no file=) is armed: its pointer goes into fwp (in
 * bytes, as the device's requests come), and such a write takes it with
 * a compare-and-swap instead of the lock.
 * Everything else still runs under the lock and claims the zone first
 * (claim: fwp back into wp, disarmed), so a swap that comes after a
 * claim fails and that write takes the lock; one before it is in the wp
 * the claim reads.  Only wp moves without the lock: the condition, the
 * counts and the records never do. */

/* Under the lock: zn's pointer back in wp, the zone disarmed, before
 * anything reads or changes wp or the condition.  Only the lock arms, so
 * a zone seen disarmed stays so. */
static void
claim (const struct s4k_zones *z, struct zone *zn)
{
  if (atomic_load_explicit (&zn->fwp, memory_order_relaxed)) {
    const uint64_t w = atomic_exchange_explicit (&zn->fwp, 0,
                                                 memory_order_acquire);
    if (w)
      zn->wp = (w - 1) >> z->lbits;
  }
}

/* Under the lock, for a report: zn's pointer, armed or not. */
static uint64_t
wp_now (const struct s4k_zones *z, const struct zone *zn)
{
  const uint64_t w = atomic_load_explicit (&zn->fwp, memory_order_acquire);
  return w ? (w - 1) >> z->lbits : zn->wp;
}

/* Under the lock, after a write to zn: armed if its next write at the
 * pointer can go without the lock. */
static void
arm (struct s4k_zones *z, struct zone *zn)
{
  if (!z->rec && zn->type == S4K_ZT_SEQ_REQUIRED && is_open (zn) &&
      zn->wp < zn->start + zn->len)
    atomic_store_explicit (&zn->fwp, (zn->wp << z->lbits) + 1,
                           memory_order_release);
}

/* Takes zn out of the open or closed counts, for a new condition. */
static void
leave (struct s4k_zones *z, struct zone *zn)
{
  if (zn->cond == S4K_ZC_IMP_OPEN)
    z->imp_open--;
  else if (zn->cond == S4K_ZC_EXP_OPEN)
    z->exp_open--;
  else if (zn->cond == S4K_ZC_CLOSED)
    z->closed--;
}

static void
enter (struct s4k_zones *z, struct zone *zn, uint8_t cond)
{
  claim (z, zn);
  leave (z, zn);
  zone_set_cond (zn, cond);
  zone_touch (z, zn);
  if (cond == S4K_ZC_IMP_OPEN)
    z->imp_open++;
  else if (cond == S4K_ZC_EXP_OPEN)
    z->exp_open++;
  else if (cond == S4K_ZC_CLOSED)
    z->closed++;
}

/* ZBC-2's close zone function: an open zone goes CLOSED, or EMPTY if
 * nothing was written. */
static void
close_zone (struct s4k_zones *z, struct zone *zn)
{
  claim (z, zn);
  if (is_open (zn))
    enter (z, zn, zn->wp == zn->start ? S4K_ZC_EMPTY : S4K_ZC_CLOSED);
}

/* Makes room to open zn (EMPTY or CLOSED) under the limits: 0, after
 * closing an implicitly open zone if the open limit is reached, or
 * -INSUFFICIENT_RESOURCES with nothing changed.  Which implicitly open
 * zone to close is the drive's choice; scsi_debug and this model take
 * the lowest, so that zone reports compare line by line. */
static int
make_room (struct s4k_zones *z, struct zone *zn)
{
  const uint32_t active = z->imp_open + z->exp_open + z->closed;
  if (zn->cond == S4K_ZC_EMPTY && z->info.max_active &&
      active >= z->info.max_active)
    return -S4K_ZERR_INSUFFICIENT_RESOURCES;
  if (!z->info.max_open || z->imp_open + z->exp_open < z->info.max_open)
    return 0;
  if (!z->imp_open)
    return -S4K_ZERR_INSUFFICIENT_RESOURCES;
  for (uint32_t i = z->info.conventional; i < z->info.nr_zones; i++)
    if (z->z[i].cond == S4K_ZC_IMP_OPEN) {
      close_zone (z, &z->z[i]);
      break;
    }
  return 0;
}

static void
set_full (struct s4k_zones *z, struct zone *zn)
{
  enter (z, zn, S4K_ZC_FULL);
  zn->wp = zn->start + zn->len;
}

/* RO and OFFLINE refuse everything but reads (OFFLINE those too). */
static int
bad_cond (const struct zone *zn)
{
  return zn->cond == S4K_ZC_OFFLINE ? -S4K_ZERR_OFFLINE
       : zn->cond == S4K_ZC_READ_ONLY ? -S4K_ZERR_READ_ONLY : 0;
}

/* Host-aware: nothing is refused but writes to read-only or offline
 * zones; each sequential zone written moves its write pointer up to the
 * write's end (never down) and notes a write off its write pointer
 * (NON_SEQ), as scsi_debug's zbc_inc_wp; an empty or closed zone opens
 * implicitly, there being no limit. */
static int
write_aware (struct s4k_zones *z, uint64_t lba, uint64_t nlba)
{
  const uint64_t end = lba + nlba;
  for (struct zone *zn = zone_of (z, lba); zn->start < end; zn++) {
    int r = bad_cond (zn);
    if (r)
      return r;
    if (zn == &z->z[z->info.nr_zones - 1])
      break;
  }
  for (struct zone *zn = zone_of (z, lba); zn->start < end; zn++) {
    if (zn->type != S4K_ZT_CONVENTIONAL) {
      const uint64_t zend = zn->start + zn->len;
      const uint64_t s = lba > zn->start ? lba : zn->start;
      const uint64_t e = end < zend ? end : zend;
      if (s != zn->wp)
        zn->non_seq = true;
      if (zn->cond == S4K_ZC_EMPTY || zn->cond == S4K_ZC_CLOSED)
        enter (z, zn, S4K_ZC_IMP_OPEN);
      if (e > zn->wp)
        zn->wp = e;
      zone_touch (z, zn);
      if (zn->wp == zend && zn->cond != S4K_ZC_FULL)
        set_full (z, zn);
    }
    if (zn == &z->z[z->info.nr_zones - 1])
      break;
  }
  return 0;
}

static int
write_managed (struct s4k_zones *z, uint64_t lba, uint64_t nlba)
{
  const uint64_t end = lba + nlba;
  struct zone *zn = zone_of (z, lba), *last = zone_of (z, end - 1);
  int r = bad_cond (zn);
  if (r)
    return r;
  if (zn->type == S4K_ZT_CONVENTIONAL) {
    /* Conventional zones take any write, across conventional zones too;
     * not into the sequential ones after them. */
    for (struct zone *p = zn + 1; p <= last; p++) {
      if (p->type != S4K_ZT_CONVENTIONAL)
        return -S4K_ZERR_WRITE_BOUNDARY;
      if ((r = bad_cond (p)))
        return r;
    }
    return 0;
  }
  if (last != zn)
    return -S4K_ZERR_WRITE_BOUNDARY;
  claim (z, zn);
  if (zn->cond == S4K_ZC_FULL)
    return -S4K_ZERR_ZONE_FULL;
  if (lba != zn->wp)
    return -S4K_ZERR_UNALIGNED_WRITE;
  /* ZBC: a write in a sequential write required zone is whole physical
   * blocks (libzbc's test 01.074; Linux sets zone_write_granularity to
   * the physical block).  The zone's end may cut a physical block. */
  if (nlba % z->pblk && end != zn->start + zn->len)
    return -S4K_ZERR_UNALIGNED_PHYSICAL;
  if (zn->cond == S4K_ZC_EMPTY || zn->cond == S4K_ZC_CLOSED) {
    if ((r = make_room (z, zn)))
      return r;
    enter (z, zn, S4K_ZC_IMP_OPEN);
  }
  zn->wp = end;
  zone_touch (z, zn);
  if (end == zn->start + zn->len)
    set_full (z, zn);
  else
    arm (z, zn);
  return 0;
}

int
s4k_zones_write (struct s4k_zones *z, uint64_t lba, uint64_t nlba)
{
  if (lba > z->info.capacity || nlba > z->info.capacity - lba)
    return -S4K_ZERR_LBA_OUT_OF_RANGE;
  if (!nlba)
    return 0;
  if (!(nlba & (z->pblk - 1)) &&
      s4k_zones_write_fast (z, lba << z->lbits, nlba << z->lbits))
    return 0;
  pthread_mutex_lock (&z->lock);
  int r = z->info.model == S4K_ZONED_HOST_MANAGED
          ? write_managed (z, lba, nlba) : write_aware (z, lba, nlba);
  zone_unlock (z);
  return r;
}

int
s4k_zones_append (struct s4k_zones *z, uint64_t zone_lba, uint64_t nlba,
                  uint64_t *lba)
{
  if (zone_lba >= z->info.capacity)
    return -S4K_ZERR_LBA_OUT_OF_RANGE;
  pthread_mutex_lock (&z->lock);
  struct zone *zn = zone_of (z, zone_lba);
  claim (z, zn);                   /* the pointer the append takes */
  int r;
  if (zn->start != zone_lba)
    r = -S4K_ZERR_NOT_ZONE_START;
  else if (z->info.model != S4K_ZONED_HOST_MANAGED ||
           zn->type == S4K_ZT_CONVENTIONAL)
    r = -S4K_ZERR_NOT_WRITE_POINTER_ZONE;
  else if ((r = bad_cond (zn)))
    ;
  else if (zn->cond == S4K_ZC_FULL)
    r = -S4K_ZERR_ZONE_FULL;
  else if (nlba > zn->start + zn->len - zn->wp)
    r = -S4K_ZERR_WRITE_BOUNDARY;
  else {
    *lba = zn->wp;
    r = nlba ? write_managed (z, zn->wp, nlba) : 0;
  }
  zone_unlock (z);
  return r;
}

bool
s4k_zones_rewind (struct s4k_zones *z, uint64_t lba, uint64_t nlba)
{
  if (z->info.model != S4K_ZONED_HOST_MANAGED || !nlba ||
      lba >= z->info.capacity || nlba > z->info.capacity - lba)
    return false;
  bool moved = false;
  pthread_mutex_lock (&z->lock);
  struct zone *zn = zone_of (z, lba);
  claim (z, zn);
  /* Only the write that ends at the pointer: a later write accepted at
   * its end keeps the pointer where it is (the drive acknowledged it). */
  if (zn->type == S4K_ZT_SEQ_REQUIRED && zn->wp == lba + nlba &&
      lba >= zn->start &&
      (is_open (zn) || zn->cond == S4K_ZC_FULL)) {
    zn->wp = lba;
    zone_touch (z, zn);
    if (zn->cond == S4K_ZC_FULL) {
      /* It was open (implicitly, or explicitly: not known here) while
       * the write ran: open again if the limit allows, else closed. */
      if (lba == zn->start)
        enter (z, zn, S4K_ZC_EMPTY);
      else if (!z->info.max_open ||
               z->imp_open + z->exp_open < z->info.max_open)
        enter (z, zn, S4K_ZC_IMP_OPEN);
      else
        enter (z, zn, S4K_ZC_CLOSED);
    }
    else if (zn->cond == S4K_ZC_IMP_OPEN && lba == zn->start)
      enter (z, zn, S4K_ZC_EMPTY);
    moved = true;
  }
  zone_unlock (z);
  return moved;
}

/* Without the lock: a zone's type never changes, and whether it is
 * offline is an atomic flag (zone_set_cond), so a read racing a zone
 * going offline or coming back sees one side or the other, as it would
 * had it taken the lock just before or after the change (the lock was
 * never held while the data was read).  A read across zones tests each
 * in turn. */
int
s4k_zones_read (struct s4k_zones *z, uint64_t lba, uint64_t nlba)
{
  if (lba > z->info.capacity || nlba > z->info.capacity - lba)
    return -S4K_ZERR_LBA_OUT_OF_RANGE;
  if (!nlba)
    return 0;
  int r = 0;
  const struct zone *first = zone_of (z, lba),
                    *last = zone_of (z, lba + nlba - 1);
  for (const struct zone *zn = first; zn <= last && !r; zn++) {
    if (atomic_load_explicit (&zn->offline, memory_order_acquire))
      r = -S4K_ZERR_OFFLINE;
    /* scsi_debug, libzbc's test 01.062: host-managed reads stay on one
     * side of the conventional/sequential boundary. */
    else if (z->info.model == S4K_ZONED_HOST_MANAGED &&
             (zn->type == S4K_ZT_CONVENTIONAL) !=
             (first->type == S4K_ZT_CONVENTIONAL))
      r = -S4K_ZERR_READ_CROSS_TYPE;
  }
  return r;
}

/* ---- operations -------------------------------------------------------- */

static int
open_one (struct s4k_zones *z, struct zone *zn)
{
  switch (zn->cond) {
  case S4K_ZC_EXP_OPEN: case S4K_ZC_FULL:
    return 0;
  case S4K_ZC_IMP_OPEN:         /* already holds its open resource */
    enter (z, zn, S4K_ZC_EXP_OPEN);
    return 0;
  default: {                    /* EMPTY, CLOSED */
    int r = make_room (z, zn);
    if (!r)
      enter (z, zn, S4K_ZC_EXP_OPEN);
    return r;
  }
  }
}

static void
finish_one (struct s4k_zones *z, struct zone *zn)
{
  if (zn->cond != S4K_ZC_FULL)
    set_full (z, zn);
}

static void
reset_one (struct s4k_zones *z, struct zone *zn)
{
  enter (z, zn, S4K_ZC_EMPTY);
  zn->wp = zn->start;
  zn->non_seq = false;
}

/* The ALL forms act on the zones each applies to and skip the others
 * (read only, offline, conventional) without error. */
static int
op_all (struct s4k_zones *z, enum s4k_zone_op op)
{
  struct zone *zn = z->z + z->info.conventional,
              *end = z->z + z->info.nr_zones;
  switch (op) {
  case S4K_ZOP_OPEN:
    /* ZBC-2: every CLOSED zone opens explicitly, or none if they would
     * not all fit the open limit (scsi_debug, libzbc's test 01.022). */
    if (z->info.max_open && z->exp_open + z->closed > z->info.max_open)
      return -S4K_ZERR_INSUFFICIENT_RESOURCES;
    /* Only those closed now: an implicitly open zone closed to make room
     * stays closed.  Then each finds room (exp + closed fit). */
    for (struct zone *p = zn; p < end; p++)
      p->mark = p->cond == S4K_ZC_CLOSED;
    for (; zn < end; zn++)
      if (zn->mark) {
        zn->mark = false;
        open_one (z, zn);
      }
    return 0;
  case S4K_ZOP_CLOSE:
    for (; zn < end; zn++)
      close_zone (z, zn);
    return 0;
  case S4K_ZOP_FINISH:
    /* Open and closed zones; empty ones stay empty. */
    for (; zn < end; zn++)
      if (is_open (zn) || zn->cond == S4K_ZC_CLOSED)
        finish_one (z, zn);
    return 0;
  case S4K_ZOP_RESET:
    for (; zn < end; zn++)
      if (is_open (zn) || zn->cond == S4K_ZC_CLOSED ||
          zn->cond == S4K_ZC_FULL)
        reset_one (z, zn);
    return 0;
  }
  return -EINVAL;
}

int
s4k_zones_op (struct s4k_zones *z, enum s4k_zone_op op, uint64_t zone_lba,
              bool all)
{
  if (op < S4K_ZOP_CLOSE || op > S4K_ZOP_RESET)
    return -EINVAL;
  int r;
  pthread_mutex_lock (&z->lock);
  if (all) {
    r = op_all (z, op);
    goto out;
  }
  if (zone_lba >= z->info.capacity) {
    r = -S4K_ZERR_LBA_OUT_OF_RANGE;
    goto out;
  }
  struct zone *zn = zone_of (z, zone_lba);
  if (zn->start != zone_lba)
    r = -S4K_ZERR_NOT_ZONE_START;
  else if (zn->type == S4K_ZT_CONVENTIONAL)
    r = -S4K_ZERR_NOT_WRITE_POINTER_ZONE;
  else if ((r = bad_cond (zn)))
    ;
  else
    switch (op) {
    case S4K_ZOP_OPEN: r = open_one (z, zn); break;
    case S4K_ZOP_CLOSE: close_zone (z, zn); break;
    case S4K_ZOP_FINISH: finish_one (z, zn); break;     /* EMPTY too */
    case S4K_ZOP_RESET: reset_one (z, zn); break;
    }
 out:
  zone_unlock (z);
  return r;
}

/* Whether zn matches a reporting option; -1: reserved option. */
static int
matches (const struct zone *zn, unsigned option)
{
  switch (option) {
  case 0x00: case 0x3e: return 1;       /* no gap zones here */
  case 0x01: return zn->cond == S4K_ZC_EMPTY;
  case 0x02: return zn->cond == S4K_ZC_IMP_OPEN;
  case 0x03: return zn->cond == S4K_ZC_EXP_OPEN;
  case 0x04: return zn->cond == S4K_ZC_CLOSED;
  case 0x05: return zn->cond == S4K_ZC_FULL;
  case 0x06: return zn->cond == S4K_ZC_READ_ONLY;
  case 0x07: return zn->cond == S4K_ZC_OFFLINE;
  case 0x08: return 0;                  /* INACTIVE: no zone domains */
  case 0x10: return 0;                  /* RESET recommended: never */
  case 0x11: return zn->non_seq;
  case 0x3f: return zn->cond == S4K_ZC_NOT_WP;
  default: return -1;
  }
}

int
s4k_zones_report (struct s4k_zones *z, uint64_t lba, unsigned option,
                  bool partial, struct s4k_zone_desc *out, uint32_t max,
                  uint64_t *listed)
{
  static const struct zone probe;      /* not z->z[0]: no lock held */
  if (matches (&probe, option) == -1)
    return -S4K_ZERR_BAD_REPORTING_OPTION;
  if (lba >= z->info.capacity)
    return -S4K_ZERR_LBA_OUT_OF_RANGE;
  uint64_t n = 0;
  uint32_t filled = 0;
  pthread_mutex_lock (&z->lock);
  for (uint32_t i = lba >> z->shift; i < z->info.nr_zones; i++) {
    const struct zone *zn = &z->z[i];
    if (!matches (zn, option))
      continue;
    if (filled < max) {
      const bool invalid = zn->cond == S4K_ZC_NOT_WP ||
                           zn->cond == S4K_ZC_READ_ONLY ||
                           zn->cond == S4K_ZC_OFFLINE;
      out[filled++] = (struct s4k_zone_desc) {
        .start = zn->start, .len = zn->len,
        .wp = invalid ? UINT64_MAX : wp_now (z, zn),
        .type = zn->type, .cond = zn->cond, .non_seq = zn->non_seq,
      };
    }
    else if (partial)
      break;
    n++;
  }
  pthread_mutex_unlock (&z->lock);
  *listed = n;
  return filled;
}

int
s4k_zones_set_cond (struct s4k_zones *z, uint64_t zone_lba,
                    enum s4k_zone_cond cond)
{
  if (zone_lba >= z->info.capacity)
    return -S4K_ZERR_LBA_OUT_OF_RANGE;
  if (cond != S4K_ZC_READ_ONLY && cond != S4K_ZC_OFFLINE &&
      cond != S4K_ZC_EMPTY && cond != S4K_ZC_NOT_WP)
    return -EINVAL;
  int r = 0;
  pthread_mutex_lock (&z->lock);
  struct zone *zn = zone_of (z, zone_lba);
  claim (z, zn);
  const bool conv = zn->type == S4K_ZT_CONVENTIONAL;
  if (zn->start != zone_lba)
    r = -S4K_ZERR_NOT_ZONE_START;
  else if ((cond == S4K_ZC_EMPTY && conv) ||
           (cond == S4K_ZC_NOT_WP && !conv))
    r = -EINVAL;
  else if (cond == S4K_ZC_EMPTY || cond == S4K_ZC_NOT_WP) {
    /* Back from read only or offline, as after a reformat. */
    if (zn->cond == S4K_ZC_READ_ONLY || zn->cond == S4K_ZC_OFFLINE) {
      zone_set_cond (zn, cond);
      zn->wp = zn->start;
      zn->non_seq = false;
      zone_touch (z, zn);
    }
  }
  else
    enter (z, zn, cond);
  zone_unlock (z);
  return r;
}

/* ---- power cuts (the fault layer, lib/fault/fault_cut.c) --------------- */

/* A cut kept the zone's data below wp only: the write pointer moves back
 * there and the condition follows it, a cut leaving no zone open (open
 * zone resources are volatile: ZBC-2 keeps only CLOSED and FULL across a
 * power loss). */
int
s4k_zones_cut_wp (struct s4k_zones *z, uint64_t zone_lba, uint64_t wp,
                  uint64_t *now)
{
  if (zone_lba >= z->info.capacity)
    return -S4K_ZERR_LBA_OUT_OF_RANGE;
  int r = 0;
  pthread_mutex_lock (&z->lock);
  struct zone *zn = zone_of (z, zone_lba);
  claim (z, zn);
  const uint64_t cur = zn->cond == S4K_ZC_FULL ? zn->start + zn->len : zn->wp;
  if (zn->start != zone_lba)
    r = -S4K_ZERR_NOT_ZONE_START;
  else if (zn->type == S4K_ZT_CONVENTIONAL)
    r = -S4K_ZERR_NOT_WRITE_POINTER_ZONE;
  else if (bad_cond (zn) || wp < zn->start)
    r = -EINVAL;
  else if (wp >= cur)
    *now = cur;
  else {
    zn->wp = *now = wp;
    enter (z, zn, wp == zn->start ? S4K_ZC_EMPTY
                  : wp == zn->start + zn->len ? S4K_ZC_FULL : S4K_ZC_CLOSED);
  }
  zone_unlock (z);              /* on record with file= */
  return r;
}

void
s4k_zones_power_loss (struct s4k_zones *z)
{
  pthread_mutex_lock (&z->lock);
  for (uint32_t i = z->info.conventional; i < z->info.nr_zones; i++)
    close_zone (z, &z->z[i]);
  zone_unlock (z);
}

void
s4k_zones_wps (struct s4k_zones *z, uint64_t *out)
{
  pthread_mutex_lock (&z->lock);
  for (uint32_t i = 0; i < z->info.nr_zones; i++)
    out[i] = wp_now (z, &z->z[i]);
  pthread_mutex_unlock (&z->lock);
}
