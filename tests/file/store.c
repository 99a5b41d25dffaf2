/* SPDX-License-Identifier: BSD-3-Clause */
/* The file store under the engine, against a byte-array model: random
 * reads, writes, zeroes and trims (with RMW at the edges) on several
 * geometries, through io_uring and through pread/pwrite, buffered and
 * O_DIRECT; the data survives closing and reopening; extents; the size
 * and error rules of file=.
 *
 * usage: file-store DIR   (a directory on a file system that takes
 * O_DIRECT; the direct=true cases are skipped elsewhere) */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sect4k/sect4k.h"
#include "store/store.h"
#include "tap.h"

static const char *dir;
static char path[4096];
static uint64_t rng = 0x2545F4914F6CDD1Dull;

static uint64_t
rnd (uint64_t n)
{
  return xorshift64 (&rng) % n;
}

/* Builds a config from "key=value" strings (NULL-terminated). */
static int
config (struct s4k_config *c, const char **keys, char *err, size_t len)
{
  s4k_config_init (c);
  c->no_uring = false;
  for (; *keys; keys++) {
    char k[64];
    const char *eq = strchr (*keys, '=');
    snprintf (k, sizeof k, "%.*s", (int) (eq - *keys), *keys);
    if (s4k_config_set (c, k, eq + 1, err, len) == -1)
      return -1;
  }
  return s4k_config_finish (c, err, len);
}

/* Opens a device over the file store; NULL with err filled on failure. */
static struct s4k_dev *
open_dev (const char **keys, struct s4k_store **storep, char *err, size_t len)
{
  struct s4k_config c;
  struct s4k_dev *d;
  if (config (&c, keys, err, len) == -1)
    return NULL;
  struct s4k_store *s = s4k_file_store_new (&c, &c.geom.size, err, len);
  if (!s)
    return NULL;
  if (s4k_dev_new (&d, &c, s, err, len) < 0)
    return NULL;
  if (storep)
    *storep = s;
  return d;
}

static bool
is_boundary (const struct s4k_geometry *g, uint64_t off)
{
  return s4k_is_boundary (g, off);
}

struct ext_check {
  const char *model;
  uint32_t logical;
  uint64_t next, holes;
  const char *bad;
};

static int
ext_cb (void *opaque, uint64_t off, uint64_t len, bool zero)
{
  struct ext_check *e = opaque;
  if (off != e->next && !e->bad)
    e->bad = "runs not consecutive";
  if ((off % e->logical || len % e->logical) && !e->bad)
    e->bad = "run not at logical granularity";
  if (zero) {
    e->holes += len;
    for (uint64_t i = 0; i < len && !e->bad; i++)
      if (e->model[off + i])
        e->bad = "a hole holds data";
  }
  e->next = off + len;
  return 0;
}

/* Random ops against the model; returns the number of mismatched reads. */
static unsigned
random_ops (struct s4k_dev *d, char *model, unsigned n)
{
  const struct s4k_geometry *g = s4k_dev_geometry (d);
  const uint64_t L = g->logical, P = g->physical, size = g->size;
  char *buf = malloc (4 * P + L);
  unsigned bad = 0;

  for (unsigned i = 0; i < n; i++) {
    uint64_t len = (1 + rnd (3 * P / L)) * L;
    if (len > size)
      len = size;
    uint64_t off = rnd ((size - len) / L + 1) * L;
    unsigned kind = rnd (100);
    int r;
    if (kind < 45) {
      for (uint64_t j = 0; j < len; j++)
        buf[j] = rnd (255) + 1;
      r = s4k_write (d, buf, len, off, rnd (5) == 0 ? S4K_FUA : 0);
      memcpy (model + off, buf, len);
    }
    else if (kind < 60) {
      r = s4k_zero (d, len, off, rnd (2) ? S4K_MAY_TRIM : 0);
      memset (model + off, 0, len);
    }
    else if (kind < 70) {
      r = s4k_trim (d, len, off, 0);
      /* Whole physical sectors inside the range become holes. */
      uint64_t s = off, e = off + len;
      while (!is_boundary (g, s))
        s += L;
      while (e > s && !is_boundary (g, e))
        e -= L;
      if (s < e)
        memset (model + s, 0, e - s);
    }
    else {
      r = s4k_read (d, buf, len, off);
      if (r == 0 && memcmp (buf, model + off, len) != 0 && bad++ == 0)
        diag ("read at %" PRIu64 " length %" PRIu64 " differs", off, len);
    }
    if (r != 0 && bad++ == 0)
      diag ("op %u at %" PRIu64 " length %" PRIu64 ": %s", kind, off, len,
            strerror (-r));
  }
  free (buf);
  return bad;
}

