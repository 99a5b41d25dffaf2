/* SPDX-License-Identifier: BSD-3-Clause */
/* Waiting for one engine request (s4k_aio_*) at a time, in tests that
 * drive their own s4k_loop (tests/file/aio.c, tests/file/diverge.c). */
#ifndef S4K_TEST_AIO_H
#define S4K_TEST_AIO_H

#include <errno.h>
#include <liburing.h>
#include <stdbool.h>

#include "sect4k/sect4k.h"
#include "tap.h"

struct waiter {
  bool done;
  int r;
};

/* The s4k_aio callback; its opaque is a struct waiter. */
TAP_UNUSED static void
waiter_done (void *opaque, int r)
{
  struct waiter *w = opaque;
  w->done = true;
  w->r = r;
}

/* The result of a request started on a loop (r from s4k_aio_*), running
 * the loop's posted work (take_posted (lp) empties its queue and returns
 * what it held, or NULL) and its ring until the request finishes. */
TAP_UNUSED static int
wait_aio (struct io_uring *ring, struct s4k_completion *(*take_posted) (void *),
          void *lp, int r, struct waiter *w)
{
  while (r == 1 && !w->done) {
    struct s4k_completion *c = take_posted (lp);
    if (c) {
      s4k_loop_run_posted (c);
      continue;
    }
    struct io_uring_cqe *cqe;
    struct __kernel_timespec ts = { 30, 0 };
    if (io_uring_submit_and_wait_timeout (ring, &cqe, 1, &ts, NULL) == -ETIME)
      bail ("a request did not finish in 30 s");
    s4k_loop_reap (ring);
  }
  return r == 1 ? w->r : r;
}

#endif
