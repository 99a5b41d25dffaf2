/* SPDX-License-Identifier: BSD-3-Clause */
/* sect4k-server: the sect4k engine served over NBD without nbdkit.
 *   sect4k-server size=10G physical=4096 --unix /tmp/s
 * Parameters are the plugin's (s4k_config_*); options configure serving. */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "captive.h"
#include "ublk.h"
#include "server.h"
#include "tcmu.h"
#include "tls.h"
#include "sect4k/exports.h"
#include "sect4k/unixsock.h"

#define PROG "sect4k-server"

void
log_msg (const char *fmt, ...)
{
  char line[1024];
  va_list ap;
  va_start (ap, fmt);
  vsnprintf (line, sizeof line, fmt, ap);
  va_end (ap);
  fprintf (stderr, PROG ": %s\n", line);   /* one write per line */
}

static void
usage (FILE *f)
{
  fprintf (f,
"Usage: " PROG " [OPTIONS] [SIZE] [KEY=VALUE ...]\n"
"Serves sect4k devices over NBD (fixed newstyle) using io_uring: one, or\n"
"one per export (export=NAME, exports=512n,4kn).\n"
"\n"
"Options:\n"
"  -U, --unix PATH            listen on a Unix socket; -U - makes a private\n"
"                             one in a new directory, removed at exit\n"
"  -l, --listen HOST:PORT     listen on TCP (default 127.0.0.1:10809);\n"
"                             only loopback addresses unless --allow-remote\n"
"      --allow-remote         allow a non-loopback --listen address\n"
"  -r, --readonly             serve read-only\n"
"  -e, --export-name NAME     name of the single export (default \"\"; \"\"\n"
"                             always selects it too); with export= or\n"
"                             exports=, each export has its own name\n"
"  -t, --threads N            event-loop threads (default: CPUs, at most 4)\n"
"      --max-connections N    open connections at most (default 128)\n"
"      --handshake-timeout S  drop clients still negotiating after S seconds\n"
"                             (default 10)\n"
"      --tls=off|on|require   TLS (NBD_OPT_STARTTLS): on offers it, require\n"
"                             refuses clients without it (default off)\n"
"      --tls-certificates DIR X.509: DIR/ca-cert.pem, server-cert.pem,\n"
"                             server-key.pem (as nbdkit)\n"
"      --tls-psk FILE         pre-shared keys, psktool's username:hexkey\n"
"      --tls-verify-peer      X.509: clients need a certificate the CA signed\n"
"      --idle-timeout S       close connections that receive and send\n"
"                             nothing for S seconds (default 0: never)\n"
"      --nbd-stats FILE       write connection and NBD request counts at\n"
"                             exit (- for stderr; stats= is the device's)\n"
"      --scsi                 also (or, without --unix/--listen, only) as\n"
"                             local SCSI disks /dev/sdX, one per export,\n"
"                             through target_core_user and tcm_loop (root)\n"
"      --ublk                 also (or, without --unix/--listen, only) as\n"
"                             block devices /dev/ublkbN, one per export,\n"
"                             through ublk_drv (root; Linux 6.0 or later)\n"
"      --ublk-recovery        with --ublk: a device outlives a server that\n"
"                             dies (SIGKILL, a crash), its I/O held, and the\n"
"                             next --ublk-recovery start with the same\n"
"                             exports takes it over (user recovery)\n"
"      --run CMD              run CMD with /bin/sh once every export is\n"
"                             served (with --scsi or --ublk: every disk\n"
"                             exists), then\n"
"                             stop and exit with its status (128+N for signal\n"
"                             N); CMD sees $uri (and $nbd, the same),\n"
"                             $exportname, $port or $unixsocket, $tls, and\n"
"                             with --scsi or --ublk $dev and $dev_NAME per\n"
"                             named export\n"
"  -P, --pidfile FILE         write the pid to FILE once serving\n"
"      --exit-with-parent     stop (as on SIGTERM) when the parent exits\n"
"  -v, --verbose              log connections and refused requests\n"
"  -h, --help                 this text\n"
"  -V, --version              print the version\n"
"\n"
"Parameters (the same as the nbdkit plugin's):\n"
"%s"
"require-block-size=BOOL  Refuse clients that do not ask for block sizes\n"
"                      with NBD_REP_ERR_BLOCK_SIZE_REQD (default false;\n"
"                      for every export: before the first export=).\n"
"\n"
"SIGINT, SIGTERM, SIGHUP and SIGQUIT stop the server cleanly (disks removed).\n"
"With LISTEN_PID and LISTEN_FDS set (systemd socket activation), it serves\n"
"every listening socket passed (fd 3 on, up to 16) instead of --unix or\n"
"--listen.\n",
           s4k_config_help);
}

