/* Atomic (untorn) writes, issue 27: the keys and their one-line
 * refusals, which writes fit the limits, and writes marked atomic that
 * break a limit refused with EINVAL, nothing written. */
#include <errno.h>
#include <string.h>

#include "sect4k/sect4k.h"
#include "tap.h"

/* Applies "key=value ..." (space-separated) and finishes: 0, or -1 with
 * err filled.  The config keeps string values: give them storage that
 * lasts. */
static int
configure (struct s4k_config *c, const char *keys, char *err, size_t errlen)
{
  static char store[64][256];
  static unsigned ns;
  char kv[256];
  s4k_config_init (c);
  for (const char *p = keys; *p; ) {
    size_t n = strcspn (p, " ");
    snprintf (kv, sizeof kv, "%.*s", (int) n, p);
    p += n + (p[n] == ' ');
    char *eq = strchr (kv, '=');
    *eq = '\0';
    char *v = store[ns++ % 64];
    snprintf (v, 256, "%s", eq + 1);
    if (s4k_config_set (c, kv, v, err, errlen))
      return -1;
  }
  return s4k_config_finish (c, err, errlen);
}

static struct s4k_dev *
open_dev (const char *keys)
{
  struct s4k_config c;
  struct s4k_dev *d;
  char err[256];
  if (configure (&c, keys, err, sizeof err) ||
      s4k_dev_open (&d, &c, err, sizeof err))
    bail ("%s: %s", keys, err);
  return d;
}

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
    { "size=1M atomic-write-min=4K", "atomic-write-min=: needs atomic-write-max=" },
    { "size=1M atomic-write-boundary=64K", "atomic-write-boundary=: needs atomic-write-max=" },
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
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
    ok (s4k_atomic_fits (t[i].a, t[i].len, t[i].off) == t[i].fits,
        "fits (max %u min %u): %" PRIu64 " at %" PRIu64 " %s: %s",
        t[i].a->max, t[i].a->min, t[i].len, t[i].off,
        t[i].fits ? "fits" : "does not", t[i].why);
  const struct s4k_atomic off = { 0 };
  ok (!s4k_atomic_fits (&off, 4096, 0), "max 0: nothing fits");
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
    { 8192, 12288, "crosses a max unit" },
    { 16384, 8192, "max, not naturally aligned" },
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

int
main (void)
{
  test_keys ();
  test_fits ();
  test_refused ("512e");
  test_refused ("4kn");
  printf ("1..%u\n", tap_n);
  return tap_failed != 0;
}
