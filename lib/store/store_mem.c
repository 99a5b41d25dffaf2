/* SPDX-License-Identifier: BSD-3-Clause */
/* Sparse memory store.
 *
 * Data lives in chunks of max(physical, page size) bytes, placed so that
 * chunk boundaries are physical boundaries.  A radix tree maps chunk
 * numbers to chunks: a root sized to the device (at most ROOT_MAX_BITS
 * wide), then as many levels of 32-entry nodes as the device needs, the
 * last of which (the leaves) hold the chunks.  Nodes are created only on
 * the path to a written chunk, so an idle device of any size up to 2^63
 * bytes costs the root alone, a hole is found without reading (or
 * faulting in) any memory but the nodes that exist, and extents skip an
 * absent subtree in one step.  Lookups are lock-free: atomic loads, and a
 * CAS to install a node or chunk.  Chunks and nodes come from per-thread
 * slabs, never from a shared allocator lock, and are never freed while
 * the store lives, so close unmaps the slabs and nothing else: its cost
 * follows the data.  Releasing a chunk (a trim, or a zero that may trim,
 * of all of it) hands its pages back to the kernel with MADV_DONTNEED
 * and marks the slot, so readers and writers of neighbouring sectors
 * never touch freed memory; a zero that may not trim (NBD's NO_HOLE, a
 * zone reset) marks the slot and keeps the pages (STALE).
 *
 * When a chunk holds several physical sectors (P < page size), bits of its
 * slot say which were written since they last read as zeroes, so extents
 * are reported at physical-sector granularity.
 *
 * Callers (the engine) hold the sector locks of every sector they write
 * or zero, and of every sector of a chunk they release.  A write may cut
 * physical sectors (partial_writes): it copies just its bytes, so the
 * engine's RMW of a 512-byte write into a 4 KiB sector is done in place.
 *
 * Reads take no lock (lockfree_reads), yet each gets, for every
 * logical sector, either its bytes before a write (or zero) in flight
 * or after it, never a mix.  Why that holds:
 * - Memory: a read finds its chunk with acquire loads of tree entries
 *   that are only ever installed (CAS), never cleared, and nodes and
 *   chunks are never freed or moved while the store lives.  A released
 *   chunk stays mapped: MADV_DONTNEED only makes its pages read as
 *   zeroes.  So a read racing a zero or trim that releases the chunk
 *   copies old bytes or zeroes, never freed memory.
 * - Whole sectors: every chunk has a sequence word in its leaf, next to
 *   its slot (a leaf holds 32 slots, then their 32 words).  Whatever
 *   changes a chunk's bytes or its slot (write, zero, release) adds 1
 *   to the word before (one more writer active: the low 16 bits) and
 *   GEN - 1 after (one fewer active, one more generation: the high 48
 *   bits), so the word only ever grows, by every change.  A read loads
 *   the word (acquire), gives up the attempt if a writer is active,
 *   loads the slot and copies, then (acquire fence) loads the word
 *   again and keeps the copy only if it is unchanged.  Take any writer
 *   W of bytes the read copied, and M the change of the word both loads
 *   read (the same one: the word grows with every change, and 2^48
 *   generations cannot pass between two loads).  If W began after M,
 *   the copy saw none of W's bytes: W's begin is a locked RMW (a full
 *   barrier) before its stores, so a copied byte of W's would, through
 *   the reader's acquire fence, make the second load see W's begin or
 *   later, a larger word.  If W began at or before M, it also ended
 *   before M (else M's active count is not zero), and its end is a
 *   release RMW heading a release sequence (every later change is an
 *   RMW too) that the first load reads from: all of W's bytes happen
 *   before the copy, and so do those of every writer before W on the
 *   same sector (the engine's exclusive sector locks order them).  So a
 *   kept copy holds, for each byte, the last completed write, whole
 *   sectors included: a logical sector never spans two chunks (chunk
 *   boundaries are physical ones).  The copy itself is plain memcpy
 *   racing plain stores, as in the Linux kernel's seqlocks: the fences
 *   and locked RMWs keep the compiler and the CPU from moving it past
 *   the loads of the word; a TSan build is told to ignore it.
 * - A read of a chunk that has no leaf, no chunk or a released one
 *   copies nothing: zeroes, decided by one load, which is what those
 *   bytes held at that moment (a chunk reads as zeroes until a writer,
 *   having begun, installs it or clears its flag).
 * - A release (a zero of a whole chunk) changes no byte while it marks
 *   the slot: its pages go back to the kernel only after (mem_zero), or
 *   stay as they are (STALE) until a writer zeroes them.
 *   So it adds GEN to the word once, after the slot's store, with no
 *   active window: a read whose first load sees the add (acquire) loads
 *   the released slot and copies nothing; one whose first load comes
 *   before it either copies the old bytes, still there, or sees the
 *   add at its second load (the pages' zeroing comes after the add, as
 *   a writer's bytes come after its begin) and tries again.
 * - Writers cannot starve a reader: after READ_TRIES attempts the read
 *   calls the engine's `contended` hook, which reads the piece again
 *   under the shared locks of its physical sectors (read_locked, no
 *   check), which keep out every writer of its bytes (writers of other
 *   sectors of the chunk may still change the word).  A read under the
 *   engine's own locks (an RMW's) is a read_locked too.  Under a layer
 *   that serializes its calls (the fault layer), no writer runs during
 *   a read, so it never retries.  Writers never wait for readers: a
 *   write costs two locked adds per chunk, a read two loads.
 * - By reference (read_iov): pointers into chunks, which the kernel
 *   copies later, so no word can vouch for them: a front end that sends
 *   them copies the data pieces with s4k_read_piece (sect4k-server
 *   does), and only holes (zeroes) go out by reference.
 * - The slot's flag and sector bits change by atomic RMW; a read only
 *   loads the slot.
 * - Atomic writes (atomic_max, set by the engine): a write that may be
 *   atomic (at most atomic_max bytes) and spans chunks begins the words
 *   of all its chunks, copies, then ends them all, so it is active on
 *   every chunk while any of its bytes change.  An atomic write may
 *   lie anywhere, across any chunk (WRITE ATOMIC(16) only needs a
 *   multiple of the minimum; with an alignment offset even a naturally
 *   aligned unit no larger than a chunk spans two), so a read piece
 *   that spans chunks loads the words of all its chunks, copies them
 *   all, and keeps the copy only if none was active and their sum is
 *   unchanged (every word only grows, so an equal sum is every word
 *   unchanged; a leaf that appears meanwhile adds its word).  Then
 *   there is a moment between the last first load and the first second
 *   load at which no chunk read was being written and every copy holds
 *   that moment's bytes: a spanning write had either begun none of
 *   those chunks then or ended them all.  (Checking unit by unit would
 *   not do: a write across two units could end between the two
 *   checks.)  A long piece gives up to the locks sooner (each try
 *   copies all of it).  Reads and writes within one chunk are as
 *   above. */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "sect4k/sect4k.h"
