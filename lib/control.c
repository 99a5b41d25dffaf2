/* The control socket (control=PATH): a Unix socket, mode 0600, served by
 * one thread, one client at a time.  The protocol is lines: a command,
 * then the answer's lines and a last line "ok", or one line
 * "error: WHY".  Commands:
 *   power-cut [torn=none|sector|unreadable|garbage|zero]   the report (JSON)
 *   bad add|remove LBA[-LBA][,...]
 *   bad list                                  one "FIRST-LAST" per run
 *   stats                                     the statistics JSON
 *   status                                    key=value lines
 *   mark NAME                                 a mark in the write log
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
#include <sys/un.h>
#include <unistd.h>

#include "fault.h"
#include "sect4k/wlog.h"

#define LINE_MAX_LEN 4096

struct control {
  char *path;
  int fd;
  int stop[2];                  /* a pipe: written to stop the thread */
  pthread_t thread;
  bool running;
  struct s4k_dev *dev;
};

struct control *
control_open (const char *path, char *err, size_t errlen)
{
  struct sockaddr_un sa = { .sun_family = AF_UNIX };
  struct stat st;
  if (strlen (path) >= sizeof sa.sun_path - 16) {
    snprintf (err, errlen, "control=%s: the path is too long for a Unix "
              "socket", path);
    return NULL;
  }
  if (lstat (path, &st) == 0) {
    if (!S_ISSOCK (st.st_mode)) {
      snprintf (err, errlen, "control=%s: exists and is not a socket", path);
      return NULL;
    }
    unlink (path);              /* left by an earlier run */
  }
  struct control *c = calloc (1, sizeof *c);
  if (!c || !(c->path = strdup (path))) {
    free (c);
    snprintf (err, errlen, "out of memory");
    return NULL;
  }
  c->stop[0] = c->stop[1] = -1;
  /* Bind under a temporary name, restrict it, then rename: nobody can
   * connect before the mode is 0600. */
  snprintf (sa.sun_path, sizeof sa.sun_path, "%s.%ld.tmp", path,
            (long) getpid ());
  unlink (sa.sun_path);
  const char *what = "socket";
  if ((c->fd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) == -1 ||
      (what = "bind", bind (c->fd, (struct sockaddr *) &sa, sizeof sa)) == -1 ||
      (what = "chmod", chmod (sa.sun_path, 0600)) == -1 ||
      (what = "rename", rename (sa.sun_path, path)) == -1 ||
      (what = "listen", listen (c->fd, 8)) == -1 ||
      (what = "pipe", pipe2 (c->stop, O_CLOEXEC)) == -1) {
    snprintf (err, errlen, "control=%s: %s: %s", path, what,
              s4k_strerror (errno));
    unlink (sa.sun_path);
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
  for (char *save = NULL, *w = strtok_r (line, " \t\r", &save); w;
       w = strtok_r (NULL, " \t\r", &save)) {
    if (n == 4) {
      snprintf (err, errlen, "too many words");
      return -1;
    }
    words[n++] = w;
  }
  if (n == 0) {
    snprintf (err, errlen, "empty command (known: power-cut, bad, stats, "
              "status, mark)");
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
            "stats, status, mark)", words[0]);
  return -1;
}

static bool
write_all (int fd, const char *p, size_t len)
{
  while (len) {
    ssize_t r = send (fd, p, len, MSG_NOSIGNAL);
    if (r == -1 && errno == EINTR)
      continue;
    if (r <= 0)
      return false;
    p += r;
    len -= r;
  }
  return true;
}

static bool
answer (struct control *c, int fd, char *line)
{
  char err[512] = "";
  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream (&buf, &len);
  if (!out)
    return false;
  int r = command (c, line, out, err, sizeof err);
  if (r == 0) {
    fflush (out);
    if (len && buf[len - 1] != '\n')
      fputc ('\n', out);
    fputs ("ok\n", out);
  }
  fclose (out);
  bool ok = r == 0 ? write_all (fd, buf, len)
                   : write_all (fd, "error: ", 7) &&
                     write_all (fd, err, strlen (err)) &&
                     write_all (fd, "\n", 1);
  free (buf);
  return ok;
}

/* Waits until fd has input: false once the device closes (c->stop
 * readable) or poll fails. */
static bool
wait_input (struct control *c, int fd)
{
  for (;;) {
    struct pollfd p[2] = { { fd, POLLIN, 0 }, { c->stop[0], POLLIN, 0 } };
    if (poll (p, 2, -1) == -1) {
      if (errno == EINTR)
        continue;
      return false;
    }
    return !p[1].revents;
  }
}

/* Serves one client until it goes, or the device closes. */
static void
serve (struct control *c, int fd)
{
  char line[LINE_MAX_LEN + 1];
  size_t have = 0;
  bool skipping = false;        /* the rest of a line too long */
  while (wait_input (c, fd)) {
    ssize_t r = recv (fd, line + have, LINE_MAX_LEN - have, 0);
    if (r == -1 && errno == EINTR)
      continue;
    if (r <= 0)
      return;
    have += r;
    char *nl;
    while ((nl = memchr (line, '\n', have))) {
      *nl = '\0';
      static const char too_long[] =
        "error: line too long (at most 4096 bytes)\n";
      bool ok = skipping ? write_all (fd, too_long, sizeof too_long - 1)
                         : answer (c, fd, line);
      skipping = false;
      have -= nl + 1 - line;
      memmove (line, nl + 1, have);
      if (!ok)
        return;
    }
    if (have == LINE_MAX_LEN) {
      skipping = true;
      have = 0;
    }
  }
}

static void *
control_thread (void *arg)
{
  struct control *c = arg;
  while (wait_input (c, c->fd)) {
    int fd = accept4 (c->fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd == -1)
      continue;
    serve (c, fd);
    close (fd);
  }
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
    unlink (c->path);
  }
  for (int i = 0; i < 2; i++)
    if (c->stop[i] != -1)
      close (c->stop[i]);
  free (c->path);
  free (c);
}
