/* SPDX-License-Identifier: BSD-3-Clause */
/* The fault layer's write cache: a table of dirty physical sectors (a hash
 * by sector, and a list oldest first) over the durable contents (the
 * inner store): staging writes, reading through it, destaging and
 * writing it back. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fault_priv.h"

static struct entry **
slot (struct s4k_fault *f, uint64_t k)
{
  return &f->bucket[(k * 0x9E3779B97F4A7C15ULL) >> (64 - f->bucket_bits)];
}

struct entry *
fault_lookup (struct s4k_fault *f, uint64_t k)
{
  for (struct entry *e = *slot (f, k); e; e = e->hnext)
    if (e->k == k)
      return e;
  return NULL;
}

void
fault_drop (struct s4k_fault *f, struct entry *e)
{
  struct entry **p = slot (f, e->k);
  while (*p != e)
    p = &(*p)->hnext;
  *p = e->hnext;
  if (e->prev)
    e->prev->next = e->next;
  else
    f->oldest = e->next;
  if (e->next)
    e->next->prev = e->prev;
  else
    f->newest = e->prev;
  uint64_t s, end;
  s4k_sector_range (&f->g, e->k, &s, &end);
  f->dirty_bytes -= end - s;
  f->dirty_sectors--;
  f->atomic_sectors -= e->atomic;
  free (e);
}

/* Drops the dirty sectors in [off, off+len) (whole sectors). */
void
fault_drop_range (struct s4k_fault *f, uint64_t len, uint64_t off)
{
  if (!f->dirty_sectors)
    return;
  for (uint64_t k = sector_of (f, off), last = sector_of (f, off + len - 1);
       k <= last; k++) {
    struct entry *e = fault_lookup (f, k);
    if (e)
      fault_drop (f, e);
  }
}

/* Puts a piece's sectors in the table as dirty.  Inline: fault_stage's loop
 * is every cached write's path. */
static inline __attribute__ ((always_inline)) int
stage_piece (struct s4k_fault *f, const struct s4k_io *io)
{
  const char *buf = io->buf;
  for (uint64_t k = sector_of (f, io->off),
       last = sector_of (f, io->off + io->len - 1); k <= last; k++) {
    uint64_t s, end;
    s4k_sector_range (&f->g, k, &s, &end);
    struct entry *e = fault_lookup (f, k);
    if (!e) {
      if (!(e = malloc (sizeof *e + (end - s))))
        return -ENOMEM;
      e->k = k;
      e->atomic = false;
      e->hnext = *slot (f, k);
      *slot (f, k) = e;
      e->next = NULL;
      e->prev = f->newest;
      if (f->newest)
        f->newest->next = e;
      else
        f->oldest = e;
      f->newest = e;
      f->dirty_bytes += end - s;
      f->dirty_sectors++;
    }
    memcpy (e->data, buf + (s - io->off), end - s);
  }
  return 0;
}

/* fault_stage with atomic units about: an atomic write takes in the units
 * that lie within its sectors (kept, it leaves them overwritten;
 * dropped, it takes them along: both are what a drive may do with two
 * unflushed writes), and settles those that stick out; a plain write
 * settles every unit it touches, whose bytes it may hold after an RMW
 * (torn, it would tear them). */
static __attribute__ ((noinline)) int
stage_units (struct s4k_fault *f, const struct s4k_io *io, unsigned n,
             const struct fault_span *atomic)
{
  const uint64_t first = sector_of (f, io[0].off);
  const uint64_t last = sector_of (f, io[n - 1].off + io[n - 1].len - 1);
  uint64_t aoff = atomic ? atomic->off : 0, aend = atomic ? atomic->end : 0;
  int r = 0;
  for (uint64_t k = first; r == 0 && k <= last && f->atomic_sectors; k++) {
    struct entry *e = fault_lookup (f, k);
    if (!e || !e->atomic)
      continue;
    if (atomic && e->gfirst >= first && e->glast <= last) {
      /* Taken in: its bytes go with the new unit, kept or dropped. */
      aoff = e->aoff < aoff ? e->aoff : aoff;
      aend = e->aend > aend ? e->aend : aend;
      e->atomic = false;
      f->atomic_sectors--;
    }
    else
      r = fault_destage (f, e);
  }
  for (unsigned i = 0; i < n && r == 0; i++)
    r = stage_piece (f, &io[i]);
  for (uint64_t k = first; atomic && r == 0 && k <= last; k++) {
    struct entry *e = fault_lookup (f, k);
    e->atomic = true;
    e->gfirst = first;
    e->glast = last;
    e->aoff = aoff;
    e->aend = aend;
    f->atomic_sectors++;
  }
  return r;
}

