/* SPDX-License-Identifier: BSD-3-Clause */
/* Zoned reads without the zone lock (s4k_zones_read_fast, s4k_zones_read,
 * s4k_read's zoned path): readers of a zone that a control thread fills,
 * resets, takes offline and read-only and repairs, on a memory device.
 * Every read returns either the data (each 4 KiB block one writer's, or
 * zeroes: never mixed) or the offline error, never another result; a
 * read that ran wholly while the zone was offline fails, one that ran
 * wholly while it was readable passes.  Reads of one block and of the
 * whole zone (the fast path), across two sequential zones and across
 * the conventional one (the plan), host-managed and host-aware.  Run
 * under TSan by check-tsan. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "sect4k/sect4k.h"
#include "sect4k/zone.h"
#include "tap.h"
#include "devrig.h"

#define READERS 2
#define ZB 65536u               /* zone bytes: 16 blocks of 4 KiB */
#define BLK 4096u
#define ZL (ZB / 512)           /* zone LBAs (512e) */
#define TARGET 2                /* the zone the control thread plays with */

static struct s4k_dev *d;
static bool host_managed;
static unsigned rounds;
/* A seqlock over the target zone's readability: odd while the control
 * thread changes it; readable says which side it is on when even. */
static atomic_uint epoch;
static atomic_bool readable, stop;
static atomic_uint reads;       /* every reader's, to time the windows */

struct reader {
  pthread_t t;
  unsigned seed;
  unsigned reads, offline, stable_offline, stable_readable;
  unsigned wrong, torn, missed, refused_readable;
};

static bool
uniform (const unsigned char *p, size_t n)
{
  for (size_t i = 1; i < n; i++)
    if (p[i] != p[0])
      return false;
  return true;
}

static void *
reader (void *arg)
{
  struct reader *w = arg;
  static _Thread_local unsigned char buf[2 * ZB];
  const int offline_err = s4k_zone_errno (S4K_ZERR_OFFLINE);
  const int cross_err = s4k_zone_errno (S4K_ZERR_READ_CROSS_TYPE);
  while (!atomic_load (&stop)) {
    unsigned what = rand_r (&w->seed) % 8;
    uint64_t off, len;
    bool target = true;
    if (what < 4) {             /* one block: the fast path */
      off = TARGET * ZB + (rand_r (&w->seed) % (ZB / BLK)) * BLK;
      len = BLK;
    }
    else if (what < 6) {        /* the whole zone: the fast path */
      off = TARGET * ZB;
      len = ZB;
    }
    else if (what == 6) {       /* its last block and the next zone's first */
      off = (TARGET + 1) * ZB - BLK;
      len = 2 * BLK;
    }
    else {                      /* the conventional zone and zone 1 */
      off = ZB - BLK;
      len = 2 * BLK;
      target = false;
    }
    const unsigned e1 = atomic_load (&epoch);
    const bool was = atomic_load (&readable);
    int r = s4k_read (d, buf, len, off);
    const unsigned e2 = atomic_load (&epoch);
    atomic_fetch_add_explicit (&reads, 1, memory_order_relaxed);
    const bool stable = target && e1 == e2 && !(e1 & 1);
    w->reads++;
    if (!target) {
      if (r != (host_managed ? cross_err : 0))
        w->wrong++;
      continue;
    }
    if (r == offline_err) {
      w->offline++;
      if (stable) {
        w->stable_offline += !was;
        w->refused_readable += was;
      }
      continue;
    }
    if (r != 0) {
      w->wrong++;
      continue;
    }
    if (stable) {
      w->stable_readable += was;
      w->missed += !was;
    }
    for (uint64_t i = 0; i < len; i += BLK)
      w->torn += !uniform (buf + i, BLK);
  }
  return NULL;
}

/* The control thread: fills the target zone at its write pointer, one
 * value per round, then resets it, or takes it offline or read-only and
 * repairs it (EMPTY at its start; the data stays, as after a reformat
 * of the zone state only). */
