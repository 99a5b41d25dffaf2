/* SPDX-License-Identifier: BSD-3-Clause */
/* Concurrency torture straight on the engine (runs under TSan too):
 * writers race RMWs of neighbouring logical sectors in the same physical
 * sectors, mixed with aligned writes, zeroes and trims of those sectors.
 * See tests/torture.h for the plan and the check. */
#include <pthread.h>
#include <stdio.h>

#include "sect4k/sect4k.h"
#include "tap.h"
#include "torture.h"

struct run {
  struct s4k_dev *dev;
  struct torture_geom g;
  unsigned nwriters, rounds;
  pthread_barrier_t barrier;
  struct torture_log *logs;
  unsigned errors, bad;
};

struct writer {
  struct run *run;
  uint16_t id;
  uint64_t rng;
};

static void
report (const char *msg)
{
  diag ("%s", msg);
}

/* Between rounds: one thread checks the region while the rest wait. */
static void
check_round (struct run *run)
{
  size_t len = (size_t) run->g.nsectors * run->g.physical;
  char *data = malloc (len);
  if (s4k_read (run->dev, data, len, run->g.base) != 0)
    run->errors++;
  else
    run->bad += torture_verify (&run->g, data, run->logs, run->nwriters,
                                run->bad ? NULL : report);
  free (data);
}

struct engine_ctx {
  struct writer *w;
  char *buf;
};

/* Ops on the engine are synchronous: done when the call returns. */
static int
submit (void *opaque, const struct torture_step *step, uint32_t sector,
        uint64_t off, uint64_t len, uint32_t seq)
{
  struct engine_ctx *c = opaque;
  struct run *run = c->w->run;
  bool all = step->slot == TORTURE_ALL;
  int r;
  if (step->what == DO_WRITE) {
    torture_fill (&run->g, c->buf, c->w->id, seq, sector, step->slot);
    r = s4k_write (run->dev, c->buf, len, off, all ? S4K_FUA : 0);
  }
  else if (step->what == DO_READ) {
    if ((r = s4k_read (run->dev, c->buf, len, off)) == 0)
      torture_read_done (&run->g, &run->logs[c->w->id], seq, c->buf);
  }
  else if (step->what == DO_ZERO)
    r = s4k_zero (run->dev, len, off, step->may_trim ? S4K_MAY_TRIM : 0);
  else
    r = s4k_trim (run->dev, len, off, 0);
  torture_end (&run->logs[c->w->id], seq);
  if (r)
    __atomic_add_fetch (&run->errors, 1, __ATOMIC_RELAXED);
  return 0;
}

static void *
run_writer (void *arg)
{
  struct writer *w = arg;
  struct run *run = w->run;
  struct engine_ctx ctx = { w, malloc (run->g.physical) };

  for (unsigned round = 0; round < run->rounds; round++) {
    torture_round (&run->g, &run->logs[w->id], w->id, &w->rng, submit, &ctx);
    if (pthread_barrier_wait (&run->barrier) == PTHREAD_BARRIER_SERIAL_THREAD)
      check_round (run);
    pthread_barrier_wait (&run->barrier);
  }
  free (ctx.buf);
  return NULL;
}

static void
torture (uint32_t L, uint32_t P, uint32_t A, uint32_t nsectors,
         unsigned rounds)
{
  struct run run = { .g = { A, L, P, nsectors }, .nwriters = P / L,
                     .rounds = rounds };
  struct s4k_config c;
  char err[256];

  s4k_config_init (&c);
  c.geom = (struct s4k_geometry) { A + (uint64_t) nsectors * P + P, L, P, A };
  c.max_request = S4K_DEFAULT_MAX_REQUEST;
  if (s4k_dev_open (&run.dev, &c, err, sizeof err) < 0)
    bail ("%s", err);
  run.logs = calloc (run.nwriters, sizeof *run.logs);
  pthread_barrier_init (&run.barrier, NULL, run.nwriters);

  struct writer *w = calloc (run.nwriters, sizeof *w);
  pthread_t *t = calloc (run.nwriters, sizeof *t);
  for (unsigned i = 0; i < run.nwriters; i++) {
    w[i] = (struct writer) { &run, i, 0x9E3779B97F4A7C15ull * (i + 1) };
    pthread_create (&t[i], NULL, run_writer, &w[i]);
  }
  uint64_t sub = 0, reads = 0, checked = 0;
  for (unsigned i = 0; i < run.nwriters; i++) {
    pthread_join (t[i], NULL);
    sub += run.logs[i].sub_writes;
    reads += run.logs[i].reads;
  }
  unsigned bad_reads = torture_verify_reads (&run.g, run.logs, run.nwriters,
                                             &checked, report);
  for (unsigned i = 0; i < run.nwriters; i++)
    free (run.logs[i].ops);
  ok (run.errors == 0, "L=%u P=%u A=%u: %u writers, no request failed",
      L, P, A, run.nwriters);
  ok (run.bad == 0, "L=%u P=%u A=%u: %" PRIu64 " sub-physical writes and "
      "zeroes in %u rounds over %u sectors: %u lost or torn updates",
      L, P, A, sub, rounds, nsectors, run.bad);
  ok (bad_reads == 0 && checked > reads / 2, "L=%u P=%u A=%u: %" PRIu64
      " reads racing the others' RMWs, %" PRIu64 " overlapping no write of "
      "their slot: %u wrong", L, P, A, reads, checked, bad_reads);
  pthread_barrier_destroy (&run.barrier);
  free (run.logs);
  free (w);
  free (t);
  s4k_dev_close (run.dev);
}

int
main (void)
{
  /* 8 writers x 256 sectors x 100 rounds: 204,800 RMWs. */
  torture (512, 4096, 3584, 256, 100);
  torture (1024, 8192, 0, 64, 40);
  torture (512, 1024, 512, 256, 40);
  return done_testing ();
}
