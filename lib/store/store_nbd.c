/* SPDX-License-Identifier: BSD-3-Clause */
/* Upstream store: the sectors of another NBD server's export
 * (upstream=URI), through libnbd.
 *
 * Two paths.  The synchronous calls (the plugin's threads) run over a
 * pool of upstream connections
 * (upstream-connections=, default 4): a request takes a free one, or
 * waits for one.  Event loops (sect4k-server) submit requests instead,
 * each to its own connection driven through its ring
 * (store_nbd_aio.c).  The engine holds the sector locks, so two
 * requests on different connections never touch the same sector at
 * once, and a sector is read only after the write before it was
 * acknowledged.
 *
 * Flush: with multi-conn the upstream promises that a flush on one
 * connection covers the writes completed on all of them.  Without it, a
 * flush goes to every connection with writes no flush covered (the
 * marks, store_nbd_priv.h), the pool's and the loops', whichever path
 * the flush came by: one export may be served through both at once
 * (sect4k-server's NBD loops beside --scsi, whose LUN threads take the
 * synchronous path), so a flush covers every write completed before it.
 * The synchronous flush asks each dirty loop to flush its own connection
 * (the loop's inbox, store_nbd_aio.c) and waits; a loop's flush flushes
 * the pool's dirty connections in place.  FUA goes as FUA, or (upstream
 * without FUA) as a flush of the same connection after the write.
 *
 * A connection that fails (the upstream died or restarted) is closed:
 * its requests get EIO and the next request connects again; the pool's
 * idle connections that died with it are closed at once.  If writes no
 * flush covered were left, on it or on any other, they may be gone: the
 * store counts a loss, and each client connection learns of it at its
 * next flush (struct s4k_client).  A flush itself goes on past a
 * connection that dies: what it lost is counted, the rest is flushed.
 *
 * Timeout (upstream-timeout=, default 30 s): the connect at start fails
 * in one line, and a request fails with EIO, when the upstream says
 * nothing for that long while it waits; its connection is closed, as
 * one that died.  The synchronous path runs libnbd's nbd_aio_* calls
 * and polls with the timeout (the blocking calls have none); the loops
 * watch their connection (store_nbd_aio.c).  The upstream is then taken
 * as down: requests fail with EIO at once, on both paths, rather than
 * each waiting as long again (for the sector lock the first held, for a
 * connection of the pool, for a connect a stopped upstream accepts and
 * never answers); the pool's idle connections are closed and every
 * connection's unflushed writes count as lost.  A thread, the prober,
 * connects meanwhile; once it has, requests go upstream again.
 *
 * Stop (the stop op: at sect4k-server's signal, at nbdkit's through the
 * plugin's thread asleep in nbdkit_nanosleep, and again before the
 * flush at exit or a fault layer's write cache written back at close):
 * upstream-timeout=0 waits forever, but a stop must end, so from then
 * on every wait gets STOP_WAIT (up_limit).  A wait already blocked
 * without a deadline polls stop_fd beside its socket (the loops: on
 * their ring), and gets STOP_WAIT from the stop.  A request that fails
 * so says it in one line (once: up_timed_out); the final flush says in
 * one line what it could not cover (counted lost, unless a line said it
 * already) and returns 0: the stop goes on, as a stopping loop's does
 * (store_nbd_aio.c).
 *
 * Partial writes: where the export's minimum block size allows it (and
 * upstream-partial-writes= is not false), a write that cuts physical
 * sectors goes upstream as it is (partial_writes in store.h), on either
 * path: the upstream merges it, one round trip instead of a read and a
 * write. */
#define _GNU_SOURCE             /* POLLRDHUP */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libnbd.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "sect4k/extents.h"
#include "sect4k/sect4k.h"
#include "store_nbd.h"
#include "store_nbd_priv.h"

/* Milliseconds from now to the deadline (ns), for poll: -1 without one
 * (0), 0 once past. */
static int
ms_left (uint64_t deadline)
{
  if (!deadline)
    return -1;
  uint64_t now = s4k_now_ns ();
  return now >= deadline ? 0 : (int) ((deadline - now + 999999) / 1000000);
}

static uint64_t
deadline_of (uint64_t timeout)
{
  return timeout ? s4k_now_ns () + timeout : 0;
}

/* nbd_poll (h, ms), also ending when wake (>= 0) is readable: 2, or
 * stop (>= 0): 3.  Without either, nbd_poll itself. */