#include "store.h"

#define NODE_BITS 5u
#define NODE_ENTRIES (1u << NODE_BITS)
/* A root of at most 1 MiB (written through at creation): every lookup
 * walks one level fewer than a 32 KiB root would make it (each level is
 * about ten instructions on every request), so a device of up to 16 GiB
 * of 4 KiB chunks has one level under the root. */
#define ROOT_MAX_BITS 17u
#define RELEASED ((uintptr_t) 1)  /* slot bit: chunk reads as zeroes */
#define SUB_LOG 3u                /* 8 sector bits in a slot: bits 1..8 */
#define SUB_SHIFT 1u
/* With RELEASED: the pages were kept (a zero that may not trim, as a
 * zone reset: the zone is rewritten next), so they hold old bytes, which
 * the next partial writer zeroes.  Only where a chunk is one physical
 * sector (no sector bits): its writers take turns on the sector's lock,
 * so one zeroes it whole while no other copies into it. */
#define STALE ((uintptr_t) 1 << 9)
#define SLOT_FLAGS (RELEASED | STALE |                                    \
                    ((((uintptr_t) 1 << (1u << SUB_LOG)) - 1) << SUB_SHIFT))
#define SLAB_BYTES (2u << 20)
/* The sequence word of a chunk: writers active, and generations. */
#define SEQ_ACTIVE ((uint64_t) 0xffff)
#define SEQ_GEN ((uint64_t) 1 << 16)
#define READ_TRIES 64
#define READ_SPAN_LONG (64u << 10)  /* a checked piece beyond it ... */
#define READ_TRIES_LONG 4           /* ... gets this many tries */

/* An interior node or a leaf: entries are nodes, or (in leaves) chunk
 * addresses with the flags above. */
struct node {
  _Atomic uintptr_t e[NODE_ENTRIES];
};

/* A leaf: its chunks' slots, then their sequence words (see the top). */
struct leaf {
  _Atomic uintptr_t e[NODE_ENTRIES];
  _Atomic uint64_t seq[NODE_ENTRIES];
};

/* The fences of the argument at the top.  GCC's TSan does not model
 * fences (and refuses them): its build leaves them out; they emit no
 * instruction on x86-64, the writer's begin is acq_rel and the reader's
 * copy is wrapped in calls (tsan_ignore_reads) that the compiler cannot
 * move loads across, and TSan ignores those copies anyway. */
#ifdef __SANITIZE_THREAD__
#define seq_fence(order) ((void) 0)
#else
#define seq_fence(order) atomic_thread_fence (order)
#endif

/* The sequence word of the chunk whose slot is slot (in a leaf). */
static inline _Atomic uint64_t *
seq_of (_Atomic uintptr_t *slot)
{
  return (_Atomic uint64_t *) (slot + NODE_ENTRIES);
}

/* A writer of a chunk begins and ends (see the top). */
static inline void
seq_begin (_Atomic uintptr_t *slot)
{
  /* acq_rel: later stores stay after it even where seq_fence is
   * nothing (the same locked add on x86-64). */
  atomic_fetch_add_explicit (seq_of (slot), 1, memory_order_acq_rel);
  seq_fence (memory_order_release);
}

static inline void
seq_end (_Atomic uintptr_t *slot)
{
  atomic_fetch_add_explicit (seq_of (slot), SEQ_GEN - 1,
                             memory_order_release);
}

