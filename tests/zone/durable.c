/* SPDX-License-Identifier: BSD-3-Clause */
/* Zone state with file= and write-cache=true (issue 33): the records of
 * FILE.sect4k-zones hold the durable pointers, so a restart finds zones
 * that agree with the data file.  A child runs a seeded sequence of
 * writes (some FUA), flushes and zone operations on a cached device, is
 * killed with SIGKILL (the cache goes with it, as at a cut keeping
 * nothing unflushed), and the zones reopened equal a model of the
 * durable pointers (docs/zoned.md "Power cuts": a flush makes every
 * pointer durable, a FUA write its zone's to its end, CLOSE, FINISH and
 * RESET their zones', OPEN and a cached write nothing), every zone
 * closed; below each pointer the acknowledged data, above it zeroes.
 * Then a power cut through the control socket and a restart: the zones
 * are the cut report's "after" ones. */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sect4k/sect4k.h"
#include "sect4k/zone.h"
#include "tap.h"
#include "devrig.h"
#include "killrig.h"


#define KZONES 32
#define KLBAS 2048
/* The cache holds the whole drive: nothing is destaged unasked. */
#define KKEYS "size=32M model=512e zoned=host-managed zone-size=1M " \
              "zone-conventional=2 zone-max-open=4 zone-max-active=6 " \
              "write-cache=true write-cache-size=64M"

struct step {
  int kind;             /* 0 write, 1 open, 2 close, 3 finish, 4 reset, 5 flush */
  bool all, fua;
  uint32_t zone, blocks;
};

static struct step
step_of (uint64_t seed, uint64_t i)
{
  uint64_t s = (seed ^ (i * 0x9E3779B97F4A7C15ull)) | 1;
  for (int k = 0; k < 4; k++)
    rng (&s);
  const unsigned r = rng (&s) % 100;
  struct step st = { 0 };
  st.zone = 2 + rng (&s) % (KZONES - 2);
  st.kind = r < 78 ? 0 : r < 83 ? 1 : r < 88 ? 2 : r < 92 ? 3 : r < 96 ? 4
          : 5;
  st.all = st.kind && st.kind < 5 && rng (&s) % 8 == 0;
  st.fua = rng (&s) % 6 == 0;
  st.blocks = 1 + rng (&s) % 16;
  return st;
}

/* The model: the zones, each zone's reset epoch and durable pointer. */
struct model {
  struct s4k_zones *z;
  uint32_t epoch[KZONES];
  uint64_t dp[KZONES];
  uint64_t written[KZONES];     /* the end of the data since the reset */
};

static void
durable_all (struct model *m)
{
  s4k_zones_wps (m->z, m->dp);
}

/* Step st on the device d, or on the model m: 0 or a zone error. */
static int
run_step (struct model *m, struct s4k_dev *d, const struct step *st,
          char *buf, uint32_t *epoch)
{
  struct s4k_zones *z = d ? s4k_dev_zones (d) : m->z;
  const uint64_t start = (uint64_t) st->zone * KLBAS;
  int r;
  if (st->kind == 5) {
    if (d)
      return s4k_flush (d) ? -1 : 0;
    durable_all (m);
    return 0;
  }
  if (st->kind == 0) {
    struct s4k_zone_desc zd;
    uint64_t listed;
    s4k_zones_report (z, start, 0, true, &zd, 1, &listed);
    uint64_t lba = zd.cond == S4K_ZC_FULL ? start : zd.wp;
    uint64_t n = (uint64_t) st->blocks * 8;
    if (lba + n > start + KLBAS)
      n = start + KLBAS - lba;
    if (d) {
      fill (buf, lba, n, epoch[st->zone]);
      r = s4k_write (d, buf, n * 512, lba * 512, st->fua ? S4K_FUA : 0);
      return r ? s4k_zone_err_of (r) : 0;
    }
    r = -s4k_zones_write (m->z, lba, n);
    if (r == 0)
      m->written[st->zone] = lba + n;
    if (r == 0 && st->fua)
      m->dp[st->zone] = lba + n;
    return r;
  }
  static const enum s4k_zone_op ops[] = {
    0, S4K_ZOP_OPEN, S4K_ZOP_CLOSE, S4K_ZOP_FINISH, S4K_ZOP_RESET };
  if (d) {
    r = s4k_dev_zone_op (d, ops[st->kind], start, st->all);
    r = r ? s4k_zone_err_of (r) : 0;
  }
  else {
    r = -s4k_zones_op (m->z, ops[st->kind], start, st->all);
    /* What the device makes durable (lib/dev/dev_sync.c zone_sync): an
     * ALL operation syncs the whole drive. */
    if (r == 0 && st->kind >= 2) {
      uint64_t now[KZONES];
      s4k_zones_wps (m->z, now);
      for (uint32_t i = 2; i < KZONES; i++)
        if (st->all || i == st->zone)
          m->dp[i] = now[i];
    }
  }
  if (r == 0 && st->kind == 4)
    for (uint32_t i = 2; i < KZONES; i++)
      if (st->all || i == st->zone) {
        epoch[i]++;
        if (m)
          m->written[i] = (uint64_t) i * KLBAS;
      }
  return r;
}

