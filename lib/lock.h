/* SPDX-License-Identifier: BSD-3-Clause */
/* Per-physical-sector range locks.
 *
 * Locking sectors [first, last] never blocks a request on other sectors:
 * sectors are grouped (64 to a group) and each group hashes to a stripe
 * whose spinlock is held only while the stripe's list of held ranges is
 * updated, never during I/O; a request that must wait sleeps on a futex
 * (or, from an event loop, queues itself to be woken: s4k_trylock).
 * Ranges are taken group by group in ascending order, so requests cannot
 * deadlock.  Shared holders (reads) may overlap each other; exclusive
 * holders (writes, zeroes, trims, RMW) overlap nothing. */
#ifndef S4K_LOCK_H
#define S4K_LOCK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define S4K_LOCK_GROUP_SHIFT 6          /* 64 sectors a group */
#define S4K_LOCK_STRIPES 1024           /* power of two */

struct s4k_held {
  uint64_t first, last;
  bool shared;
};

/* The list of held ranges is guarded by a spinlock held for a few dozen
 * instructions (a pthread mutex costs several times more on this path);
 * a request that must wait sleeps on the futex `seq`, which every unlock
 * bumps. */
struct s4k_stripe {
  atomic_uint busy;
  atomic_uint seq;
  atomic_uint waiters;
  unsigned n, cap;
  struct s4k_held *held;
  struct s4k_lock_waiter *queue;   /* s4k_trylock callers to wake */
} __attribute__ ((aligned (64)));

struct s4k_locks {
  struct s4k_stripe stripes[S4K_LOCK_STRIPES];
};

struct s4k_locks *s4k_locks_new (void);
void s4k_locks_free (struct s4k_locks *l);
/* Any range, any state of the stripes. */
void s4k_lock_any (struct s4k_locks *l, uint64_t first, uint64_t last,
                   bool shared);
void s4k_unlock_any (struct s4k_locks *l, uint64_t first, uint64_t last,
                     bool shared);

static inline struct s4k_stripe *
s4k_stripe_of (struct s4k_locks *l, uint64_t group)
{
  /* Fibonacci hashing spreads neighbouring groups over the stripes. */
  return &l->stripes[(group * 0x9E3779B97F4A7C15ull) >>
                     (64 - __builtin_ctz (S4K_LOCK_STRIPES))];
}

/* Inline on every request's path: the common case, a range in one group
 * whose stripe holds nothing and nobody waits on, is a few dozen
 * instructions; anything else goes to the _any functions. */
static inline void
s4k_lock (struct s4k_locks *l, uint64_t first, uint64_t last, bool shared)
{
  struct s4k_stripe *s = s4k_stripe_of (l, first >> S4K_LOCK_GROUP_SHIFT);
  if ((first ^ last) >> S4K_LOCK_GROUP_SHIFT == 0 &&
      !atomic_exchange_explicit (&s->busy, 1, memory_order_acquire)) {
    bool got = s->n == 0;      /* (there is room: s4k_locks_new) */
    if (got) {
      s->held[0] = (struct s4k_held) { first, last, shared };
      s->n = 1;
    }
    atomic_store_explicit (&s->busy, 0, memory_order_release);
    if (got)
      return;
  }
  s4k_lock_any (l, first, last, shared);
}

static inline void
s4k_unlock (struct s4k_locks *l, uint64_t first, uint64_t last, bool shared)
{
  struct s4k_stripe *s = s4k_stripe_of (l, first >> S4K_LOCK_GROUP_SHIFT);
  if ((first ^ last) >> S4K_LOCK_GROUP_SHIFT == 0 &&
      !atomic_exchange_explicit (&s->busy, 1, memory_order_acquire)) {
    /* Ours is the only range held and nobody waits (waiters count and
     * queue under the spinlock): no futex to bump or wake. */
    bool alone = s->n == 1 && !s->queue &&
                 !atomic_load_explicit (&s->waiters, memory_order_relaxed);
    if (alone)
      s->n = 0;
    atomic_store_explicit (&s->busy, 0, memory_order_release);
    if (alone)
      return;
  }
  s4k_unlock_any (l, first, last, shared);
}

/* For event loops, which must never sleep on a lock: a request that
 * cannot have its range now holds none of it and waits here. */
struct s4k_lock_waiter {
  struct s4k_lock_waiter *next;
  /* Runs on the unlocking thread, with no lock held: the caller should
   * try again (on its own thread). */
  void (*wake) (struct s4k_lock_waiter *w);
};

/* Takes [first, last] if nothing conflicts and returns true.  Otherwise
 * takes nothing, queues w on a stripe in the way and returns false;
 * w->wake runs once that stripe has been unlocked. */
bool s4k_trylock (struct s4k_locks *l, uint64_t first, uint64_t last,
                  bool shared, struct s4k_lock_waiter *w);

#endif
