/* NBD protocol for one connection: fixed newstyle handshake, then
 * transmission.  See conn.h for how the event loop drives it. */
#include <endian.h>
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

/* ---- output ---------------------------------------------- */


/* Hangs up at once (protocol violation, allocation failure): the event
 * loop closes without sending what is left in c->out. */
void
hang_up (struct conn *c, const char *why)
{
  if (why)
    log_msg ("%s: closing the connection: %s", c->name, why);
  c->state = ST_DONE;
  c->hangup = true;
}

/* Stops reading (a protocol violation, or a payload too long to drop):
 * unlike hang_up, the replies already due, and those of the requests in
 * flight, are still sent before the connection closes. */
static void
end_input (struct conn *c, const char *why)
{
  log_msg ("%s: closing the connection: %s", c->name, why);
  c->state = ST_DONE;
}

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

/* Copies client bytes into a log-safe string. */
void
printable (char *dst, size_t dstlen, const uint8_t *src, size_t n)
{
  size_t i, j = 0;
  for (i = 0; i < n && j + 4 < dstlen; i++)
    dst[j++] = src[i] >= 0x20 && src[i] < 0x7f ? src[i] : '?';
  if (i < n) {
    memcpy (dst + j, "...", 3);
    j += 3;
  }
  dst[j] = '\0';
}

/* ---- transmission: replies ---------------------------------------------- */

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

static void
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
static void
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

static void __attribute__ ((format (printf, 4, 5)))
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
static void
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

/* ---- transmission: commands --------------------------------------------- */

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
static bool
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

static unsigned
zero_flags (uint16_t f)
{
  return (f & NBD_CMD_FLAG_FUA ? S4K_FUA : 0) |
         (f & NBD_CMD_FLAG_NO_HOLE ? 0 : S4K_MAY_TRIM) |
         (f & NBD_CMD_FLAG_FAST_ZERO ? S4K_FAST_ZERO : 0);
}

/* The reply to rq (a read, write, flush, zero or trim) whose engine
 * result is r: the same whether the engine answered inline or later.  A
 * read's reply (header space, then the data) is in c->out from base. */
static void
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

/* ---- transmission: block status descriptors and reply ------------------ */

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

static unsigned
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
static void
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

/* ---- transmission: request slots (asynchronous store) ------------------- */

/* The buffer bytes a request holds while it is in flight. */
static uint64_t
req_bytes (const struct nbd_request *rq)
{
  return rq->type == NBD_CMD_READ || rq->type == NBD_CMD_WRITE ? rq->length
                                                                : 0;
}

static void aio_done (void *opaque, int r);

/* Slot buffers are page-aligned, so O_DIRECT (direct=true) reads and
 * writes of whole sectors need no bounce buffer.  Returns a buffer of
 * cap bytes starting with the first keep bytes of b->p (which it
 * frees), or NULL (b unchanged). */
static uint8_t *
slot_buf_alloc (struct pbuf *b, size_t cap, size_t keep)
{
  void *p;
  if (posix_memalign (&p, 4096, cap) != 0)
    return NULL;
  if (keep)
    memcpy (p, b->p, keep);
  free (b->p);
  return p;
}

/* Reserves a slot for the request in c->req, with room for a read's
 * data.  NULL if the request must wait until a slot finishes (then
 * nothing changed), or after hanging up (out of memory).  It is admitted
 * if no slot is used, else if a slot is free and its bytes fit within
 * CONN_INFLIGHT_BYTES together with those of the used slots. */
static struct slot *
slot_get (struct conn *c)
{
  const struct nbd_request *rq = &c->req;
  const uint64_t bytes = req_bytes (rq);
  if (c->slots_used == CONN_MAX_INFLIGHT ||
      (c->slots_used > 0 &&
       c->inflight_bytes + bytes > CONN_INFLIGHT_BYTES))
    return NULL;
  struct slot *s = c->slots;
  while (s->used)
    s++;
  if (!s->aio) {
    s->c = c;
    s->aio = s4k_aio_new (c->cfg->dev, c->loop, aio_done, s);
    if (!s->aio) {
      hang_up (c, "out of memory for a request slot");
      return NULL;
    }
  }
  c->kept_bytes -= s->buf.cap;
  /* A read's data, or block status descriptors. */
  const size_t need = rq->type == NBD_CMD_READ ? rq->length
                      : rq->type == NBD_CMD_BLOCK_STATUS
                      ? 8 * (size_t) status_max (rq) : 0;
  if (s->buf.cap < need) {
    /* Its reply needs as much in c->out anyway. */
    uint8_t *p = slot_buf_alloc (&s->buf, need, 0);
    if (!p) {
      c->kept_bytes += s->buf.cap;
      hang_up (c, rq->type == NBD_CMD_READ ? "out of memory for a read"
                  : "out of memory for block status");
      return NULL;
    }
    s->buf = (struct pbuf) { p, need };
  }
  s->used = true;
  s->req = *rq;
  c->slots_used++;
  c->inflight_bytes += bytes;
  return s;
}

