/* SPDX-License-Identifier: BSD-3-Clause */
/* The timing model (lib/timing.c): durations, presets, the cost of a
 * request from the geometry, the drive's queue, and the statistics it
 * feeds.  Pure arithmetic on a virtual clock: no sleeping, no wall time. */
#include <errno.h>
#include <string.h>

#include "sect4k/sect4k.h"
#include "tap.h"

static struct s4k_config
config (const char *const *kv)
{
  struct s4k_config c;
  char err[256];
  s4k_config_init (&c);
  for (; kv[0]; kv += 2)
    if (s4k_config_set (&c, kv[0], kv[1], err, sizeof err))
      bail ("%s", err);
  if (s4k_config_finish (&c, err, sizeof err))
    bail ("%s", err);
  return c;
}

static uint64_t
service (const struct s4k_timing_cost *c)
{
  return c->base + c->transfer + c->rmw;
}

int
main (void)
{
  /* ---- durations -------------------------------------------------------- */
  static const struct { const char *s; uint64_t ns; } good[] = {
    { "500us", 500000 }, { "2ms", 2000000 }, { "1.5ms", 1500000 },
    { "0.25", 250000000 }, { "3s", 3000000000u }, { "10ns", 10 },
    { "0", 0 }, { "8.333333ms", 8333333 },
  };
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    uint64_t ns = 1;
    int r = s4k_parse_duration (good[i].s, &ns);
    ok (r == 0 && ns == good[i].ns, "duration %s = %" PRIu64 " ns",
        good[i].s, good[i].ns);
  }
  static const char *const bad[] = { "", "ms", "-1ms", "2 ms", "1h", "1.ms",
                                     "4000s", "1e3" };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    uint64_t ns;
    ok (s4k_parse_duration (bad[i], &ns) == -1, "duration '%s' refused",
        bad[i]);
  }
  {
    struct s4k_config c;
    char err[256];
    s4k_config_init (&c);
    ok (s4k_config_set (&c, "latency-read", "fast", err, sizeof err) == -1 &&
        strstr (err, "latency-read=fast"), "a bad duration names the key: %s",
        err);
    ok (s4k_config_set (&c, "timing", "tape", err, sizeof err) == -1 &&
        strstr (err, "hdd7200"), "an unknown preset lists the known: %s", err);
    ok (s4k_config_set (&c, "queue-depth", "0", err, sizeof err) == -1,
        "queue-depth=0 refused (say unlimited)");
  }

  /* ---- presets ---------------------------------------------------------- */
  {
    struct s4k_config c = config ((const char *[]) {
      "size", "1M", "timing", "hdd7200", "latency-write", "1ms", NULL });
    const struct s4k_timing_params *t = &c.timing;
    ok (s4k_timing_enabled (t) && t->read_ns == 4000000 &&
        t->write_ns == 1000000 && t->rmw_ns == 8333333 &&
        t->rate == 180000000 && t->queue_depth == 32,
        "hdd7200: 4 ms, one revolution per RMW, 180 MB/s, depth 32; an "
        "explicit key wins");
    c = config ((const char *[]) { "size", "1M", NULL });
    ok (!s4k_timing_enabled (&c.timing) && c.timing.queue_depth == 0,
        "no timing key: off, unlimited depth");
    c = config ((const char *[]) { "size", "1M", "timing", "none", NULL });
    ok (!s4k_timing_enabled (&c.timing), "timing=none: off");
    c = config ((const char *[]) { "size", "1M", "timing", "ssd",
                                   "queue-depth", "unlimited", NULL });
    ok (s4k_timing_enabled (&c.timing) && c.timing.queue_depth == 0,
        "ssd with queue-depth=unlimited");
  }

  /* ---- the cost of a request on 512e under hdd7200 ---------------------- */
  struct s4k_config c = config ((const char *[]) {
    "size", "1M", "model", "512e", "timing", "hdd7200", NULL });
  const struct s4k_timing_params *p = &c.timing;
  const struct s4k_geometry *g = &c.geom;
  struct s4k_timing_cost a, m;
  const uint64_t t4k = 4096ull * 1000000000 / 180000000;     /* 22755 ns */
  const uint64_t t8k = 8192ull * 1000000000 / 180000000;

  s4k_timing_cost (p, g, S4K_OP_WRITE, 4096, 4096, &a);
  is_u64 (a.base, 4000000, "aligned 4 KiB write: base latency-write");
  is_u64 (a.transfer, t4k, "aligned 4 KiB write: one sector's transfer");
  is_u64 (a.rmw, 0, "aligned 4 KiB write: no RMW");
  s4k_timing_cost (p, g, S4K_OP_WRITE, 4096, 4096 + 512, &m);
  is_u64 (m.rmw_sectors, 2, "4 KiB write 512 bytes off: two sectors RMW'd");
  is_u64 (m.rmw, 2 * 8333333, "... each costing a revolution");
  is_u64 (m.transfer, t8k, "... and two sectors' transfer");
  ok (service (&m) >= 2 * service (&a),
      "misaligned write >= 2x the aligned one (%" PRIu64 " vs %" PRIu64 ")",
      service (&m), service (&a));

  s4k_timing_cost (p, g, S4K_OP_READ, 4096, 4096, &a);
  s4k_timing_cost (p, g, S4K_OP_READ, 4096, 4096 + 512, &m);
  ok (a.base == 4000000 && m.base == 4000000 && m.rmw == 0 && a.rmw == 0,
      "reads: latency-read, never RMW");
  ok (a.transfer == t4k, "an aligned 4 KiB read: one sector's transfer");
  is_u64 (m.transfer, t8k,
          "a read straddling two sectors pays twice the transfer");

  s4k_timing_cost (p, g, S4K_OP_WRITE, 512, 1024, &m);
  ok (m.rmw_sectors == 1 && m.transfer == t4k,
      "512-byte write inside a sector: one RMW, one sector's transfer");
  s4k_timing_cost (p, g, S4K_OP_ZERO, 1024, 512, &m);
  is_u64 (m.rmw_sectors, 1, "a zero that cuts a sector RMWs it too");
  s4k_timing_cost (p, g, S4K_OP_TRIM, 1024, 512, &m);
  ok (m.base == 4000000 && m.transfer == 0 && m.rmw == 0,
      "trim: base only");
  s4k_timing_cost (p, g, S4K_OP_FLUSH, 0, 0, &m);
  is_u64 (service (&m), 4000000, "flush: latency-write");
  s4k_timing_cost (p, g, S4K_OP_EXTENTS, 4096, 0, &m);
  is_u64 (service (&m), 0, "extents: free");
  s4k_timing_cost (p, g, S4K_OP_READ, 4096, 1 << 20, &m);
  is_u64 (service (&m), 0, "past the end: free (refused)");

  /* LBA 63 on the XP-jumper drive is aligned; LBA 64 is not. */
  {
    struct s4k_config x = config ((const char *[]) {
      "size", "1M", "model", "512e-xp", "timing", "hdd7200", NULL });
    s4k_timing_cost (&x.timing, &x.geom, S4K_OP_WRITE, 4096, 63 * 512, &a);
    s4k_timing_cost (&x.timing, &x.geom, S4K_OP_WRITE, 4096, 64 * 512, &m);
    ok (a.rmw_sectors == 0 && m.rmw_sectors == 2,
        "512e-xp: LBA 63 aligned, LBA 64 two RMWs");
  }
  /* rate only: 1 GB/s, a 1 MiB read of 4kn sectors. */
  {
    struct s4k_config r = config ((const char *[]) {
      "size", "4M", "model", "4kn", "rate", "1000000000", NULL });
    s4k_timing_cost (&r.timing, &r.geom, S4K_OP_READ, 1 << 20, 0, &m);
    ok (m.base == 0 && m.transfer == 1048576, "rate=1G: 1 MiB in 1048576 ns");
  }

  /* ---- the queue -------------------------------------------------------- */
  {
    struct s4k_config q = config ((const char *[]) {
      "size", "1M", "model", "512e", "latency-write", "1ms",
      "queue-depth", "1", NULL });
    struct s4k_timing *t = s4k_timing_new (&q.timing, &q.geom);
    uint64_t d1 = s4k_timing_schedule (t, S4K_OP_WRITE, 4096, 0, 100, &a);
    uint64_t d2 = s4k_timing_schedule (t, S4K_OP_WRITE, 4096, 8192, 100, &m);
    uint64_t d3 = s4k_timing_schedule (t, S4K_OP_WRITE, 4096, 16384, 200,
                                       &m);
    ok (d1 == 1000100 && d2 == 2000100 && d3 == 3000100 && m.wait == 1999900,
        "queue-depth=1: three writes finish one after another (wait %"
        PRIu64 ")", m.wait);
    ok (s4k_timing_schedule (t, S4K_OP_EXTENTS, 4096, 0, 300, &m) == 300,
        "a free request does not queue");
    s4k_timing_free (t);

    q = config ((const char *[]) { "size", "1M", "model", "512e",
                                   "latency-write", "1ms", "queue-depth",
                                   "32", NULL });
    t = s4k_timing_new (&q.timing, &q.geom);
    uint64_t last = 0, waited = 0;
    for (int i = 0; i < 32; i++) {
      last = s4k_timing_schedule (t, S4K_OP_WRITE, 4096, 4096 * i, 100, &m);
      waited += m.wait;
    }
    ok (last == 1000100 && waited == 0,
        "queue-depth=32: 32 writes at once all finish after 1 ms");
    last = s4k_timing_schedule (t, S4K_OP_WRITE, 4096, 0, 100, &m);
    ok (last == 2000100 && m.wait == 1000000,
        "the 33rd waits for the first slot");
    s4k_timing_free (t);

    /* Unlimited depth: only RMWs of one sector queue. */
    q = config ((const char *[]) { "size", "1M", "model", "512e",
                                   "latency-write", "1ms", NULL });
    t = s4k_timing_new (&q.timing, &q.geom);
    d1 = s4k_timing_schedule (t, S4K_OP_WRITE, 512, 0, 0, &a);
    d2 = s4k_timing_schedule (t, S4K_OP_WRITE, 512, 512, 0, &m);
    ok (d1 == 1000000 && d2 == 2000000 && m.wait == 1000000,
        "two RMWs of one sector: the second waits for the first");
    d3 = s4k_timing_schedule (t, S4K_OP_WRITE, 512, 8192, 0, &m);
    ok (d3 == 1000000 && m.wait == 0, "an RMW of another sector does not");
    d3 = s4k_timing_schedule (t, S4K_OP_WRITE, 4096, 0, 0, &m);
    ok (d3 == 1000000, "nor does a whole-sector write of the same sector");
    s4k_timing_free (t);
  }

  /* ---- statistics ------------------------------------------------------- */
  {
    struct s4k_dev *d;
    char err[256], buf[4096] = { 1 };
    c.stats_count = true;       /* as statsfile= would */
    if (s4k_dev_open (&d, &c, err, sizeof err))
      bail ("%s", err);
    ok (s4k_dev_timed (d), "the device is timed");
    uint64_t now = s4k_now_ns ();
    int r = s4k_write (d, buf, 4096, 4096 + 512, 0);
    uint64_t due = s4k_dev_timing (d, S4K_OP_WRITE, 4096, 4096 + 512, r);
    ok (r == 0 && due >= now + 4000000 + 2 * 8333333,
        "a misaligned write is due after base + two revolutions");
    r = s4k_write (d, buf, 4096, 8192, 0);
    s4k_dev_timing (d, S4K_OP_WRITE, 4096, 8192, r);
    ok (s4k_dev_timing (d, S4K_OP_WRITE, 100, 1, -EINVAL) == 0,
        "a refused request is not delayed");
    struct s4k_stats s;
    s4k_dev_stats (d, &s);
    const struct s4k_op_stats *w = &s.op[S4K_OP_WRITE];
    is_u64 (w->modelled_requests, 2, "stats: two writes modelled");
    is_u64 (w->modelled_rmw_ns, 2 * 8333333, "stats: the RMW time");
    is_u64 (w->modelled_base_ns, 2 * 4000000, "stats: the base time");
    is_u64 (w->modelled_ns, w->modelled_base_ns + w->modelled_transfer_ns +
            w->modelled_rmw_ns, "stats: service = base + transfer + RMW");
    /* 4023 us is in [2^11, 2^12): bucket 12; 20712 us in [2^14, 2^15):
     * bucket 15. */
    ok (w->latency_hist[12] == 1 && w->latency_hist[15] == 1,
        "stats: latency histogram");
    s4k_dev_close (d);

    struct s4k_config off = config ((const char *[]) { "size", "1M", NULL });
    if (s4k_dev_open (&d, &off, err, sizeof err))
      bail ("%s", err);
    ok (!s4k_dev_timed (d) &&
        s4k_dev_timing (d, S4K_OP_WRITE, 4096, 0, 0) == 0,
        "no timing key: not timed, nothing to wait for");
    s4k_dev_close (d);
  }
  return done_testing ();
}