static void
control (void)
{
  static unsigned char block[BLK];
  char err[256];
  for (unsigned k = 0; k < rounds; k++) {
    memset (block, 1 + k % 255, sizeof block);
    for (uint64_t o = 0; o < ZB; o += BLK)
      if (s4k_write (d, block, BLK, TARGET * ZB + o, 0))
        bail ("round %u: write at %" PRIu64 " refused", k, o);
    const uint64_t lba = TARGET * ZL;
    switch (k % 3) {
    case 0:
      if (s4k_dev_zone_op (d, S4K_ZOP_RESET, lba, false))
        bail ("round %u: reset failed", k);
      break;
    case 1:
      atomic_fetch_add (&epoch, 1);
      if (s4k_dev_zone_fault (d, lba, S4K_ZC_OFFLINE, err, sizeof err))
        bail ("round %u: %s", k, err);
      atomic_store (&readable, false);
      atomic_fetch_add (&epoch, 1);
      /* Room for reads of the offline zone: a few dozen. */
      for (unsigned r0 = atomic_load (&reads); atomic_load (&reads) - r0 < 32;)
        ;
      atomic_fetch_add (&epoch, 1);
      if (s4k_dev_zone_fault (d, lba, S4K_ZC_EMPTY, err, sizeof err))
        bail ("round %u: %s", k, err);
      atomic_store (&readable, true);
      atomic_fetch_add (&epoch, 1);
      break;
    case 2:
      /* Read only: reads pass, as before and after. */
      if (s4k_dev_zone_fault (d, lba, S4K_ZC_READ_ONLY, err, sizeof err) ||
          s4k_dev_zone_fault (d, lba, S4K_ZC_EMPTY, err, sizeof err))
        bail ("round %u: %s", k, err);
      break;
    }
  }
}

static void
test_model (const char *model)
{
  char keys[256];
  snprintf (keys, sizeof keys, "size=1M model=512e zoned=%s zone-size=64K "
            "zone-conventional=%u", model, host_managed ? 1 : 0);
  d = open_dev (keys);
  atomic_store (&epoch, 0);
  atomic_store (&readable, true);
  atomic_store (&stop, false);
  struct reader w[READERS];
  for (unsigned i = 0; i < READERS; i++) {
    w[i] = (struct reader) { .seed = 77 + i };
    pthread_create (&w[i].t, NULL, reader, &w[i]);
  }
  control ();
  atomic_store (&stop, true);
  struct reader all = { 0 };
  for (unsigned i = 0; i < READERS; i++) {
    pthread_join (w[i].t, NULL);
    all.reads += w[i].reads;
    all.offline += w[i].offline;
    all.stable_offline += w[i].stable_offline;
    all.stable_readable += w[i].stable_readable;
    all.wrong += w[i].wrong;
    all.torn += w[i].torn;
    all.missed += w[i].missed;
    all.refused_readable += w[i].refused_readable;
  }
  diag ("%s: %u rounds, %u reads, %u failed offline (%u while it stayed "
        "offline), %u passed while it stayed readable", model, rounds,
        all.reads, all.offline, all.stable_offline, all.stable_readable);
  ok (all.wrong == 0, "%s: every read returned data or the offline error "
      "(the cross-type read its own error): %u did not", model, all.wrong);
  ok (all.torn == 0, "%s: every block read is one write's or zeroes: %u "
      "mixed", model, all.torn);
  ok (all.missed == 0, "%s: no read that ran while the zone was offline "
      "passed: %u did", model, all.missed);
  ok (all.refused_readable == 0, "%s: no read that ran while the zone was "
      "readable failed offline: %u did", model, all.refused_readable);
  ok (all.stable_offline > 0 && all.stable_readable > 0, "%s: both sides "
      "were read", model);
  s4k_dev_close (d);
}

int
main (void)
{
  /* Fewer rounds under a sanitizer (SECT4K_SAN): each is slower. */
  const char *san = getenv ("SECT4K_SAN");
  rounds = san && *san ? 100 : 300;
  host_managed = true;
  test_model ("host-managed");
  host_managed = false;
  test_model ("host-aware");
  return done_testing ();
}
