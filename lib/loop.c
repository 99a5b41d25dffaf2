/* The two steps every event loop driving the engine repeats (the server,
 * the fuzzer, the aio tests): handing ring completions to their
 * s4k_completion, and running what was posted in the order it was. */
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
