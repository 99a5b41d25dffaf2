/* SPDX-License-Identifier: BSD-3-Clause */
/* sect4k-server: what goes back to the client in transmission.  The
 * output (c->out, and the pieces sent by reference, c->refs, that
 * out_iov interleaves for the socket), the reply headers and error
 * replies, the read paths -- copied (the data in c->out, zero blocks
 * turned into hole chunks) and by reference (s4k_read_iov: the data
 * still copied, each sector whole; holes known from the store, sent as
 * hole chunks or zeroes by reference) -- and block status.
 * request.c decides what to run; this file says how it is answered. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "conn.h"
#include "protocol.h"

/* ---- output ------------------------------------------------------------- */

/* Appends n bytes to the output and returns where they go; NULL (after
 * hanging up) when memory runs out. */
uint8_t *
out_grow (struct conn *c, size_t n)
{
  struct obuf *b = &c->out;
  if (b->cap - b->len < n) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap - b->len < n)
      cap *= 2;
    uint8_t *p = realloc (b->p, cap);
    if (!p) {
      hang_up (c, "out of memory for a reply");
      return NULL;
    }
    b->p = p;
    b->cap = cap;
  }
  uint8_t *r = b->p + b->len;
  b->len += n;
  return r;
}

/* Appends len bytes at p to the output by reference: sent from there,
 * not copied.  False (after hanging up) when memory runs out. */
static bool
out_ref (struct conn *c, const void *p, size_t len)
{
  struct orefs *r = &c->refs;
  if (r->n == r->cap) {
    size_t cap = r->cap ? 2 * r->cap : 64;
    struct oref *v = realloc (r->v, cap * sizeof *v);
    if (!v) {
      hang_up (c, "out of memory for a reply");
      return false;
    }
    r->v = v;
    r->cap = cap;
  }
  r->v[r->n++] = (struct oref) { c->out.len, r->bytes, p, len };
  r->bytes += len;
  return true;
}

unsigned
out_iov (const struct obuf *b, const struct orefs *r, uint64_t pos,
         size_t *k, struct iovec *iov, unsigned max)
{
  size_t i = *k;
  while (i < r->n && r->v[i].at + r->v[i].before + r->v[i].len <= pos)
    i++;
  *k = i;
  unsigned n = 0;
  size_t o;                     /* where in b the stream goes on */
  if (i < r->n && pos >= r->v[i].at + r->v[i].before) {
    uint64_t into = pos - (r->v[i].at + r->v[i].before);
    iov[n++] = (struct iovec) { (char *) r->v[i].p + into,
                                r->v[i].len - into };
    o = r->v[i++].at;
  }
  else
    o = pos - (i ? r->v[i - 1].before + r->v[i - 1].len : 0);
  while (n < max) {
    size_t end = i < r->n ? r->v[i].at : b->len;
    if (end > o) {
      iov[n++] = (struct iovec) { b->p + o, end - o };
      if (n == max)
        break;
    }
    if (i == r->n)
      break;
    iov[n++] = (struct iovec) { (void *) r->v[i].p, r->v[i].len };
    o = r->v[i++].at;
  }
  return n;
}


/* ---- reply headers and errors ------------------------------------------ */

static uint32_t
nbd_errno (int err)
{
  switch (err) {
  case EPERM: case EROFS: return NBD_EPERM;
  case EIO: return NBD_EIO;
  case ENOMEM: return NBD_ENOMEM;
  case EINVAL: return NBD_EINVAL;
  case ENOSPC: case EDQUOT: case EFBIG: return NBD_ENOSPC;
  case EOVERFLOW: return NBD_EOVERFLOW;
  case ENOTSUP: return NBD_ENOTSUP;
  case ESHUTDOWN: return NBD_ESHUTDOWN;
  default: return NBD_EIO;
  }
}

void
chunk_header (uint8_t *p, uint16_t flags, uint16_t type, uint64_t cookie,
              uint32_t len)
{
  put32 (p, NBD_STRUCTURED_REPLY_MAGIC);
  put16 (p + 4, flags);
  put16 (p + 6, type);
  put64 (p + 8, cookie);
  put32 (p + 16, len);
}

