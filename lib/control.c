/* SPDX-License-Identifier: BSD-3-Clause */
/* The control socket (control=PATH): a Unix socket, mode 0600, served by
 * one thread, every client at once (see control_thread).  The protocol
 * is lines of printable text: a command, then the answer's lines and a
 * last line "ok", or one line "error: WHY".  Commands:
 *   power-cut [torn=none|sector|unreadable|garbage|zero]   the report (JSON)
 *   bad add|remove LBA[-LBA][,...]
 *   bad list                                  one "FIRST-LAST" per run
 *   stats                                     the statistics JSON
 *   status                                    key=value lines
 *   mark NAME                                 a mark in the write log
 *   zone offline|read-only|repair LBA         a zone's condition (zoned=)
 *   zone list                                 one line per zone
 * scripts/sect4k-ctl speaks it. */
#define _GNU_SOURCE             /* pipe2, accept4 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fault/fault.h"
#include "sect4k/unixsock.h"
#include "sect4k/wlog.h"
#include "sect4k/zone.h"

#define LINE_MAX_LEN 4096
#define MAX_CLIENTS 64
#define EVICT_IDLE_MS 1000

struct client {
  int fd;
  bool skipping;                /* the rest of a line too long */
  size_t have;                  /* bytes in line */
  char *out;                    /* the answer being sent, or NULL */
  size_t outlen, outoff;
  int64_t active;               /* when it last sent or received (ms) */
  char line[LINE_MAX_LEN];
};

struct control {
  char *path;
  struct stat st;               /* our socket at path */
  int fd;
  int stop[2];                  /* a pipe: written to stop the thread */
  pthread_t thread;
  bool running;
  struct s4k_dev *dev;
  struct client *cl[MAX_CLIENTS];
  unsigned n;
};

/* The socket is bound here, before the device is used, so that a live
 * path or a bad one fails at start-up. */
struct control *
control_open (const char *path, char *err, size_t errlen)
{
  char why[256];
  int r = s4k_unix_probe (path, why, sizeof why);
  if (r == -1) {
    snprintf (err, errlen, "control=%s: %s", path, why);
    return NULL;
  }
  if (r == 1)
    fprintf (stderr, "sect4k: control=%s: replacing a stale socket (no "
             "server answers on it)\n", path);
  struct control *c = calloc (1, sizeof *c);
  if (!c || !(c->path = strdup (path))) {
    free (c);
    snprintf (err, errlen, "out of memory");
    return NULL;
  }
  c->stop[0] = c->stop[1] = -1;
  c->fd = s4k_unix_listen (path, 0600, &c->st, why, sizeof why);
  const char *what = "";
  if (c->fd == -1 ||
      (what = "fcntl: ", fcntl (c->fd, F_SETFL, O_NONBLOCK)) == -1 ||
      (what = "pipe: ", pipe2 (c->stop, O_CLOEXEC)) == -1) {
    snprintf (err, errlen, "control=%s: %s%s", path, what,
              *what ? s4k_strerror (errno) : why);
    control_close (c);
    return NULL;
  }
  return c;
}

/* ---- commands ---------------------------------------------------------- */

struct bad_ctx {
  struct s4k_dev *d;
  bool add;
  char *err;
  size_t errlen;
};

static int
bad_one (void *opaque, uint64_t first, uint64_t last)
{
  struct bad_ctx *b = opaque;
  return b->add ? s4k_dev_bad_add (b->d, first, last, b->err, b->errlen)
                : s4k_dev_bad_remove (b->d, first, last, b->err, b->errlen);
}

/* Runs one command line; writes the answer's lines to out.  Returns 0,
 * or -1 with err filled. */
