/* SPDX-License-Identifier: BSD-3-Clause */
/* Fuzz target: arbitrary client bytes into the handshake and request
 * parser (request.c, handshake.c, reply.c, sched.c) over a small device.
 *
 * Input: byte 0 picks the device and server settings, byte 1 the size
 * of the pieces the bytes arrive in (its low 7 bits; 0 is 65536) and,
 * with its top bit, the store: the memory store with everything inline
 * (top bit clear), or the file store on a tmpfs file through io_uring,
 * where reads, writes, zeroes, trims and flushes take request slots and
 * finish later on a small event loop here (top bit set: the slot path).
 * The rest is what the client sends.  Besides the sanitizers, it checks
 * the bounds a hostile client must not break (output, payload and slot
 * buffers stay within what the limits allow) and that the replies do not
 * depend on how the input is split (see same_replies for what that means
 * with slots).
 *
 * Built with clang -fsanitize=fuzzer by `make fuzz`; built with
 * -DFUZZ_REPLAY_MAIN it is a plain program that runs the files named on
 * its command line (the regression corpus in `make check`). */
#define _GNU_SOURCE              /* memmem */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include <liburing.h>

#include "conn.h"

static bool verbose;

void
log_msg (const char *fmt, ...)
{
  if (!verbose)
    return;
  va_list ap;
  va_start (ap, fmt);
  vfprintf (stderr, fmt, ap);
  va_end (ap);
  fputc ('\n', stderr);
}

#define CHECK(cond) \
  do { if (!(cond)) { fprintf (stderr, "fuzz: bound broken: %s\n", #cond); \
                      abort (); } } while (0)

#define FNV_INIT UINT64_C(0xcbf29ce484222325)

static uint64_t
fnv (uint64_t h, const uint8_t *p, size_t n)
{
  for (size_t i = 0; i < n; i++)
    h = (h ^ p[i]) * UINT64_C(0x100000001b3);
  return h;
}

/* The same over whole 8-byte words (then the tail bytes): several times
 * faster on the slot path's large read replies, and fine where the
 * bytes hashed are always cut at the same places (whole replies). */
static uint64_t
fnv_words (uint64_t h, const uint8_t *p, size_t n)
{
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t w;
    memcpy (&w, p, 8);
    h = (h ^ w) * UINT64_C(0x100000001b3);
    h ^= h >> 29;
  }
  return fnv (h, p, n);
}

static inline uint16_t get16 (const uint8_t *p) { return (uint16_t) (p[0] << 8 | p[1]); }
static inline uint32_t get32 (const uint8_t *p) { return (uint32_t) get16 (p) << 16 | get16 (p + 2); }
static inline uint64_t get64 (const uint8_t *p) { return (uint64_t) get32 (p) << 32 | get32 (p + 4); }

/* ---- the slot path: a tmpfs file and a single-threaded loop ------------- */

/* One io_uring for the process; the engine queues the store's I/O on it,
 * drive submits it and hands out the completions. */
struct fuzz_loop {
  struct s4k_loop base;
  struct io_uring ring;
  struct s4k_completion *posted;        /* newest first */
};
static struct fuzz_loop loop;
static int loop_state;                  /* 0 not tried, 1 ready, -1 none */
/* For FUZZ_VERBOSE: what the loop did in this run. */
static unsigned long loop_cqes, loop_posts, loop_max_inflight;
static int store_fd = -1;               /* the file store's file */
static char store_path[64];             /* /proc/self/fd/N */

/* s4k_loop.post: one thread only, so a plain list. */
static void
loop_post (struct s4k_loop *l, struct s4k_completion *c)
{
  struct fuzz_loop *fl = s4k_container_of (l, struct fuzz_loop, base);
  c->next = fl->posted;
  fl->posted = c;
  loop_posts++;
}

/* Runs what was posted, oldest first, until nothing is left (a
 * completion may post more), as loop.c does. */
static void
run_posted (struct fuzz_loop *fl)
{
  while (fl->posted) {
    struct s4k_completion *c = fl->posted;
    fl->posted = NULL;
    s4k_loop_run_posted (c);
  }
}

/* Submits, waits and completes until no request of c is in flight and
 * nothing is posted.  A request that never completes is a bug (a lost
 * lock wake-up, a completion not handed back): abort. */
