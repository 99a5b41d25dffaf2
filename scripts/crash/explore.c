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
  for (size_t i = 0; i < cur.nt; i++) {
    uint64_t k = n_outcomes (&cur.t[i]);
    n = n > UINT64_MAX / k ? UINT64_MAX : n * k;
  }
  return n;
}

#define EXHAUSTIVE_MAX_WRITES 20

/* Every state of the crash point, if at most the limit, else seeded
 * samples.  Either way in a fixed order. */
void
explore_cp (size_t cpi)
{
  struct hset seen = { 0 };
  enter_cp (&cps[cpi]);
  state_set_cp (&cur, cpi);
  const size_t m = cur.nvol;
  bool exhaustive = m <= EXHAUSTIVE_MAX_WRITES;
  uint64_t total = 0;
  if (exhaustive) {
    for (uint64_t s = 0; s < (1ULL << m) && total != UINT64_MAX; s++) {
      cur.kept[0] = s;
      state_build (&cur);
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
    for (uint64_t s = 0; s < (1ULL << m); s++) {
      memset (cur.kept, 0, bitwords (m) * 8);
      cur.kept[0] = s;
      state_build (&cur);
      uint64_t *radix = xcalloc (cur.nt + 1, 8);
      for (;;) {
        for (size_t i = 0; i < cur.nt; i++)
          cur.t[i].o = outcome_at (&cur.t[i], radix[i]);
        state_images (&cur);
        if (hset_add (&seen, state_hash (&cur)))
          check_state ();
        size_t i = cur.nt;
        while (i > 0 && ++radix[i - 1] == n_outcomes (&cur.t[i - 1]))
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
      memset (cur.kept, 0, bitwords (m) * 8);
      /* First nothing kept, then everything kept whole, then random. */
      for (size_t v = 0; v < m && attempt > 0; v++) {
        x = mix64 (x);
        if (attempt == 1 || x >> 63)
          cur.kept[v / 64] |= 1ULL << (v % 64);
      }
      state_build (&cur);
      for (size_t i = 0; i < cur.nt; i++) {
        x = mix64 (x);
        uint64_t n = n_outcomes (&cur.t[i]);
        cur.t[i].o = outcome_at (&cur.t[i], attempt <= 1 ? 0 : x % n);
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