static void
child (uint64_t seed, const char *k, int wfd)
{
  struct s4k_dev *d;
  char err[512];
  if (try_open (&d, k, err, sizeof err)) {
    fprintf (stderr, "child: %s\n", err);
    _exit (1);
  }
  uint32_t epoch[KZONES] = { 0 };
  char *buf = malloc (16 * 4096);
  for (uint64_t i = 0; ; i++) {
    struct step st = step_of (seed, i);
    struct ack a = { i, run_step (NULL, d, &st, buf, epoch) };
    if (write (wfd, &a, sizeof a) != sizeof a)
      _exit (2);
  }
}

static void
replay (uint64_t seed, uint64_t n, struct model *m, const struct ack *acks)
{
  struct s4k_config c;
  char err[256];
  if (configure (&c, KKEYS, err, sizeof err))
    bail ("%s", err);
  memset (m, 0, sizeof *m);
  if (s4k_zones_new (&m->z, &c.zone, &c.geom))
    bail ("zones_new");
  durable_all (m);
  for (uint32_t i = 0; i < KZONES; i++)
    m->written[i] = (uint64_t) i * KLBAS;
  for (uint64_t i = 0; i < n; i++) {
    struct step st = step_of (seed, i);
    int r = run_step (m, NULL, &st, NULL, m->epoch);
    if (acks && r != acks[i].result)
      bail ("seed %llu step %llu: the device answered %d, the model %d",
            (unsigned long long) seed, (unsigned long long) i,
            acks[i].result, r);
  }
}

/* Whether zone i reopened as dp leaves it: closed (or empty, full). */
static bool
zone_is (const struct s4k_zone_desc *g, uint32_t i, uint64_t dp)
{
  const uint64_t start = (uint64_t) i * KLBAS;
  if (i < 2)
    return g->cond == S4K_ZC_NOT_WP;
  if (dp == start)
    return g->cond == S4K_ZC_EMPTY && g->wp == start;
  if (dp == start + KLBAS)
    return g->cond == S4K_ZC_FULL;
  return g->cond == S4K_ZC_CLOSED && g->wp == dp;
}

/* Zone i below dp: the data written since its reset, zeroes above
 * (a finished zone's end); above dp zeroes, if above. */
static int
check_data (struct s4k_dev *d, uint32_t i, uint64_t dp, uint64_t written,
            uint32_t epoch, bool above, char *buf, char *want)
{
  const uint64_t start = (uint64_t) i * KLBAS;
  if (s4k_read (d, buf, KLBAS * 512, start * 512) != 0)
    return -1;
  memset (want, 0, KLBAS * 512);
  fill (want, start, (written < dp ? written : dp) - start, epoch);
  if (memcmp (buf, want, (dp - start) * 512) != 0)
    return 1;
  memset (want, 0, KLBAS * 512);
  if (above && memcmp (buf + (dp - start) * 512, want,
                       (start + KLBAS - dp) * 512) != 0)
    return 2;
  return 0;
}

