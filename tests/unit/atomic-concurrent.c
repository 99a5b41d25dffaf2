/* SPDX-License-Identifier: BSD-3-Clause */
/* Atomic writes and concurrent reads (issue 27): writers fill whole
 * atomic units with one byte each time, readers read one unit, or a
 * range across several, and never see a unit that mixes two writes.
 * The memory store's lock-free reads (several chunks per unit), and the
 * locked reads under the fault layer; 4kn and 512e.  Also writes marked
 * atomic (S4K_ATOMIC, WRITE ATOMIC(16)) off the natural units, each
 * across two (issue 32): "units" are then the writes' slots.  Without
 * atomic-write-max the same reads do see mixed units (the test can
 * fail). */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "sect4k/sect4k.h"
#include "tap.h"

#define MAXUNIT (64 * 1024)
#define UNITS 8
#define DEV (MAXUNIT * UNITS)
#define WRITERS 2
#define READERS 2

static struct s4k_dev *dev;
static atomic_bool stop;
static atomic_uint torn, reads;
static bool atomic_on;
static uint64_t UNIT;           /* the atomic unit of this run */
static uint64_t PHASE;          /* where the writes' slots start */
static unsigned WFLAGS;         /* the writes' flags */

static struct s4k_dev *
open_dev (const char *keys)
{
  static char store[16][128];
  struct s4k_config c;
  char err[256], kv[128];
  unsigned ns = 0;
  s4k_config_init (&c);
  for (const char *p = keys; *p; ) {
    size_t n = strcspn (p, " ");
    snprintf (kv, sizeof kv, "%.*s", (int) n, p);
    p += n + (p[n] == ' ');
    char *eq = strchr (kv, '=');
    *eq = '\0';
    snprintf (store[ns], 128, "%s", eq + 1);
    if (s4k_config_set (&c, kv, store[ns++], err, sizeof err))
      bail ("%s", err);
  }
  struct s4k_dev *d;
  if (s4k_config_finish (&c, err, sizeof err) ||
      s4k_dev_open (&d, &c, err, sizeof err))
    bail ("%s: %s", keys, err);
  return d;
}

static void *
writer (void *arg)
{
  static _Thread_local char buf[MAXUNIT];
  unsigned x = (unsigned) (uintptr_t) arg * 7919 + 1;
  for (unsigned i = 0; !atomic_load (&stop); i++) {
    x = x * 1103515245 + 12345;
    memset (buf, (int) (x >> 16) | 1, UNIT);
    if (s4k_write (dev, buf, UNIT,
                   PHASE + (uint64_t) ((x >> 8) % UNITS) * UNIT, WFLAGS))
      bail ("write failed");
  }
  return NULL;
}

static void *
reader (void *arg)
{
  static _Thread_local char buf[3 * MAXUNIT];
  unsigned x = (unsigned) (uintptr_t) arg * 104729 + 3;
  while (!atomic_load (&stop)) {
    x = x * 1103515245 + 12345;
    /* One unit, or three from a unit's middle (parts of the ends). */
    const bool wide = x >> 31;
    const uint64_t u = (x >> 8) % (UNITS - 3);
    const uint64_t off = PHASE + (wide ? u * UNIT + UNIT / 2 : u * UNIT);
    const uint64_t len = wide ? 3 * UNIT : UNIT;
    if (s4k_read (dev, buf, len, off))
      bail ("read failed");
    /* Each unit's bytes in the read are one write's. */
    for (uint64_t s = 0; s < len; ) {
      const uint64_t e = ((off - PHASE + s) / UNIT + 1) * UNIT + PHASE - off;
      const uint64_t stop_at = e < len ? e : len;
      for (uint64_t i = s + 1; i < stop_at; i++)
        if (buf[i] != buf[s]) {
          atomic_fetch_add (&torn, 1);
          break;
        }
      s = stop_at;
    }
    atomic_fetch_add (&reads, 1);
  }
  return NULL;
}

