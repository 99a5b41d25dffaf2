/* SPDX-License-Identifier: BSD-3-Clause */
/* The upstream store's asynchronous path: requests an event loop
 * (sect4k-server) submits.  Each loop has its own upstream connection,
 * used only on the loop's thread, so nothing on the way takes a lock:
 * commands go out with libnbd's nbd_aio_* calls, as many at once as the
 * loop's clients send (pipelined), and the connection's socket is
 * polled through the loop's ring (IORING_OP_POLL_ADD, in the directions
 * libnbd asks for), so no loop waits for the network.  Connecting, at a
 * loop's first request and again after the upstream died, goes the same
 * way (nbd_aio_connect_uri; libnbd only looks up a TCP host name
 * synchronously).  Requests that arrive meanwhile wait for it.
 *
 * libnbd calls a command's completion callback with the handle locked,
 * and nothing may call into the handle from there: the callback only
 * records the result, and the request goes on (a flush after the write
 * for FUA, then req->done) from the loop's post queue.
 *
 * A connection that dies fails its commands in flight (EIO); it is
 * closed, counting a loss if writes no flush covered were left
 * (mark_lost), and the next request connects again.  The loop polls its
 * idle connection too, so it notices at once when the upstream dies.  A
 * flush goes on past a connection that dies during it (its loss is
 * counted, and reported per client connection by the engine).
 *
 * upstream-timeout=: a loop's connection that waits (connecting, or
 * commands in flight) while its socket says nothing for that long is
 * closed as one that died (its requests fail with EIO): a timer of the
 * loop's ring, armed while it waits, checks when it last heard of it.
 * The upstream is then down (store_nbd.c): every loop fails its new
 * requests at once until the prober has connected again.  With
 * upstream-timeout=0 there is no timer until the front end stops: each
 * loop polls the store's stop_fd through its ring (armed once, at its
 * first request), and the stop arms the timer, STOP_WAIT from then
 * (stop_woke).
 *
 * Block status goes the same way (nbd_aio_block_status), its replies
 * rounded to whole physical sectors by the same callback as the
 * synchronous path's (up_extent_cb), so a loop's clients can have many
 * in flight at once; a range the upstream answers in part is asked for
 * again from where its answer ended, as the synchronous path does.
 *
 * Flush (the marks: store_nbd_priv.h).  With multi-conn, one flush on
 * the loop's own connection covers every connection's completed writes.
 * Without it, each loop whose connection is dirty is asked (loop->post)
 * to flush its own, and the client's flush ends when the last of them
 * has; a dirty connection of the synchronous pool (written by --scsi's
 * LUN threads serving the same export) is flushed in place.  The
 * synchronous flush asks the loops the same way and waits on a
 * condition variable (up_flush_loops); a loop on the caller's own
 * thread, which could not answer, is flushed in place (own_flush).  A
 * write's mark is taken in its completion callback, before the client
 * can see it acknowledged, so a flush received after the
 * acknowledgement finds it.
 *
 * Ownership.  The store owns each loop's struct aloop (freed at close);
 * the loop's thread owns its connection.  Another thread (another loop,
 * or a synchronous flush) reaches a loop only by asking it to flush,
 * through its inbox (ask_lock), never by
 * posting to it directly: a loop may stop before the store closes (the
 * NBD loops before the ublk queues, a ublk queue before another), and
 * its memory goes with it.  Such a loop lets go first (up_loop_gone, on
 * its thread, none of its own requests in flight): it finishes the
 * flushes it was asked for, flushes its connection if dirty, closes it,
 * answers the asks still in its inbox, and from then on nothing of the
 * store touches the loop again; later asks find it released and pass
 * (its writes were flushed, or their loss counted).  Its aloop stays,
 * released, until close, and counts towards MAX_LOOPS.  Its final flush
 * waits at most upstream-timeout= (STOP_WAIT with 0, which would wait
 * forever: a stop must end) and says in one line if it did not
 * complete.  The flush at exit, once the loops are gone, runs on the
 * pool with the same bound and the same kind of line (store_nbd.c). */
#include <errno.h>
#include <linux/time_types.h>
#include <liburing.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "sect4k/sect4k.h"
#include "store_nbd_priv.h"

/* One direction's poll of a loop's connection. */
struct apoll {
  struct s4k_completion c;
  struct aloop *al;
  unsigned gen;                  /* the connection it was armed for */
  bool busy;
};

struct xsub;

/* A loop's connection: all but mark, loop, released and the inbox only
 * on the loop's thread. */