static bool
read_all_matches (struct s4k_dev *d, const char *model, uint64_t size)
{
  char *all = malloc (size);
  int r = s4k_read (d, all, size, 0);
  bool same = r == 0 && memcmp (all, model, size) == 0;
  free (all);
  return same;
}

static bool direct_ok;

static void
integrity (const char *geom_name, const char **geom_keys, bool uring,
           bool direct)
{
  char err[512], name[256], size_key[64];
  const char *keys[16];
  unsigned k = 0;
  struct s4k_store *s;

  snprintf (name, sizeof name, "%s, %s, %s", geom_name,
            uring ? "io_uring" : "pread/pwrite",
            direct ? "direct" : "buffered");
  snprintf (path, sizeof path, "%s/integrity.img", dir);
  unlink (path);
  char file_key[4200];
  snprintf (file_key, sizeof file_key, "file=%s", path);
  keys[k++] = file_key;
  for (const char **g = geom_keys; *g; g++)
    keys[k++] = *g;
  keys[k++] = uring ? "io=uring" : "io=sync";
  keys[k++] = direct ? "direct=true" : "direct=false";
  size_t base = k;
  /* Room for a few sectors of each kind, plus a short last one. */
  snprintf (size_key, sizeof size_key, "size=%u", 3u << 18);
  keys[k++] = size_key;
  keys[k] = NULL;

  struct s4k_dev *d = open_dev (keys, &s, err, sizeof err);
  if (!ok (d != NULL, "%s: opens a new file", name)) {
    diag ("%s", err);
    return;
  }
  diag ("%s", s4k_file_store_info (s));
  ok (s4k_file_store_uring (s) == uring, "%s: serves through %s", name,
      uring ? "io_uring" : "pread/pwrite");
  const struct s4k_geometry *g = s4k_dev_geometry (d);
  uint64_t size = g->size;
  char *model = calloc (1, size);
  unsigned bad = random_ops (d, model, 600);
  ok (bad == 0 && read_all_matches (d, model, size),
      "%s: 600 random ops match the model", name);

  struct ext_check e = { model, g->logical, 0, 0, NULL };
  int r = s4k_extents (d, size, 0, ext_cb, &e);
  ok (r == 0 && !e.bad && e.next >= size,
      "%s: extents cover the device, holes read as zeroes (%s, %" PRIu64
      " bytes of holes)", name, e.bad ? e.bad : "ok", e.holes);
  ok (s4k_flush (d) == 0, "%s: flush", name);
  s4k_dev_close (d);

  /* Reopen without size=: the file's size, the same bytes. */
  keys[base] = NULL;
  d = open_dev (keys, NULL, err, sizeof err);
  if (!ok (d != NULL, "%s: reopens without size=", name)) {
    diag ("%s", err);
    free (model);
    return;
  }
  is_u64 (s4k_dev_geometry (d)->size, size, "%s: size from the file", name);
  ok (read_all_matches (d, model, size), "%s: reopened, the data is all there",
      name);
  s4k_dev_close (d);
  free (model);
}

/* Fills err from opening with keys; true if it failed naming want. */
static bool
refused (const char **keys, const char *want, char *err, size_t len)
{
  err[0] = '\0';
  struct s4k_dev *d = open_dev (keys, NULL, err, len);
  if (d) {
    s4k_dev_close (d);
    return false;
  }
  if (!strstr (err, want))
    diag ("got: %s", err);
  return strstr (err, want) != NULL;
}

