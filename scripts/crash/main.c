/* SPDX-License-Identifier: BSD-3-Clause */
/* sect4k-crash: the crash states of a write log, each served over NBD to a
 * checker (issue 23; the model and the options: scripts/crash/
 * sect4k-crash.pod).
 *
 * One process does everything: it reads the log (lib/wlog.c), builds the
 * durable image of each crash point as an overlay of physical sectors
 * over the base, and serves every state from memory through a small NBD
 * server of its own on a Unix socket, while the checker runs.  A state is
 * the crash point's overlay plus the few sectors it changes, so it costs
 * what it changes, not the device's size, and nothing is copied or
 * restarted between states.  Its files: crash.h. */
#include "crash.h"

void
die (const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  fprintf (stderr, PROG ": ");
  vfprintf (stderr, fmt, ap);
  fputc ('\n', stderr);
  va_end (ap);
  exit (2);
}

void *
xcalloc (size_t n, size_t size)
{
  void *p = calloc (n ? n : 1, size ? size : 1);
  if (!p)
    die ("out of memory");
  return p;
}

void *
xrealloc (void *p, size_t n)
{
  if (!(p = realloc (p, n ? n : 1)))
    die ("out of memory");
  return p;
}

/* ---- options ----------------------------------------------------------- */

const char *log_path, *base_path, *until_mark, *state_id, *output,
  *report_path, *geometry_arg;
uint64_t states_limit = 256;     /* per crash point; 0: all */
enum s4k_torn torn = S4K_TORN_SECTOR;
uint64_t seed;
double timeout_s = 60;
char **checker;
const char *const torn_names[] =
  { "none", "sector", "unreadable", "garbage", "zero" };
/* ---- main -------------------------------------------------------------- */

static void
usage (FILE *fp)
{
  fprintf (fp,
"Usage: " PROG " LOG --geometry G [--base IMAGE] [--until MARK]\n"
"         [--states N|all] [--torn POLICY] [--seed S] [--timeout SECS]\n"
"         [--state ID [--output IMAGE]] [--report FILE.json]\n"
"         -- CHECKER ARGS... | --output DIR\n"
"Every crash state of the write LOG (write-log=), each served over NBD to\n"
"CHECKER with $SECT4K_URI and $SECT4K_STATE; exit 0 means consistent.\n"
"  --geometry G    512n, 512e, 512e-xp, 4kn and/or logical=, physical=,\n"
"                  alignment-offset=, size= (comma-separated; size from\n"
"                  the log or --base if not given)\n"
"  --base IMAGE    the device before the log (default: zeroes)\n"
"  --until MARK    stop at the log's mark MARK\n"
"  --states N|all  states per crash point: all of them if at most N,\n"
"                  else N seeded samples (default 256)\n"
"  --torn POLICY   none, sector, unreadable, garbage or zero: what an\n"
"                  interrupted physical sector holds (default sector)\n"
"  --seed S        the samples' seed (default 0)\n"
"  --timeout SECS  per state; 0: none (default 60)\n"
"  --state ID      only that state: run CHECKER on it, write it with\n"
"                  --output IMAGE, or without either serve it until\n"
"                  interrupted\n"
"  --output DIR    without --state: every state's image to DIR/ID\n"
"                  (unreadable LBAs in DIR/ID.eio), no checker\n"
"  --report FILE   the JSON report (docs/crash-report.schema.json)\n"
"See sect4k-crash(1).\n");
}

