/* SPDX-License-Identifier: BSD-3-Clause */
/* Listening on a Unix socket path without taking it from a live server:
 * sect4k-server's --unix and the control socket (control=). */
#ifndef SECT4K_UNIXSOCK_H
#define SECT4K_UNIXSOCK_H

#include <stddef.h>
#include <sys/stat.h>

/* Probes path before anything is opened: 0 if nothing is there, 1 if a
 * stale socket is (no server answers: s4k_unix_listen replaces it), -1
 * with err filled ("a server is already listening there", "exists and
 * is not a socket", ...) if it must not be taken. */
int s4k_unix_probe (const char *path, char *err, size_t errlen);

/* Listens on path: bound under a temporary name, given mode (if not 0),
 * then renamed over path, so that a client never finds the path without
 * a listener or with a wider mode.  *st identifies the socket for
 * s4k_unix_unlink.  Returns the fd, or -1 with err filled. */
int s4k_unix_listen (const char *path, mode_t mode, struct stat *st,
                     char *err, size_t errlen);

/* Removes path if it is still the socket st names (another server may
 * have replaced it since). */
void s4k_unix_unlink (const char *path, const struct stat *st);

#endif
