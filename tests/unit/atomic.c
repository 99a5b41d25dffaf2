/* SPDX-License-Identifier: BSD-3-Clause */
/* Atomic (untorn) writes, issue 27: the keys and their one-line
 * refusals, which writes fit the limits, writes marked atomic that
 * break a limit refused with EINVAL, nothing written; and power cuts
 * over atomic and plain writes mixed, per torn= policy and geometry:
 * an atomic write is always wholly old or wholly new, as the cut report
 * says, while plain writes tear as the policy lets them (512e, 4kn, and
 * 512e-xp, whose alignment offset makes pages cut physical sectors). */
#include <errno.h>
#include <string.h>

#include <stdlib.h>
#include <unistd.h>

#include "sect4k/sect4k.h"
#include "sect4k/wlog.h"
#include "tap.h"
#include "devrig.h"

/* ---- keys ------------------------------------------------------------- */

static void
test_keys (void)
{
  static const struct { const char *keys, *msg; } bad[] = {
    { "size=1M atomic-write-max=12K", "atomic-write-max=12K: not a power of two" },
    { "size=1M atomic-write-max=junk", "atomic-write-max=junk: not a power of two" },
    { "size=1M atomic-write-max=8G", "atomic-write-max=8G: not a power of two below 4G" },
    { "size=1M model=4kn atomic-write-max=2K", "atomic-write-max=2048: must be a multiple of physical=4096" },
    { "size=1M max-request=64K atomic-write-max=128K", "atomic-write-max=131072: must be a multiple of physical=512 and at most max-request=65536" },
    { "size=1M model=4kn atomic-write-max=16K atomic-write-min=2K", "atomic-write-min=2048: must be a multiple of logical=4096" },
    { "size=1M atomic-write-max=16K atomic-write-min=32K", "atomic-write-min=32768: must be a multiple of logical=512 and at most atomic-write-max=16384" },
    { "size=1M atomic-write-max=16K atomic-write-min=3K", "atomic-write-min=3K: not a power of two" },
    { "size=1M atomic-write-max=16K atomic-write-boundary=8K", "atomic-write-boundary=8192: must be at least atomic-write-max=16384" },
    { "size=1M atomic-write-max=16K atomic-write-boundary=24K", "atomic-write-boundary=24K: not a power of two" },
    { "size=1M atomic-writes=sometimes", "atomic-writes=sometimes: must be implicit" },
    { "size=1M atomic-writes=explicit", "atomic-writes=explicit: needs atomic-write-max=" },
    { "size=1M atomic-write-min=4K", "atomic-write-min=4096: needs atomic-write-max=" },
    { "size=1M atomic-write-boundary=64K", "atomic-write-boundary=65536: needs atomic-write-max=" },
  };
  struct s4k_config c;
  char err[256];
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    err[0] = '\0';
    int r = configure (&c, bad[i].keys, err, sizeof err);
    if (!ok (r == -1 && strstr (err, bad[i].msg) && !strchr (err, '\n'),
             "refused: %s", bad[i].keys))
      diag ("got \"%s\", want \"%s\"", err, bad[i].msg);
  }

  /* Defaults: off; min the physical sector; boundary none; implicit. */
  ok (configure (&c, "size=1M model=512e", err, sizeof err) == 0 &&
      c.atomic.max == 0 && !s4k_atomic_fits (&c.atomic, 4096, 0),
      "no key: no atomic writes, nothing fits");
  ok (configure (&c, "size=1M model=512e atomic-write-max=16K", err,
                 sizeof err) == 0 &&
      c.atomic.max == 16384 && c.atomic.min == 4096 &&
      c.atomic.boundary == 0 && !c.atomic.explicit_only,
      "atomic-write-max=16K on 512e: min 4096, no boundary, implicit");
  ok (configure (&c, "size=1M model=512e atomic-write-max=0 "
                 "atomic-writes=implicit", err, sizeof err) == 0 &&
      c.atomic.max == 0, "atomic-write-max=0: off");
  ok (configure (&c, "size=1M model=4kn atomic-write-max=64K "
                 "atomic-write-min=8K atomic-write-boundary=1M "
                 "atomic-writes=explicit", err, sizeof err) == 0 &&
      c.atomic.max == 65536 && c.atomic.min == 8192 &&
      c.atomic.boundary == 1048576 && c.atomic.explicit_only,
      "every key");
}

