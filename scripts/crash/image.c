/* SPDX-License-Identifier: BSD-3-Clause */
/* sect4k-crash: sector maps and the durable image of a crash point
 * (the files: crash.h). */
#include "crash.h"

size_t
hash_k (uint64_t k, size_t cap)
{
  return (k * 0x9E3779B97F4A7C15ULL) >> 17 & (cap - 1);
}

struct sec *
map_find (const struct map *m, uint64_t k)
{
  if (!m->n)
    return NULL;
  for (size_t i = hash_k (k, m->cap);; i = (i + 1) & (m->cap - 1)) {
    if (!m->slot[i].data)
      return NULL;
    if (m->slot[i].k == k)
      return &m->slot[i];
  }
}

static void
map_grow (struct map *m)
{
  struct map old = *m;
  m->cap = old.cap ? 2 * old.cap : 64;
  m->slot = xcalloc (m->cap, sizeof *m->slot);
  m->n = 0;
  for (size_t i = 0; i < old.cap; i++)
    if (old.slot[i].data) {
      struct sec *s = map_add (m, old.slot[i].k);
      s->data = old.slot[i].data;
      s->unreadable = old.slot[i].unreadable;
    }
  free (old.slot);
}

/* A new slot for k (data NULL: the caller fills it). */
struct sec *
map_add (struct map *m, uint64_t k)
{
  if (2 * (m->n + 1) > m->cap)
    map_grow (m);
  size_t i = hash_k (k, m->cap);
  while (m->slot[i].data)
    i = (i + 1) & (m->cap - 1);
  m->slot[i].k = k;
  m->slot[i].unreadable = false;
  m->slot[i].data = (unsigned char *) 1;        /* taken */
  m->n++;
  return &m->slot[i];
}

void
map_clear (struct map *m)
{
  for (size_t i = 0; i < m->cap && m->n; i++)
    if (m->slot[i].data) {
      free (m->slot[i].data);
      m->slot[i].data = NULL;
      m->n--;
    }
  m->n = 0;
}

/* ---- images: base, flushed overlay, crash point overlay, state -------- */

int base_fd = -1;
uint64_t base_size;
struct map flushed;              /* writes [0, cp.f) */
struct map cpmap;                /* + the epoch's durable-early writes */
static size_t flushed_upto;

static void
read_base (uint64_t k, unsigned char *buf)
{
  uint64_t s, e;
  sector_range (k, &s, &e);
  memset (buf, 0, e - s);
  if (base_fd >= 0 && s < base_size) {
    uint64_t n = e < base_size ? e - s : base_size - s;
    if (pread (base_fd, buf, n, s) != (ssize_t) n)
      die ("%s: read at byte %" PRIu64 ": %s", base_path, s,
           strerror (errno ? errno : EIO));
  }
}

void
read_flushed (uint64_t k, unsigned char *buf)
{
  uint64_t s, e;
  struct sec *x = map_find (&flushed, k);
  sector_range (k, &s, &e);
  if (x)
    memcpy (buf, x->data, e - s);
  else
    read_base (k, buf);
}

void
read_durable (uint64_t k, unsigned char *buf)
{
  uint64_t s, e;
  struct sec *x = map_find (&cpmap, k);
  sector_range (k, &s, &e);
  if (x)
    memcpy (buf, x->data, e - s);
  else
    read_flushed (k, buf);
}

/* Applies write w's bytes that fall in sector k to buf (k's image). */
void
apply (const struct wr *w, uint64_t k, unsigned char *buf)
{
  uint64_t s, e;
  sector_range (k, &s, &e);
  uint64_t a = w->off > s ? w->off : s;
  uint64_t b = w->off + w->len < e ? w->off + w->len : e;
  if (a >= b)
    return;
  if (w->data)
    memcpy (buf + (a - s), w->data + (a - w->off), b - a);
  else
    memset (buf + (a - s), 0, b - a);
}

uint64_t
first_sector (const struct wr *w)
{
  return s4k_sector_index (&g, w->off);
}

uint64_t
last_sector (const struct wr *w)
{
  return s4k_sector_index (&g, w->off + w->len - 1);
}

/* Applies w to a map whose missing sectors come from fill. */
static void
apply_to_map (struct map *m, const struct wr *w,
              void (*fill) (uint64_t, unsigned char *))
{
  for (uint64_t k = first_sector (w); k <= last_sector (w); k++) {
    struct sec *x = map_find (m, k);
    if (!x) {
      x = map_add (m, k);
      x->data = xcalloc (1, P);
      fill (k, x->data);
    }
    apply (w, k, x->data);
  }
}

/* Moves the durable image to crash point c (they come in order). */
void
enter_cp (const struct cp *c)
{
  for (; flushed_upto < c->f; flushed_upto++)
    apply_to_map (&flushed, &writes[flushed_upto], read_base);
  map_clear (&cpmap);
  for (size_t i = c->f; i < c->nw; i++)
    if (durable_at (&writes[i], c))
      apply_to_map (&cpmap, &writes[i], read_flushed);
}