static int
command (struct control *c, char *line, FILE *out, char *err, size_t errlen)
{
  char *words[4];
  unsigned n = 0;
  for (char *save = NULL, *w = strtok_r (line, " ", &save); w;
       w = strtok_r (NULL, " ", &save)) {
    if (n == 4) {
      snprintf (err, errlen, "too many words");
      return -1;
    }
    words[n++] = w;
  }
  if (n == 0) {
    snprintf (err, errlen, "empty command (known: power-cut, bad, zone, "
              "stats, status, mark)");
    return -1;
  }
  if (strcmp (words[0], "power-cut") == 0) {
    int torn = -1;
    if (n > 2 || (n == 2 && strncmp (words[1], "torn=", 5) != 0)) {
      snprintf (err, errlen, "usage: power-cut [torn=none|sector|unreadable|garbage|zero]");
      return -1;
    }
    if (n == 2) {
      struct s4k_fault_config fc = { 0 };
      if (s4k_fault_config_set (&fc, "torn", words[1] + 5, err, errlen))
        return -1;
      torn = fc.torn;
    }
    char *report;
    int r = s4k_dev_power_cut (c->dev, torn, &report);
    if (report)
      fputs (report, out);
    free (report);
    if (r) {
      snprintf (err, errlen, "power-cut: %s", s4k_strerror (-r));
      return -1;
    }
    return 0;
  }
  if (strcmp (words[0], "bad") == 0) {
    if (n == 2 && strcmp (words[1], "list") == 0)
      return s4k_dev_bad_list (c->dev, out);
    if (n != 3 || (strcmp (words[1], "add") && strcmp (words[1], "remove"))) {
      snprintf (err, errlen, "usage: bad add|remove LBA[-LBA][,...] or "
                "bad list");
      return -1;
    }
    struct bad_ctx b = { c->dev, words[1][0] == 'a', err, errlen };
    /* Checked whole first, so a bad list changes nothing. */
    if (s4k_parse_lba_list (words[2], NULL, NULL) == -1) {
      snprintf (err, errlen, "bad %s %s: must be LBA[-LBA][,...] (decimal "
                "LBAs, FIRST <= LAST)", words[1], words[2]);
      return -1;
    }
    return s4k_parse_lba_list (words[2], bad_one, &b) ? -1 : 0;
  }
  if (n == 1 && strcmp (words[0], "stats") == 0)
    return s4k_stats_write_json (c->dev, out) ? -1 : 0;
  if (n == 1 && strcmp (words[0], "status") == 0) {
    s4k_dev_fault_status (c->dev, out);
    return 0;
  }
  if (strcmp (words[0], "zone") == 0) {
    if (n == 2 && strcmp (words[1], "list") == 0)
      return s4k_dev_zone_list (c->dev, out, err, errlen);
    const enum s4k_zone_cond cond =
      n != 3 ? 0
      : strcmp (words[1], "offline") == 0 ? S4K_ZC_OFFLINE
      : strcmp (words[1], "read-only") == 0 ? S4K_ZC_READ_ONLY
      : strcmp (words[1], "repair") == 0 ? S4K_ZC_EMPTY : 0;
    if (!cond) {
      snprintf (err, errlen, "usage: zone offline|read-only|repair LBA or "
                "zone list");
      return -1;
    }
    errno = 0;
    const uint64_t lba = strtoull (words[2], NULL, 10);
    if (strspn (words[2], "0123456789") != strlen (words[2]) || errno) {
      snprintf (err, errlen, "zone %s %s: must be the first LBA of a zone "
                "(decimal)", words[1], words[2]);
      return -1;
    }
    return s4k_dev_zone_fault (c->dev, lba, cond, err, errlen);
  }
  if (strcmp (words[0], "mark") == 0) {
    if (n != 2) {
      snprintf (err, errlen, "usage: mark NAME (one word)");
      return -1;
    }
    int r = s4k_dev_wlog_mark (c->dev, words[1]);
    if (r == -ENOTSUP)
      snprintf (err, errlen, "mark: no write log (give write-log=PATH)");
    else if (r == -EINVAL)
      snprintf (err, errlen, "mark %.40s: a name of 1 to %u bytes",
                words[1], S4K_WLOG_MARK_MAX);
    else if (r)
      snprintf (err, errlen, "mark %s: the write log failed: %s", words[1],
                s4k_strerror (-r));
    return r ? -1 : 0;
  }
  snprintf (err, errlen, "unknown command '%s' (known: power-cut, bad, "
            "zone, stats, status, mark)", words[0]);
  return -1;
}

/* ---- serving ----------------------------------------------------------- */