/* s was answered: it is free again.  Its buffer is kept unless large. */
static void
slot_put (struct conn *c, struct slot *s)
{
  c->inflight_bytes -= req_bytes (&s->req);
  c->slots_used--;
  s->used = false;
  if (s->buf.cap > CONN_SLOT_KEEP ||
      c->kept_bytes + s->buf.cap > CONN_INFLIGHT_BYTES) {
    free (s->buf.p);
    s->buf = (struct pbuf) { NULL, 0 };
  }
  c->kept_bytes += s->buf.cap;
}

/* The engine's result r for slot s: the reply goes to c->out (a read's
 * data copied from the slot) and the slot is free again. */
static void
slot_done (struct conn *c, struct slot *s, int r)
{
  const struct nbd_request *rq = &s->req;
  const size_t base = c->out.len;
  if (rq->type == NBD_CMD_BLOCK_STATUS) {
    slot_status_done (c, s, r);
    goto out;
  }
  if (rq->type == NBD_CMD_READ && r == 0) {
    const size_t hdr = c->structured ? 28 : 16;
    uint8_t *p = out_grow (c, hdr + rq->length);
    if (!p)
      goto out;                 /* hung up */
    if (rq->length)
      memcpy (p + hdr, s->buf.p, rq->length);
  }
  cmd_done (c, rq, r, base);
 out:
  slot_put (c, s);
}

/* A slot's request is over (on the loop's thread). */
static void
slot_finished (struct conn *c, struct slot *s, int r)
{
  c->inflight--;
  slot_done (c, s, r);
  conn_process (c);
  c->wake (c);                  /* may free c: last */
}

static void
slot_timer (struct s4k_completion *t, int res)
{
  (void) res;                   /* -ETIME, or -ECANCELED: closing */
  struct slot *s = s4k_container_of (t, struct slot, timer);
  s->timing = false;
  slot_finished (s->c, s, s->result);
}

/* The timing model: the reply to s (whose engine result is r) waits for
 * its modelled completion on an io_uring timeout of the loop, which
 * serves everything else meanwhile; the data work is done and its sector
 * locks are released.  False if there is nothing to wait for. */
static bool
slot_delay (struct conn *c, struct slot *s, int r)
{
  static const enum s4k_op op[NBD_CMD_COUNT] = {
    [NBD_CMD_READ] = S4K_OP_READ, [NBD_CMD_WRITE] = S4K_OP_WRITE,
    [NBD_CMD_FLUSH] = S4K_OP_FLUSH, [NBD_CMD_TRIM] = S4K_OP_TRIM,
    [NBD_CMD_WRITE_ZEROES] = S4K_OP_ZERO,
    [NBD_CMD_BLOCK_STATUS] = S4K_OP_EXTENTS,    /* no media time */
  };
  const uint64_t due = s4k_dev_timing (c->cfg->dev, op[s->req.type],
                                       s->req.length, s->req.offset, r);
  if (!due)
    return false;
  s->result = r;
  s->due.tv_sec = due / 1000000000u;
  s->due.tv_nsec = due % 1000000000u;
  s->timer.fn = slot_timer;
  s->timing = true;
  s4k_loop_timeout (c->loop, &s->timer, &s->due);
  return true;
}

/* A slot's request finished in the engine (on the loop's thread). */
static void
aio_done (void *opaque, int r)
{
  struct slot *s = opaque;
  if (s->c->timed && slot_delay (s->c, s, r))
    return;                     /* still in flight */
  slot_finished (s->c, s, r);
}

/* Runs a read, write, flush, zero or trim: through slot s (in flight
 * until aio_done, unless the engine answers at once), or with s NULL
 * inline, a read's data going straight into its reply in c->out.
 * Inlined: as a call it cost the memory store's 4k reads 1.5% more
 * instructions (callgrind) than before the slots. */
