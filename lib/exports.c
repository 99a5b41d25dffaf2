/* SPDX-License-Identifier: BSD-3-Clause */
/* The export table: export=NAME sections and exports=PRESETS over the
 * one key parser (config.c).  Nothing here runs per request. */
#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "sect4k/exports.h"

/* Keys that pick the geometry: with exports=, a default one would
 * override every preset. */
static const char *const geometry_keys[] = {
  "model", "logical", "physical", "alignment-offset", "lowest-aligned",
};

void
s4k_exports_init (struct s4k_exports *t)
{
  memset (t, 0, sizeof *t);
  s4k_config_init (&t->defaults);
}

bool
s4k_exports_in_section (const struct s4k_exports *t)
{
  return t->n > 0;              /* exports are only added by export= here */
}

static int
check_name (const char *name, char *err, size_t errlen)
{
  size_t len = strlen (name);
  if (len == 0) {
    snprintf (err, errlen, "export=: the name is empty (the first export "
              "is the default one, which clients reach with the empty "
              "name)");
    return -1;
  }
  if (len > S4K_EXPORT_NAME_MAX) {
    snprintf (err, errlen, "export=%.40s...: name longer than %u bytes",
              name, S4K_EXPORT_NAME_MAX);
    return -1;
  }
  for (const char *p = name; *p; p++)
    if ((unsigned char) *p <= ' ' || *p == '/' || *p == 0x7f) {
      snprintf (err, errlen, "export=%s: names are printable characters "
                "without spaces or '/'", name);
      return -1;
    }
  return 0;
}

/* Appends an export named name with the defaults. */
static struct s4k_export *
add_export (struct s4k_exports *t, const char *name, char *err,
            size_t errlen)
{
  for (size_t i = 0; i < t->n; i++)
    if (strcmp (t->v[i].name, name) == 0) {
      snprintf (err, errlen, "export=%s: duplicate export name (each "
                "export has its own name)", name);
      return NULL;
    }
  struct s4k_export *v = realloc (t->v, (t->n + 1) * sizeof *v);
  if (!v) {
    snprintf (err, errlen, "export=%s: out of memory", name);
    return NULL;
  }
  t->v = v;
  struct s4k_export *e = &v[t->n];
  memset (e, 0, sizeof *e);
  if (!(e->name = strdup (name))) {
    snprintf (err, errlen, "export=%s: out of memory", name);
    return NULL;
  }
  e->cfg = t->defaults;
  e->cfg.name = e->name;
  t->n++;
  return e;
}

/* exports=: one export per preset, with the defaults as they stand when
 * the first export= comes (or at the end). */
static int
add_presets (struct s4k_exports *t, char *err, size_t errlen)
{
  if (!t->presets || t->presets_added)
    return 0;
  t->presets_added = true;
  for (size_t i = 0; i < sizeof geometry_keys / sizeof geometry_keys[0];
       i++) {
    const struct s4k_config *d = &t->defaults;
    bool given[] = { d->model != NULL, d->have_logical, d->have_physical,
                     d->have_alignment, d->have_lowest_aligned };
    if (given[i]) {
      snprintf (err, errlen, "exports=%s: %s= among the defaults would "
                "override every preset (give it in an export= section)",
                t->presets, geometry_keys[i]);
      return -1;
    }
  }
  char *list = strdup (t->presets), *save = NULL;
  if (!list) {
    snprintf (err, errlen, "exports=: out of memory");
    return -1;
  }
  int r = 0;
  for (char *p = strtok_r (list, ",", &save); p && r == 0;
       p = strtok_r (NULL, ",", &save)) {
    struct s4k_export *e = add_export (t, p, err, errlen);
    char e2[256];
    if (!e)
      r = -1;
    else if (s4k_config_set (&e->cfg, "model", p, e2, sizeof e2) == -1) {
      snprintf (err, errlen, "exports=%s: %s", t->presets, e2);
      r = -1;
    }
  }
  free (list);
  return r;
}

