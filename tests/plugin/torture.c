/* SPDX-License-Identifier: BSD-3-Clause */
/* Concurrency torture through nbdkit: one libnbd connection per writer,
 * many requests in flight on each, racing RMWs of neighbouring logical
 * sectors with aligned writes, zeroes and trims (see tests/torture.h).
 *
 * usage: client-torture URI LOGICAL PHYSICAL ALIGNMENT SECTORS ROUNDS DEPTH */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <libnbd.h>

#include "tap.h"
#include "torture.h"

struct run {
  const char *uri;
  struct torture_geom g;
  unsigned nwriters, rounds, depth;
  pthread_barrier_t barrier;
  struct torture_log *logs;
  unsigned errors, bad;
};

struct writer {
  struct run *run;
  struct nbd_handle *h;
  uint16_t id;
  uint64_t rng;
};

struct pending {
  struct torture_log *log;
  uint32_t seq;
  char *buf;
  unsigned *errors;
  const struct torture_geom *g;         /* set for a read */
};

static int
completed (void *opaque, int *error)
{
  struct pending *p = opaque;
  if (p->g && !*error)
    torture_read_done (p->g, p->log, p->seq, p->buf);
  torture_end (p->log, p->seq);
  if (*error) {
    if (__atomic_add_fetch (p->errors, 1, __ATOMIC_RELAXED) == 1)
      fprintf (stderr, "request failed: %s\n", strerror (*error));
  }
  free (p->buf);
  free (p);
  return 1;
}

static void
report (const char *msg)
{
  diag ("%s", msg);
}

static void
check_round (struct run *run, struct nbd_handle *h)
{
  size_t len = (size_t) run->g.nsectors * run->g.physical;
  char *data = malloc (len);
  for (size_t done = 0; done < len; ) {
    size_t n = len - done < (8u << 20) ? len - done : (8u << 20);
    if (nbd_pread (h, data + done, n, run->g.base + done, 0) == -1) {
      diag ("verify read: %s", nbd_get_error ());
      run->errors++;
      free (data);
      return;
    }
    done += n;
  }
  run->bad += torture_verify (&run->g, data, run->logs, run->nwriters,
                              run->bad ? NULL : report);
  free (data);
}

static int
wait_below (struct nbd_handle *h, unsigned limit)
{
  while ((unsigned) nbd_aio_in_flight (h) > limit)
    if (nbd_poll (h, -1) == -1)
      return -1;
  return 0;
}

/* Submits one op asynchronously, keeping at most depth in flight. */
static int
submit (void *opaque, const struct torture_step *step, uint32_t sector,
        uint64_t off, uint64_t len, uint32_t seq)
{
  struct writer *w = opaque;
  struct run *run = w->run;
  bool all = step->slot == TORTURE_ALL;
  int64_t r;

  /* A read waits for this writer's own requests (which it would
   * overlap), so it races only the other writers'. */
  if (wait_below (w->h, step->what == DO_READ ? 0 : run->depth - 1) == -1)
    return -1;
  if (step->what == DO_READ)    /* it starts now, not before the wait */
    run->logs[w->id].ops[seq].start = torture_now ();
  struct pending *p = calloc (1, sizeof *p);
  p->log = &run->logs[w->id];
  p->seq = seq;
  p->errors = &run->errors;
  nbd_completion_callback cb = { .callback = completed, .user_data = p };
  if (step->what == DO_WRITE) {
    p->buf = malloc (len);
    torture_fill (&run->g, p->buf, w->id, seq, sector, step->slot);
    r = nbd_aio_pwrite (w->h, p->buf, len, off, cb,
                        all ? LIBNBD_CMD_FLAG_FUA : 0);
  }
  else if (step->what == DO_READ) {
    p->buf = malloc (len);
    p->g = &run->g;
    r = nbd_aio_pread (w->h, p->buf, len, off, cb, 0);
  }
  else if (step->what == DO_ZERO)
    r = nbd_aio_zero (w->h, len, off, cb,
                      step->may_trim ? 0 : LIBNBD_CMD_FLAG_NO_HOLE);
  else
    r = nbd_aio_trim (w->h, len, off, cb, 0);
  return r == -1 ? -1 : 0;
}