static bool
kill_round (uint64_t seed, uint64_t kill_after, int *matched_in_flight)
{
  char name[64];
  snprintf (name, sizeof name, "kill-%llu.img", (unsigned long long) seed);
  const char *k = keys (KKEYS, name);
  size_t n;
  struct ack *acks = acks_until_kill (child, seed, k, kill_after, &n);

  /* Acknowledged: steps [0, n); in flight: step n. */
  struct model a, b;
  replay (seed, n, &a, acks);
  replay (seed, n + 1, &b, NULL);
  const struct step fl = step_of (seed, n);
  struct s4k_dev *d;
  char err[512];
  if (try_open (&d, k, err, sizeof err))
    bail ("reopen: %s", err);
  struct s4k_zone_desc got[KZONES];
  uint64_t listed;
  s4k_zones_report (s4k_dev_zones (d), 0, 0, true, got, KZONES, &listed);
  bool good = true;
  char *buf = malloc (KLBAS * 512), *want = malloc (KLBAS * 512);
  for (uint32_t i = 0; i < KZONES && good; i++) {
    const bool in_flight = fl.kind == 5 ||
                           (fl.kind != 1 && (fl.all || fl.zone == i));
    const bool is_a = zone_is (&got[i], i, a.dp[i]);
    const bool is_b = in_flight && zone_is (&got[i], i, b.dp[i]);
    if (!is_a && !is_b) {
      diag ("seed %llu, %zu steps acknowledged: zone %u reopened cond %x "
            "wp %lld, the durable pointer %llu (in flight %llu)",
            (unsigned long long) seed, n, i, got[i].cond,
            got[i].wp == UINT64_MAX ? -1LL : (long long) got[i].wp,
            (unsigned long long) a.dp[i], (unsigned long long) b.dp[i]);
      good = false;
      break;
    }
    if (is_b && !is_a)
      (*matched_in_flight)++;
    if (i < 2)
      continue;
    /* A reset in flight may have zeroed some of the zone; a write in
     * flight may have put some of its data above the pointer. */
    if (in_flight && fl.kind == 4)
      continue;
    const struct model *m = is_a ? &a : &b;
    int c = check_data (d, i, m->dp[i], m->written[i], m->epoch[i],
                        !in_flight, buf, want);
    if (c) {
      diag ("seed %llu: zone %u: %s", (unsigned long long) seed, i,
            c == 1 ? "the data below the durable pointer differs"
            : c == 2 ? "data above the durable pointer" : "read failed");
      good = false;
    }
  }
  memset (buf, 7, 4096);
  if (good && (s4k_dev_zone_op (d, S4K_ZOP_RESET, 0, true) != 0 ||
               s4k_write (d, buf, 4096, 2 * KLBAS * 512, 0) != 0)) {
    diag ("seed %llu: a reset and a write after the restart failed",
          (unsigned long long) seed);
    good = false;
  }
  s4k_dev_close (d);
  s4k_zones_free (a.z);
  s4k_zones_free (b.z);
  free (acks);
  free (buf);
  free (want);
  if (good)
    diag ("seed %llu: killed after %zu acknowledged steps: the zones "
          "reopened are the durable ones", (unsigned long long) seed, n);
  return good;
}

static void
test_kill (void)
{
  const char *env = getenv ("SECT4K_ZONE_KILL_ROUNDS");
  const int rounds = env ? atoi (env) : 8;
  bool good = true;
  int inflight = 0;
  for (int i = 0; i < rounds && good; i++)
    good = kill_round (2000 + i, 150 + 170 * i, &inflight);
  ok (good, "SIGKILL with write-cache=true in %d rounds: every zone "
      "reopens at its durable pointer, closed, the acknowledged durable "
      "data below it, zeroes above", rounds);
  diag ("%d zones matched the step in flight", inflight);
}