int
s4k_exports_set (struct s4k_exports *t, const char *key, const char *value,
                 char *err, size_t errlen)
{
  char e2[384];

  if (strcmp (key, "export") == 0) {
    if (check_name (value, err, errlen) == -1 ||
        add_presets (t, err, errlen) == -1)
      return -1;
    t->named = true;
    return add_export (t, value, err, errlen) ? 0 : -1;
  }
  if (strcmp (key, "exports") == 0) {
    if (t->n > 0) {
      snprintf (err, errlen, "export=%s: exports=%s cannot vary per export "
                "(give it before the first export=)", t->v[t->n - 1].name,
                value);
      return -1;
    }
    if (t->presets) {
      snprintf (err, errlen, "exports=%s: given twice (list every preset in "
                "one exports=)", value);
      return -1;
    }
    if (*value == '\0') {
      snprintf (err, errlen, "exports=: the list is empty (e.g. "
                "exports=512n,512e,512e-xp,4kn)");
      return -1;
    }
    for (const char *p = value; *p; p++)
      if (*p == ',' && (p == value || p[1] == ',' || p[1] == '\0')) {
        snprintf (err, errlen, "exports=%s: an empty name in the list",
                  value);
        return -1;
      }
    if (!(t->presets = strdup (value))) {
      snprintf (err, errlen, "exports=: out of memory");
      return -1;
    }
    t->named = true;
    return 0;
  }
  if (t->n == 0)
    return s4k_config_set (&t->defaults, key, value, err, errlen);
  struct s4k_export *e = &t->v[t->n - 1];
  if (s4k_config_set (&e->cfg, key, value, e2, sizeof e2) == -1) {
    snprintf (err, errlen, "export=%s: %s", e->name, e2);
    return -1;
  }
  return 0;
}

/* The defaults' statsfile= (write-log=, control=) for export name:
 * stats.json -> stats.NAME.json, stats -> stats.NAME. */
static char *
statsfile_for (const char *path, const char *name)
{
  const char *slash = strrchr (path, '/');
  const char *dot = strrchr (slash ? slash + 1 : path, '.');
  if (dot && (dot == path || dot[-1] == '/'))
    dot = NULL;                 /* a leading dot is not an extension */
  size_t stem = dot ? (size_t) (dot - path) : strlen (path);
  size_t n = strlen (path) + strlen (name) + 2;
  char *s = malloc (n);
  if (s)
    snprintf (s, n, "%.*s.%s%s", (int) stem, path, name, dot ? dot : "");
  return s;
}

/* A path among the defaults (*key == dflt) names each export's own
 * when there are several: the name inserted, kept in *owned. */
static int
own_path (const struct s4k_exports *t, struct s4k_export *e,
          const char **key, const char *dflt, char **owned)
{
  if (t->n < 2 || !*key || *key != dflt)
    return 0;
  if (!(*owned = statsfile_for (*key, e->name)))
    return -1;
  *key = *owned;
  return 0;
}

