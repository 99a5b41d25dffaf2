/* SPDX-License-Identifier: BSD-3-Clause */
/* The fault layer (issue 11) on every model: bad sectors, the write
 * cache, and power cuts whose outcomes, over many seeds, are exactly
 * those the torn= policy allows, on exactly the physical sector at
 * risk: neighbours of the written LBA are hurt only by torn=unreadable,
 * garbage and zero, and nothing outside that sector ever is. */
#include <errno.h>
#include <string.h>

#include "sect4k/sect4k.h"
#include "tap.h"

struct model {
  const char *name;
  const char *keys[3];          /* key=value beyond size= */
  uint64_t lba;                 /* written by the cut tests: not the first
                                   LBA of its physical sector */
};
static const struct model models[] = {
  { "512n", { "model=512n" }, 9 },
  { "512e", { "model=512e" }, 9 },
  { "512e-xp", { "model=512e-xp" }, 9 },   /* sector [7, 14] */
  { "4kn", { "model=4kn" }, 9 },
  { "1024/8192", { "logical=1024", "physical=8192" }, 9 },
};

#define SIZE (64 * 1024)

static struct s4k_dev *
open_dev (const struct model *m, const char *const *extra)
{
  struct s4k_config c;
  struct s4k_dev *d;
  char err[256], kv[256];
  s4k_config_init (&c);
  static char store[32][128];
  unsigned ns = 0;
  const char *keys[16] = { "size=65536" };
  unsigned n = 1;
  for (unsigned i = 0; i < 3 && m->keys[i]; i++)
    keys[n++] = m->keys[i];
  for (unsigned i = 0; extra && extra[i]; i++)
    keys[n++] = extra[i];
  for (unsigned i = 0; i < n; i++) {
    snprintf (kv, sizeof kv, "%s", keys[i]);
    char *eq = strchr (kv, '=');
    *eq = '\0';
    /* The config keeps string values: give it storage that lasts. */
    char *v = store[ns++ % 32];
    snprintf (v, 128, "%s", eq + 1);
    if (s4k_config_set (&c, kv, v, err, sizeof err))
      bail ("%s", err);
  }
  if (s4k_config_finish (&c, err, sizeof err))
    bail ("%s", err);
  c.stats_count = true;
  if (s4k_dev_open (&d, &c, err, sizeof err))
    bail ("%s", err);
  return d;
}

/* Fills LBA i with bytes (i + salt). */
static void
fill (struct s4k_dev *d, unsigned salt)
{
  const uint32_t L = s4k_dev_geometry (d)->logical;
  static char buf[SIZE];
  for (uint64_t i = 0; i < SIZE / L; i++)
    memset (buf + i * L, (int) (i + salt), L);
  if (s4k_write (d, buf, SIZE, 0, 0) || s4k_flush (d))
    bail ("fill failed");
}

/* 0: LBA holds (i + salt); 1: other data; 2: unreadable. */
static int
lba_state (struct s4k_dev *d, uint64_t i, unsigned salt)
{
  const uint32_t L = s4k_dev_geometry (d)->logical;
  static char buf[65536];
  int r = s4k_read (d, buf, L, i * L);
  if (r == -EIO)
    return 2;
  if (r)
    bail ("read failed: %d", r);
  for (uint32_t k = 0; k < L; k++)
    if ((unsigned char) buf[k] != (unsigned char) (i + salt))
      return 1;
  return 0;
}

/* The LBAs of the physical sector holding LBA lba. */
static void
sector_lbas (struct s4k_dev *d, uint64_t lba, uint64_t *first,
             uint64_t *count)
{
  const struct s4k_geometry *g = s4k_dev_geometry (d);
  uint64_t s, e;
  s4k_sector_range (g, s4k_sector_index (g, lba * g->logical), &s, &e);
  *first = s / g->logical;
  *count = (e - s) / g->logical;
}