/* Unflushed writes and a restart: the zones as before them. */
static void
test_unflushed (void)
{
  const char *k = keys (KKEYS, "u.img");
  struct s4k_dev *d = open_dev (k);
  char *buf = calloc (1, 65536);
  const uint64_t z2 = 2 * KLBAS, z3 = 3 * KLBAS, z4 = 4 * KLBAS;
  memset (buf, 1, 65536);
  int r = s4k_write (d, buf, 8192, z2 * 512, 0);
  r |= s4k_flush (d);
  r |= s4k_write (d, buf, 4096, (z2 + 16) * 512, 0);       /* cached */
  r |= s4k_write (d, buf, 4096, z3 * 512, 0);
  r |= s4k_write (d, buf, 4096, (z3 + 8) * 512, S4K_FUA);  /* z3 to 16 */
  r |= s4k_write (d, buf, 4096, z4 * 512, 0);
  r |= s4k_dev_zone_op (d, S4K_ZOP_CLOSE, z4, false);      /* z4 at 8 */
  r |= s4k_write (d, buf, 4096, (z4 + 8) * 512, 0);        /* cached */
  if (r)
    bail ("writes");
  /* What a SIGKILL leaves: the records as stored (a shared mapping). */
  char rec[32 * 8];
  char path[300];
  snprintf (path, sizeof path, "%s/u.img.sect4k-zones", dir);
  FILE *f = fopen (path, "r");
  if (!f || fseek (f, 4096, SEEK_SET) || fread (rec, 8, 32, f) != 32)
    bail ("read %s", path);
  fclose (f);
  uint64_t r2, r3, r4;
  memcpy (&r2, rec + 2 * 8, 8);
  memcpy (&r3, rec + 3 * 8, 8);
  memcpy (&r4, rec + 4 * 8, 8);
  /* closed (4) at 16, 16, 8: the durable pointers, not 24, 16, 16. */
  ok (r2 == 0x5A00040000000010ull && r3 == 0x5A00040000000010ull &&
      r4 == 0x5A00040000000008ull, "the records hold the durable "
      "pointers: %016llx %016llx %016llx", (unsigned long long) r2,
      (unsigned long long) r3, (unsigned long long) r4);
  r = s4k_flush (d);
  f = fopen (path, "r");
  if (!f || fseek (f, 4096 + 2 * 8, SEEK_SET) || fread (&r2, 8, 1, f) != 1)
    bail ("read %s", path);
  fclose (f);
  ok (r == 0 && r2 == 0x5A00040000000018ull, "after a flush: %016llx",
      (unsigned long long) r2);
  s4k_dev_close (d);
  free (buf);
}

static void
ctl (const char *path, const char *line, char *out, size_t len)
{
  struct sockaddr_un sa = { .sun_family = AF_UNIX };
  snprintf (sa.sun_path, sizeof sa.sun_path, "%s", path);
  int fd = socket (AF_UNIX, SOCK_STREAM, 0);
  if (fd == -1 || connect (fd, (struct sockaddr *) &sa, sizeof sa) == -1)
    bail ("connect %s", path);
  if (write (fd, line, strlen (line)) != (ssize_t) strlen (line) ||
      write (fd, "\n", 1) != 1)
    bail ("write");
  size_t have = 0;
  for (;;) {
    ssize_t r = read (fd, out + have, len - 1 - have);
    if (r <= 0)
      break;
    have += r;
    out[have] = '\0';
    if ((have >= 3 && strcmp (out + have - 3, "ok\n") == 0) ||
        (strncmp (out, "error: ", 7) == 0 && out[have - 1] == '\n'))
      break;
  }
  out[have] = '\0';
  close (fd);
}

/* The number after "key": in s, or -1. */
static long long
field (const char *s, const char *key)
{
  const char *p = strstr (s, key);
  return p ? strtoll (p + strlen (key) + 2, NULL, 10) : -1;
}

/* A cut through the control socket, then a restart: the zones are the
 * report's "after" ones. */