struct aloop {
  struct mark mark;
  struct s4k_loop *loop;         /* set once; used only while not gone */
  pthread_t thread;              /* the loop's (it made this): set once */
  _Atomic bool released;         /* let go (up_loop_gone): skipped */
  /* The inbox: other loops' asks.  ask_c is posted to the loop when the
   * first ask arrives; while the loop lets go (gone) asks wait for it. */
  pthread_mutex_t ask_lock;
  struct xsub *asks;
  bool ask_posted, gone;
  struct s4k_completion ask_c;
  /* Flushes asked that ended: their sub_end runs from drain_c, posted
   * to the loop, or as it lets go if it never ran. */
  struct s4k_completion *drained;
  bool drain_posted;
  struct s4k_completion drain_c;
  struct nbd_store *u;
  struct nbd_handle *h;          /* NULL: connect at the next request */
  unsigned gen;                  /* counts connections, from 1 */
  bool connecting, connected_before;
  struct apoll rd, wr;
  /* Requests waiting for the connection, linked by piece[0].c.next. */
  struct s4k_completion *waiting, **waiting_tail;
  /* upstream-timeout=: while busy (waiting on the upstream), the timer
   * is armed; heard is when the socket last said anything. */
  bool busy, timer_armed;
  uint64_t heard;
  struct s4k_completion timer;
  struct __kernel_timespec due;
  /* upstream-timeout=0: a poll of the store's stop_fd, armed once, so
   * that the stop bounds a wait that had no timer (stop_woke). */
  struct s4k_completion stop_c;
  bool stop_armed, stop_pending;
};

/* What a request (struct s4k_store_req) holds of the store's:
 *   inflight         commands in flight, plus one while they are sent
 *   err              the first error
 *   piece[0].c       posted to the loop once no command is in flight;
 *                    its fn is the next step (after_cmds or
 *                    after_status, then req_end)
 *   cover_last, cover_clock   what a flush of it covers
 *   round, round_from         block status: the runs so far, and where
 *                             the last command began */

static void after_io (struct aloop *al);
static void timer_done (struct s4k_completion *c, int res);
static void stop_woke (struct s4k_completion *c, int res);
static void ask_run (struct s4k_completion *c, int res);
static void drain_run (struct s4k_completion *c, int res);

/* The loop's connection state, made at its first request.  NULL if the
 * store has MAX_LOOPS already. */
static struct aloop *
loop_get (struct nbd_store *u, struct s4k_loop *loop)
{
  unsigned n = atomic_load_explicit (&u->nloops, memory_order_acquire);
  /* A released one may have had this loop's address. */
  for (unsigned i = 0; i < n; i++)
    if (u->loops[i]->loop == loop && !atomic_load (&u->loops[i]->released))
      return u->loops[i];
  struct aloop *al = NULL;
  pthread_mutex_lock (&u->loops_lock);
  n = atomic_load (&u->nloops);
  if (n < MAX_LOOPS && (al = calloc (1, sizeof *al))) {
    al->loop = loop;
    al->thread = pthread_self ();
    al->u = u;
    al->rd.al = al->wr.al = al;
    al->gen = 1;
    al->timer.fn = timer_done;
    al->stop_c.fn = stop_woke;
    al->waiting_tail = &al->waiting;
    al->ask_c.fn = ask_run;
    al->drain_c.fn = drain_run;
    pthread_mutex_init (&al->ask_lock, NULL);
    u->loops[n] = al;
    atomic_store_explicit (&u->nloops, n + 1, memory_order_release);
  }
  pthread_mutex_unlock (&u->loops_lock);
  return al;
}

bool
up_dirty_after (struct nbd_store *u, uint64_t after)
{
  for (unsigned i = 0; i < u->n; i++)
    if (mark_dirty (u, &u->conns[i].mark) &&
        atomic_load (&u->conns[i].mark.last) > after)
      return true;
  unsigned n = atomic_load_explicit (&u->nloops, memory_order_acquire);
  for (unsigned i = 0; i < n; i++)
    if (mark_dirty (u, &u->loops[i]->mark) &&
        atomic_load (&u->loops[i]->mark.last) > after)
      return true;
  return false;
}

/* An upstream command's errno as the request's: the connection failing
 * (ENOTCONN, ...) is EIO. */
static int
cmd_error (int e)
{
  switch (e) {
  case EPERM: case ENOMEM: case EINVAL: case ENOSPC: case EOVERFLOW:
  case ENOTSUP: case EROFS:
    return -e;
  default:
    return -EIO;
  }
}

static void
note_error (struct s4k_store_req *q, int r)
{
  if (r && !q->err)
    q->err = r;
}

/* One of q's commands ended (or the sending of them). */
static void
cmd_end (struct s4k_store_req *q)
{
  if (--q->inflight == 0)
    q->loop->post (q->loop, &q->piece[0].c);
}

/* ---- commands and their completion callbacks ---------------------------- */

struct aio_arg {
  struct aloop *al;
  struct s4k_store_req *q;
};

/* The loop's connection state, for a request of that loop. */
static struct aloop *
loop_of (const struct s4k_store_req *q)
{
  return loop_get ((struct nbd_store *) q->store, q->loop);
}

/* A command's completion callback records its result; its free
 * function, which libnbd calls exactly once whatever happened (also when
 * the call that would send it fails, before or after queueing it), ends
 * it.  So a command is counted in flight before it is sent. */
static void
cmd_free (void *opaque)
{
  cmd_end (opaque);
}

static int
cmd_done (void *opaque, int *error)
{
  struct s4k_store_req *q = opaque;
  if (*error)
    note_error (q, cmd_error (*error));
  else if (q->kind != S4K_REQ_READ)
    mark_write ((struct nbd_store *) q->store, &loop_of (q)->mark);
  return 1;
}

