/* SPDX-License-Identifier: BSD-3-Clause */
/* Event loops that stop before the upstream store closes (the NBD loops
 * before the ublk queues at sect4k-server's shutdown, one ublk queue
 * before another).  Without multi-conn a flush on loop A asks each other
 * loop whose connection is dirty to flush its own; a loop B that stopped
 * must not be asked (its memory is gone: the ask would be a
 * use-after-free, or wait forever for a loop that no longer runs).  B
 * lets go first (s4k_dev_loop_gone): its connection's writes are flushed
 * then, and A's flush passes it.  Each case stops B at another point:
 *   1. idle, dirty;
 *   2. with A's ask in its post queue, not yet run;
 *   3. with the flush A asked for sent upstream, its answer not read;
 *   4. then a new loop at B's very address writes: its connection is
 *      its own, and A's flush reaches it.
 * Both loops run on this one thread, driven step by step; B's memory is
 * poisoned and freed (reused in 4) once it let go.  The upstream's log
 * (nbdkit --filter=log) counts the flushes it received.
 *
 * Then one export served through both paths at once (sect4k-server's
 * NBD loops beside --scsi, whose LUN threads make synchronous calls
 * over the store's pool): a flush must cover every write completed
 * before it, whichever connection carried it.  In the upstream's log,
 * each connection that wrote has a flush after its last write, after:
 *   5. a loop's write, then a synchronous flush from another thread
 *      (the loop asked through its inbox, the thread waiting);
 *   6. the same, the synchronous flush on the loop's own thread (it
 *      cannot wait for its own inbox: flushed in place);
 *   7. two loops' writes, the synchronous flush waiting on both, and
 *      one of them stopping with the ask not run;
 *   8. a synchronous write (the pool), then a loop's flush.
 *
 * With the upstream's PID, the synchronous flush on a loop's own thread
 * (own_flush in store_nbd_aio.c) when the loop's connection fails, its
 * write unflushed (upstream-timeout=2): it ends, and the write counts as
 * a loss (the engine reports it per client connection), when
 *   9. the upstream is silent (SIGSTOP): in the timeout; continued, the
 *      loop writes again;
 *  10. the upstream is dead (SIGKILL, the last case): at once.
 * And upstream-timeout=0 (no timeout) is bounded at a stop (the front
 * end's flush at exit): 30 s, the limit a stopping loop's final flush
 * has too, read from a second store's state (the tests of a bounded
 * stop run with upstream-timeout=2, in timeout.t, rather than wait 30 s).
 *
 * usage: upstream-store-loops URI LOGFILE [UPSTREAM-PID]   (an upstream
 * without multi-conn) */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <liburing.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sect4k/sect4k.h"
#include "store/store.h"
#include "store/store_nbd.h"
#include "store/store_nbd_priv.h"
#include "aio.h"
#include "tap.h"

static struct s4k_dev *dev;
static struct s4k_store *store;
static const char *logfile;

struct tloop {
  struct s4k_loop base;
  struct io_uring ring;
  struct s4k_completion *posted;   /* a stack, under post_lock */
};

/* The loops run on this thread; a synchronous flush on another posts
 * to them (cases 5 and 7). */
static pthread_mutex_t post_lock = PTHREAD_MUTEX_INITIALIZER;

static void
post (struct s4k_loop *l, struct s4k_completion *c)
{
  struct tloop *lp = (struct tloop *) l;
  pthread_mutex_lock (&post_lock);
  c->next = lp->posted;
  lp->posted = c;
  pthread_mutex_unlock (&post_lock);
}

static struct s4k_completion *
take_posted (struct tloop *lp)
{
  pthread_mutex_lock (&post_lock);
  struct s4k_completion *c = lp->posted;
  lp->posted = NULL;
  pthread_mutex_unlock (&post_lock);
  return c;
}

static bool
has_posted (struct tloop *lp)
{
  pthread_mutex_lock (&post_lock);
  bool r = lp->posted != NULL;
  pthread_mutex_unlock (&post_lock);
  return r;
}

static void
loop_init (struct tloop *lp)
{
  memset (lp, 0, sizeof *lp);
  if (s4k_ring_init (&lp->ring, 64) < 0)
    bail ("io_uring_queue_init failed");
  lp->base = (struct s4k_loop) { &lp->ring, post };
}

/* One turn of each loop in lps (NULL: skipped): what was posted, then
 * what its ring completed, waiting up to 1 ms. */