/* ---- which writes fit ------------------------------------------------- */

static void
test_fits (void)
{
  static const struct s4k_atomic a = { 16384, 4096, 0, false };
  static const struct s4k_atomic b = { 16384, 512, 65536, false };
  static const struct { const struct s4k_atomic *a; uint64_t len, off;
                        bool fits; const char *why; } t[] = {
    { &a, 16384, 0, true, "one whole unit" },
    { &a, 16384, 65536, true, "a whole unit further on" },
    { &a, 4096, 12288, true, "min at the unit's end" },
    { &a, 8192, 4096, true, "inside a unit, min-aligned" },
    { &a, 8192, 12288, false, "crosses a unit" },
    { &a, 16384, 4096, false, "max but not naturally aligned" },
    { &a, 32768, 0, false, "longer than max" },
    { &a, 2048, 0, false, "shorter than min" },
    { &a, 6144, 0, false, "not a multiple of min" },
    { &a, 4096, 2048, false, "offset not a multiple of min" },
    { &a, 0, 0, false, "empty" },
    { &b, 512, 1024, true, "min 512: one logical sector" },
    { &b, 1536, 512, true, "min 512: three sectors inside a unit" },
    { &b, 1024, 16384 - 512, false, "min 512: across the unit" },
    { &b, 16384, 65536 - 8192, false, "min 512: across the boundary" },
  };
  /* Marked atomic (SBC-4's WRITE ATOMIC(16) rule), where a unit or the
   * boundary does not matter: every write that fits, and those across
   * a unit or the boundary. */
  static const char *const across[] = {
    "crosses a unit", "max but not naturally aligned",
    "min 512: across the unit", "min 512: across the boundary",
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    bool allowed = t[i].fits;
    for (size_t j = 0; j < sizeof across / sizeof across[0]; j++)
      allowed |= strcmp (t[i].why, across[j]) == 0;
    ok (s4k_atomic_fits (t[i].a, t[i].len, t[i].off) == t[i].fits &&
        s4k_atomic_allowed (t[i].a, t[i].len, t[i].off) == allowed,
        "max %u min %u: %" PRIu64 " at %" PRIu64 " %s (implicit), %s "
        "marked atomic: %s", t[i].a->max, t[i].a->min, t[i].len, t[i].off,
        t[i].fits ? "fits" : "does not fit",
        allowed ? "allowed" : "refused", t[i].why);
  }
  const struct s4k_atomic off = { 0 };
  ok (!s4k_atomic_fits (&off, 4096, 0) && !s4k_atomic_allowed (&off, 4096, 0),
      "max 0: nothing fits, nothing allowed");
}

/* ---- writes marked atomic that break a limit -------------------------- */