static void
drive (struct fuzz_loop *fl, struct conn *c)
{
  for (;;) {
    run_posted (fl);
    if (c->inflight == 0) {
      CHECK (io_uring_sq_ready (&fl->ring) == 0);       /* nothing queued */
      return;
    }
    if (c->inflight > loop_max_inflight)
      loop_max_inflight = c->inflight;
    struct io_uring_cqe *cqe;
    struct __kernel_timespec ts = { .tv_sec = 3 };
    int r = io_uring_submit_and_wait_timeout (&fl->ring, &cqe, 1, &ts, NULL);
    if (r == -ETIME) {
      fprintf (stderr, "fuzz: %u requests in flight, none completed in "
               "3 seconds\n", c->inflight);
      abort ();
    }
    if (r < 0 && r != -EINTR) {
      fprintf (stderr, "fuzz: io_uring_submit_and_wait_timeout: %s\n",
               s4k_strerror (-r));
      abort ();
    }
    loop_cqes += s4k_loop_reap (&fl->ring);
  }
}

/* The first time: the ring and the file (on /dev/shm, else $TMPDIR),
 * unlinked at once and reached as /proc/self/fd/N so that nothing is
 * left behind, even after a crash.  Returns false if either is not to
 * be had (the memory store serves instead). */
static bool
slot_setup (void)
{
  if (loop_state)
    return loop_state > 0;
  loop_state = -1;
  const char *dir = "/dev/shm";
  if (access (dir, W_OK) != 0 && !(dir = getenv ("TMPDIR")))
    dir = "/tmp";
  char tmpl[4096];
  snprintf (tmpl, sizeof tmpl, "%s/sect4k-fuzz-XXXXXX", dir);
  store_fd = mkstemp (tmpl);
  if (store_fd == -1) {
    fprintf (stderr, "fuzz: %s: %s (slot mode off)\n", tmpl,
             s4k_strerror (errno));
    return false;
  }
  unlink (tmpl);
  snprintf (store_path, sizeof store_path, "/proc/self/fd/%d", store_fd);
  int r = s4k_ring_init (&loop.ring, 64);
  if (r < 0) {
    fprintf (stderr, "fuzz: io_uring setup: %s (slot mode off)\n",
             s4k_strerror (-r));
    return false;
  }
  loop.base.ring = &loop.ring;
  loop.base.post = loop_post;
  loop_state = 1;
  return true;
}

/* The file store on a fresh, zeroed file of size bytes, or NULL if it
 * cannot go through the ring (then the caller uses the memory store). */
static struct s4k_dev *
open_file_store (struct s4k_config *cfg, uint64_t size)
{
  char err[256];
  if (!slot_setup ())
    return NULL;
  if (ftruncate (store_fd, 0) == -1 || ftruncate (store_fd, size) == -1) {
    fprintf (stderr, "fuzz: ftruncate: %s\n", s4k_strerror (errno));
    abort ();
  }
  if (s4k_config_set (cfg, "file", store_path, err, sizeof err) == -1 ||
      s4k_config_finish (cfg, err, sizeof err) == -1) {
    fprintf (stderr, "fuzz: %s\n", err);
    abort ();
  }
  struct s4k_dev *dev;
  if (s4k_dev_open (&dev, cfg, err, sizeof err) < 0) {
    fprintf (stderr, "fuzz: %s\n", err);
    abort ();
  }
  if (!s4k_dev_async (dev)) {
    static bool said;
    if (!said)
      fprintf (stderr, "fuzz: the file store is not asynchronous here "
               "(no io_uring?): slot mode off\n");
    said = true;
    s4k_dev_close (dev);
    return NULL;
  }
  return dev;
}

static void
note_wake (struct conn *c)
{
  (void) c;                     /* the harness collects c->out itself */
}

/* The read and write bytes a slot's request holds (sched.c's req_bytes). */
static uint64_t
req_bytes (const struct nbd_request *rq)
{
  return rq->type == NBD_CMD_READ || rq->type == NBD_CMD_WRITE ? rq->length
                                                                : 0;
}

