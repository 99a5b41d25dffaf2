/* SPDX-License-Identifier: BSD-3-Clause */
/* Reads take the shared sector lock unless the store sets lockfree_reads
 * (issue 17): over a store that does not, a read never reaches the store
 * while a read-modify-write of the same physical sector is inside it.
 * The store here is the memory store behind a wrapper that sets neither
 * lockfree_reads nor partial_writes (as a fault layer or the file store)
 * and whose writes linger, so an unlocked read would land in the middle
 * of one. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sect4k/sect4k.h"
#include "store/store.h"
#include "tap.h"

struct wrap {
  struct s4k_store base;
  struct s4k_store *inner;
  atomic_int in_write;
  atomic_int in_read;
  atomic_uint overlaps;         /* a read and a write inside at once */
};

#define INNER(s) (((struct wrap *) (s))->inner)

static void
inside (struct wrap *w, atomic_int *mine, atomic_int *other, bool enter)
{
  if (enter) {
    atomic_fetch_add (mine, 1);
    if (atomic_load (other))
      atomic_fetch_add (&w->overlaps, 1);
  }
  else
    atomic_fetch_sub (mine, 1);
}

static int
w_read (struct s4k_store *s, const struct s4k_io *io, unsigned n)
{
  struct wrap *w = (struct wrap *) s;
  inside (w, &w->in_read, &w->in_write, true);
  int r = INNER (s)->ops->read (INNER (s), io, n);
  inside (w, &w->in_read, &w->in_write, false);
  return r;
}

static int
w_write (struct s4k_store *s, const struct s4k_io *io, unsigned n, bool fua)
{
  struct wrap *w = (struct wrap *) s;
  inside (w, &w->in_write, &w->in_read, true);
  usleep (2000);                /* widens the window, decides nothing */
  int r = INNER (s)->ops->write (INNER (s), io, n, fua);
  inside (w, &w->in_write, &w->in_read, false);
  return r;
}

static int
w_zero (struct s4k_store *s, uint64_t len, uint64_t off, bool may_trim,
        bool fua)
{
  return INNER (s)->ops->zero (INNER (s), len, off, may_trim, fua);
}

static int
w_trim (struct s4k_store *s, uint64_t len, uint64_t off, bool fua)
{
  return INNER (s)->ops->trim (INNER (s), len, off, fua);
}

static int
w_flush (struct s4k_store *s)
{
  return INNER (s)->ops->flush (INNER (s));
}

static int
w_extents (struct s4k_store *s, uint64_t len, uint64_t off,
           s4k_extent_fn *fn, void *opaque)
{
  return INNER (s)->ops->extents (INNER (s), len, off, fn, opaque);
}

static bool
w_can_fast_zero (struct s4k_store *s)
{
  return INNER (s)->ops->can_fast_zero (INNER (s));
}

static void
w_close (struct s4k_store *s)
{
  INNER (s)->ops->close (INNER (s));
  free (s);
}

static const struct s4k_store_ops wrap_ops = {
  .name = "lingering",
  .read = w_read,
  .write = w_write,
  .zero = w_zero,
  .trim = w_trim,
  .flush = w_flush,
  .extents = w_extents,
  .can_fast_zero = w_can_fast_zero,
  .close = w_close,
};

struct run {
  struct s4k_dev *dev;
  atomic_bool stop;
  unsigned reads;
};

/* Reads logical sector 0 and the whole physical sector 0, over and over. */
static void *
reader (void *arg)
{
  struct run *run = arg;
  static char buf[4096];
  while (!atomic_load (&run->stop)) {
    if (s4k_read (run->dev, buf, 512, 0) || s4k_read (run->dev, buf, 4096, 0))
      break;
    run->reads += 2;
  }
  return NULL;
}

int
main (void)
{
  struct s4k_config c;
  char err[256];
  s4k_config_init (&c);
  if (s4k_config_set (&c, "size", "1M", err, sizeof err) ||
      s4k_config_set (&c, "model", "512e", err, sizeof err) ||
      s4k_config_finish (&c, err, sizeof err))
    bail ("%s", err);
  struct wrap *w = calloc (1, sizeof *w);
  if (!w || !(w->inner = s4k_mem_store_new (&c.geom, err, sizeof err)))
    bail ("store: %s", err);
  w->base.ops = &wrap_ops;
  struct run run = { 0 };
  if (s4k_dev_new (&run.dev, &c, &w->base, err, sizeof err))
    bail ("%s", err);

  pthread_t t;
  pthread_create (&t, NULL, reader, &run);
  char data[512];
  unsigned writes = 0;
  for (unsigned i = 0; i < 200; i++) {
    memset (data, i, sizeof data);
    /* Logical sector 1 of physical sector 0: a read-modify-write. */
    if (s4k_write (run.dev, data, sizeof data, 512, 0) == 0)
      writes++;
  }
  atomic_store (&run.stop, true);
  pthread_join (t, NULL);
  ok (writes == 200, "200 read-modify-writes of physical sector 0");
  ok (atomic_load (&w->overlaps) == 0, "%u reads of the same sector meanwhile"
      " (the store does not set lockfree_reads): %u inside the store while "
      "a write was", run.reads, atomic_load (&w->overlaps));
  s4k_dev_close (run.dev);
  return done_testing ();
}
