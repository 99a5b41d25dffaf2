/* SPDX-License-Identifier: BSD-3-Clause */
/* Event loops: a few threads, each with its own io_uring, each serving
 * many connections.  Accept, receive and send are ring operations, and so
 * is the file store's I/O (the engine queues it on the same ring); the
 * memory store runs inline (conn_process).  No thread is tied to a
 * request. */
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <liburing.h>

#include "server.h"
#include "tls.h"

#define RING_ENTRIES 256
#define TICK_MS 100                 /* timeout checks */
/* Shutdown: connections take requests (answered with ESHUTDOWN) until
 * QUIET_MS pass without traffic, or until what the client had sent
 * before the signal is read and QUIET_MS have passed since (a client
 * that keeps sending is told ESHUTDOWN and must disconnect: it is not
 * waited for), or STOP_ANSWER_MS after the signal; then, their replies
 * sent, the server half-closes and reads what the client still sends
 * until it closes, is quiet as long, or DRAIN_MS pass, so that a client
 * mid-send reads every reply instead of getting EPIPE. */
#define QUIET_MS 300
#define STOP_ANSWER_MS 2000
#define DRAIN_MS 500
/* Output buffers above this are freed once a tick passes without a
 * send: not after each send, as faulting in a fresh 32 MiB buffer for
 * every large read costs more than the read. */
#define BIG_BUFFER (4u << 20)

/* Every ring operation's user data is the s4k_completion it embeds (the
 * engine's convention, so its store I/O shares the ring);
 * s4k_container_of finds the structure around it. */
struct worker;

/* A connection with its socket. */
struct sconn {
  struct conn c;
  struct worker *w;
  int fd;
  struct s4k_completion recv_op, send_op;
  bool recv_busy, send_busy;
  bool closing;                     /* shut down; freed once ops finish */
  bool queued;                      /* in the worker's run queue */
  bool sent_this_tick;
  bool draining;                    /* half-closed: input is dropped */
  uint64_t drain_deadline;          /* and closed by then (ms) */
  uint64_t stop_backlog;            /* shutdown: bytes it had sent before
                                       the signal, still to be read */
  struct obuf sending;              /* handed to the kernel */
  struct orefs srefs;               /* and its bytes sent by reference */
  uint64_t sent;
  size_t sref;                      /* out_iov's place in srefs */
  struct iovec *iov;                /* CONN_IOV_MAX, for sendmsg */
  struct msghdr msg;
  struct tls *tls;                  /* after STARTTLS (NULL: in clear) */
  uint8_t *raw;                     /* TLS: what the socket received */
  bool pumping;                     /* in tls_pump */
  uint64_t deadline;                /* handshake must end by then (ms) */
  uint64_t active;                  /* last byte received or sent (ms) */
  char name[64];
  struct sconn *prev, *next;
  struct sconn *next_run;
};

struct worker {
  struct server *s;
  unsigned id;
  pthread_t thread;
  struct io_uring ring;
  struct s4k_loop loop;             /* the ring as the engine sees it */
  /* Completions posted to this loop (from any thread), newest first. */
  _Atomic (struct s4k_completion *) posted;
  atomic_bool stop_requested;       /* set by the main thread */
  int wake_fd;                      /* eventfd: posts and stop requests */
  uint64_t wake_value;
  struct s4k_completion wake_op;
  /* One accept in flight per listening socket. */
  struct acceptor {
    struct s4k_completion op;
    struct worker *w;
    unsigned i;                     /* s->listen_fd[i] */
    bool busy, retry;
  } acc[SERVER_MAX_LISTEN];
  unsigned accepts_busy;
  bool stopping;
  uint64_t stop_deadline, next_tick;
  uint64_t answer_deadline;         /* requests get ESHUTDOWN until then */
  uint64_t answer_floor;            /* and at least until then */
  struct sconn *conns;
  /* Connections that yielded (conn.h, CONN_TURN_BYTES), run next turn
   * in order: the loop does not wait for events while there are any. */
  struct sconn *runq, **runq_tail;
  unsigned runq_len;
  struct conn_stats stats;
  uint64_t accepted, refused;
  int init_error;                   /* set before the thread signals ready */
};