static int
poll_wake (struct nbd_handle *h, int wake, int stop, int ms)
{
  if (wake < 0 && stop < 0)
    return nbd_poll (h, ms);
  unsigned dir = nbd_aio_get_direction (h);
  struct pollfd p[3] = {
    { .fd = nbd_aio_get_fd (h),
      .events = (dir & LIBNBD_AIO_DIRECTION_READ ? POLLIN : 0) |
                (dir & LIBNBD_AIO_DIRECTION_WRITE ? POLLOUT : 0) },
    { .fd = wake, .events = POLLIN },
    { .fd = stop, .events = POLLIN } };
  int n = poll (p, 3, ms);
  if (n == -1)
    return errno == EINTR ? 0 : -1;
  if (p[1].revents)
    return 2;
  if (p[2].revents)
    return 3;
  if (p[0].revents & (POLLIN | POLLHUP | POLLERR))
    return nbd_aio_notify_read (h) == -1 ? -1 : 1;
  if (p[0].revents & POLLOUT)
    return nbd_aio_notify_write (h) == -1 ? -1 : 1;
  return 0;
}

/* A wait on the upstream: limit ns of silence (0: none), deadline. */
struct waiting {
  uint64_t limit, deadline;
};

static struct waiting
wait_begin (uint64_t limit)
{
  return (struct waiting) { limit, deadline_of (limit) };
}

/* One poll of h within w: 1 if it said something (the deadline
 * renewed), 0 if not yet, -1 if it failed, 2 if wake fired (as
 * poll_wake), -ETIMEDOUT once silent past the deadline.  A wait without
 * one (upstream-timeout=0) watches the stop too (stop_fd): a waiter
 * blocked when the front end stops gets up_stop_limit from then.  With
 * a deadline, nbd_poll as before: the same calls either way. */
static int
wait_poll (struct nbd_store *u, struct nbd_handle *h, struct waiting *w,
           int wake)
{
  int ms = ms_left (w->deadline);
  if (ms == 0)
    return -ETIMEDOUT;
  int p = poll_wake (h, wake, w->limit ? -1 : u->stop_fd, ms);
  if (p == 3) {
    *w = wait_begin (up_stop_limit (u));
    return 0;
  }
  if (p == 1)
    w->deadline = deadline_of (w->limit);   /* it said something */
  return p;
}

/* A new connection, connected, or NULL and *err.  *silent (if not NULL)
 * is set when the upstream said nothing for the timeout; wake (or -1)
 * as poll_wake's. */
static struct nbd_handle *
connect_upstream (struct nbd_store *u, char *err, size_t errlen,
                  bool *silent, int wake)
{
  struct nbd_handle *h = nbd_create ();
  if (!h) {
    snprintf (err, errlen, "upstream=%s: %s", u->uri, nbd_get_error ());
    return NULL;
  }
  /* The URI is the operator's (upstream=), so its tls-certificates= and
   * tls-psk-file= may name local files. */
  int r = 0;
  if (nbd_add_meta_context (h, LIBNBD_CONTEXT_BASE_ALLOCATION) == -1 ||
      nbd_set_uri_allow_local_file (h, true) == -1 ||
      nbd_aio_connect_uri (h, u->uri) == -1)
    r = -1;
  /* The connect and the handshake, within the timeout. */
  struct waiting w = wait_begin (up_limit (u));
  while (r == 0 && nbd_aio_is_connecting (h)) {
    int p = wait_poll (u, h, &w, wake);
    if (p == -ETIMEDOUT) {
      snprintf (err, errlen, "upstream=%s: no answer in %gs%s", u->uri,
                w.limit / 1e9, up_stop_why (u));
      if (silent)
        *silent = true;
      nbd_close (h);
      return NULL;
    }
    if (p == 2) {
      snprintf (err, errlen, "upstream=%s: closing", u->uri);
      nbd_close (h);
      return NULL;
    }
    r = p == -1 ? -1 : 0;
  }
  if (r == -1 || !nbd_aio_is_ready (h)) {
    snprintf (err, errlen, "upstream=%s: cannot connect: %s", u->uri,
              nbd_get_error () ? nbd_get_error () : "the server hung up");
    nbd_close (h);
    return NULL;
  }
  return h;
}

bool
up_export_ok (struct nbd_store *u, struct nbd_handle *h)
{
  return nbd_get_size (h) >= (int64_t) u->g.size &&
         (u->readonly || nbd_is_read_only (h) != 1);
}

/* A connection of the pool, locked and connected; NULL (and *r) if it
 * cannot connect, or the upstream is down. */
