/* SPDX-License-Identifier: BSD-3-Clause */
/* sect4k-crash: the geometry and the log: its writes and crash points
 * (the files: crash.h). */
#include "crash.h"

struct s4k_geometry g;
uint32_t L, P;

void
sector_range (uint64_t k, uint64_t *s, uint64_t *e)
{
  s4k_sector_range (&g, k, s, e);
}

/* ---- the log ----------------------------------------------------------- */

struct wr *writes;
static size_t nwrites;
struct cp *cps;
size_t ncps;
uint64_t log_entries;

static size_t
volatile_writes (size_t f, size_t nw)
{
  size_t n = 0;
  for (size_t i = f; i < nw; i++)
    n += !writes[i].durable_early;
  return n;
}

static void
add_cp (uint64_t before, size_t f, size_t nw)
{
  /* Nothing changed since the last one (a flush with nothing unflushed
   * before it, e.g. the one a front end sends when a client leaves, adds
   * no state): front ends that flush differently give the same states. */
  if (ncps && cps[ncps - 1].nw == nw &&
      (cps[ncps - 1].f == f ||
       (volatile_writes (cps[ncps - 1].f, nw) == 0 &&
        volatile_writes (f, nw) == 0)))
    return;
  cps = xrealloc (cps, (ncps + 1) * sizeof *cps);
  cps[ncps++] = (struct cp) { before, f, nw };
}

static void
add_write (const struct s4k_wlog_entry *e, bool trim, bool durable)
{
  if (e->off % L || e->len % L)
    die ("%s: entry %" PRIu64 ": bytes [%" PRIu64 ", %" PRIu64 ") are not "
         "whole logical sectors of %" PRIu32 " bytes (a log of another "
         "geometry?)", log_path, e->index, e->off, e->off + e->len, L);
  if (e->off + e->len > g.size)
    die ("%s: entry %" PRIu64 ": bytes [%" PRIu64 ", %" PRIu64 ") are past "
         "the end of the device (size %" PRIu64 ")", log_path, e->index,
         e->off, e->off + e->len, g.size);
  const bool zero = (e->flags & S4K_WLOG_ZERO) && !trim;
  const uint64_t end = e->off + e->len;
  uint64_t s1, e1, sn, en;
  sector_range (s4k_sector_index (&g, e->off), &s1, &e1);
  sector_range (s4k_sector_index (&g, end - 1), &sn, &en);
  /* The engine zeroes the whole physical sectors of a zero (durable at
   * once) but writes a sector it cuts after its RMW, through the cache
   * unless FUA (lib/dev/dev_plan.h): those pieces are unflushed writes. */
  const bool head = zero && !(e->flags & S4K_WLOG_FUA) &&
                    (e->off != s1 || (s1 == sn && end != e1));
  const bool tail = zero && !(e->flags & S4K_WLOG_FUA) && s1 != sn &&
                    end != en;
  uint64_t mid = head ? e1 : e->off, mid_end = tail ? sn : end;
  if (mid_end < mid)
    mid_end = mid;
  struct wr piece[3];
  size_t n = 0;
  const unsigned char *d = trim ? NULL : e->data;
  if (head) {
    const uint64_t he = end < e1 ? end : e1;
    piece[n++] = (struct wr) { e->index, e->off, he - e->off, d, false,
                               false };
  }
  if (mid < mid_end)
    piece[n++] = (struct wr) { e->index, mid, mid_end - mid,
                               d ? d + (mid - e->off) : NULL, durable,
                               e->flags & S4K_WLOG_ATOMIC };
  if (tail)
    piece[n++] = (struct wr) { e->index, sn, end - sn, d + (sn - e->off),
                               false, false };
  writes = xrealloc (writes, (nwrites + n) * sizeof *writes);
  for (size_t i = 0; i < n; i++)
    writes[nwrites++] = piece[i];
}

struct s4k_wlog_reader *reader;

void
read_log (void)
{
  char err[512];
  size_t f = 0;
  bool found_mark = false;
  struct s4k_wlog_entry e;
  int r;
  while ((r = s4k_wlog_next (reader, &e, err, sizeof err)) == 1) {
    log_entries = e.index + 1;
    if (e.flags & S4K_WLOG_MARK) {
      if (until_mark && !e.geometry &&
          strcmp (e.mark, until_mark) == 0) {
        found_mark = true;
        break;
      }
      continue;
    }
    const bool zero = e.flags & (S4K_WLOG_DISCARD | S4K_WLOG_ZERO);
    /* A zero's data is what the device holds: zeroes, and with
     * strict=false the bytes beside an unaligned zero. */
    const bool trim = e.flags & S4K_WLOG_DISCARD;
    if (e.flags & S4K_WLOG_FLUSH) {
      add_cp (e.index, f, nwrites);
      f = nwrites;
    }
    if (e.len) {
      const bool durable = zero || (e.flags & S4K_WLOG_FUA);
      if (durable)
        add_cp (e.index, f, nwrites);
      add_write (&e, trim, durable);
    }
  }
  if (r == -1)
    die ("%s", err);
  if (until_mark && !found_mark)
    die ("%s: no mark named \"%s\"", log_path, until_mark);
  add_cp (found_mark ? e.index : log_entries, f, nwrites);
}