int
fault_stage (struct s4k_fault *f, const struct s4k_io *io, unsigned n,
             const struct fault_span *atomic)
{
  if (__builtin_expect (atomic || f->atomic_sectors, 0))
    return stage_units (f, io, n, atomic);
  int r = 0;
  for (unsigned i = 0; i < n && r == 0; i++)
    r = stage_piece (f, &io[i]);
  return r;
}

/* Makes a dirty sector durable. */
static int
destage_one (struct s4k_fault *f, struct entry *e)
{
  uint64_t s, end;
  s4k_sector_range (&f->g, e->k, &s, &end);
  const struct s4k_io io = { e->data, end - s, s };
  int r = f->inner->ops->write (f->inner, &io, 1, false);
  if (r == 0 && f->zones)
    fault_zone_medium (f, s, end);
  if (r == 0)
    fault_drop (f, e);
  return r;
}

/* An atomic unit goes whole: the cut cannot come between its sectors
 * (the layer's mutex is held). */
int
fault_destage (struct s4k_fault *f, struct entry *e)
{
  if (!e->atomic)
    return destage_one (f, e);
  int r = 0;
  for (uint64_t k = e->gfirst, last = e->glast; r == 0 && k <= last; k++)
    r = destage_one (f, fault_lookup (f, k));
  return r;
}

int
fault_settle_units (struct s4k_fault *f, uint64_t len, uint64_t off)
{
  int r = 0;
  for (uint64_t k = sector_of (f, off), last = sector_of (f, off + len - 1);
       r == 0 && k <= last; k++) {
    struct entry *e = fault_lookup (f, k);
    if (e && e->atomic)
      r = fault_destage (f, e);
  }
  return r;
}

/* Dirty sectors from the cache, runs of the others from the store. */
int
fault_read_cached (struct s4k_fault *f, const struct s4k_io *io, unsigned n)
{
  if (!f->dirty_sectors)
    return f->inner->ops->read (f->inner, io, n);
  for (unsigned i = 0; i < n; i++) {
    char *buf = io[i].buf;
    uint64_t run = io[i].off, st, end;           /* run: [run, st) */
    for (uint64_t k = sector_of (f, io[i].off),
         last = sector_of (f, io[i].off + io[i].len - 1); k <= last; k++) {
      s4k_sector_range (&f->g, k, &st, &end);
      struct entry *e = fault_lookup (f, k);
      if (!e)
        continue;
      if (run < st) {
        const struct s4k_io p = { buf + (run - io[i].off), st - run, run };
        int r = f->inner->ops->read (f->inner, &p, 1);
        if (r)
          return r;
      }
      memcpy (buf + (st - io[i].off), e->data, end - st);
      run = end;
    }
    if (run < io[i].off + io[i].len) {
      const struct s4k_io p = { buf + (run - io[i].off),
                                io[i].off + io[i].len - run, run };
      int r = f->inner->ops->read (f->inner, &p, 1);
      if (r)
        return r;
    }
  }
  return 0;
}

int
fault_flush_locked (struct s4k_fault *f)
{
  int r = 0;
  while (r == 0 && f->oldest)
    r = fault_destage (f, f->oldest);
  if (r == 0 && (r = f->inner->ops->flush (f->inner)) == 0 && f->zones)
    fault_zone_flushed (f);
  return r;
}