static struct conn *
get_conn (struct nbd_store *u, int *r)
{
  *r = -EIO;
  if (up_down (u))
    return NULL;
  unsigned start = atomic_fetch_add_explicit (&u->next, 1,
                                              memory_order_relaxed) % u->n;
  struct conn *c = NULL;
  for (unsigned i = 0; i < u->n && !c; i++) {
    struct conn *t = &u->conns[(start + i) % u->n];
    if (pthread_mutex_trylock (&t->lock) == 0)
      c = t;
  }
  if (!c) {
    c = &u->conns[start];
    pthread_mutex_lock (&c->lock);
  }
  /* Taken as down while this one waited for the connection. */
  if (up_down (u)) {
    pthread_mutex_unlock (&c->lock);
    return NULL;
  }
  if (!c->h) {
    char err[256];
    bool silent = false;
    c->h = connect_upstream (u, err, sizeof err, &silent, -1);
    if (c->h && !up_export_ok (u, c->h)) {
      nbd_close (c->h);
      c->h = NULL;
    }
    if (!c->h) {
      pthread_mutex_unlock (&c->lock);
      if (silent)
        up_timed_out (u);
      return NULL;
    }
    atomic_fetch_add (&u->reconnects, 1);
  }
  *r = 0;
  return c;
}

static void
conn_lost (struct nbd_store *u, struct conn *c)
{
  mark_lost (u, &c->mark);
  nbd_close (c->h);
  c->h = NULL;
}

/* One connection died: the upstream may have.  The pool's idle ones
 * whose upstream hung up died too (all of them if it is down): closed
 * now, so that the requests after do not each find one more dead.
 * (Hung up, not just readable: a TLS upstream may send session tickets
 * to an idle connection.) */
static void
reap_idle (struct nbd_store *u, bool all)
{
  for (unsigned i = 0; i < u->n; i++) {
    struct conn *c = &u->conns[i];
    if (pthread_mutex_trylock (&c->lock) != 0)
      continue;
    struct pollfd p = { .fd = c->h ? nbd_aio_get_fd (c->h) : -1,
                        .events = POLLRDHUP };
    if (p.fd >= 0 &&
        (all || (poll (&p, 1, 0) == 1 &&
                 (p.revents & (POLLRDHUP | POLLHUP | POLLERR)))))
      conn_lost (u, c);
    pthread_mutex_unlock (&c->lock);
  }
}

/* ---- the upstream down, and the prober -------------------------------- */

/* ns between tries refused at once: doubling from the first to the last,
 * so an upstream gone for good costs a try every 2 s, not 5 a second. */
#define PROBE_GAP_FIRST 200000000u
#define PROBE_GAP_LAST 2000000000u

/* The prober's connection, if it is not needed as the pool's. */
static void
probe_keep (struct nbd_store *u, struct nbd_handle *h)
{
  for (unsigned i = 0; i < u->n && h; i++) {
    struct conn *c = &u->conns[i];
    if (pthread_mutex_trylock (&c->lock) != 0)
      continue;
    if (!c->h) {
      c->h = h;
      h = NULL;
      atomic_fetch_add (&u->reconnects, 1);
    }
    pthread_mutex_unlock (&c->lock);
  }
  if (h) {
    uint64_t deadline = 0;
    up_close_handle (h, &deadline);
  }
}

/* While the upstream is down: connects, each try bounded by the timeout
 * (a stopped upstream accepts and says nothing), until one succeeds. */
static void *
prober (void *arg)
{
  struct nbd_store *u = arg;
  uint64_t gap = PROBE_GAP_FIRST;
  pthread_mutex_lock (&u->probe_lock);
  while (!u->closing) {
    if (!up_down (u)) {
      gap = PROBE_GAP_FIRST;
      pthread_cond_wait (&u->probe_cond, &u->probe_lock);
      continue;
    }
    const uint64_t gen = u->down_gen, t0 = s4k_now_ns ();
    pthread_mutex_unlock (&u->probe_lock);
    char err[256];
    bool silent = false;
    struct nbd_handle *h = connect_upstream (u, err, sizeof err, &silent,
                                             u->wake);
    if (h && !up_export_ok (u, h)) {
      nbd_close (h);
      h = NULL;
    }
    if (h)
      probe_keep (u, h);
    pthread_mutex_lock (&u->probe_lock);
    if (h && gen == u->down_gen) {
      atomic_store (&u->down, false);
      fprintf (stderr, "sect4k: upstream=%s: answers again\n", u->uri);
    }
    else if (!h && !silent && !u->closing) {
      /* Refused, or hung up, at once: not there yet. */
      const uint64_t at = t0 + gap;
      struct timespec ts = { at / 1000000000u, at % 1000000000u };
      pthread_cond_timedwait (&u->probe_cond, &u->probe_lock, &ts);
      gap = gap * 2 < PROBE_GAP_LAST ? gap * 2 : PROBE_GAP_LAST;
    }
  }
  pthread_mutex_unlock (&u->probe_lock);
  return NULL;
}

