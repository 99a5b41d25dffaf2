/* SPDX-License-Identifier: BSD-3-Clause */
/* The device's asynchronous driver (s4k_aio_..., sect4k-server): the
 * plan submitted to the loop's ring, resumed at the stage that waited. */
#include <errno.h>
#include <stdlib.h>

#include "dev_plan.h"

/* ---- the asynchronous driver ------------------------------------------ */

struct s4k_aio {
  struct s4k_dev *d;
  s4k_aio_done_fn *done;
  void *opaque;
  struct request q;             /* the request in flight */
  char *cut;                    /* 2P for the cut sectors, kept */
  struct s4k_lock_waiter waiter;
  struct s4k_completion retry;  /* posted when the waiter is woken */
  struct s4k_store_req sq;
  struct extent_clip clip;      /* extents in flight: the caller's fn */
};

bool
s4k_dev_async (const struct s4k_dev *d)
{
  return d->store->async;
}

bool
s4k_dev_async_extents (const struct s4k_dev *d)
{
  return d->store->async_extents;
}

void
s4k_dev_stop (struct s4k_dev *d)
{
  if (d->store->ops->stop)
    d->store->ops->stop (d->store);
}

void
s4k_dev_loop_gone (struct s4k_dev *d, struct s4k_loop *loop)
{
  if (d->store->ops->loop_gone)
    d->store->ops->loop_gone (d->store, loop);
}

/* Runs the plan from the stage that waited (with its result r). */
static int
aio_run (struct s4k_aio *a, int r)
{
  return run (a->d, &a->q, &a->sq, &a->waiter, a->q.stage, r);
}

/* Store I/O completed (on the loop's thread). */
static void
aio_store_done (struct s4k_store_req *sq, int res)
{
  struct s4k_aio *a = s4k_container_of (sq, struct s4k_aio, sq);
  int r = aio_run (a, res);
  if (r != 1)
    a->done (a->opaque, r);
}

/* The stripe the request waits on was unlocked, maybe by another
 * thread: try again on the request's own. */
static void
aio_lock_woken (struct s4k_lock_waiter *w)
{
  struct s4k_aio *a = s4k_container_of (w, struct s4k_aio, waiter);
  a->sq.loop->post (a->sq.loop, &a->retry);
}

static void
aio_retry (struct s4k_completion *c, int res)
{
  (void) res;
  struct s4k_aio *a = s4k_container_of (c, struct s4k_aio, retry);
  int r = aio_run (a, 0);       /* the lock again */
  if (r != 1)
    a->done (a->opaque, r);
}

struct s4k_aio *
s4k_aio_new (struct s4k_dev *d, struct s4k_loop *loop, s4k_aio_done_fn *done,
             void *opaque)
{
  struct s4k_aio *a = calloc (1, sizeof *a);
  if (!a)
    return NULL;
  a->d = d;
  a->done = done;
  a->opaque = opaque;
  a->waiter.wake = aio_lock_woken;
  a->retry.fn = aio_retry;
  a->sq.loop = loop;
  a->sq.done = aio_store_done;
  return a;
}

void
s4k_aio_free (struct s4k_aio *a)
{
  if (!a)
    return;
  free (a->cut);
  free (a->sq.bounce);
  free (a);
}

static int
aio_begin (struct s4k_aio *a, enum s4k_op op, void *buf, uint64_t len,
           uint64_t off, unsigned flags)
{
  struct s4k_dev *d = a->d;
  int r = begin (d, &a->q, op, buf, len, off, flags);
  /* Page-aligned, so O_DIRECT needs no bounce for the cut sectors. */
  if (r == 0 && needs_cut (&a->q) && !a->cut &&
      posix_memalign ((void **) &a->cut, 4096, 2 * (size_t) d->g.physical)) {
    a->cut = NULL;
    r = -ENOMEM;
  }
  a->q.cut = a->cut;
  if (r) {
    zone_undo (d, &a->q, r);
    return counted (d, op, len, off, r == 1 ? 0 : r, a->q.t);
  }
  return run (d, &a->q, &a->sq, &a->waiter, ST_START, 0);
}

/* Stores without submit run the synchronous calls: they do not wait on
 * a disk. */
int
s4k_aio_read (struct s4k_aio *a, void *buf, uint64_t len, uint64_t off)
{
  if (!a->d->store->async)
    return s4k_read (a->d, buf, len, off);
  return aio_begin (a, S4K_OP_READ, buf, len, off, 0);
}

int
s4k_aio_write (struct s4k_aio *a, const void *buf, uint64_t len, uint64_t off,
               unsigned flags)
{
  if (!a->d->store->async)
    return s4k_write (a->d, buf, len, off, flags);
  return aio_begin (a, S4K_OP_WRITE, (void *) buf, len, off, flags);
}

int
s4k_aio_zone_append (struct s4k_aio *a, const void *buf, uint64_t len,
                     uint64_t *off, unsigned flags)
{
  if (!a->d->store->async || !a->d->zones)
    return s4k_dev_zone_append (a->d, buf, len, off, flags);
  /* begin() places it before aio_begin returns. */
  a->q.off = *off;
  int r = aio_begin (a, S4K_OP_WRITE, (void *) buf, len, *off,
                     (flags & ~S4K_ZONE_RAW) | S4K_ZONE_APPEND);
  *off = a->q.off;
  return r;
}

int
s4k_aio_zero (struct s4k_aio *a, uint64_t len, uint64_t off, unsigned flags)
{
  if (!a->d->store->async)
    return s4k_zero (a->d, len, off, flags);
  return aio_begin (a, S4K_OP_ZERO, NULL, len, off, flags);
}

int
s4k_aio_trim (struct s4k_aio *a, uint64_t len, uint64_t off, unsigned flags)
{
  if (!a->d->store->async)
    return s4k_trim (a->d, len, off, flags);
  return aio_begin (a, S4K_OP_TRIM, NULL, len, off, flags);
}

int
s4k_aio_flush (struct s4k_aio *a)
{
  if (!a->d->store->async)
    return s4k_flush (a->d);
  return aio_begin (a, S4K_OP_FLUSH, NULL, 0, 0, 0);
}

/* Extents take no lock: one store request, the plan's last stage, whose
 * end (aio_store_done) counts it as the synchronous call does. */
int
s4k_aio_extents (struct s4k_aio *a, uint64_t len, uint64_t off,
                 s4k_extent_fn *fn, void *opaque)
{
  struct s4k_dev *d = a->d;
  if (!d->store->async_extents)
    return s4k_extents (d, len, off, fn, opaque);
  struct request *q = &a->q;
  *q = (struct request) { .op = S4K_OP_EXTENTS, .stage = ST_EXTENTS,
                          .len = len, .off = off };
  int r = extents_plan (d, len, off, fn, opaque, &a->clip, &a->sq.io[0]);
  if (r)
    return counted (d, S4K_OP_EXTENTS, len, off, r == 1 ? 0 : r, q->t);
  a->sq.kind = S4K_REQ_EXTENTS;
  a->sq.n = 1;
  a->sq.extent_fn = clip_extent;
  a->sq.extent_opaque = &a->clip;
  r = d->store->ops->submit (d->store, &a->sq);
  return r == 1 ? 1 : finish (d, q, r);
}