static void
test_bad (const struct model *m)
{
  const char *extra[] = { "bad-sectors=9", NULL };
  struct s4k_dev *d = open_dev (m, extra);
  const uint32_t L = s4k_dev_geometry (d)->logical;
  uint64_t first, count;
  char err[256];
  static char buf[SIZE];
  sector_lbas (d, 9, &first, &count);
  fill (d, 0);                  /* whole sectors around 9 except its own */
  s4k_dev_bad_add (d, 9, 9, err, sizeof err);   /* the fill repaired it */

  int good = 1;
  for (uint64_t i = 0; i < SIZE / L; i++) {
    int st = lba_state (d, i, 0);
    good &= (i >= first && i < first + count) ? st == 2 : st == 0;
  }
  ok (good, "%s: bad LBA 9: exactly LBAs %" PRIu64 "-%" PRIu64 " fail with "
      "EIO", m->name, first, first + count - 1);
  ok (s4k_read (d, buf, 16 * (uint64_t) L, 0) == -EIO,
      "%s: a read touching the bad sector fails whole", m->name);

  memset (buf, 0xee, L);
  if (count > 1) {
    ok (s4k_write (d, buf, L, 9 * (uint64_t) L, 0) == -EIO,
        "%s: a partial write of the bad sector fails with EIO", m->name);
    ok (s4k_zero (d, L, 9 * (uint64_t) L, 0) == -EIO,
        "%s: a partial zero fails too", m->name);
    s4k_dev_bad_remove (d, 9, 9, err, sizeof err);
    good = 1;
    for (uint64_t i = first; i < first + count; i++)
      good &= lba_state (d, i, 0) == 0;
    ok (good, "%s: ... and changed nothing", m->name);
    s4k_dev_bad_add (d, 9, 9, err, sizeof err);
  }
  memset (buf, 0x5a, count * L);
  ok (s4k_write (d, buf, count * L, first * L, 0) == 0 &&
      lba_state (d, first, 0) == 1 && lba_state (d, first + count, 0) == 0,
      "%s: a whole-sector write succeeds and repairs it", m->name);
  s4k_dev_bad_add (d, 9, 9, err, sizeof err);
  ok (s4k_zero (d, count * L, first * L, 0) == 0 && lba_state (d, 9, 0) == 1,
      "%s: a whole-sector zero repairs it", m->name);
  s4k_dev_bad_add (d, 9, 9, err, sizeof err);
  ok (s4k_trim (d, count * L, first * L, 0) == 0 && lba_state (d, 9, 0) != 2,
      "%s: a whole-sector trim repairs it", m->name);

  /* bad list names the sector's LBAs. */
  s4k_dev_bad_add (d, 9, 9, err, sizeof err);
  char *list = NULL;
  size_t len = 0;
  FILE *fp = open_memstream (&list, &len);
  s4k_dev_bad_list (d, fp);
  fclose (fp);
  char want[64];
  snprintf (want, sizeof want, "%" PRIu64 "-%" PRIu64 "\n", first,
            first + count - 1);
  ok (strcmp (list, want) == 0, "%s: bad list says %.*s", m->name,
      (int) strlen (want) - 1, want);
  free (list);
  ok (s4k_dev_bad_add (d, 0, SIZE / L, err, sizeof err) == -ERANGE,
      "%s: an LBA beyond the end is refused: %s", m->name, err);

  struct s4k_stats s;
  s4k_dev_stats (d, &s);
  is_u64 (s.op[S4K_OP_READ].bad_sector_errors, count + 1,
          "%s: reads failed by the bad sector are counted", m->name);
  is_u64 (s.op[S4K_OP_WRITE].bad_sector_errors, count > 1,
          "%s: partial writes failed by it too", m->name);
  is_u64 (s.op[S4K_OP_WRITE].bad_sectors_cleared +
          s.op[S4K_OP_ZERO].bad_sectors_cleared +
          s.op[S4K_OP_TRIM].bad_sectors_cleared, 1 + 3,
          "%s: every repair is counted", m->name);
  s4k_dev_close (d);
}

/* Finds "key": and returns what follows, or NULL. */
static const char *
json_after (const char *s, const char *key)
{
  char k[64];
  snprintf (k, sizeof k, "\"%s\": ", key);
  s = strstr (s, k);
  return s ? s + strlen (k) : NULL;
}

static const char *const outcome_names[] = {
  "kept", "reverted", "torn", "unreadable", "garbage", "zeroed"
};
enum { KEPT, REVERTED, TORN, UNREADABLE, GARBAGE, ZEROED, OUTCOMES };

static int
torn_value (const char *torn)
{
  static const char *const t[] = { "none", "sector", "unreadable",
                                   "garbage", "zero" };
  for (int i = 0; i < 5; i++)
    if (strcmp (torn, t[i]) == 0)
      return i;
  bail ("torn=%s?", torn);
  return -1;
}

/* A device with flushed data (fill 0) and one unflushed write of 0xa5 to
 * m->lba, cut under torn: *rep is the report. */
