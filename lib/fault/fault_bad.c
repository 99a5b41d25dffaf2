/* SPDX-License-Identifier: BSD-3-Clause */
/* The fault layer's bad sectors: the set of bad physical sectors (sorted,
 * disjoint, non-adjacent runs), what writes repair, and the run-time
 * calls that add, remove and list them (control socket, tests). */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault_priv.h"
#include "stats/stats.h"

/* ---- bad sectors: sorted, disjoint, non-adjacent runs of sectors ------ */

/* Index of the first run ending at or after k. */
static size_t
bad_find (const struct badset *b, uint64_t k)
{
  size_t lo = 0, hi = b->n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (b->r[mid].last < k)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

bool
fault_bad_any (const struct badset *b, uint64_t first, uint64_t last)
{
  size_t i = bad_find (b, first);
  return i < b->n && b->r[i].first <= last;
}

static int
bad_reserve (struct badset *b, size_t n)
{
  if (n <= b->cap)
    return 0;
  size_t cap = b->cap ? 2 * b->cap : 16;
  while (cap < n)
    cap *= 2;
  struct run *r = realloc (b->r, cap * sizeof *r);
  if (!r)
    return -ENOMEM;
  b->r = r;
  b->cap = cap;
  return 0;
}

int
fault_bad_add (struct badset *b, uint64_t first, uint64_t last)
{
  /* Merge every run overlapping or adjacent to [first, last]. */
  size_t i = bad_find (b, first ? first - 1 : 0), j = i;
  while (j < b->n && b->r[j].first <= last + 1) {
    if (b->r[j].first < first)
      first = b->r[j].first;
    if (b->r[j].last > last)
      last = b->r[j].last;
    j++;
  }
  if (j == i) {
    if (bad_reserve (b, b->n + 1))
      return -ENOMEM;
    memmove (&b->r[i + 1], &b->r[i], (b->n - i) * sizeof *b->r);
    b->n++;
  }
  else {
    memmove (&b->r[i + 1], &b->r[j], (b->n - j) * sizeof *b->r);
    b->n -= j - i - 1;
  }
  b->r[i] = (struct run) { first, last };
  return 0;
}

/* Returns how many sectors were bad, or -ENOMEM. */
int64_t
fault_bad_remove (struct badset *b, uint64_t first, uint64_t last)
{
  int64_t removed = 0;
  size_t i = bad_find (b, first);
  while (i < b->n && b->r[i].first <= last) {
    struct run *r = &b->r[i];
    uint64_t s = r->first > first ? r->first : first;
    uint64_t e = r->last < last ? r->last : last;
    removed += e - s + 1;
    if (r->first < first && r->last > last) {       /* split in two */
      if (bad_reserve (b, b->n + 1))
        return -ENOMEM;
      r = &b->r[i];
      memmove (&b->r[i + 1], r, (b->n - i) * sizeof *r);
      b->n++;
      b->r[i].last = first - 1;
      b->r[i + 1].first = last + 1;
      return removed;
    }
    if (r->first < first)
      r->last = first - 1, i++;
    else if (r->last > last)
      r->first = last + 1, i++;
    else {
      memmove (r, r + 1, (b->n - i - 1) * sizeof *r);
      b->n--;
    }
  }
  return removed;
}

/* Counts repaired sectors for the statistics. */
int
fault_clear_bad (struct s4k_fault *f, uint64_t len, uint64_t off)
{
  if (!f->bad.n)
    return 0;
  int64_t n = fault_bad_remove (&f->bad, sector_of (f, off),
                                sector_of (f, off + len - 1));
  if (n < 0)
    return n;
  fault_tally.bad_sectors_cleared += n;
  f->repaired += n;
  return 0;
}

/* ---- run time ---------------------------------------------------------- */

static int
bad_change (struct s4k_dev *d, uint64_t first, uint64_t last, bool add,
            char *err, size_t errlen)
{
  struct s4k_fault *f = dev_fault (d);
  if (!f) {
    snprintf (err, errlen, "no fault layer (give bad-sectors=, control=, "
              "write-cache= or power-cut-after=)");
    return -ENOTSUP;
  }
  const uint64_t lbas = f->g.size / f->g.logical;
  if (first > last || last >= lbas) {
    snprintf (err, errlen, "LBA range %" PRIu64 "-%" PRIu64 ": must be "
              "FIRST <= LAST <= %" PRIu64 " (the last LBA)", first, last,
              lbas - 1);
    return -ERANGE;
  }
  const uint64_t a = sector_of (f, first * f->g.logical),
                 b = sector_of (f, last * f->g.logical);
  pthread_mutex_lock (&f->m);
  int r = add ? fault_bad_add (&f->bad, a, b)
              : fault_bad_remove (&f->bad, a, b) < 0 ? -ENOMEM : 0;
  pthread_mutex_unlock (&f->m);
  if (r)
    snprintf (err, errlen, "out of memory");
  return r;
}

int
s4k_dev_bad_add (struct s4k_dev *d, uint64_t first_lba, uint64_t last_lba,
                 char *err, size_t errlen)
{
  return bad_change (d, first_lba, last_lba, true, err, errlen);
}

int
s4k_dev_bad_remove (struct s4k_dev *d, uint64_t first_lba,
                    uint64_t last_lba, char *err, size_t errlen)
{
  return bad_change (d, first_lba, last_lba, false, err, errlen);
}

int
s4k_dev_bad_list (struct s4k_dev *d, FILE *fp)
{
  struct s4k_fault *f = dev_fault (d);
  if (!f)
    return 0;
  const uint32_t L = f->g.logical;
  pthread_mutex_lock (&f->m);
  for (size_t i = 0; i < f->bad.n; i++) {
    uint64_t s, e, s2, e2;
    s4k_sector_range (&f->g, f->bad.r[i].first, &s, &e);
    s4k_sector_range (&f->g, f->bad.r[i].last, &s2, &e2);
    fprintf (fp, "%" PRIu64 "-%" PRIu64 "\n", s / L, e2 / L - 1);
  }
  pthread_mutex_unlock (&f->m);
  return 0;
}

void
s4k_dev_bad_counts (struct s4k_dev *d, uint64_t *bad, uint64_t *repaired)
{
  struct s4k_fault *f = dev_fault (d);
  *bad = *repaired = 0;
  if (!f)
    return;
  pthread_mutex_lock (&f->m);
  for (size_t i = 0; i < f->bad.n; i++)
    *bad += f->bad.r[i].last - f->bad.r[i].first + 1;
  *repaired = f->repaired;
  pthread_mutex_unlock (&f->m);
}
