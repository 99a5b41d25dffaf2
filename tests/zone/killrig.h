/* SPDX-License-Identifier: BSD-3-Clause */
/* What the zone persistence tests (persist.c, durable.c) share: devices
 * on files in dir, the seeded data pattern, and a child process that runs
 * steps on a device and is SIGKILLed after a number of acknowledgements.
 * After tap.h and devrig.h; the test defines dir and its own steps. */
#ifndef S4K_ZONE_KILLRIG_H
#define S4K_ZONE_KILLRIG_H

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tap.h"

static char dir[256];

/* "KEYS file=DIR/NAME" */
TAP_UNUSED static const char *
keys (const char *k, const char *name)
{
  static char buf[4][1300];
  static unsigned n;
  char *b = buf[n++ % 4];
  snprintf (b, sizeof buf[0], "%s file=%s/%s", k, dir, name);
  return b;
}

TAP_UNUSED static int
try_open (struct s4k_dev **d, const char *k, char *err, size_t errlen)
{
  struct s4k_config c;
  if (configure (&c, k, err, errlen))
    return -1;
  return s4k_dev_open (d, &c, err, errlen) ? -1 : 0;
}

TAP_UNUSED static uint64_t
rng (uint64_t *s)
{
  return xorshift64 (s);
}

/* The 8 bytes at each 8-byte slot of LBA lba in reset epoch e. */
TAP_UNUSED static uint64_t
pattern (uint64_t lba, uint32_t e)
{
  return (lba * 0x9E3779B97F4A7C15ull) ^ ((uint64_t) e << 48) ^ 0x1234;
}

TAP_UNUSED static void
fill (char *buf, uint64_t lba, uint64_t n, uint32_t e)
{
  for (uint64_t b = 0; b < n; b++)
    for (int i = 0; i < 512; i += 8) {
      uint64_t v = pattern (lba + b, e);
      memcpy (buf + b * 512 + i, &v, 8);
    }
}

/* What the child says after each step: its number and result. */
struct ack {
  uint64_t step;
  int32_t result;
};

/* Runs child (seed, keys k, the pipe to write acks to) in a process,
 * SIGKILLs it once kill_after steps were acknowledged (in the middle of
 * the next ones), and returns the acks read, *n of them (malloc'd). */
TAP_UNUSED static struct ack *
acks_until_kill (void (*child) (uint64_t, const char *, int), uint64_t seed,
                 const char *k, uint64_t kill_after, size_t *n_out)
{
  int p[2];
  if (pipe (p))
    bail ("pipe");
  pid_t pid = fork ();
  if (pid == 0) {
    close (p[0]);
    child (seed, k, p[1]);
  }
  close (p[1]);
  size_t cap = 1024, n = 0;
  struct ack *acks = malloc (cap * sizeof *acks);
  bool killed = false;
  for (;;) {
    if (n == cap)
      acks = realloc (acks, (cap *= 2) * sizeof *acks);
    ssize_t r = read (p[0], &acks[n], sizeof *acks);
    if (r == 0)
      break;
    if (r != sizeof *acks)
      bail ("ack read");
    n++;
    if (!killed && n == kill_after) {
      kill (pid, SIGKILL);
      killed = true;
    }
  }
  close (p[0]);
  int status;
  waitpid (pid, &status, 0);
  if (!WIFSIGNALED (status) || WTERMSIG (status) != SIGKILL)
    bail ("child: status %d", status);
  *n_out = n;
  return acks;
}

#endif