/* This thread runs the final flush (nbd_store_flush at a stop), which
 * says itself what it could not cover. */
static __thread bool final_flush;

void
up_timed_out (struct nbd_store *u)
{
  if (atomic_load (&u->stopping)) {
    atomic_store (&u->stop_silent, true);
    up_set_down (u);
    if (final_flush || atomic_exchange (&u->said_requests, true))
      return;
    const bool lost = atomic_load (&u->base.losses) >
                      atomic_load (&u->said_losses);
    fprintf (stderr, "sect4k: upstream=%s: no answer in %gs%s: the "
             "requests in flight on it failed (EIO)%s\n", u->uri,
             up_stop_limit (u) / 1e9, up_stop_why (u),
             lost ? "; writes since the last flush may be lost" : "");
    up_stop_said (u);
    return;
  }
  fprintf (stderr, "sect4k: upstream=%s: no answer in %gs "
           "(upstream-timeout=): closing the connection; requests fail "
           "with EIO until it answers again\n", u->uri, u->timeout / 1e9);
  up_set_down (u);
}

void
up_set_down (struct nbd_store *u)
{
  pthread_mutex_lock (&u->probe_lock);
  if (!u->closing && (u->prober_running ||
                      (u->prober_running =
                         pthread_create (&u->prober, NULL, prober, u) == 0))) {
    u->down_gen++;
    atomic_store (&u->down, true);
    pthread_cond_signal (&u->probe_cond);
  }
  pthread_mutex_unlock (&u->probe_lock);
  if (!up_down (u))
    return;
  /* Its other connections would only make the next requests wait as
   * long again; their unflushed writes may be gone with it.  A flush
   * meanwhile reports that, per client connection, and passes for the
   * others. */
  reap_idle (u, true);
  up_aio_lost (u);
}

static int
up_check (struct nbd_store *u, struct conn *c, int r)
{
  if (r != -1)
    return 0;
  int e = nbd_get_errno ();
  if (nbd_aio_is_dead (c->h) || nbd_aio_is_closed (c->h) ||
      !nbd_aio_is_ready (c->h)) {
    conn_lost (u, c);
    reap_idle (u, false);
    return -EIO;
  }
  return -(e > 0 ? e : EIO);
}

int
up_cmd (struct nbd_store *u, struct conn *c, int64_t cookie)
{
  int r = cookie == -1 ? -1 : 0;
  struct waiting w = wait_begin (up_limit (u));
  while (r == 0 && (r = nbd_aio_command_completed (c->h, cookie)) == 0) {
    int p = wait_poll (u, c->h, &w, -1);
    if (p == -ETIMEDOUT) {
      up_timed_out (u);
      conn_lost (u, c);
      return -EIO;
    }
    if (p == -1)
      r = -1;
  }
  return up_check (u, c, r == 1 ? 0 : -1);
}

int
up_wait (struct nbd_store *u, struct nbd_handle *h, int64_t cookie,
         uint64_t timeout)
{
  struct waiting w = wait_begin (timeout);
  for (;;) {
    if (nbd_aio_is_dead (h) || nbd_aio_is_closed (h))
      return -EIO;
    int r = cookie ? nbd_aio_command_completed (h, cookie)
                   : nbd_aio_in_flight (h) == 0;
    if (r != 0)
      return r == 1 ? 0 : -EIO;
    int p = wait_poll (u, h, &w, -1);
    if (p == -ETIMEDOUT || p == -1)
      return p == -1 ? -EIO : p;
  }
}

int
up_send_range (struct nbd_store *u, send_fn *send, void *arg, enum cmd cmd,
               char *buf, uint64_t len, uint64_t off, bool fua,
               bool may_trim)
{
  uint32_t flags = fua && u->can_fua ? LIBNBD_CMD_FLAG_FUA : 0;
  uint64_t step = u->chunk;
  bool same_buf = false;
  if (cmd == CMD_ZERO && !u->can_zero) {
    cmd = CMD_WRITE;
    buf = u->zeroes;
    same_buf = true;
    if (step > u->zeroes_len)
      step = u->zeroes_len;
  }
  else if (cmd == CMD_ZERO) {
    /* Zero and trim: sect4k's trimmed sectors read as zeroes (the
     * torture and the other stores rely on it), and NBD_CMD_TRIM leaves
     * the contents undefined, so a trim is a write-zeroes that may punch
     * holes. */
    step = ZERO_CHUNK;
    if (!may_trim)
      flags |= LIBNBD_CMD_FLAG_NO_HOLE;
  }
  int r = 0;
  for (uint64_t done = 0; done < len && r == 0; done += step) {
    uint64_t n = len - done < step ? len - done : step;
    r = send (arg, cmd, buf && !same_buf ? buf + done : buf, n, off + done,
              flags);
  }
  return r;
}

