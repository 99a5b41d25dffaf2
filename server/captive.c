/* SPDX-License-Identifier: BSD-3-Clause */
/* sect4k-server as a fixture: --run, -U -, --pidfile, --exit-with-parent
 * and socket activation (see captive.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <signal.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "captive.h"
#include "sect4k/sect4k.h"

#define PROG "sect4k-server"

extern char **environ;

void log_msg (const char *fmt, ...) __attribute__ ((format (printf, 1, 2)));

int
captive_exit_with_parent (pid_t ppid)
{
  if (prctl (PR_SET_PDEATHSIG, SIGTERM) == -1) {
    fprintf (stderr, PROG ": --exit-with-parent: %s\n", s4k_strerror (errno));
    return -1;
  }
  /* The parent died before the request took effect: it was reparented
   * (to init or a subreaper) and no signal will come. */
  if (getppid () != ppid) {
    fprintf (stderr, PROG ": --exit-with-parent: the parent (pid %d) has "
             "already exited\n", (int) ppid);
    return -1;
  }
  return 0;
}

static int
parse_env_uint (const char *name, unsigned long *out)
{
  const char *s = getenv (name);
  char *end;
  if (!s)
    return 0;
  errno = 0;
  *out = strtoul (s, &end, 10);
  if (errno || end == s || *end) {
    fprintf (stderr, PROG ": %s=%s: expected a number (ignored)\n", name, s);
    return 0;
  }
  return 1;
}

int
captive_socket_activation (int *fds, unsigned max)
{
  unsigned long pid, n;
  if (!parse_env_uint ("LISTEN_PID", &pid) ||
      !parse_env_uint ("LISTEN_FDS", &n))
    return 0;
  if (pid != (unsigned long) getpid ()) {
    fprintf (stderr, PROG ": LISTEN_PID=%lu is not for us (ignored)\n", pid);
    return 0;
  }
  if (n == 0 || n > max) {
    fprintf (stderr, PROG ": socket activation: LISTEN_FDS=%lu: "
             "sect4k-server serves 1 to %u sockets\n", n, max);
    return -1;
  }
  /* Not passed on to --run's command (nor any other child). */
  unsetenv ("LISTEN_PID");
  unsetenv ("LISTEN_FDS");
  unsetenv ("LISTEN_FDNAMES");
  for (unsigned i = 0; i < n; i++) {
    const int fd = 3 + i;           /* SD_LISTEN_FDS_START */
    int listening = 0, type = 0;
    socklen_t len = sizeof listening;
    int f = fcntl (fd, F_GETFD);
    if (f == -1 || fcntl (fd, F_SETFD, f | FD_CLOEXEC) == -1) {
      fprintf (stderr, PROG ": socket activation: fd %d: %s\n", fd,
               s4k_strerror (errno));
      return -1;
    }
    if (getsockopt (fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == -1 ||
        (len = sizeof type,
         getsockopt (fd, SOL_SOCKET, SO_TYPE, &type, &len) == -1) ||
        !listening || type != SOCK_STREAM) {
      fprintf (stderr, PROG ": socket activation: fd %d is not a listening "
               "stream socket (ListenStream=, and not Accept=yes)\n", fd);
      return -1;
    }
    fds[i] = fd;
  }
  return n;
}

int
captive_private_dir (char *path, size_t len)
{
  const char *tmp = getenv ("TMPDIR");
  if (!tmp || !*tmp)
    tmp = "/tmp";
  struct sockaddr_un sun;
  if ((size_t) snprintf (path, len, "%s/sect4k-XXXXXX", tmp) >= len ||
      strlen (path) + sizeof "/socket" + 16 > sizeof sun.sun_path) {
    fprintf (stderr, PROG ": -U -: TMPDIR %s is too long for a socket "
             "path\n", tmp);
    return -1;
  }
  if (!mkdtemp (path)) {
    fprintf (stderr, PROG ": -U -: mkdtemp %s: %s\n", path,
             s4k_strerror (errno));
    return -1;
  }
  strcat (path, "/socket");
  return 0;
}

void
captive_private_remove (const char *path)
{
  char dir[PATH_MAX];
  snprintf (dir, sizeof dir, "%s", path);
  char *slash = strrchr (dir, '/');
  if (!slash)
    return;
  unlink (path);
  *slash = '\0';
  if (rmdir (dir) == -1)
    log_msg ("-U -: rmdir %s: %s", dir, s4k_strerror (errno));
}

int
captive_write_pidfile (const char *file)
{
  char tmp[PATH_MAX];
  if ((size_t) snprintf (tmp, sizeof tmp, "%s.%d.tmp", file, (int) getpid ())
      >= sizeof tmp) {
    fprintf (stderr, PROG ": --pidfile %s: path too long\n", file);
    return -1;
  }
  FILE *f = fopen (tmp, "we");
  if (!f || fprintf (f, "%d\n", (int) getpid ()) < 0 || fclose (f) != 0 ||
      rename (tmp, file) == -1) {
    fprintf (stderr, PROG ": --pidfile %s: %s\n", file, s4k_strerror (errno));
    unlink (tmp);
    return -1;
  }
  return 0;
}

int
captive_env_add (struct captive_env *e, const char *name, const char *value)
{
  char **v = realloc (e->v, (e->n + 2) * sizeof *v);
  if (!v)
    return -1;
  e->v = v;
  size_t len = strlen (name) + strlen (value) + 2;
  if (!(v[e->n] = malloc (len)))
    return -1;
  snprintf (v[e->n], len, "%s=%s", name, value);
  v[++e->n] = NULL;
  return 0;
}

void
captive_env_free (struct captive_env *e)
{
  for (size_t i = 0; i < e->n; i++)
    free (e->v[i]);
  free (e->v);
  e->v = NULL;
  e->n = 0;
}

/* Percent-encodes s into out, keeping RFC 3986's unreserved characters
 * and those in keep. */
static void
uri_encode (char *out, size_t len, const char *s, const char *keep)
{
  static const char hex[] = "0123456789ABCDEF";
  size_t o = 0;
  for (; *s && o + 4 < len; s++) {
    unsigned char c = *s;
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
        (c >= '0' && c <= '9') || strchr ("-._~", c) || strchr (keep, c))
      out[o++] = c;
    else {
      out[o++] = '%';
      out[o++] = hex[c >> 4];
      out[o++] = hex[c & 15];
    }
  }
  out[o] = '\0';
}

