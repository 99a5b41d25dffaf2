/* SPDX-License-Identifier: BSD-3-Clause */
/* sect4k-server as a fixture, with nbdkit's conventions (nbdkit(1),
 * nbdkit-captive(1), nbdkit-service(1)): --run, -U -, --pidfile,
 * --exit-with-parent and systemd socket activation. */
#ifndef SECT4K_SERVER_CAPTIVE_H
#define SECT4K_SERVER_CAPTIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* --exit-with-parent: the kernel sends SIGTERM (a clean stop) when the
 * parent exits.  ppid is getppid () as main started: if it has changed
 * by the time the request is made, the parent is already gone and this
 * returns -1 (message printed). */
int captive_exit_with_parent (pid_t ppid);

/* LISTEN_PID and LISTEN_FDS (systemd socket activation): 0 if they are
 * not set or not for this process (said, and ignored, as nbdkit does);
 * N, with fds[0..N) = 3..3+N (made close-on-exec, the variables removed)
 * for N listening sockets, N <= max, as nbdkit serves them all; -1 with a
 * message for anything else. */
int captive_socket_activation (int *fds, unsigned max);

/* -U -: a new directory $TMPDIR/sect4k-XXXXXX (TMPDIR default /tmp);
 * path is DIR/socket.  -1 with a message. */
int captive_private_dir (char *path, size_t len);
/* Removes the directory of path made by captive_private_dir (its socket
 * is removed first if it is still there). */
void captive_private_remove (const char *path);

/* --pidfile: FILE holds the pid and a newline, made whole at once (a
 * temporary file renamed over it).  -1 with a message. */
int captive_write_pidfile (const char *file);

/* The --run command's environment: NAME=VALUE strings, added to a copy
 * of environ by captive_run (replacing variables of the same name). */
struct captive_env {
  char **v;
  size_t n;
};
/* Adds NAME=VALUE.  -1 when out of memory. */
int captive_env_add (struct captive_env *e, const char *name,
                     const char *value);
/* $uri, $exportname, $port or $unixsocket (the other one empty) and
 * $tls (as nbdkit: 1 for --tls=on, 2 for require, unset for off) for the
 * socket listen_fd, at unix_path if not NULL (a renamed socket's own
 * name is the one it was bound to).  -1 with a message. */
int captive_env_nbd (struct captive_env *e, int listen_fd,
                     const char *unix_path, const char *exportname, int tls);
/* Frees the strings. */
void captive_env_free (struct captive_env *e);

/* Runs CMD with /bin/sh -c, the environment plus e, the signal mask
 * emptied and SIGPIPE and SIGCHLD at their defaults, in a process group
 * of its own (given the terminal if the server has it).  Its pid, or -1
 * with a message. */
pid_t captive_run (const char *cmd, const struct captive_env *e);
/* Waits for the command; if it is still running its process group is
 * sent SIGTERM, and SIGKILL after grace seconds; what is left in the
 * group after it exited gets SIGTERM.  Its status as an exit status:
 * the command's own, 128+N if signal N killed it. */
int captive_finish (pid_t pid, unsigned grace);

#endif
