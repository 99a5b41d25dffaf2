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

#include <stdbool.h>
#include <stdint.h>

struct s4k_locks;

struct s4k_locks *s4k_locks_new (void);
void s4k_locks_free (struct s4k_locks *l);
void s4k_lock (struct s4k_locks *l, uint64_t first, uint64_t last,
               bool shared);
void s4k_unlock (struct s4k_locks *l, uint64_t first, uint64_t last,
                 bool shared);

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