/* The 28 bytes before len bytes of read data at offset. */
static void
data_chunk_header (uint8_t *p, uint16_t flags, uint64_t cookie,
                   uint64_t offset, uint32_t len)
{
  chunk_header (p, flags, NBD_REPLY_TYPE_OFFSET_DATA, cookie, 8 + len);
  put64 (p + 20, offset);
}

/* A 32-byte hole chunk: len bytes of zeroes at offset. */
static void
hole_chunk (uint8_t *p, uint64_t cookie, uint64_t offset, uint32_t len)
{
  chunk_header (p, 0, NBD_REPLY_TYPE_OFFSET_HOLE, cookie, 12);
  put64 (p + 20, offset);
  put32 (p + 28, len);
}

/* A 16-byte simple reply header. */
static void
simple_header (uint8_t *p, uint32_t err, uint64_t cookie)
{
  put32 (p, NBD_SIMPLE_REPLY_MAGIC);
  put32 (p + 4, err);
  put64 (p + 8, cookie);
}

static void
reply_simple (struct conn *c, const struct nbd_request *rq, uint32_t err)
{
  uint8_t *p = out_grow (c, 16);
  if (p)
    simple_header (p, err, rq->cookie);
}

/* An error reply to rq: a structured error chunk carrying msg when
 * structured replies are on, else a simple reply.  err is an errno
 * value. */
void
reply_error (struct conn *c, const struct nbd_request *rq, int err,
             const char *msg)
{
  c->stats.errors++;
  if (!c->structured) {
    reply_simple (c, rq, nbd_errno (err));
    return;
  }
  size_t ml = strlen (msg);
  if (ml > CONN_MAX_STRING)
    ml = CONN_MAX_STRING;
  uint8_t *p = out_grow (c, 20 + 6 + ml);
  if (!p)
    return;
  chunk_header (p, NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_ERROR, rq->cookie,
                6 + ml);
  put32 (p + 20, nbd_errno (err));
  put16 (p + 24, ml);
  memcpy (p + 26, msg, ml);
}

void
reply_errorf (struct conn *c, const struct nbd_request *rq, int err,
              const char *fmt, ...)
{
  char msg[512];
  va_list ap;
  va_start (ap, fmt);
  vsnprintf (msg, sizeof msg, fmt, ap);
  va_end (ap);
  if (c->cfg->verbose)
    log_msg ("%s: %s", c->name, msg);
  reply_error (c, rq, err, msg);
}

/* Replies to rq's engine result r (0 or -errno). */
void
reply_result (struct conn *c, const struct nbd_request *rq, int r,
              enum s4k_op op)
{
  if (r == 0) {
    reply_simple (c, rq, 0);
    return;
  }
  char msg[512];
  struct s4k_dev *dev = c->cfg->dev;
  if (r == -EINVAL && s4k_refused (dev, op, rq->length, rq->offset)) {
    s4k_explain_refusal (dev, op, rq->length, rq->offset, msg, sizeof msg);
    if (!c->refusal_logged || c->cfg->verbose) {
      log_msg ("%s: %s%s", c->name, msg, c->refusal_logged ? "" :
               "; further refusals on this connection are not logged");
      c->refusal_logged = true;
    }
  }
  else {
    snprintf (msg, sizeof msg, "%s at offset %" PRIu64 " length %" PRIu32
              ": %s", s4k_op_names[op], rq->offset, rq->length,
              s4k_strerror (-r));
    if (r != -ENOTSUP && (r != -EINVAL || c->cfg->verbose))
      log_msg ("%s: %s", c->name, msg);
  }
  reply_error (c, rq, -r, msg);
}

/* ---- the read paths: copied, and by reference --------------------------- */

/* True if the L bytes at p read as zero.  Comparing the block with
 * itself shifted by 16 bytes lets memcmp do the work. */