/* Same file: same path, or the same inode once both exist. */
static bool
same_file (const char *a, const char *b)
{
  struct stat sa, sb;
  if (strcmp (a, b) == 0)
    return true;
  return stat (a, &sa) == 0 && stat (b, &sb) == 0 &&
         sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* An upstream URI as the device it names: the transport (the scheme
 * without TLS's "s": nbds://, nbd:// are one server), where (host:port,
 * the Unix socket, the vsock CID:port) and the export name (the path
 * without its '/').  Strings are malloc'd; false if the URI is not one
 * of libnbd's forms we can read (it is then compared as a string). */
struct upstream_id {
  char *scheme, *where, *port, *name;
};

static void
id_free (struct upstream_id *id)
{
  free (id->scheme);
  free (id->where);
  free (id->port);
  free (id->name);
}

static int
hex (char c)
{
  return isdigit ((unsigned char) c) ? c - '0'
         : isxdigit ((unsigned char) c) ? tolower ((unsigned char) c) - 'a' + 10
         : -1;
}

/* [p, p+n) percent-decoded, malloc'd. */
static char *
decode (const char *p, size_t n)
{
  char *s = malloc (n + 1), *o = s;
  if (!s)
    return NULL;
  for (size_t i = 0; i < n; i++)
    if (p[i] == '%' && i + 2 < n && hex (p[i + 1]) >= 0 &&
        hex (p[i + 2]) >= 0) {
      *o++ = (char) (hex (p[i + 1]) * 16 + hex (p[i + 2]));
      i += 2;
    }
    else
      *o++ = p[i];
  *o = '\0';
  return s;
}

static bool
parse_upstream (const char *uri, struct upstream_id *id)
{
  memset (id, 0, sizeof *id);
  const char *colon = strstr (uri, "://");
  if (!colon || strncmp (uri, "nbd", 3) != 0)
    return false;
  const char *rest = uri + 3;
  if (*rest == 's')
    rest++;                     /* TLS: the same device */
  size_t slen = colon - rest;
  const char *auth = colon + 3;
  size_t alen = strcspn (auth, "/?#");
  const char *path = auth + alen;
  size_t plen = *path == '/' ? strcspn (path, "?#") : 0;
  const char *query = path + plen;
  if (!(id->scheme = strndup (rest, slen)) ||
      !(id->name = decode (plen ? path + 1 : path, plen ? plen - 1 : 0)))
    goto fail;
  if (strcmp (id->scheme, "+unix") == 0) {
    /* nbd+unix:///NAME?socket=PATH */
    const char *q = *query == '?' ? query + 1 : NULL;
    while (q && strncmp (q, "socket=", 7) != 0)
      q = (q = strchr (q, '&')) ? q + 1 : NULL;
    if (!q || !(id->where = decode (q + 7, strcspn (q + 7, "&#"))))
      goto fail;
    return true;
  }
  if (*id->scheme && strcmp (id->scheme, "+vsock") != 0)
    goto fail;                  /* nbd+ssh... : compared as strings */
  /* host[:port], [v6][:port] */
  const char *end = auth + alen, *port = NULL;
  const char *h = auth, *he;
  if (*h == '[') {
    h++;
    he = memchr (h, ']', end - h);
    if (!he)
      goto fail;
    if (he + 1 < end && he[1] == ':')
      port = he + 2;
  }
  else {
    he = memchr (h, ':', end - h);
    if (he)
      port = he + 1;
    else
      he = end;
  }
  if (!(id->where = strndup (h, he - h)) ||
      !(id->port = port ? strndup (port, end - port) : strdup ("10809")))
    goto fail;
  for (char *c = id->where; *c; c++)
    *c = tolower ((unsigned char) *c);
  return true;
 fail:
  id_free (id);
  return false;
}

/* Two host names for one server: equal, or an address in common. */
static bool
same_host (const char *a, const char *b, const char *port)
{
  struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
                            .ai_flags = AI_NUMERICSERV };
  struct addrinfo *ra = NULL, *rb = NULL;
  bool same = strcmp (a, b) == 0;
  if (!same && getaddrinfo (a, port, &hints, &ra) == 0 &&
      getaddrinfo (b, port, &hints, &rb) == 0)
    for (struct addrinfo *x = ra; x && !same; x = x->ai_next)
      for (struct addrinfo *y = rb; y && !same; y = y->ai_next)
        same = x->ai_addrlen == y->ai_addrlen &&
               memcmp (x->ai_addr, y->ai_addr, x->ai_addrlen) == 0;
  if (ra)
    freeaddrinfo (ra);
  if (rb)
    freeaddrinfo (rb);
  return same;
}

/* Two upstream= URIs naming one export of one server: the same string,
 * or the same transport, server (socket file, host or address, port)
 * and export name.  Export names differ: different devices, as far as
 * we can know (a server may map every name to one disk, as nbdkit's
 * memory plugin does). */
static bool
same_upstream (const char *a, const char *b)
{
  struct upstream_id x, y;
  if (strcmp (a, b) == 0)
    return true;
  if (!parse_upstream (a, &x))
    return false;
  bool same = false;
  if (parse_upstream (b, &y)) {
    same = strcmp (x.scheme, y.scheme) == 0 && strcmp (x.name, y.name) == 0;
    if (same && x.port)
      same = strcmp (x.port, y.port) == 0 &&
             (strcmp (x.scheme, "+vsock") == 0
              ? strcmp (x.where, y.where) == 0
              : same_host (x.where, y.where, x.port));
    else if (same)
      same = same_file (x.where, y.where);
    id_free (&y);
  }
  id_free (&x);
  return same;
}

