/* SPDX-License-Identifier: BSD-3-Clause */
/* sect4k-server: what main.c sets up and loop.c serves. */
#ifndef SECT4K_SERVER_H
#define SECT4K_SERVER_H

#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "conn.h"

/* Listening sockets: one from --unix or --listen, or every socket systemd
 * passed (LISTEN_FDS). */
#define SERVER_MAX_LISTEN 16

struct server {
  struct server_cfg cfg;
  int listen_fd[SERVER_MAX_LISTEN];
  bool tcp[SERVER_MAX_LISTEN];      /* TCP_NODELAY on accepted sockets */
  unsigned nlisten;
  unsigned threads;                 /* event-loop threads, one ring each */
  unsigned max_connections;
  unsigned handshake_timeout;       /* seconds */
  unsigned idle_timeout;            /* seconds, 0: none */
  unsigned shutdown_grace;          /* seconds to flush replies on exit */
  sigset_t stop_signals;            /* serve returns on one of these */
  atomic_uint connections;          /* open now */
  struct conn_stats stats;          /* summed when serve returns */
  uint64_t accepted, refused;
};

/* Starts the event-loop threads, serves until one of stop_signals, then
 * finishes what is in flight and returns.  -1 if the loops cannot start
 * (message logged). */
int serve (struct server *s);

#endif
