/* SPDX-License-Identifier: BSD-3-Clause */
/* sect4k-crash: every state, or seeded samples, of each crash point
 * (the files: crash.h). */
#include "crash.h"

struct hset {
  uint64_t *v;
  size_t cap, n;
};

/* True if h was new. */
static bool
hset_add (struct hset *s, uint64_t h)
{
  if (2 * (s->n + 1) > s->cap) {
    struct hset o = *s;
    s->cap = o.cap ? 2 * o.cap : 256;
    s->v = xcalloc (s->cap, 8);
    s->n = 0;
    for (size_t i = 0; i < o.cap; i++)
      if (o.v[i])
        hset_add (s, o.v[i]);
    free (o.v);
  }
  h |= 1;                               /* 0 marks an empty slot */
  for (size_t i = hash_k (h, s->cap);; i = (i + 1) & (s->cap - 1)) {
    if (s->v[i] == h)
      return false;
    if (!s->v[i]) {
      s->v[i] = h;
      s->n++;
      return true;
    }
  }
}

bool is_tty;
static double last_progress;

void
progress (struct tally *t, bool final)
{
  if (!is_tty)
    return;
  double n = now_s ();
  if (!final && n - last_progress < 0.1)
    return;
  last_progress = n;
  fprintf (stderr, "\r" PROG ": crash point %zu/%zu, %" PRIu64 " states: %"
           PRIu64 " consistent, %" PRIu64 " failed, %" PRIu64 " not checked"
           "%s", cur.cpi + 1, ncps, t->states, t->consistent, t->failed,
           t->not_checked, final ? "\n" : "");
}

FILE *rep_fp, *sum_fp;
struct tally tally;

static void
check_state (void)
{
  state_images (&cur);
  char *id = state_id_of (&cur);
  struct run r = { R_CONSISTENT, 0 };
  if (checker)
    r = run_checker (id);
  else {
    /* --output DIR: the image instead of a checker */
    char path[PATH_MAX];
    snprintf (path, sizeof path, "%s/%s", output, id);
    write_output (path, true);
  }
  tally.states++;
  if (r.result == R_CONSISTENT)
    tally.checked++, tally.consistent++;
  else if (r.result == R_FAILED)
    tally.checked++, tally.failed++;
  else
    tally.not_checked++;
  report_state (rep_fp, sum_fp, id, r, tally.states == 1);
  free (id);
  progress (&tally, false);
}

/* Total states of the current kept set, saturating. */
static uint64_t
count_outcomes (void)
{
  uint64_t n = 1;
  for (size_t i = 0; i < cur.ndg; i++) {
    uint64_t k = cur.dg[i].n;
    n = n > UINT64_MAX / k ? UINT64_MAX : n * k;
  }
  return n;
}

#define EXHAUSTIVE_MAX_WRITES 20

/* Every state of the crash point, if at most the limit, else seeded
 * samples.  Either way in a fixed order: kept sets (kept_set_at: free
 * writes' subsets, then each sequential zone's prefix), and for each the
 * digits (state_digits: each free sector's outcome, each zone's cut) in
 * radix order. */
void
explore_cp (size_t cpi)
{
  struct hset seen = { 0 };
  enter_cp (&cps[cpi]);
  state_set_cp (&cur, cpi);
  const size_t m = cur.nvol;
  const uint64_t nsets = n_kept_sets (&cur);
  bool exhaustive = cur.nfree <= EXHAUSTIVE_MAX_WRITES &&
                    nsets <= 1ULL << EXHAUSTIVE_MAX_WRITES;
  uint64_t total = 0;
  if (exhaustive) {
    for (uint64_t s = 0; s < nsets && total != UINT64_MAX; s++) {
      kept_set_at (&cur, s);
      state_build (&cur);
      state_digits (&cur);
      uint64_t n = count_outcomes ();
      total = total > UINT64_MAX - n ? UINT64_MAX : total + n;
      if (states_limit && total > states_limit)
        break;
    }
    if (states_limit && total > states_limit)
      exhaustive = false;
  }
  if (!exhaustive && !states_limit)
    die ("crash point %zu: %zu unflushed writes and their outcomes are too "
         "many for --states all; give a number", cpi, m);
  if (exhaustive) {
    for (uint64_t s = 0; s < nsets; s++) {
      kept_set_at (&cur, s);
      state_build (&cur);
      state_digits (&cur);
      uint64_t *radix = xcalloc (cur.ndg + 1, 8);
      for (;;) {
        for (size_t i = 0; i < cur.ndg; i++)
          digit_set (&cur, &cur.dg[i], radix[i]);
        state_images (&cur);
        if (hset_add (&seen, state_hash (&cur)))
          check_state ();
        size_t i = cur.ndg;
        while (i > 0 && ++radix[i - 1] == cur.dg[i - 1].n)
          radix[--i] = 0;
        if (i == 0)
          break;
      }
      free (radix);
    }
  }
  else {
    uint64_t x = mix64 (seed ^ mix64 (cpi + 1));
    uint64_t got = 0;
    for (uint64_t attempt = 0; got < states_limit &&
         attempt < 8 * states_limit; attempt++) {
      /* First nothing kept, then everything kept whole, then random. */
      if (attempt == 0)
        kept_set_at (&cur, 0);
      else
        kept_set_random (&cur, &x, attempt == 1);
      state_build (&cur);
      state_digits (&cur);
      for (size_t i = 0; i < cur.ndg; i++) {
        x = mix64 (x);
        digit_set (&cur, &cur.dg[i],
                   attempt <= 1 ? 0 : x % cur.dg[i].n);
      }
      state_images (&cur);
      if (hset_add (&seen, state_hash (&cur))) {
        check_state ();
        got++;
      }
    }
  }
  free (seen.v);
}
