/* SPDX-License-Identifier: BSD-3-Clause */
/* Unix socket paths (include/sect4k/unixsock.h): a live server's path is
 * never taken over (its clients would silently come to us), a stale one
 * is replaced, and at exit only our own socket is removed. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "sect4k/sect4k.h"
#include "sect4k/unixsock.h"

int
s4k_unix_probe (const char *path, char *err, size_t errlen)
{
  struct sockaddr_un sun = { .sun_family = AF_UNIX };
  struct stat st;
  if (lstat (path, &st) == -1)
    return 0;
  if (!S_ISSOCK (st.st_mode)) {
    snprintf (err, errlen, "exists and is not a socket");
    return -1;
  }
  if (strlen (path) >= sizeof sun.sun_path)
    return 0;                   /* s4k_unix_listen says what is wrong */
  strcpy (sun.sun_path, path);
  /* Non-blocking: a full backlog (EAGAIN) is a live server too. */
  int probe = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int r = probe == -1 ? -1 : connect (probe, (struct sockaddr *) &sun,
                                      sizeof sun);
  int e = errno;
  if (probe != -1)
    close (probe);
  if (r == 0 || e == EAGAIN) {
    snprintf (err, errlen, "a server is already listening there");
    return -1;
  }
  if (e == ECONNREFUSED)
    return 1;
  if (e == ENOENT)
    return 0;                   /* gone meanwhile */
  snprintf (err, errlen, "%s", s4k_strerror (e));
  return -1;
}

int
s4k_unix_listen (const char *path, mode_t mode, struct stat *st,
                 char *err, size_t errlen)
{
  struct sockaddr_un sun = { .sun_family = AF_UNIX };
  if (snprintf (sun.sun_path, sizeof sun.sun_path, "%s.%d.tmp", path,
                (int) getpid ()) >= (int) sizeof sun.sun_path) {
    snprintf (err, errlen, "path too long for a Unix socket (at most %zu "
              "bytes)", sizeof sun.sun_path - 16);
    return -1;
  }
  struct stat old;
  if (lstat (path, &old) == 0 && !S_ISSOCK (old.st_mode)) {
    snprintf (err, errlen, "exists and is not a socket");
    return -1;
  }
  unlink (sun.sun_path);
  const char *what = "socket";
  int fd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  /* The backlog holds a burst of clients while the server is busy. */
  if (fd == -1 ||
      (what = "bind", bind (fd, (struct sockaddr *) &sun, sizeof sun)) == -1 ||
      (what = "chmod", mode && chmod (sun.sun_path, mode) == -1) ||
      (what = "listen", listen (fd, SOMAXCONN)) == -1 ||
      (what = "stat", lstat (sun.sun_path, st)) == -1 ||
      (what = "rename", rename (sun.sun_path, path)) == -1) {
    snprintf (err, errlen, "%s: %s", what, s4k_strerror (errno));
    unlink (sun.sun_path);
    if (fd != -1)
      close (fd);
    return -1;
  }
  return fd;
}

void
s4k_unix_unlink (const char *path, const struct stat *st)
{
  struct stat now;
  if (lstat (path, &now) == 0 && now.st_dev == st->st_dev &&
      now.st_ino == st->st_ino)
    unlink (path);
}
