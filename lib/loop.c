/* The two steps every event loop driving the engine repeats (the server,
 * the fuzzer, the aio tests): handing ring completions to their
 * s4k_completion, and running what was posted in the order it was. */
#include <stdio.h>
#include <stdlib.h>

#include <liburing.h>

#include "sect4k/sect4k.h"

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
  struct io_uring_sqe *sqe = io_uring_get_sqe (loop->ring);
  if (!sqe) {
    io_uring_submit (loop->ring);       /* empties the submission queue */
    sqe = io_uring_get_sqe (loop->ring);
  }
  if (!sqe) {
    fputs ("sect4k: io_uring submission queue full\n", stderr);
    abort ();
  }
  /* count 0: a pure timer, on CLOCK_MONOTONIC (the ring's default). */
  io_uring_prep_timeout (sqe, at, 0, IORING_TIMEOUT_ABS);
  io_uring_sqe_set_data (sqe, c);
}