static bool
is_zero (const uint8_t *p, size_t n)
{
  /* Data blocks mostly differ in their first bytes: no call for them
   * (every block of every read is tested). */
  uint64_t head[2];
  memcpy (head, p, 16);
  return (head[0] | head[1]) == 0 && memcmp (p, p + 16, n - 16) == 0;
}

/* Rewrites a read reply in place: the data at base + 28 becomes
 * alternating OFFSET_DATA and OFFSET_HOLE chunks, holes being whole
 * logical blocks of zeroes.  Each hole (>= 512 bytes) shrinks to a
 * 32-byte chunk, so the write position never overtakes the data still
 * to be read (see the invariant below). */
static void
read_chunks (struct conn *c, const struct nbd_request *rq, size_t base)
{
  const uint32_t L = c->cfg->minimum, len = rq->length;
  uint8_t *b = c->out.p + base, *data = b + 28;
  size_t w = 0, last = 0;
  uint32_t pos = 0;
#define BLOCK_ZERO(at) (len - (at) >= L && is_zero (data + (at), L))
  bool zero = BLOCK_ZERO (0);
  while (pos < len) {
    uint32_t end = pos;
    bool z;
    do {
      end = len - end > L ? end + L : len;
      z = end < len && BLOCK_ZERO (end);
    } while (end < len && z == zero);
    /* Invariant: w <= pos + 28, and w <= pos after a hole. */
    last = w;
    if (zero) {
      hole_chunk (b + w, rq->cookie, rq->offset + pos, end - pos);
      w += 32;
    }
    else {
      data_chunk_header (b + w, 0, rq->cookie, rq->offset + pos, end - pos);
      memmove (b + w + 28, data + pos, end - pos);
      w += 28 + end - pos;
    }
    pos = end;
    zero = z;
  }
#undef BLOCK_ZERO
  put16 (b + last + 4, NBD_REPLY_FLAG_DONE);
  c->out.len = base + w;
}

/* Finishes a read whose data is in c->out after the reply header at
 * base (read there inline, or copied from its slot): holes become hole
 * chunks unless the client said DF.  On error the space is dropped. */
static void
read_done (struct conn *c, const struct nbd_request *rq, size_t base, int r)
{
  const uint32_t len = rq->length;
  const size_t hdr = c->structured ? 28 : 16;
  if (r) {
    c->out.len = base;
    reply_result (c, rq, r, S4K_OP_READ);
    return;
  }
  uint8_t *p = c->out.p + base;
  c->stats.bytes_read += len;
  if (!c->structured) {
    simple_header (p, 0, rq->cookie);
    return;
  }
  bool holes = false;
  if (!(rq->flags & NBD_CMD_FLAG_DF))
    for (uint32_t at = 0; !holes && len - at >= c->cfg->minimum;
         at += c->cfg->minimum)
      holes = is_zero (p + hdr + at, c->cfg->minimum);
  if (holes)
    read_chunks (c, rq, base);
  else
    data_chunk_header (p, NBD_REPLY_FLAG_DONE, rq->cookie, rq->offset, len);
}

/* Zeroes sent by reference for holes where the reply must carry data
 * (simple replies, DF): written once, so that the kernel copies real
 * pages (see DESIGN.md on reading untouched memory). */
#define ZERO_BUF (128u * 1024)
static uint8_t *zero_buf;
static pthread_once_t zero_once = PTHREAD_ONCE_INIT;

static void
zero_init (void)
{
  if ((zero_buf = malloc (ZERO_BUF)))
    memset (zero_buf, 0, ZERO_BUF);
}

/* The pieces iov[i..j), from device offset off, as data, holes as
 * zeroes.  Data is copied (s4k_read_piece): the kernel copies a
 * reference later, when a write in flight may have torn a logical
 * sector of it; a check of the store's sequence words after the send
 * would come too late, the bytes are gone.  Holes go by reference.
 * False after hanging up. */
