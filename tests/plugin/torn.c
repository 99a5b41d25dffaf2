/* SPDX-License-Identifier: BSD-3-Clause */
/* Torn logical sectors (issue 21): connections hammer writes and zeroes
 * of whole logical sectors on a few shared physical sectors while
 * reading them back, many requests in flight on each.  Every logical
 * sector a write sends is derived from a tag (word 0), its LBA (word 1)
 * and a hash of both (the rest), so a read that returns a mix of two
 * writes, or of a write and zeroes, is caught: each logical sector read
 * must be all zero or one whole write's.
 *
 * usage: client-torn URI LOGICAL PHYSICAL ALIGNMENT SECTORS READS CONNS DEPTH
 * (SECTORS physical sectors from the first physical boundary; READS in
 * total over CONNS connections) */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <libnbd.h>

#include "tap.h"

struct run {
  const char *uri;
  uint64_t logical, physical, base, nlba;   /* the region, in LBAs */
  uint64_t reads_each;
  unsigned conns, depth;
  pthread_barrier_t barrier;
  uint64_t reads, sectors, bad, errors;     /* atomics */
};

struct conn {
  struct run *run;
  struct nbd_handle *h;
  unsigned id;
  uint64_t rng, tag, issued_reads, inflight;
};

struct pending {
  struct conn *c;
  char *buf;
  uint64_t lba, n;              /* logical sectors */
  bool read;
};