static void
test_refused (const char *model)
{
  char keys[128];
  snprintf (keys, sizeof keys, "size=1M model=%s atomic-write-max=16K",
            model);
  struct s4k_dev *d = open_dev (keys);
  ok (s4k_dev_atomic (d)->max == 16384 && s4k_dev_atomic (d)->min == 4096,
      "%s: s4k_dev_atomic has the limits", model);
  static char buf[65536], back[65536], zero[65536];
  memset (buf, 0xa5, sizeof buf);
  static const struct { uint64_t len, off; const char *why; } t[] = {
    { 32768, 0, "longer than max" },
    { 2048, 0, "shorter than min" },
    { 6144, 0, "not a multiple of min" },
    { 4096, 1024, "misaligned to min" },
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    int r = s4k_write (d, buf, t[i].len, t[i].off, S4K_ATOMIC);
    s4k_read (d, back, 65536, 0);
    ok (r == -EINVAL && memcmp (back, zero, 65536) == 0,
        "%s: S4K_ATOMIC write %s (%" PRIu64 " at %" PRIu64 "): EINVAL, "
        "nothing written", model, t[i].why, t[i].len, t[i].off);
  }
  ok (s4k_write (d, buf, 16384, 16384, S4K_ATOMIC) == 0 &&
      s4k_read (d, back, 16384, 16384) == 0 &&
      memcmp (back, buf, 16384) == 0,
      "%s: S4K_ATOMIC write of one unit: written", model);
  /* Across a naturally aligned unit: allowed (WRITE ATOMIC(16) of 2
   * blocks at LBA 3 on 4kn). */
  static const struct { uint64_t len, off; const char *why; } a[] = {
    { 8192, 12288, "crosses a max unit" },
    { 16384, 40960, "max, not naturally aligned" },
  };
  for (size_t i = 0; i < sizeof a / sizeof a[0]; i++) {
    memset (buf, 0x5a + (int) i, a[i].len);
    ok (s4k_write (d, buf, a[i].len, a[i].off, S4K_ATOMIC) == 0 &&
        s4k_read (d, back, a[i].len, a[i].off) == 0 &&
        memcmp (back, buf, a[i].len) == 0,
        "%s: S4K_ATOMIC write %s (%" PRIu64 " at %" PRIu64 "): written",
        model, a[i].why, a[i].len, a[i].off);
  }
  s4k_dev_close (d);

  /* No atomic writes at all: every write marked atomic is refused, the
   * plain ones served. */
  snprintf (keys, sizeof keys, "size=1M model=%s", model);
  d = open_dev (keys);
  ok (s4k_write (d, buf, 4096, 0, S4K_ATOMIC) == -EINVAL &&
      s4k_read (d, back, 4096, 0) == 0 && memcmp (back, zero, 4096) == 0 &&
      s4k_write (d, buf, 4096, 0, 0) == 0,
      "%s: no atomic-write-max: an S4K_ATOMIC write refused, a plain one "
      "served", model);
  s4k_dev_close (d);
}

/* ---- power cuts ------------------------------------------------------- */

#define DEV (256 * 1024)
#define PAGE 16384

/* Fills the device with byte 0x11 and makes it durable. */
static void
fill_old (struct s4k_dev *d)
{
  static char buf[DEV];
  memset (buf, 0x11, sizeof buf);
  if (s4k_write (d, buf, DEV, 0, 0) || s4k_flush (d))
    bail ("fill failed");
}

/* 0: [off, off+len) all old (0x11); 1: all `byte`; 2: a mix. */
static int
state (struct s4k_dev *d, uint64_t len, uint64_t off, int byte)
{
  static char buf[DEV];
  if (s4k_read (d, buf, len, off))
    return 2;
  bool old = true, new = true;
  for (uint64_t i = 0; i < len; i++) {
    old &= buf[i] == 0x11;
    new &= buf[i] == (char) byte;
  }
  return old ? 0 : new ? 1 : 2;
}

/* One atomic write as the report lists it: lba, lbas (the write's
 * LBAs), sectors (the physical sectors it settles). */
static bool
reported (const char *rep, const struct s4k_dev *d, uint64_t len,
          uint64_t off, bool kept)
{
  const struct s4k_geometry *g = s4k_dev_geometry (d);
  const uint64_t first = s4k_sector_index (g, off);
  const uint64_t last = s4k_sector_index (g, off + len - 1);
  char want[256];
  snprintf (want, sizeof want, "{\"lba\": %" PRIu64 ", \"lbas\": %" PRIu64
            ", \"sectors\": [%" PRIu64 ", %" PRIu64 "], \"outcome\": \"%s\"}",
            off / g->logical, len / g->logical, first, last,
            kept ? "kept" : "dropped");
  return strstr (rep, want) != NULL;
}

/* Under write-cache=true, with the cut from the control call: per seed,
 * atomic pages (16 KiB, aligned; under explicit, marked S4K_ATOMIC),
 * one of them rewritten, and plain writes (under implicit: crossing a
 * unit, so they do not fit; under explicit: not marked), an atomic
 * page with a 4 KiB write over part of it afterwards, and on 512e (min
 * 512) an atomic write cutting two physical sectors. */