static bool
out_pieces (struct conn *c, const struct iovec *iov, int i, int j,
            uint64_t off)
{
  for (; i < j; off += iov[i++].iov_len) {
    if (iov[i].iov_base) {
      uint8_t *p = out_grow (c, iov[i].iov_len);
      if (!p)
        return false;
      int r = s4k_read_piece (c->cfg->dev, p, iov[i].iov_len, off);
      if (r) {
        hang_up (c, "a read of the memory store failed");
        return false;
      }
      continue;
    }
    for (size_t left = iov[i].iov_len, n; left > 0; left -= n) {
      n = left < ZERO_BUF ? left : ZERO_BUF;
      if (!out_ref (c, zero_buf, n))
        return false;
    }
  }
  return true;
}

/* A read answered by reference (s4k_read_iov: the memory store): its
 * holes are sent by reference (zeroes from one buffer) or, under
 * structured replies (unless DF), become hole chunks with no data at
 * all, known from the store rather than by scanning zeroes; its data is
 * copied into c->out, each logical sector whole (out_pieces).  A hole
 * looked up before a write that fills it goes out as the old zeroes,
 * whole.  Data blocks that merely hold zeroes stay data.
 * False if the store cannot, or the read has too many pieces: then
 * nothing was done or counted. */
bool
read_by_ref (struct conn *c, const struct nbd_request *rq)
{
  struct iovec iov[CONN_IOV_MAX];
  int n = s4k_read_iov (c->cfg->dev, rq->length, rq->offset, iov,
                        CONN_IOV_MAX);
  if (n == -ENOTSUP || n == -ENOBUFS)
    return false;
  pthread_once (&zero_once, zero_init);
  if (!zero_buf) {
    hang_up (c, "out of memory for a read");
    return true;
  }
  if (n < 0) {
    reply_result (c, rq, n, S4K_OP_READ);
    return true;
  }
  c->stats.bytes_read += rq->length;
  uint8_t *p;
  if (!c->structured) {
    if ((p = out_grow (c, 16))) {
      simple_header (p, 0, rq->cookie);
      out_pieces (c, iov, 0, n, rq->offset);
    }
    return true;
  }
  bool holes = false;
  if (!(rq->flags & NBD_CMD_FLAG_DF))
    for (int i = 0; i < n && !holes; i++)
      holes = !iov[i].iov_base;
  if (!holes) {
    if ((p = out_grow (c, 28))) {
      data_chunk_header (p, NBD_REPLY_FLAG_DONE, rq->cookie, rq->offset,
                         rq->length);
      out_pieces (c, iov, 0, n, rq->offset);
    }
    return true;
  }
  /* Hole and data chunks in turn (the engine joined runs of holes). */
  size_t last = 0;
  uint64_t pos = 0;
  for (int i = 0, j; i < n; i = j) {
    last = c->out.len;
    if (!iov[i].iov_base) {
      if (!(p = out_grow (c, 32)))
        return true;
      hole_chunk (p, rq->cookie, rq->offset + pos, iov[i].iov_len);
      pos += iov[i].iov_len;
      j = i + 1;
      continue;
    }
    uint64_t run = 0;
    for (j = i; j < n && iov[j].iov_base; j++)
      run += iov[j].iov_len;
    if (!(p = out_grow (c, 28)))
      return true;
    data_chunk_header (p, 0, rq->cookie, rq->offset + pos, run);
    if (!out_pieces (c, iov, i, j, rq->offset + pos))
      return true;
    pos += run;
  }
  put16 (c->out.p + last + 4, NBD_REPLY_FLAG_DONE);
  return true;
}

/* The reply to rq (a read, write, flush, zero or trim) whose engine
 * result is r: the same whether the engine answered inline or later.  A
 * read's reply (header space, then the data) is in c->out from base. */
void
cmd_done (struct conn *c, const struct nbd_request *rq, int r, size_t base)
{
  switch (rq->type) {
  case NBD_CMD_READ:
    read_done (c, rq, base, r);
    break;
  case NBD_CMD_WRITE:
    if (r == 0)
      c->stats.bytes_written += rq->length;
    reply_result (c, rq, r, S4K_OP_WRITE);
    break;
  case NBD_CMD_FLUSH:
    reply_result (c, rq, r, S4K_OP_FLUSH);
    break;
  case NBD_CMD_TRIM:
    reply_result (c, rq, r, S4K_OP_TRIM);
    break;
  default:
    reply_result (c, rq, r, S4K_OP_ZERO);
    break;
  }
}

