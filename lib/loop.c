/* SPDX-License-Identifier: BSD-3-Clause */
/* What every io_uring user of the engine repeats (the server's loops, the
 * file store's per-thread rings, the fuzzer, the aio tests): setting up a
 * ring for one thread, getting an SQE or stopping, handing completions to
 * their s4k_completion, and running what was posted in the order it
 * was. */
#include <errno.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>

#include "sect4k/sect4k.h"

int
s4k_ring_init (struct io_uring *ring, unsigned entries)
{
  /* One thread submits and reaps: the cheapest flags the kernel has. */
  static const unsigned flags[] = {
    IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
    IORING_SETUP_COOP_TASKRUN,
    0,
  };
  int r = -EINVAL;
  for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
    if ((r = io_uring_queue_init (entries, ring, flags[i])) != -EINVAL)
      break;
  return r;
}

struct io_uring_sqe *
s4k_ring_sqe (struct io_uring *ring)
{
  struct io_uring_sqe *sqe = io_uring_get_sqe (ring);
  if (!sqe) {
    io_uring_submit (ring);     /* empties the submission queue */
    sqe = io_uring_get_sqe (ring);
  }
  if (!sqe) {
    /* The kernel took none of a full queue: no way to go on. */
    fputs ("sect4k: io_uring submission queue full\n", stderr);
    abort ();
  }
  return sqe;
}

unsigned
s4k_loop_reap (struct io_uring *ring)
{
  unsigned head, n = 0;
  struct io_uring_cqe *cqe;
  io_uring_for_each_cqe (ring, head, cqe) {
    struct s4k_completion *c = io_uring_cqe_get_data (cqe);
    n++;
    if (c)                      /* NULL: e.g. a front end's cancel */
      c->fn (c, cqe->res);
  }
  io_uring_cq_advance (ring, n);
  return n;
}

void
s4k_loop_run_posted (struct s4k_completion *newest)
{
  struct s4k_completion *c = newest, *fifo = NULL;
  while (c) {                   /* a stack: reverse it */
    struct s4k_completion *next = c->next;
    c->next = fifo;
    fifo = c;
    c = next;
  }
  while (fifo) {
    c = fifo;
    fifo = c->next;             /* before fn, which may post c again */
    c->fn (c, 0);
  }
}

void
s4k_loop_timeout (struct s4k_loop *loop, struct s4k_completion *c,
                  struct __kernel_timespec *at)
{
  struct io_uring_sqe *sqe = s4k_ring_sqe (loop->ring);
  /* count 0: a pure timer, on CLOCK_MONOTONIC (the ring's default). */
  io_uring_prep_timeout (sqe, at, 0, IORING_TIMEOUT_ABS);
  io_uring_sqe_set_data (sqe, c);
}