static void
test_cut (const char *model, const char *torn, bool explicit_only)
{
  const unsigned seeds = 24;
  unsigned atomic_torn = 0, kept = 0, dropped = 0, plain_torn = 0;
  unsigned misreported = 0, settled_wrong = 0, rmw_wrong = 0;
  static char buf[DEV];
  for (unsigned seed = 1; seed <= seeds; seed++) {
    char keys[256];
    snprintf (keys, sizeof keys, "size=%d model=%s write-cache=true "
              "power-cut-after=1000000 seed=%u torn=%s "
              "atomic-write-max=16K atomic-write-min=%s%s", DEV, model, seed,
              torn, strcmp (model, "4kn") == 0 ? "4K" : "512",
              explicit_only ? " atomic-writes=explicit" : "");
    struct s4k_dev *d = open_dev (keys);
    const unsigned aflag = explicit_only ? S4K_ATOMIC : 0;
    fill_old (d);
    /* Atomic pages 0..3 at 0, 32K, 64K, 96K, bytes 0x21.. (apart: with
     * an alignment offset, neighbouring pages share a physical sector,
     * and a write touching a unit settles it). */
    for (unsigned i = 0; i < 4; i++) {
      memset (buf, 0x21 + i, PAGE);
      if (s4k_write (d, buf, PAGE, (uint64_t) i * 2 * PAGE, aflag))
        bail ("atomic write failed");
    }
    /* Page 0 again: the new unit takes the old one in (both kept or
     * both dropped: never the first write alone). */
    memset (buf, 0x29, PAGE);
    if (s4k_write (d, buf, PAGE, 0, aflag))
      bail ("atomic write failed");
    /* Plain pages: under implicit, 16K across a unit boundary (at 120K:
     * units 64K and 80K); under explicit, unmarked aligned pages. */
    const uint64_t plain_off[2] = { explicit_only ? 128 * 1024 : 120 * 1024,
                                    explicit_only ? 160 * 1024 : 152 * 1024 };
    for (unsigned i = 0; i < 2; i++) {
      memset (buf, 0x31 + i, PAGE);
      if (s4k_write (d, buf, PAGE, plain_off[i], 0))
        bail ("plain write failed");
    }
    /* An atomic page, then a write over part of it: the page is made
     * durable first (the cut can drop only the later write). */
    memset (buf, 0x41, PAGE);
    const uint64_t a_off = 192 * 1024, b_off = a_off + 4096;
    s4k_write (d, buf, PAGE, a_off, aflag);
    memset (buf, 0x42, 4096);
    s4k_write (d, buf, 4096, b_off, 0);
    /* 512e: a 4 KiB atomic write at 512 cuts two physical sectors (its
     * RMW neighbours must come back old either way). */
    const bool rmw = strcmp (model, "512e") == 0;
    if (rmw) {
      memset (buf, 0x51, 4096);
      if (s4k_write (d, buf, 4096, 224 * 1024 + 512, S4K_ATOMIC))
        bail ("atomic RMW write failed");
    }

    char *rep = NULL;
    if (s4k_dev_power_cut (d, -1, &rep) || !rep)
      bail ("cut failed");
    for (unsigned i = 0; i < 4; i++) {
      int st = state (d, PAGE, (uint64_t) i * 2 * PAGE, i ? 0x21 + i : 0x29);
      atomic_torn += st == 2;
      kept += st == 1;
      dropped += st == 0;
      if (st != 2 &&
          !reported (rep, d, PAGE, (uint64_t) i * 2 * PAGE, st == 1))
        misreported++;
    }
    for (unsigned i = 0; i < 2; i++)
      plain_torn += state (d, PAGE, plain_off[i], 0x31 + i) == 2;
    /* The settled page: new outside the physical sectors of the later
     * write. */
    const struct s4k_geometry *g = s4k_dev_geometry (d);
    uint64_t b_start, b_end, x;
    s4k_sector_range (g, s4k_sector_index (g, b_off), &b_start, &x);
    s4k_sector_range (g, s4k_sector_index (g, b_off + 4095), &x, &b_end);
    settled_wrong += state (d, b_start - a_off, a_off, 0x41) != 1 ||
                     state (d, a_off + PAGE - b_end, b_end, 0x41) != 1;
    if (rmw) {
      int st = state (d, 4096, 224 * 1024 + 512, 0x51);
      rmw_wrong += st == 2 ||
                   state (d, 512, 224 * 1024, 0) != 0 ||
                   state (d, 4096 - 512, 224 * 1024 + 4096 + 512, 0) != 0 ||
                   (!reported (rep, d, 4096, 224 * 1024 + 512, st == 1));
    }
    if (misreported && misreported < 2)
      diag ("seed %u: %s", seed, rep);
    free (rep);
    s4k_dev_close (d);
  }
  const char *mode = explicit_only ? "explicit" : "implicit";
  ok (atomic_torn == 0, "%s torn=%s %s: no atomic page torn by %u cuts "
      "(%u kept, %u dropped)", model, torn, mode, seeds, kept, dropped);
  ok (strcmp (torn, "none") == 0 ? kept == 0 && dropped > 0
                                 : kept > 0 && dropped > 0,
      "%s torn=%s %s: atomic pages %s", model, torn, mode,
      strcmp (torn, "none") == 0 ? "always dropped" : "kept and dropped");
  ok (misreported == 0, "%s torn=%s %s: the report names every atomic "
      "write kept or dropped as the data shows", model, torn, mode);
  ok (settled_wrong == 0, "%s torn=%s %s: an atomic page a later write "
      "overwrote in part was made durable first", model, torn, mode);
  if (strcmp (model, "512e") == 0)
    ok (rmw_wrong == 0, "%s torn=%s %s: a 4 KiB atomic write cutting two "
        "physical sectors: wholly old or new, its RMW neighbours old",
        model, torn, mode);
  if (strcmp (torn, "none") != 0 && strcmp (torn, "sector") != 0)
    ok (plain_torn > 0, "%s torn=%s %s: plain pages tear (%u of %u)",
        model, torn, mode, plain_torn, 2 * seeds);
}

