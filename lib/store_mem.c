/* Sparse memory store.
 *
 * Data lives in chunks of max(physical, page size) bytes, placed so that
 * chunk boundaries are physical boundaries.  A two-level table (a lazily
 * mapped directory of 32-entry leaves) maps chunk numbers to chunks, so an
 * unwritten device costs almost nothing and a written chunk costs its own
 * size plus 8 bytes.  Chunks come from per-thread slabs, never from a
 * shared allocator lock, and are never freed while the store lives:
 * releasing one (zero or trim of the whole chunk) hands its pages back to
 * the kernel with MADV_DONTNEED and marks the slot, so readers and writers
 * of neighbouring sectors never touch freed memory.
 *
 * Callers (the engine) hold the sector locks of every sector they touch,
 * and of every sector of a chunk they release. */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "sect4k/sect4k.h"

#define LEAF_ENTRIES 32u
#define RELEASED ((uintptr_t) 1)  /* slot bit: chunk reads as zeroes */
#define SLAB_BYTES (2u << 20)
#define MAX_DIR_BYTES (1ull << 40)

struct leaf {
  _Atomic uintptr_t slot[LEAF_ENTRIES];
};

struct slab {
  struct slab *next;
  void *base;
  size_t len;
};

struct mem_store {
  struct s4k_store base;
  uint64_t size, shift;         /* shift: s4k_sector_shift */
  uint64_t chunk;               /* bytes, a power of two */
  unsigned chunk_bits;
  uint64_t nleaves;
  size_t dir_bytes, slab_bytes;
  _Atomic (struct leaf *) *dir;
  _Atomic (struct slab *) slabs;
  _Atomic uint64_t data_bytes;
  uint64_t id;                  /* tells thread-local slabs apart */
};

static _Atomic uint64_t next_store_id = 1;

/* The slab this thread carves chunks from. */
static _Thread_local __attribute__ ((tls_model ("initial-exec"))) struct {
  uint64_t store_id;
  char *next, *end;
} tl_slab;