/* send_fn of the asynchronous path. */
static int
aio_send (void *arg, enum cmd cmd, char *buf, uint64_t len, uint64_t off,
          uint32_t flags)
{
  struct aio_arg *a = arg;
  struct nbd_handle *h = a->al->h;
  nbd_completion_callback cb = { .callback = cmd_done, .user_data = a->q,
                                 .free = cmd_free };
  a->q->inflight++;
  int64_t r = cmd == CMD_READ ? nbd_aio_pread (h, buf, len, off, cb, flags)
              : cmd == CMD_WRITE ? nbd_aio_pwrite (h, buf, len, off, cb, flags)
              : nbd_aio_zero (h, len, off, cb, flags);
  return r == -1 ? cmd_error (nbd_get_errno ()) : 0;
}

/* A flush for q on its loop's connection. */
static int
flush_done (void *opaque, int *error)
{
  struct s4k_store_req *q = opaque;
  struct nbd_store *u = (struct nbd_store *) q->store;
  if (*error)
    note_error (q, cmd_error (*error));
  else
    mark_flushed (u, &loop_of (q)->mark,
                  (struct flush_cover) { q->cover_last, q->cover_clock });
  return 1;
}
static int
send_flush (struct aloop *al, struct s4k_store_req *q)
{
  struct flush_cover c = mark_cover (al->u, &al->mark);
  q->cover_last = c.last;
  q->cover_clock = c.clock;
  q->cover_gen = al->gen;
  nbd_completion_callback cb = { .callback = flush_done, .user_data = q,
                                 .free = cmd_free };
  q->inflight++;
  return nbd_aio_flush (al->h, cb, 0) == -1 ? cmd_error (nbd_get_errno ())
                                             : 0;
}

/* A block status for q from where its runs end so far, up to the end of
 * its range (at most ZERO_CHUNK at once). */
static int
status_done (void *opaque, int *error)
{
  struct s4k_store_req *q = opaque;
  if (*error)
    note_error (q, cmd_error (*error));
  return 1;
}
static int
send_status (struct aloop *al, struct s4k_store_req *q)
{
  const uint64_t end = q->io[0].off + q->io[0].len;
  const uint64_t pos = q->round.pos;
  nbd_extent_callback ecb = { .callback = up_extent_cb,
                              .user_data = &q->round };
  nbd_completion_callback cb = { .callback = status_done, .user_data = q,
                                 .free = cmd_free };
  q->round_from = pos;
  q->inflight++;
  return nbd_aio_block_status (al->h, end - pos < ZERO_CHUNK ? end - pos
                                                             : ZERO_CHUNK,
                               pos, ecb, cb, 0) == -1
         ? cmd_error (nbd_get_errno ()) : 0;
}

/* Sends q's commands on the loop's connection (connected). */
static void
issue (struct aloop *al, struct s4k_store_req *q)
{
  struct nbd_store *u = al->u;
  struct aio_arg a = { al, q };
  int r = 0;
  q->inflight++;
  switch (q->kind) {
  case S4K_REQ_READ:
  case S4K_REQ_WRITE:
    for (unsigned i = 0; i < q->n && r == 0; i++)
      r = up_send_range (u, aio_send, &a, q->kind == S4K_REQ_READ
                                          ? CMD_READ : CMD_WRITE,
                         q->io[i].buf, q->io[i].len, q->io[i].off, q->fua,
                         false);
    break;
  case S4K_REQ_ZERO:
  case S4K_REQ_TRIM:
    r = up_send_range (u, aio_send, &a, CMD_ZERO, NULL, q->io[0].len,
                       q->io[0].off, q->fua,
                       q->kind == S4K_REQ_TRIM || q->may_trim);
    break;
  case S4K_REQ_FLUSH:
    r = send_flush (al, q);
    break;
  case S4K_REQ_EXTENTS:
    r = send_status (al, q);
    break;
  }
  note_error (q, r);
  cmd_end (q);
}

/* ---- the connection: connect, poll, die -------------------------------- */

static void poll_done (struct s4k_completion *c, int res);

static void
arm (struct aloop *al, struct apoll *p, unsigned events)
{
  struct io_uring_sqe *sqe = s4k_ring_sqe (al->loop->ring);
  io_uring_prep_poll_add (sqe, nbd_aio_get_fd (al->h), events);
  io_uring_sqe_set_data (sqe, &p->c);
  p->c.fn = poll_done;
  p->gen = al->gen;
  p->busy = true;
}

/* Polls what libnbd waits for.  A poll of a closed connection still
 * pending (being cancelled) is armed again once it ended. */
static void
rearm (struct aloop *al)
{
  unsigned dir = nbd_aio_get_direction (al->h);
  if ((dir & LIBNBD_AIO_DIRECTION_READ) && !al->rd.busy)
    arm (al, &al->rd, POLLIN);
  if ((dir & LIBNBD_AIO_DIRECTION_WRITE) && !al->wr.busy)
    arm (al, &al->wr, POLLOUT);
}

/* Fails the requests waiting for the connection. */
static void
fail_waiting (struct aloop *al)
{
  struct s4k_completion *c = al->waiting;
  al->waiting = NULL;
  al->waiting_tail = &al->waiting;
  while (c) {
    struct s4k_completion *next = c->next;
    struct s4k_store_req *q = s4k_container_of (c, struct s4k_store_piece,
                                                c)->req;
    q->inflight++;
    note_error (q, -EIO);
    cmd_end (q);
    c = next;
  }
}