static inline __attribute__ ((always_inline)) void
run_cmd (struct conn *c, struct slot *s)
{
  struct s4k_dev *dev = c->cfg->dev;
  const struct nbd_request *rq = s ? &s->req : &c->req;
  struct s4k_aio *a = s ? s->aio : NULL;
  const size_t base = c->out.len;
  int r;
  switch (rq->type) {
  case NBD_CMD_READ: {
    uint8_t *buf;
    if (s)
      buf = s->buf.p;
    else if (read_by_ref (c, rq))
      return;
    else {
      const size_t hdr = c->structured ? 28 : 16;
      buf = out_grow (c, hdr + rq->length);
      if (!buf)
        return;
      buf += hdr;
    }
    r = a ? s4k_aio_read (a, buf, rq->length, rq->offset)
          : s4k_read (dev, buf, rq->length, rq->offset);
    break;
  }
  case NBD_CMD_WRITE: {
    const uint8_t *buf = s ? s->buf.p : c->payload.p;
    unsigned flags = rq->flags & NBD_CMD_FLAG_FUA ? S4K_FUA : 0;
    r = a ? s4k_aio_write (a, buf, rq->length, rq->offset, flags)
          : s4k_write (dev, buf, rq->length, rq->offset, flags);
    break;
  }
  case NBD_CMD_FLUSH:
    r = a ? s4k_aio_flush (a) : s4k_flush (dev);
    break;
  case NBD_CMD_TRIM: {
    unsigned flags = rq->flags & NBD_CMD_FLAG_FUA ? S4K_FUA : 0;
    r = a ? s4k_aio_trim (a, rq->length, rq->offset, flags)
          : s4k_trim (dev, rq->length, rq->offset, flags);
    break;
  }
  default:                      /* write zeroes */
    r = a ? s4k_aio_zero (a, rq->length, rq->offset, zero_flags (rq->flags))
          : s4k_zero (dev, rq->length, rq->offset, zero_flags (rq->flags));
    break;
  }
  if (!s)
    cmd_done (c, rq, r, base);
  else if (r == 1 || (c->timed && slot_delay (c, s, r)))
    c->inflight++;
  else
    slot_done (c, s, r);
}

/* Where the write being received goes: its slot's buffer, or the inline
 * payload buffer. */
static inline struct pbuf *
pay_buf (struct conn *c)
{
  return c->pay_slot ? &c->pay_slot->buf : &c->payload;
}

/* The payload buffer grows as the bytes arrive, so a client must send
 * data to make us hold it; never beyond the request (<= cfg->longest). */
#define PAYLOAD_STEP (256u * 1024)
static void
grow_payload (struct conn *c, size_t need)
{
  struct pbuf *b = pay_buf (c);
  if (b->cap >= need)
    return;
  size_t cap = b->cap * 2;
  if (cap < need)
    cap = need;
  if (cap > c->req.length)
    cap = c->req.length;
  uint8_t *p = c->pay_slot ? slot_buf_alloc (b, cap, c->payload_have)
                           : realloc (b->p, cap);
  if (!p) {
    hang_up (c, "out of memory for a write payload");
    return;
  }
  b->p = p;
  b->cap = cap;
}

/* Block status: through slot s (in flight until aio_done, unless the
 * engine answers at once) where the store's is a round trip, else
 * inline, the descriptors going straight into the reply in c->out. */
static void
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

static const char *const cmd_names[NBD_CMD_COUNT] = {
  "read", "write", "disconnect", "flush", "trim", "cache", "write zeroes",
  "block status",
};

static const uint16_t cmd_flags_allowed[NBD_CMD_COUNT] = {
  [NBD_CMD_READ] = NBD_CMD_FLAG_FUA | NBD_CMD_FLAG_DF,
  [NBD_CMD_WRITE] = NBD_CMD_FLAG_FUA,
  [NBD_CMD_DISC] = NBD_CMD_FLAG_FUA,
  [NBD_CMD_FLUSH] = NBD_CMD_FLAG_FUA,
  [NBD_CMD_TRIM] = NBD_CMD_FLAG_FUA,
  [NBD_CMD_CACHE] = NBD_CMD_FLAG_FUA,
  [NBD_CMD_WRITE_ZEROES] = NBD_CMD_FLAG_FUA | NBD_CMD_FLAG_NO_HOLE |
                           NBD_CMD_FLAG_FAST_ZERO,
  [NBD_CMD_BLOCK_STATUS] = NBD_CMD_FLAG_FUA | NBD_CMD_FLAG_REQ_ONE,
};

