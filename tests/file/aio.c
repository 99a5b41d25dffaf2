/* SPDX-License-Identifier: BSD-3-Clause */
/* The engine's asynchronous requests (s4k_aio) over the file store, driven
 * by event loops like the server's: each loop thread has one ring and
 * many request slots, and each slot writes only its own logical sectors,
 * which share physical sectors with every other slot's.  So every write
 * and zero is a read-modify-write racing others on the same sectors, on the same
 * thread (where a sleeping lock would deadlock the loop) and across
 * threads (where unlocks wake waiters through post).  Each slot checks
 * its sectors as it goes and at the end; a lost update, a torn sector or
 * a request that never completes fails.  The memory store, which has no
 * asynchronous I/O, must answer every request at once, correctly.
 *
 * usage: file-aio DIR [direct] [DIR2]: buffered, and with direct O_DIRECT,
 * in DIR; buffered again in DIR2 (tmpfs: no ZERO_RANGE, so zeroes take
 * the synchronous fallback). */
#define _GNU_SOURCE
#include <errno.h>
#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "sect4k/sect4k.h"
#include "aio.h"
#include "tap.h"

#define THREADS 2
#define SLOTS 8                 /* per thread */
#define OPS 3000                /* per slot */

static const uint32_t L = 512;     /* with P 4096, alignment offset 3584 */
static uint64_t SIZE = 1u << 20;
static struct s4k_dev *dev;

struct loop;
struct slot {
  struct loop *lp;
  struct s4k_aio *aio;
  unsigned id;                  /* owns logical sector id of every
                                   THREADS * SLOTS */
  unsigned done_ops;
  unsigned deferred;            /* requests that returned 1 (in flight) */
  uint64_t rng;
  unsigned char *model;         /* what its sectors hold */
  unsigned char *buf;
  uint64_t off, len;
  bool reading, flushing;
  bool busy;
  unsigned errors;
};

struct loop {
  struct s4k_loop base;
  struct io_uring ring;
  int efd;
  uint64_t efd_value;
  struct s4k_completion efd_c;
  pthread_mutex_t lock;
  struct s4k_completion *posted;
  unsigned posts, remote_posts;
  pthread_t thread;
  struct slot slots[SLOTS];
  unsigned finished;
};

static __thread struct loop *current;

static void
post (struct s4k_loop *l, struct s4k_completion *c)
{
  struct loop *lp = (struct loop *) l;
  pthread_mutex_lock (&lp->lock);
  c->next = lp->posted;
  lp->posted = c;
  lp->posts++;
  pthread_mutex_unlock (&lp->lock);
  if (current != lp) {
    uint64_t one = 1;
    if (write (lp->efd, &one, sizeof one) != sizeof one)
      bail ("eventfd write: %s", s4k_strerror (errno));
    __atomic_fetch_add (&lp->remote_posts, 1, __ATOMIC_RELAXED);
  }
}

static void
arm_efd (struct loop *lp)
{
  struct io_uring_sqe *sqe = io_uring_get_sqe (&lp->ring);
  io_uring_prep_read (sqe, lp->efd, &lp->efd_value, sizeof lp->efd_value, 0);
  io_uring_sqe_set_data (sqe, &lp->efd_c);
}

static void
efd_fired (struct s4k_completion *c, int res)
{
  (void) res;
  arm_efd (s4k_container_of (c, struct loop, efd_c));
}

static uint64_t
rnd (struct slot *s, uint64_t n)
{
  return xorshift64 (&s->rng) % n;
}

static bool
mine (const struct slot *s, uint64_t sector)
{
  return sector % (THREADS * SLOTS) == s->id;
}

static void start_next (struct slot *s);

/* A request of s finished with r. */
static void
finished (struct slot *s, int r)
{
  s->busy = false;
  if (r != 0) {
    if (s->errors++ < 5)
      diag ("slot %u: request at %" PRIu64 "+%" PRIu64 ": %s", s->id, s->off,
            s->len, s4k_strerror (-r));
  }
  else if (s->reading)
    for (uint64_t sec = s->off / L; sec < (s->off + s->len) / L; sec++)
      if (mine (s, sec) &&
          memcmp (s->buf + (sec * L - s->off), s->model + sec * L, L)) {
        if (s->errors++ < 5)
          diag ("slot %u: sector %" PRIu64 " does not hold what the slot "
                "wrote last", s->id, sec);
      }
  s->done_ops++;
  start_next (s);
}

static void
aio_done (void *opaque, int r)
{
  finished (opaque, r);
}