static void
turn (struct tloop **lps, unsigned n)
{
  for (unsigned i = 0; i < n; i++) {
    struct tloop *lp = lps[i];
    if (!lp)
      continue;
    s4k_loop_run_posted (take_posted (lp));
    struct io_uring_cqe *cqe;
    struct __kernel_timespec ts = { 0, 1000000 };
    io_uring_submit_and_wait_timeout (&lp->ring, &cqe, 1, &ts, NULL);
    s4k_loop_reap (&lp->ring);
  }
}

/* The result of request r (s4k_aio_*'s) whose waiter is w, turning the
 * loops until it finishes (20 s at most). */
static int
finish (struct tloop **lps, unsigned n, int r, struct waiter *w)
{
  uint64_t until = s4k_now_ns () + 20000000000u;
  while (r == 1 && !w->done) {
    if (s4k_now_ns () > until)
      bail ("a request did not finish in 20 s");
    turn (lps, n);
  }
  return r == 1 ? w->r : r;
}

/* Flushes the upstream received, from its log. */
static unsigned
upstream_flushes (void)
{
  FILE *f = fopen (logfile, "r");
  if (!f)
    bail ("%s: cannot open", logfile);
  char line[1024];
  unsigned n = 0;
  while (fgets (line, sizeof line, f)) {
    size_t len = strlen (line);
    if (strstr (line, " Flush id=") && len > 4 &&
        strcmp (line + len - 4, "...\n") == 0)
      n++;
  }
  fclose (f);
  return n;
}

static char buf[4096];

/* A write of 4 KiB at off through loop lp, run to its end. */
static void
write_on (struct tloop *lp, struct tloop **lps, unsigned n, uint64_t off)
{
  struct waiter w = { 0 };
  struct s4k_aio *a = s4k_aio_new (dev, &lp->base, waiter_done, &w);
  memset (buf, (int) (off >> 12) + 1, sizeof buf);
  int r = finish (lps, n, s4k_aio_write (a, buf, sizeof buf, off, 0), &w);
  if (r)
    bail ("write at %" PRIu64 ": %s", off, strerror (-r));
  s4k_aio_free (a);
}

/* B lets go and its memory goes (poisoned, so a use shows). */
static void
stop_loop (struct tloop *lp)
{
  s4k_dev_loop_gone (dev, &lp->base);
  io_uring_queue_exit (&lp->ring);
  memset (lp, 0xa5, sizeof *lp);
}

/* Case 1 to 3: B dirty, stopped at a point; then A's flush. */
static void
one_case (unsigned k, const char *what)
{
  struct tloop *A = calloc (1, sizeof *A), *B = calloc (1, sizeof *B);
  loop_init (A);
  loop_init (B);
  struct tloop *both[] = { A, B }, *only_a[] = { A };
  const uint64_t base = (uint64_t) k << 20;
  write_on (B, both, 2, base);
  write_on (A, both, 2, base + 65536);
  const unsigned before = upstream_flushes ();
  const uint64_t losses = atomic_load (&store->losses);

  struct waiter w = { 0 };
  struct s4k_aio *a = s4k_aio_new (dev, &A->base, waiter_done, &w);
  int r;
  if (k == 1) {
    stop_loop (B);
    r = s4k_aio_flush (a);
  }
  else {
    r = s4k_aio_flush (a);
    ok (r == 1 && has_posted (B),
        "%s: A's flush asked B (B has a post waiting)", what);
    if (k == 3) {
      /* B runs the ask: its flush goes out; B reads no answer. */
      s4k_loop_run_posted (take_posted (B));
      io_uring_submit (&B->ring);
    }
    stop_loop (B);
  }
  r = finish (only_a, 1, r, &w);
  ok (r == 0, "%s: A's flush ends: %s", what, r ? strerror (-r) : "0");
  is_u64 (atomic_load (&store->losses), losses,
          "%s: no loss counted", what);
  /* B's writes flushed (at its stop, or as asked), and A's. */
  is_u64 (upstream_flushes () - before, 2,
          "%s: the upstream got B's flush and A's", what);
  s4k_aio_free (a);

  if (k == 3) {
    /* Case 4: a new loop where B was (the store must not take it for the
     * one that let go). */
    loop_init (B);
    struct tloop *both2[] = { A, B };
    write_on (B, both2, 2, base + 131072);
    const unsigned before2 = upstream_flushes ();
    struct waiter w2 = { 0 };
    struct s4k_aio *a2 = s4k_aio_new (dev, &A->base, waiter_done, &w2);
    r = finish (both2, 2, s4k_aio_flush (a2), &w2);
    ok (r == 0, "new loop at B's address: A's flush ends: %s",
        r ? strerror (-r) : "0");
    is_u64 (upstream_flushes () - before2, 1,
            "new loop at B's address: its write was flushed (asked)");
    s4k_aio_free (a2);
    stop_loop (B);
  }
  free (B);
  stop_loop (A);
  free (A);
}