int
captive_env_nbd (struct captive_env *e, int listen_fd, const char *unix_path,
                 const char *exportname, int tls)
{
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  if (getsockname (listen_fd, (struct sockaddr *) &ss, &sl) == -1) {
    fprintf (stderr, PROG ": --run: getsockname: %s\n", s4k_strerror (errno));
    return -1;
  }
  char name[3 * 256 + 1], uri[4096], port[16] = "", host[INET6_ADDRSTRLEN];
  const char *scheme = tls == 2 ? "nbds" : "nbd";
  uri_encode (name, sizeof name, exportname, "");
  if (ss.ss_family == AF_UNIX) {
    const char *path = unix_path ? unix_path
                                 : ((struct sockaddr_un *) &ss)->sun_path;
    char q[3 * sizeof ((struct sockaddr_un *) 0)->sun_path + 1];
    uri_encode (q, sizeof q, path, "/");
    snprintf (uri, sizeof uri, "%s+unix:///%s?socket=%s", scheme, name, q);
    if (captive_env_add (e, "unixsocket", path) == -1)
      return -1;
  }
  else if (ss.ss_family == AF_INET) {
    struct sockaddr_in *a = (struct sockaddr_in *) &ss;
    if (a->sin_addr.s_addr == htonl (INADDR_ANY))
      a->sin_addr.s_addr = htonl (INADDR_LOOPBACK);
    inet_ntop (AF_INET, &a->sin_addr, host, sizeof host);
    snprintf (port, sizeof port, "%u", ntohs (a->sin_port));
    snprintf (uri, sizeof uri, "%s://%s:%s/%s", scheme, host, port, name);
  }
  else {
    struct sockaddr_in6 *a = (struct sockaddr_in6 *) &ss;
    if (IN6_IS_ADDR_UNSPECIFIED (&a->sin6_addr))
      a->sin6_addr = in6addr_loopback;
    inet_ntop (AF_INET6, &a->sin6_addr, host, sizeof host);
    snprintf (port, sizeof port, "%u", ntohs (a->sin6_port));
    snprintf (uri, sizeof uri, "%s://[%s]:%s/%s", scheme, host, port, name);
  }
  /* $nbd: nbdkit >= 1.24 sets it to the same URI (nbdkit-captive(1)),
   * so commands written for nbdkit (qemu-img convert $nbd) run here. */
  if (captive_env_add (e, "uri", uri) == -1 ||
      captive_env_add (e, "nbd", uri) == -1 ||
      captive_env_add (e, "exportname", exportname) == -1 ||
      (port[0] && captive_env_add (e, "port", port) == -1) ||
      (port[0] && captive_env_add (e, "unixsocket", "") == -1) ||
      (!port[0] && captive_env_add (e, "port", "") == -1) ||
      (tls && captive_env_add (e, "tls", tls == 2 ? "2" : "1") == -1)) {
    fprintf (stderr, PROG ": out of memory\n");
    return -1;
  }
  return 0;
}