/* The slots' accounting matches their buffers, and the buffers stay
 * within conn.h's limits: idle ones (kept) at most CONN_SLOT_KEEP each
 * and CONN_INFLIGHT_BYTES in all; used ones hold their request's bytes,
 * or a kept buffer, at most CONN_INFLIGHT_BYTES in all unless a single
 * request is alone (then at most the maximum request). */
static void
check_slots (const struct conn *c, uint32_t maximum)
{
  uint64_t kept = 0, held = 0, bytes = 0;
  unsigned used = 0;
  for (unsigned i = 0; i < CONN_MAX_INFLIGHT; i++) {
    const struct slot *s = &c->slots[i];
    if (s->used) {
      uint64_t b = req_bytes (&s->req);
      used++;
      bytes += b;
      held += s->buf.cap;
      CHECK (s->buf.cap <= (b > CONN_SLOT_KEEP ? b : CONN_SLOT_KEEP));
    }
    else {
      kept += s->buf.cap;
      CHECK (s->buf.cap <= CONN_SLOT_KEEP);
    }
  }
  CHECK (used == c->slots_used);
  CHECK (c->inflight <= c->slots_used);
  CHECK (bytes == c->inflight_bytes);
  CHECK (kept == c->kept_bytes);
  CHECK (kept <= CONN_INFLIGHT_BYTES);
  CHECK (used <= 1 || bytes <= CONN_INFLIGHT_BYTES);
  CHECK (bytes <= (maximum > CONN_INFLIGHT_BYTES ? maximum
                                                 : CONN_INFLIGHT_BYTES));
  /* So, in all: */
  CHECK (kept + held <= CONN_INFLIGHT_BYTES +
         (maximum > CONN_INFLIGHT_BYTES ? maximum : CONN_INFLIGHT_BYTES) +
         (uint64_t) CONN_MAX_INFLIGHT * CONN_SLOT_KEEP);
}

/* ---- what a run answered ------------------------------------------------ */

/* With the memory store everything runs inline and in order: the output
 * must be the same byte for byte (seq) -- unless the client wrote,
 * zeroed or trimmed.  Then the comparison is the looser one of slots
 * below, kept from when reads went out by reference (the data read when
 * the "socket" drained); since 0ca8d8f a read's data is copied when it
 * runs and only holes (one zero buffer) go by reference, so inline runs
 * may well be the same byte for byte there too, but nothing asks that
 * (the parts of the slots' comparison hold for inline runs too).
 *
 * With slots, replies come out in the order requests finish, which
 * depends on how many were in flight together, which depends on how the
 * input was split.  Worse, NBD lets a server run requests in flight in
 * any order, and the engine does: a read overlapping a write in flight
 * may see the data before or after it (a lock waiter woken after a new
 * request took the lock), and block status does not wait for writes at
 * all.  So the comparison is this, and each part holds whatever the
 * timing:
 *   - the handshake is inline and ends before any transmission reply:
 *     its bytes must be the same, in order (hs);
 *   - what the connection counted (requests by type, errors, bytes read
 *     and written) must be the same: every complete request is answered
 *     once, and nothing but the content of the device is left to timing;
 *   - with structured replies negotiated, transmission replies are cut
 *     apart exactly (chunks carry their lengths; the simple replies
 *     among them carry no data, reads being answered in chunks), each
 *     reply (a read's chunks up to the one with
 *     the DONE flag count as one) is hashed on its own, and the hashes
 *     are added up: a sum does not depend on the order, and two
 *     different multisets of replies give the same sum only by a 64-bit
 *     collision of mixed FNV hashes.  If the client wrote, zeroed or
 *     trimmed nothing (the file starts zeroed, so every read and block
 *     status then answers the same), all reply bytes count (full);
 *     otherwise the data of reads and the descriptors of block status
 *     may differ, and a read reply counts as its cookie and how many
 *     bytes its chunks cover, a block status reply as its cookie
 *     (blind), while every other reply (errors with their messages,
 *     write/flush/trim/zero replies, empty reads) counts whole.
 *   - Simple replies (no structured replies negotiated) carry no length:
 *     a read's data runs up to the next reply.  Without writes the data
 *     is the same and the stream is cut before every simple reply magic
 *     (one found inside data cuts there in both runs; a magic cannot
 *     straddle a cut, since it does not overlap itself); with writes,
 *     only the number of transmission bytes must be the same (the data
 *     of successful reads is as long as asked, errors are the same). */
