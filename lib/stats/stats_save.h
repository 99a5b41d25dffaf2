/* SPDX-License-Identifier: BSD-3-Clause */
/* Saving a device's statistics: statsfile= every stats-interval= seconds
 * from a thread of its own, statsfile= and the stats= summary when the
 * device closes.  The device owns the saver and the saver only uses the
 * device's public API, so stats.c (the counting) depends on neither. */
#ifndef S4K_STATS_SAVE_H
#define S4K_STATS_SAVE_H

#include <pthread.h>

#include "sect4k/sect4k.h"

struct stats_saver {
  const struct s4k_dev *dev;
  const char *path;             /* statsfile=, or NULL */
  uint32_t interval;            /* seconds; 0: at close only */
  bool summary;                 /* stats= */
  pthread_t thread;
  bool running, stopping;
  pthread_mutex_t mu;
  pthread_cond_t cv;
};

void stats_saver_init (struct stats_saver *sv, const struct s4k_dev *d,
                       const struct s4k_config *c);
/* Starts the periodic thread if stats-interval= asks for one. */
void stats_saver_start (struct stats_saver *sv);
/* Stops the thread, writes the final figures and the summary. */
void stats_saver_close (struct stats_saver *sv);

#endif