static void
parse_geometry_arg (void)
{
  struct s4k_config c;
  char err[256];
  s4k_config_init (&c);
  char *s = strdup (geometry_arg), *save = NULL;
  for (char *tok = strtok_r (s, ",", &save); tok;
       tok = strtok_r (NULL, ",", &save)) {
    char *eq = strchr (tok, '=');
    const char *key = eq ? tok : "model", *val = eq ? eq + 1 : tok;
    if (eq)
      *eq = '\0';
    if (strcmp (key, "model") && strcmp (key, "size") &&
        strcmp (key, "logical") && strcmp (key, "physical") &&
        strcmp (key, "alignment-offset") && strcmp (key, "lowest-aligned"))
      die ("--geometry %s: %s= is not a geometry key (model, size, "
           "logical, physical, alignment-offset, lowest-aligned)",
           geometry_arg, key);
    if (s4k_config_set (&c, key, val, err, sizeof err))
      die ("--geometry %s: %s", geometry_arg, err);
  }
  free (s);
  const struct s4k_wlog_info *info = s4k_wlog_info (reader);
  if (!c.have_size) {
    uint64_t size = info->known ? info->geom.size : base_size;
    if (!size)
      die ("--geometry %s: no size=, and neither the log nor --base gives "
           "one", geometry_arg);
    char v[32];
    snprintf (v, sizeof v, "%" PRIu64, size);
    s4k_config_set (&c, "size", v, err, sizeof err);
  }
  if (s4k_config_finish (&c, err, sizeof err))
    die ("--geometry %s: %s", geometry_arg, err);
  g = c.geom;
  L = g.logical;
  P = g.physical;
  if (info->known && (info->geom.size != g.size ||
                      info->geom.logical != g.logical ||
                      info->geom.physical != g.physical ||
                      info->geom.alignment != g.alignment))
    die ("%s: the log records another geometry (size=%" PRIu64
         " logical=%" PRIu32 " physical=%" PRIu32 " alignment-offset=%"
         PRIu32 ") than --geometry %s (size=%" PRIu64 " logical=%" PRIu32
         " physical=%" PRIu32 " alignment-offset=%" PRIu32 ")", log_path,
         info->geom.size, info->geom.logical, info->geom.physical,
         info->geom.alignment, geometry_arg, g.size, L, P, g.alignment);
  if (base_size > g.size)
    die ("--base %s: %" PRIu64 " bytes, larger than the device (%" PRIu64
         ")", base_path, base_size, g.size);
}

/* Writes the current state's image to path; its unreadable sectors hold
 * their old contents, said on stderr, or (eio) listed as LBA ranges in
 * path.eio. */
