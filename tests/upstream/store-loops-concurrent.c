/* SPDX-License-Identifier: BSD-3-Clause */
/* Loops that stop while others flush, on threads of their own (the
 * races store-loops.c drives step by step; run under TSan by make
 * check-tsan).  Two long loops write and flush until the end; meanwhile
 * generations of two short loops each write and flush a few times,
 * write once more without flushing (their connections dirty), let go
 * (s4k_dev_loop_gone) and free their memory, which the next generation
 * may get again.  Without multi-conn every flush asks each dirty loop,
 * so flushes race loops letting go.  Meanwhile a thread writes and
 * flushes with the synchronous calls (as --scsi's LUN thread serving
 * the same export): its flushes ask the loops too, and wait.  Every
 * request must end (30 s), each
 * flush with 0, and no loss may be counted; the .t then checks in the
 * upstream's log that every connection that wrote was flushed after its
 * last write.
 *
 * usage: upstream-store-loops-concurrent URI   (no multi-conn) */
#define _GNU_SOURCE
#include <errno.h>
#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "sect4k/sect4k.h"
#include "store/store.h"
#include "store/store_nbd.h"
#include "tap.h"

#define LONG 2
#define SHORT 2                 /* per generation */
#define GENERATIONS 20          /* 2 + 2 * 20 loops: within MAX_LOOPS */
#define SHORT_ROUNDS 4

static struct s4k_dev *dev;
static struct s4k_store *store;
static atomic_bool stop_long;
static _Atomic unsigned flushes, failures;

struct tloop {
  struct s4k_loop base;
  struct io_uring ring;
  pthread_mutex_t lock;
  struct s4k_completion *posted;
  int efd;
  uint64_t efd_value;
  struct s4k_completion efd_c;
  pthread_t thread;
  unsigned id;
  bool is_long;
  bool done;                    /* the request waited for */
  int r;
};

static __thread struct tloop *current;

static void
post (struct s4k_loop *l, struct s4k_completion *c)
{
  struct tloop *lp = (struct tloop *) l;
  pthread_mutex_lock (&lp->lock);
  c->next = lp->posted;
  lp->posted = c;
  pthread_mutex_unlock (&lp->lock);
  if (current != lp) {
    uint64_t one = 1;
    if (write (lp->efd, &one, sizeof one) != sizeof one)
      abort ();
  }
}

static void
arm_efd (struct tloop *lp)
{
  struct io_uring_sqe *sqe = s4k_ring_sqe (&lp->ring);
  io_uring_prep_read (sqe, lp->efd, &lp->efd_value, sizeof lp->efd_value, 0);
  io_uring_sqe_set_data (sqe, &lp->efd_c);
}

static void
efd_fired (struct s4k_completion *c, int res)
{
  (void) res;
  arm_efd (s4k_container_of (c, struct tloop, efd_c));
}

static void
req_done (void *opaque, int r)
{
  struct tloop *lp = opaque;
  lp->done = true;
  lp->r = r;
}

/* Runs the loop until its request r (s4k_aio_*'s) ends. */
static int
wait_req (struct tloop *lp, int r)
{
  uint64_t until = s4k_now_ns () + 30000000000u;
  while (r == 1 && !lp->done) {
    pthread_mutex_lock (&lp->lock);
    struct s4k_completion *c = lp->posted;
    lp->posted = NULL;
    pthread_mutex_unlock (&lp->lock);
    if (c) {
      s4k_loop_run_posted (c);
      continue;
    }
    if (s4k_now_ns () > until) {
      fprintf (stderr, "loop %u: a request did not end in 30 s\n", lp->id);
      abort ();
    }
    struct io_uring_cqe *cqe;
    struct __kernel_timespec ts = { 1, 0 };
    io_uring_submit_and_wait_timeout (&lp->ring, &cqe, 1, &ts, NULL);
    s4k_loop_reap (&lp->ring);
  }
  lp->done = false;
  return r == 1 ? lp->r : r;
}

static void *
loop_main (void *arg)
{
  struct tloop *lp = arg;
  current = lp;
  /* The ring is the thread's (the setup flags tie it to its creator). */
  if (s4k_ring_init (&lp->ring, 64) < 0) {
    fprintf (stderr, "loop %u: io_uring_queue_init failed\n", lp->id);
    abort ();
  }
  arm_efd (lp);
  struct s4k_aio *a = s4k_aio_new (dev, &lp->base, req_done, lp);
  char buf[4096];
  memset (buf, (int) lp->id + 1, sizeof buf);
  for (unsigned round = 0; ; round++) {
    if (lp->is_long ? atomic_load (&stop_long) : round == SHORT_ROUNDS)
      break;
    const uint64_t off = (uint64_t) lp->id * 65536 + (round % 16) * 4096;
    int r = wait_req (lp, s4k_aio_write (a, buf, sizeof buf, off, 0));
    if (r == 0 && (lp->is_long || round + 1 < SHORT_ROUNDS)) {
      r = wait_req (lp, s4k_aio_flush (a));
      atomic_fetch_add (&flushes, 1);
    }
    if (r) {
      fprintf (stderr, "loop %u round %u: %s\n", lp->id, round, strerror (-r));
      atomic_fetch_add (&failures, 1);
    }
  }
  s4k_aio_free (a);
  /* Its last write unflushed (a short loop's): let go.  What the store
   * posted before stays unrun, as a front end leaving may do; a post
   * after would write freed memory (ASan). */
  s4k_dev_loop_gone (dev, &lp->base);
  io_uring_queue_exit (&lp->ring);
  return NULL;
}