/* A release: one more generation, no writer active (see the top). */
static inline void
seq_bump (_Atomic uintptr_t *slot)
{
  atomic_fetch_add_explicit (seq_of (slot), SEQ_GEN, memory_order_acq_rel);
}

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
  unsigned sub_bits;            /* log2 of the bytes one sector bit covers */
  bool track;                   /* chunks hold several sector bits */
  unsigned top_shift;           /* chunk number >> top_shift: root entry */
  size_t root_len, slab_bytes;
  _Atomic uintptr_t *root;
  _Atomic (struct slab *) slabs;
  _Atomic uint64_t data_bytes;
  uint64_t id;                  /* tells thread-local slabs apart */
};

static _Atomic uint64_t next_store_id = 1;

#ifdef __SANITIZE_THREAD__
void AnnotateIgnoreReadsBegin (const char *file, int line);
void AnnotateIgnoreReadsEnd (const char *file, int line);
static inline void
tsan_ignore_reads (bool on)
{
  if (on)
    AnnotateIgnoreReadsBegin (__FILE__, __LINE__);
  else
    AnnotateIgnoreReadsEnd (__FILE__, __LINE__);
}
#else
static inline void
tsan_ignore_reads (bool on)
{
  (void) on;
}
#endif

struct cursor {
  char *next, *end;
};

