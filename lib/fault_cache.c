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
lookup (struct s4k_fault *f, uint64_t k)
{
  for (struct entry *e = *slot (f, k); e; e = e->hnext)
    if (e->k == k)
      return e;
  return NULL;
}

void
drop (struct s4k_fault *f, struct entry *e)
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
drop_range (struct s4k_fault *f, uint64_t len, uint64_t off)
{
  if (!f->dirty_sectors)
    return;
  for (uint64_t k = sector_of (f, off), last = sector_of (f, off + len - 1);
       k <= last; k++) {
    struct entry *e = lookup (f, k);
    if (e)
      drop (f, e);
  }
}

/* Puts a piece's sectors in the table as dirty. */
static int
stage_piece (struct s4k_fault *f, const struct s4k_io *io)
{
  const char *buf = io->buf;
  for (uint64_t k = sector_of (f, io->off),
       last = sector_of (f, io->off + io->len - 1); k <= last; k++) {
    uint64_t s, end;
    s4k_sector_range (&f->g, k, &s, &end);
    struct entry *e = lookup (f, k);
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

int
stage (struct s4k_fault *f, const struct s4k_io *io, unsigned n,
       bool atomic)
{
  const uint64_t first = sector_of (f, io[0].off);
  const uint64_t last = sector_of (f, io[n - 1].off + io[n - 1].len - 1);
  const uint64_t off = io[0].off, len = io[n - 1].off + io[n - 1].len - off;
  int r = settle (f, len, off);
  for (unsigned i = 0; i < n && r == 0; i++)
    r = stage_piece (f, &io[i]);
  for (uint64_t k = first; atomic && r == 0 && k <= last; k++) {
    struct entry *e = lookup (f, k);
    e->atomic = true;
    e->gfirst = first;
    e->glast = last;
    f->atomic_sectors++;
  }
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
  if (r == 0)
    drop (f, e);
  return r;
}

/* An atomic unit goes whole: the cut cannot come between its sectors
 * (the layer's mutex is held). */
int
destage (struct s4k_fault *f, struct entry *e)
{
  if (!e->atomic)
    return destage_one (f, e);
  int r = 0;
  for (uint64_t k = e->gfirst, last = e->glast; r == 0 && k <= last; k++)
    r = destage_one (f, lookup (f, k));
  return r;
}

int
settle (struct s4k_fault *f, uint64_t len, uint64_t off)
{
  if (!f->atomic_sectors)
    return 0;
  int r = 0;
  for (uint64_t k = sector_of (f, off), last = sector_of (f, off + len - 1);
       r == 0 && k <= last; k++) {
    struct entry *e = lookup (f, k);
    if (e && e->atomic)
      r = destage (f, e);
  }
  return r;
}

/* Dirty sectors from the cache, runs of the others from the store. */
int
read_cached (struct s4k_fault *f, const struct s4k_io *io, unsigned n)
{
  if (!f->dirty_sectors)
    return f->inner->ops->read (f->inner, io, n);
  for (unsigned i = 0; i < n; i++) {
    char *buf = io[i].buf;
    uint64_t run = io[i].off, st, end;           /* run: [run, st) */
    for (uint64_t k = sector_of (f, io[i].off),
         last = sector_of (f, io[i].off + io[i].len - 1); k <= last; k++) {
      s4k_sector_range (&f->g, k, &st, &end);
      struct entry *e = lookup (f, k);
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
flush_locked (struct s4k_fault *f)
{
  int r = 0;
  while (r == 0 && f->oldest)
    r = destage (f, f->oldest);
  return r ? r : f->inner->ops->flush (f->inner);
}