static void *
run_writer (void *arg)
{
  struct writer *w = arg;
  struct run *run = w->run;

  for (unsigned round = 0; round < run->rounds; round++) {
    if (torture_round (&run->g, &run->logs[w->id], w->id, &w->rng,
                       submit, w) == -1 ||
        wait_below (w->h, 0) == -1)
      bail ("writer %u: %s", w->id, nbd_get_error ());
    if (pthread_barrier_wait (&run->barrier) == PTHREAD_BARRIER_SERIAL_THREAD)
      check_round (run, w->h);
    pthread_barrier_wait (&run->barrier);
  }
  return NULL;
}

int
main (int argc, char **argv)
{
  if (argc != 8) {
    fprintf (stderr, "usage: %s URI LOGICAL PHYSICAL ALIGNMENT SECTORS "
             "ROUNDS DEPTH\n", argv[0]);
    return 2;
  }
  struct run run = { .uri = argv[1] };
  run.g = (struct torture_geom) { strtoull (argv[4], NULL, 0),
                                  strtoul (argv[2], NULL, 0),
                                  strtoul (argv[3], NULL, 0),
                                  strtoul (argv[5], NULL, 0) };
  run.rounds = strtoul (argv[6], NULL, 0);
  run.depth = strtoul (argv[7], NULL, 0);
  run.nwriters = run.g.physical / run.g.logical;
  run.logs = calloc (run.nwriters, sizeof *run.logs);
  pthread_barrier_init (&run.barrier, NULL, run.nwriters);

  struct writer *w = calloc (run.nwriters, sizeof *w);
  pthread_t *t = calloc (run.nwriters, sizeof *t);
  for (unsigned i = 0; i < run.nwriters; i++) {
    w[i] = (struct writer) { &run, nbd_create (), i,
                             0x9E3779B97F4A7C15ull * (i + 1) };
    if (!w[i].h || nbd_connect_uri (w[i].h, run.uri) == -1)
      bail ("connect %s: %s", run.uri, nbd_get_error ());
  }
  ok (nbd_can_multi_conn (w[0].h) == 1, "server allows multi-conn");
  for (unsigned i = 0; i < run.nwriters; i++)
    pthread_create (&t[i], NULL, run_writer, &w[i]);
  uint64_t sub = 0, ops = 0, reads = 0, checked = 0;
  for (unsigned i = 0; i < run.nwriters; i++) {
    pthread_join (t[i], NULL);
    sub += run.logs[i].sub_writes;
    reads += run.logs[i].reads;
    ops += run.logs[i].n;
    nbd_shutdown (w[i].h, 0);
    nbd_close (w[i].h);
  }
  unsigned bad_reads = torture_verify_reads (&run.g, run.logs, run.nwriters,
                                             &checked, report);
  for (unsigned i = 0; i < run.nwriters; i++)
    free (run.logs[i].ops);
  free (run.logs);
  free (w);
  free (t);
  ok (run.errors == 0, "%u connections, %u in flight each, %" PRIu64
      " requests: none failed", run.nwriters, run.depth, ops);
  ok (run.bad == 0, "L=%u P=%u A=%" PRIu64 ": %" PRIu64 " sub-physical "
      "writes and zeroes in %u rounds over %u sectors: %u lost or torn "
      "updates", run.g.logical, run.g.physical, run.g.base, sub, run.rounds,
      run.g.nsectors, run.bad);
  ok (bad_reads == 0 && checked > reads / 2, "%" PRIu64 " reads racing "
      "the others' requests, %" PRIu64 " overlapping no write of their "
      "slot: %u wrong", reads, checked, bad_reads);
  return done_testing ();
}