static struct s4k_dev *
cut_dev (const struct model *m, unsigned seed, const char *torn, char **rep)
{
  char seedkv[32];
  const char *extra[] = { "write-cache=true", seedkv,
                          "power-cut-after=1000000000", NULL };
  snprintf (seedkv, sizeof seedkv, "seed=%u", seed);
  struct s4k_dev *d = open_dev (m, extra);
  const uint32_t L = s4k_dev_geometry (d)->logical;
  static char buf[65536];
  fill (d, 0);
  memset (buf, 0xa5, L);
  if (s4k_write (d, buf, L, m->lba * L, 0))
    bail ("write failed");
  if (s4k_dev_power_cut (d, torn_value (torn), rep) || !*rep)
    bail ("power cut failed");
  return d;
}

/* Byte k of LBA i as the written image has it (the fill, or 0xa5). */
static unsigned char
new_byte (const struct model *m, uint64_t i)
{
  return i == m->lba ? 0xa5 : (unsigned char) i;
}

static void
test_cut (const struct model *m, const char *torn)
{
  uint64_t first, count, changed_lo = UINT64_MAX, changed_hi = 0;
  unsigned seen[OUTCOMES] = { 0 }, wrong = 0, nseeds = 150;
  unsigned nbr_hit = 0;         /* seeds that changed a neighbour */
  bool outside = false, replayed = false;

  for (unsigned seed = 1; seed <= nseeds; seed++) {
    char *rep;
    struct s4k_dev *d = cut_dev (m, seed, torn, &rep);
    const uint32_t L = s4k_dev_geometry (d)->logical;
    static char buf[65536];
    sector_lbas (d, m->lba, &first, &count);
    /* One sector at risk, the right one. */
    const char *o = json_after (rep, "outcome"), *lba = json_after (rep, "lba"),
               *lbas = json_after (rep, "lbas");
    int out = -1;
    for (int i = 0; o && i < OUTCOMES; i++)
      if (strncmp (o + 1, outcome_names[i], strlen (outcome_names[i])) == 0 &&
          o[1 + strlen (outcome_names[i])] == '"')
        out = i;
    if (out < 0 || !lba || strtoull (lba, NULL, 10) != first ||
        strtoull (lbas, NULL, 10) != count || json_after (o, "outcome")) {
      if (!wrong++)
        diag ("seed %u: report %s", seed, rep);
      free (rep);
      s4k_dev_close (d);
      continue;
    }
    seen[out]++;
    const char *gf = json_after (rep, "garbage_from"),
               *gl = json_after (rep, "garbage_lba");
    const uint64_t gfrom = gf ? strtoull (gf, NULL, 10) : 0,
                   glba = gl ? strtoull (gl, NULL, 10) : 0;
    if (out == GARBAGE && (!gf || !gl || glba != gfrom / L ||
                           glba < first || glba >= first + count) &&
        !wrong++)
      diag ("seed %u: garbage_from/garbage_lba: %s", seed, rep);
    bool nbr = false;
    /* What the LBAs hold agrees with the outcome. */
    for (uint64_t i = 0; i < SIZE / L; i++) {
      int st = lba_state (d, i, 0);
      bool in = i >= first && i < first + count;
      bool okay;
      if (st == 1 && i == m->lba && L > 0) {
        /* The new data, all of it. */
        memset (buf, 0, L);
        s4k_read (d, buf, L, i * L);
        st = (unsigned char) buf[0] == 0xa5 ? 3 : 1;
      }
      if (st) {
        outside |= !in;
        nbr |= in && i != m->lba;
        changed_lo = i < changed_lo ? i : changed_lo;
        changed_hi = i > changed_hi ? i : changed_hi;
      }
      switch (out) {
      case KEPT: okay = i == m->lba ? st == 3 : st == 0; break;
      case REVERTED: okay = st == 0; break;
      case TORN: {
        /* A mix: the written LBA is new iff the report says so. */
        const char *nl = json_after (rep, "new_lbas");
        bool isnew = false;
        for (const char *p = nl; p && *p && *p != ']'; ) {
          char *e;
          uint64_t v = strtoull (p + 1, &e, 10);
          isnew |= v == i && e != p + 1;
          p = e;
        }
        okay = i == m->lba ? st == (isnew ? 3 : 0) : st == 0;
        break;
      }
      case UNREADABLE: okay = in ? st == 2 : st == 0; break;
      case GARBAGE:
        if (!in || i < glba)
          okay = i == m->lba ? st == 3 : st == 0;
        else {
          /* The new image up to garbage_from, garbage after it: an LBA
           * wholly after it differs from the image (a part of one may
           * match by chance). */
          okay = s4k_read (d, buf, L, i * L) == 0;
          for (uint64_t k = 0; okay && i * L + k < gfrom; k++)
            okay = (unsigned char) buf[k] == new_byte (m, i);
          if (okay && gfrom <= i * L) {
            bool same = true;
            for (uint64_t k = 0; k < L; k++)
              same &= (unsigned char) buf[k] == new_byte (m, i);
            okay = !same;
          }
        }
        break;
      default:                  /* ZEROED */
        okay = !in ? st == 0 : s4k_read (d, buf, L, i * L) == 0;
        for (uint64_t k = 0; in && okay && k < L; k++)
          okay = buf[k] == 0;
        break;
      }
      if (!okay && !wrong++)
        diag ("seed %u: LBA %" PRIu64 " state %d after outcome %s: %s", seed,
              i, st, outcome_names[out], rep);
    }
    nbr_hit += nbr;
    if (out == GARBAGE && !replayed) {
      /* Seeded: the same seed and requests leave the same bytes. */
      static char img[2][SIZE];
      char *rep2;
      struct s4k_dev *d2 = cut_dev (m, seed, torn, &rep2);
      ok (s4k_read (d, img[0], SIZE, 0) == 0 &&
          s4k_read (d2, img[1], SIZE, 0) == 0 &&
          memcmp (img[0], img[1], SIZE) == 0 && strcmp (rep, rep2) == 0,
          "%s torn=%s: seed %u again: the same garbage, the same report",
          m->name, torn, seed);
      free (rep2);
      s4k_dev_close (d2);
      replayed = true;
    }
    free (rep);
    s4k_dev_close (d);
  }
  ok (!wrong, "%s torn=%s: every LBA agrees with its sector's reported "
      "outcome over %u seeds", m->name, torn, nseeds);
  ok (!outside, "%s torn=%s: no LBA outside the physical sector changed "
      "(the flushed data there survived every cut)", m->name, torn);
  const bool tearable = count > 1;
  unsigned third;               /* the policy's interrupted write */
  switch (torn_value (torn)) {
  case S4K_TORN_NONE: third = OUTCOMES; break;
  case S4K_TORN_SECTOR: third = tearable ? TORN : OUTCOMES; break;
  case S4K_TORN_UNREADABLE: third = tearable ? UNREADABLE : OUTCOMES; break;
  case S4K_TORN_GARBAGE: third = GARBAGE; break;
  default: third = ZEROED; break;
  }
  bool allowed = true;
  for (unsigned i = 0; i < OUTCOMES; i++)
    if (i == REVERTED)
      allowed &= seen[i] > 0;
    else if (third == OUTCOMES && i == KEPT)
      allowed &= strcmp (torn, "none") == 0 ? !seen[i] : seen[i] > 0;
    else
      allowed &= (i == KEPT || i == third) ? seen[i] > 0 : !seen[i];
  ok (allowed, "%s torn=%s: outcomes kept %u, reverted %u, torn %u, "
      "unreadable %u, garbage %u, zeroed %u: those the policy allows, each "
      "seen", m->name, torn, seen[0], seen[1], seen[2], seen[3], seen[4],
      seen[5]);
  /* Neighbours: never hurt by none or sector (after a drive RMW their
   * old and new bytes are equal); unreadable, garbage and zero can. */
  const bool hurts = tearable && (third == UNREADABLE || third == GARBAGE ||
                                  third == ZEROED);
  ok (hurts ? nbr_hit > 0 : nbr_hit == 0, "%s torn=%s: the neighbours of "
      "the written LBA in its physical sector were changed after %u of %u "
      "cuts%s", m->name, torn, nbr_hit, nseeds,
      hurts ? " (some must be)" : " (none may be)");
  if (third == UNREADABLE || third == ZEROED)
    ok (changed_lo == first && changed_hi == first + count - 1,
        "%s torn=%s: the LBAs ever changed are exactly the physical "
        "sector's (%" PRIu64 "-%" PRIu64 ")", m->name, torn, first,
        first + count - 1);
  else if (third == GARBAGE)
    ok (changed_lo >= first && changed_hi == first + count - 1,
        "%s torn=%s: the LBAs ever changed are in the physical sector, "
        "up to its last (%" PRIu64 "-%" PRIu64 " of %" PRIu64 "-%" PRIu64
        ")", m->name, torn, changed_lo, changed_hi, first,
        first + count - 1);
  else if (strcmp (torn, "none") != 0)
    ok (changed_lo == m->lba && changed_hi == m->lba,
        "%s torn=%s: the LBAs ever changed are exactly the written one",
        m->name, torn);
}