static int
parse_uint (const char *opt, const char *s, unsigned min, unsigned max,
            unsigned *out)
{
  char *end;
  errno = 0;
  unsigned long v = strtoul (s, &end, 10);
  if (errno || end == s || *end || v < min || v > max) {
    fprintf (stderr, PROG ": %s %s: expected a number from %u to %u\n",
             opt, s, min, max);
    return -1;
  }
  *out = v;
  return 0;
}

static bool
is_loopback (const struct sockaddr *sa)
{
  if (sa->sa_family == AF_INET) {
    const struct sockaddr_in *a = (const struct sockaddr_in *) sa;
    return (ntohl (a->sin_addr.s_addr) >> 24) == 127;
  }
  if (sa->sa_family == AF_INET6) {
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *) sa;
    if (IN6_IS_ADDR_LOOPBACK (&a->sin6_addr))
      return true;
    return IN6_IS_ADDR_V4MAPPED (&a->sin6_addr) &&
           a->sin6_addr.s6_addr[12] == 127;
  }
  return false;
}

/* Where the socket fd listens, for the log: "127.0.0.1:10809",
 * "[::1]:10809" or "unix:PATH".  Its address family. */
static int
socket_where (int fd, char *where, size_t wlen)
{
  struct sockaddr_storage ss = { 0 };
  socklen_t sl = sizeof ss;
  char addr[INET6_ADDRSTRLEN] = "?";
  getsockname (fd, (struct sockaddr *) &ss, &sl);
  if (ss.ss_family == AF_INET) {
    inet_ntop (AF_INET, &((struct sockaddr_in *) &ss)->sin_addr, addr,
               sizeof addr);
    snprintf (where, wlen, "%s:%u", addr,
              ntohs (((struct sockaddr_in *) &ss)->sin_port));
  }
  else if (ss.ss_family == AF_INET6) {
    inet_ntop (AF_INET6, &((struct sockaddr_in6 *) &ss)->sin6_addr, addr,
               sizeof addr);
    snprintf (where, wlen, "[%s]:%u", addr,
              ntohs (((struct sockaddr_in6 *) &ss)->sin6_port));
  }
  else
    snprintf (where, wlen, "unix:%s", ((struct sockaddr_un *) &ss)->sun_path);
  return ss.ss_family;
}

/* The socket systemd passed: a Unix one, or TCP on loopback unless
 * --allow-remote (as for --listen). */
static int
check_activated (int fd, bool allow_remote)
{
  struct sockaddr_storage ss = { 0 };
  socklen_t sl = sizeof ss;
  char where[300];
  if (getsockname (fd, (struct sockaddr *) &ss, &sl) == -1) {
    fprintf (stderr, PROG ": socket activation: getsockname: %s\n",
             s4k_strerror (errno));
    return -1;
  }
  if (ss.ss_family != AF_UNIX && !allow_remote &&
      !is_loopback ((struct sockaddr *) &ss)) {
    socket_where (fd, where, sizeof where);
    fprintf (stderr, PROG ": socket activation: %s is not a loopback "
             "address; add --allow-remote to serve other hosts (no "
             "authentication, no encryption)\n", where);
    return -1;
  }
  return 0;
}