/* Closes the loop's connection (dead, or not the export it was). */
static void
teardown (struct aloop *al)
{
  struct apoll *polls[] = { &al->rd, &al->wr };
  for (int i = 0; i < 2; i++)
    if (polls[i]->busy && polls[i]->gen == al->gen) {
      struct io_uring_sqe *sqe = s4k_ring_sqe (al->loop->ring);
      io_uring_prep_poll_remove (sqe, (__u64) (uintptr_t) &polls[i]->c);
      io_uring_sqe_set_data (sqe, NULL);
    }
  mark_lost (al->u, &al->mark);
  nbd_close (al->h);
  al->h = NULL;
  al->gen++;
  al->connecting = false;
  fail_waiting (al);
}

/* Connected: the waiting requests go out. */
static void
connected (struct aloop *al)
{
  al->connecting = false;
  if (!up_export_ok (al->u, al->h)) {
    teardown (al);
    return;
  }
  if (al->connected_before)
    atomic_fetch_add (&al->u->reconnects, 1);
  al->connected_before = true;
  struct s4k_completion *c = al->waiting;
  al->waiting = NULL;
  al->waiting_tail = &al->waiting;
  while (c) {
    struct s4k_completion *next = c->next;
    issue (al, s4k_container_of (c, struct s4k_store_piece, c)->req);
    c = next;
  }
}

/* The timer fires at *when (ns). */
static void
arm_timer (struct aloop *al, uint64_t when)
{
  al->due.tv_sec = when / 1000000000u;
  al->due.tv_nsec = when % 1000000000u;
  al->timer_armed = true;
  s4k_loop_timeout (al->loop, &al->timer, &al->due);
}

/* Whether the connection now waits on the upstream: the timer runs from
 * when it began to. */
static void
watch (struct aloop *al)
{
  const uint64_t t = up_limit (al->u);
  bool busy = al->h && (al->connecting || nbd_aio_in_flight (al->h) > 0);
  if (busy && !al->busy)
    al->heard = s4k_now_ns ();
  al->busy = busy;
  if (busy && t && !al->timer_armed)
    arm_timer (al, al->heard + t);
  /* Without a timer until the stop: the stop arms it. */
  if (!t && !al->stop_armed) {
    struct io_uring_sqe *sqe = s4k_ring_sqe (al->loop->ring);
    io_uring_prep_poll_add (sqe, al->u->stop_fd, POLLIN);
    io_uring_sqe_set_data (sqe, &al->stop_c);
    al->stop_armed = al->stop_pending = true;
  }
}

/* The front end stops (stop_fd): a wait gets up_stop_limit from now. */
static void
stop_woke (struct s4k_completion *c, int res)
{
  struct aloop *al = s4k_container_of (c, struct aloop, stop_c);
  (void) res;
  al->stop_pending = false;
  if (al->gone)
    return;                     /* cancelled as the loop let go */
  if (al->busy)
    al->heard = s4k_now_ns ();
  watch (al);
}

static void
timer_done (struct s4k_completion *c, int res)
{
  struct aloop *al = s4k_container_of (c, struct aloop, timer);
  (void) res;
  al->timer_armed = false;
  const uint64_t t = up_limit (al->u);
  if (!al->busy)
    return;
  if (s4k_now_ns () - al->heard < t) {
    arm_timer (al, al->heard + t);
    return;
  }
  up_timed_out (al->u);
  /* Closing it would only free the commands in flight: cut the socket,
   * so that libnbd fails them (EIO) as for an upstream that died.  A
   * connection still connecting has none. */
  if (!al->connecting) {
    shutdown (nbd_aio_get_fd (al->h), SHUT_RDWR);
    nbd_aio_notify_read (al->h);
  }
  if (al->h && !nbd_aio_is_dead (al->h))
    teardown (al);
  after_io (al);
}

/* After any call into the connection: notices that it connected or died,
 * and polls for what it waits for next. */
static void
after_io (struct aloop *al)
{
  while (al->h) {
    if (nbd_aio_is_dead (al->h) || nbd_aio_is_closed (al->h))
      teardown (al);
    else if (al->connecting && nbd_aio_is_ready (al->h))
      connected (al);
    else {
      rearm (al);
      break;
    }
  }
  watch (al);
}

static void
poll_done (struct s4k_completion *c, int res)
{
  struct apoll *p = s4k_container_of (c, struct apoll, c);
  struct aloop *al = p->al;
  (void) res;                   /* errors and hang-ups: libnbd sees them */
  p->busy = false;
  if (al->h && p->gen == al->gen) {
    al->heard = s4k_now_ns ();  /* the socket said something */
    unsigned dir = nbd_aio_get_direction (al->h);
    if (p == &al->rd && (dir & LIBNBD_AIO_DIRECTION_READ))
      nbd_aio_notify_read (al->h);
    else if (p == &al->wr && (dir & LIBNBD_AIO_DIRECTION_WRITE))
      nbd_aio_notify_write (al->h);
  }
  after_io (al);
}