/* Starts the slot's next request; loops while they finish at once. */
static void
start_next (struct slot *s)
{
  while (!s->busy && s->done_ops < OPS) {
    /* A run of logical sectors, written where the slot owns them (its
     * own sectors only: one request covers one). */
    uint64_t sectors = SIZE / L, sec;
    do
      sec = rnd (s, sectors);
    while (!mine (s, sec));
    s->off = sec * L;
    s->len = L;
    unsigned what = rnd (s, 16);
    s->reading = what < 6;
    s->flushing = what == 6;
    int r;
    if (s->flushing)
      r = s4k_aio_flush (s->aio);
    else if (what == 7 || what == 8) {
      /* A zero of the slot's sector: RMW of its physical sector, and
       * with may-trim the store may free it if it is now all zero. */
      memset (s->model + s->off, 0, L);
      r = s4k_aio_zero (s->aio, L, s->off, what == 8 ? S4K_MAY_TRIM : 0);
    }
    else if (s->reading) {
      /* Reads span neighbours' sectors too: only its own are checked. */
      uint64_t first = sec > 3 ? sec - 3 : 0, n = 1 + rnd (s, 9);
      if (first + n > sectors)
        n = sectors - first;
      s->off = first * L;
      s->len = n * L;
      r = s4k_aio_read (s->aio, s->buf, s->len, s->off);
    }
    else {
      for (uint32_t i = 0; i < L; i++)
        s->buf[i] = rnd (s, 256);
      memcpy (s->model + s->off, s->buf, L);
      r = s4k_aio_write (s->aio, s->buf, L, s->off,
                         rnd (s, 8) == 0 ? S4K_FUA : 0);
    }
    s->busy = true;
    s->deferred += r == 1;
    if (r != 1)
      finished (s, r);          /* done at once: loops to the next */
    return;
  }
  if (!s->busy && s->done_ops == OPS)
    s->lp->finished++, s->done_ops++;
}

/* Empties lp's queue of posted work (also for wait_aio). */
static struct s4k_completion *
take_posted (void *arg)
{
  struct loop *lp = arg;
  pthread_mutex_lock (&lp->lock);
  struct s4k_completion *c = lp->posted;
  lp->posted = NULL;
  pthread_mutex_unlock (&lp->lock);
  return c;
}

static void
run_posted (struct loop *lp)
{
  for (struct s4k_completion *c; (c = take_posted (lp));)
    s4k_loop_run_posted (c);
}

static void *
loop_main (void *arg)
{
  struct loop *lp = arg;
  current = lp;
  for (unsigned i = 0; i < SLOTS; i++)
    start_next (&lp->slots[i]);
  while (lp->finished < SLOTS) {
    run_posted (lp);
    struct io_uring_cqe *cqe;
    struct __kernel_timespec ts = { 30, 0 };
    int r = io_uring_submit_and_wait_timeout (&lp->ring, &cqe, 1, &ts, NULL);
    if (r == -ETIME)
      return "no progress for 30 s: a request never completed";
    if (r < 0 && r != -EINTR)
      return "io_uring_submit_and_wait failed";
    s4k_loop_reap (&lp->ring);
  }
  return NULL;
}

/* Trims and zeroes through the ring, whole and cutting into sectors,
 * with and without FUA and may-trim, against a model of the first
 * 64 KiB (physical boundaries at 3584 + k * 4096). */
static void
trim_and_zero (struct loop *lp, const char *mode)
{
  const size_t n = 64 << 10;
  unsigned char *model = malloc (n), *got = malloc (n);
  struct waiter w;
  struct s4k_aio *a = s4k_aio_new (dev, &lp->base, waiter_done, &w);
  for (size_t i = 0; i < n; i++)
    model[i] = 1 + i % 251;
  if (!a || s4k_write (dev, model, n, 0, 0) != 0)
    bail ("%s: cannot set up the trim and zero checks", mode);
  static const struct {
    bool trim;
    uint64_t off, len;
    unsigned flags;
    uint64_t zs, ze;            /* what then reads as zeroes */
  } ops[] = {
    { true, 3584, 8192, S4K_FUA, 3584, 11776 },         /* whole sectors */
    { true, 15360, 9728, 0, 15872, 24064 },             /* cut ends kept */
    { false, 1024, 1024, S4K_FUA, 1024, 2048 },         /* RMW of sector 0 */
    { false, 24064, 8704, S4K_MAY_TRIM, 24064, 32768 }, /* punch + RMW */
    { false, 32768, 16896, 0, 32768, 49664 },           /* zero range + RMW */
  };
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    w.done = false;
    int r = ops[i].trim
            ? s4k_aio_trim (a, ops[i].len, ops[i].off, ops[i].flags)
            : s4k_aio_zero (a, ops[i].len, ops[i].off, ops[i].flags);
    r = wait_aio (&lp->ring, take_posted, lp, r, &w);
    memset (model + ops[i].zs, 0, ops[i].ze - ops[i].zs);
    ok (r == 0 && s4k_read (dev, got, n, 0) == 0 && !memcmp (got, model, n),
        "%s: %s of [%" PRIu64 ", +%" PRIu64 ")%s%s: the device reads as the "
        "model (r=%d)", mode, ops[i].trim ? "trim" : "zero", ops[i].off,
        ops[i].len, ops[i].flags & S4K_FUA ? ", FUA" : "",
        ops[i].flags & S4K_MAY_TRIM ? ", may trim" : "", r);
  }
  s4k_aio_free (a);
  free (model);
  free (got);
}