static int
listen_tcp (const char *spec, bool allow_remote, char *where, size_t wlen)
{
  char host[256];
  const char *colon = strrchr (spec, ':');
  if (!colon || colon == spec || !colon[1] ||
      (size_t) (colon - spec) >= sizeof host) {
    fprintf (stderr, PROG ": --listen %s: expected HOST:PORT, e.g. "
             "127.0.0.1:10809 or [::1]:10809\n", spec);
    return -1;
  }
  memcpy (host, spec, colon - spec);
  host[colon - spec] = '\0';
  char *h = host;
  if (h[0] == '[' && h[strlen (h) - 1] == ']') {
    h[strlen (h) - 1] = '\0';
    h++;
  }
  struct addrinfo hints = { .ai_flags = AI_PASSIVE | AI_NUMERICSERV,
                            .ai_family = AF_UNSPEC,
                            .ai_socktype = SOCK_STREAM }, *ai;
  int r = getaddrinfo (h, colon + 1, &hints, &ai);
  if (r != 0) {
    fprintf (stderr, PROG ": --listen %s: %s\n", spec, gai_strerror (r));
    return -1;
  }
  if (!is_loopback (ai->ai_addr) && !allow_remote) {
    fprintf (stderr, PROG ": --listen %s: not a loopback address; add "
             "--allow-remote to serve other hosts (no authentication, no "
             "encryption)\n", spec);
    freeaddrinfo (ai);
    return -1;
  }
  int fd = socket (ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  if (fd == -1 ||
      setsockopt (fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == -1 ||
      bind (fd, ai->ai_addr, ai->ai_addrlen) == -1 ||
      listen (fd, SOMAXCONN) == -1) {
    fprintf (stderr, PROG ": --listen %s: %s\n", spec, s4k_strerror (errno));
    if (fd != -1)
      close (fd);
    freeaddrinfo (ai);
    return -1;
  }
  freeaddrinfo (ai);
  socket_where (fd, where, wlen);
  return fd;
}

/* The socket this server bound at --unix: at exit the path is removed
 * only if it is still this one (another server may have replaced it). */
static struct stat unix_sock;

/* A live server's socket at path is refused, a stale one replaced by
 * listen_unix.  Checked before the device is opened, so that a file= is
 * not touched either. */
static int
check_unix_path (const char *path)
{
  char err[256];
  int r = s4k_unix_probe (path, err, sizeof err);
  if (r == -1)
    fprintf (stderr, PROG ": --unix %s: %s\n", path, err);
  else if (r == 1)
    log_msg ("--unix %s: replacing a stale socket (no server answers on "
             "it)", path);
  return r == -1 ? -1 : 0;
}

static int
listen_unix (const char *path, char *where, size_t wlen)
{
  char err[256];
  int fd = s4k_unix_listen (path, 0, &unix_sock, err, sizeof err);
  if (fd == -1)
    fprintf (stderr, PROG ": --unix %s: %s\n", path, err);
  else
    snprintf (where, wlen, "unix:%s", path);
  return fd;
}

static int
write_stats (const char *file, const struct server *s)
{
  FILE *f = strcmp (file, "-") == 0 ? stderr : fopen (file, "w");
  if (!f) {
    fprintf (stderr, PROG ": --nbd-stats %s: %s\n", file,
             s4k_strerror (errno));
    return -1;
  }
  static const char *const names[NBD_CMD_COUNT] = {
    "read", "write", "disc", "flush", "trim", "cache", "write_zeroes",
    "block_status",
  };
  fprintf (f, "connections=%" PRIu64 "\n", s->accepted);
  fprintf (f, "connections_refused=%" PRIu64 "\n", s->refused);
  for (int i = 0; i < NBD_CMD_COUNT; i++)
    fprintf (f, "requests_%s=%" PRIu64 "\n", names[i], s->stats.requests[i]);
#define PRINT(name) fprintf (f, #name "=%" PRIu64 "\n", s->stats.name);
  CONN_COUNTERS (PRINT)
#undef PRINT
  if (f != stderr && fclose (f) != 0) {
    fprintf (stderr, PROG ": --nbd-stats %s: %s\n", file,
             s4k_strerror (errno));
    return -1;
  }
  return 0;
}

/* NBD has no zone commands: a zoned export is served by --scsi or --ublk
 * alone (kernel_path: one of them was given beside the NBD sockets). */
static bool
zoned_refused (const struct s4k_exports *t, bool kernel_path, char *err,
               size_t errlen)
{
  for (size_t i = 0; i < t->n; i++)
    if (s4k_zone_refuse_nbd (&t->v[i].cfg.zone, t->named ? t->v[i].name
                                                        : NULL,
                             "", kernel_path, err, errlen) == -1)
      return true;
  return false;
}

/* --ublk: the keys no ublk device takes, before the driver is looked for
 * (or any file made); then the driver itself. */
static int
ublk_keys_refused (const struct s4k_exports *t, bool recovery, char *err,
                   size_t errlen)
{
  for (size_t i = 0; i < t->n; i++)
    if (ublk_refused_keys (&t->v[i], t->named, recovery, err, errlen) == -1)
      return -1;
  return ublk_check (err, errlen);
}

/* --ublk: what ublk's parameters cannot say, refused in one line. */
static int
ublk_refusals (const struct s4k_exports *t, char *err, size_t errlen)
{
  for (size_t i = 0; i < t->n; i++)
    if (ublk_refused (&t->v[i], t->named, err, errlen) == -1)
      return -1;
  return 0;
}

/* --run --scsi: $dev_NAME for export NAME, other characters than
 * letters and digits as "_". */
static void
dev_var (const char *export, char *var, size_t len)
{
  size_t o = snprintf (var, len, "dev_");
  for (; *export && o + 1 < len; export++, o++) {
    unsigned char c = *export;
    var[o] = (c < 128 && isalnum (c)) ? c : '_';
  }
  var[o] = '\0';
}

/* Two exports whose names give one variable are refused. */
static int
check_dev_names (const struct s4k_exports *t, char *err, size_t errlen)
{
  char a[300], b[300];
  for (size_t i = 0; t->named && i < t->n; i++)
    for (size_t j = i + 1; j < t->n; j++) {
      dev_var (t->v[i].name, a, sizeof a);
      dev_var (t->v[j].name, b, sizeof b);
      if (strcmp (a, b) == 0) {
        snprintf (err, errlen, "--run: exports %s and %s would both be "
                  "$%s: rename one", t->v[i].name, t->v[j].name, a);
        return -1;
      }
    }
  return 0;
}

/* Starts --run's command with its variables; its pid or -1.  Not if a
 * stop signal came while the server started. */
static pid_t
start_run (const char *cmd, const struct server *s, const char *unix_path,
           const struct s4k_exports *t, const struct scsi_front *front,
           const struct ublk_front *ufront)
{
  sigset_t pending;
  sigpending (&pending);
  for (int sig = 1; sig < NSIG; sig++)
    if (sig != SIGCHLD && sigismember (&s->stop_signals, sig) &&
        sigismember (&pending, sig)) {
      log_msg ("%s before --run's command started: not running it",
               strsignal (sig));
      return -1;
    }
  struct captive_env env = { 0 };
  int r = 0;
  if (s->nlisten)
    r = captive_env_nbd (&env, s->listen_fd[0], unix_path, s->cfg.export_name,
                         s->cfg.tls);
  else if (captive_env_add (&env, "uri", "") == -1 ||
           captive_env_add (&env, "nbd", "") == -1 ||
           captive_env_add (&env, "exportname", s->cfg.export_name) == -1 ||
           captive_env_add (&env, "port", "") == -1 ||
           captive_env_add (&env, "unixsocket", "") == -1)
    r = -1;
  for (size_t i = 0; (front || ufront) && r == 0 && i < t->n; i++) {
    char dev[64], var[300];
    snprintf (dev, sizeof dev, "/dev/%s", front ? scsi_front_disk (front, i)
                                                : ublk_front_disk (ufront, i));
    if (i == 0)
      r = captive_env_add (&env, "dev", dev);
    if (t->named && r == 0) {
      dev_var (t->v[i].name, var, sizeof var);
      r = captive_env_add (&env, var, dev);
    }
  }
  pid_t pid = -1;
  if (r == -1)
    fprintf (stderr, PROG ": out of memory\n");
  else
    pid = captive_run (cmd, &env);
  captive_env_free (&env);
  return pid;
}

/* One server_cfg per export: s->cfg is the first (the default), the
 * others are in *extra, linked by next. */
static int
setup_exports (struct server *s, const struct s4k_exports *t,
               struct server_cfg **extra, char *names, size_t nlen)
{
  struct server_cfg *v = t->n > 1 ? calloc (t->n - 1, sizeof *v) : NULL;
  if (t->n > 1 && !v) {
    fprintf (stderr, PROG ": out of memory\n");
    return -1;
  }
  s4k_exports_names (t, names, nlen);
  const struct server_cfg base = s->cfg;
  struct server_cfg *prev = NULL;
  for (size_t i = 0; i < t->n; i++) {
    const struct s4k_export *x = &t->v[i];
    struct server_cfg *e = i ? &v[i - 1] : &s->cfg;
    const struct s4k_geometry *g = s4k_dev_geometry (x->dev);
    *e = base;
    if (t->named) {
      e->export_name = x->name;
      e->first = &s->cfg;
      e->export_names = names;
    }
    if (prev)
      prev->next = e;
    prev = e;
    e->readonly = base.readonly || s4k_dev_readonly (x->dev);
    e->rotational = s4k_timing_rotation_rate (&x->cfg.timing) > 1;
    e->dev = x->dev;
    e->size = g->size;
    e->minimum = g->logical;
    e->preferred = g->physical;
    e->maximum = s4k_dev_max_request (x->dev);
    /* strict=false serves longer reads and writes, up to nbdkit's own
     * limit, as the plugin under nbdkit does. */
    e->longest = x->cfg.strict ? e->maximum : S4K_MAX_MAX_REQUEST;
    snprintf (e->description, sizeof e->description, "%s", x->description);
  }
  *extra = v;
  return 0;
}

int
main (int argc, char **argv)
{
  enum { OPT_ALLOW_REMOTE = 256, OPT_MAX_CONN, OPT_HS_TIMEOUT, OPT_NBD_STATS,
         OPT_OLD_STATS, OPT_IDLE_TIMEOUT, OPT_SCSI, OPT_UBLK, OPT_UBLK_RECOVERY, OPT_TLS, OPT_TLS_CERTS,
         OPT_TLS_PSK, OPT_TLS_VERIFY, OPT_RUN, OPT_EXIT_WITH_PARENT };
  static const struct option longopts[] = {
    { "unix", required_argument, NULL, 'U' },
    { "listen", required_argument, NULL, 'l' },
    { "allow-remote", no_argument, NULL, OPT_ALLOW_REMOTE },
    { "readonly", no_argument, NULL, 'r' },
    { "export-name", required_argument, NULL, 'e' },
    { "threads", required_argument, NULL, 't' },
    { "max-connections", required_argument, NULL, OPT_MAX_CONN },
    { "handshake-timeout", required_argument, NULL, OPT_HS_TIMEOUT },
    { "idle-timeout", required_argument, NULL, OPT_IDLE_TIMEOUT },
    { "nbd-stats", required_argument, NULL, OPT_NBD_STATS },
    { "stats", required_argument, NULL, OPT_OLD_STATS },
    { "scsi", no_argument, NULL, OPT_SCSI },
    { "ublk", no_argument, NULL, OPT_UBLK },
    { "ublk-recovery", no_argument, NULL, OPT_UBLK_RECOVERY },
    { "tls", required_argument, NULL, OPT_TLS },
    { "tls-certificates", required_argument, NULL, OPT_TLS_CERTS },
    { "tls-psk", required_argument, NULL, OPT_TLS_PSK },
    { "tls-verify-peer", no_argument, NULL, OPT_TLS_VERIFY },
    { "run", required_argument, NULL, OPT_RUN },
    { "pidfile", required_argument, NULL, 'P' },
    { "pid-file", required_argument, NULL, 'P' },
    { "exit-with-parent", no_argument, NULL, OPT_EXIT_WITH_PARENT },
    { "verbose", no_argument, NULL, 'v' },
    { "help", no_argument, NULL, 'h' },
    { "version", no_argument, NULL, 'V' },
    { NULL, 0, NULL, 0 },
  };
  /* First: --exit-with-parent tells from it whether the parent is gone. */
  const pid_t ppid = getppid ();
  static struct server s;       /* large; zeroed */
  /* A log line to a closed pipe (stderr) must not kill the server: the
   * write fails instead, as in nbdkit.  Sockets use MSG_NOSIGNAL. */
  signal (SIGPIPE, SIG_IGN);
  const char *unix_path = NULL, *listen_spec = NULL, *stats_file = NULL;
  const char *run = NULL, *pidfile = NULL;
  bool allow_remote = false, scsi = false, exit_with_parent = false;
  bool ublk = false, ublk_recovery = false;
  struct tls_options tls = { 0 };
  long ncpu = sysconf (_SC_NPROCESSORS_ONLN);
  s.threads = ncpu < 1 ? 1 : ncpu > 4 ? 4 : ncpu;
  s.max_connections = 128;
  s.handshake_timeout = 10;
  s.shutdown_grace = 5;
  s.cfg.export_name = "";

  int o;
  while ((o = getopt_long (argc, argv, "U:l:re:t:P:vhV", longopts, NULL)) != -1) {
    switch (o) {
    case 'U': unix_path = optarg; break;
    case 'l': listen_spec = optarg; break;
    case OPT_ALLOW_REMOTE: allow_remote = true; break;
    case 'r': s.cfg.readonly = true; break;
    case 'e':
      if (strlen (optarg) > 256) {
        fprintf (stderr, PROG ": --export-name: longer than 256 bytes\n");
        return 1;
      }
      s.cfg.export_name = optarg;
      break;
    case 't':
      if (parse_uint ("--threads", optarg, 1, 64, &s.threads) == -1)
        return 1;
      break;
    case OPT_MAX_CONN:
      if (parse_uint ("--max-connections", optarg, 1, 65536,
                      &s.max_connections) == -1)
        return 1;
      break;
    case OPT_HS_TIMEOUT:
      if (parse_uint ("--handshake-timeout", optarg, 1, 3600,
                      &s.handshake_timeout) == -1)
        return 1;
      break;
    case OPT_IDLE_TIMEOUT:
      if (parse_uint ("--idle-timeout", optarg, 0, 86400,
                      &s.idle_timeout) == -1)
        return 1;
      break;
    case OPT_OLD_STATS:
      fprintf (stderr, PROG ": --stats is deprecated: use --nbd-stats "
               "(stats= is the device's statistics)\n");
      /* fall through */
    case OPT_NBD_STATS: stats_file = optarg; break;
    case OPT_SCSI: scsi = true; break;
    case OPT_UBLK: ublk = true; break;
    case OPT_UBLK_RECOVERY: ublk_recovery = true; break;
    case OPT_TLS:
      if (strcmp (optarg, "off") == 0)
        s.cfg.tls = TLS_OFF;
      else if (strcmp (optarg, "on") == 0)
        s.cfg.tls = TLS_ON;
      else if (strcmp (optarg, "require") == 0)
        s.cfg.tls = TLS_REQUIRE;
      else {
        fprintf (stderr, PROG ": --tls=%s: expected off, on or require\n",
                 optarg);
        return 1;
      }
      break;
    case OPT_TLS_CERTS: tls.certificates = optarg; break;
    case OPT_TLS_PSK: tls.psk_file = optarg; break;
    case OPT_TLS_VERIFY: tls.verify_peer = 1; break;
    case OPT_RUN: run = optarg; break;
    case 'P': pidfile = optarg; break;
    case OPT_EXIT_WITH_PARENT: exit_with_parent = true; break;
    case 'v': s.cfg.verbose = true; break;
    case 'h': usage (stdout); return 0;
    case 'V': printf (PROG " %s\n", S4K_VERSION); return 0;
    default:
      fprintf (stderr, PROG ": try --help\n");
      return 1;
    }
  }
  if (s.cfg.tls == TLS_OFF && (tls.certificates || tls.psk_file ||
                               tls.verify_peer)) {
    fprintf (stderr, PROG ": --tls-certificates, --tls-psk and "
             "--tls-verify-peer need --tls=on or --tls=require\n");
    return 1;
  }
  if (s.cfg.tls != TLS_OFF && tls_setup (&tls) == -1)
    return 1;
  if (unix_path && listen_spec) {
    fprintf (stderr, PROG ": give --unix or --listen, not both\n");
    return 1;
  }
  /* As nbdkit: the inherited sockets, all of them, are the only ones,
   * and no --run. */
  int activated_fds[SERVER_MAX_LISTEN];
  const int activated = captive_socket_activation (activated_fds,
                                                   SERVER_MAX_LISTEN);
  if (activated == -1)
    return 1;
  if (activated && (unix_path || listen_spec || run)) {
    fprintf (stderr, PROG ": socket activation (LISTEN_FDS) cannot be "
             "combined with %s\n", unix_path ? "--unix" : listen_spec ?
             "--listen" : "--run");
    return 1;
  }
  for (int i = 0; i < activated; i++)
    if (check_activated (activated_fds[i], allow_remote) == -1)
      return 1;
  const bool private_socket = unix_path && strcmp (unix_path, "-") == 0;
  char private_path[PATH_MAX];
  if (exit_with_parent && captive_exit_with_parent (ppid) == -1)
    return 1;

  static struct s4k_exports exports;
  char err[512];
  if (run && scsi && ublk) {
    fprintf (stderr, PROG ": --run: give --scsi or --ublk, not both ($dev "
             "would name one of the two disks)\n");
    return 1;
  }
  if (scsi && scsi_check (err, sizeof err) == -1) {
    fprintf (stderr, PROG ": %s\n", err);
    return 1;
  }
  if (ublk_recovery && !ublk) {
    fprintf (stderr, PROG ": --ublk-recovery needs --ublk\n");
    return 1;
  }
  /* --scsi or --ublk alone serves no NBD. */
  const bool listening = !(scsi || ublk) || unix_path || listen_spec ||
                         activated;
  s4k_exports_init (&exports);
  for (int i = optind; i < argc; i++) {
    const char *arg = argv[i], *eq = strchr (arg, '=');
    char key[64];
    if (!eq) {                  /* like nbdkit's magic key: the size */
      if (i != optind) {
        fprintf (stderr, PROG ": %s: expected KEY=VALUE\n", arg);
        return 1;
      }
      snprintf (key, sizeof key, "size");
      eq = arg - 1;
    }
    else if ((size_t) (eq - arg) >= sizeof key) {
      fprintf (stderr, PROG ": %s: unknown parameter\n", arg);
      return 1;
    }
    else {
      memcpy (key, arg, eq - arg);
      key[eq - arg] = '\0';
    }
    if (strcmp (key, "require-block-size") == 0) {
      if (s4k_exports_in_section (&exports)) {
        fprintf (stderr, PROG ": export=%s: require-block-size=%s cannot "
                 "vary per export (give it before the first export=)\n",
                 exports.v[exports.n - 1].name, eq + 1);
        return 1;
      }
      if (s4k_parse_bool (eq + 1, &s.cfg.require_block_size) == -1) {
        fprintf (stderr, PROG ": require-block-size=%s: expected true or "
                 "false\n", eq + 1);
        return 1;
      }
      continue;
    }
    if (s4k_exports_set (&exports, key, eq + 1, err, sizeof err) == -1) {
      fprintf (stderr, PROG ": %s\n", err);
      return 1;
    }
  }
  exports.readonly = s.cfg.readonly;
  if (exports.named && strcmp (s.cfg.export_name, "") != 0) {
    fprintf (stderr, PROG ": --export-name %s: with export= or exports=, "
             "each export has its own name\n", s.cfg.export_name);
    return 1;
  }
  if (unix_path && !private_socket && check_unix_path (unix_path) == -1)
    return 1;
  if (s4k_exports_finish (&exports, err, sizeof err) == -1 ||
      (listening && zoned_refused (&exports, scsi || ublk, err, sizeof err)) ||
      (ublk && ublk_keys_refused (&exports, ublk_recovery, err,
                                  sizeof err) == -1) ||
      (run && (scsi || ublk) &&
       check_dev_names (&exports, err, sizeof err) == -1) ||
      s4k_exports_open (&exports, err, sizeof err) < 0 ||
      (ublk && ublk_refusals (&exports, err, sizeof err) == -1)) {
    fprintf (stderr, PROG ": %s\n", err);
    s4k_exports_close (&exports);
    return 1;
  }
  /* Blocked before any thread starts (the devices' control and stats
   * threads, the rings, the event loops), so that every thread inherits
   * the mask and the signals wait, pending, for sigwait (in serve, or
   * below with --scsi alone); until here (opening the devices, which
   * may wait for an upstream) they stop the server at once.  The stop
   * signals are nbdkit's; with --run, SIGCHLD (not for a stop or
   * continue) is the command's end. */
  sigemptyset (&s.stop_signals);
  sigaddset (&s.stop_signals, SIGINT);
  sigaddset (&s.stop_signals, SIGTERM);
  sigaddset (&s.stop_signals, SIGHUP);
  sigaddset (&s.stop_signals, SIGQUIT);
  if (run) {
    sigaction (SIGCHLD, &(struct sigaction) { .sa_handler = SIG_DFL,
                                              .sa_flags = SA_NOCLDSTOP },
               NULL);
    sigaddset (&s.stop_signals, SIGCHLD);
  }
  pthread_sigmask (SIG_BLOCK, &s.stop_signals, NULL);
  s4k_exports_start (&exports);
  struct server_cfg *cfgs = NULL;
  char names[1024];
  if (setup_exports (&s, &exports, &cfgs, names, sizeof names) == -1) {
    s4k_exports_close (&exports);
    return 1;
  }

  char where[SERVER_MAX_LISTEN * 120] = "";
  int lfd = -1;
  if (!listening)
    ;
  else if (activated) {
    size_t o = 0;
    for (int i = 0; i < activated; i++) {
      char one[300];
      s.listen_fd[i] = activated_fds[i];
      s.tcp[i] = socket_where (activated_fds[i], one, sizeof one) != AF_UNIX;
      o += snprintf (where + o, o < sizeof where ? sizeof where - o : 0,
                     "%s%s", i ? ", " : "", one);
    }
    s.nlisten = activated;
  }
  else if (private_socket) {
    if (captive_private_dir (private_path, sizeof private_path) == 0) {
      unix_path = private_path;
      lfd = listen_unix (unix_path, where, sizeof where);
      if (lfd == -1)
        captive_private_remove (private_path);
    }
  }
  else if (unix_path)
    lfd = listen_unix (unix_path, where, sizeof where);
  else {
    s.tcp[0] = true;
    lfd = listen_tcp (listen_spec ? listen_spec : "127.0.0.1:10809",
                      allow_remote, where, sizeof where);
  }
  if (lfd != -1) {
    s.listen_fd[0] = lfd;
    s.nlisten = 1;
  }
  if (listening && !s.nlisten) {
    s4k_exports_close (&exports);
    free (cfgs);
    return 1;
  }
  struct scsi_front *front = NULL;
  struct ublk_front *ufront = NULL;
  int ret = 0;
  if (scsi &&
      /* With --run, stdout is the command's: the disks are in its
       * variables, and logged. */
      !(front = scsi_start (&exports, s.cfg.readonly, s.cfg.verbose,
                            run ? NULL : stdout, err, sizeof err))) {
    fprintf (stderr, PROG ": %s\n", err);
    ret = 1;
    goto out;
  }
  if (ublk &&
      !(ufront = ublk_start (&exports, s.cfg.readonly, ublk_recovery, s.threads,
                             s.cfg.verbose, run ? NULL : stdout, err,
                             sizeof err))) {
    fprintf (stderr, PROG ": %s\n", err);
    ret = 1;
    goto out;
  }
  for (const struct server_cfg *e = &s.cfg; e && listening; e = e->next)
    if (!exports.named)
      log_msg ("serving %s, size %" PRIu64 "%s on %s (%u threads); %s",
               e->description, e->size, e->readonly ? ", read-only" : "",
               where, s.threads, s4k_dev_store_info (e->dev));
    else
      log_msg ("serving export %s%s: %s, size %" PRIu64 "%s on %s (%u "
               "threads); %s", e->export_name, e == &s.cfg ? " (default)" : "",
               e->description, e->size, e->readonly ? ", read-only" : "",
               where, s.threads, s4k_dev_store_info (e->dev));
  if (pidfile && captive_write_pidfile (pidfile) == -1) {
    ret = 1;
    goto out;
  }
  pid_t child = -1;
  if (run && (child = start_run (run, &s, unix_path, &exports, front,
                                         ufront)) == -1) {
    ret = 1;
    goto out;
  }

  if (listening)
    ret = serve (&s) == 0 ? 0 : 1;
  else {
    int sig;
    const char *what = scsi && ublk ? "SCSI and ublk disks"
                       : scsi ? "SCSI disks" : "ublk devices";
    log_msg ("serving %zu export%s as %s", exports.n,
             exports.n == 1 ? "" : "s", what);
    sigwait (&s.stop_signals, &sig);
    log_msg ("%s: removing the %s", sig == SIGCHLD ? "--run: the command "
             "ended" : strsignal (sig), what);
    for (const struct server_cfg *e = &s.cfg; e; e = e->next)
      s4k_dev_stop (e->dev);    /* as serve does: waits end from now */
  }
  if (child != -1) {
    /* Before the disks go: the command no longer uses them. */
    int st = captive_finish (child, s.shutdown_grace);
    ret = ret ? ret : st;         /* the server's own failure first */
  }
out:
  for (unsigned i = 0; i < s.nlisten; i++)
    close (s.listen_fd[i]);
  scsi_stop (front);
  ublk_stop (ufront);
  if (unix_path)
    s4k_unix_unlink (unix_path, &unix_sock);
  if (private_socket && s.nlisten)
    captive_private_remove (private_path);
  for (const struct server_cfg *e = &s.cfg; e; e = e->next) {
    s4k_dev_stop (e->dev);      /* (again) the flush at exit must end */
    int r = s4k_flush (e->dev);
    if (r < 0) {
      log_msg ("flush at exit: %s", s4k_strerror (-r));
      ret = ret ? ret : 1;
    }
  }
  if (stats_file && write_stats (stats_file, &s) == -1)
    ret = ret ? ret : 1;
  s4k_exports_close (&exports);
  free (cfgs);
  return ret;
}
