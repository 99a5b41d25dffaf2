/* SPDX-License-Identifier: BSD-3-Clause */
/* Statistics: a fixed sequence of requests on each preset, with every
 * counter worked out by hand (the reasoning is in the comments). */
#include <string.h>

#include "sect4k/sect4k.h"
#include "tap.h"

/* requests bytes errors aligned_physical aligned_logical unaligned refused
 * rmw_sectors rmw_read_bytes store_write_bytes sectors_touched
 * extra_sectors */
struct want {
  uint64_t v[12];
};

struct preset {
  const char *model;
  struct want write, zero, read, trim;
  uint64_t write_offset_hist[8];
};

/* The sequence, on a 1 MiB device:
 *   write 4096@0, write 512@512, write 8192@3584, zero 1024@4096,
 *   read 4096@4096, read 512@0, write 100@1 (misaligned), trim 8192@0,
 *   flush. */
static const struct preset presets[] = {
  /* 512n: every 512-multiple is a boundary; no RMW; 100@1 refused. */
  { "512n",
    { { 4, 12900, 1, 3, 0, 1, 1, 0, 0, 12800, 8 + 1 + 16 + 1, 0 } },
    { { 1, 1024, 0, 1, 0, 0, 0, 0, 0, 0, 2, 0 } },
    { { 2, 4608, 0, 2, 0, 0, 0, 0, 0, 0, 8 + 1, 0 } },
    { { 1, 8192, 0, 1, 0, 0, 0, 0, 0, 0, 16, 0 } },
    { 4 } },
  /* 512e: 512@512 RMWs sector 0; 8192@3584 cuts sectors 0 and 2 (two
   * RMWs, 3 sectors written, 3 touched where 2 would do); the zero RMWs
   * sector 1 (it holds data, so it is written back). */
  { "512e",
    { { 4, 12900, 1, 1, 2, 1, 1, 3, 3 * 4096, 4096 + 4096 + 3 * 4096,
        1 + 1 + 3 + 1, 1 } },
    { { 1, 1024, 0, 0, 1, 0, 0, 1, 4096, 4096, 1, 0 } },
    { { 2, 4608, 0, 1, 1, 0, 0, 0, 0, 0, 1 + 1, 0 } },
    { { 1, 8192, 0, 1, 0, 0, 0, 0, 0, 0, 2, 0 } },
    /* offsets 0, 512, 3584, 1 in 512-byte buckets */
    { 2, 1, 0, 0, 0, 0, 0, 1 } },
  /* 512e-xp: boundaries at 0, 3584, 7680, 11776.  4096@0 covers the
   * short sector 0 and cuts sector 1 (RMW of 4096, writes 3584 + 4096,
   * touches 2 sectors for 4096 bytes); 512@512 RMWs the short sector 0
   * (3584 bytes); 8192@3584 is physically aligned.  The 4 KiB read at
   * 4096 touches two sectors; the trim frees sectors 0 and 1 and touches
   * sector 2 too. */
  { "512e-xp",
    { { 4, 12900, 1, 1, 2, 1, 1, 2, 4096 + 3584, 7680 + 3584 + 8192,
        2 + 1 + 2 + 1, 1 } },
    { { 1, 1024, 0, 0, 1, 0, 0, 1, 4096, 4096, 1, 0 } },
    { { 2, 4608, 0, 0, 2, 0, 0, 0, 0, 0, 2 + 1, 1 } },
    { { 1, 8192, 0, 0, 1, 0, 0, 0, 0, 0, 3, 1 } },
    /* (offset - 3584) mod 4096: 512, 1024, 0, 513 */
    { 1, 2, 1, 0, 0, 0, 0, 0 } },
  /* 4kn: 512@512, 8192@3584, 100@1, the zero and the 512-byte read break
   * the 4096 rule and are refused. */
  { "4kn",
    { { 4, 12900, 3, 1, 0, 3, 3, 0, 0, 4096, 1 + 1 + 3 + 1, 1 } },
    { { 1, 1024, 1, 0, 0, 1, 1, 0, 0, 0, 1, 0 } },
    { { 2, 4608, 1, 1, 0, 1, 1, 0, 0, 0, 1 + 1, 0 } },
    { { 1, 8192, 0, 1, 0, 0, 0, 0, 0, 0, 2, 0 } },
    { 4 } },
};

