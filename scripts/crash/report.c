/* SPDX-License-Identifier: BSD-3-Clause */
/* sect4k-crash: the JSON report and the summary
 * (the files: crash.h). */
#include "crash.h"
#include "sect4k/zone.h"

void
json_str (FILE *fp, const char *s)
{
  fputc ('"', fp);
  for (; *s; s++) {
    unsigned char c = *s;
    if (c == '"' || c == '\\')
      fprintf (fp, "\\%c", c);
    else if (c < 0x20)
      fprintf (fp, "\\u%04x", c);
    else
      fputc (c, fp);
  }
  fputc ('"', fp);
}

char *
reason_of (struct run r)
{
  char *s = NULL;
  switch (r.result) {
  case R_TIMEOUT:
    if (asprintf (&s, "timeout: the checker ran past %gs and was killed",
                  timeout_s) < 0)
      s = NULL;
    break;
  case R_SIGNAL:
    if (asprintf (&s, "the checker crashed: killed by signal %d (%s)",
                  r.status, strsignal (r.status)) < 0)
      s = NULL;
    break;
  default:
    break;
  }
  return s;
}

/* The LBAs of sector t whose contents are neither the old (or the base
 * reverted or torn to) nor the new. */
static void
damaged_lbas (const struct tsec *t, uint64_t **out, size_t *n)
{
  uint64_t s, e;
  sector_range (t->k, &s, &e);
  const unsigned char *old = t->bases + (uint64_t) t->o.base * P;
  for (unsigned l = 0; l < t->lbas; l++) {
    const uint64_t o = (uint64_t) l * L;
    if (t->unreadable || (memcmp (t->img + o, t->old + o, L) &&
                          memcmp (t->img + o, old + o, L) &&
                          memcmp (t->img + o, t->new + o, L))) {
      *out = xrealloc (*out, (*n + 1) * sizeof **out);
      (*out)[(*n)++] = s / L + l;
    }
  }
}

static bool
lba_written (const struct state *st, uint64_t lba)
{
  for (size_t v = 0; v < st->nvol; v++)
    if (bit (st->kept, v)) {
      const struct wr *w = &writes[st->vol[v]];
      if (lba * L >= w->off && lba * L < w->off + w->len)
        return true;
    }
  return false;
}

static void
print_u64s (FILE *fp, const uint64_t *v, size_t n)
{
  fputc ('[', fp);
  for (size_t i = 0; i < n; i++)
    fprintf (fp, "%s%" PRIu64, i ? ", " : "", v[i]);
  fputc (']', fp);
}

/* The writes kept whole, torn (a sector of theirs not kept) and dropped,
 * by log entry number. */
static void
classify (const struct state *st, uint64_t **kept, size_t *nk,
          uint64_t **tornw, size_t *ntw, uint64_t **dropped, size_t *nd)
{
  *nk = *ntw = *nd = 0;
  *kept = xcalloc (st->nvol, 8);
  *tornw = xcalloc (st->nvol, 8);
  *dropped = xcalloc (st->nvol, 8);
  for (size_t v = 0; v < st->nvol; v++) {
    const struct wr *w = &writes[st->vol[v]];
    if (!bit (st->kept, v)) {
      (*dropped)[(*nd)++] = w->entry;
      continue;
    }
    bool whole = true;
    for (size_t i = 0; i < st->nt; i++)
      if (st->t[i].k >= first_sector (w) && st->t[i].k <= last_sector (w) &&
          st->t[i].o.kind != O_KEPT)
        whole = false;
    if (whole)
      (*kept)[(*nk)++] = w->entry;
    else
      (*tornw)[(*ntw)++] = w->entry;
  }
}

/* ---- the zones' pointers ------------------------------------------------ */

/* Per sequential zone at a crash point (LBAs): known once the log wrote
 * it (a host-managed write is at the pointer, so the pointer before the
 * first one is its start) or reset or finished it; dur: the pointer no
 * cut moves below (its durable writes, reset, finish); live: the pointer
 * when the power went (every acknowledged write). */
struct zptr {
  bool known;
  uint64_t dur, live;
};
static struct zptr *zp;
static size_t zp_cpi = SIZE_MAX;

static uint64_t
zone_end_lba (int64_t z)
{
  const uint64_t e = (uint64_t) (z + 1) * zone_bytes;
  return (e < g.size ? e : g.size) / L;
}

static void
zone_event (const struct zev *ev, size_t nz)
{
  for (size_t z = zone_seq_start / zone_bytes; z < nz; z++) {
    if (ev->zone != -2 && ev->zone != (int64_t) z)
      continue;
    struct zptr *p = &zp[z];
    const uint64_t start = z * zone_bytes / L;
    if (ev->zone == -2 && !p->known)
      continue;                 /* ALL: the zones the log knows */
    if (ev->op == S4K_ZOP_RESET)
      p->dur = p->live = start;
    else if (ev->zone != -2 || p->live != start)  /* FINISH ALL skips
                                                       EMPTY zones */
      p->dur = p->live = zone_end_lba (z);
    else if (!p->known)
      p->dur = p->live = start;
    p->known = true;
  }
}