/* Under write-cache=true: writes marked atomic off the naturally
 * aligned units, each across one (WRITE ATOMIC(16) allows them), then a
 * cut: each wholly old or new, as the report says.  Per seed, with one
 * inside a later one (which takes it in) and a plain write over part
 * of one (which settles it first). */
static void
test_cut_odd (const char *model, const char *torn)
{
  static const struct { uint64_t len, off; } w[] = {
    { 8192, 12288 },            /* 2 blocks at LBA 3 on 4kn */
    { 16384, 40960 },           /* the maximum, across 48K */
    { 12288, 94208 },           /* across 96K */
    { 8192, 139264 },           /* 136K-144K, inside the next ... */
    { 16384, 135168 },          /* ... across 144K: takes it in */
  };
  const size_t nw = sizeof w / sizeof w[0];
  const unsigned seeds = 24;
  unsigned torn_n = 0, kept = 0, dropped = 0, misreported = 0;
  unsigned settled_wrong = 0;
  static char buf[DEV];
  for (unsigned seed = 1; seed <= seeds; seed++) {
    char keys[256];
    snprintf (keys, sizeof keys, "size=%d model=%s write-cache=true "
              "power-cut-after=1000000 seed=%u torn=%s "
              "atomic-write-max=16K atomic-writes=explicit", DEV, model,
              seed, torn);
    struct s4k_dev *d = open_dev (keys);
    fill_old (d);
    for (size_t i = 0; i < nw; i++) {
      memset (buf, 0x61 + (int) i, w[i].len);
      if (s4k_write (d, buf, w[i].len, w[i].off, S4K_ATOMIC))
        bail ("%s: S4K_ATOMIC write of %" PRIu64 " at %" PRIu64 " failed",
              model, w[i].len, w[i].off);
    }
    /* Across 192K, then a plain 4 KiB over its last part: the atomic
     * write is made durable first. */
    const uint64_t a_off = 188416, b_off = a_off + 12288;
    memset (buf, 0x71, PAGE);
    if (s4k_write (d, buf, PAGE, a_off, S4K_ATOMIC))
      bail ("S4K_ATOMIC write failed");
    memset (buf, 0x72, 4096);
    if (s4k_write (d, buf, 4096, b_off, 0))
      bail ("plain write failed");

    char *rep = NULL;
    if (s4k_dev_power_cut (d, -1, &rep) || !rep)
      bail ("cut failed");
    /* The first three alone; the last two together (never the first
     * alone under old bytes of the second). */
    for (size_t i = 0; i < 3; i++) {
      int st = state (d, w[i].len, w[i].off, 0x61 + (int) i);
      torn_n += st == 2;
      kept += st == 1;
      dropped += st == 0;
      if (st != 2 && !reported (rep, d, w[i].len, w[i].off, st == 1))
        misreported++;
    }
    const int s4 = state (d, w[4].len, w[4].off, 0x65);
    torn_n += s4 == 2;
    if (s4 != 2 && !reported (rep, d, w[4].len, w[4].off, s4 == 1))
      misreported++;
    const struct s4k_geometry *g = s4k_dev_geometry (d);
    uint64_t b_start, x;
    s4k_sector_range (g, s4k_sector_index (g, b_off), &b_start, &x);
    settled_wrong += state (d, b_start - a_off, a_off, 0x71) != 1;
    if (misreported == 1)
      diag ("seed %u: %s", seed, rep);
    free (rep);
    s4k_dev_close (d);
  }
  ok (torn_n == 0, "%s torn=%s: S4K_ATOMIC writes across naturally "
      "aligned units: none torn by %u cuts (%u kept, %u dropped)", model,
      torn, seeds, kept, dropped);
  ok (strcmp (torn, "none") == 0 ? kept == 0 && dropped > 0
                                 : kept > 0 && dropped > 0,
      "%s torn=%s: across units: %s", model, torn,
      strcmp (torn, "none") == 0 ? "always dropped" : "kept and dropped");
  ok (misreported == 0, "%s torn=%s: across units: the report names each "
      "kept or dropped as the data shows", model, torn);
  ok (settled_wrong == 0, "%s torn=%s: across units: one a later write "
      "overwrote in part was made durable first", model, torn);
}