/* Reads and writes carry a payload, bounded by cfg->longest. */
static bool
too_long (const struct conn *c, const struct nbd_request *rq)
{
  return (rq->type == NBD_CMD_READ || rq->type == NBD_CMD_WRITE) &&
         rq->length > c->cfg->longest;
}

/* Checks what the engine does not: command, flags, read-only, size
 * limit.  Returns 0 or an errno with msg filled. */
static int
check_header (const struct conn *c, const struct nbd_request *rq,
              char *msg, size_t len)
{
  const struct server_cfg *cfg = c->cfg;
  if (rq->type >= NBD_CMD_COUNT) {
    snprintf (msg, len, "unknown command %" PRIu16, rq->type);
    return EINVAL;
  }
  const char *name = cmd_names[rq->type];
  uint16_t allowed = cmd_flags_allowed[rq->type];
  if (!c->structured)
    allowed &= ~NBD_CMD_FLAG_DF;
  if (rq->flags & ~allowed) {
    snprintf (msg, len, "%s: flags 0x%" PRIx16 " not valid for this command",
              name, rq->flags);
    return EINVAL;
  }
  if (cfg->readonly && (rq->type == NBD_CMD_WRITE ||
                        rq->type == NBD_CMD_TRIM ||
                        rq->type == NBD_CMD_WRITE_ZEROES)) {
    snprintf (msg, len, "%s refused: the export is read-only", name);
    return EPERM;
  }
  /* EINVAL, as the spec asks: EOVERFLOW is for DF reads only. */
  if (too_long (c, rq)) {
    snprintf (msg, len, "%s of %" PRIu32 " bytes refused: longer than %s "
              "%" PRIu32, name, rq->length, cfg->longest == cfg->maximum
              ? "the advertised maximum request"
              : "the longest request served (strict=false)", cfg->longest);
    return EINVAL;
  }
  return 0;
}

/* True if rq goes to the engine: through a slot with an asynchronous
 * store (block status: with one whose block status is a round trip;
 * refusals stay inline). */
static bool
engine_cmd (const struct conn *c, const struct nbd_request *rq)
{
  switch (rq->type) {
  case NBD_CMD_READ:
    return rq->length > 0 || !c->structured;
  case NBD_CMD_WRITE:
  case NBD_CMD_FLUSH:
  case NBD_CMD_TRIM:
  case NBD_CMD_WRITE_ZEROES:
    return true;
  case NBD_CMD_BLOCK_STATUS:
    return c->meta_allocation && rq->length > 0 &&
           s4k_dev_async_extents (c->cfg->dev);
  default:
    return false;
  }
}

/* Answers rq with err.  A write's reply waits until its payload is read
 * and dropped: a client reads replies while it sends, and libnbd takes a
 * reply to a command it is still sending for a server bug. */
static void
refuse (struct conn *c, const struct nbd_request *rq, int err,
        const char *msg)
{
  if (rq->type != NBD_CMD_WRITE) {
    reply_error (c, rq, err, msg);
    return;
  }
  c->discard = rq->length;
  c->discard_err = err;
  snprintf (c->discard_msg, sizeof c->discard_msg, "%s", msg);
  c->state = ST_DISCARD;
}

/* A complete request header is in c->req.  Returns false, with nothing
 * done, if it must wait until a slot finishes (or after hanging up). */
