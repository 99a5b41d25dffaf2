/* SPDX-License-Identifier: BSD-3-Clause */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "lock.h"

#define GROUP_SHIFT S4K_LOCK_GROUP_SHIFT
#define NSTRIPES S4K_LOCK_STRIPES

/* Room for this many ranges a stripe from the start, so the inline lock
 * need not check for it; hold() grows it. */
#define INITIAL_CAP 4u

struct s4k_locks *
s4k_locks_new (void)
{
  struct s4k_locks *l = calloc (1, sizeof *l);
  for (unsigned i = 0; l && i < NSTRIPES; i++) {
    struct s4k_stripe *s = &l->stripes[i];
    if (!(s->held = malloc (INITIAL_CAP * sizeof *s->held))) {
      s4k_locks_free (l);
      return NULL;
    }
    s->cap = INITIAL_CAP;
  }
  return l;
}

void
s4k_locks_free (struct s4k_locks *l)
{
  if (!l)
    return;
  for (unsigned i = 0; i < NSTRIPES; i++)
    free (l->stripes[i].held);
  free (l);
}

static void __attribute__ ((noinline))
stripe_acquire_slow (struct s4k_stripe *s)
{
  unsigned spins = 0;
  while (atomic_exchange_explicit (&s->busy, 1, memory_order_acquire))
    while (atomic_load_explicit (&s->busy, memory_order_relaxed))
      if (++spins % 128 == 0)
        sched_yield ();         /* the holder may have been preempted */
      else
        __builtin_ia32_pause ();
}

/* Inline for the common case, a free stripe. */
static inline void
stripe_acquire (struct s4k_stripe *s)
{
  if (__builtin_expect (atomic_exchange_explicit (&s->busy, 1,
                                                  memory_order_acquire), 0))
    stripe_acquire_slow (s);
}

static void
stripe_release (struct s4k_stripe *s)
{
  atomic_store_explicit (&s->busy, 0, memory_order_release);
}

static bool
conflicts (const struct s4k_stripe *s, uint64_t first, uint64_t last,
           bool shared)
{
  for (unsigned i = 0; i < s->n; i++) {
    const struct s4k_held *h = &s->held[i];
    if (h->first <= last && first <= h->last && !(shared && h->shared))
      return true;
  }
  return false;
}

/* Last sector of the group piece that starts at pf. */
static inline uint64_t
piece_last (uint64_t pf, uint64_t last)
{
  uint64_t end = pf | ((1u << GROUP_SHIFT) - 1);
  return end < last ? end : last;
}

/* Records a held range; the caller has the stripe.  Inlined: this is
 * on every request's path. */
static inline __attribute__ ((always_inline)) void
hold (struct s4k_stripe *s, uint64_t first, uint64_t last, bool shared)
{
  if (s->n == s->cap) {
    /* Grows only the first few times a stripe gets busy. */
    unsigned cap = s->cap * 2;
    struct s4k_held *h = realloc (s->held, cap * sizeof *h);
    if (!h) {
      /* There is no safe way to fail with half the range locked. */
      fputs ("sect4k: out of memory in the sector lock table\n", stderr);
      abort ();
    }
    s->held = h;
    s->cap = cap;
  }
  s->held[s->n++] = (struct s4k_held) { first, last, shared };
}

void
s4k_lock_any (struct s4k_locks *l, uint64_t first, uint64_t last, bool shared)
{
  for (uint64_t pf = first, pl; pf <= last; pf = pl + 1) {
    pl = piece_last (pf, last);
    struct s4k_stripe *s = s4k_stripe_of (l, pf >> GROUP_SHIFT);
    stripe_acquire (s);
    while (conflicts (s, pf, pl, shared)) {
      unsigned seq = atomic_load (&s->seq);
      atomic_fetch_add (&s->waiters, 1);
      stripe_release (s);
      /* Returns at once if an unlock has bumped seq since. */
      syscall (SYS_futex, &s->seq, FUTEX_WAIT_PRIVATE, seq, NULL, NULL, 0);
      atomic_fetch_sub (&s->waiters, 1);
      stripe_acquire (s);
    }
    hold (s, pf, pl, shared);
    stripe_release (s);
  }
}

bool
s4k_trylock (struct s4k_locks *l, uint64_t first, uint64_t last, bool shared,
             struct s4k_lock_waiter *w)
{
  for (uint64_t pf = first, pl; pf <= last; pf = pl + 1) {
    pl = piece_last (pf, last);
    struct s4k_stripe *s = s4k_stripe_of (l, pf >> GROUP_SHIFT);
    stripe_acquire (s);
    if (conflicts (s, pf, pl, shared)) {
      /* Queued under the stripe's lock: the unlock that clears the
       * conflict cannot miss w. */
      w->next = s->queue;
      s->queue = w;
      stripe_release (s);
      if (pf > first)
        s4k_unlock_any (l, first, pf - 1, shared);
      return false;
    }
    hold (s, pf, pl, shared);
    stripe_release (s);
  }
  return true;
}

void
s4k_unlock_any (struct s4k_locks *l, uint64_t first, uint64_t last, bool shared)
{
  for (uint64_t pf = first, pl; pf <= last; pf = pl + 1) {
    pl = piece_last (pf, last);
    struct s4k_stripe *s = s4k_stripe_of (l, pf >> GROUP_SHIFT);
    stripe_acquire (s);
    for (unsigned i = 0; i < s->n; i++) {
      struct s4k_held *h = &s->held[i];
      if (h->first == pf && h->last == pl && h->shared == shared) {
        *h = s->held[--s->n];
        break;
      }
    }
    /* Under the spinlock: a plain increment is enough. */
    atomic_store_explicit (&s->seq,
                           atomic_load_explicit (&s->seq, memory_order_relaxed)
                           + 1, memory_order_relaxed);
    struct s4k_lock_waiter *q = s->queue;
    if (q)
      s->queue = NULL;
    stripe_release (s);
    if (atomic_load (&s->waiters))
      syscall (SYS_futex, &s->seq, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
    for (struct s4k_lock_waiter *next; q; q = next) {
      next = q->next;           /* wake may queue q again */
      q->wake (q);
    }
  }
}