static uint64_t
mix64 (uint64_t x)
{
  x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27; x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static uint64_t
rnd (struct conn *c)
{
  return mix64 (c->rng += 0x9e3779b97f4a7c15ull);
}

/* Word i (from 2) of the sector tag writes at lba. */
static uint64_t
word (uint64_t tag, uint64_t lba, uint64_t i)
{
  return mix64 (tag * 0xd6e8feb86659fd93ull + lba * 0x9e3779b97f4a7c15ull + i);
}

static void
fill (char *p, uint64_t L, uint64_t tag, uint64_t lba)
{
  uint64_t *w = (uint64_t *) p;
  w[0] = tag;
  w[1] = lba;
  for (uint64_t i = 2; i < L / 8; i++)
    w[i] = word (tag, lba, i);
}

/* 0 if the sector at p (LBA lba) is all zero or one whole write's; else
 * 1, after saying what it holds (for the first few). */
static int
check (const struct run *r, const char *p, uint64_t lba)
{
  const uint64_t *w = (const uint64_t *) p;
  const uint64_t n = r->logical / 8;
  uint64_t i;
  if (w[0] == 0) {
    for (i = 1; i < n && !w[i]; i++)
      ;
    if (i == n)
      return 0;
  }
  else if (w[1] == lba) {
    for (i = 2; i < n && w[i] == word (w[0], lba, i); i++)
      ;
    if (i == n)
      return 0;
  }
  else
    i = 1;
  if (__atomic_load_n (&r->bad, __ATOMIC_RELAXED) < 5)
    diag ("LBA %" PRIu64 ": torn: tag %#" PRIx64 " (lba word %" PRIu64
          "), word %" PRIu64 " of %" PRIu64 " does not match",
          lba, w[0], w[1], i, n);
  return 1;
}

static int
completed (void *opaque, int *error)
{
  struct pending *p = opaque;
  struct run *r = p->c->run;
  if (*error) {
    if (__atomic_add_fetch (&r->errors, 1, __ATOMIC_RELAXED) == 1)
      diag ("request failed: %s", strerror (*error));
  }
  else if (p->read) {
    uint64_t bad = 0;
    for (uint64_t i = 0; i < p->n; i++)
      bad += check (r, p->buf + i * r->logical, p->lba + i);
    __atomic_add_fetch (&r->bad, bad, __ATOMIC_RELAXED);
    __atomic_add_fetch (&r->sectors, p->n, __ATOMIC_RELAXED);
    __atomic_add_fetch (&r->reads, 1, __ATOMIC_RELAXED);
  }
  p->c->inflight--;
  free (p->buf);
  free (p);
  return 1;
}

/* One request: a read (60 %), a write (30 %) or a zero (10 %) of 1 to
 * 2P/L + 1 logical sectors at a random LBA of the region. */
static int
issue (struct conn *c)
{
  struct run *r = c->run;
  const uint64_t L = r->logical, spp = r->physical / L;
  uint64_t x = rnd (c);
  uint64_t n = 1 + (x >> 8) % (2 * spp + 1);
  if (n > r->nlba)
    n = r->nlba;
  uint64_t lba = (x >> 24) % (r->nlba - n + 1);
  unsigned kind = x % 10;      /* 0-5 read, 6-8 write, 9 zero */
  struct pending *p = calloc (1, sizeof *p);
  if (!p)
    return -1;
  p->c = c;
  p->lba = lba;
  p->n = n;
  p->read = kind < 6;
  nbd_completion_callback cb = { .callback = completed, .user_data = p };
  uint64_t off = r->base + lba * L;
  int64_t cookie;
  if (kind == 9)
    cookie = nbd_aio_zero (c->h, n * L, off, cb, 0);
  else {
    if (!(p->buf = malloc (n * L))) {
      free (p);
      return -1;
    }
    if (p->read) {
      c->issued_reads++;
      cookie = nbd_aio_pread (c->h, p->buf, n * L, off, cb, 0);
    }
    else {
      c->tag++;
      for (uint64_t i = 0; i < n; i++)
        fill (p->buf + i * L, L, c->tag, lba + i);
      cookie = nbd_aio_pwrite (c->h, p->buf, n * L, off, cb, 0);
    }
  }
  if (cookie == -1) {
    diag ("conn %u: %s", c->id, nbd_get_error ());
    free (p->buf);
    free (p);
    return -1;
  }
  c->inflight++;
  return 0;
}

static void *
conn_main (void *opaque)
{
  struct conn *c = opaque;
  struct run *r = c->run;
  pthread_barrier_wait (&r->barrier);
  while (c->issued_reads < r->reads_each || c->inflight) {
    while (c->issued_reads < r->reads_each && c->inflight < r->depth)
      if (issue (c) == -1) {
        __atomic_add_fetch (&r->errors, 1, __ATOMIC_RELAXED);
        return NULL;
      }
    if (nbd_poll (c->h, -1) == -1) {
      diag ("conn %u: poll: %s", c->id, nbd_get_error ());
      __atomic_add_fetch (&r->errors, 1, __ATOMIC_RELAXED);
      return NULL;
    }
  }
  return NULL;
}

int
main (int argc, char **argv)
{
  if (argc != 9)
    bail ("usage: client-torn URI LOGICAL PHYSICAL ALIGNMENT SECTORS READS "
          "CONNS DEPTH");
  struct run r = { .uri = argv[1] };
  r.logical = strtoull (argv[2], NULL, 0);
  r.physical = strtoull (argv[3], NULL, 0);
  r.base = strtoull (argv[4], NULL, 0);   /* the first physical boundary */
  r.nlba = strtoull (argv[5], NULL, 0) * r.physical / r.logical;
  uint64_t reads = strtoull (argv[6], NULL, 0);
  r.conns = atoi (argv[7]);
  r.depth = atoi (argv[8]);
  r.reads_each = (reads + r.conns - 1) / r.conns;
  struct conn *cs = calloc (r.conns, sizeof *cs);
  pthread_t *t = calloc (r.conns, sizeof *t);
  pthread_barrier_init (&r.barrier, NULL, r.conns);
  for (unsigned i = 0; i < r.conns; i++) {
    cs[i] = (struct conn) { .run = &r, .id = i,
                            .rng = 0x1234567ull * (i + 1),
                            .tag = (uint64_t) (i + 1) << 40 };
    if (!(cs[i].h = nbd_create ()) || nbd_connect_uri (cs[i].h, r.uri) == -1)
      bail ("connect %s: %s", r.uri, nbd_get_error ());
  }
  /* Zeroes to start from. */
  if (nbd_zero (cs[0].h, r.nlba * r.logical, r.base, 0) == -1)
    bail ("zero: %s", nbd_get_error ());
  for (unsigned i = 0; i < r.conns; i++)
    pthread_create (&t[i], NULL, conn_main, &cs[i]);
  for (unsigned i = 0; i < r.conns; i++)
    pthread_join (t[i], NULL);
  ok (r.errors == 0, "no request failed (%" PRIu64 " failed)", r.errors);
  ok (r.bad == 0, "%" PRIu64 " reads of %" PRIu64 " logical sectors of %"
      PRIu64 " bytes over %u connections x QD%u: every sector whole "
      "(%" PRIu64 " torn)", r.reads, r.sectors, r.logical, r.conns, r.depth,
      r.bad);
  for (unsigned i = 0; i < r.conns; i++) {
    nbd_shutdown (cs[i].h, 0);
    nbd_close (cs[i].h);
  }
  free (cs);
  free (t);
  return tap_failed != 0;
}