/* Starts connecting; -EIO if that fails at once. */
static int
connect_begin (struct aloop *al)
{
  struct nbd_handle *h = nbd_create ();
  if (!h)
    return -EIO;
  if ((al->u->can_extents &&
       nbd_add_meta_context (h, LIBNBD_CONTEXT_BASE_ALLOCATION) == -1) ||
      nbd_set_uri_allow_local_file (h, true) == -1 ||   /* as store_nbd.c */
      nbd_aio_connect_uri (h, al->u->uri) == -1) {
    nbd_close (h);
    return -EIO;
  }
  al->h = h;
  al->connecting = true;
  return 0;
}

/* ---- requests ----------------------------------------------------------- */

static void
req_end (struct s4k_completion *c, int res)
{
  (void) res;
  struct s4k_store_req *q = s4k_container_of (c, struct s4k_store_piece,
                                              c)->req;
  q->done (q, q->err);
}

/* A client's flush ended.  Its connection closed since it was sent (the
 * teardown runs before this posted step): what it lost is counted, not
 * the flush's error. */
static void
flush_end (struct s4k_completion *c, int res)
{
  struct s4k_store_req *q = s4k_container_of (c, struct s4k_store_piece,
                                              c)->req;
  if (q->err == -EIO && q->cover_gen && loop_of (q)->gen != q->cover_gen)
    q->err = 0;
  req_end (c, res);
}

/* One more command of q on its loop's connection (a FUA write's flush,
 * the rest of a block status); EIO if the connection is gone. */
static void
send_more (struct s4k_store_req *q,
           int (*send) (struct aloop *, struct s4k_store_req *))
{
  struct aloop *al = loop_of (q);
  if (!al->h || al->connecting) {
    q->done (q, -EIO);
    return;
  }
  q->inflight++;
  note_error (q, send (al, q));
  cmd_end (q);
  after_io (al);
}

/* The commands ended: for FUA on an upstream without it, a flush of the
 * same connection follows (on a connection since closed, the write may
 * be lost: EIO). */
static void
after_cmds (struct s4k_completion *c, int res)
{
  struct s4k_store_req *q = s4k_container_of (c, struct s4k_store_piece,
                                              c)->req;
  struct nbd_store *u = (struct nbd_store *) q->store;
  c->fn = req_end;
  if (q->err || !q->fua || u->can_fua || !u->can_flush) {
    req_end (c, res);
    return;
  }
  send_more (q, send_flush);
}

/* A block status ended: another for the rest of the range, or the
 * runs' end (as nbd_store_extents). */
static void
after_status (struct s4k_completion *c, int res)
{
  struct s4k_store_req *q = s4k_container_of (c, struct s4k_store_piece,
                                              c)->req;
  struct s4k_extent_rounder *w = &q->round;
  const uint64_t end = q->io[0].off + q->io[0].len;
  (void) res;
  if (!q->err && w->pos <= q->round_from)
    q->err = -EIO;              /* the upstream answered nothing */
  if (q->err || w->stop || w->pos >= end) {
    q->done (q, q->err ? q->err : s4k_extent_round_end (w, end));
    return;
  }
  send_more (q, send_status);
}

/* Sends q on the loop's connection, connecting it first if need be;
 * fails it at once while the upstream is down. */
static int
start (struct aloop *al, struct s4k_store_req *q)
{
  if (up_down (al->u) || (!al->h && connect_begin (al) < 0))
    return -EIO;
  if (al->connecting) {
    q->piece[0].c.next = NULL;
    *al->waiting_tail = &q->piece[0].c;
    al->waiting_tail = &q->piece[0].c.next;
  }
  else
    issue (al, q);
  after_io (al);
  return 1;
}

/* ---- flush without multi-conn: the other loops flush their own ---------- */

struct xflush {
  struct s4k_completion c;       /* posted to the flushing loop at the end */
  struct s4k_store_req *q;       /* NULL: a synchronous flush waits */
  pthread_mutex_t lock;          /* for it: done, signalled by cond */
  pthread_cond_t cond;
  bool done;
  _Atomic unsigned pending;      /* loops still flushing, + 1 while asking */
  _Atomic int err;
  struct xsub {
    struct s4k_completion c;     /* posted to the loop asked once its
                                    flush ended */
    struct xsub *next;           /* in that loop's inbox */
    struct xflush *x;
    struct aloop *al;
    struct flush_cover cover;
    unsigned gen;                /* the connection it went on */
    int err;
  } sub[MAX_LOOPS];
};

static void
xflush_put (struct xflush *x, int r)
{
  int zero = 0;
  if (r)
    atomic_compare_exchange_strong (&x->err, &zero, r);
  if (atomic_fetch_sub (&x->pending, 1) != 1)
    return;
  if (x->q) {
    x->q->loop->post (x->q->loop, &x->c);
    return;
  }
  pthread_mutex_lock (&x->lock);
  x->done = true;
  pthread_cond_signal (&x->cond);
  pthread_mutex_unlock (&x->lock);
}

/* On the flushing loop: every loop asked has answered. */
static void
xflush_end (struct s4k_completion *c, int res)
{
  (void) res;
  struct xflush *x = s4k_container_of (c, struct xflush, c);
  struct s4k_store_req *q = x->q;
  note_error (q, atomic_load (&x->err));
  free (x);
  cmd_end (q);
}