struct answer {
  bool slots, structured, modified;
  uint64_t seq, hs, full, blind, tx_bytes, replies;
  struct conn_stats stats;
};

/* Splits the output of a slot-mode run as described above. */
struct parser {
  const struct conn *c;
  uint8_t *p;                   /* bytes not yet cut into replies */
  size_t len, cap, scan;        /* scan: searched for a magic up to here */
  bool tx;                      /* the handshake is over */
  bool greeted;
  /* The structured reply being cut (chunks before one with DONE). */
  uint64_t rfull, rblind_len;
  bool in_reply, rread;
  uint64_t rcookie;
  uint16_t rtype;
};

static uint64_t
mix (uint64_t x)                /* splitmix64's finalizer */
{
  x ^= x >> 30;
  x *= UINT64_C(0xbf58476d1ce4e5b9);
  x ^= x >> 27;
  x *= UINT64_C(0x94d049bb133111eb);
  return x ^ (x >> 31);
}

static void
add_reply (struct answer *a, uint64_t full, uint64_t blind)
{
  a->full += mix (full);
  a->blind += mix (blind);
  a->replies++;
}

/* One structured chunk of len bytes at p. */
static void
structured_chunk (struct parser *ps, struct answer *a, const uint8_t *p,
                  size_t len)
{
  uint16_t flags = get16 (p + 4), type = get16 (p + 6);
  uint64_t cookie = get64 (p + 8);
  if (!ps->in_reply) {
    ps->in_reply = true;
    ps->rfull = FNV_INIT;
    ps->rblind_len = 0;
    ps->rcookie = cookie;
    ps->rtype = type;
    ps->rread = type == NBD_REPLY_TYPE_OFFSET_DATA ||
                type == NBD_REPLY_TYPE_OFFSET_HOLE;
  }
  ps->rfull = fnv_words (ps->rfull, p, len);
  if (type == NBD_REPLY_TYPE_OFFSET_DATA && len >= 28)
    ps->rblind_len += len - 28;
  else if (type == NBD_REPLY_TYPE_OFFSET_HOLE && len >= 32)
    ps->rblind_len += get32 (p + 28);
  else if (cookie != ps->rcookie || type != ps->rtype)
    ps->rread = false;          /* not one read's chunks: count it whole */
  if (!(flags & NBD_REPLY_FLAG_DONE))
    return;
  uint64_t blind;
  uint8_t sum[18];
  memcpy (sum, &ps->rcookie, 8);
  memcpy (sum + 8, &ps->rtype, 2);
  if (ps->rread) {
    sum[8] = sum[9] = 0xff;     /* a read: its first chunk's type varies */
    memcpy (sum + 10, &ps->rblind_len, 8);
    blind = fnv (FNV_INIT, sum, 18);
  }
  else if (ps->rtype == NBD_REPLY_TYPE_BLOCK_STATUS)
    blind = fnv (FNV_INIT, sum, 10);
  else
    blind = ps->rfull;
  add_reply (a, ps->rfull, blind);
  ps->in_reply = false;
}