static bool
handle_request (struct conn *c)
{
  const struct nbd_request *rq = &c->req;
  struct s4k_dev *dev = c->cfg->dev;
  char msg[256];
  int err = check_header (c, rq, msg, sizeof msg);
  struct slot *s = NULL;
  const bool shutdown = c->stopping || c->eshutdown;
  if (!err && !shutdown && c->loop && engine_cmd (c, rq) &&
      !(s = slot_get (c)))
    return false;
  if (rq->type < NBD_CMD_COUNT)
    c->stats.requests[rq->type]++;
  if (err) {
    if (rq->type == NBD_CMD_WRITE && rq->length > CONN_MAX_DISCARD) {
      end_input (c, msg);
      return true;
    }
    if (c->cfg->verbose || too_long (c, rq))
      log_msg ("%s: %s", c->name, msg);
    refuse (c, rq, err, msg);
    return true;
  }
  if (shutdown) {
    refuse (c, rq, ESHUTDOWN, "the server is shutting down");
    return true;
  }

  switch (rq->type) {
  case NBD_CMD_READ:
    if (!engine_cmd (c, rq)) {
      /* Nothing to read, but a range past the end is still EINVAL. */
      int r = s4k_read (dev, NULL, 0, rq->offset);
      uint8_t *p = r ? NULL : out_grow (c, 20);
      if (r)
        reply_result (c, rq, r, S4K_OP_READ);
      else if (p)
        chunk_header (p, NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_NONE,
                      rq->cookie, 0);
    }
    else
      run_cmd (c, s);
    break;
  case NBD_CMD_WRITE:
    c->pay_slot = s;
    c->payload_have = 0;
    c->state = ST_PAYLOAD;
    grow_payload (c, rq->length < PAYLOAD_STEP ? rq->length : PAYLOAD_STEP);
    break;
  case NBD_CMD_DISC:
    if (c->cfg->verbose)
      log_msg ("%s: client disconnected", c->name);
    c->state = ST_DONE;
    break;
  case NBD_CMD_FLUSH:
  case NBD_CMD_TRIM:
  case NBD_CMD_WRITE_ZEROES:
    run_cmd (c, s);
    break;
  case NBD_CMD_CACHE:
    reply_result (c, rq, s4k_cache (dev, rq->length, rq->offset),
                  S4K_OP_CACHE);
    break;
  case NBD_CMD_BLOCK_STATUS:
    cmd_block_status (c, s);
    break;
  }
  return true;
}

/* ---- the state machine -------------------------------------------------- */

int
conn_init (struct conn *c, const struct server_cfg *cfg, const char *name,
           struct s4k_loop *loop)
{
  memset (c, 0, sizeof *c);
  c->cfg = cfg;
  c->name = name;
  c->state = ST_CLIENT_FLAGS;
  c->credit = CONN_TURN_BYTES;
  c->loop = loop;               /* until the export is chosen; slots' aios
                                   are created on first use */
  c->in = malloc (CONN_IN_SIZE);
  uint8_t *p = c->in ? out_grow (c, 18) : NULL;
  if (!p) {
    conn_free (c);
    return -1;
  }
  put64 (p, NBD_MAGIC);
  put64 (p + 8, NBD_IHAVEOPT);
  put16 (p + 16, NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES);
  return 0;
}

void
conn_free (struct conn *c)
{
  for (unsigned i = 0; i < CONN_MAX_INFLIGHT; i++) {
    struct slot *s = &c->slots[i];
    if (s->aio)
      s4k_aio_free (s->aio);
    free (s->buf.p);
    *s = (struct slot) { 0 };
  }
  free (c->in);
  free (c->payload.p);
  free (c->out.p);
  free (c->refs.v);
  c->in = c->payload.p = c->out.p = NULL;
  c->refs = (struct orefs) { 0 };
}

int64_t
conn_turn (struct conn *c)
{
  c->yielded = false;
  c->credit = c->credit < 0 ? c->credit + CONN_TURN_BYTES : CONN_TURN_BYTES;
  int64_t before = c->credit;
  conn_process (c);
  return before - c->credit;
}

void
conn_close (struct conn *c)
{
  c->state = ST_DONE;
  c->hangup = true;
}

void
conn_recv_area (struct conn *c, uint8_t **p, size_t *len)
{
  *p = NULL;
  *len = 0;
  if (c->state == ST_DONE || c->stopping || c->starttls ||
      conn_out_bytes (c) >= CONN_OUT_HIGH)
    return;
  if (c->state == ST_PAYLOAD && c->in_head == c->in_tail) {
    /* Straight into the payload buffer: no copy for large writes. */
    if (c->payload_have == pay_buf (c)->cap)
      grow_payload (c, c->payload_have + 1);
    if (c->hangup)
      return;
    /* The buffer may be larger than this request: never receive past
     * its end, the next request follows. */
    const struct pbuf *b = pay_buf (c);
    size_t room = b->cap < c->req.length ? b->cap : c->req.length;
    c->recv_payload = true;
    *p = b->p + c->payload_have;
    *len = room - c->payload_have;
    return;
  }
  c->recv_payload = false;
  if (c->in_head > 0) {
    memmove (c->in, c->in + c->in_head, c->in_tail - c->in_head);
    c->in_tail -= c->in_head;
    c->in_head = 0;
  }
  *p = c->in + c->in_tail;
  *len = CONN_IN_SIZE - c->in_tail;
}