/* The zones' pointers at crash point cpi, from the log's writes and zone
 * operations before it. */
static void
zones_at (size_t cpi)
{
  if (zp_cpi == cpi)
    return;
  const struct cp *c = &cps[cpi];
  const size_t nz = (g.size + zone_bytes - 1) / zone_bytes;
  zp = xrealloc (zp, nz * sizeof *zp);
  memset (zp, 0, nz * sizeof *zp);
  /* Those not empty where the log starts (its "sect4k-zonewp" entries). */
  for (size_t z = zone_seq_start / zone_bytes; z < nz; z++)
    if (zone_wp0[z] != z * zone_bytes / L)
      zp[z] = (struct zptr) { true, zone_wp0[z], zone_wp0[z] };
  size_t wi = 0, ei = 0;
  for (;;) {
    const bool ev = ei < nzevs && zevs[ei].entry < c->before;
    if (!ev && wi >= c->nw)
      break;
    if (ev && (wi >= c->nw || zevs[ei].entry < writes[wi].entry)) {
      zone_event (&zevs[ei++], nz);
      continue;
    }
    const struct wr *w = &writes[wi];
    if (w->zone >= 0 && !w->reset_zero) {
      struct zptr *p = &zp[w->zone];
      const uint64_t s = w->off / L, e = (w->off + w->len) / L;
      /* Host-aware: from its pointer where the log starts (a write may
       * be anywhere); a trim moves nothing. */
      const uint64_t from = aware ? zone_wp0[w->zone] : s;
      if (!p->known)
        *p = (struct zptr) { true, from, from };
      if (aware && w->trim) {
        wi++;
        continue;
      }
      p->live = e > p->live ? e : p->live;
      if ((wi < c->f || durable_at (w, c)) && e > p->dur)
        p->dur = e;
    }
    wi++;
  }
  zp_cpi = cpi;
}

static const char *
cond_of (int64_t z, uint64_t wp)
{
  return wp == z * zone_bytes / L ? "empty"
       : wp == zone_end_lba (z) ? "full" : "closed";
}

/* The state's zones: each known one's pointer after the cut (its kept
 * prefix's end, or its durable pointer) and condition (no zone stays
 * open), as the cut report's "zones" gives them. */
static void
report_zones (FILE *fp, FILE *sum)
{
  zones_at (cur.cpi);
  const size_t nz = (g.size + zone_bytes - 1) / zone_bytes;
  const char *sep = "";
  fprintf (fp, ",\n   \"zones\": [");
  for (size_t z = zone_seq_start / zone_bytes; z < nz; z++) {
    const struct zptr *p = &zp[z];
    if (!p->known)
      continue;
    uint64_t wp = p->dur, torn_k = UINT64_MAX;
    /* NON_SEQ (host-aware): back to the end of the highest sector the
     * medium holds, durable or kept (or torn, or destaged: a base past
     * old) by the cut, at most the live pointer (fault_zone_cut). */
    if (nonseq_at (z, cps[cur.cpi].before)) {
      for (size_t i = 0; i < cur.nt; i++) {
        const struct tsec *t = &cur.t[i];
        uint64_t s, e;
        sector_range (t->k, &s, &e);
        if (zone_of (s) == (int64_t) z &&
            (t->o.kind != O_REVERTED || t->o.base) && e / L > wp)
          wp = e / L;
      }
      wp = wp < p->live ? wp : p->live;
    }
    for (size_t i = 0; i < cur.nzg; i++) {
      const struct zgroup *zg = &cur.zg[i];
      if (zg->zone != (int64_t) z || !zg->p)
        continue;
      /* The last kept write, up to its first sector not kept. */
      const struct wr *w = &writes[cur.vol[zg->v[zg->p - 1]]];
      wp = (w->off + w->len) / L;
      for (uint64_t k = first_sector (w); k <= last_sector (w); k++) {
        const struct tsec *t = state_sector (k);
        if (t && t->o.kind != O_KEPT) {
          uint64_t s, e;
          sector_range (k, &s, &e);
          wp = s / L;
          if (t->o.kind != O_REVERTED)
            torn_k = k;
          break;
        }
      }
    }
    const uint64_t start = z * zone_bytes / L;
    fprintf (fp, "%s{\"zone\": %" PRIu64 ", \"lbas\": %" PRIu64
             ", \"wp_before\": %" PRIu64 ", \"wp_after\": %" PRIu64
             ", \"cond_after\": \"%s\"", sep, start,
             zone_end_lba (z) - start, p->live, wp, cond_of (z, wp));
    if (torn_k != UINT64_MAX)
      fprintf (fp, ", \"torn_sector\": %" PRIu64, torn_k);
    fputc ('}', fp);
    if (sum)
      fprintf (sum, "%s%" PRIu64 " at %" PRIu64 " (%s)", *sep ? ", " :
               "  zones (first LBA at pointer): ", start, wp,
               cond_of (z, wp));
    sep = ", ";
  }
  fputc (']', fp);
  if (sum && *sep)
    fputc ('\n', sum);
}

