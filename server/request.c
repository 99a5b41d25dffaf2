/* SPDX-License-Identifier: BSD-3-Clause */
/* sect4k-server: a connection's input.  The state machine (fixed
 * newstyle handshake, then transmission) over the bytes the loop
 * received: client flags, option headers (handshake.c answers them),
 * request headers and their checks (command, flags, read-only, length),
 * write payloads received into growing buffers, refused payloads
 * dropped, and each request run inline or through a slot (sched.c).  See
 * conn.h for how the event loop drives it; replies are reply.c's. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conn.h"
#include "protocol.h"

/* ---- ending a connection, log lines ------------------------------------- */

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

/* ---- requests: running, payloads, checks ------------------------------- */

static unsigned
zero_flags (uint16_t f)
{
  return (f & NBD_CMD_FLAG_FUA ? S4K_FUA : 0) |
         (f & NBD_CMD_FLAG_NO_HOLE ? 0 : S4K_MAY_TRIM) |
         (f & NBD_CMD_FLAG_FAST_ZERO ? S4K_FAST_ZERO : 0);
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
  const enum s4k_op op = cmd_op (rq->type);
  const uint64_t tag = s4k_client_begin (dev, &c->client, op,
                                         rq->flags & NBD_CMD_FLAG_FUA
                                         ? S4K_FUA : 0);
  int r;
  if (s)
    s->client_tag = tag;
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
    cmd_done (c, rq, s4k_client_end (dev, &c->client, op, tag, r), base);
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
        if (!handshake_tls_refused (c, c->option))
          opt_error (c, c->option, NBD_REP_ERR_TOO_BIG, "option data "
                     "longer than %u bytes", CONN_MAX_OPTION);
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