int
s4k_exports_finish (struct s4k_exports *t, char *err, size_t errlen)
{
  char e2[384];
  if (add_presets (t, err, errlen) == -1)
    return -1;
  if (t->n == 0) {              /* today's single unnamed export */
    struct s4k_export *e = add_export (t, "", err, errlen);
    if (!e)
      return -1;
    e->cfg.name = NULL;
  }
  for (size_t i = 0; i < t->n; i++) {
    struct s4k_export *e = &t->v[i];
    e->cfg.readonly = t->readonly;
    e->cfg.readonly_per_connection = t->readonly_per_connection;
    if (own_path (t, e, &e->cfg.statsfile, t->defaults.statsfile,
                  &e->statsfile) == -1 ||
        own_path (t, e, &e->cfg.write_log, t->defaults.write_log,
                  &e->write_log) == -1 ||
        own_path (t, e, &e->cfg.fault.control, t->defaults.fault.control,
                  &e->control) == -1) {
      snprintf (err, errlen, "export=%s: out of memory", e->name);
      return -1;
    }
    if (s4k_config_finish (&e->cfg, e2, sizeof e2) == -1) {
      if (t->named)
        snprintf (err, errlen, "export=%s: %s", e->name, e2);
      else
        snprintf (err, errlen, "%s", e2);
      return -1;
    }
    for (size_t j = 0; j < i; j++) {
      const struct s4k_export *o = &t->v[j];
      if (e->cfg.file && o->cfg.file && same_file (e->cfg.file, o->cfg.file)) {
        snprintf (err, errlen, "export=%s: file=%s is also export %s's "
                  "(each export needs a file of its own)", e->name,
                  e->cfg.file, o->name);
        return -1;
      }
      /* Its sector locks are the device's: two devices over one upstream
       * export would RMW the same sectors unlocked and lose updates. */
      if (e->cfg.upstream && o->cfg.upstream &&
          same_upstream (e->cfg.upstream, o->cfg.upstream)) {
        snprintf (err, errlen, "export=%s: upstream=%s is also export %s's "
                  "(each export needs an upstream export of its own)",
                  e->name, e->cfg.upstream, o->name);
        return -1;
      }
      if (e->cfg.statsfile && o->cfg.statsfile &&
          strcmp (e->cfg.statsfile, o->cfg.statsfile) == 0) {
        snprintf (err, errlen, "export=%s: statsfile=%s is also export %s's "
                  "(each export needs a statsfile of its own)", e->name,
                  e->cfg.statsfile, o->name);
        return -1;
      }
      if (e->cfg.write_log && o->cfg.write_log &&
          same_file (e->cfg.write_log, o->cfg.write_log)) {
        snprintf (err, errlen, "export=%s: write-log=%s is also export %s's "
                  "(each export needs a log of its own)", e->name,
                  e->cfg.write_log, o->name);
        return -1;
      }
      if (e->cfg.fault.control && o->cfg.fault.control &&
          strcmp (e->cfg.fault.control, o->cfg.fault.control) == 0) {
        snprintf (err, errlen, "export=%s: control=%s is also export %s's "
                  "(each export needs a control socket of its own)",
                  e->name, e->cfg.fault.control, o->name);
        return -1;
      }
    }
  }
  return 0;
}

int
s4k_exports_open (struct s4k_exports *t, char *err, size_t errlen)
{
  char e2[384];
  for (size_t i = 0; i < t->n; i++) {
    struct s4k_export *e = &t->v[i];
    int r = s4k_dev_open (&e->dev, &e->cfg, e2, sizeof e2);
    if (r < 0) {
      e->dev = NULL;
      if (t->named)
        snprintf (err, errlen, "export=%s: %s", e->name, e2);
      else
        snprintf (err, errlen, "%s", e2);
      return r;
    }
    s4k_dev_describe (e->dev, e->description, sizeof e->description);
  }
  return 0;
}

void
s4k_exports_start (struct s4k_exports *t)
{
  for (size_t i = 0; i < t->n; i++)
    s4k_dev_start (t->v[i].dev);
}

void
s4k_exports_close (struct s4k_exports *t)
{
  for (size_t i = 0; i < t->n; i++) {
    s4k_dev_close (t->v[i].dev);
    free (t->v[i].name);
    free (t->v[i].statsfile);
    free (t->v[i].write_log);
    free (t->v[i].control);
  }
  free (t->v);
  free (t->presets);
  t->v = NULL;
  t->n = 0;
  t->presets = NULL;
}

struct s4k_export *
s4k_exports_find (const struct s4k_exports *t, const char *name, size_t len)
{
  if (t->n == 0)
    return NULL;
  if (len == 0)
    return &t->v[0];
  for (size_t i = 0; i < t->n; i++)
    if (strlen (t->v[i].name) == len && memcmp (t->v[i].name, name, len) == 0)
      return &t->v[i];
  return NULL;
}

void
s4k_exports_names (const struct s4k_exports *t, char *buf, size_t len)
{
  size_t at = 0;
  if (len)
    buf[0] = '\0';
  for (size_t i = 0; i < t->n && at < len; i++) {
    int n = snprintf (buf + at, len - at, "%s%s", i ? ", " : "",
                      t->v[i].name);
    if (n < 0)
      break;
    at += n;
  }
}

void
s4k_exports_unknown (const struct s4k_exports *t, const char *name,
                     char *buf, size_t len)
{
  char names[512];
  s4k_exports_names (t, names, sizeof names);
  snprintf (buf, len, "no export named '%.80s' (exports: %s)", name, names);
}