void
write_output (const char *path, bool eio)
{
  int fd = open (path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  FILE *list = NULL;
  if (fd < 0 || ftruncate (fd, g.size))
    die ("--output %s: %s", path, strerror (errno));
  unsigned char *buf = xcalloc (1, P);
  uint64_t nsec = s4k_sector_count (&g), unreadable = 0;
  for (uint64_t k = 0; k < nsec; k++) {
    uint64_t s, e;
    sector_range (k, &s, &e);
    bool touched = (base_fd >= 0 && s < base_size) ||
                   map_find (&flushed, k) || map_find (&cpmap, k) ||
                   state_sector (k);
    if (!touched)
      continue;
    if (read_sector (k, buf) == -EIO) {
      unreadable++;
      read_durable (k, buf);
      if (eio) {
        if (!list) {
          char name[PATH_MAX];
          snprintf (name, sizeof name, "%s.eio", path);
          if (!(list = fopen (name, "w")))
            die ("--output %s: %s", name, strerror (errno));
        }
        fprintf (list, "%" PRIu64 "-%" PRIu64 "\n", s / L, (e - 1) / L);
      }
      else
        fprintf (stderr, PROG ": --output %s: physical sector %" PRIu64
                 " (LBAs %" PRIu64 "-%" PRIu64 ") is unreadable in this "
                 "state; the image holds its old contents\n", path, k,
                 s / L, (e - 1) / L);
    }
    if (pwrite (fd, buf, e - s, s) != (ssize_t) (e - s))
      die ("--output %s: %s", path, strerror (errno));
  }
  if (close (fd) || (list && fclose (list)))
    die ("--output %s: %s", path, strerror (errno));
  free (buf);
}

int
main (int argc, char **argv)
{
  static const struct option opts[] = {
    { "geometry", required_argument, NULL, 'g' },
    { "base", required_argument, NULL, 'b' },
    { "until", required_argument, NULL, 'u' },
    { "states", required_argument, NULL, 'n' },
    { "torn", required_argument, NULL, 't' },
    { "seed", required_argument, NULL, 's' },
    { "timeout", required_argument, NULL, 'T' },
    { "state", required_argument, NULL, 'i' },
    { "output", required_argument, NULL, 'o' },
    { "report", required_argument, NULL, 'r' },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
  };
  int ch;
  char *end;
  /* Everything after the first -- is the checker's. */
  for (int i = 1; i < argc; i++)
    if (strcmp (argv[i], "--") == 0) {
      checker = argv[i + 1] ? &argv[i + 1] : NULL;
      argv[i] = NULL;
      argc = i;
      break;
    }
  while ((ch = getopt_long (argc, argv, "h", opts, NULL)) != -1) {
    switch (ch) {
    case 'g': geometry_arg = optarg; break;
    case 'b': base_path = optarg; break;
    case 'u': until_mark = optarg; break;
    case 'n':
      if (strcmp (optarg, "all") == 0)
        states_limit = 0;
      else if ((states_limit = strtoull (optarg, &end, 10)) == 0 || *end)
        die ("--states %s: a positive number or all", optarg);
      break;
    case 't': {
      size_t i;
      for (i = 0; i < 5 && strcmp (optarg, torn_names[i]); i++)
        ;
      if (i == 5)
        die ("--torn %s: one of none, sector, unreadable, garbage, zero",
             optarg);
      torn = i;
      break;
    }
    case 's':
      errno = 0;
      seed = strtoull (optarg, &end, 0);
      if (errno || *end || end == optarg)
        die ("--seed %s: not a number", optarg);
      break;
    case 'T':
      timeout_s = strtod (optarg, &end);
      if (*end || end == optarg || timeout_s < 0)
        die ("--timeout %s: a number of seconds (0: none)", optarg);
      break;
    case 'i': state_id = optarg; break;
    case 'o': output = optarg; break;
    case 'r': report_path = optarg; break;
    case 'h': usage (stdout); return 0;
    default: usage (stderr); return 2;
    }
  }
  if (optind < argc)
    log_path = argv[optind++];
  if (optind < argc)
    die ("%s: unexpected after LOG (the checker goes after --)",
         argv[optind]);
  if (!log_path)
    die ("no LOG given (" PROG " --help)");
  if (!geometry_arg)
    die ("--geometry is required (e.g. --geometry 512e)");
  if (!checker && !state_id && !output)
    die ("no checker given (" PROG " LOG --geometry G -- CHECKER ARGS...)");
  if (output && !state_id) {
    struct stat st;
    if (checker)
      die ("--output %s: without --state it writes every state to a "
           "directory, instead of a checker", output);
    if (stat (output, &st))
      die ("--output %s: %s", output, strerror (errno));
    if (!S_ISDIR (st.st_mode))
      die ("--output %s: not a directory (without --state it writes every "
           "state there)", output);
  }
  char err[512];
  if (s4k_wlog_open (&reader, log_path, 0, err, sizeof err))
    die ("%s", err);
  if (base_path) {
    struct stat st;
    if ((base_fd = open (base_path, O_RDONLY | O_CLOEXEC)) < 0 ||
        fstat (base_fd, &st))
      die ("--base %s: %s", base_path, strerror (errno));
    base_size = st.st_size;
  }
  parse_geometry_arg ();
  read_log ();
  signal (SIGPIPE, SIG_IGN);
  catch_signals ();
  is_tty = isatty (2);

  if (state_id) {
    state_parse (&cur, state_id);
    for (size_t i = 0; i <= cur.cpi; i++)
      enter_cp (&cps[i]);
    state_images (&cur);
    char *canon = state_id_of (&cur);
    if (output) {
      write_output (output, false);
      fprintf (stderr, PROG ": state %s written to %s\n", canon, output);
    }
    if (!checker) {
      if (output) {
        free (canon);
        return 0;
      }
      open_socket ();
      printf ("nbd+unix:///?socket=%s\n", sock_path);
      fflush (stdout);
      /* Serve it until interrupted (catch_signals): the checker is
       * whoever connects. */
      char *fake[] = { "sleep", "infinity", NULL };
      checker = fake;
      timeout_s = 0;
      for (;;)
        run_checker (canon);
    }
    open_socket ();
    struct run r = run_checker (canon);
    char *why = reason_of (r);
    printf (PROG ": state %s: %s%s%s\n", canon, result_names[r.result],
            why ? ": " : "", why ? why : "");
    free (why);
    free (canon);
    return r.result == R_CONSISTENT ? 0 : r.result == R_FAILED ? 1 : 3;
  }

  open_socket ();
  char *repbuf = NULL, *sumbuf = NULL;
  size_t replen = 0, sumlen = 0;
  rep_fp = open_memstream (&repbuf, &replen);
  sum_fp = open_memstream (&sumbuf, &sumlen);
  if (!rep_fp || !sum_fp)
    die ("out of memory");
  const double t0 = now_s ();
  for (size_t i = 0; i < ncps; i++)
    explore_cp (i);
  const double secs = now_s () - t0;
  progress (&tally, true);
  fclose (rep_fp);
  fclose (sum_fp);

  FILE *out = stdout;
  if (report_path && !(out = fopen (report_path, "w")))
    die ("--report %s: %s", report_path, strerror (errno));
  if (report_path || 1) {
    FILE *fp = report_path ? out : NULL;
    if (fp) {
      fprintf (fp, "{\"schema\": \"sect4k-crash/1\", \"log\": ");
      json_str (fp, log_path);
      fprintf (fp, ", \"log_entries\": %" PRIu64 ",\n \"geometry\": "
               "{\"size\": %" PRIu64 ", \"logical\": %" PRIu32 ", "
               "\"physical\": %" PRIu32 ", \"alignment_offset\": %" PRIu32
               "},\n \"base\": ", log_entries, g.size, L, P, g.alignment);
      if (base_path)
        json_str (fp, base_path);
      else
        fprintf (fp, "null");
      fprintf (fp, ", \"until\": ");
      if (until_mark)
        json_str (fp, until_mark);
      else
        fprintf (fp, "null");
      fprintf (fp, ", \"torn\": \"%s\", \"seed\": %" PRIu64 ", "
               "\"states_per_crash_point\": ", torn_names[torn], seed);
      if (states_limit)
        fprintf (fp, "%" PRIu64, states_limit);
      else
        fprintf (fp, "\"all\"");
      fprintf (fp, ", \"timeout\": %g,\n \"checker\": [", timeout_s);
      for (char **a = checker; a && *a; a++) {
        fprintf (fp, "%s", a == checker ? "" : ", ");
        json_str (fp, *a);
      }
      fprintf (fp, "],\n \"crash_points\": %zu,\n \"summary\": {\"states\": "
               "%" PRIu64 ", \"checked\": %" PRIu64 ", \"consistent\": %"
               PRIu64 ", \"failed\": %" PRIu64 ", \"not_checked\": %" PRIu64
               "},\n \"states\": [%s\n ]}\n", ncps, tally.states,
               tally.checked, tally.consistent, tally.failed,
               tally.not_checked, repbuf);
      if (fclose (fp))
        die ("--report %s: %s", report_path, strerror (errno));
    }
  }
  printf (PROG ": %s, geometry logical=%" PRIu32 " physical=%" PRIu32
          " alignment-offset=%" PRIu32, log_path, L, P, g.alignment);
  /* The prefix rule applies: say so. */
  if (zoned)
    printf (", %s zones of %" PRIu64 " bytes (sequential from "
            "LBA %" PRIu64 ")", aware ? "host-aware" : "host-managed",
            zone_bytes, zone_seq_start / L);
  printf (", torn=%s: %zu crash points, %" PRIu64 " states in %.1fs",
          torn_names[torn], ncps, tally.states, secs);
  if (checker)
    printf (": %" PRIu64 " checked (%" PRIu64 " consistent, %" PRIu64
            " failed), %" PRIu64 " not checked\n", tally.checked,
            tally.consistent, tally.failed, tally.not_checked);
  else
    printf (", written to %s\n", output);
  fwrite (sumbuf, 1, sumlen, stdout);
  free (repbuf);
  free (sumbuf);
  return tally.failed ? 1 : tally.not_checked ? 3 : 0;
}