void
conn_received (struct conn *c, size_t n)
{
  if (c->recv_payload)
    c->payload_have += n;
  else
    c->in_tail += n;
  conn_process (c);
}

void
conn_process (struct conn *c)
{
  while (c->state != ST_DONE && conn_out_bytes (c) < CONN_OUT_HIGH) {
    const uint8_t *in = c->in + c->in_head;
    size_t avail = c->in_tail - c->in_head;

    switch (c->state) {
    case ST_CLIENT_FLAGS: {
      if (avail < 4)
        goto need_more;
      uint32_t flags = get32 (in);
      c->in_head += 4;
      if (flags & ~(uint32_t) (NBD_FLAG_C_FIXED_NEWSTYLE |
                               NBD_FLAG_C_NO_ZEROES)) {
        hang_up (c, "unknown client flags");
        return;
      }
      if (!(flags & NBD_FLAG_C_FIXED_NEWSTYLE)) {
        hang_up (c, "the client does not speak fixed newstyle negotiation, "
                 "the only one this server offers");
        return;
      }
      c->no_zeroes = flags & NBD_FLAG_C_NO_ZEROES;
      c->state = ST_OPTION;
      break;
    }

    case ST_OPTION: {
      if (avail < 16)
        goto need_more;
      if (get64 (in) != NBD_IHAVEOPT) {
        hang_up (c, "bad option magic");
        return;
      }
      uint32_t opt = get32 (in + 8), len = get32 (in + 12);
      if (len > CONN_MAX_OPTION) {
        if (opt == NBD_OPT_EXPORT_NAME) {
          hang_up (c, "export name too long");
          return;
        }
        c->in_head += 16;
        c->option = opt;
        c->discard = len;
        c->state = ST_DISCARD;
        break;
      }
      if (avail < 16 + (size_t) len)
        goto need_more;
      c->in_head += 16 + len;
      handshake_option (c, opt, in + 16, len);
      if (c->starttls)
        return;                 /* what follows is TLS, for the loop */
      break;
    }

    case ST_REQUEST:
      if (avail < 28)
        goto need_more;
      /* Answers to a server shutting down cost nothing: not limited. */
      if (c->credit <= 0 && !c->stopping && !c->eshutdown) {
        c->yielded = true;
        return;
      }
      if (get32 (in) != NBD_REQUEST_MAGIC) {
        end_input (c, "bad request magic");
        return;
      }
      c->req = (struct nbd_request) {
        .flags = get16 (in + 4), .type = get16 (in + 6),
        .cookie = get64 (in + 8), .offset = get64 (in + 16),
        .length = get32 (in + 24),
      };
      /* The request's work, unless it says less (read_by_ref). */
      c->req_cost = c->req.length < CONN_MAX_COST ? c->req.length
                                                  : CONN_MAX_COST;
      if (!handle_request (c))
        return;                 /* the header waits for a free slot */
      c->in_head += 28;
      c->credit -= CONN_REQ_COST + c->req_cost;
      break;

    case ST_PAYLOAD: {
      size_t n = c->req.length - c->payload_have;
      if (n > avail)
        n = avail;
      grow_payload (c, c->payload_have + n);
      if (c->hangup)
        return;
      if (n)
        memcpy (pay_buf (c)->p + c->payload_have, in, n);
      c->payload_have += n;
      c->in_head += n;
      if (c->payload_have < c->req.length)
        goto need_more;
      c->state = ST_REQUEST;
      run_cmd (c, c->pay_slot);
      break;
    }

    case ST_DISCARD: {
      size_t n = avail < c->discard ? avail : c->discard;
      c->in_head += n;
      c->discard -= n;
      if (c->discard > 0)
        goto need_more;
      if (c->transmission) {
        c->state = ST_REQUEST;
        if (c->discard_err) {
          reply_error (c, &c->req, c->discard_err, c->discard_msg);
          c->discard_err = 0;
        }
      }
      else {
        c->state = ST_OPTION;
        opt_error (c, c->option, NBD_REP_ERR_TOO_BIG, "option data longer "
                   "than %u bytes", CONN_MAX_OPTION);
      }
      break;
    }

    case ST_DONE:
      return;
    }
  }
  return;

 need_more:
  if (c->stopping)              /* a partial request is never served */
    c->state = ST_DONE;
}