/* send_fn of the synchronous path: on a locked connection of the pool. */
struct sync_arg {
  struct nbd_store *u;
  struct conn *c;
};
static int
sync_send (void *arg, enum cmd cmd, char *buf, uint64_t len, uint64_t off,
           uint32_t flags)
{
  struct sync_arg *a = arg;
  struct nbd_handle *h = a->c->h;
  const nbd_completion_callback none = NBD_NULL_COMPLETION;
  int r = up_cmd (a->u, a->c,
                  cmd == CMD_READ
                  ? nbd_aio_pread (h, buf, len, off, none, flags)
                  : cmd == CMD_WRITE
                  ? nbd_aio_pwrite (h, buf, len, off, none, flags)
                  : nbd_aio_zero (h, len, off, none, flags));
  if (r == 0 && cmd != CMD_READ)
    mark_write (a->u, &a->c->mark);
  return r;
}

int
up_flush_conn (struct nbd_store *u, struct conn *c)
{
  struct flush_cover cover = mark_cover (u, &c->mark);
  int r = up_cmd (u, c, nbd_aio_flush (c->h, NBD_NULL_COMPLETION, 0));
  if (r == 0)
    mark_flushed (u, &c->mark, cover);
  return r;
}

/* The pieces of a read or write, or a zero, on a connection of the pool;
 * FUA as a flush after where the upstream has no FUA. */
static int
sync_range (struct s4k_store *s, enum cmd cmd, const struct s4k_io *io,
            unsigned n, bool fua, bool may_trim)
{
  struct nbd_store *u = (struct nbd_store *) s;
  int r = 0;
  struct conn *c = get_conn (u, &r);
  if (!c)
    return r;
  struct sync_arg a = { u, c };
  for (unsigned i = 0; i < n && r == 0; i++)
    r = up_send_range (u, sync_send, &a, cmd, io[i].buf, io[i].len,
                       io[i].off, fua, may_trim);
  if (r == 0 && fua && !u->can_fua && u->can_flush)
    r = up_flush_conn (u, c);
  pthread_mutex_unlock (&c->lock);
  return r;
}

static int
nbd_store_read (struct s4k_store *s, const struct s4k_io *io, unsigned n)
{
  return sync_range (s, CMD_READ, io, n, false, false);
}

static int
nbd_store_write (struct s4k_store *s, const struct s4k_io *io, unsigned n,
                 bool fua)
{
  return sync_range (s, CMD_WRITE, io, n, fua, false);
}

static int
nbd_store_zero (struct s4k_store *s, uint64_t len, uint64_t off,
                bool may_trim, bool fua)
{
  const struct s4k_io io = { NULL, len, off };
  return sync_range (s, CMD_ZERO, &io, 1, fua, may_trim);
}

static int
nbd_store_trim (struct s4k_store *s, uint64_t len, uint64_t off, bool fua)
{
  return nbd_store_zero (s, len, off, true, fua);
}

int
up_flush_dirty (struct nbd_store *u, struct conn *c)
{
  if (!c->h || !mark_dirty (u, &c->mark))
    return 0;
  if (up_down (u)) {
    conn_lost (u, c);           /* as one that died: its loss counted */
    return 0;
  }
  int r = up_flush_conn (u, c);
  return c->h ? r : 0;
}

/* The synchronous flush (the plugin's threads, --scsi's LUN threads)
 * covers every write completed before it, whichever connection carried
 * it: with multi-conn one flush does; without it, each dirty connection
 * of the pool, then each dirty loop's (sect4k-server serves one export
 * as NBD, through its loops, and as a SCSI disk, through the pool, at
 * once).  Lost writes are reported per client connection, by the
 * engine. */