static int
sub_done (void *opaque, int *error)
{
  struct xsub *s = opaque;
  s->err = *error ? cmd_error (*error) : 0;
  if (!*error)
    mark_flushed (s->al->u, &s->al->mark, s->cover);
  return 1;
}
/* On the loop asked, after its flush ended (and after the teardown of
 * a connection that died meanwhile: its loss is counted, not an error
 * of the flush). */
static void
sub_end (struct s4k_completion *c, int res)
{
  (void) res;
  struct xsub *s = s4k_container_of (c, struct xsub, c);
  xflush_put (s->x, s->al->gen != s->gen ? 0 : s->err);
}
static void
sub_free (void *opaque)
{
  struct xsub *s = opaque;
  struct aloop *al = s->al;
  s->c.fn = sub_end;
  s->c.next = al->drained;
  al->drained = &s->c;
  if (!al->gone && !al->drain_posted) {
    al->drain_posted = true;
    al->loop->post (al->loop, &al->drain_c);
  }
}
static void
drain_run (struct s4k_completion *c, int res)
{
  (void) res;
  struct aloop *al = s4k_container_of (c, struct aloop, drain_c);
  struct s4k_completion *d = al->drained;
  al->drained = NULL;
  al->drain_posted = false;
  s4k_loop_run_posted (d);
}

/* On the loop asked: flushes its connection if it is still dirty (a
 * dirty connection is connected: one that died was marked clean). */
static void
sub_run (struct xsub *s)
{
  struct aloop *al = s->al;
  if (!mark_dirty (al->u, &al->mark)) {
    xflush_put (s->x, 0);
    return;
  }
  if (!al->h || al->connecting || up_down (al->u)) {
    xflush_put (s->x, -EIO);
    return;
  }
  s->cover = mark_cover (al->u, &al->mark);
  s->gen = al->gen;
  s->err = -EIO;                /* unless it is answered */
  nbd_completion_callback cb = { .callback = sub_done, .user_data = s,
                                 .free = sub_free };
  nbd_aio_flush (al->h, cb, 0);
  after_io (al);
}

/* On the loop asked: its inbox. */
static void
ask_run (struct s4k_completion *c, int res)
{
  (void) res;
  struct aloop *al = s4k_container_of (c, struct aloop, ask_c);
  pthread_mutex_lock (&al->ask_lock);
  struct xsub *s = al->gone ? NULL : al->asks;
  if (!al->gone) {
    al->asks = NULL;
    al->ask_posted = false;
  }
  pthread_mutex_unlock (&al->ask_lock);
  while (s) {
    struct xsub *next = s->next;
    sub_run (s);
    s = next;
  }
}

/* Asks m's loop (not the caller's) to flush its connection for s: false
 * if m was let go (its connection flushed, or its loss counted). */
static bool
ask (struct aloop *m, struct xsub *s)
{
  bool asked = false;
  pthread_mutex_lock (&m->ask_lock);
  if (!atomic_load (&m->released)) {
    s->next = m->asks;
    m->asks = s;
    /* Under the lock: a loop not gone is still there. */
    if (!m->gone && !m->ask_posted) {
      m->ask_posted = true;
      m->loop->post (m->loop, &m->ask_c);
    }
    asked = true;
  }
  pthread_mutex_unlock (&m->ask_lock);
  return asked;
}

/* A client's flush on al's loop: 1 if in flight, else its result. */
static int
flush_begin (struct aloop *al, struct s4k_store_req *q)
{
  struct nbd_store *u = al->u;
  if (!u->can_flush)
    return 0;                   /* the upstream writes through */
  if (u->multi_conn)
    return up_any_dirty (u) ? start (al, q) : 0;

  /* Without multi-conn.  The pool's connections: in place (blocking, as
   * rare: they carry writes only when a front end on the synchronous
   * path, --scsi's LUN threads, serves the export too, or beyond
   * MAX_LOOPS). */
  for (unsigned i = 0; i < u->n; i++) {
    struct conn *c = &u->conns[i];
    if (!mark_dirty (u, &c->mark))
      continue;
    pthread_mutex_lock (&c->lock);
    note_error (q, up_flush_dirty (u, c));
    pthread_mutex_unlock (&c->lock);
  }
  /* The other loops'. */
  struct xflush *x = NULL;
  unsigned n = atomic_load_explicit (&u->nloops, memory_order_acquire);
  for (unsigned i = 0; i < n; i++) {
    struct aloop *m = u->loops[i];
    if (m == al || atomic_load (&m->released) || !mark_dirty (u, &m->mark))
      continue;
    if (!x) {
      if (!(x = calloc (1, sizeof *x)))
        return -ENOMEM;
      x->c.fn = xflush_end;
      x->q = q;
      atomic_init (&x->pending, 1);
      q->inflight++;            /* until xflush_end */
    }
    struct xsub *s = &x->sub[i];
    *s = (struct xsub) { .x = x, .al = m };
    atomic_fetch_add (&x->pending, 1);
    if (!ask (m, s))
      xflush_put (x, 0);
  }
  /* Its own. */
  int r = 1;
  if (mark_dirty (u, &al->mark) && al->h && !al->connecting) {
    r = start (al, q);
    if (r < 0 && x) {           /* the upstream is down: x ends q */
      note_error (q, r);
      r = 1;
    }
  }
  else if (!x)
    r = q->err;
  if (x)
    xflush_put (x, 0);
  return r;
}

