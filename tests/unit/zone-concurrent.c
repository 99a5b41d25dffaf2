/* SPDX-License-Identifier: BSD-3-Clause */
/* The zone model under concurrent clients (issue 33): threads writing at
 * the write pointer of one zone, racing each other, have their writes
 * accepted one at a time: the accepted writes tile the zone from its
 * start without overlap and their lengths sum to the final write pointer.
 * Then threads mixing writes and zone operations over many zones with an
 * open and an active limit never see the limits broken, and the counts
 * agree with the conditions the report gives.  Run under TSan by
 * check-tsan. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "sect4k/zone.h"
#include "tap.h"

#define THREADS 4
#define ZONE_LBAS 262144u        /* 1 GiB of 4 KiB blocks */

static struct s4k_zones *z;
static pthread_barrier_t go;
static const uint64_t START = ZONE_LBAS;        /* zone 1; 0 is conventional */

struct rec {
  uint64_t lba, len;
};

struct worker {
  pthread_t t;
  unsigned seed;
  struct rec *acc;
  size_t n;
  unsigned refused, raced;
};

static uint64_t
wp_of (uint64_t lba)
{
  struct s4k_zone_desc d;
  uint64_t listed;
  if (s4k_zones_report (z, lba, 0, true, &d, 1, &listed) != 1)
    bail ("report failed");
  return d.cond == S4K_ZC_FULL ? UINT64_MAX : d.wp;
}

static void *
writer (void *arg)
{
  struct worker *w = arg;
  pthread_barrier_wait (&go);
  for (;;) {
    uint64_t wp = wp_of (START);
    if (wp == UINT64_MAX)
      break;
    uint64_t len = 1 + rand_r (&w->seed) % 4;
    /* Now and then a stale or early position, as a racing client has. */
    uint64_t lba = wp;
    if (rand_r (&w->seed) % 8 == 0 && wp > START)
      lba = wp - 1;
    int r = s4k_zones_write (z, lba, len);
    if (r == -S4K_ZERR_WRITE_BOUNDARY)
      r = s4k_zones_write (z, lba, len = START + ZONE_LBAS - lba);
    if (r == 0)
      w->acc[w->n++] = (struct rec) { lba, len };
    else if (r == -S4K_ZERR_UNALIGNED_WRITE || r == -S4K_ZERR_ZONE_FULL ||
             r == -S4K_ZERR_WRITE_BOUNDARY) {
      w->refused++;
      w->raced += lba == wp;    /* another thread's write came first */
    }
    else
      bail ("write at %" PRIu64 ": %s", lba, s4k_zone_strerror (-r));
  }
  return NULL;
}

static int
by_lba (const void *a, const void *b)
{
  const struct rec *x = a, *y = b;
  return x->lba < y->lba ? -1 : x->lba > y->lba;
}

static void
test_one_zone (unsigned round)
{
  struct s4k_geometry g = { 4ull * ZONE_LBAS * 4096, 4096, 4096, 0 };
  struct s4k_zone_config c = { .model = S4K_ZONED_HOST_MANAGED,
                               .size = ZONE_LBAS * 4096ull,
                               .conventional = 1 };
  if (s4k_zones_new (&z, &c, &g))
    bail ("s4k_zones_new");
  struct worker w[THREADS];
  pthread_barrier_init (&go, NULL, THREADS);
  for (unsigned i = 0; i < THREADS; i++) {
    w[i] = (struct worker) { .seed = 1234 + i + round * THREADS };
    w[i].acc = calloc (ZONE_LBAS, sizeof *w[i].acc);
    pthread_create (&w[i].t, NULL, writer, &w[i]);
  }
  struct rec *all = calloc (ZONE_LBAS, sizeof *all);
  size_t n = 0;
  unsigned refused = 0, raced = 0;
  uint64_t sum = 0;
  for (unsigned i = 0; i < THREADS; i++) {
    pthread_join (w[i].t, NULL);
    for (size_t j = 0; j < w[i].n; j++) {
      all[n++] = w[i].acc[j];
      sum += w[i].acc[j].len;
    }
    refused += w[i].refused;
    raced += w[i].raced;
    free (w[i].acc);
  }
  pthread_barrier_destroy (&go);
  diag ("round %u: %zu writes accepted, %u refused, %u of them at the "
        "write pointer another thread had just moved", round, n, refused,
        raced);
  struct s4k_zone_desc d;
  uint64_t listed;
  s4k_zones_report (z, START, 0, true, &d, 1, &listed);
  ok (d.cond == S4K_ZC_FULL && d.wp == START + ZONE_LBAS, "round %u: the "
      "zone is full", round);
  is_u64 (sum, d.wp - START, "round %u: accepted lengths sum to the final "
          "write pointer", round);
  qsort (all, n, sizeof *all, by_lba);
  uint64_t at = START, bad = 0;
  for (size_t i = 0; i < n; i++) {
    if (all[i].lba != at)
      bad++;
    at = all[i].lba + all[i].len;
  }
  ok (bad == 0 && at == START + ZONE_LBAS, "round %u: accepted writes "
      "tile the zone in order, no two overlapping", round);
  free (all);
  s4k_zones_free (z);
}