static void
test_cache (const struct model *m)
{
  const char *extra[] = { "write-cache=true", "write-cache-size=32k", NULL };
  struct s4k_dev *d = open_dev (m, extra);
  const struct s4k_geometry *g = s4k_dev_geometry (d);
  const uint32_t L = g->logical;
  static char buf[SIZE];
  char *rep;
  fill (d, 0);
  /* Unflushed, flushed, FUA. */
  memset (buf, 1, L);
  s4k_write (d, buf, L, 0, 0);
  s4k_flush (d);
  memset (buf, 2, L);
  s4k_write (d, buf, L, 0, 0);
  memset (buf, 3, L);
  s4k_write (d, buf, L, (uint64_t) (SIZE / L - 1) * L, S4K_FUA);
  s4k_read (d, buf, L, 0);
  ok (buf[0] == 2, "%s: a cached write reads back before the cut", m->name);
  s4k_dev_power_cut (d, S4K_TORN_NONE, &rep);
  free (rep);
  s4k_read (d, buf, L, 0);
  ok (buf[0] == 1, "%s: torn=none: the unflushed write is gone, the "
      "flushed one stays", m->name);
  s4k_read (d, buf, L, (uint64_t) (SIZE / L - 1) * L);
  ok (buf[0] == 3, "%s: the FUA write survives", m->name);

  /* 64 KiB written into a 32 KiB cache: the oldest half is destaged. */
  fill (d, 100);
  fill (d, 0);
  s4k_flush (d);
  for (uint64_t i = 0; i < SIZE / L; i++) {
    memset (buf, (int) (i + 50), L);
    s4k_write (d, buf, L, i * L, 0);
  }
  s4k_dev_power_cut (d, S4K_TORN_NONE, &rep);
  free (rep);
  uint64_t kept = 0, first_lost = SIZE / L;
  for (uint64_t i = 0; i < SIZE / L; i++) {
    if (lba_state (d, i, 50) == 0)
      kept++;
    else if (first_lost == SIZE / L)
      first_lost = i;
  }
  ok (kept >= SIZE / L / 2 - g->physical / L && kept == first_lost,
      "%s: write-cache-size: the oldest sectors were destaged (%" PRIu64
      " LBAs survived, a prefix)", m->name, kept);
  s4k_dev_close (d);
}