/* Connections that wrote with no flush after their last write, from
 * the upstream's log (its "connection=N Write|Flush id=... ..." lines). */
static unsigned
unflushed_conns (void)
{
  FILE *f = fopen (logfile, "r");
  if (!f)
    bail ("%s: cannot open", logfile);
  enum { MAXC = 1024 };
  static unsigned long last_write[MAXC], last_flush[MAXC];
  memset (last_write, 0, sizeof last_write);
  memset (last_flush, 0, sizeof last_flush);
  char line[1024];
  unsigned long n = 0;
  while (fgets (line, sizeof line, f)) {
    n++;
    size_t len = strlen (line);
    const char *p = strstr (line, "connection=");
    unsigned c;
    if (!p || len < 4 || strcmp (line + len - 4, "...\n") != 0 ||
        sscanf (p, "connection=%u ", &c) != 1 || c >= MAXC)
      continue;
    if (strstr (p, " Write id="))
      last_write[c] = n;
    else if (strstr (p, " Flush id="))
      last_flush[c] = n;
  }
  fclose (f);
  unsigned bad = 0;
  for (unsigned c = 0; c < MAXC; c++)
    if (last_write[c] && last_flush[c] < last_write[c])
      bad++;
  return bad;
}

/* s4k_flush on a thread of its own (as --scsi's LUN thread). */
struct sync_flush {
  pthread_t t;
  atomic_bool done;
  int r;
};
static void *
sync_flush_main (void *arg)
{
  struct sync_flush *f = arg;
  f->r = s4k_flush (dev);
  atomic_store (&f->done, true);
  return NULL;
}
static void
sync_flush_start (struct sync_flush *f)
{
  atomic_init (&f->done, false);
  if (pthread_create (&f->t, NULL, sync_flush_main, f) != 0)
    bail ("pthread_create failed");
}
/* Its result, turning the loops in lps until it ends (20 s at most). */
static int
sync_flush_end (struct sync_flush *f, struct tloop **lps, unsigned n)
{
  uint64_t until = s4k_now_ns () + 20000000000u;
  while (!atomic_load (&f->done)) {
    if (s4k_now_ns () > until)
      bail ("a synchronous flush did not end in 20 s");
    turn (lps, n);
  }
  pthread_join (f->t, NULL);
  return f->r;
}

/* Cases 5 to 8: one export through both paths. */
static void
both_paths (void)
{
  struct tloop *A = calloc (1, sizeof *A), *B = calloc (1, sizeof *B);
  loop_init (A);
  loop_init (B);
  struct tloop *both[] = { A, B }, *only_a[] = { A };
  const uint64_t base = 8u << 20;
  uint64_t losses = atomic_load (&store->losses);

  /* 5. */
  write_on (A, both, 2, base);
  if (unflushed_conns () != 1)
    bail ("A's write: %u connections unflushed in the log, not 1",
          unflushed_conns ());
  struct sync_flush f;
  sync_flush_start (&f);
  int r = sync_flush_end (&f, both, 2);
  ok (r == 0, "a loop's write, a synchronous flush on another thread: "
      "it ends: %s", r ? strerror (-r) : "0");
  is_u64 (unflushed_conns (), 0, "... and the loop's connection was "
          "flushed after the write");

  /* 6. */
  write_on (A, both, 2, base + 65536);
  r = s4k_flush (dev);
  ok (r == 0, "the synchronous flush on the loop's own thread ends: %s",
      r ? strerror (-r) : "0");
  is_u64 (unflushed_conns (), 0, "... and the loop's connection was "
          "flushed after the write");

  /* 7. */
  write_on (A, both, 2, base + 131072);
  write_on (B, both, 2, base + 196608);
  sync_flush_start (&f);
  uint64_t until = s4k_now_ns () + 20000000000u;
  while (!has_posted (A) || !has_posted (B))
    if (s4k_now_ns () > until)
      bail ("the synchronous flush did not ask both loops in 20 s");
  ok (!atomic_load (&f.done), "the synchronous flush waits for both "
      "loops it asked");
  stop_loop (B);                /* B's ask not run */
  r = sync_flush_end (&f, only_a, 1);
  ok (r == 0, "one loop asked stopped: the synchronous flush ends: %s",
      r ? strerror (-r) : "0");
  is_u64 (unflushed_conns (), 0, "... and both loops' connections were "
          "flushed after their writes");
  is_u64 (atomic_load (&store->losses), losses, "no loss counted");

  /* 8. */
  memset (buf, 0x5a, sizeof buf);
  r = s4k_write (dev, buf, sizeof buf, base + 262144, 0);
  if (r)
    bail ("synchronous write: %s", strerror (-r));
  if (unflushed_conns () != 1)
    bail ("the synchronous write: %u connections unflushed, not 1",
          unflushed_conns ());
  struct waiter w = { 0 };
  struct s4k_aio *a = s4k_aio_new (dev, &A->base, waiter_done, &w);
  r = finish (only_a, 1, s4k_aio_flush (a), &w);
  s4k_aio_free (a);
  ok (r == 0, "a synchronous write, then a loop's flush: it ends: %s",
      r ? strerror (-r) : "0");
  is_u64 (unflushed_conns (), 0, "... and the pool's connection was "
          "flushed after the write");
  is_u64 (atomic_load (&store->losses), losses, "no loss counted");

  free (B);
  stop_loop (A);
  free (A);
}

