/* SPDX-License-Identifier: BSD-3-Clause */
/* s4k_read_iov (issue 17): a read answered by reference.  Its pieces
 * reassemble to what s4k_read copies, holes are NULL pieces, neighbours
 * join, too many pieces is -ENOBUFS, a store that cannot is -ENOTSUP
 * (the fault layer), and the statistics count it exactly as s4k_read
 * counts the same read (and count neither refusal to answer). */
#include <errno.h>
#include <string.h>
#include <sys/uio.h>

#include "sect4k/sect4k.h"
#include "tap.h"

static struct s4k_dev *
open_dev (const char *model, const char *extra_key, const char *extra_val)
{
  struct s4k_config c;
  struct s4k_dev *d;
  char err[256];
  s4k_config_init (&c);
  if (s4k_config_set (&c, "size", "8M", err, sizeof err) ||
      s4k_config_set (&c, "model", model, err, sizeof err) ||
      (extra_key && s4k_config_set (&c, extra_key, extra_val, err,
                                    sizeof err)) ||
      s4k_config_finish (&c, err, sizeof err))
    bail ("%s", err);
  c.stats_count = true;
  if (s4k_dev_open (&d, &c, err, sizeof err))
    bail ("%s", err);
  return d;
}

/* The bytes the pieces stand for. */
static void
gather (const struct iovec *iov, int n, char *out)
{
  for (int i = 0; i < n; i++) {
    if (iov[i].iov_base)
      memcpy (out, iov[i].iov_base, iov[i].iov_len);
    else
      memset (out, 0, iov[i].iov_len);
    out += iov[i].iov_len;
  }
}

static char data[1 << 20], want[1 << 20], got[1 << 20];

int
main (void)
{
  static const char *const models[] = { "512n", "512e", "512e-xp", "4kn" };
  for (unsigned m = 0; m < 4; m++) {
    struct s4k_dev *d = open_dev (models[m], NULL, NULL);
    const uint32_t L = s4k_dev_geometry (d)->logical;
    for (size_t i = 0; i < sizeof data; i++)
      data[i] = (char) (i * 7 + 1);
    /* Data across chunk boundaries, a zeroed gap, one lone block. */
    s4k_write (d, data, 65536, 4096 - L, 0);
    s4k_zero (d, 8192, 16384, 0);
    s4k_write (d, data, L, 200 * 4096, 0);
    struct iovec iov[64];
    bool same = true;
    static const uint64_t reads[][2] = {
      { 0, 1 << 20 }, { 4096, 4096 }, { 12288, 32768 }, { 200 * 4096, 512 },
      { 300 * 4096, 65536 }, { 0, 512 },
    };
    int holes = 0;
    for (unsigned r = 0; r < 6; r++) {
      uint64_t off = reads[r][0], len = reads[r][1] < L ? L : reads[r][1];
      int n = s4k_read_iov (d, len, off, iov, 64);
      if (n < 0) {
        same = false;
        diag ("%s: read_iov at %" PRIu64 ": %d", models[m], off, n);
        continue;
      }
      for (int i = 0; i < n; i++)
        holes += !iov[i].iov_base;
      gather (iov, n, got);
      s4k_read (d, want, len, off);
      same = same && memcmp (got, want, len) == 0;
    }
    ok (same, "%s: the pieces of 6 reads reassemble to s4k_read's bytes",
        models[m]);
    ok (holes > 0, "%s: holes are NULL pieces (%d)", models[m], holes);
    int n = s4k_read_iov (d, 8 * 4096, 300 * 4096, iov, 64);
    ok (n == 1 && !iov[0].iov_base, "%s: a hole is one piece (%d)",
        models[m], n);

    /* The statistics: reset by reading them before and after. */
    struct s4k_stats a, b, c;
    s4k_dev_stats (d, &a);
    s4k_read (d, want, 65536, 4096 - L);
    s4k_read (d, want, 3 * L, L);
    s4k_read (d, want, 100, 1);             /* refused: EINVAL */
    s4k_dev_stats (d, &b);
    s4k_read_iov (d, 65536, 4096 - L, iov, 64);
    s4k_read_iov (d, 3 * L, L, iov, 64);
    n = s4k_read_iov (d, 100, 1, iov, 64);
    ok (n == -EINVAL, "%s: strict refuses an unaligned read (%d)",
        models[m], n);
    n = s4k_read_iov (d, 1 << 20, 0, iov, 1);
    ok (n == -ENOBUFS, "%s: more pieces than room: -ENOBUFS (%d)",
        models[m], n);
    s4k_dev_stats (d, &c);
    struct s4k_op_stats *x = &a.op[S4K_OP_READ], *y = &b.op[S4K_OP_READ],
                        *z = &c.op[S4K_OP_READ];
    bool counted = z->requests - y->requests == y->requests - x->requests &&
                   z->bytes - y->bytes == y->bytes - x->bytes &&
                   z->errors - y->errors == y->errors - x->errors &&
                   z->refused - y->refused == y->refused - x->refused &&
                   z->sectors_touched - y->sectors_touched ==
                     y->sectors_touched - x->sectors_touched &&
                   z->aligned_physical - y->aligned_physical ==
                     y->aligned_physical - x->aligned_physical &&
                   z->unaligned - y->unaligned == y->unaligned - x->unaligned;
    ok (counted, "%s: counted as s4k_read counts them (requests %" PRIu64
        " and %" PRIu64 ", ENOBUFS not counted)", models[m],
        z->requests - y->requests, y->requests - x->requests);
    s4k_dev_close (d);
  }

  struct s4k_dev *d = open_dev ("512e", "write-cache", "true");
  struct iovec iov[4];
  int n = s4k_read_iov (d, 4096, 0, iov, 4);
  ok (n == -ENOTSUP, "the fault layer: -ENOTSUP (%d)", n);
  s4k_dev_close (d);
  printf ("1..%u\n", tap_n);
  return tap_failed != 0;
}
