/* SPDX-License-Identifier: BSD-3-Clause */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "stats_save.h"

int
s4k_stats_save (const struct s4k_dev *d, const char *path)
{
  size_t n = strlen (path) + 32;
  char *tmp = malloc (n);
  if (!tmp)
    return -ENOMEM;
  snprintf (tmp, n, "%s.tmp.%ld", path, (long) getpid ());
  FILE *fp = fopen (tmp, "w");
  int r = fp ? 0 : -errno;
  if (fp) {
    r = s4k_stats_write_json (d, fp);
    if (fclose (fp) != 0 && r == 0)
      r = -errno;
    if (r == 0 && rename (tmp, path) != 0)
      r = -errno;
    if (r)
      unlink (tmp);
  }
  if (r)
    fprintf (stderr, "sect4k: statsfile=%s: %s\n", path, s4k_strerror (-r));
  free (tmp);
  return r;
}

static void *
saver (void *arg)
{
  struct stats_saver *sv = arg;
  pthread_mutex_lock (&sv->mu);
  while (!sv->stopping) {
    struct timespec when;
    clock_gettime (CLOCK_REALTIME, &when);
    when.tv_sec += sv->interval;
    if (pthread_cond_timedwait (&sv->cv, &sv->mu, &when) == ETIMEDOUT &&
        !sv->stopping) {
      pthread_mutex_unlock (&sv->mu);
      s4k_stats_save (sv->dev, sv->path);
      pthread_mutex_lock (&sv->mu);
    }
  }
  pthread_mutex_unlock (&sv->mu);
  return NULL;
}

void
stats_saver_init (struct stats_saver *sv, const struct s4k_dev *d,
                  const struct s4k_config *c)
{
  memset (sv, 0, sizeof *sv);
  sv->dev = d;
  sv->path = c->statsfile;
  sv->interval = c->stats_interval;
  sv->summary = c->stats_summary;
  pthread_mutex_init (&sv->mu, NULL);
  pthread_cond_init (&sv->cv, NULL);
}

void
stats_saver_start (struct stats_saver *sv)
{
  if (sv->path && sv->interval)
    sv->running = pthread_create (&sv->thread, NULL, saver, sv) == 0;
}

void
stats_saver_close (struct stats_saver *sv)
{
  if (sv->running) {
    pthread_mutex_lock (&sv->mu);
    sv->stopping = true;
    pthread_cond_signal (&sv->cv);
    pthread_mutex_unlock (&sv->mu);
    pthread_join (sv->thread, NULL);
    sv->running = false;
  }
  if (sv->path)
    s4k_stats_save (sv->dev, sv->path);
  if (sv->summary)
    s4k_stats_print (sv->dev, stderr);
  pthread_mutex_destroy (&sv->mu);
  pthread_cond_destroy (&sv->cv);
}