/* Without the cache: the write power-cut-after= interrupts is atomic or
 * not; an atomic one is wholly old or new. */
static void
test_cut_after (const char *model, const char *torn)
{
  unsigned atomic_torn = 0, kept = 0, plain_torn = 0;
  static char buf[PAGE];
  const unsigned seeds = 24;
  for (unsigned seed = 1; seed <= seeds; seed++)
    for (unsigned atomic = 0; atomic < 2; atomic++) {
      char keys[256];
      snprintf (keys, sizeof keys, "size=%d model=%s power-cut-after=2 "
                "seed=%u torn=%s atomic-write-max=16K", DEV, model, seed,
                torn);
      struct s4k_dev *d = open_dev (keys);
      fill_old (d);                 /* write 1 */
      memset (buf, 0x61, PAGE);
      /* Write 2: aligned (atomic), or across a unit (plain). */
      const uint64_t off = atomic ? 32 * 1024 : 40 * 1024;
      if (s4k_write (d, buf, PAGE, off, 0) != -EIO)
        bail ("power-cut-after=2: the second write succeeded");
      int st = state (d, PAGE, off, 0x61);
      if (atomic) {
        atomic_torn += st == 2;
        kept += st == 1;
      }
      else
        plain_torn += st == 2;
      s4k_dev_close (d);
    }
  ok (atomic_torn == 0 && kept > 0 && kept < seeds,
      "%s torn=%s, no cache, power-cut-after=: the atomic write it cuts "
      "wholly old or new (kept %u of %u)", model, torn, kept, seeds);
  ok (plain_torn > 0, "%s torn=%s, no cache: the plain write it cuts "
      "tears (%u of %u)", model, torn, plain_torn, seeds);
}

/* ---- the write log ---------------------------------------------------- */

/* Each write the device did atomically carries S4K_WLOG_ATOMIC, the
 * others not; read back with the engine's reader. */