/* Cuts what it can from ps->p; at_end: no more output follows. */
static void
parse (struct parser *ps, struct answer *a, bool at_end)
{
  static const uint8_t simple_magic[4] = { 0x67, 0x44, 0x66, 0x98 };
  size_t off = 0;
  for (;;) {
    const uint8_t *p = ps->p + off;
    size_t avail = ps->len - off, n;
    if (!ps->greeted) {
      if (avail < 18)
        break;
      n = 18;
      ps->greeted = true;
      a->hs = fnv_words (a->hs, p, n);
    }
    else if (!ps->tx) {
      if (avail < 8)
        break;
      if (get64 (p) == NBD_REP_MAGIC) {
        if (avail < 20 || avail - 20 < get32 (p + 16))
          break;
        n = 20 + (size_t) get32 (p + 16);
        /* NBD_OPT_GO's final ACK: transmission follows. */
        ps->tx = get32 (p + 8) == NBD_OPT_GO && get32 (p + 12) == NBD_REP_ACK;
      }
      else {                    /* NBD_OPT_EXPORT_NAME's reply */
        n = ps->c->no_zeroes ? 10 : 134;
        if (avail < n)
          break;
        ps->tx = true;
      }
      a->hs = fnv_words (a->hs, p, n);
    }
    else if (ps->c->structured) {
      if (avail < 4)
        break;
      if (get32 (p) == NBD_STRUCTURED_REPLY_MAGIC) {
        if (avail < 20 || avail - 20 < get32 (p + 16))
          break;
        n = 20 + (size_t) get32 (p + 16);
        structured_chunk (ps, a, p, n);
      }
      else {                    /* simple replies have no data here */
        CHECK (get32 (p) == NBD_SIMPLE_REPLY_MAGIC);
        if (avail < 16)
          break;
        n = 16;
        add_reply (a, fnv (FNV_INIT, p, n), fnv (FNV_INIT, p, n));
      }
      a->tx_bytes += n;
    }
    else {
      /* Up to the next simple reply magic, or the end of the output. */
      if (avail == 0)
        break;
      size_t from = ps->scan > off + 1 ? ps->scan - off : 1;
      const uint8_t *m = avail > from
        ? memmem (p + from, avail - from, simple_magic, 4) : NULL;
      if (m)
        n = m - p;
      else if (at_end)
        n = avail;
      else {
        ps->scan = off + (avail > 3 ? avail - 3 : 1);
        break;
      }
      add_reply (a, fnv_words (FNV_INIT, p, n), 0);
      a->tx_bytes += n;
    }
    off += n;
    ps->scan = off;
  }
  if (at_end && off < ps->len) {        /* a cut-off handshake reply */
    CHECK (!ps->tx || !ps->c->structured);      /* not a cut-off chunk */
    a->hs = fnv (a->hs, ps->p + off, ps->len - off);
    off = ps->len;
  }
  memmove (ps->p, ps->p + off, ps->len - off);
  ps->len -= off;
  ps->scan = ps->scan >= off ? ps->scan - off : 0;
}

/* The "socket" takes the output. */
static void
drain_bytes (struct parser *ps, struct answer *a, struct obuf *out)
{
  a->seq = fnv (a->seq, out->p, out->len);
  if (ps->cap - ps->len < out->len) {
    size_t cap = ps->len + out->len;
    uint8_t *np = realloc (ps->p, cap);
    CHECK (np != NULL);
    ps->p = np;
    ps->cap = cap;
  }
  if (out->len)
    memcpy (ps->p + ps->len, out->p, out->len);
  ps->len += out->len;
  out->len = 0;
  parse (ps, a, false);
}

static void
drain (struct parser *ps, struct answer *a, struct conn *c)
{
  /* The bytes a send would take, those sent by reference included. */
  struct obuf all = { NULL, 0, 0 }, *out = &c->out;
  if (c->refs.n) {
    struct iovec iov[64];
    size_t k = 0;
    for (uint64_t pos = 0; pos < conn_out_bytes (c);) {
      unsigned n = out_iov (&c->out, &c->refs, pos, &k, iov, 64);
      for (unsigned i = 0; i < n; i++) {
        if (all.cap - all.len < iov[i].iov_len) {
          all.cap = 2 * (all.len + iov[i].iov_len);
          CHECK ((all.p = realloc (all.p, all.cap)) != NULL);
        }
        memcpy (all.p + all.len, iov[i].iov_base, iov[i].iov_len);
        all.len += iov[i].iov_len;
        pos += iov[i].iov_len;
      }
    }
    c->out.len = 0;
    c->refs.n = 0;
    c->refs.bytes = 0;
    out = &all;
  }
  drain_bytes (ps, a, out);
  free (all.p);
}

/* ---- one run ------------------------------------------------------------ */

/* The device settings for mode (the store aside). */
static void
make_config (struct s4k_config *cfg, uint8_t mode, bool slots)
{
  char err[256];
  s4k_config_init (cfg);
  s4k_config_set (cfg, "size", "1M", err, sizeof err);
  s4k_config_set (cfg, "logical", mode & 1 ? "4096" : "512", err, sizeof err);
  s4k_config_set (cfg, "physical", "4096", err, sizeof err);
  /* With slots, larger requests: 16 reads in flight then exceed
   * CONN_INFLIGHT_BYTES, and read buffers CONN_SLOT_KEEP. */
  s4k_config_set (cfg, "max-request", slots ? "2M" : "64k", err, sizeof err);
  if (mode & 2)
    s4k_config_set (cfg, "strict", "false", err, sizeof err);
  if ((mode & 5) == 4)
    s4k_config_set (cfg, "lowest-aligned", "7", err, sizeof err);
  cfg->readonly = mode & 8;
}