static int64_t
now_ms (void)
{
  struct timespec t;
  clock_gettime (CLOCK_MONOTONIC, &t);
  return (int64_t) t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Refuses a line with a control byte (a NUL would cut it short, and
 * what follows would be silently dropped), else runs it.  Returns the
 * answer to send (malloc'd), or NULL if out of memory. */
static char *
answer (struct control *c, char *line, size_t len, size_t *alen)
{
  char err[512] = "";
  char *buf = NULL;
  size_t blen = 0;
  if (len && line[len - 1] == '\r')
    line[--len] = '\0';
  int r = 0;
  for (size_t i = 0; i < len && r == 0; i++)
    if ((unsigned char) line[i] < 0x20 || line[i] == 0x7f) {
      snprintf (err, sizeof err, "control byte 0x%02x at byte %zu: a "
                "command is printable text", (unsigned char) line[i], i);
      r = -1;
    }
  FILE *out = open_memstream (&buf, &blen);
  if (!out)
    return NULL;
  if (r == 0)
    r = command (c, line, out, err, sizeof err);
  if (r == 0) {
    fflush (out);
    if (blen && buf[blen - 1] != '\n')
      fputc ('\n', out);
    fputs ("ok\n", out);
  }
  if (fclose (out) || r) {      /* an error: its line alone */
    free (buf);
    buf = NULL;
    if (r && (blen = asprintf (&buf, "error: %s\n", err)) == (size_t) -1)
      buf = NULL;
  }
  *alen = blen;
  return buf;
}

/* Sends what it can of the client's answer, then answers its next whole
 * line, until a line is missing or the socket is full.  Lines are
 * answered one at a time, so a client that does not read holds one
 * answer, not many.  False once the client is gone. */
static bool
progress (struct control *c, struct client *k)
{
  for (;;) {
    if (k->outoff < k->outlen) {
      ssize_t r = send (k->fd, k->out + k->outoff, k->outlen - k->outoff,
                        MSG_NOSIGNAL | MSG_DONTWAIT);
      if (r == -1 && (errno == EAGAIN || errno == EINTR))
        return true;
      if (r <= 0)
        return false;
      k->outoff += r;
      k->active = now_ms ();
      continue;
    }
    free (k->out);
    k->out = NULL;
    k->outlen = k->outoff = 0;
    char *nl = memchr (k->line, '\n', k->have);
    if (!nl)
      return true;
    static const char too_long[] =
      "error: line too long (at most 4096 bytes)\n";
    if (k->skipping) {
      k->out = strdup (too_long);
      k->outlen = sizeof too_long - 1;
    }
    else {
      *nl = '\0';
      k->out = answer (c, k->line, nl - k->line, &k->outlen);
    }
    if (!k->out)
      return false;
    k->skipping = false;
    k->have -= nl + 1 - k->line;
    memmove (k->line, nl + 1, k->have);
  }
}

static bool
receive (struct client *k)
{
  ssize_t r = recv (k->fd, k->line + k->have, LINE_MAX_LEN - k->have,
                    MSG_DONTWAIT);
  if (r == -1)
    return errno == EAGAIN || errno == EINTR;
  if (r == 0)
    return false;
  k->have += r;
  k->active = now_ms ();
  if (k->have == LINE_MAX_LEN && !memchr (k->line, '\n', k->have)) {
    k->skipping = true;         /* answered at its end */
    k->have = 0;
  }
  return true;
}

static void
drop (struct control *c, unsigned i)
{
  close (c->cl[i]->fd);
  free (c->cl[i]->out);
  free (c->cl[i]);
  c->cl[i] = c->cl[--c->n];
}

/* The client idle longest (sent and received nothing), or -1. */
static int
idlest (const struct control *c)
{
  int best = -1;
  for (unsigned i = 0; i < c->n; i++)
    if (best == -1 || c->cl[i]->active < c->cl[best]->active)
      best = i;
  return best;
}

/* One thread serves every client, each at its own pace: clients never
 * wait for each other's lines, and up to MAX_CLIENTS are served at
 * once.  When that many are connected, a new client takes the place of
 * the one idle longest, once that one has been idle EVICT_IDLE_MS: so
 * idle clients cannot lock others out, and a burst of clients each
 * sending its command at once is never cut short. */
static void *
control_thread (void *arg)
{
  struct control *c = arg;
  struct pollfd p[2 + MAX_CLIENTS];
  for (;;) {
    int timeout = -1;
    bool take = c->n < MAX_CLIENTS;
    if (!take) {
      int64_t idle = now_ms () - c->cl[idlest (c)]->active;
      take = idle >= EVICT_IDLE_MS;
      timeout = take ? -1 : (int) (EVICT_IDLE_MS - idle);
    }
    p[0] = (struct pollfd) { c->stop[0], POLLIN, 0 };
    p[1] = (struct pollfd) { take ? c->fd : -1, POLLIN, 0 };
    for (unsigned i = 0; i < c->n; i++)
      p[2 + i] = (struct pollfd) {
        c->cl[i]->fd, c->cl[i]->outoff < c->cl[i]->outlen ? POLLOUT : POLLIN,
        0 };
    const unsigned n = c->n;
    if (poll (p, 2 + n, timeout) == -1) {
      if (errno == EINTR)
        continue;
      break;
    }
    if (p[0].revents)
      break;
    /* Backwards: drop moves the last client into the hole. */
    for (unsigned i = n; i-- > 0;) {
      struct client *k = c->cl[i];
      if (!p[2 + i].revents)
        continue;
      /* Polled for input unless an answer was waiting to go out. */
      bool alive = k->outoff < k->outlen || receive (k);
      if (!alive || !progress (c, k))
        drop (c, i);
    }
    if (p[1].revents) {
      if (c->n == MAX_CLIENTS) {
        int j = idlest (c);     /* it may have spoken meanwhile */
        if (now_ms () - c->cl[j]->active < EVICT_IDLE_MS)
          continue;
        drop (c, j);
      }
      struct client *k = malloc (sizeof *k);
      int fd = k ? accept4 (c->fd, NULL, NULL, SOCK_CLOEXEC) : -1;
      if (fd == -1) {
        free (k);
        continue;
      }
      *k = (struct client) { .fd = fd, .active = now_ms () };
      c->cl[c->n++] = k;
    }
  }
  while (c->n)
    drop (c, c->n - 1);
  return NULL;
}

void
control_start (struct control *c, struct s4k_dev *d)
{
  c->dev = d;
  if (!c->running)
    c->running = pthread_create (&c->thread, NULL, control_thread, c) == 0;
}

void
control_close (struct control *c)
{
  if (!c)
    return;
  if (c->running) {
    if (write (c->stop[1], "x", 1) != 1)
      abort ();
    pthread_join (c->thread, NULL);
  }
  if (c->fd != -1) {
    close (c->fd);
    s4k_unix_unlink (c->path, &c->st);
  }
  for (int i = 0; i < 2; i++)
    if (c->stop[i] != -1)
      close (c->stop[i]);
  free (c->path);
  free (c);
}