/* mode: "buffered", "direct" (file store) or "memory". */
static void
run (const char *dir, const char *mode)
{
  char path[4096], err[512];
  const bool direct = strcmp (mode, "direct") == 0;
  const bool memory = strcmp (mode, "memory") == 0;
  snprintf (path, sizeof path, "%s/aio.img", dir);
  unlink (path);
  struct s4k_config c;
  s4k_config_init (&c);
  const char *keys[][2] = {
    { "size", "1M" }, { "logical", "512" },
    { "physical", "4096" }, { "alignment-offset", "3584" },
    { "direct", direct ? "true" : "false" }, { "file", path },
  };
  const size_t nkeys = sizeof keys / sizeof keys[0] - memory;
  for (size_t i = 0; i < nkeys; i++)
    if (s4k_config_set (&c, keys[i][0], keys[i][1], err, sizeof err) == -1)
      bail ("%s", err);
  if (s4k_config_finish (&c, err, sizeof err) == -1 ||
      s4k_dev_open (&dev, &c, err, sizeof err) < 0)
    bail ("%s", err);
  if (!memory && !s4k_dev_async (dev)) {
    printf ("ok %u # skip %s: the store cannot go through a ring (%s)\n",
            ++tap_n, mode, s4k_dev_store_info (dev));
    s4k_dev_close (dev);
    unlink (path);
    return;
  }

  static struct loop loops[THREADS];
  for (unsigned t = 0; t < THREADS; t++) {
    struct loop *lp = &loops[t];
    memset (lp, 0, sizeof *lp);
    if (io_uring_queue_init (64, &lp->ring, 0) < 0)
      bail ("io_uring_queue_init failed");
    lp->base = (struct s4k_loop) { &lp->ring, post };
    lp->efd = eventfd (0, EFD_CLOEXEC);
    lp->efd_c.fn = efd_fired;
    pthread_mutex_init (&lp->lock, NULL);
    arm_efd (lp);
    for (unsigned i = 0; i < SLOTS; i++) {
      struct slot *s = &lp->slots[i];
      s->lp = lp;
      s->id = t * SLOTS + i;
      s->rng = 0x9E3779B97F4A7C15ull * (s->id + 1);
      s->model = calloc (1, SIZE);
      s->buf = malloc (10 * L);
      s->aio = s4k_aio_new (dev, &lp->base, aio_done, s);
      if (!s->model || !s->buf || !s->aio)
        bail ("out of memory");
    }
  }
  const char *why = NULL;
  for (unsigned t = 0; t < THREADS; t++)
    pthread_create (&loops[t].thread, NULL, loop_main, &loops[t]);
  for (unsigned t = 0; t < THREADS; t++) {
    void *ret;
    pthread_join (loops[t].thread, &ret);
    if (ret)
      why = ret;
  }
  if (why)
    bail ("%s: %s", mode, why);

  /* Every slot's sectors hold its last write, read synchronously. */
  unsigned char *all = malloc (SIZE);
  ok (s4k_read (dev, all, SIZE, 0) == 0, "%s: read back", mode);
  if (!memory)
    trim_and_zero (&loops[0], mode);
  unsigned bad = 0, errors = 0, posts = 0, remote = 0, deferred = 0;
  for (unsigned t = 0; t < THREADS; t++) {
    posts += loops[t].posts;
    remote += loops[t].remote_posts;
    for (unsigned i = 0; i < SLOTS; i++) {
      struct slot *s = &loops[t].slots[i];
      errors += s->errors;
      deferred += s->deferred;
      for (uint64_t sec = 0; sec < SIZE / L; sec++)
        if (mine (s, sec) && memcmp (all + sec * L, s->model + sec * L, L))
          bad++;
      s4k_aio_free (s->aio);
      free (s->model);
      free (s->buf);
    }
    close (loops[t].efd);
    io_uring_queue_exit (&loops[t].ring);
  }
  ok (errors == 0, "%s: %u slots x %u requests, no request failed and "
      "every read saw the slot's last write (%u errors)",
      mode, THREADS * SLOTS, OPS, errors);
  ok (bad == 0, "%s: no update lost: every sector holds its owner's last "
      "write (%u wrong)", mode, bad);
  if (memory)
    ok (deferred == 0 && posts == 0, "memory: every request was answered "
        "at once (%u were not)", deferred);
  else
    ok (posts > 0 && remote > 0, "%s: requests waited for sector locks, "
        "woken from their own thread and from the other (%u posts, %u "
        "from the other thread)", mode, posts, remote);
  free (all);
  s4k_dev_close (dev);
  unlink (path);
}

int
main (int argc, char **argv)
{
  if (argc < 2)
    bail ("usage: file-aio DIR [direct] [DIR2]");
  run (argv[1], "memory");
  run (argv[1], "buffered");
  if (argc > 2 && strcmp (argv[2], "direct") == 0)
    run (argv[1], "direct");
  if (argc > 3)
    run (argv[3], "buffered, second directory");
  printf ("1..%u\n", tap_n);
  return tap_failed != 0;
}