/* ---- block status ------------------------------------------------------ */

static int
add_status (void *opaque, uint64_t off, uint64_t len, bool zero)
{
  (void) off;
  struct status_ctx *s = opaque;
  uint32_t flags = zero ? NBD_STATE_HOLE | NBD_STATE_ZERO : 0;
  if (len == 0)
    return 0;
  if (s->n > 0 && get32 (s->d + 8 * (s->n - 1) + 4) == flags) {
    uint8_t *last = s->d + 8 * (s->n - 1);
    put32 (last, get32 (last) + len);   /* clipped to the request: fits */
    return 0;
  }
  if (s->n == s->max)
    return 1;                   /* enough: the client asks again */
  put32 (s->d + 8 * s->n, len);
  put32 (s->d + 8 * s->n + 4, flags);
  s->n++;
  return 0;
}

unsigned
status_max (const struct nbd_request *rq)
{
  return rq->flags & NBD_CMD_FLAG_REQ_ONE ? 1 : CONN_MAX_EXTENTS;
}

/* The reply to block status rq whose engine result is r: its
 * descriptors s->d are in c->out after 24 bytes of room for the header,
 * from base. */
static void
status_done (struct conn *c, const struct nbd_request *rq, int r,
             size_t base, struct status_ctx *s)
{
  if (r < 0) {
    c->out.len = base;
    reply_result (c, rq, r, S4K_OP_EXTENTS);
    return;
  }
  if (s->n == 0)                /* cannot happen; stay within the spec */
    add_status (s, rq->offset, rq->length, false);
  uint8_t *p = c->out.p + base;
  chunk_header (p, NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_BLOCK_STATUS,
                rq->cookie, 4 + 8 * s->n);
  put32 (p + 20, META_ID);
  c->out.len = base + 24 + 8 * s->n;
}

/* A slot's block status ended: its descriptors go after a header in
 * c->out. */
void
slot_status_done (struct conn *c, struct slot *s, int r)
{
  const size_t base = c->out.len;
  const unsigned n = s->status.n ? s->status.n : 1;
  uint8_t *p = r < 0 ? NULL : out_grow (c, 24 + 8 * n);
  if (r >= 0 && !p)
    return;                     /* hung up */
  struct status_ctx st = { p ? p + 24 : NULL, s->status.n, n };
  if (p)
    memcpy (st.d, s->status.d, 8 * (size_t) s->status.n);
  status_done (c, &s->req, r, base, &st);
}

/* Block status: through slot s (in flight until aio_done, unless the
 * engine answers at once) where the store's is a round trip, else
 * inline, the descriptors going straight into the reply in c->out. */
void
cmd_block_status (struct conn *c, struct slot *s)
{
  const struct nbd_request *rq = &c->req;
  if (!c->meta_allocation) {
    reply_errorf (c, rq, EINVAL, "block status without a negotiated metadata "
                  "context (base:allocation)");
    return;
  }
  if (rq->length == 0) {
    reply_errorf (c, rq, EINVAL, "block status of length 0");
    return;
  }
  if (s) {
    s->status = (struct status_ctx) { s->buf.p, 0, status_max (rq) };
    int r = s4k_aio_extents (s->aio, rq->length, rq->offset, add_status,
                             &s->status);
    if (r == 1)
      c->inflight++;
    else
      slot_done (c, s, r);
    return;
  }
  const unsigned max = status_max (rq);
  size_t base = c->out.len;
  uint8_t *p = out_grow (c, 24 + 8 * max);
  if (!p)
    return;
  struct status_ctx st = { p + 24, 0, max };
  status_done (c, rq, s4k_extents (c->cfg->dev, rq->length, rq->offset,
                                   add_status, &st), base, &st);
}