/* Serves the client bytes arriving in pieces of piece_len; returns what
 * the replies were (see struct answer). */
static void
run (uint8_t mode, bool slots, size_t piece_len, const uint8_t *data,
     size_t size, struct answer *a)
{
  struct s4k_config cfg;
  char err[256];
  struct s4k_dev *dev = NULL;
  if (slots) {
    make_config (&cfg, mode, true);
    dev = open_file_store (&cfg, 1 << 20);
  }
  if (!dev) {
    slots = false;
    make_config (&cfg, mode, false);
    if (s4k_config_finish (&cfg, err, sizeof err) == -1) {
      fprintf (stderr, "fuzz: %s\n", err);
      abort ();
    }
    if (s4k_dev_open (&dev, &cfg, err, sizeof err) < 0) {
      fprintf (stderr, "fuzz: %s\n", err);
      abort ();
    }
  }
  struct server_cfg scfg = {
    .dev = dev, .export_name = mode & 16 ? "disk" : "",
    .size = s4k_dev_geometry (dev)->size,
    .minimum = s4k_dev_geometry (dev)->logical,
    .preferred = s4k_dev_geometry (dev)->physical,
    .maximum = s4k_dev_max_request (dev),
    /* As at strict=true: the bounds checked below use the maximum. */
    .longest = s4k_dev_max_request (dev),
    .readonly = cfg.readonly, .require_block_size = mode & 32,
    .verbose = verbose,
  };
  s4k_dev_describe (dev, scfg.description, sizeof scfg.description);
  /* Named: a second export (same device) behind the first, so that
   * export lookup and listing are fuzzed too. */
  struct server_cfg second = scfg;
  if (mode & 16) {
    second.export_name = "other";
    scfg.first = second.first = &scfg;
    scfg.next = &second;
    scfg.export_names = second.export_names = "disk, other";
  }

  struct conn c;
  struct fuzz_loop *lp = slots ? &loop : NULL;
  if (conn_init (&c, &scfg, "fuzz", lp ? &lp->base : NULL) == -1)
    abort ();
  c.wake = note_wake;
  CHECK ((c.loop != NULL) == slots);
  *a = (struct answer) { .slots = slots, .seq = FNV_INIT, .hs = FNV_INIT };
  struct parser ps = { .c = &c };
  /* What one reply round may hold: the backlog limit plus one read reply
   * or block status reply; with slots, plus the replies of the requests
   * in flight (they finish whatever the backlog): their reads' data, and
   * error messages (< 512 bytes). */
  const uint64_t in_flight_data = scfg.maximum > CONN_INFLIGHT_BYTES
                                  ? scfg.maximum : CONN_INFLIGHT_BYTES;
  const size_t out_bound = CONN_OUT_HIGH + 28 + scfg.maximum +
                           24 + 8 * CONN_MAX_EXTENTS + 4096 +
                           (slots ? in_flight_data +
                                    CONN_MAX_INFLIGHT * (28 + 32 + 512) : 0);
  unsigned round = 0;
  for (;;) {
    uint8_t *p;
    size_t len;
    if (lp) {
      drive (lp, &c);
      check_slots (&c, scfg.maximum);
    }
    CHECK (conn_out_bytes (&c) <= out_bound);
    CHECK (c.payload.cap <= scfg.maximum);
    if (c.hangup)
      break;
    if (mode & 64 || round++ % 2)       /* the "socket" drains the output */
      drain (&ps, a, &c);
    conn_turn (&c);             /* a turn of the loop */
    if (lp) {
      drive (lp, &c);
      check_slots (&c, scfg.maximum);
      CHECK (conn_out_bytes (&c) <= out_bound);
    }
    conn_recv_area (&c, &p, &len);
    if (len == 0) {
      if (c.yielded)
        continue;               /* its next turn goes on */
      if (conn_done (&c) || conn_out_bytes (&c) == 0) {
        /* Nothing in flight, nothing to send: not wanting input then
         * would leave the client waiting forever. */
        CHECK (conn_done (&c));
        break;
      }
      drain (&ps, a, &c);   /* backlog: drain and go on */
      continue;
    }
    size_t n = len < piece_len ? len : piece_len;
    if (n > size)
      n = size;
    if (n == 0) {
      if (c.yielded)
        continue;               /* the input is all here: finish it */
      break;
    }
    memcpy (p, data, n);
    data += n;
    size -= n;
    conn_received (&c, n);
  }
  if (mode & 128) {             /* server shutdown in the middle */
    c.stopping = true;
    conn_process (&c);
    if (lp) {
      drive (lp, &c);
      check_slots (&c, scfg.maximum);
    }
  }
  CHECK (c.inflight == 0);
  /* Everything produced counts, even after a hang-up (which the real
   * loop does not send): what was sent before it depends on timing. */
  drain (&ps, a, &c);
  parse (&ps, a, true);
  CHECK (!ps.in_reply);         /* a reply without its DONE chunk */
  if (slots)
    log_msg ("fuzz: slots: %lu completions, %lu posts, up to %lu requests "
             "in flight; %" PRIu64 " replies (%s%s)", loop_cqes, loop_posts,
             loop_max_inflight, a->replies,
             c.structured ? "structured" : "simple",
             c.stats.requests[NBD_CMD_WRITE] ||
             c.stats.requests[NBD_CMD_TRIM] ||
             c.stats.requests[NBD_CMD_WRITE_ZEROES] ? ", wrote" : "");
  loop_cqes = loop_posts = loop_max_inflight = 0;
  a->structured = c.structured;
  a->stats = c.stats;
  a->modified = c.stats.requests[NBD_CMD_WRITE] ||
                c.stats.requests[NBD_CMD_TRIM] ||
                c.stats.requests[NBD_CMD_WRITE_ZEROES];
  free (ps.p);
  conn_free (&c);
  s4k_dev_close (dev);
}