/* A write through lp, tried again until the upstream takes it (15 s at
 * most): 0 or the last error. */
static int
write_until (struct tloop *lp, uint64_t off)
{
  struct tloop *lps[] = { lp };
  uint64_t until = s4k_now_ns () + 15000000000u;
  int r;
  do {
    struct waiter w = { 0 };
    struct s4k_aio *a = s4k_aio_new (dev, &lp->base, waiter_done, &w);
    memset (buf, 0x77, sizeof buf);
    r = finish (lps, 1, s4k_aio_write (a, buf, sizeof buf, off, 0), &w);
    s4k_aio_free (a);
    if (r)
      usleep (100000);
  } while (r && s4k_now_ns () < until);
  return r;
}

/* s4k_flush on the loop's own thread, timed (s). */
static int
timed_flush (double *took)
{
  uint64_t t0 = s4k_now_ns ();
  int r = s4k_flush (dev);
  *took = (s4k_now_ns () - t0) / 1e9;
  return r;
}

/* True once process pid has exited (a zombie, or gone). */
static bool
exited (pid_t pid)
{
  char path[64], stat[256];
  snprintf (path, sizeof path, "/proc/%d/stat", (int) pid);
  FILE *f = fopen (path, "r");
  if (!f)
    return true;
  bool z = fgets (stat, sizeof stat, f) && strstr (stat, ") Z ");
  fclose (f);
  return z;
}

/* SIGSTOP, and wait until every thread of pid has stopped: kill returns
 * once the signal is queued, and one thread must run to stop the others,
 * so under load another can still answer a request for milliseconds. */
static void
sigstop (pid_t pid)
{
  if (kill (pid, SIGSTOP) == -1)
    bail ("kill -STOP %d: %s", (int) pid, strerror (errno));
  char dir[64];
  snprintf (dir, sizeof dir, "/proc/%d/task", (int) pid);
  for (int tries = 0; tries < 1000; tries++, usleep (10000)) {
    DIR *d = opendir (dir);
    if (!d)
      bail ("%s: %s", dir, strerror (errno));
    bool running = false;
    struct dirent *e;
    while (!running && (e = readdir (d))) {
      char path[384], stat[512];
      if (e->d_name[0] == '.')
        continue;
      snprintf (path, sizeof path, "%s/%s/stat", dir, e->d_name);
      FILE *f = fopen (path, "r");
      if (!f)
        continue;               /* that thread has gone */
      const char *end = fgets (stat, sizeof stat, f) ? strrchr (stat, ')')
                                                       : NULL;
      running = end && !strchr ("TtZX", end[2]);
      fclose (f);
    }
    closedir (d);
    if (!running)
      return;
  }
  bail ("kill -STOP %d: its threads did not all stop in 10 s", (int) pid);
}