/* A synchronous flush on the loop's own thread (its connection is the
 * caller's to drive): sent and waited for here, as up_loop_gone does,
 * since the loop cannot run its inbox while its thread waits.  A
 * connection that fails or stays silent is closed as one that died
 * (its loss counted): 0, as for an asked flush. */
static int
own_flush (struct aloop *al)
{
  struct nbd_store *u = al->u;
  if (!mark_dirty (u, &al->mark))
    return 0;
  if (!al->h || al->connecting || up_down (u))
    return -EIO;
  struct flush_cover c = mark_cover (u, &al->mark);
  int64_t cookie = nbd_aio_flush (al->h, NBD_NULL_COMPLETION, 0);
  int r = cookie == -1 ? -EIO : up_wait (u, al->h, cookie, up_limit (u));
  if (r == 0)
    mark_flushed (u, &al->mark, c);
  else {
    if (r == -ETIMEDOUT)
      up_timed_out (u);
    /* Cut, as timer_done does: its commands in flight fail (EIO). */
    shutdown (nbd_aio_get_fd (al->h), SHUT_RDWR);
    nbd_aio_notify_read (al->h);
    if (!nbd_aio_is_dead (al->h))
      teardown (al);
  }
  after_io (al);
  return 0;
}

int
up_flush_loops (struct nbd_store *u)
{
  struct xflush *x = NULL;
  struct aloop *own[MAX_LOOPS];
  unsigned nown = 0;
  int r = 0;
  const pthread_t self = pthread_self ();
  unsigned n = atomic_load_explicit (&u->nloops, memory_order_acquire);
  for (unsigned i = 0; i < n; i++) {
    struct aloop *m = u->loops[i];
    if (atomic_load (&m->released) || !mark_dirty (u, &m->mark))
      continue;
    if (pthread_equal (m->thread, self)) {
      own[nown++] = m;
      continue;
    }
    if (!x) {
      if (!(x = calloc (1, sizeof *x)))
        return -ENOMEM;
      pthread_mutex_init (&x->lock, NULL);
      pthread_cond_init (&x->cond, NULL);
      atomic_init (&x->pending, 1);
    }
    struct xsub *s = &x->sub[i];
    *s = (struct xsub) { .x = x, .al = m };
    atomic_fetch_add (&x->pending, 1);
    if (!ask (m, s))
      xflush_put (x, 0);
  }
  /* The loops asked flush meanwhile. */
  for (unsigned i = 0; i < nown; i++) {
    int e = own_flush (own[i]);
    if (e && !r)
      r = e;
  }
  if (x) {
    xflush_put (x, 0);
    pthread_mutex_lock (&x->lock);
    while (!x->done)
      pthread_cond_wait (&x->cond, &x->lock);
    pthread_mutex_unlock (&x->lock);
    int e = atomic_load (&x->err);
    if (e && !r)
      r = e;
    pthread_cond_destroy (&x->cond);
    pthread_mutex_destroy (&x->lock);
    free (x);
  }
  return r;
}

/* The synchronous calls, for a loop beyond MAX_LOOPS. */
static int
sync_call (struct s4k_store *s, const struct s4k_store_req *q)
{
  switch (q->kind) {
  case S4K_REQ_EXTENTS:
    return s->ops->extents (s, q->io[0].len, q->io[0].off, q->extent_fn,
                            q->extent_opaque);
  case S4K_REQ_READ:
    return s->ops->read (s, q->io, q->n);
  case S4K_REQ_WRITE:
    return s->ops->write (s, q->io, q->n, q->fua);
  case S4K_REQ_ZERO:
    return s->ops->zero (s, q->io[0].len, q->io[0].off, q->may_trim, q->fua);
  case S4K_REQ_TRIM:
    return s->ops->trim (s, q->io[0].len, q->io[0].off, q->fua);
  default:
    return s->ops->flush (s);
  }
}

int
up_submit (struct s4k_store *s, struct s4k_store_req *q)
{
  struct nbd_store *u = (struct nbd_store *) s;
  struct aloop *al = loop_get (u, q->loop);
  if (!al)
    return sync_call (s, q);
  q->store = s;
  q->err = 0;
  q->cover_gen = 0;             /* no flush sent yet */
  q->inflight = 0;
  q->piece[0] = (struct s4k_store_piece) {
    .c.fn = q->kind == S4K_REQ_FLUSH ? flush_end
            : q->kind == S4K_REQ_EXTENTS ? after_status : after_cmds,
    .req = q };
  if (q->kind == S4K_REQ_FLUSH)
    return flush_begin (al, q);
  if (q->kind == S4K_REQ_EXTENTS) {
    if (!u->can_extents)        /* all data, as nbd_store_extents says */
      return q->extent_fn (q->extent_opaque, q->io[0].off, q->io[0].len,
                           false) < 0 ? -EIO : 0;
    s4k_extent_round_init (&q->round, &u->g, q->io[0].off, q->extent_fn,
                           q->extent_opaque);
  }
  return start (al, q);
}