/* One state's report entry; one summary line if it failed or was not
 * checked. */
void
report_state (FILE *fp, FILE *sum, const char *id, struct run r,
              bool first)
{
  const struct cp *c = &cps[cur.cpi];
  fprintf (fp, "%s\n  {\"id\": ", first ? "" : ",");
  json_str (fp, id);
  fprintf (fp, ", \"crash_point\": %zu, \"before_entry\": %" PRIu64
           ", \"result\": \"%s\"", cur.cpi, c->before,
           result_names[r.result]);
  char *why = reason_of (r);
  if (why) {
    fprintf (fp, ", \"reason\": ");
    json_str (fp, why);
  }
  if (r.result == R_FAILED)
    fprintf (fp, ", \"exit_status\": %d", r.status);
  if (r.result != R_CONSISTENT) {
    fprintf (fp, ", \"output\": ");
    json_str (fp, checker_out);
  }
  if (r.result != R_CONSISTENT) {
    uint64_t *kept, *tw, *dr, *dmg = NULL, *nb = NULL;
    size_t nk, ntw, nd, ndmg = 0, nnb = 0;
    classify (&cur, &kept, &nk, &tw, &ntw, &dr, &nd);
    fprintf (fp, ",\n   \"kept\": ");
    print_u64s (fp, kept, nk);
    fprintf (fp, ", \"torn\": ");
    print_u64s (fp, tw, ntw);
    fprintf (fp, ", \"dropped\": ");
    print_u64s (fp, dr, nd);
    fprintf (fp, ",\n   \"sectors\": [");
    const char *sep = "";
    for (size_t i = 0; i < cur.nt; i++) {
      const struct tsec *t = &cur.t[i];
      if (t->o.kind == O_KEPT)
        continue;
      uint64_t s, e;
      sector_range (t->k, &s, &e);
      fprintf (fp, "%s{\"sector\": %" PRIu64 ", \"lba\": %" PRIu64
               ", \"lbas\": %u, \"outcome\": \"%s\"", sep, t->k, s / L,
               t->lbas, outcome_names[t->o.kind]);
      sep = ", ";
      if (t->o.kind == O_TORN) {
        fprintf (fp, ", \"new_lbas\": [");
        for (unsigned l = 0, n = 0; l < t->lbas; l++)
          if (t->o.arg >> l & 1)
            fprintf (fp, "%s%" PRIu64, n++ ? ", " : "", s / L + l);
        fputc (']', fp);
      }
      if (t->o.kind == O_GARBAGE)
        fprintf (fp, ", \"garbage_lba\": %" PRIu64, s / L + t->o.arg);
      if (t->o.base)
        fprintf (fp, ", \"base\": %u", t->o.base);
      size_t before = ndmg;
      damaged_lbas (t, &dmg, &ndmg);
      fprintf (fp, ", \"damaged_lbas\": ");
      print_u64s (fp, dmg + before, ndmg - before);
      fputc ('}', fp);
    }
    for (size_t i = 0; i < ndmg; i++)
      if (!lba_written (&cur, dmg[i])) {
        nb = xrealloc (nb, (nnb + 1) * sizeof *nb);
        nb[nnb++] = dmg[i];
      }
    fprintf (fp, "],\n   \"damaged_lbas\": ");
    print_u64s (fp, dmg, ndmg);
    fprintf (fp, ", \"neighbours_damaged\": ");
    print_u64s (fp, nb, nnb);
    if (r.result == R_FAILED)
      fprintf (sum, "FAILED %s (exit %d): before log entry %" PRIu64, id,
               r.status, c->before);
    else
      fprintf (sum, "NOT CHECKED %s: %s", id, why);
    fprintf (sum, "\n  kept ");
    print_u64s (sum, kept, nk);
    fprintf (sum, ", torn ");
    print_u64s (sum, tw, ntw);
    fprintf (sum, ", dropped ");
    print_u64s (sum, dr, nd);
    fprintf (sum, " (log entries); damaged LBAs ");
    print_u64s (sum, dmg, ndmg);
    if (nnb) {
      fprintf (sum, ", of which no kept write targeted ");
      print_u64s (sum, nb, nnb);
    }
    fputc ('\n', sum);
    if (zoned)
      report_zones (fp, sum);
    if (checker_out_len) {
      const char *nl = strchr (checker_out, '\n');
      fprintf (sum, "  checker: %.*s\n",
               (int) (nl ? nl - checker_out : (long) checker_out_len),
               checker_out);
    }
    free (kept), free (tw), free (dr), free (dmg), free (nb);
  }
  if (zoned && r.result == R_CONSISTENT)
    report_zones (fp, NULL);
  free (why);
  fputc ('}', fp);
}