/* Cases 9 and 10. */
static void
own_thread_errors (pid_t up)
{
  struct tloop *A = calloc (1, sizeof *A);
  loop_init (A);
  struct tloop *only_a[] = { A };
  const uint64_t base = 16u << 20;
  double took;

  /* 9. */
  write_on (A, only_a, 1, base);
  uint64_t losses = atomic_load (&store->losses);
  sigstop (up);
  int r = timed_flush (&took);
  ok (r == 0 && took >= 1.9 && took < 5, "the upstream silent: the "
      "synchronous flush on the loop's own thread ends in %.1fs "
      "(upstream-timeout=2): %s", took, r ? strerror (-r) : "0");
  uint64_t now = atomic_load (&store->losses);
  ok (now > losses, "... and the loop's unflushed write counts as a loss "
      "(the store's count %" PRIu64 ", before %" PRIu64 ")", now, losses);
  kill (up, SIGCONT);
  r = write_until (A, base);
  ok (r == 0, "continued: the loop writes again: %s",
      r ? strerror (-r) : "0");

  /* 10. */
  write_on (A, only_a, 1, base + 65536);
  losses = atomic_load (&store->losses);
  kill (up, SIGKILL);
  uint64_t until = s4k_now_ns () + 10000000000u;
  while (!exited (up))
    if (s4k_now_ns () > until)
      bail ("the upstream (pid %d) did not die in 10 s", (int) up);
    else
      usleep (10000);
  r = timed_flush (&took);
  ok (r == 0 && took < 1, "the upstream dead: the synchronous flush on "
      "the loop's own thread ends in %.2fs: %s", took,
      r ? strerror (-r) : "0");
  now = atomic_load (&store->losses);
  ok (now > losses, "... and the loop's unflushed write counts as a loss "
      "(the store's count %" PRIu64 ", before %" PRIu64 ")", now, losses);
  stop_loop (A);
  free (A);
}

/* upstream-timeout=0: no limit, until the store's stop. */
static void
stop_limit (const char *uri)
{
  struct s4k_config c;
  char err[512];
  s4k_config_init (&c);
  struct s4k_store *s;
  if (s4k_config_set (&c, "upstream", uri, err, sizeof err) == -1 ||
      s4k_config_set (&c, "upstream-timeout", "0", err, sizeof err) == -1 ||
      s4k_config_set (&c, "model", "512e", err, sizeof err) == -1 ||
      s4k_config_finish (&c, err, sizeof err) == -1 ||
      !(s = s4k_nbd_store_new (&c, &c.geom.size, err, sizeof err)))
    bail ("%s", err);
  struct nbd_store *u = (struct nbd_store *) s;
  is_u64 (up_limit (u), 0, "upstream-timeout=0: a request waits without "
          "limit");
  s->ops->stop (s);
  is_u64 (up_limit (u), 30000000000u, "... once the front end stops, 30 s");
  is_u64 (up_stop_limit (u), 30000000000u, "... and a stopping loop's "
          "final flush, 30 s");
  s->ops->close (s);
}

int
main (int argc, char **argv)
{
  if (argc != 3 && argc != 4) {
    fprintf (stderr, "usage: %s URI LOGFILE [UPSTREAM-PID]\n", argv[0]);
    return 2;
  }
  logfile = argv[2];
  alarm (120);                  /* a flush that never ends fails the test */
  struct s4k_config c;
  char err[512];
  s4k_config_init (&c);
  if (s4k_config_set (&c, "upstream", argv[1], err, sizeof err) == -1 ||
      s4k_config_set (&c, "model", "512e", err, sizeof err) == -1 ||
      s4k_config_set (&c, "upstream-timeout", "2", err, sizeof err) == -1 ||
      s4k_config_finish (&c, err, sizeof err) == -1 ||
      !(store = s4k_nbd_store_new (&c, &c.geom.size, err, sizeof err)) ||
      s4k_dev_new (&dev, &c, store, err, sizeof err) < 0)
    bail ("%s", err);
  if (!strstr (s4k_dev_store_info (dev), "no multi-conn"))
    bail ("the upstream has multi-conn: %s", s4k_dev_store_info (dev));

  one_case (1, "B stopped idle, dirty");
  one_case (2, "B stopped with A's ask not run");
  one_case (3, "B stopped with the flush asked in flight");
  both_paths ();
  stop_limit (argv[1]);
  if (argc == 4)
    own_thread_errors ((pid_t) atoi (argv[3]));

  s4k_dev_close (dev);
  printf ("1..%u\n", tap_n);
  return tap_failed != 0;
}