/* Is NAME=... one of e's names? */
static bool
replaced (const struct captive_env *e, const char *var)
{
  const char *eq = strchr (var, '=');
  size_t len = eq ? (size_t) (eq - var) : strlen (var);
  for (size_t i = 0; i < e->n; i++)
    if (strncmp (e->v[i], var, len) == 0 && e->v[i][len] == '=')
      return true;
  return false;
}

/* The terminal the command was given (its stdin's), or -1. */
static int tty_fd = -1;

pid_t
captive_run (const char *cmd, const struct captive_env *e)
{
  size_t n = 0;
  while (environ[n])
    n++;
  char **env = calloc (n + e->n + 1, sizeof *env);
  if (!env) {
    fprintf (stderr, PROG ": out of memory\n");
    return -1;
  }
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (!replaced (e, environ[i]))
      env[k++] = environ[i];
  for (size_t i = 0; i < e->n; i++)
    env[k++] = e->v[i];
  env[k] = NULL;
  char *argv[] = { "sh", "-c", (char *) cmd, NULL };

  /* The command gets a process group of its own, so that stopping it
   * reaches what it started too; if the server is in the foreground of
   * a terminal, that group takes the terminal (as a shell's job would),
   * so that it can read it and ^C goes to it. */
  if (isatty (STDIN_FILENO) && tcgetpgrp (STDIN_FILENO) == getpgrp ())
    tty_fd = STDIN_FILENO;
  sigset_t none, ttou, old;
  sigemptyset (&none);
  sigemptyset (&ttou);
  sigaddset (&ttou, SIGTTOU);
  pthread_sigmask (SIG_BLOCK, &ttou, &old);
  pid_t pid = fork ();
  if (pid == 0) {
    /* Async-signal-safe calls only: other threads may hold locks. */
    setpgid (0, 0);
    if (tty_fd != -1)
      tcsetpgrp (tty_fd, getpid ());
    signal (SIGPIPE, SIG_DFL);
    signal (SIGCHLD, SIG_DFL);
    sigprocmask (SIG_SETMASK, &none, NULL);
    execve ("/bin/sh", argv, env);
    _exit (127);
  }
  if (pid > 0) {
    setpgid (pid, pid);         /* the child may not have yet */
    if (tty_fd != -1)
      tcsetpgrp (tty_fd, pid);
  }
  int e2 = errno;
  pthread_sigmask (SIG_SETMASK, &old, NULL);
  free (env);
  if (pid == -1) {
    tty_fd = -1;
    fprintf (stderr, PROG ": --run: fork: %s\n", s4k_strerror (e2));
    return -1;
  }
  return pid;
}

static int
exit_status (int st)
{
  if (WIFSIGNALED (st)) {
    log_msg ("--run: the command was killed by signal %d (%s)",
             WTERMSIG (st), strsignal (WTERMSIG (st)));
    return 128 + WTERMSIG (st);
  }
  log_msg ("--run: the command exited with status %d", WEXITSTATUS (st));
  return WEXITSTATUS (st);
}

/* Waits for the command, SIGTERM to its group first unless it has
 * exited, SIGKILL after grace seconds.  0 if it had exited, 1 if it was
 * stopped, -1 if waitpid fails. */
static int
reap (pid_t pid, unsigned grace, int *st)
{
  pid_t r = waitpid (pid, st, WNOHANG);
  if (r == pid)
    return 0;
  if (r == -1) {
    log_msg ("--run: waitpid: %s", s4k_strerror (errno));
    return -1;
  }
  log_msg ("--run: stopping the command (pid %d) with SIGTERM", (int) pid);
  kill (-pid, SIGTERM);
  for (unsigned i = 0; i < grace * 20; i++) {
    if (waitpid (pid, st, WNOHANG) == pid)
      return 1;
    nanosleep (&(struct timespec) { 0, 50 * 1000 * 1000 }, NULL);
  }
  log_msg ("--run: the command still runs after %u s: SIGKILL", grace);
  kill (-pid, SIGKILL);
  while (waitpid (pid, st, 0) == -1)
    if (errno != EINTR)
      return -1;
  return 1;
}

int
captive_finish (pid_t pid, unsigned grace)
{
  int st;
  const int r = reap (pid, grace, &st);
  /* What the command left running in its group is stopped too: it may
   * use the disks that are about to go. */
  if (r == 0 && kill (-pid, SIGTERM) == 0)
    log_msg ("--run: stopped what the command left running (SIGTERM to "
             "process group %d)", (int) pid);
  if (tty_fd != -1) {
    /* The server is in the background now: SIGTTOU held off. */
    sigset_t ttou, old;
    sigemptyset (&ttou);
    sigaddset (&ttou, SIGTTOU);
    pthread_sigmask (SIG_BLOCK, &ttou, &old);
    tcsetpgrp (tty_fd, getpgrp ());
    pthread_sigmask (SIG_SETMASK, &old, NULL);
  }
  return r == -1 ? 1 : exit_status (st);
}
