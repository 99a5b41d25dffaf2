/* SPDX-License-Identifier: BSD-3-Clause */
/* Acknowledged writes survive: 512-byte writes (RMWs of 4 KiB sectors)
 * to distinct slots, each slot written once with its own pattern, so a
 * slot reads back as its pattern if its write was acknowledged, and as
 * its pattern or zeroes if the write failed.
 *
 * usage: upstream-slots write URI NSLOTS     write, flush, exit
 *        upstream-slots verify URI NSLOTS    every slot holds its pattern
 *        upstream-slots restart URI MARKER   write until MARKER appears
 *          (the test then kills and restarts the upstream), go on through
 *          the errors until writes succeed again, flush, verify */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <libnbd.h>

#define SLOT 512u
#define THREADS 4u
#define AFTER 400u              /* successes per thread after the outage */

static const char *uri, *marker;
static uint64_t nslots;
static _Atomic uint64_t next_slot;
static _Atomic unsigned acked_total;
static unsigned char *acked;    /* per slot: 1 acknowledged, 2 failed */
static _Atomic unsigned errors, other_errors;
static _Atomic bool marker_written;

static void
pattern (uint64_t slot, unsigned char *buf)
{
  uint64_t x = slot * 0x9e3779b97f4a7c15ull + 1;
  for (unsigned i = 0; i < SLOT; i += 8) {
    x ^= x >> 29; x *= 0xbf58476d1ce4e5b9ull; x ^= x >> 32;
    memcpy (buf + i, &x, 8);
  }
  memcpy (buf, &slot, 8);
}

static struct nbd_handle *
connect_or_die (void)
{
  struct nbd_handle *h = nbd_create ();
  if (!h || nbd_connect_uri (h, uri) == -1) {
    fprintf (stderr, "connect %s: %s\n", uri, nbd_get_error ());
    exit (1);
  }
  return h;
}

static void *
writer (void *arg)
{
  (void) arg;
  struct nbd_handle *h = connect_or_die ();
  unsigned char buf[SLOT];
  unsigned after = 0;
  bool failed = false;
  for (;;) {
    uint64_t s = atomic_fetch_add (&next_slot, 1);
    if (s >= nslots || (marker && failed && after >= AFTER))
      break;
    pattern (s, buf);
    if (nbd_pwrite (h, buf, SLOT, s * SLOT, 0) == 0) {
      acked[s] = 1;
      if (failed)
        after++;
      if (marker && atomic_fetch_add (&acked_total, 1) == 2000 &&
          !atomic_exchange (&marker_written, true)) {
        FILE *fp = fopen (marker, "w");
        if (fp)
          fclose (fp);
      }
    }
    else {
      int e = nbd_get_errno ();
      acked[s] = 2;
      failed = true;
      after = 0;
      atomic_fetch_add (&errors, 1);
      if (e != EIO && atomic_fetch_add (&other_errors, 1) == 0)
        fprintf (stderr, "# a write failed with %s, not EIO: %s\n",
                 strerror (e), nbd_get_error ());
      usleep (10000);           /* no thousand failures a second */
    }
  }
  nbd_shutdown (h, 0);
  nbd_close (h);
  return NULL;
}

static int
verify (struct nbd_handle *h, uint64_t n)
{
  unsigned char want[SLOT], zero[SLOT] = { 0 };
  unsigned char *data = malloc (1 << 20);
  unsigned lost = 0, torn = 0;
  for (uint64_t base = 0; base < n; base += (1 << 20) / SLOT) {
    uint64_t k = n - base < (1 << 20) / SLOT ? n - base : (1 << 20) / SLOT;
    if (nbd_pread (h, data, k * SLOT, base * SLOT, 0) == -1) {
      fprintf (stderr, "verify read: %s\n", nbd_get_error ());
      return 1;
    }
    for (uint64_t i = 0; i < k; i++) {
      uint64_t s = base + i;
      const unsigned char *got = data + i * SLOT;
      pattern (s, want);
      bool is_want = memcmp (got, want, SLOT) == 0;
      bool is_zero = memcmp (got, zero, SLOT) == 0;
      if (acked[s] == 1 && !is_want) {
        if (lost++ < 5)
          fprintf (stderr, "slot %llu: acknowledged write lost\n",
                   (unsigned long long) s);
      }
      else if (!is_want && !is_zero) {
        if (torn++ < 5)
          fprintf (stderr, "slot %llu: neither its pattern nor zeroes\n",
                   (unsigned long long) s);
      }
    }
  }
  free (data);
  printf ("verified %llu slots: %u acknowledged writes lost, %u torn\n",
          (unsigned long long) n, lost, torn);
  return lost || torn;
}

int
main (int argc, char **argv)
{
  if (argc != 4) {
    fprintf (stderr, "usage: %s write|verify|restart URI NSLOTS|MARKER\n",
             argv[0]);
    return 2;
  }
  const char *mode = argv[1];
  uri = argv[2];
  bool restart = strcmp (mode, "restart") == 0;
  if (restart) {
    marker = argv[3];
    nslots = 64u << 20 >> 9;    /* a 64 MiB device */
  }
  else
    nslots = strtoull (argv[3], NULL, 0);
  acked = calloc (nslots, 1);

  if (strcmp (mode, "verify") == 0) {
    memset (acked, 1, nslots);
    struct nbd_handle *h = connect_or_die ();
    int r = verify (h, nslots);
    nbd_close (h);
    free (acked);
    return r;
  }
  pthread_t t[THREADS];
  for (unsigned i = 0; i < THREADS; i++)
    pthread_create (&t[i], NULL, writer, NULL);
  for (unsigned i = 0; i < THREADS; i++)
    pthread_join (t[i], NULL);
  uint64_t n = atomic_load (&next_slot);
  if (n > nslots)
    n = nslots;
  struct nbd_handle *h = connect_or_die ();
  if (nbd_flush (h, 0) == -1) {
    /* A flush after the outage may report the writes it could not
     * cover; the second one must work. */
    fprintf (stderr, "# first flush: %s\n", nbd_get_error ());
    if (nbd_flush (h, 0) == -1) {
      fprintf (stderr, "flush: %s\n", nbd_get_error ());
      nbd_close (h);
      return 1;
    }
  }
  int r = 0;
  if (!restart) {
    if (errors)
      fprintf (stderr, "%u writes failed\n", errors);
    r = errors != 0;
  }
  else {
    printf ("%llu writes, %u failed (%u not with EIO)\n",
            (unsigned long long) n, errors, other_errors);
    if (!errors)
      fprintf (stderr, "no write failed: the upstream was not restarted "
               "in time\n");
    r = !errors || verify (h, n) || other_errors;
  }
  nbd_close (h);
  free (acked);
  return r;
}