/* The worker whose thread this is (NULL on other threads). */
static _Thread_local struct worker *current_worker;

static pthread_mutex_t ready_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ready_cond = PTHREAD_COND_INITIALIZER;
static unsigned ready_count;

static uint64_t
now_ms (void)
{
  struct timespec ts;
  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (uint64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static struct io_uring_sqe *
get_sqe (struct worker *w)
{
  return s4k_ring_sqe (&w->ring);
}

static void
arm_accept (struct acceptor *a)
{
  struct io_uring_sqe *sqe = get_sqe (a->w);
  io_uring_prep_accept (sqe, a->w->s->listen_fd[a->i], NULL, NULL,
                        SOCK_CLOEXEC);
  io_uring_sqe_set_data (sqe, &a->op);
  a->busy = true;
  a->w->accepts_busy++;
}

static void
arm_wake (struct worker *w)
{
  struct io_uring_sqe *sqe = get_sqe (w);
  io_uring_prep_read (sqe, w->wake_fd, &w->wake_value, sizeof w->wake_value,
                      0);
  io_uring_sqe_set_data (sqe, &w->wake_op);
}

/* s4k_loop.post: any thread may call it.  A lock-free stack, so a
 * thread releasing an engine lock never waits for this loop; the eventfd
 * wakes the ring only when the caller is not the loop itself (which
 * drains the stack before waiting). */
static void
post (struct s4k_loop *loop, struct s4k_completion *c)
{
  struct worker *w = s4k_container_of (loop, struct worker, loop);
  c->next = atomic_load_explicit (&w->posted, memory_order_relaxed);
  while (!atomic_compare_exchange_weak_explicit (&w->posted, &c->next, c,
                                                 memory_order_release,
                                                 memory_order_relaxed))
    ;
  uint64_t one = 1;
  if (current_worker != w && write (w->wake_fd, &one, sizeof one) != sizeof one)
    log_msg ("eventfd write: %s", s4k_strerror (errno));
}

/* Runs what was posted, oldest first, until nothing is left (a
 * completion may post more). */
static void
run_posted (struct worker *w)
{
  struct s4k_completion *c;
  while ((c = atomic_exchange_explicit (&w->posted, NULL,
                                        memory_order_acquire)))
    s4k_loop_run_posted (c);
}

static void
cancel_op (struct worker *w, struct s4k_completion *op)
{
  struct io_uring_sqe *sqe = get_sqe (w);
  io_uring_prep_cancel (sqe, op, 0);
  io_uring_sqe_set_data (sqe, NULL);
}

static void
add_stats (struct conn_stats *to, const struct conn_stats *from)
{
  for (int i = 0; i < NBD_CMD_COUNT; i++)
    to->requests[i] += from->requests[i];
#define ADD(name) to->name += from->name;
  CONN_COUNTERS (ADD)
#undef ADD
}

/* Starts closing: the shutdown makes pending operations complete, and
 * the connection starts no new request. */
static void
start_close (struct sconn *sc)
{
  if (!sc->closing) {
    sc->closing = true;
    conn_close (&sc->c);
    shutdown (sc->fd, SHUT_RDWR);
    /* Replies held for the timing model go nowhere now: no need to wait
     * for their modelled completion (up to an hour) to free it. */
    for (unsigned i = 0; i < CONN_MAX_INFLIGHT; i++)
      if (sc->c.slots[i].timing)
        cancel_op (sc->w, &sc->c.slots[i].timer);
  }
}

/* Ends sc gracefully: no more input; what it has to send goes out, with
 * TLS's close_notify last (kick), then it closes. */
static void
finish (struct sconn *sc)
{
  sc->c.state = ST_DONE;
}

/* A connection with requests in flight waits for all of them (the engine
 * uses their slots), even when the client is gone. */
static void
free_if_idle (struct worker *w, struct sconn *sc)
{
  if (!sc->closing || sc->recv_busy || sc->send_busy || sc->c.inflight ||
      sc->queued)
    return;
  if (w->s->cfg.verbose)
    log_msg ("%s: closed", sc->name);
  close (sc->fd);
  add_stats (&w->stats, &sc->c.stats);
  conn_free (&sc->c);
  tls_free (sc->tls);
  free (sc->raw);
  free (sc->sending.p);
  free (sc->srefs.v);
  free (sc->iov);
  if (sc->prev)
    sc->prev->next = sc->next;
  else
    w->conns = sc->next;
  if (sc->next)
    sc->next->prev = sc->prev;
  free (sc);
  atomic_fetch_sub (&w->s->connections, 1);
}

/* Sends what of sc->sending (and the pieces it sends by reference) the
 * kernel has not taken yet: one send, or one sendmsg of at most
 * CONN_IOV_MAX iovecs; a short one is continued from where it stopped
 * (on_send). */
static void
send_rest (struct worker *w, struct sconn *sc)
{
  struct io_uring_sqe *sqe = get_sqe (w);
  if (sc->srefs.n == 0)
    io_uring_prep_send (sqe, sc->fd, sc->sending.p + sc->sent,
                        sc->sending.len - sc->sent, MSG_NOSIGNAL);
  else {
    sc->msg = (struct msghdr) {
      .msg_iov = sc->iov,
      .msg_iovlen = out_iov (&sc->sending, &sc->srefs, sc->sent, &sc->sref,
                             sc->iov, CONN_IOV_MAX),
    };
    io_uring_prep_sendmsg (sqe, sc->fd, &sc->msg, MSG_NOSIGNAL);
  }
  io_uring_sqe_set_data (sqe, &sc->send_op);
  sc->send_busy = true;
}

/* TLS: decrypts what was received into the connection's receive
 * area while it has room (the handshake first). */
static void
tls_pump (struct sconn *sc)
{
  struct conn *c = &sc->c;
  if (sc->pumping)
    return;
  sc->pumping = true;
  while (!sc->closing && !c->hangup && !conn_done (c)) {
    uint8_t *p;
    size_t len;
    conn_recv_area (c, &p, &len);
    ssize_t n = tls_read (sc->tls, p, len);
    if (n < 0) {
      if (tls_peer_closed (sc->tls))
        finish (sc);            /* answered with ours */
      else
        start_close (sc);
      break;
    }
    if (n == 0)
      break;
    conn_received (c, n);
  }
  sc->pumping = false;
}

/* TLS: everything the connection has to send, through the record layer
 * (pieces by reference too: they are copied into records). */
static int
tls_encrypt (struct sconn *sc)
{
  struct conn *c = &sc->c;
  struct iovec iov[64];
  size_t k = 0;
  uint64_t pos = 0, total = conn_out_bytes (c);
  while (pos < total) {
    unsigned n = out_iov (&c->out, &c->refs, pos, &k, iov, 64);
    for (unsigned i = 0; i < n; i++) {
      if (tls_write (sc->tls, iov[i].iov_base, iov[i].iov_len) == -1)
        return -1;
      pos += iov[i].iov_len;
    }
  }
  c->out.len = 0;
  c->refs.n = 0;
  c->refs.bytes = 0;
  return 0;
}

/* The STARTTLS reply has gone out in clear: TLS from here on. */
static int
tls_start (struct sconn *sc)
{
  struct conn *c = &sc->c;
  sc->tls = tls_new (sc->name);
  sc->raw = malloc (CONN_IN_SIZE);
  if (!sc->tls || !sc->raw ||
      tls_feed (sc->tls, c->in + c->in_head, c->in_tail - c->in_head) == -1) {
    log_msg ("%s: TLS: out of memory", sc->name);
    return -1;
  }
  c->in_head = c->in_tail = 0;
  c->starttls = false;
  return 0;
}

/* Starts whatever I/O the connection can do now. */
static void
kick (struct worker *w, struct sconn *sc)
{
  struct conn *c = &sc->c;
  if (c->hangup)
    start_close (sc);
  if (sc->closing) {
    free_if_idle (w, sc);
    return;
  }
  if (c->starttls && !sc->send_busy && conn_out_bytes (c) == 0 &&
      tls_start (sc) == -1)
    start_close (sc);
  if (sc->tls && !sc->closing) {
    tls_pump (sc);
    if (!sc->closing && !sc->send_busy && conn_out_bytes (c) > 0 &&
        tls_encrypt (sc) == -1)
      start_close (sc);
    /* Nothing more to say: close_notify, after the last reply. */
    if (!sc->closing && conn_done (c) && !c->inflight &&
        conn_out_bytes (c) == 0)
      tls_bye (sc->tls);
    if (!sc->closing && !sc->send_busy && tls_output_bytes (sc->tls) > 0) {
      free (sc->sending.p);
      tls_take_output (sc->tls, &sc->sending.p, &sc->sending.len,
                       &sc->sending.cap);
      sc->srefs.n = 0;
      sc->srefs.bytes = 0;
      sc->sent = 0;
      sc->sref = 0;
      sc->sent_this_tick = true;
      send_rest (w, sc);
    }
    if (sc->closing) {
      free_if_idle (w, sc);
      return;
    }
  }
  /* The engine never writes into c->out (only into slot buffers), so it
   * can go to the socket whatever is in flight. */
  if (!sc->tls && !sc->send_busy && conn_out_bytes (c) > 0) {
    if (c->refs.n && !sc->iov &&
        !(sc->iov = malloc (CONN_IOV_MAX * sizeof *sc->iov))) {
      log_msg ("%s: out of memory for a reply", sc->name);
      start_close (sc);
      free_if_idle (w, sc);
      return;
    }
    struct obuf t = sc->sending;
    sc->sending = c->out;
    c->out = t;
    c->out.len = 0;
    struct orefs r = sc->srefs;
    sc->srefs = c->refs;
    c->refs = r;
    c->refs.n = 0;
    c->refs.bytes = 0;
    sc->sent = 0;
    sc->sref = 0;
    sc->sent_this_tick = true;
    send_rest (w, sc);
  }
  if (!sc->recv_busy && !conn_done (c)) {
    uint8_t *p;
    size_t len;
    conn_recv_area (c, &p, &len);
    if (sc->tls) {              /* raw bytes, while there is room */
      p = sc->raw;
      len = len > 0 ? CONN_IN_SIZE : 0;
    }
    if (len > 0) {
      struct io_uring_sqe *sqe = get_sqe (w);
      io_uring_prep_recv (sqe, sc->fd, p, len, 0);
      io_uring_sqe_set_data (sqe, &sc->recv_op);
      sc->recv_busy = true;
    }
  }
  if (conn_done (c) && !c->inflight && !sc->send_busy &&
      conn_out_bytes (c) == 0 && !(sc->tls && tls_output_bytes (sc->tls))) {
    if (!c->stopping || c->hangup)
      start_close (sc);
    else if (!sc->draining) {
      sc->draining = true;
      sc->drain_deadline = now_ms () + DRAIN_MS;
      shutdown (sc->fd, SHUT_WR);
    }
  }
  if (sc->draining && !sc->closing && !sc->recv_busy) {
    struct io_uring_sqe *sqe = get_sqe (w);
    io_uring_prep_recv (sqe, sc->fd, c->in, CONN_IN_SIZE, 0);
    io_uring_sqe_set_data (sqe, &sc->recv_op);
    sc->recv_busy = true;
  }
  if (c->yielded && !sc->closing && !sc->queued) {
    sc->queued = true;
    sc->next_run = NULL;
    *w->runq_tail = sc;
    w->runq_tail = &sc->next_run;
    w->runq_len++;
  }
  if (sc->closing)
    free_if_idle (w, sc);
}

/* New turns for the connections that yielded, oldest first, until
 * about CONN_TURN_BYTES of work is done: the rest wait until the ring
 * has been looked at again, so one large request at a time stands
 * between a new request and its turn. */
static void
run_yielded (struct worker *w)
{
  int64_t work = 0;
  for (unsigned n = w->runq_len; n > 0 && work < CONN_TURN_BYTES; n--) {
    struct sconn *sc = w->runq;
    w->runq = sc->next_run;
    if (!w->runq)
      w->runq_tail = &w->runq;
    w->runq_len--;
    sc->queued = false;
    if (!sc->closing)
      work += conn_turn (&sc->c);
    kick (w, sc);               /* may queue it again, at the end */
  }
}

/* The connection's wake (sched.c): one of its requests in flight finished. */
static void
conn_wake (struct conn *c)
{
  struct sconn *sc = s4k_container_of (c, struct sconn, c);
  kick (sc->w, sc);
}

static void
on_recv (struct s4k_completion *op, int res)
{
  struct sconn *sc = s4k_container_of (op, struct sconn, recv_op);
  struct worker *w = sc->w;
  sc->recv_busy = false;
  if (res > 0) {
    sc->active = now_ms ();
    sc->stop_backlog -= sc->stop_backlog < (uint64_t) res
                        ? sc->stop_backlog : (uint64_t) res;
  }
  s4k_fault_epoch (sc->c.epoch);      /* a power cut refuses its requests */
  if (sc->draining) {
    if (res <= 0)
      start_close (sc);
  }
  else if (res > 0 && !sc->closing && sc->tls) {
    if (tls_feed (sc->tls, sc->raw, res) == -1) {
      log_msg ("%s: TLS: out of memory", sc->name);
      start_close (sc);
    }
  }
  else if (res > 0 && !sc->closing)
    conn_received (&sc->c, res);
  else if (res == -ECANCELED && sc->c.stopping)
    conn_process (&sc->c);      /* ends it: no partial request is served */
  else if (!sc->closing) {
    if (res < 0 && res != -ECONNRESET)
      log_msg ("%s: receive: %s", sc->name, s4k_strerror (-res));
    else if (w->s->cfg.verbose)
      log_msg ("%s: the client closed the connection", sc->name);
    /* A TLS client may still read: it gets close_notify. */
    if (res == 0 && sc->tls)
      finish (sc);
    else
      start_close (sc);
  }
  kick (w, sc);
}

static void
on_send (struct s4k_completion *op, int res)
{
  struct sconn *sc = s4k_container_of (op, struct sconn, send_op);
  struct worker *w = sc->w;
  sc->send_busy = false;
  s4k_fault_epoch (sc->c.epoch);
  if (res < 0) {
    if (!sc->closing && res != -EPIPE && res != -ECONNRESET)
      log_msg ("%s: send: %s", sc->name, s4k_strerror (-res));
    start_close (sc);
    kick (w, sc);
    return;
  }
  sc->sent += res;
  sc->active = now_ms ();
  if (sc->sent < sc->sending.len + sc->srefs.bytes && !sc->closing) {
    send_rest (w, sc);
    return;
  }
  sc->sending.len = 0;
  sc->srefs.n = 0;
  sc->srefs.bytes = 0;
  conn_process (&sc->c);        /* output had room again */
  kick (w, sc);
}

static void
on_accept (struct s4k_completion *op, int res)
{
  struct acceptor *a = s4k_container_of (op, struct acceptor, op);
  struct worker *w = a->w;
  struct server *s = w->s;
  a->busy = false;
  w->accepts_busy--;
  if (res < 0) {
    if (res != -ECANCELED && !w->stopping) {
      log_msg ("accept: %s", s4k_strerror (-res));
      a->retry = true;          /* after a tick, not in a tight loop */
    }
    return;
  }
  if (!w->stopping)
    arm_accept (a);
  int fd = res;
  if (w->stopping ||
      atomic_fetch_add (&s->connections, 1) >= s->max_connections) {
    if (!w->stopping) {
      atomic_fetch_sub (&s->connections, 1);
      if (w->refused++ == 0 || s->cfg.verbose)
        log_msg ("connection refused: %u connections already open "
                 "(--max-connections)", s->max_connections);
    }
    close (fd);
    return;
  }
  struct sconn *sc = calloc (1, sizeof *sc);
  if (!sc) {
    atomic_fetch_sub (&s->connections, 1);
    close (fd);
    return;
  }
  sc->w = w;
  sc->fd = fd;
  sc->recv_op.fn = on_recv;
  sc->send_op.fn = on_send;
  sc->active = now_ms ();
  sc->deadline = sc->active + (uint64_t) s->handshake_timeout * 1000;
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  if (s->tcp[a->i] && getpeername (fd, (struct sockaddr *) &ss, &sl) == 0) {
    char host[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;
    if (ss.ss_family == AF_INET) {
      struct sockaddr_in *a = (struct sockaddr_in *) &ss;
      inet_ntop (AF_INET, &a->sin_addr, host, sizeof host);
      port = ntohs (a->sin_port);
    }
    else if (ss.ss_family == AF_INET6) {
      struct sockaddr_in6 *a = (struct sockaddr_in6 *) &ss;
      inet_ntop (AF_INET6, &a->sin6_addr, host, sizeof host);
      port = ntohs (a->sin6_port);
    }
    snprintf (sc->name, sizeof sc->name, "%s:%u", host, port);
    int one = 1;
    setsockopt (fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  else
    snprintf (sc->name, sizeof sc->name, "unix#%u.%" PRIu64, w->id,
              w->accepted);
  w->accepted++;
  if (conn_init (&sc->c, &s->cfg, sc->name, &w->loop) == -1) {
    log_msg ("%s: out of memory", sc->name);
    close (fd);
    free (sc);
    atomic_fetch_sub (&s->connections, 1);
    return;
  }
  sc->c.wake = conn_wake;
  if (s->cfg.verbose)
    log_msg ("%s: connected (worker %u)", sc->name, w->id);
  sc->next = w->conns;
  if (w->conns)
    w->conns->prev = sc;
  w->conns = sc;
  kick (w, sc);
}

/* Shutdown: no more input for sc (a partly received request gets
 * nothing); once its replies are sent, it half-closes (kick). */
static void
end_input (struct worker *w, struct sconn *sc)
{
  sc->c.stopping = true;
  if (sc->recv_busy)
    cancel_op (w, &sc->recv_op);
  else
    conn_process (&sc->c);
}

static void
begin_stop (struct worker *w)
{
  uint64_t now = now_ms ();
  w->stopping = true;
  w->stop_deadline = now + (uint64_t) w->s->shutdown_grace * 1000;
  w->answer_deadline = now + STOP_ANSWER_MS;
  w->answer_floor = now + QUIET_MS;
  for (unsigned i = 0; i < w->s->nlisten; i++)
    if (w->acc[i].busy)
      cancel_op (w, &w->acc[i].op);
  for (struct sconn *sc = w->conns, *next; sc; sc = next) {
    next = sc->next;
    if (conn_in_handshake (&sc->c) && sc->tls)
      finish (sc);              /* close_notify, after option replies */
    else if (conn_in_handshake (&sc->c))
      start_close (sc);
    else {
      /* What the client sent before the signal: answered before its
       * input ends. */
      int queued;
      if (ioctl (sc->fd, FIONREAD, &queued) == 0 && queued > 0)
        sc->stop_backlog = queued;
      sc->c.eshutdown = true;
      if (!sc->recv_busy)
        conn_process (&sc->c);
    }
    kick (w, sc);
  }
}

/* The eventfd fired: a post from another thread (run after this batch
 * of completions) or the stop request. */
static void
on_wake (struct s4k_completion *op, int res)
{
  (void) res;
  struct worker *w = s4k_container_of (op, struct worker, wake_op);
  arm_wake (w);
  if (atomic_load (&w->stop_requested) && !w->stopping)
    begin_stop (w);
}

static void
free_big (struct obuf *b, bool busy)
{
  if (!busy && b->len == 0 && b->cap > BIG_BUFFER) {
    free (b->p);
    *b = (struct obuf) { NULL, 0, 0 };
  }
}

static void
tick (struct worker *w)
{
  uint64_t now = now_ms ();
  if (now < w->next_tick)
    return;
  w->next_tick = now + TICK_MS;
  for (unsigned i = 0; i < w->s->nlisten; i++)
    if (w->acc[i].retry && !w->stopping) {
      w->acc[i].retry = false;
      arm_accept (&w->acc[i]);
    }
  for (struct sconn *sc = w->conns, *next; sc; sc = next) {
    next = sc->next;
    if (sc->closing)
      continue;
    if (!sc->sent_this_tick) {
      free_big (&sc->sending, sc->send_busy);
      free_big (&sc->c.out, false);
    }
    sc->sent_this_tick = false;
    bool quiet = !sc->c.inflight && !sc->send_busy &&
                 conn_out_bytes (&sc->c) == 0 &&
                 now - sc->active >= QUIET_MS;
    if (w->stopping && now >= w->stop_deadline) {
      if (sc->c.inflight || sc->send_busy || conn_out_bytes (&sc->c))
        log_msg ("%s: shutdown grace of %u s over: closed with replies "
                 "unsent", sc->name, w->s->shutdown_grace);
      start_close (sc);
    }
    else if (w->stopping && sc->draining) {
      if (!quiet && now < sc->drain_deadline)
        continue;
      start_close (sc);
    }
    else if (w->stopping && !sc->c.stopping) {
      /* Requests it had sent before the signal are read (and those
       * parsed run and are answered before the half-close). */
      bool answered = sc->stop_backlog == 0 && now >= w->answer_floor;
      if (!quiet && !answered && now < w->answer_deadline)
        continue;
      end_input (w, sc);
    }
    else if (w->stopping)
      continue;
    else if (conn_in_handshake (&sc->c) && now >= sc->deadline) {
      log_msg ("%s: handshake not finished after %u s: connection dropped",
               sc->name, w->s->handshake_timeout);
      start_close (sc);
    }
    else if (sc->c.transmission &&
             sc->c.epoch != s4k_dev_power_cuts (sc->c.cfg->dev)) {
      log_msg ("%s: power cut: connection dropped", sc->name);
      start_close (sc);
    }
    else if (w->s->idle_timeout && !sc->c.inflight &&
             now - sc->active >= (uint64_t) w->s->idle_timeout * 1000) {
      log_msg ("%s: nothing received or sent for %u s: connection closed "
               "(--idle-timeout)", sc->name, w->s->idle_timeout);
      /* A send stuck that long, or the end itself stuck: at once. */
      if (sc->send_busy || conn_done (&sc->c))
        start_close (sc);
      else
        finish (sc);
    }
    else
      continue;
    kick (w, sc);
  }
}

static void *
worker_main (void *arg)
{
  struct worker *w = arg;
  int r = s4k_ring_init (&w->ring, RING_ENTRIES);
  pthread_mutex_lock (&ready_lock);
  w->init_error = r;
  ready_count++;
  pthread_cond_broadcast (&ready_cond);
  pthread_mutex_unlock (&ready_lock);
  if (r < 0)
    return NULL;

  current_worker = w;
  w->runq_tail = &w->runq;
  arm_wake (w);
  for (unsigned i = 0; i < w->s->nlisten; i++)
    arm_accept (&w->acc[i]);
  for (;;) {
    if (w->stopping && !w->conns && !w->accepts_busy)
      break;
    struct io_uring_cqe *cqe;
    struct __kernel_timespec ts = { 0, w->runq ? 0 : TICK_MS * 1000000LL };
    r = io_uring_submit_and_wait_timeout (&w->ring, &cqe, 1, &ts, NULL);
    if (r < 0 && r != -ETIME && r != -EINTR) {
      log_msg ("io_uring_submit_and_wait: %s", s4k_strerror (-r));
      abort ();
    }
    s4k_loop_reap (&w->ring);   /* cancel requests carry NULL */
    tick (w);
    run_posted (w);
    run_yielded (w);
  }
  /* Stopped, with nothing of its own in flight: each device lets go of
   * the loop before it goes (the upstream store flushes and closes its
   * connection; another loop, or a ublk queue still serving, no longer
   * asks it anything). */
  for (const struct server_cfg *e = &w->s->cfg; e; e = e->next)
    s4k_dev_loop_gone (e->dev, &w->loop);
  io_uring_queue_exit (&w->ring);
  return NULL;
}

int
serve (struct server *s)
{
  struct worker *ws = calloc (s->threads, sizeof *ws);
  if (!ws) {
    log_msg ("out of memory");
    return -1;
  }
  sigset_t sigs = s->stop_signals;
  pthread_sigmask (SIG_BLOCK, &sigs, NULL);   /* inherited by the workers */

  unsigned started = 0;
  int ret = 0;
  for (; started < s->threads; started++) {
    struct worker *w = &ws[started];
    w->s = s;
    w->id = started;
    w->loop = (struct s4k_loop) { &w->ring, post };
    w->wake_op.fn = on_wake;
    for (unsigned i = 0; i < s->nlisten; i++)
      w->acc[i] = (struct acceptor) { { .fn = on_accept }, w, i, false,
                                      false };
    w->wake_fd = eventfd (0, EFD_CLOEXEC);
    if (w->wake_fd == -1 ||
        pthread_create (&w->thread, NULL, worker_main, w) != 0) {
      log_msg ("cannot start event-loop thread: %s", s4k_strerror (errno));
      ret = -1;
      break;
    }
  }
  pthread_mutex_lock (&ready_lock);
  while (ready_count < started)
    pthread_cond_wait (&ready_cond, &ready_lock);
  pthread_mutex_unlock (&ready_lock);
  for (unsigned i = 0; i < started; i++)
    if (ws[i].init_error < 0) {
      log_msg ("io_uring_queue_init: %s (is io_uring disabled? see "
               "/proc/sys/kernel/io_uring_disabled)",
               s4k_strerror (-ws[i].init_error));
      ret = -1;
    }

  if (ret == 0) {
    int sig;
    sigwait (&sigs, &sig);
    /* SIGCHLD only ever ends a --run: say that, not "Child exited". */
    log_msg ("%s: finishing requests in flight and shutting down",
             sig == SIGCHLD ? "--run: the command ended" : strsignal (sig));
    /* Now, not once the loops are gone: a request waiting on an
     * upstream without a deadline (upstream-timeout=0) would keep its
     * loop, and the exit, waiting forever. */
    for (const struct server_cfg *e = &s->cfg; e; e = e->next)
      s4k_dev_stop (e->dev);
  }
  uint64_t one = 1;
  for (unsigned i = 0; i < started; i++) {
    atomic_store (&ws[i].stop_requested, true);
    if (write (ws[i].wake_fd, &one, sizeof one) != sizeof one)
      log_msg ("eventfd write: %s", s4k_strerror (errno));
  }
  for (unsigned i = 0; i < started; i++) {
    pthread_join (ws[i].thread, NULL);
    add_stats (&s->stats, &ws[i].stats);
    s->accepted += ws[i].accepted;
    s->refused += ws[i].refused;
  }
  /* Only now: a worker still running may post to (write) any other. */
  for (unsigned i = 0; i < started; i++)
    close (ws[i].wake_fd);
  free (ws);
  return ret;
}