/* ---- limits under a mix of writes and operations ----------------------- */

#define ZONES 32
#define ZL 64u
#define MAX_OPEN 3
#define MAX_ACTIVE 5

static atomic_uint broken;

static void *
mixer (void *arg)
{
  unsigned seed = (unsigned) (uintptr_t) arg;
  for (unsigned i = 0; i < 20000; i++) {
    uint64_t start = (uint64_t) (1 + rand_r (&seed) % (ZONES - 1)) * ZL;
    unsigned what = rand_r (&seed) % 16;
    if (what < 10) {
      uint64_t wp = wp_of (start);
      if (wp != UINT64_MAX)
        s4k_zones_write (z, wp, 1 + rand_r (&seed) % 8);
    }
    else if (what < 14)
      s4k_zones_op (z, S4K_ZOP_CLOSE + (what - 10), start, false);
    else
      s4k_zones_op (z, S4K_ZOP_CLOSE + rand_r (&seed) % 4, 0, true);
    struct s4k_zones_counts n;
    s4k_zones_counts (z, &n);
    if (n.imp_open + n.exp_open > MAX_OPEN ||
        n.imp_open + n.exp_open + n.closed > MAX_ACTIVE)
      broken++;
  }
  return NULL;
}

static void
test_limits (void)
{
  struct s4k_geometry g = { ZONES * ZL * 4096ull, 4096, 4096, 0 };
  struct s4k_zone_config c = { .model = S4K_ZONED_HOST_MANAGED,
                               .size = ZL * 4096, .conventional = 1,
                               .max_open = MAX_OPEN,
                               .max_active = MAX_ACTIVE };
  if (s4k_zones_new (&z, &c, &g))
    bail ("s4k_zones_new");
  pthread_t t[THREADS];
  for (uintptr_t i = 0; i < THREADS; i++)
    pthread_create (&t[i], NULL, mixer, (void *) (i + 99));
  for (unsigned i = 0; i < THREADS; i++)
    pthread_join (t[i], NULL);
  ok (broken == 0, "open <= %d and active <= %d after every call of %d "
      "threads", MAX_OPEN, MAX_ACTIVE, THREADS);
  struct s4k_zone_desc d[ZONES];
  uint64_t listed;
  int nz = s4k_zones_report (z, 0, 0, false, d, ZONES, &listed);
  unsigned imp = 0, exp = 0, closed = 0, badwp = 0;
  for (int i = 0; i < nz; i++) {
    imp += d[i].cond == S4K_ZC_IMP_OPEN;
    exp += d[i].cond == S4K_ZC_EXP_OPEN;
    closed += d[i].cond == S4K_ZC_CLOSED;
    if (d[i].type != S4K_ZT_CONVENTIONAL &&
        (d[i].wp < d[i].start || d[i].wp > d[i].start + d[i].len ||
         (d[i].cond == S4K_ZC_EMPTY && d[i].wp != d[i].start) ||
         ((d[i].cond == S4K_ZC_CLOSED || d[i].cond == S4K_ZC_IMP_OPEN) &&
          d[i].wp == d[i].start) ||
         (d[i].cond == S4K_ZC_FULL) != (d[i].wp == d[i].start + d[i].len)))
      badwp++;
  }
  struct s4k_zones_counts n;
  s4k_zones_counts (z, &n);
  ok (n.imp_open == imp && n.exp_open == exp && n.closed == closed,
      "counts agree with the conditions reported (%u, %u, %u)",
      imp, exp, closed);
  ok (badwp == 0, "every write pointer agrees with its condition");
  s4k_zones_free (z);
}

int
main (void)
{
  for (unsigned round = 0; round < 8; round++)
    test_one_zone (round);
  test_limits ();
  return done_testing ();
}
