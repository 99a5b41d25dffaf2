/* SPDX-License-Identifier: BSD-3-Clause */
/* sect4k-ctl for the test guest, which has no Python: sends one command
 * to a control socket and prints the answer (scripts/sect4k-ctl is the
 * real one; same exit status: 0 ok, 1 error, 2 unreachable). */
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int
main (int argc, char **argv)
{
  struct sockaddr_un sa = { .sun_family = AF_UNIX };
  char line[4096] = "", buf[65536];
  size_t have = 0;
  if (argc < 3 || strlen (argv[1]) >= sizeof sa.sun_path) {
    fprintf (stderr, "usage: sect4k-ctl PATH COMMAND...\n");
    return 2;
  }
  strcpy (sa.sun_path, argv[1]);
  for (int i = 2; i < argc; i++) {
    strncat (line, argv[i], sizeof line - strlen (line) - 2);
    strcat (line, i + 1 < argc ? " " : "\n");
  }
  int fd = socket (AF_UNIX, SOCK_STREAM, 0);
  if (fd == -1 || connect (fd, (struct sockaddr *) &sa, sizeof sa) == -1 ||
      write (fd, line, strlen (line)) != (ssize_t) strlen (line)) {
    perror (argv[1]);
    return 2;
  }
  for (;;) {
    ssize_t r = read (fd, buf + have, sizeof buf - 1 - have);
    if (r <= 0)
      return 2;
    have += r;
    buf[have] = '\0';
    char *last = have > 1 ? buf + have - 2 : buf;
    while (last > buf && last[-1] != '\n')
      last--;
    if (buf[have - 1] == '\n' &&
        (strcmp (last, "ok\n") == 0 || strncmp (last, "error: ", 7) == 0)) {
      fwrite (buf, 1, last - buf, stdout);
      if (*last == 'e') {
        fputs (last, stderr);
        return 1;
      }
      return 0;
    }
    if (have == sizeof buf - 1) {
      fwrite (buf, 1, have, stdout);
      have = 0;
    }
  }
}