static const char *const field[12] = {
  "requests", "bytes", "errors", "aligned_physical", "aligned_logical",
  "unaligned", "refused", "rmw_sectors", "rmw_read_bytes",
  "store_write_bytes", "sectors_touched", "extra_sectors",
};

static void
check_op (const char *model, const char *op, const struct s4k_op_stats *o,
          const struct want *w)
{
  const uint64_t got[12] = {
    o->requests, o->bytes, o->errors, o->aligned_physical,
    o->aligned_logical, o->unaligned, o->refused, o->rmw_sectors,
    o->rmw_read_bytes, o->store_write_bytes, o->sectors_touched,
    o->extra_sectors,
  };
  int good = 1;
  for (int i = 0; i < 12; i++)
    if (got[i] != w->v[i]) {
      diag ("%s %s.%s = %" PRIu64 ", want %" PRIu64, model, op, field[i],
            got[i], w->v[i]);
      good = 0;
    }
  ok (good, "%s: every %s counter as worked out by hand", model, op);
}

int
main (void)
{
  for (size_t p = 0; p < sizeof presets / sizeof presets[0]; p++) {
    const struct preset *pr = &presets[p];
    struct s4k_config c;
    struct s4k_dev *d;
    char err[256], buf[8192];
    s4k_config_init (&c);
    if (s4k_config_set (&c, "size", "1M", err, sizeof err) ||
        s4k_config_set (&c, "model", pr->model, err, sizeof err) ||
        s4k_config_finish (&c, err, sizeof err))
      bail ("%s", err);
    c.stats_count = true;       /* as statsfile= would */
    if (s4k_dev_open (&d, &c, err, sizeof err))
      bail ("%s", err);
    memset (buf, 7, sizeof buf);
    s4k_write (d, buf, 4096, 0, 0);
    s4k_write (d, buf, 512, 512, 0);
    s4k_write (d, buf, 8192, 3584, 0);
    s4k_zero (d, 1024, 4096, 0);
    s4k_read (d, buf, 4096, 4096);
    s4k_read (d, buf, 512, 0);
    s4k_write (d, buf, 100, 1, 0);
    s4k_trim (d, 8192, 0, 0);
    s4k_flush (d);

    struct s4k_stats s;
    s4k_dev_stats (d, &s);
    check_op (pr->model, "write", &s.op[S4K_OP_WRITE], &pr->write);
    check_op (pr->model, "zero", &s.op[S4K_OP_ZERO], &pr->zero);
    check_op (pr->model, "read", &s.op[S4K_OP_READ], &pr->read);
    check_op (pr->model, "trim", &s.op[S4K_OP_TRIM], &pr->trim);
    ok (s.op[S4K_OP_FLUSH].requests == 1 && s.op[S4K_OP_CACHE].requests == 0,
        "%s: one flush, no cache", pr->model);
    const struct s4k_op_stats *w = &s.op[S4K_OP_WRITE];
    ok (memcmp (w->offset_hist, pr->write_offset_hist,
                sizeof pr->write_offset_hist) == 0 &&
        s.offset_buckets == c.geom.physical / s.offset_bucket,
        "%s: write offsets within the physical sector", pr->model);
    /* Sizes 4096, 512, 8192, 100: buckets [4096,8192), [512,1024),
     * [8192,16384), < 512. */
    ok (w->size_hist[0] == 1 && w->size_hist[1] == 1 &&
        w->size_hist[4] == 1 && w->size_hist[5] == 1,
        "%s: write size histogram", pr->model);
    s4k_dev_close (d);
  }

  return done_testing ();
}