/* See struct answer. */
static const char *
same_replies (const struct answer *a, const struct answer *b)
{
  if (a->slots != b->slots)
    return "one run had slots, the other not";
  if (!a->slots && (a->seq == b->seq || !a->modified))
    return a->seq == b->seq ? NULL : "the output differs";
  if (a->hs != b->hs)
    return "the handshake differs";
  if (memcmp (&a->stats, &b->stats, sizeof a->stats) != 0)
    return "the request counts differ";
  if (a->structured != b->structured || a->modified != b->modified)
    return "the negotiation differs";
  if (!a->modified)
    return a->full == b->full && a->replies == b->replies &&
           a->tx_bytes == b->tx_bytes ? NULL : "the replies differ";
  if (a->structured)
    return a->blind == b->blind && a->replies == b->replies
           ? NULL : "the replies (data aside) differ";
  return a->tx_bytes == b->tx_bytes ? NULL
         : "the transmission output has another length";
}

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

/* Besides the sanitizers and the bounds above: the replies must not
 * depend on how the bytes were split into receives. */
int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  if (size < 2)
    return 0;
  uint8_t mode = data[0], piece = data[1] & 127;
  bool slots = data[1] & 128;
  struct answer a, b;
  run (mode, slots, piece ? piece : 65536, data + 2, size - 2, &a);
  run (mode, slots, SIZE_MAX, data + 2, size - 2, &b);
  const char *why = same_replies (&a, &b);
  if (why) {
    fprintf (stderr, "fuzz: %s when the input arrives in pieces of %u "
             "bytes%s\n", why, piece ? piece : 65536,
             slots ? " (slots)" : "");
    abort ();
  }
  return 0;
}

#ifdef FUZZ_REPLAY_MAIN
int
main (int argc, char **argv)
{
  verbose = getenv ("FUZZ_VERBOSE") != NULL;
  for (int i = 1; i < argc; i++) {
    FILE *f = fopen (argv[i], "rb");
    if (!f) {
      perror (argv[i]);
      return 1;
    }
    static uint8_t buf[1 << 20];
    size_t n = fread (buf, 1, sizeof buf, f);
    fclose (f);
    LLVMFuzzerTestOneInput (buf, n);
  }
  return 0;
}
#endif