static void
test_cut (void)
{
  char sock[100], k[900], out[16384];
  snprintf (sock, sizeof sock, "%.90s/ctl", dir);
  for (unsigned seed = 1; seed <= 6; seed++) {
    snprintf (k, sizeof k, "%s seed=%u control=%s", KKEYS, seed, sock);
    char name[32];
    snprintf (name, sizeof name, "cut-%u.img", seed);
    const char *kk = keys (k, name);
    struct s4k_dev *d = open_dev (kk);
    s4k_dev_start (d);
    char *buf = malloc (65536);
    uint64_t s = seed * 7919 | 1;
    for (int i = 0; i < 60; i++) {
      const uint32_t z = 2 + rng (&s) % 6;
      struct s4k_zone_desc zd;
      uint64_t listed;
      s4k_zones_report (s4k_dev_zones (d), z * KLBAS, 0, true, &zd, 1,
                        &listed);
      const uint64_t n = 8 * (1 + rng (&s) % 8);
      if (zd.cond == S4K_ZC_FULL || zd.wp + n > (z + 1) * KLBAS)
        continue;
      fill (buf, zd.wp, n, 0);
      const unsigned r = rng (&s) % 20;
      if (s4k_write (d, buf, n * 512, zd.wp * 512, r == 0 ? S4K_FUA : 0))
        bail ("write");
      if (r == 1)
        s4k_flush (d);
      if (r == 2)
        s4k_dev_zone_op (d, S4K_ZOP_CLOSE, z * KLBAS, false);
    }
    ctl (sock, "power-cut", out, sizeof out);
    struct s4k_zone_desc before[KZONES], after[KZONES];
    uint64_t listed;
    s4k_zones_report (s4k_dev_zones (d), 0, 0, true, before, KZONES, &listed);
    s4k_dev_close (d);
    /* Reopened without the control socket (its path is reused). */
    d = open_dev (keys (KKEYS, name));
    s4k_zones_report (s4k_dev_zones (d), 0, 0, true, after, KZONES, &listed);
    bool good = strstr (out, "\"zones\"") != NULL;
    int listed_zones = 0;
    for (uint32_t i = 0; i < KZONES && good; i++) {
      good = after[i].cond == before[i].cond &&
             (after[i].cond != S4K_ZC_CLOSED || after[i].wp == before[i].wp);
      char key[64];
      snprintf (key, sizeof key, "{\"zone\": %u,", i * KLBAS);
      const char *p = strstr (out, key);
      if (good && p) {
        listed_zones++;
        long long wa = field (p, "\"wp_after\"");
        good = wa >= 0 && (after[i].cond == S4K_ZC_FULL
                           ? (uint64_t) wa == (i + 1ull) * KLBAS
                           : (uint64_t) wa == after[i].wp);
      }
      if (!good)
        diag ("seed %u zone %u: after the restart cond %x wp %lld", seed, i,
              after[i].cond, (long long) after[i].wp);
    }
    ok (good && listed_zones > 0, "seed %u: a power cut through the control "
        "socket, then a restart: the zones are the report's after ones (%d "
        "listed)", seed, listed_zones);
    /* Nothing unflushed since the restart: a second cut changes no zone
     * (the fault layer starts from the zones the file gave). */
    char *rep = NULL;
    struct s4k_zone_desc again[KZONES];
    bool kept = s4k_dev_power_cut (d, -1, &rep) == 0;
    s4k_zones_report (s4k_dev_zones (d), 0, 0, true, again, KZONES, &listed);
    for (uint32_t i = 0; i < KZONES && kept; i++)
      kept = again[i].cond == after[i].cond && again[i].wp == after[i].wp;
    ok (kept, "seed %u: a cut right after the restart moves no pointer",
        seed);
    free (rep);
    if (!good)
      diag ("the report: %.*s", (int) strcspn (out, "\n"), out);
    s4k_dev_close (d);
    free (buf);
  }
}

int
main (void)
{
  const char *tmp = getenv ("TMPDIR");
  snprintf (dir, sizeof dir, "%s/s4k-zone-durable-XXXXXX",
            tmp ? tmp : "/tmp");
  if (!mkdtemp (dir))
    bail ("mkdtemp");
  test_unflushed ();
  test_cut ();
  test_kill ();
  char cmd[300];
  snprintf (cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system (cmd) != 0)
    diag ("could not remove %s", dir);
  return done_testing ();
}