static void
test_wlog (const char *mode, bool fault)
{
  char path[] = "/tmp/sect4k-atomic-wlog-XXXXXX";
  int fd = mkstemp (path);
  if (fd == -1)
    bail ("mkstemp failed");
  close (fd);
  char keys[256];
  const bool explicit_only = strcmp (mode, "explicit") == 0;
  snprintf (keys, sizeof keys, "size=1M model=512e write-log=%s "
            "atomic-write-max=16K atomic-write-min=512 atomic-writes=%s%s",
            path, mode, fault ? " write-cache=true" : "");
  struct s4k_dev *d = open_dev (keys);
  static char buf[2 * PAGE];         /* the longest write below */
  memset (buf, 7, sizeof buf);
  static const struct { uint64_t len, off; unsigned flags; bool implicit; }
    w[] = {
    { 16384, 0, S4K_ATOMIC, true },     /* a unit */
    { 16384, 8192, 0, false },          /* across a unit: never atomic */
    { 4096, 32768, 0, true },           /* fits: atomic if implicit */
    { 512, 65536 + 512, S4K_ATOMIC, true },  /* RMW of one sector */
    { 32768, 65536, 0, false },         /* longer than max */
  };
  const size_t nw = sizeof w / sizeof w[0];
  for (size_t i = 0; i < nw; i++)
    if (s4k_write (d, buf, w[i].len, w[i].off, w[i].flags))
      bail ("write %zu failed", i);
  /* A zero that would fit is no atomic write (nor its RMW). */
  if (s4k_zero (d, 16384, 131072, 0) || s4k_zero (d, 1024, 163840 + 512, 0))
    bail ("zero failed");
  s4k_dev_close (d);

  struct s4k_wlog_reader *r;
  struct s4k_wlog_entry e;
  char err[256];
  if (s4k_wlog_open (&r, path, 0, err, sizeof err))
    bail ("%s", err);
  size_t i = 0, wrong = 0, zeroes = 0;
  int n;
  while ((n = s4k_wlog_next (r, &e, err, sizeof err)) == 1) {
    if (e.flags & (S4K_WLOG_MARK | S4K_WLOG_FLUSH))
      continue;
    if (e.flags & S4K_WLOG_ZERO) {
      zeroes++;
      wrong += (e.flags & S4K_WLOG_ATOMIC) != 0;
      continue;
    }
    const bool want = w[i].flags & S4K_ATOMIC ||
                      (!explicit_only && w[i].implicit);
    if (i >= nw || e.off != w[i].off || e.len != w[i].len ||
        !(e.flags & S4K_WLOG_ATOMIC) != !want) {
      diag ("entry %zu: off %" PRIu64 " len %" PRIu64 " flags %#" PRIx64,
            i, e.off, e.len, e.flags);
      wrong++;
    }
    i++;
  }
  ok (n == 0 && i == nw && zeroes == 2 && !wrong, "write log (%s%s): "
      "S4K_WLOG_ATOMIC on exactly the writes the device did atomically "
      "(not on zeroes)", mode,
      fault ? ", write cache" : "");
  s4k_wlog_close (r);
  unlink (path);
}

int
main (void)
{
  test_keys ();
  test_fits ();
  test_refused ("512e");
  test_refused ("4kn");
  static const char *const torns[] =
    { "none", "sector", "unreadable", "garbage", "zero" };
  static const char *const models[] = { "512e", "4kn", "512e-xp" };
  for (unsigned m = 0; m < 3; m++)
    for (unsigned t = 0; t < 5; t++)
      for (unsigned x = 0; x < 2; x++)
        test_cut (models[m], torns[t], x);
  for (unsigned m = 0; m < 3; m++)
    for (unsigned t = 0; t < 5; t++)
      test_cut_odd (models[m], torns[t]);
  test_wlog ("implicit", false);
  test_wlog ("explicit", false);
  test_wlog ("implicit", true);
  test_cut_after ("512e", "garbage");
  test_cut_after ("4kn", "garbage");
  printf ("1..%u\n", tap_n);
  return tap_failed != 0;
}