/* The synchronous path's writer (a LUN thread), until stop_long. */
static void *
sync_main (void *arg)
{
  (void) arg;
  char buf[4096];
  memset (buf, 0x5c, sizeof buf);
  for (unsigned round = 0; !atomic_load (&stop_long); round++) {
    int r = s4k_write (dev, buf, sizeof buf, (60u << 20) + (round % 16) * 4096,
                       0);
    if (r == 0) {
      r = s4k_flush (dev);
      atomic_fetch_add (&flushes, 1);
    }
    if (r) {
      fprintf (stderr, "synchronous round %u: %s\n", round, strerror (-r));
      atomic_fetch_add (&failures, 1);
    }
  }
  return NULL;
}

static struct tloop *
loop_start (unsigned id, bool is_long)
{
  struct tloop *lp = calloc (1, sizeof *lp);
  if (!lp || (lp->efd = eventfd (0, EFD_CLOEXEC)) == -1)
    bail ("cannot set up a loop");
  lp->base = (struct s4k_loop) { &lp->ring, post };
  lp->efd_c.fn = efd_fired;
  pthread_mutex_init (&lp->lock, NULL);
  lp->id = id;
  lp->is_long = is_long;
  if (pthread_create (&lp->thread, NULL, loop_main, lp) != 0)
    bail ("pthread_create failed");
  return lp;
}

/* A loop's thread ends; its eventfd and memory go only once every loop
 * has ended (loop_free), as sect4k-server's serve() closes its workers'
 * wake fds: a loop letting go may still answer another's ask, a write
 * to that one's eventfd (TSan saw one race the close). */
static void
loop_end (struct tloop *lp)
{
  pthread_join (lp->thread, NULL);
}

static void
loop_free (struct tloop *lp)
{
  close (lp->efd);
  pthread_mutex_destroy (&lp->lock);
  memset (lp, 0xa5, sizeof *lp);
  free (lp);
}

int
main (int argc, char **argv)
{
  if (argc != 2) {
    fprintf (stderr, "usage: %s URI\n", argv[0]);
    return 2;
  }
  struct s4k_config c;
  char err[512];
  s4k_config_init (&c);
  if (s4k_config_set (&c, "upstream", argv[1], err, sizeof err) == -1 ||
      s4k_config_set (&c, "model", "512e", err, sizeof err) == -1 ||
      s4k_config_finish (&c, err, sizeof err) == -1 ||
      !(store = s4k_nbd_store_new (&c, &c.geom.size, err, sizeof err)) ||
      s4k_dev_new (&dev, &c, store, err, sizeof err) < 0)
    bail ("%s", err);
  if (!strstr (s4k_dev_store_info (dev), "no multi-conn"))
    bail ("the upstream has multi-conn: %s", s4k_dev_store_info (dev));

  struct tloop *longs[LONG];
  for (unsigned i = 0; i < LONG; i++)
    longs[i] = loop_start (i, true);
  pthread_t sync_thread;
  if (pthread_create (&sync_thread, NULL, sync_main, NULL) != 0)
    bail ("pthread_create failed");
  unsigned id = LONG;
  struct tloop *ended[GENERATIONS * SHORT];
  unsigned nended = 0;
  for (unsigned g = 0; g < GENERATIONS; g++) {
    struct tloop *shorts[SHORT];
    for (unsigned i = 0; i < SHORT; i++)
      shorts[i] = loop_start (id++, false);
    for (unsigned i = 0; i < SHORT; i++) {
      loop_end (shorts[i]);
      ended[nended++] = shorts[i];
    }
  }
  atomic_store (&stop_long, true);
  for (unsigned i = 0; i < LONG; i++)
    loop_end (longs[i]);
  for (unsigned i = 0; i < LONG; i++)
    loop_free (longs[i]);
  for (unsigned i = 0; i < nended; i++)
    loop_free (ended[i]);
  pthread_join (sync_thread, NULL);

  ok (atomic_load (&failures) == 0, "every request of %u loops ended well "
      "and the synchronous writer's (%u flushes, %u generations of short "
      "loops letting go)", id,
      atomic_load (&flushes), GENERATIONS);
  is_u64 (atomic_load (&store->losses), 0, "no loss counted");
  s4k_dev_close (dev);
  printf ("1..%u\n", tap_n);
  return tap_failed != 0;
}