static int
flush_all (struct nbd_store *u)
{
  int r = 0;
  if (!u->can_flush)
    return 0;                   /* the upstream writes through */
  if (u->multi_conn) {
    /* One flush covers all; one that found its connection dead goes
     * again on the next (which connects again). */
    for (unsigned i = 0; i <= u->n && up_any_dirty (u); i++) {
      struct conn *c = get_conn (u, &r);
      if (!c)
        return r;
      r = up_flush_conn (u, c);
      bool died = !c->h;
      pthread_mutex_unlock (&c->lock);
      if (!died)
        return r;
    }
    return up_any_dirty (u) ? -EIO : 0;
  }
  for (unsigned i = 0; i < u->n; i++) {
    struct conn *c = &u->conns[i];
    pthread_mutex_lock (&c->lock);
    int e = up_flush_dirty (u, c);
    pthread_mutex_unlock (&c->lock);
    if (e && !r)
      r = e;
  }
  int e = up_flush_loops (u);
  return r ? r : e;
}

static int
nbd_store_flush (struct s4k_store *s)
{
  struct nbd_store *u = (struct nbd_store *) s;
  if (!atomic_load (&u->stopping))
    return flush_all (u);
  /* The final flush, the front end stopping: bounded (up_limit), and it
   * ends the stop as a stopping loop's does (up_loop_gone): what it
   * could not cover is counted lost and said in one line, and the stop
   * goes on. */
  final_flush = true;
  int r = flush_all (u);
  final_flush = false;
  if (r == 0 && atomic_load (&s->losses) == atomic_load (&u->said_losses))
    return 0;
  for (unsigned i = 0; i < u->n; i++) {
    struct conn *c = &u->conns[i];
    pthread_mutex_lock (&c->lock);
    if (c->h && mark_dirty (u, &c->mark))
      conn_lost (u, c);
    pthread_mutex_unlock (&c->lock);
  }
  char why[96];
  if (atomic_load (&u->stop_silent))
    snprintf (why, sizeof why, "no answer in %gs%s", up_limit (u) / 1e9,
              up_stop_why (u));
  else if (r)
    snprintf (why, sizeof why, "%s", s4k_strerror (-r));
  else
    snprintf (why, sizeof why, "the connection failed");
  fprintf (stderr, "sect4k: upstream=%s: the final flush did not complete "
           "(%s): writes since the last flush may be lost\n", u->uri, why);
  up_stop_said (u);
  return 0;
}

/* The front end stops (at its signal: requests may be in flight, and
 * again before the final flush): from now on no wait is without end,
 * and a waiter blocked without a deadline wakes (stop_fd). */
static void
nbd_store_stop (struct s4k_store *s)
{
  struct nbd_store *u = (struct nbd_store *) s;
  if (atomic_load (&u->stopping))
    return;
  up_stop_said (u);             /* losses before are the clients' news */
  atomic_store (&u->stopping, true);
  (void) !write (u->stop_fd, &(uint64_t) { 1 }, 8);
}

/* ---- extents: the upstream's runs, zero only over whole sectors ------- */

int
up_extent_cb (void *opaque, const char *context, uint64_t offset,
              uint32_t *entries, size_t nr, int *error)
{
  struct s4k_extent_rounder *w = opaque;
  (void) offset; (void) error;
  if (strcmp (context, LIBNBD_CONTEXT_BASE_ALLOCATION) != 0)
    return 0;
  for (size_t i = 0; i + 1 < nr && !w->stop; i += 2)
    s4k_extent_round_add (w, entries[i], entries[i + 1] & LIBNBD_STATE_ZERO);
  return 0;
}

static int
nbd_store_extents (struct s4k_store *s, uint64_t len, uint64_t off,
                   s4k_extent_fn *fn, void *opaque)
{
  struct nbd_store *u = (struct nbd_store *) s;
  if (!u->can_extents)
    return fn (opaque, off, len, false) < 0 ? -EIO : 0;
  int r = 0;
  struct conn *c = get_conn (u, &r);
  if (!c)
    return r;
  struct s4k_extent_rounder w;
  s4k_extent_round_init (&w, &u->g, off, fn, opaque);
  const uint64_t end = off + len;
  while (w.pos < end && !w.stop && r == 0) {
    uint64_t before = w.pos;
    uint64_t n = end - w.pos < ZERO_CHUNK ? end - w.pos : ZERO_CHUNK;
    r = up_cmd (u, c, nbd_aio_block_status (c->h, n, w.pos,
                                            (nbd_extent_callback) {
                                              .callback = up_extent_cb,
                                              .user_data = &w },
                                            NBD_NULL_COMPLETION, 0));
    if (r == 0 && w.pos <= before)
      r = -EIO;                 /* the upstream answered nothing */
  }
  pthread_mutex_unlock (&c->lock);
  return r ? r : s4k_extent_round_end (&w, end);
}

