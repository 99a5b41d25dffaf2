/* SPDX-License-Identifier: BSD-3-Clause */
/* Power cuts on a zoned device under concurrent clients (issue 33): the
 * cut takes the fault layer's mutex and then the zone lock, while
 * writers pass the zone lock (admission) and then the fault layer's
 * mutex (staging), flushers and zone operations take both in turn.
 * Writer threads each append to their own zones through the device with
 * the write cache on, resetting a zone when it is full; a flusher
 * flushes; a cutter cuts the power again and again.  Each client thread
 * is a connection (s4k_fault_epoch): its requests from before a cut fail
 * with EIO, and it reconnects.  Nothing deadlocks, and at the end, after
 * a last cut, every zone reads its own pattern in full below its write
 * pointer (no cut left a hole under a pointer).  Run under TSan by
 * check-tsan. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "sect4k/sect4k.h"
#include "sect4k/zone.h"
#include "tap.h"
#include "devrig.h"

#define WRITERS 3
#define ZONES_EACH 2
#define ZONE_LBAS 64u           /* 4kn: 256 KiB zones */
#define L 4096u

static struct s4k_dev *d;
static atomic_bool stop;
static atomic_uint writes_ok, writes_eio, cuts;

static void
pattern (unsigned char *p, uint64_t lba, uint64_t n)
{
  for (uint64_t i = 0; i < n; i++)
    memset (p + i * L, (int) (((lba + i) * 37 + 11) | 1), L);
}

static struct s4k_zone_desc
zone_at (uint64_t lba)
{
  struct s4k_zone_desc z;
  uint64_t listed;
  if (s4k_zones_report (s4k_dev_zones (d), lba, 0, true, &z, 1, &listed) != 1)
    bail ("report");
  return z;
}

/* A client: its own zones, appended to at the pointer. */
static void *
writer (void *arg)
{
  const unsigned id = (unsigned) (uintptr_t) arg;
  unsigned seed = id * 7 + 1;
  static _Thread_local unsigned char buf[4 * L];
  s4k_fault_epoch (s4k_dev_power_cuts (d));
  while (!atomic_load (&stop)) {
    const uint64_t zone = 1 + id * ZONES_EACH + rand_r (&seed) % ZONES_EACH;
    const struct s4k_zone_desc z = zone_at (zone * ZONE_LBAS);
    int r;
    if (z.cond == S4K_ZC_FULL)
      r = s4k_dev_zone_op (d, S4K_ZOP_RESET, z.start, false);
    else {
      uint64_t n = 1 + rand_r (&seed) % 4;
      if (n > z.start + z.len - z.wp)
        n = z.start + z.len - z.wp;
      pattern (buf, z.wp, n);
      r = s4k_write (d, buf, n * L, z.wp * L,
                     rand_r (&seed) % 16 == 0 ? S4K_FUA : 0);
    }
    if (r == -EIO) {
      /* From before a cut: reconnect. */
      atomic_fetch_add (&writes_eio, 1);
      s4k_fault_epoch (s4k_dev_power_cuts (d));
    }
    else if (r == s4k_zone_errno (S4K_ZERR_UNALIGNED_WRITE))
      ;                         /* a cut moved the pointer since we looked */
    else if (r)
      bail ("writer %u: %d", id, r);
    else
      atomic_fetch_add (&writes_ok, 1);
  }
  return NULL;
}

static void *
flusher (void *arg)
{
  (void) arg;
  s4k_fault_epoch (s4k_dev_power_cuts (d));
  while (!atomic_load (&stop))
    if (s4k_flush (d) == -EIO)
      s4k_fault_epoch (s4k_dev_power_cuts (d));
  return NULL;
}

static void *
cutter (void *arg)
{
  (void) arg;
  for (unsigned i = 0; i < 200 && !atomic_load (&stop); i++) {
    char *rep = NULL;
    if (s4k_dev_power_cut (d, -1, &rep))
      bail ("power cut");
    free (rep);
    atomic_fetch_add (&cuts, 1);
    /* Some writes between cuts. */
    const unsigned w0 = atomic_load (&writes_ok);
    while (atomic_load (&writes_ok) < w0 + 8)
      sched_yield ();
  }
  atomic_store (&stop, true);
  return NULL;
}

int
main (void)
{
  d = open_dev ("size=2M model=4kn zoned=host-managed zone-size=256K "
                "zone-conventional=1 write-cache=true torn=none "
                "power-cut-after=1000000000 seed=5");
  pthread_t w[WRITERS], f, c;
  for (unsigned i = 0; i < WRITERS; i++)
    pthread_create (&w[i], NULL, writer, (void *) (uintptr_t) i);
  pthread_create (&f, NULL, flusher, NULL);
  pthread_create (&c, NULL, cutter, NULL);
  pthread_join (c, NULL);
  for (unsigned i = 0; i < WRITERS; i++)
    pthread_join (w[i], NULL);
  pthread_join (f, NULL);
  ok (atomic_load (&cuts) > 0 && atomic_load (&writes_ok) > 0,
      "writers, a flusher and %u power cuts ran together (%u writes, %u "
      "refused after a cut)", atomic_load (&cuts), atomic_load (&writes_ok),
      atomic_load (&writes_eio));

  char *rep = NULL;
  s4k_fault_epoch (s4k_dev_power_cuts (d));
  ok (s4k_dev_power_cut (d, -1, &rep) == 0, "a last cut");
  s4k_fault_epoch (s4k_dev_power_cuts (d));     /* a new connection */
  free (rep);
  unsigned bad = 0, open_zones = 0;
  static unsigned char rd[ZONE_LBAS * L], want[ZONE_LBAS * L];
  for (uint64_t zone = 1; zone <= WRITERS * ZONES_EACH; zone++) {
    const struct s4k_zone_desc z = zone_at (zone * ZONE_LBAS);
    open_zones += z.cond == S4K_ZC_IMP_OPEN || z.cond == S4K_ZC_EXP_OPEN;
    const uint64_t n = z.wp - z.start;
    if (n == 0)
      continue;
    pattern (want, z.start, n);
    if (s4k_read (d, rd, n * L, z.start * L) || memcmp (rd, want, n * L)) {
      uint64_t i = 0;
      while (i < n * L && rd[i] == want[i])
        i++;
      if (!bad++)
        diag ("zone %" PRIu64 ": below its pointer %" PRIu64 " the data is "
              "not what was written: LBA %" PRIu64 " reads %02x", zone, z.wp,
              z.start + i / L, i < n * L ? rd[i] : 0);
    }
  }
  ok (bad == 0 && open_zones == 0, "every zone reads what was written below "
      "its pointer, and none is open (%u bad, %u open)", bad, open_zones);
  s4k_dev_close (d);
  return done_testing ();
}
