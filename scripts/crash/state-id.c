/* SPDX-License-Identifier: BSD-3-Clause */
/* sect4k-crash: state IDs (CP-KEPT-OUTCOMES, e.g. 3-5-k.g2*2.r, or
 * 1-3-r@1.k: a base past old after r or tMASK)
 * (the files: crash.h). */
#include "crash.h"

char *
state_id_of (const struct state *st)
{
  char *buf = NULL;
  size_t len = 0;
  FILE *fp = open_memstream (&buf, &len);
  if (!fp)
    die ("out of memory");
  fprintf (fp, "%zu-", st->cpi);
  /* kept as hex, the highest volatile write first */
  bool any = false;
  for (size_t nib = (st->nvol + 3) / 4; nib-- > 0;) {
    unsigned x = 0;
    for (unsigned b = 0; b < 4; b++)
      if (nib * 4 + b < st->nvol && bit (st->kept, nib * 4 + b))
        x |= 1u << b;
    if (x || any) {
      fputc ("0123456789abcdef"[x], fp);
      any = true;
    }
  }
  if (!any)
    fputc ('0', fp);
  fputc ('-', fp);
  for (size_t i = 0; i < st->nt;) {
    size_t j = i + 1;
    while (j < st->nt && st->t[j].o.kind == st->t[i].o.kind &&
           st->t[j].o.arg == st->t[i].o.arg &&
           st->t[j].o.base == st->t[i].o.base)
      j++;
    fprintf (fp, "%s%c", i ? "." : "", outcome_char[st->t[i].o.kind]);
    if (st->t[i].o.kind == O_TORN)
      fprintf (fp, "%" PRIx64, st->t[i].o.arg);
    else if (st->t[i].o.kind == O_GARBAGE)
      fprintf (fp, "%" PRIu64, st->t[i].o.arg);
    if (st->t[i].o.base)
      fprintf (fp, "@%u", st->t[i].o.base);
    if (j - i > 1)
      fprintf (fp, "*%zu", j - i);
    i = j;
  }
  if (!st->nt)
    fputc ('0', fp);
  fclose (fp);
  return buf;
}

void
state_parse (struct state *st, const char *id)
{
  char *end;
  errno = 0;
  unsigned long long cpi = strtoull (id, &end, 10);
  if (errno || end == id || *end != '-')
    die ("--state %s: not a state ID (CRASHPOINT-KEPT-OUTCOMES)", id);
  if (cpi >= ncps)
    die ("--state %s: crash point %llu: the log has %zu (0..%zu)", id, cpi,
         ncps, ncps - 1);
  state_set_cp (st, cpi);
  const char *h = end + 1, *he = strchr (h, '-');
  if (!he)
    die ("--state %s: not a state ID (CRASHPOINT-KEPT-OUTCOMES)", id);
  size_t nib = he - h;
  for (size_t i = 0; i < nib; i++) {
    const char ch = h[nib - 1 - i];
    const char *p = strchr ("0123456789abcdef", ch);
    if (!p || !ch)
      die ("--state %s: kept set: '%c' is not a hex digit", id, ch);
    for (unsigned b = 0; b < 4; b++)
      if ((p - "0123456789abcdef") >> b & 1) {
        if (i * 4 + b >= st->nvol)
          die ("--state %s: kept set names write %zu; crash point %llu has "
               "%zu unflushed", id, i * 4 + b, cpi, st->nvol);
        st->kept[(i * 4 + b) / 64] |= 1ULL << ((i * 4 + b) % 64);
      }
  }
  state_build (st);
  const char *o = he + 1;
  size_t ti = 0;
  const char *why;
  if (strcmp (o, "0") == 0 && st->nt == 0) {
    if ((why = zone_check (st)))
      die ("--state %s: %s", id, why);
    return;
  }
  while (*o) {
    const char *p = strchr (outcome_char, *o);
    if (!p || !*o)
      die ("--state %s: outcome '%c': not one of %s", id, *o, outcome_char);
    struct outcome oc = { p - outcome_char, 0, 0 };
    o++;
    if (oc.kind == O_TORN)
      oc.arg = strtoull (o, &end, 16), o = end;
    else if (oc.kind == O_GARBAGE)
      oc.arg = strtoull (o, &end, 10), o = end;
    if (*o == '@') {
      if (oc.kind != O_REVERTED && oc.kind != O_TORN)
        die ("--state %s: outcome %s takes no base (@B: after r or t "
             "only)", id, outcome_names[oc.kind]);
      errno = 0;
      unsigned long b = strtoul (o + 1, &end, 10);
      if (errno || end == o + 1 || b == 0 || b > UINT_MAX)
        die ("--state %s: a base (@B) is a positive number", id);
      oc.base = b;
      o = end;
    }
    unsigned long long rep = 1;
    if (*o == '*')
      rep = strtoull (o + 1, &end, 10), o = end;
    if (*o == '.')
      o++;
    else if (*o)
      die ("--state %s: unexpected '%c' in the outcomes", id, *o);
    for (; rep > 0; rep--, ti++) {
      if (ti >= st->nt)
        die ("--state %s: more outcomes than the %zu physical sectors the "
             "kept writes touch", id, st->nt);
      const struct tsec *t = &st->t[ti];
      if (t->amin && !outcome_allowed (t, oc) &&
          (t->amin == t->nk || (oc.base < t->amin &&
                                (oc.kind == O_REVERTED ||
                                 oc.kind == O_TORN)))) {
        if (t->amin == t->nk)
          die ("--state %s: outcome %s for physical sector %" PRIu64 ": a "
               "kept atomic write covers it, so it is kept", id,
               outcome_names[oc.kind], t->k);
        die ("--state %s: outcome %s for physical sector %" PRIu64 ": a "
             "kept atomic write covers it, so only its later writes are "
             "interrupted (a base from @%u on)", id,
             outcome_names[oc.kind], t->k, t->amin);
      }
      const unsigned lo = t->amin > 1 ? t->amin : 1;
      if (oc.base && !base_allowed (t, oc.base)) {
        if (lo >= t->nk)
          die ("--state %s: base @%u for physical sector %" PRIu64 ": it "
               "has no base past old (%u kept unflushed write%s)", id,
               oc.base, t->k, t->nk, t->nk == 1 ? "" : "s");
        die ("--state %s: base @%u for physical sector %" PRIu64 ": its "
             "bases past old are @%u to @%u", id, oc.base, t->k, lo,
             t->nk - 1);
      }
      if (!outcome_allowed (t, oc))
        die ("--state %s: outcome %s for physical sector %" PRIu64 " is "
             "not one torn=%s allows there", id, outcome_names[oc.kind],
             st->t[ti].k, torn_names[torn]);
      st->t[ti].o = oc;
    }
  }
  if (ti != st->nt)
    die ("--state %s: %zu outcomes for the %zu physical sectors the kept "
         "writes touch", id, ti, st->nt);
  /* A zoned log: a prefix of each sequential zone's writes. */
  if ((why = zone_check (st)))
    die ("--state %s: %s", id, why);
}