void
up_aio_lost (struct nbd_store *u)
{
  unsigned n = atomic_load_explicit (&u->nloops, memory_order_acquire);
  for (unsigned i = 0; i < n; i++)
    mark_lost (u, &u->loops[i]->mark);
}

/* The loop stops: its thread, none of its own requests in flight (so
 * no request waits for its connection).  What the top calls letting go;
 * synchronous (nbd_poll, not the ring: the loop is leaving), bounded by
 * upstream-timeout=. */
void
up_loop_gone (struct s4k_store *s, struct s4k_loop *loop)
{
  struct nbd_store *u = (struct nbd_store *) s;
  struct aloop *al = NULL;
  unsigned n = atomic_load_explicit (&u->nloops, memory_order_acquire);
  for (unsigned i = 0; i < n && !al; i++)
    if (u->loops[i]->loop == loop && !atomic_load (&u->loops[i]->released))
      al = u->loops[i];
  if (!al)
    return;                     /* it never submitted a request */
  pthread_mutex_lock (&al->ask_lock);
  al->gone = true;              /* asks now wait in the inbox */
  pthread_mutex_unlock (&al->ask_lock);

  /* The flushes it was asked for and sent end, then its own writes are
   * flushed: with the asks still in the inbox answered after, every
   * write it completed is covered, or its loss counted. */
  bool ok = true, said = false;
  if (al->h && !al->connecting) {
    /* upstream-timeout=0 lets requests wait forever, but a stop must
     * end: a silent upstream gets STOP_WAIT. */
    const uint64_t t = up_stop_limit (u);
    int w = up_wait (u, al->h, 0, t);
    if (w == 0 && u->can_flush && mark_dirty (u, &al->mark) &&
        !up_down (u)) {
      struct flush_cover c = mark_cover (u, &al->mark);
      int64_t cookie = nbd_aio_flush (al->h, NBD_NULL_COMPLETION, 0);
      w = cookie == -1 ? -EIO : up_wait (u, al->h, cookie, t);
      if (w == 0)
        mark_flushed (u, &al->mark, c);
    }
    const bool dirty = u->can_flush && mark_dirty (u, &al->mark);
    if (w && dirty) {
      char why[96];
      if (w == -ETIMEDOUT)
        snprintf (why, sizeof why, "no answer in %gs%s", t / 1e9,
                  up_stop_why (u));
      else
        snprintf (why, sizeof why, "the connection failed");
      fprintf (stderr, "sect4k: upstream=%s: a stopping loop's final flush "
               "did not complete (%s): its writes since the last flush "
               "may be lost\n", u->uri, why);
    }
    /* The loops that stop after it need not wait as long again. */
    if (w == -ETIMEDOUT) {
      if (dirty || !u->timeout)
        up_set_down (u);
      else
        up_timed_out (u);
    }
    ok = w == 0 && !dirty;
    said = w && dirty;
  }
  if (al->stop_pending) {
    struct io_uring_sqe *sqe = s4k_ring_sqe (al->loop->ring);
    io_uring_prep_poll_remove (sqe, (__u64) (uintptr_t) &al->stop_c);
    io_uring_sqe_set_data (sqe, NULL);
  }
  if (al->h) {
    struct apoll *polls[] = { &al->rd, &al->wr };
    for (int i = 0; i < 2; i++)
      if (polls[i]->busy && polls[i]->gen == al->gen) {
        struct io_uring_sqe *sqe = s4k_ring_sqe (al->loop->ring);
        io_uring_prep_poll_remove (sqe, (__u64) (uintptr_t) &polls[i]->c);
        io_uring_sqe_set_data (sqe, NULL);
      }
    if (ok) {
      s4k_loop_run_posted (al->drained);   /* their own results */
      al->drained = NULL;
      uint64_t deadline = 0;
      up_close_handle (al->h, &deadline);
    }
    else {
      mark_lost (u, &al->mark);  /* as one that died */
      nbd_close (al->h);
    }
    al->h = NULL;
    al->gen++;                  /* a flush that died with it: its loss */
    al->connecting = al->busy = false;
  }
  if (said)
    up_stop_said (u);           /* its line said what it lost */
  /* Ended flushes whose drain_c the loop did not run. */
  s4k_loop_run_posted (al->drained);
  al->drained = NULL;

  pthread_mutex_lock (&al->ask_lock);
  struct xsub *x = al->asks;
  al->asks = NULL;
  atomic_store (&al->released, true);
  pthread_mutex_unlock (&al->ask_lock);
  while (x) {
    struct xsub *next = x->next;
    xflush_put (x->x, 0);
    x = next;
  }
}

/* At the store's close, the loops gone. */
void
up_aio_close (struct nbd_store *u, uint64_t *deadline)
{
  unsigned n = atomic_load (&u->nloops);
  for (unsigned i = 0; i < n; i++) {
    struct aloop *al = u->loops[i];
    if (al->h)
      up_close_handle (al->h, deadline);
    pthread_mutex_destroy (&al->ask_lock);
    free (al);
  }
}