static double
now (void)
{
  struct timespec ts;
  clock_gettime (CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Runs writers and readers for up to secs (until a torn unit when
 * the device has no atomic writes); returns the torn reads. */
static unsigned
run (const char *keys, uint64_t unit, uint64_t phase, unsigned wflags,
     double secs)
{
  UNIT = unit;
  PHASE = phase;
  WFLAGS = wflags;
  dev = open_dev (keys);
  atomic_on = s4k_dev_atomic (dev)->max != 0;
  atomic_store (&stop, false);
  atomic_store (&torn, 0);
  atomic_store (&reads, 0);
  pthread_t w[WRITERS], r[READERS];
  for (uintptr_t i = 0; i < WRITERS; i++)
    pthread_create (&w[i], NULL, writer, (void *) i);
  for (uintptr_t i = 0; i < READERS; i++)
    pthread_create (&r[i], NULL, reader, (void *) i);
  const double end = now () + secs;
  while (now () < end && (atomic_on || !atomic_load (&torn))) {
    struct timespec ts = { 0, 10 * 1000 * 1000 };
    nanosleep (&ts, NULL);
  }
  atomic_store (&stop, true);
  for (unsigned i = 0; i < WRITERS; i++)
    pthread_join (w[i], NULL);
  for (unsigned i = 0; i < READERS; i++)
    pthread_join (r[i], NULL);
  s4k_dev_close (dev);
  return atomic_load (&torn);
}

int
main (void)
{
  static const char *const models[] = { "4kn", "512e" };
  static const char *const layers[] = { "", " write-cache=true" };
  char keys[256];
  for (unsigned m = 0; m < 2; m++)
    for (unsigned l = 0; l < 2; l++) {
      snprintf (keys, sizeof keys, "size=%d model=%s atomic-write-max=64K%s",
                DEV, models[m], layers[l]);
      unsigned t = run (keys, MAXUNIT, 0, 0, 1.0);
      ok (t == 0, "%s%s: atomic-write-max=64K: no read saw part of a "
          "64 KiB write (%u reads)", models[m],
          l ? ", fault layer (locked reads)" : ", lock-free reads", reads);
    }
  /* 512e-xp (alignment offset 3584): a 4 KiB unit no larger than a
   * chunk still spans two. */
  snprintf (keys, sizeof keys, "size=%d model=512e-xp atomic-write-max=4K",
            DEV);
  unsigned t = run (keys, 4096, 0, 0, 1.0);
  ok (t == 0, "512e-xp, lock-free reads: atomic-write-max=4K: no read saw "
      "part of a 4 KiB write across two chunks (%u reads)", reads);
  /* Writes marked atomic at LBA 3 + 4k on 4kn, 16 KiB (the maximum)
   * each: every one crosses a naturally aligned 16 KiB unit, which
   * WRITE ATOMIC(16) allows (Block Limits has no field against it);
   * and on 512e with atomic-write-min=512, at 512 + 16K k. */
  static const struct { const char *keys; uint64_t phase; } odd[] = {
    { "model=4kn atomic-write-max=16K atomic-writes=explicit", 3 * 4096 },
    { "model=4kn atomic-write-max=16K atomic-writes=explicit "
      "write-cache=true", 3 * 4096 },
    { "model=512e atomic-write-max=16K atomic-write-min=512 "
      "atomic-writes=explicit", 512 },
  };
  for (unsigned i = 0; i < sizeof odd / sizeof odd[0]; i++) {
    snprintf (keys, sizeof keys, "size=%d %s", DEV, odd[i].keys);
    t = run (keys, 16384, odd[i].phase, S4K_ATOMIC, 1.0);
    ok (t == 0, "%s: no read saw part of a 16 KiB S4K_ATOMIC write at "
        "%" PRIu64 " + 16K k, across a naturally aligned unit (%u reads)",
        odd[i].keys, odd[i].phase, reads);
  }
  /* Without the key, lock-free reads do see them in part (a unit is
   * sixteen 4 KiB chunks). */
  snprintf (keys, sizeof keys, "size=%d model=4kn", DEV);
  t = run (keys, MAXUNIT, 0, 0, 5.0);
  ok (t > 0, "4kn, lock-free reads, no atomic-write-max: reads saw part "
      "of a 64 KiB write (%u of %u reads)", t, reads);
  printf ("1..%u\n", tap_n);
  return tap_failed != 0;
}