static void *
map_noreserve (size_t len)
{
  void *p = mmap (NULL, len, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    return NULL;
  /* With THP "always", one 4 KiB write would otherwise cost 2 MiB. */
  madvise (p, len, MADV_NOHUGEPAGE);
  return p;
}

static char *
alloc_chunk (struct mem_store *m)
{
  if (tl_slab.store_id != m->id || tl_slab.next == tl_slab.end) {
    struct slab *s = malloc (sizeof *s);
    void *base = map_noreserve (m->slab_bytes);
    if (!s || !base) {
      free (s);
      if (base)
        munmap (base, m->slab_bytes);
      return NULL;
    }
    s->base = base;
    s->len = m->slab_bytes;
    s->next = atomic_load (&m->slabs);
    while (!atomic_compare_exchange_weak (&m->slabs, &s->next, s))
      ;
    tl_slab.store_id = m->id;
    tl_slab.next = base;
    tl_slab.end = (char *) base + m->slab_bytes;
  }
  char *p = tl_slab.next;
  tl_slab.next += m->chunk;
  return p;
}

/* Gives back the chunk this thread allocated last. */
static void
unalloc_chunk (struct mem_store *m, char *p)
{
  if (tl_slab.store_id == m->id && tl_slab.next == p + m->chunk)
    tl_slab.next = p;
}

static _Atomic uintptr_t *
slot_of (struct mem_store *m, uint64_t ci, bool create)
{
  _Atomic (struct leaf *) *dp = &m->dir[ci / LEAF_ENTRIES];
  struct leaf *leaf = atomic_load_explicit (dp, memory_order_acquire);
  if (!leaf) {
    if (!create)
      return NULL;
    struct leaf *fresh = calloc (1, sizeof *fresh);
    if (!fresh)
      return NULL;
    if (atomic_compare_exchange_strong (dp, &leaf, fresh))
      leaf = fresh;
    else
      free (fresh);
  }
  return &leaf->slot[ci % LEAF_ENTRIES];
}

/* The chunk's memory, or NULL if it reads as zeroes. */
static char *
chunk_for_read (struct mem_store *m, uint64_t ci)
{
  _Atomic uintptr_t *slot = slot_of (m, ci, false);
  uintptr_t e = slot ? atomic_load_explicit (slot, memory_order_acquire) : 0;
  return (e & RELEASED) ? NULL : (char *) e;
}

static char *
chunk_for_write (struct mem_store *m, uint64_t ci)
{
  _Atomic uintptr_t *slot = slot_of (m, ci, true);
  if (!slot)
    return NULL;
  uintptr_t e = atomic_load_explicit (slot, memory_order_acquire);
  if (e == 0) {
    char *p = alloc_chunk (m);
    if (!p)
      return NULL;
    if (atomic_compare_exchange_strong (slot, &e, (uintptr_t) p)) {
      atomic_fetch_add (&m->data_bytes, m->chunk);
      return p;
    }
    unalloc_chunk (m, p);       /* a neighbour's writer installed one */
  }
  if (e & RELEASED) {
    /* Released pages read back as zeroes, so the chunk is ready. */
    if (atomic_fetch_and (slot, ~RELEASED) & RELEASED)
      atomic_fetch_add (&m->data_bytes, m->chunk);
  }
  return (char *) (e & ~RELEASED);
}

/* Walks [off, off+len) chunk by chunk. */
#define FOR_EACH_CHUNK(m, off, len, ci, co, n)                          \
  for (uint64_t s_ = (off) + (m)->shift, e_ = s_ + (len), ci, co, n;    \
       s_ < e_ && (ci = s_ >> (m)->chunk_bits,                          \
                   co = s_ & ((m)->chunk - 1),                          \
                   n = (m)->chunk - co < e_ - s_ ? (m)->chunk - co : e_ - s_, 1); \
       s_ += n)

static int
mem_read (struct s4k_store *s, const struct s4k_io *io, unsigned nio)
{
  struct mem_store *m = (struct mem_store *) s;
  for (unsigned i = 0; i < nio; i++) {
    char *buf = io[i].buf;
    FOR_EACH_CHUNK (m, io[i].off, io[i].len, ci, co, n) {
      const char *c = chunk_for_read (m, ci);
      if (c)
        memcpy (buf, c + co, n);
      else
        memset (buf, 0, n);
      buf += n;
    }
  }
  return 0;
}

static int
mem_write (struct s4k_store *s, const struct s4k_io *io, unsigned nio,
           bool fua)
{
  struct mem_store *m = (struct mem_store *) s;
  (void) fua;
  for (unsigned i = 0; i < nio; i++) {
    const char *buf = io[i].buf;
    FOR_EACH_CHUNK (m, io[i].off, io[i].len, ci, co, n) {
      char *c = chunk_for_write (m, ci);
      if (!c)
        return -ENOMEM;
      memcpy (c + co, buf, n);
      buf += n;
    }
  }
  return 0;
}

/* Zeroes [off, off+len): whole chunks go back to the kernel. */
static int
mem_zero (struct s4k_store *s, uint64_t len, uint64_t off, bool may_trim,
          bool fua)
{
  struct mem_store *m = (struct mem_store *) s;
  (void) may_trim; (void) fua;
  FOR_EACH_CHUNK (m, off, len, ci, co, n) {
    _Atomic uintptr_t *slot = slot_of (m, ci, false);
    uintptr_t e = slot ? atomic_load (slot) : 0;
    if (e == 0 || (e & RELEASED))
      continue;
    /* The chunk's real extent: the first and last are clipped. */
    uint64_t cs = ci << m->chunk_bits, ce = cs + m->chunk;
    uint64_t lo = cs > m->shift ? cs : m->shift;
    uint64_t hi = ce < m->size + m->shift ? ce : m->size + m->shift;
    uint64_t s0 = cs + co;
    if (s0 <= lo && s0 + n >= hi) {
      madvise ((void *) e, m->chunk, MADV_DONTNEED);
      if (!(atomic_fetch_or (slot, RELEASED) & RELEASED))
        atomic_fetch_sub (&m->data_bytes, m->chunk);
    }
    else
      memset ((char *) e + co, 0, n);
  }
  return 0;
}

static int
mem_trim (struct s4k_store *s, uint64_t len, uint64_t off, bool fua)
{
  return mem_zero (s, len, off, true, fua);
}

static int
mem_flush (struct s4k_store *s)
{
  (void) s;
  return 0;
}

static int
mem_extents (struct s4k_store *s, uint64_t len, uint64_t off,
             s4k_extent_fn *fn, void *opaque)
{
  struct mem_store *m = (struct mem_store *) s;
  uint64_t run_start = off, run_len = 0;
  bool run_zero = false;
  int r;

  FOR_EACH_CHUNK (m, off, len, ci, co, n) {
    bool zero = chunk_for_read (m, ci) == NULL;
    if (run_len && zero != run_zero) {
      if ((r = fn (opaque, run_start, run_len, run_zero)) != 0)
        return r < 0 ? r : 0;
      run_start += run_len;
      run_len = 0;
    }
    run_zero = zero;
    run_len += n;
    (void) co;
  }
  if (run_len && (r = fn (opaque, run_start, run_len, run_zero)) < 0)
    return r;
  return 0;
}

static bool
mem_can_fast_zero (struct s4k_store *s)
{
  (void) s;
  return true;
}

static const char *
mem_info (const struct s4k_store *s)
{
  (void) s;
  return "memory store";
}

static void
mem_close (struct s4k_store *s)
{
  struct mem_store *m = (struct mem_store *) s;
  for (struct slab *sl = m->slabs, *next; sl; sl = next) {
    next = sl->next;
    munmap (sl->base, sl->len);
    free (sl);
  }
  for (uint64_t i = 0; i < m->nleaves; i++)
    free (m->dir[i]);
  munmap ((void *) m->dir, m->dir_bytes);
  free (m);
}

static const struct s4k_store_ops mem_ops = {
  .name = "memory",
  .read = mem_read,
  .write = mem_write,
  .zero = mem_zero,
  .trim = mem_trim,
  .flush = mem_flush,
  .extents = mem_extents,
  .can_fast_zero = mem_can_fast_zero,
  .info = mem_info,
  .close = mem_close,
};

struct s4k_store *
s4k_mem_store_new (const struct s4k_geometry *g, char *err, size_t errlen)
{
  uint64_t page = sysconf (_SC_PAGESIZE);
  uint64_t chunk = g->physical > page ? g->physical : page;
  uint64_t shift = s4k_sector_shift (g);
  unsigned bits = __builtin_ctzll (chunk);
  uint64_t nchunks = ((g->size + shift) >> bits) + 1;
  uint64_t nleaves = (nchunks + LEAF_ENTRIES - 1) / LEAF_ENTRIES;

  if (nleaves > MAX_DIR_BYTES / sizeof (void *)) {
    snprintf (err, errlen, "size=%" PRIu64 ": too large for the memory "
              "store (at most %" PRIu64 " bytes)", g->size,
              (uint64_t) (MAX_DIR_BYTES / sizeof (void *) * LEAF_ENTRIES * chunk));
    return NULL;
  }
  struct mem_store *m = calloc (1, sizeof *m);
  if (!m) {
    snprintf (err, errlen, "memory store: out of memory");
    return NULL;
  }
  m->base.ops = &mem_ops;
  m->size = g->size;
  m->shift = shift;
  m->chunk = chunk;
  m->chunk_bits = bits;
  m->nleaves = nleaves;
  m->dir_bytes = nleaves * sizeof (void *);
  m->slab_bytes = chunk > SLAB_BYTES ? chunk : SLAB_BYTES;
  m->id = atomic_fetch_add (&next_store_id, 1);
  m->dir = map_noreserve (m->dir_bytes);
  if (!m->dir) {
    snprintf (err, errlen, "size=%" PRIu64 ": cannot map the memory store's "
              "table of %zu bytes: %s", g->size, m->dir_bytes,
              s4k_strerror (errno));
    free (m);
    return NULL;
  }
  return &m->base;
}

uint64_t
s4k_mem_store_bytes (struct s4k_store *s)
{
  return atomic_load (&((struct mem_store *) s)->data_bytes);
}
