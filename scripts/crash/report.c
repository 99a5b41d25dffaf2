/* SPDX-License-Identifier: BSD-3-Clause */
/* sect4k-crash: the JSON report and the summary
 * (the files: crash.h). */
#include "crash.h"

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
    if (checker_out_len) {
      const char *nl = strchr (checker_out, '\n');
      fprintf (sum, "  checker: %.*s\n",
               (int) (nl ? nl - checker_out : (long) checker_out_len),
               checker_out);
    }
    free (kept), free (tw), free (dr), free (dmg), free (nb);
  }
  free (why);
  fputc ('}', fp);
}