/* The slabs this thread carves chunks and nodes from. */
static _Thread_local __attribute__ ((tls_model ("initial-exec"))) struct {
  uint64_t store_id;
  struct cursor chunks, nodes;
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

/* len bytes of zeroes (len divides the slab size) from this thread's
 * slab c; what is left of a slab too short for len is skipped (leaves
 * and interior nodes share a slab). */
static void *
carve (struct mem_store *m, struct cursor *c, size_t len)
{
  if (tl_slab.store_id != m->id) {
    tl_slab.store_id = m->id;
    tl_slab.chunks = tl_slab.nodes = (struct cursor) { NULL, NULL };
  }
  if ((size_t) (c->end - c->next) < len) {
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
    c->next = base;
    c->end = (char *) base + m->slab_bytes;
  }
  char *p = c->next;
  c->next += len;
  return p;
}

/* Gives back what this thread carved last from c (still zeroes: the CAS
 * that would have published it failed). */
static void
uncarve (struct mem_store *m, struct cursor *c, void *p, size_t len)
{
  if (tl_slab.store_id == m->id && c->next == (char *) p + len)
    c->next = p;
}

/* The leaf slot of chunk ci, or NULL if the tree has none; then *span is
 * the number of chunks from ci on that the missing subtree covers.  (The
 * root is never a leaf: the loop runs at least once.) */
static inline _Atomic uintptr_t *
slot_find (const struct mem_store *m, uint64_t ci, uint64_t *span)
{
  unsigned sh = m->top_shift;
  _Atomic uintptr_t *p = &m->root[ci >> sh];
  do {
    uintptr_t n = atomic_load_explicit (p, memory_order_acquire);
    if (!n) {
      *span = (((ci >> sh) + 1) << sh) - ci;
      return NULL;
    }
    sh -= NODE_BITS;
    p = &((struct node *) n)->e[(ci >> sh) & (NODE_ENTRIES - 1)];
  } while (sh);
  return p;
}

/* Installs a node (a leaf if leaf) at *p, or finds the one another
 * thread installed. */
static __attribute__ ((noinline)) uintptr_t
node_make (struct mem_store *m, _Atomic uintptr_t *p, bool leaf)
{
  uintptr_t n = 0;
  size_t len = leaf ? sizeof (struct leaf) : sizeof (struct node);
  void *fresh = carve (m, &tl_slab.nodes, len);
  if (!fresh)
    return 0;
  if (atomic_compare_exchange_strong (p, &n, (uintptr_t) fresh))
    return (uintptr_t) fresh;
  uncarve (m, &tl_slab.nodes, fresh, len);
  return n;
}

/* The leaf slot of chunk ci, creating the nodes on its path. */
static inline _Atomic uintptr_t *
slot_make (struct mem_store *m, uint64_t ci)
{
  unsigned sh = m->top_shift;
  _Atomic uintptr_t *p = &m->root[ci >> sh];
  do {
    uintptr_t n = atomic_load_explicit (p, memory_order_acquire);
    if (__builtin_expect (!n, 0) &&
        !(n = node_make (m, p, sh == NODE_BITS)))
      return NULL;
    sh -= NODE_BITS;
    p = &((struct node *) n)->e[(ci >> sh) & (NODE_ENTRIES - 1)];
  } while (sh);
  return p;
}

/* The sector bits of bytes [co, co+n) of a chunk (0 if not tracked). */
static inline uintptr_t
sub_bits_of (const struct mem_store *m, uint64_t co, uint64_t n)
{
  if (!m->track)
    return 0;
  unsigned a = co >> m->sub_bits, b = (co + n - 1) >> m->sub_bits;
  return ((((uintptr_t) 2 << b) - ((uintptr_t) 1 << a))) << SUB_SHIFT;
}

/* Makes the chunk in slot ready (installed, not released, with bits)
 * and copies, inside the writer's section: the chunk reads as zeroes
 * until the copy, so the slot changes inside it too (see the top). */
static int
fill_chunk (struct mem_store *m, _Atomic uintptr_t *slot, char *p,
            uint64_t co, const char *buf, uint64_t n, uintptr_t bits)
{
  uintptr_t e = atomic_load_explicit (slot, memory_order_acquire);
  if (e && p)                   /* a neighbour's writer installed one */
    uncarve (m, &tl_slab.chunks, p, m->chunk);
  if (e == 0 && !p && !(p = carve (m, &tl_slab.chunks, m->chunk)))
    return -ENOMEM;
  if (e == 0) {
    if (atomic_compare_exchange_strong (slot, &e, (uintptr_t) p)) {
      atomic_fetch_add (&m->data_bytes, m->chunk);
      e = (uintptr_t) p;
    }
    else                        /* a neighbour's writer installed one */
      uncarve (m, &tl_slab.chunks, p, m->chunk);
  }
  if (e & RELEASED) {
    /* Released pages read back as zeroes, so the chunk is ready; kept
     * ones are zeroed first (this writer holds the chunk's only
     * sector). */
    if (e & STALE)
      memset ((char *) (e & ~SLOT_FLAGS), 0, m->chunk);
    if (atomic_fetch_and (slot, ~(RELEASED | STALE)) & RELEASED)
      atomic_fetch_add (&m->data_bytes, m->chunk);
  }
  /* Writers of other sectors of the chunk set other bits. */
  if ((e & bits) != bits)
    atomic_fetch_or (slot, bits);
  memcpy ((char *) (e & ~SLOT_FLAGS) + co, buf, n);
  return 0;
}

/* write_chunk when a node or the chunk is missing, or it is released,
 * or lacks bits: makes the chunk ready, then copies. */
static __attribute__ ((noinline)) int
write_chunk_slow (struct mem_store *m, uint64_t ci, uint64_t co,
                  const char *buf, uint64_t n, uintptr_t bits)
{
  _Atomic uintptr_t *slot = slot_make (m, ci);
  if (!slot)
    return -ENOMEM;
  char *p = NULL;
  if (atomic_load_explicit (slot, memory_order_acquire) == 0 &&
      !(p = carve (m, &tl_slab.chunks, m->chunk)))
    return -ENOMEM;
  seq_begin (slot);
  int r = fill_chunk (m, slot, p, co, buf, n, bits);
  seq_end (slot);
  return r;
}

/* Walks [off, off+len) chunk by chunk. */
#define FOR_EACH_CHUNK(m, off, len, ci, co, n)                          \
  for (uint64_t s_ = (off) + (m)->shift, e_ = s_ + (len), ci, co, n;    \
       s_ < e_ && (ci = s_ >> (m)->chunk_bits,                          \
                   co = s_ & ((m)->chunk - 1),                          \
                   n = (m)->chunk - co < e_ - s_ ? (m)->chunk - co : e_ - s_, 1); \
       s_ += n)

/* Copies n bytes at co of the chunk in slot e (or zeroes) into buf. */
static inline void
copy_chunk (uintptr_t e, uint64_t co, char *buf, uint64_t n)
{
  const char *c = (e & RELEASED) ? NULL : (const char *) (e & ~SLOT_FLAGS);
  /* In a TSan build, the copy races the writers it is checked against
   * (see the top); the tree's loads and the words stay checked. */
  tsan_ignore_reads (true);
  if (c)
    memcpy (buf, c + co, n);
  else
    memset (buf, 0, n);
  tsan_ignore_reads (false);
}

/* Copies n bytes at co of chunk ci (device offset off) into buf,
 * checked against the chunk's sequence word; after READ_TRIES attempts
 * that met a writer, under the engine's locks (see the top).  With no
 * engine over it (a layer that serializes its calls, so no writer runs
 * during one), it tries until it succeeds. */
static inline __attribute__ ((always_inline)) int
read_chunk (struct mem_store *m, uint64_t ci, uint64_t co, char *buf,
            uint64_t n, uint64_t off)
{
  uint64_t span;
  _Atomic uintptr_t *slot = slot_find (m, ci, &span);
  if (!slot) {
    memset (buf, 0, n);         /* no leaf: never written */
    return 0;
  }
  _Atomic uint64_t *seq = seq_of (slot);
  for (unsigned t = 0;; t++) {
    if (t == READ_TRIES && m->base.contended) {
      const struct s4k_io io = { buf, n, off };
      return m->base.contended (m->base.contended_opaque, &io);
    }
    uint64_t v = atomic_load_explicit (seq, memory_order_acquire);
    if (__builtin_expect (v & SEQ_ACTIVE, 0)) {
      __builtin_ia32_pause ();
      continue;
    }
    copy_chunk (atomic_load_explicit (slot, memory_order_acquire), co, buf,
                n);
    seq_fence (memory_order_acquire);
    if (__builtin_expect (atomic_load_explicit (seq, memory_order_relaxed)
                          == v, 1))
      return 0;
  }
}

/* Copies n bytes from buf to co of chunk ci, allocating the chunk and
 * setting its sector bits if need be.  The common case, a chunk there
 * with its bits set, is a lookup and the copy: the rest is out of line,
 * so that nothing here outlives the copy. */
static inline __attribute__ ((always_inline)) int
write_chunk (struct mem_store *m, uint64_t ci, uint64_t co, const char *buf,
             uint64_t n)
{
  const uintptr_t bits = sub_bits_of (m, co, n);
  uint64_t span;
  _Atomic uintptr_t *slot = slot_find (m, ci, &span);
  uintptr_t e = slot ? atomic_load_explicit (slot, memory_order_acquire) : 0;
  if (__builtin_expect (!e || (e & RELEASED) || (e & bits) != bits, 0)) {
    if (!(e & RELEASED) || n != m->chunk)
      return write_chunk_slow (m, ci, co, buf, n, bits);
    /* A released chunk written whole (a zone rewritten after its reset):
     * whatever its pages hold is overwritten, so there are no zeroes to
     * keep, and the writer holds every sector of it: the slot is its
     * own.  Here rather than out of line: as common as the write that
     * follows a reset. */
    seq_begin (slot);
    memcpy ((char *) (e & ~SLOT_FLAGS), buf, n);
    atomic_store_explicit (slot, (e & ~SLOT_FLAGS) | bits,
                           memory_order_release);
    seq_end (slot);
    atomic_fetch_add_explicit (&m->data_bytes, m->chunk, memory_order_relaxed);
    return 0;
  }
  seq_begin (slot);
  memcpy ((char *) (e & ~SLOT_FLAGS) + co, buf, n);
  seq_end (slot);
  return 0;
}

/* True if [off, off+len) lies in one chunk, *ci at *co. */
static inline bool
one_chunk (const struct mem_store *m, uint64_t off, uint64_t len,
           uint64_t *ci, uint64_t *co)
{
  uint64_t so = off + m->shift;
  *ci = so >> m->chunk_bits;
  *co = so & (m->chunk - 1);
  return len <= m->chunk - *co;
}

/* The sum of the words of the chunks of [off, off+len) that have a
 * leaf; *active if a writer is active on one. */
static uint64_t
seq_sum (const struct mem_store *m, uint64_t off, uint64_t len,
         memory_order order, bool *active)
{
  uint64_t sum = 0;
  FOR_EACH_CHUNK (m, off, len, ci, co, n) {
    uint64_t span;
    _Atomic uintptr_t *slot = slot_find (m, ci, &span);
    if (slot) {
      uint64_t v = atomic_load_explicit (seq_of (slot), order);
      *active |= (v & SEQ_ACTIVE) != 0;
      sum += v;
    }
  }
  return sum;
}

/* [off, off+len) in several chunks, checked as one (see "Atomic writes"
 * at the top); after READ_TRIES, or fewer for a long piece (each try
 * copies all of it, and any writer in it spoils the try), under the
 * engine's locks. */
static __attribute__ ((noinline)) int
read_span (struct mem_store *m, char *buf, uint64_t len, uint64_t off)
{
  const unsigned tries = len > READ_SPAN_LONG ? READ_TRIES_LONG : READ_TRIES;
  for (unsigned t = 0;; t++) {
    if (t == tries && m->base.contended) {
      const struct s4k_io io = { buf, len, off };
      return m->base.contended (m->base.contended_opaque, &io);
    }
    bool active = false;
    const uint64_t v = seq_sum (m, off, len, memory_order_acquire, &active);
    if (__builtin_expect (active, 0)) {
      __builtin_ia32_pause ();
      continue;
    }
    char *p = buf;
    FOR_EACH_CHUNK (m, off, len, ci, co, n) {
      uint64_t span;
      _Atomic uintptr_t *slot = slot_find (m, ci, &span);
      copy_chunk (slot ? atomic_load_explicit (slot, memory_order_acquire)
                       : RELEASED, co, p, n);
      p += n;
    }
    seq_fence (memory_order_acquire);
    if (__builtin_expect (seq_sum (m, off, len, memory_order_relaxed,
                                   &active) == v, 1))
      return 0;
  }
}

/* The general case of mem_read: out of line, so the one-chunk case
 * pays for no loop. */
static __attribute__ ((noinline)) int
read_chunks (struct mem_store *m, const struct s4k_io *io, unsigned nio)
{
  for (unsigned i = 0; i < nio; i++) {
    char *buf = io[i].buf;
    uint64_t off = io[i].off;
    /* With atomic writes, a piece spanning chunks is checked as one:
     * an atomic write may lie anywhere (WRITE ATOMIC(16) at any multiple
     * of the minimum), across any chunk or unit boundary. */
    if (__builtin_expect (m->base.atomic_max != 0, 0)) {
      uint64_t ci, co;
      int r = one_chunk (m, off, io[i].len, &ci, &co)
              ? read_chunk (m, ci, co, buf, io[i].len, off)
              : read_span (m, buf, io[i].len, off);
      if (r)
        return r;
      continue;
    }
    FOR_EACH_CHUNK (m, io[i].off, io[i].len, ci, co, n) {
      int r = read_chunk (m, ci, co, buf, n, off);
      off += n;
      if (r)
        return r;
      buf += n;
    }
  }
  return 0;
}

/* One attempt of read_chunk, the common case of a read in one chunk:
 * false if it met a writer (or is not in one chunk) and read_chunks
 * must do it.  Little lives across the copy, so little is saved. */
static inline bool
read_one (const struct mem_store *m, const struct s4k_io *io, unsigned nio)
{
  uint64_t ci, co, span;
  if (nio != 1 || !one_chunk (m, io->off, io->len, &ci, &co))
    return false;
  _Atomic uintptr_t *slot = slot_find (m, ci, &span);
  if (!slot) {
    memset (io->buf, 0, io->len);       /* no leaf: never written */
    return true;
  }
  uint64_t v = atomic_load_explicit (seq_of (slot), memory_order_acquire);
  if (__builtin_expect (v & SEQ_ACTIVE, 0))
    return false;
  copy_chunk (atomic_load_explicit (slot, memory_order_acquire), co, io->buf,
              io->len);
  seq_fence (memory_order_acquire);
  return atomic_load_explicit (seq_of (slot), memory_order_relaxed) == v;
}

static int
mem_read (struct s4k_store *s, const struct s4k_io *io, unsigned nio)
{
  struct mem_store *m = (struct mem_store *) s;
  if (__builtin_expect (read_one (m, io, nio), 1))
    return 0;
  return read_chunks (m, io, nio);
}

/* The caller holds the shared locks of every sector read: no writer of
 * these bytes runs, so the copy needs no check (writers of other
 * sectors of a chunk may change its word meanwhile). */
static int
mem_read_locked (struct s4k_store *s, const struct s4k_io *io, unsigned nio)
{
  struct mem_store *m = (struct mem_store *) s;
  for (unsigned i = 0; i < nio; i++) {
    char *buf = io[i].buf;
    FOR_EACH_CHUNK (m, io[i].off, io[i].len, ci, co, n) {
      uint64_t span;
      _Atomic uintptr_t *slot = slot_find (m, ci, &span);
      copy_chunk (slot ? atomic_load_explicit (slot, memory_order_acquire)
                       : RELEASED, co, buf, n);
      buf += n;
    }
  }
  return 0;
}

/* A write that may be atomic, spanning chunks: every chunk's word begun
 * before any byte changes, ended after the last (see "Atomic writes"
 * at the top).  The nodes on the way are made first, outside. */
static __attribute__ ((noinline)) int
write_span (struct mem_store *m, const char *buf, uint64_t len, uint64_t off)
{
  FOR_EACH_CHUNK (m, off, len, ci, co, n)
    if (!slot_make (m, ci))
      return -ENOMEM;
  uint64_t span;
  FOR_EACH_CHUNK (m, off, len, ci, co, n)
    seq_begin (slot_find (m, ci, &span));
  int r = 0;
  FOR_EACH_CHUNK (m, off, len, ci, co, n) {
    if (r == 0)
      r = fill_chunk (m, slot_find (m, ci, &span), NULL, co, buf,
                      n, sub_bits_of (m, co, n));
    buf += n;
  }
  FOR_EACH_CHUNK (m, off, len, ci, co, n)
    seq_end (slot_find (m, ci, &span));
  return r;
}

static __attribute__ ((noinline)) int
write_chunks (struct mem_store *m, const struct s4k_io *io, unsigned nio)
{
  if (__builtin_expect (nio == 1 && io->len <= m->base.atomic_max, 0))
    return write_span (m, io->buf, io->len, io->off);
  for (unsigned i = 0; i < nio; i++) {
    const char *buf = io[i].buf;
    FOR_EACH_CHUNK (m, io[i].off, io[i].len, ci, co, n) {
      if (write_chunk (m, ci, co, buf, n))
        return -ENOMEM;
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
  uint64_t ci, co;
  (void) fua;
  if (nio == 1 && one_chunk (m, io->off, io->len, &ci, &co))
    return write_chunk (m, ci, co, io->buf, io->len);
  return write_chunks (m, io, nio);
}

/* Walks [off, off+len) as FOR_EACH_CHUNK does, but a run of chunks with
 * no slot is one step (slot NULL, n its bytes).  The body may continue
 * or return, not break. */
#define FOR_EACH_SLOT(m, off, len, ci, co, n, slot)                     \
  for (uint64_t s_ = (off) + (m)->shift, e_ = s_ + (len), ci, co, n,    \
         span_ = 1, once_; s_ < e_; s_ += n)                            \
    for (_Atomic uintptr_t *slot = (ci = s_ >> (m)->chunk_bits,         \
                                    co = s_ & ((m)->chunk - 1),         \
                                    once_ = 1,                          \
                                    slot_find ((m), ci, &span_));       \
         once_ && (n = slot_extent ((m), s_, e_, co, slot ? 1 : span_), 1); \
         once_ = 0)

/* Bytes from shifted offset s (co into its chunk) to the end of the span
 * chunks there, or to e. */
static inline uint64_t
slot_extent (const struct mem_store *m, uint64_t s, uint64_t e, uint64_t co,
             uint64_t span)
{
  uint64_t left = e - s;
  /* span << chunk_bits may not fit: compare in chunks first. */
  if (span - 1 > (left + co - 1) >> m->chunk_bits)
    return left;
  uint64_t n = (span << m->chunk_bits) - co;
  return n < left ? n : left;
}

/* Chunks released by one zero: their pages go back to the kernel in
 * runs once every slot says released (chunks carved one after another
 * are often neighbours in memory), and their bytes leave data_bytes at
 * once.  Until then the zeroing caller still holds every sector of
 * them: no writer can meet a released chunk whose pages are not yet
 * zeroes, and a reader takes the slot's word for it and copies nothing. */
struct released {
  char *p, *end;                /* the run of pages not yet handed back */
  uint64_t chunks;              /* chunks that held data */
};

/* Hands the pages of chunk c back (with the run they extend). */
static void
released_add (struct mem_store *m, struct released *rel, char *c)
{
  if (c == rel->end) {
    rel->end += m->chunk;
    return;
  }
  if (rel->end)
    madvise (rel->p, rel->end - rel->p, MADV_DONTNEED);
  rel->p = c;
  rel->end = c + m->chunk;
}

static void
released_end (struct mem_store *m, struct released *rel)
{
  if (rel->end)
    madvise (rel->p, rel->end - rel->p, MADV_DONTNEED);
  if (rel->chunks)
    atomic_fetch_sub (&m->data_bytes, rel->chunks << m->chunk_bits);
}

/* Marks the chunk in slot (e: its entry, a chunk) as reading zeroes,
 * its pages kept (keep: STALE) or handed back; nothing if it is so. */
static inline void
release_chunk (struct mem_store *m, _Atomic uintptr_t *slot, uintptr_t e,
               bool keep, struct released *rel)
{
  if ((e & RELEASED) && (keep || !(e & STALE)))
    return;
  atomic_store_explicit (slot, (e & ~SLOT_FLAGS) | RELEASED |
                               (keep ? STALE : 0), memory_order_relaxed);
  seq_bump (slot);
  rel->chunks += !(e & RELEASED);
  if (!keep)
    released_add (m, rel, (char *) (e & ~SLOT_FLAGS));
}

/* Zeroes [off, off+len): whole chunks go back to the kernel, or, for a
 * zero that may not trim, keep their pages for the writes to come
 * (STALE: a reset zone is rewritten next, and a page handed back costs a
 * fault and the kernel's zeroing when it is). */
static int
mem_zero (struct s4k_store *s, uint64_t len, uint64_t off, bool may_trim,
          bool fua)
{
  struct mem_store *m = (struct mem_store *) s;
  (void) fua;
  const bool keep = !may_trim && !m->track;
  const uint64_t dev_end = m->size + m->shift;
  /* The chunks before this one are the last zeroed whole; the clipped
   * end of the device counts as covered. */
  const uint64_t whole_end = off + len + m->shift >= dev_end
    ? (dev_end + m->chunk - 1) >> m->chunk_bits
    : (off + len + m->shift) >> m->chunk_bits;
  struct released rel = { NULL, NULL, 0 };
  FOR_EACH_SLOT (m, off, len, ci, co, n, slot) {
    uintptr_t e = slot ? atomic_load (slot) : 0;
    if (e == 0)
      continue;
    /* The chunk's real extent: the first and last are clipped. */
    uint64_t cs = ci << m->chunk_bits, ce = cs + m->chunk;
    uint64_t lo = cs > m->shift ? cs : m->shift;
    uint64_t hi = ce < dev_end ? ce : dev_end;
    uint64_t s0 = cs + co;
    if (s0 <= lo && s0 + n >= hi) {
      /* This chunk and those after it in its leaf that the zero covers
       * whole, in one step (a zone reset releases thousands). */
      uint64_t k = 1, kmax = NODE_ENTRIES - (ci & (NODE_ENTRIES - 1));
      if (kmax > whole_end - ci)
        kmax = whole_end - ci;
      release_chunk (m, slot, e, keep, &rel);
      for (; k < kmax && (e = atomic_load (slot + k)); k++)
        release_chunk (m, slot + k, e, keep, &rel);
      n = (k << m->chunk_bits) - co;
      continue;
    }
    if (e & RELEASED)
      continue;
    char *c = (char *) (e & ~SLOT_FLAGS);
    seq_begin (slot);
    memset (c + co, 0, n);
    /* Only the sector bits wholly zeroed now (a bit may cover several
     * sectors where pages are large); the clipped ends of the device
     * count as covered. */
    uint64_t zs = (s0 == lo ? cs : s0) - cs;
    uint64_t ze = (s0 + n == hi ? ce : s0 + n) - cs;
    uint64_t a = (zs + (1ull << m->sub_bits) - 1) >> m->sub_bits;
    uint64_t b = ze >> m->sub_bits;
    if (m->track && a < b)
      atomic_fetch_and (slot, ~sub_bits_of (m, a << m->sub_bits,
                                            (b - a) << m->sub_bits));
    seq_end (slot);
  }
  released_end (m, &rel);
  return 0;
}

/* Appends the piece [p, p+len) (p NULL: zeroes) to iov, joined to the
 * last one where they touch: chunks carved one after another from a
 * slab are often neighbours in memory too. */
static inline int
iov_add (struct iovec *iov, unsigned *n, unsigned max, char *p, uint64_t len)
{
  if (*n) {
    struct iovec *last = &iov[*n - 1];
    if (!p ? !last->iov_base
           : last->iov_base && (char *) last->iov_base + last->iov_len == p) {
      last->iov_len += len;
      return 0;
    }
  }
  if (*n == max)
    return -ENOBUFS;
  iov[(*n)++] = (struct iovec) { p, len };
  return 0;
}

/* The pieces of [off, off+len): pointers into the chunks, which stay in
 * place until close (see the top), and NULL for what reads as zeroes: a
 * missing or released chunk, or the sectors whose bits are clear (the
 * same rule as extents).  Nothing is read or faulted in but the tree's
 * nodes, and an absent subtree is one step. */
static int
mem_read_iov (struct s4k_store *s, uint64_t len, uint64_t off,
              struct iovec *iov, unsigned max)
{
  struct mem_store *m = (struct mem_store *) s;
  unsigned n = 0;
  FOR_EACH_SLOT (m, off, len, ci, co, k, slot) {
    uintptr_t e = slot ? atomic_load_explicit (slot, memory_order_acquire) : 0;
    char *c = (e & RELEASED) ? NULL : (char *) (e & ~SLOT_FLAGS);
    (void) ci;
    if (!c || !m->track) {
      if (iov_add (iov, &n, max, c ? c + co : NULL, k))
        return -ENOBUFS;
      continue;
    }
    for (uint64_t at = co, end = co + k, step; at < end; at += step) {
      uint64_t next = ((at >> m->sub_bits) + 1) << m->sub_bits;
      step = (next < end ? next : end) - at;
      if (iov_add (iov, &n, max, (e & sub_bits_of (m, at, step)) ? c + at
                                                                 : NULL,
                   step))
        return -ENOBUFS;
    }
  }
  return n;
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

/* Runs of extents, merged before they are passed on. */
struct run {
  uint64_t start, len;
  bool zero;
  s4k_extent_fn *fn;
  void *opaque;
};

/* Adds n bytes of kind zero; nonzero when fn says stop (or fails). */
static int
run_add (struct run *r, uint64_t n, bool zero)
{
  int ret = 0;
  if (r->len && zero != r->zero) {
    ret = r->fn (r->opaque, r->start, r->len, r->zero);
    r->start += r->len;
    r->len = 0;
  }
  r->zero = zero;
  r->len += n;
  return ret;
}

static int
mem_extents (struct s4k_store *s, uint64_t len, uint64_t off,
             s4k_extent_fn *fn, void *opaque)
{
  struct mem_store *m = (struct mem_store *) s;
  struct run run = { .start = off, .fn = fn, .opaque = opaque };
  int r = 0;

  FOR_EACH_SLOT (m, off, len, ci, co, n, slot) {
    uintptr_t e = slot ? atomic_load_explicit (slot, memory_order_acquire) : 0;
    (void) ci;
    if (e == 0 || (e & RELEASED) || !m->track)
      r = run_add (&run, n, e == 0 || (e & RELEASED));
    else {
      /* Sector by sector (each bit covers 1 << sub_bits bytes). */
      for (uint64_t at = co, end = co + n, k; !r && at < end; at += k) {
        uint64_t next = ((at >> m->sub_bits) + 1) << m->sub_bits;
        k = (next < end ? next : end) - at;
        r = run_add (&run, k, !(e & sub_bits_of (m, at, k)));
      }
    }
    if (r)
      return r < 0 ? r : 0;
  }
  if (run.len && (r = fn (opaque, run.start, run.len, run.zero)) < 0)
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
  /* Chunks and nodes all live in the slabs. */
  for (struct slab *sl = m->slabs, *next; sl; sl = next) {
    next = sl->next;
    munmap (sl->base, sl->len);
    free (sl);
  }
  free ((void *) m->root);
  free (m);
}

static const struct s4k_store_ops mem_ops = {
  .name = "memory",
  .read = mem_read,
  .read_locked = mem_read_locked,
  .write = mem_write,
  .read_iov = mem_read_iov,
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
  uint64_t last = (g->size + shift - 1) >> bits;   /* last chunk number */
  unsigned ibits = last ? 64 - __builtin_clzll (last) : 1;
  unsigned top = NODE_BITS;     /* at least the leaves */
  while (ibits > top + ROOT_MAX_BITS)
    top += NODE_BITS;

  struct mem_store *m = calloc (1, sizeof *m);
  if (!m) {
    snprintf (err, errlen, "memory store: out of memory");
    return NULL;
  }
  m->base.ops = &mem_ops;
  m->base.lockfree_reads = true;        /* see the top */
  m->base.partial_writes = true;        /* a write copies just its bytes */
  m->size = g->size;
  m->shift = shift;
  m->chunk = chunk;
  m->chunk_bits = bits;
  /* One bit per physical sector, or per eighth of a chunk where a page
   * holds more than eight sectors. */
  m->sub_bits = __builtin_ctz (g->physical);
  if (m->sub_bits + SUB_LOG < bits)
    m->sub_bits = bits - SUB_LOG;
  m->track = m->sub_bits < bits;
  m->top_shift = top;
  m->root_len = ((last >> top) + 1) * sizeof *m->root;
  m->slab_bytes = chunk > SLAB_BYTES ? chunk : SLAB_BYTES;
  m->id = atomic_fetch_add (&next_store_id, 1);
  /* Written through now: a read fault on never-touched memory may cost a
   * page each time (see DESIGN.md), and every lookup reads the root. */
  m->root = malloc (m->root_len);
  if (!m->root) {
    snprintf (err, errlen, "memory store: out of memory");
    free (m);
    return NULL;
  }
  memset ((void *) m->root, 0, m->root_len);
  return &m->base;
}

uint64_t
s4k_mem_store_bytes (struct s4k_store *s)
{
  return atomic_load (&((struct mem_store *) s)->data_bytes);
}
