#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "lock.h"

#define GROUP_SHIFT 6            /* 64 sectors a group */
#define NSTRIPES 1024            /* power of two */

struct held {
  uint64_t first, last;
  bool shared;
};

struct stripe {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  struct held *held;
  unsigned n, cap, waiters;
} __attribute__ ((aligned (64)));

struct s4k_locks {
  struct stripe stripes[NSTRIPES];
};

struct s4k_locks *
s4k_locks_new (void)
{
  struct s4k_locks *l = calloc (1, sizeof *l);
  if (!l)
    return NULL;
  for (unsigned i = 0; i < NSTRIPES; i++) {
    pthread_mutex_init (&l->stripes[i].mu, NULL);
    pthread_cond_init (&l->stripes[i].cv, NULL);
  }
  return l;
}

void
s4k_locks_free (struct s4k_locks *l)
{
  if (!l)
    return;
  for (unsigned i = 0; i < NSTRIPES; i++) {
    pthread_mutex_destroy (&l->stripes[i].mu);
    pthread_cond_destroy (&l->stripes[i].cv);
    free (l->stripes[i].held);
  }
  free (l);
}

static struct stripe *
stripe_of (struct s4k_locks *l, uint64_t group)
{
  /* Fibonacci hashing spreads neighbouring groups over the stripes. */
  return &l->stripes[(group * 0x9E3779B97F4A7C15ull) >> (64 - 10)];
}

static bool
conflicts (const struct stripe *s, uint64_t first, uint64_t last, bool shared)
{
  for (unsigned i = 0; i < s->n; i++) {
    const struct held *h = &s->held[i];
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

void
s4k_lock (struct s4k_locks *l, uint64_t first, uint64_t last, bool shared)
{
  for (uint64_t pf = first, pl; pf <= last; pf = pl + 1) {
    pl = piece_last (pf, last);
    struct stripe *s = stripe_of (l, pf >> GROUP_SHIFT);
    pthread_mutex_lock (&s->mu);
    while (conflicts (s, pf, pl, shared)) {
      s->waiters++;
      pthread_cond_wait (&s->cv, &s->mu);
      s->waiters--;
    }
    if (s->n == s->cap) {
      /* Grows only the first few times a stripe gets busy. */
      unsigned cap = s->cap ? s->cap * 2 : 4;
      struct held *h;
      if (!(h = realloc (s->held, cap * sizeof *h))) {
        /* There is no safe way to fail with half the range locked. */
        fputs ("sect4k: out of memory in the sector lock table\n", stderr);
        abort ();
      }
      s->held = h;
      s->cap = cap;
    }
    s->held[s->n++] = (struct held) { pf, pl, shared };
    pthread_mutex_unlock (&s->mu);
  }
}

void
s4k_unlock (struct s4k_locks *l, uint64_t first, uint64_t last, bool shared)
{
  for (uint64_t pf = first, pl; pf <= last; pf = pl + 1) {
    pl = piece_last (pf, last);
    struct stripe *s = stripe_of (l, pf >> GROUP_SHIFT);
    pthread_mutex_lock (&s->mu);
    for (unsigned i = 0; i < s->n; i++) {
      struct held *h = &s->held[i];
      if (h->first == pf && h->last == pl && h->shared == shared) {
        *h = s->held[--s->n];
        break;
      }
    }
    if (s->waiters)
      pthread_cond_broadcast (&s->cv);
    pthread_mutex_unlock (&s->mu);
  }
}