static void
size_rules (void)
{
  char err[512], fk[4200], sub[4096];
  const char *keys[8];

  snprintf (path, sizeof path, "%s/rules.img", dir);
  snprintf (fk, sizeof fk, "file=%s", path);
  unlink (path);

  keys[0] = fk; keys[1] = NULL;
  ok (refused (keys, "does not exist (give size=", err, sizeof err),
      "a missing file without size= is refused: %s", err);

  snprintf (sub, sizeof sub, "%s/no/such/dir/x.img", dir);
  char fk2[4200];
  snprintf (fk2, sizeof fk2, "file=%s", sub);
  keys[0] = fk2; keys[1] = "size=1M"; keys[2] = NULL;
  ok (refused (keys, "cannot create it: No such file or directory", err,
               sizeof err), "a missing directory is named: %s", err);

  keys[0] = fk; keys[1] = "size=1M"; keys[2] = NULL;
  struct s4k_dev *d = open_dev (keys, NULL, err, sizeof err);
  struct stat st;
  ok (d && stat (path, &st) == 0 && st.st_size == 1 << 20 &&
      st.st_blocks == 0, "size= creates a sparse file");
  s4k_dev_close (d);

  keys[1] = "size=4M";
  d = open_dev (keys, NULL, err, sizeof err);
  ok (d && s4k_dev_geometry (d)->size == 4 << 20 && stat (path, &st) == 0 &&
      st.st_size == 4 << 20 && st.st_blocks == 0,
      "a larger size= grows the file sparsely");
  s4k_dev_close (d);

  keys[1] = "size=2M";
  ok (refused (keys, "smaller than file=", err, sizeof err) &&
      stat (path, &st) == 0 && st.st_size == 4 << 20,
      "a smaller size= is refused and nothing is truncated: %s", err);

  keys[1] = "model=4kn"; keys[2] = NULL;
  truncate (path, (4 << 20) + 512);
  ok (refused (keys, "is not a multiple of logical=4096", err, sizeof err),
      "a file size not a multiple of the logical size is refused: %s", err);

  truncate (path, 0);
  keys[1] = NULL;
  ok (refused (keys, "the file is empty", err, sizeof err),
      "an empty file without size= is refused: %s", err);

  snprintf (fk2, sizeof fk2, "file=%s", dir);
  keys[0] = fk2;
  ok (refused (keys, "Is a directory", err, sizeof err),
      "a directory is refused: %s", err);
  keys[0] = "file=/dev/null";
  ok (refused (keys, "not a regular file or block device", err, sizeof err),
      "a character device is refused: %s", err);

  /* Read-only: reads work, writes, zeroes and trims get EROFS. */
  keys[0] = fk; keys[1] = "size=1M"; keys[2] = NULL;
  truncate (path, 1 << 20);
  struct s4k_config c;
  struct s4k_store *s;
  config (&c, keys, err, sizeof err);
  c.readonly = true;
  c.geom.size = 0;
  s = s4k_file_store_new (&c, &c.geom.size, err, sizeof err);
  if (ok (s != NULL, "read-only open")) {
    s4k_dev_new (&d, &c, s, err, sizeof err);
    char buf[4096];
    ok (s4k_file_store_readonly (s) &&
        strstr (s4k_file_store_info (s), "read-only"),
        "read-only is said: %s", s4k_file_store_info (s));
    ok (s4k_read (d, buf, 4096, 0) == 0, "read-only: reads work");
    ok (s4k_write (d, buf, 512, 512, 0) == -EROFS &&
        s4k_write (d, buf, 4096, 0, 0) == -EROFS &&
        s4k_zero (d, 4096, 0, 0) == -EROFS &&
        s4k_trim (d, 4096, 0, 0) == -EROFS,
        "read-only: writes, zeroes and trims fail with EROFS");
    s4k_dev_close (d);
  }
  unlink (path);
}

/* O_DIRECT works here if a file opened with it can be read. */
static bool
probe_direct (void)
{
  snprintf (path, sizeof path, "%s/probe.img", dir);
  int fd = open (path, O_RDWR | O_CREAT | O_DIRECT, 0644);
  bool yes = fd != -1;
  if (fd != -1)
    close (fd);
  unlink (path);
  return yes;
}

int
main (int argc, char **argv)
{
  if (argc != 2) {
    fprintf (stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  dir = argv[1];
  static const char *g512n[] = { "model=512n", NULL };
  static const char *g512exp[] = { "model=512e-xp", NULL };
  static const char *g4kn[] = { "model=4kn", NULL };
  static const char *g1k8k[] = { "logical=1024", "physical=8192",
                                 "alignment-offset=2048", NULL };
  static const char *g64k[] = { "physical=64K", "alignment-offset=3584",
                                NULL };
  struct { const char *name, **keys; } geoms[] = {
    { "512n", g512n }, { "512e-xp", g512exp }, { "4kn", g4kn },
    { "1k/8k A=2048", g1k8k }, { "512/64k A=3584", g64k },
  };

  direct_ok = probe_direct ();
  if (!direct_ok)
    diag ("O_DIRECT is refused in %s: direct=true cases skipped", dir);
  for (size_t i = 0; i < sizeof geoms / sizeof geoms[0]; i++)
    for (int uring = 1; uring >= 0; uring--)
      for (int direct = 0; direct <= (int) direct_ok; direct++)
        integrity (geoms[i].name, geoms[i].keys, uring, direct);
  size_rules ();
  return done_testing ();
}
