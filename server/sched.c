/* SPDX-License-Identifier: BSD-3-Clause */
/* sect4k-server: scheduling a connection's work.  Request slots for an
 * asynchronous store (file=, upstream=, the timing model): admission
 * (CONN_MAX_INFLIGHT requests, CONN_INFLIGHT_BYTES of their data), the
 * page-aligned buffers, completion on the loop's thread in any order, and
 * the timing model's modelled completion on a ring timeout; then the
 * fairness turn (conn_turn) that bounds the work one connection starts
 * per turn of the event loop.  Nothing here parses or encodes NBD: the
 * slot holds the request, cmd_done (reply.c) answers it. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "conn.h"
#include "protocol.h"

/* ---- request slots ------------------------------------------------------ */

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
uint8_t *
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
struct slot *
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
void
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
  cmd_done (c, rq, s4k_client_end (c->cfg->dev, &c->client,
                                   cmd_op (rq->type), s->client_tag, r),
            base);
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
enum s4k_op
cmd_op (uint16_t type)
{
  switch (type) {
  case NBD_CMD_READ: return S4K_OP_READ;
  case NBD_CMD_WRITE: return S4K_OP_WRITE;
  case NBD_CMD_FLUSH: return S4K_OP_FLUSH;
  case NBD_CMD_TRIM: return S4K_OP_TRIM;
  case NBD_CMD_WRITE_ZEROES: return S4K_OP_ZERO;
  case NBD_CMD_BLOCK_STATUS: return S4K_OP_EXTENTS;
  default: return S4K_OP_CACHE;
  }
}

bool
slot_delay (struct conn *c, struct slot *s, int r)
{
  const uint64_t due = s4k_dev_timing (c->cfg->dev, cmd_op (s->req.type),
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

/* ---- fairness ------------------------------------------------------------ */

int64_t
conn_turn (struct conn *c)
{
  c->yielded = false;
  c->credit = c->credit < 0 ? c->credit + CONN_TURN_BYTES : CONN_TURN_BYTES;
  int64_t before = c->credit;
  conn_process (c);
  return before - c->credit;
}