static bool
nbd_store_can_fast_zero (struct s4k_store *s)
{
  struct nbd_store *u = (struct nbd_store *) s;
  return u->can_zero && u->can_fast_zero;
}

static bool
nbd_store_readonly (const struct s4k_store *s)
{
  return ((const struct nbd_store *) s)->readonly;
}

static const char *
nbd_store_info (const struct s4k_store *s)
{
  return ((const struct nbd_store *) s)->info;
}

/* nbd_shutdown would wait for the upstream to hang up, forever if it
 * is silent: the disconnect goes out, and the upstream has until the
 * deadline (shared by every handle) to close. */
void
up_close_handle (struct nbd_handle *h, uint64_t *deadline)
{
  if (!*deadline)
    *deadline = s4k_now_ns () + 1000000000u;
  if (nbd_aio_is_ready (h) && nbd_aio_in_flight (h) == 0 &&
      nbd_aio_disconnect (h, 0) == 0)
    while (!nbd_aio_is_closed (h) && !nbd_aio_is_dead (h)) {
      int ms = ms_left (*deadline);
      if (ms == 0 || nbd_poll (h, ms) == -1)
        break;
    }
  nbd_close (h);
}

static void
nbd_store_close (struct s4k_store *s)
{
  struct nbd_store *u = (struct nbd_store *) s;
  uint64_t deadline = 0;
  pthread_mutex_lock (&u->probe_lock);
  u->closing = true;
  pthread_cond_signal (&u->probe_cond);
  pthread_mutex_unlock (&u->probe_lock);
  if (u->prober_running) {
    (void) !write (u->wake, &(uint64_t) { 1 }, 8);
    pthread_join (u->prober, NULL);
  }
  up_aio_close (u, &deadline);
  for (unsigned i = 0; i < u->n; i++) {
    if (u->conns[i].h)
      up_close_handle (u->conns[i].h, &deadline);
    pthread_mutex_destroy (&u->conns[i].lock);
  }
  pthread_mutex_destroy (&u->loops_lock);
  pthread_mutex_destroy (&u->loss_lock);
  pthread_mutex_destroy (&u->probe_lock);
  pthread_cond_destroy (&u->probe_cond);
  if (u->wake >= 0)
    close (u->wake);
  if (u->stop_fd >= 0)
    close (u->stop_fd);
  free (u->zeroes);
  free (u->uri);
  free (u);
}

static const struct s4k_store_ops nbd_ops = {
  .name = "upstream",
  .read = nbd_store_read,
  .write = nbd_store_write,
  .zero = nbd_store_zero,
  .trim = nbd_store_trim,
  .flush = nbd_store_flush,
  .extents = nbd_store_extents,
  .can_fast_zero = nbd_store_can_fast_zero,
  .readonly = nbd_store_readonly,
  .info = nbd_store_info,
  .close = nbd_store_close,
  .submit = up_submit,
  .loop_gone = up_loop_gone,
  .stop = nbd_store_stop,
};

/* Reads what the export offers from the first connection and checks it
 * against the geometry. */
