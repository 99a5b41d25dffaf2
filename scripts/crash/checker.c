/* SPDX-License-Identifier: BSD-3-Clause */
/* sect4k-crash: running the checker while serving the state
 * (the files: crash.h). */
#include "crash.h"

const char *const result_names[] =
  { "consistent", "failed", "not checked", "not checked", "not checked" };

char checker_out[OUTPUT_MAX + 1];
size_t checker_out_len;

double
now_s (void)
{
  struct timespec t;
  clock_gettime (CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

#define MAX_CONNS 64

/* The checker running now, for on_fatal_signal. */
static volatile pid_t checker_pid;
static const int fatal_signals[] = { SIGINT, SIGTERM, SIGHUP };

static void
fatal_mask (int how, sigset_t *old)
{
  sigset_t set;
  sigemptyset (&set);
  for (size_t i = 0; i < sizeof fatal_signals / sizeof fatal_signals[0]; i++)
    sigaddset (&set, fatal_signals[i]);
  sigprocmask (how, &set, old);
}

/* SIGINT, SIGTERM, SIGHUP: the checker and whatever it started are
 * killed and reaped and the socket's directory removed, then we die of
 * the signal, so that a shell sees 128+N and a script's loop stops. */
static void
on_fatal_signal (int sig)
{
  const pid_t pid = checker_pid;
  if (pid > 0) {
    kill (-pid, SIGKILL);
    while (waitpid (pid, NULL, 0) < 0 && errno == EINTR)
      ;
  }
  cleanup_socket ();
  signal (sig, SIG_DFL);
  sigset_t set;
  sigemptyset (&set);
  sigaddset (&set, sig);
  sigprocmask (SIG_UNBLOCK, &set, NULL);
  raise (sig);
  _exit (128 + sig);
}

void
catch_signals (void)
{
  struct sigaction sa = { .sa_handler = on_fatal_signal };
  sigemptyset (&sa.sa_mask);
  for (size_t i = 0; i < sizeof fatal_signals / sizeof fatal_signals[0]; i++)
    sigaddset (&sa.sa_mask, fatal_signals[i]);
  for (size_t i = 0; i < sizeof fatal_signals / sizeof fatal_signals[0]; i++)
    sigaction (fatal_signals[i], &sa, NULL);
}

static void
drain_output (int fd)
{
  char buf[4096];
  ssize_t n;
  while ((n = read (fd, buf, sizeof buf)) > 0) {
    size_t take = (size_t) n < OUTPUT_MAX - checker_out_len
                  ? (size_t) n : OUTPUT_MAX - checker_out_len;
    memcpy (checker_out + checker_out_len, buf, take);
    checker_out_len += take;
  }
  checker_out[checker_out_len] = '\0';
}

/* Serves the current state while the checker runs. */
struct run
run_checker (const char *id)
{
  char uri[200];
  snprintf (uri, sizeof uri, "nbd+unix:///?socket=%s", sock_path);
  int pfd[2], ofd[2];
  if (pipe2 (pfd, O_CLOEXEC) || pipe2 (ofd, O_CLOEXEC | O_NONBLOCK))
    die ("pipe: %s", strerror (errno));
  checker_out_len = 0;
  /* No signal between the fork and checker_pid: the handler must know
   * every checker. */
  sigset_t old_mask;
  fatal_mask (SIG_BLOCK, &old_mask);
  pid_t pid = fork ();
  if (pid < 0)
    die ("fork: %s", strerror (errno));
  if (pid == 0) {
    for (size_t i = 0; i < sizeof fatal_signals / sizeof fatal_signals[0];
         i++)
      signal (fatal_signals[i], SIG_DFL);
    sigprocmask (SIG_SETMASK, &old_mask, NULL);
    setpgid (0, 0);
    setenv ("SECT4K_URI", uri, 1);
    setenv ("SECT4K_STATE", id, 1);
    close (pfd[0]);
    dup2 (ofd[1], 1);
    dup2 (ofd[1], 2);
    fcntl (1, F_SETFL, 0);
    execvp (checker[0], checker);
    int e = errno;
    if (write (pfd[1], &e, sizeof e) < 0)
      _exit (127);
    _exit (127);
  }
  setpgid (pid, pid);
  checker_pid = pid;
  sigprocmask (SIG_SETMASK, &old_mask, NULL);
  close (pfd[1]);
  close (ofd[1]);
  int pidfd = syscall (SYS_pidfd_open, pid, 0);
  if (pidfd < 0)
    die ("pidfd_open: %s", strerror (errno));
  int conns[MAX_CONNS], nconns = 0;
  const double deadline = timeout_s > 0 ? now_s () + timeout_s : 0;
  bool exited = false, timed_out = false;
  while (!exited) {
    struct pollfd fds[MAX_CONNS + 3];
    fds[0] = (struct pollfd) { pidfd, POLLIN, 0 };
    fds[1] = (struct pollfd) { listen_fd, POLLIN, 0 };
    fds[2 + nconns] = (struct pollfd) { ofd[0], POLLIN, 0 };
    for (int i = 0; i < nconns; i++)
      fds[2 + i] = (struct pollfd) { conns[i], POLLIN, 0 };
    int wait_ms = -1;
    if (deadline) {
      double left = deadline - now_s ();
      if (left <= 0) {
        timed_out = true;
        break;
      }
      wait_ms = (int) (left * 1000) + 1;
    }
    int n = poll (fds, 3 + nconns, wait_ms);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      die ("poll: %s", strerror (errno));
    const int polled = nconns;
    if (fds[0].revents)
      exited = true;
    if (fds[2 + nconns].revents)
      drain_output (ofd[0]);
    if (fds[1].revents & POLLIN) {
      int c = accept4 (listen_fd, NULL, NULL, SOCK_CLOEXEC);
      if (c >= 0) {
        /* A stalled client must not stall us past the timeout. */
        struct timeval tv = { 5, 0 };
        setsockopt (c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt (c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        if (nconns == MAX_CONNS || handshake (c))
          close (c);
        else
          conns[nconns++] = c;
      }
    }
    for (int i = polled - 1; i >= 0; i--)
      if (fds[2 + i].revents &&
          serve_request (conns[i])) {
        close (conns[i]);
        conns[i] = conns[--nconns];
      }
  }
  if (timed_out)
    kill (-pid, SIGKILL);
  int status;
  while (waitpid (pid, &status, 0) < 0 && errno == EINTR)
    ;
  kill (-pid, SIGKILL);                 /* whatever it left running */
  checker_pid = 0;
  for (int i = 0; i < nconns; i++)
    close (conns[i]);
  close (pidfd);
  drain_output (ofd[0]);
  close (ofd[0]);
  int exec_errno = 0;
  bool exec_failed = read (pfd[0], &exec_errno, sizeof exec_errno) ==
                     sizeof exec_errno;
  close (pfd[0]);
  map_clear (&scratch);
  if (exec_failed)
    die ("cannot run the checker %s: %s", checker[0], strerror (exec_errno));
  if (timed_out)
    return (struct run) { R_TIMEOUT, 0 };
  if (WIFSIGNALED (status))
    return (struct run) { R_SIGNAL, WTERMSIG (status) };
  return (struct run) { WEXITSTATUS (status) ? R_FAILED : R_CONSISTENT,
                        WEXITSTATUS (status) };
}