static void
test_after (const struct model *m)
{
  const char *extra[] = { "power-cut-after=3", "torn=none", NULL };
  struct s4k_dev *d = open_dev (m, extra);
  const uint32_t L = s4k_dev_geometry (d)->logical;
  static char buf[65536];
  memset (buf, 9, L);
  s4k_fault_epoch (s4k_dev_power_cuts (d));
  int r1 = s4k_write (d, buf, L, 0, 0), r2 = s4k_write (d, buf, L, L, 0);
  int r3 = s4k_write (d, buf, L, 2 * (uint64_t) L, 0);
  ok (r1 == 0 && r2 == 0 && r3 == -EIO && s4k_dev_power_cuts (d) == 1,
      "%s: power-cut-after=3: the third write is cut (EIO)", m->name);
  ok (s4k_write (d, buf, L, 0, 0) == -EIO && s4k_read (d, buf, L, 0) == -EIO,
      "%s: a connection from before the cut gets only EIO", m->name);
  s4k_fault_epoch (s4k_dev_power_cuts (d));
  memset (buf, 0, L);
  ok (s4k_read (d, buf, L, 2 * (uint64_t) L) == 0 && buf[0] == 0 &&
      s4k_read (d, buf, L, L) == 0 && buf[0] == 9,
      "%s: after power-on: the cut write reverted, the earlier ones "
      "stayed", m->name);
  s4k_fault_epoch (~0u);        /* back to "no connection" */
  s4k_dev_close (d);
}

int
main (void)
{
  for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
    test_bad (&models[i]);
    test_cut (&models[i], "none");
    test_cut (&models[i], "sector");
    test_cut (&models[i], "unreadable");
    test_cut (&models[i], "garbage");
    test_cut (&models[i], "zero");
    test_cache (&models[i]);
    test_after (&models[i]);
  }
  printf ("1..%u\n", tap_n);
  return tap_failed != 0;
}