static int
probe (struct nbd_store *u, const struct s4k_config *c, uint64_t *size,
       char *err, size_t errlen)
{
  struct nbd_handle *h = u->conns[0].h;
  const struct s4k_geometry *g = &c->geom;
  int64_t esize = nbd_get_size (h);
  int64_t min = nbd_get_block_size (h, LIBNBD_SIZE_MINIMUM);
  int64_t max = nbd_get_block_size (h, LIBNBD_SIZE_MAXIMUM);

  if (esize < 0) {
    snprintf (err, errlen, "upstream=%s: %s", u->uri, nbd_get_error ());
    return -1;
  }
  if (min > 0 && (g->physical % min || g->alignment % min)) {
    snprintf (err, errlen, "upstream=%s: the export's minimum block size "
              "%" PRId64 " does not divide physical=%" PRIu32
              " and alignment-offset=%" PRIu32, u->uri, min, g->physical,
              g->alignment);
    return -1;
  }
  const bool ro = nbd_is_read_only (h) == 1;
  if (ro && !c->readonly && !c->readonly_per_connection) {
    snprintf (err, errlen, "upstream=%s: the export is read-only; serve "
              "it read-only (sect4k-server -r)", u->uri);
    return -1;
  }
  if (c->geom.size > (uint64_t) esize) {
    snprintf (err, errlen, "size=%" PRIu64 ": larger than the upstream "
              "export (%" PRId64 " bytes at %s)", c->geom.size, esize,
              u->uri);
    return -1;
  }
  *size = c->geom.size ? c->geom.size
                       : (uint64_t) esize / g->logical * g->logical;
  if (*size == 0) {
    snprintf (err, errlen, "upstream=%s: the export (%" PRId64 " bytes) is "
              "smaller than one logical sector of %" PRIu32, u->uri, esize,
              g->logical);
    return -1;
  }
  u->g = *g;
  u->g.size = *size;
  u->export_size = esize;
  /* Requests as large as the upstream takes, in whole minimum blocks. */
  uint64_t chunk = max > 0 && max < (32 << 20) ? (uint64_t) max : 32u << 20;
  if (min > 0)
    chunk = chunk / min * min;
  u->chunk = chunk ? chunk : (uint64_t) min;
  u->readonly = c->readonly || ro;
  u->base.partial_writes = s4k_upstream_partial_writes (c, min > 0 ? min : 0);
  u->multi_conn = nbd_can_multi_conn (h) == 1;
  u->can_flush = nbd_can_flush (h) == 1;
  u->can_fua = nbd_can_fua (h) == 1;
  u->can_zero = nbd_can_zero (h) == 1;
  u->can_fast_zero = nbd_can_fast_zero (h) == 1;
  u->can_extents =
    nbd_can_meta_context (h, LIBNBD_CONTEXT_BASE_ALLOCATION) == 1;
  if (!u->can_zero) {
    u->zeroes_len = g->physical > (1u << 20) ? g->physical : 1u << 20;
    if (!(u->zeroes = calloc (1, u->zeroes_len))) {
      snprintf (err, errlen, "upstream store: out of memory");
      return -1;
    }
  }
  snprintf (u->info, sizeof u->info, "upstream=%s: %" PRId64 " bytes, %u "
            "connection(s)%s, flush %s, fua %s, zero %s, extents %s, "
            "partial writes %s, %s",
            u->uri, esize, u->n,
            u->multi_conn ? " (multi-conn)" : " (no multi-conn: flush "
            "goes to each)",
            u->can_flush ? "yes" : "no (writes through)",
            u->can_fua ? "native" : u->can_flush ? "as flush" : "no",
            u->can_zero ? (u->can_fast_zero ? "fast" : "yes")
                        : "by writing zeroes",
            u->can_extents ? "yes" : "no",
            u->base.partial_writes ? "yes"
            : !c->partial_writes ? "no (upstream-partial-writes=false)"
            : "no (whole minimum blocks)",
            u->readonly ? "read-only" : "read-write");
  return 0;
}

struct s4k_store *
s4k_nbd_store_new (const struct s4k_config *c, uint64_t *size, char *err,
                   size_t errlen)
{
  struct nbd_store *u = calloc (1, sizeof *u);
  if (!u || !(u->uri = strdup (c->upstream))) {
    snprintf (err, errlen, "upstream store: out of memory");
    free (u);
    return NULL;
  }
  u->base.ops = &nbd_ops;
  u->timeout = c->upstream_timeout;
  u->base.async = u->base.async_extents = true;
  pthread_mutex_init (&u->loops_lock, NULL);
  pthread_mutex_init (&u->loss_lock, NULL);
  pthread_mutex_init (&u->probe_lock, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init (&ca);
  pthread_condattr_setclock (&ca, CLOCK_MONOTONIC);   /* s4k_now_ns's */
  pthread_cond_init (&u->probe_cond, &ca);
  pthread_condattr_destroy (&ca);
  u->wake = eventfd (0, EFD_CLOEXEC);
  u->stop_fd = u->wake == -1 ? -1 : eventfd (0, EFD_CLOEXEC);
  if (u->stop_fd == -1) {
    snprintf (err, errlen, "upstream store: eventfd: %s",
              s4k_strerror (errno));
    nbd_store_close (&u->base);
    return NULL;
  }
  u->n = c->upstream_connections ? c->upstream_connections : 4;
  if (u->n > MAX_CONNECTIONS)
    u->n = MAX_CONNECTIONS;
  for (unsigned i = 0; i < u->n; i++)
    pthread_mutex_init (&u->conns[i].lock, NULL);
  /* Every connection now: a bad URI fails at start, not at the first
   * request. */
  for (unsigned i = 0; i < u->n; i++)
    if (!(u->conns[i].h = connect_upstream (u, err, errlen, NULL, -1)) ||
        (i == 0 && probe (u, c, size, err, errlen) == -1)) {
      nbd_store_close (&u->base);
      return NULL;
    }
  return &u->base;
}

uint64_t
s4k_nbd_store_reconnects (const struct s4k_store *s)
{
  return atomic_load (&((struct nbd_store *) s)->reconnects);
}
