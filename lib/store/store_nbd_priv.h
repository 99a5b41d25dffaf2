/* SPDX-License-Identifier: BSD-3-Clause */
/* The upstream store's private parts, shared by its two files:
 *   store_nbd.c       connecting and checking the export, the pool of
 *                     connections the synchronous calls use (the
 *                     plugin's threads), the ops;
 *   store_nbd_aio.c   requests an event loop submits (sect4k-server):
 *                     one connection per loop, driven through its ring. */
#ifndef S4K_STORE_NBD_PRIV_H
#define S4K_STORE_NBD_PRIV_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <libnbd.h>

#include "store.h"

#define MAX_CONNECTIONS 64
#define MAX_LOOPS 64                 /* sect4k-server's --threads at most */
#define ZERO_CHUNK (1u << 30)        /* largest zero sent at once */
/* A stop waits at most this long of silence when upstream-timeout=0
 * (no timeout): a stopping loop's final flush, and every request once
 * the front end stops (the flush at exit, a write cache written back at
 * close). */
#define STOP_WAIT 30000000000u

/* Which of a connection's writes a flush covered.  Every write or zero
 * the upstream completes takes the next stamp of the store's clock:
 * `last` is the stamp of the connection's latest, `flushed` the highest
 * stamp a flush on that connection covered.  With multi-conn a flush on
 * any connection covers the writes every connection completed before it
 * was sent: the store's `flushed` is that.  A connection is dirty while
 * it has a write above both.  A connection that dies while any is dirty
 * counts a loss (struct s4k_store's `losses`): the upstream may have
 * crashed, and the others may not have noticed yet.  Each client
 * connection whose writes no flush of its own covered learns of it at
 * its next flush (struct s4k_client).  Atomics: a flush on one thread
 * reads them all. */
struct mark {
  _Atomic uint64_t last, flushed;
};

/* A connection of the synchronous pool. */
struct conn {
  pthread_mutex_t lock;
  struct nbd_handle *h;          /* NULL: connect at the next use */
  struct mark mark;
};

struct aloop;

struct nbd_store {
  struct s4k_store base;
  char *uri;
  struct s4k_geometry g;
  unsigned n;
  struct conn conns[MAX_CONNECTIONS];
  _Atomic unsigned next;
  uint64_t export_size;
  uint32_t chunk;                /* largest read or write sent at once */
  uint64_t timeout;              /* upstream-timeout= in ns (0: none) */
  bool multi_conn, can_flush, can_fua, can_zero, can_fast_zero,
       can_extents, readonly;
  _Atomic uint64_t reconnects;
  _Atomic uint64_t clock;        /* stamps of completed writes */
  _Atomic uint64_t flushed;      /* with multi-conn: stamps a flush covered */
  /* The last loss counted covered the writes stamped up to lost_upto
   * (mark_lost, under loss_lock). */
  pthread_mutex_t loss_lock;
  uint64_t lost_upto;
  char *zeroes;                  /* for upstreams without write-zeroes */
  size_t zeroes_len;
  /* The event loops' connections (store_nbd_aio.c): loops[i] for
   * i < nloops is set before nloops counts it, and stays. */
  pthread_mutex_t loops_lock;    /* adding one */
  _Atomic unsigned nloops;
  struct aloop *loops[MAX_LOOPS];
  char info[512];
  /* The upstream taken as down: a request had no answer for the
   * timeout.  Until a connection to it succeeds again, requests fail
   * with EIO at once instead of each waiting for a connection, a
   * connect or an answer (the prober, a thread started the first time,
   * connects meanwhile, each try bounded by the timeout). */
  _Atomic bool down;
  pthread_mutex_t probe_lock;
  pthread_cond_t probe_cond;     /* down, or closing */
  uint64_t down_gen;             /* counts declarations */
  bool prober_running, closing;
  pthread_t prober;
  int wake;                      /* eventfd: ends the prober's connect */
  /* The front end stops (the store's stop op, at its signal, requests
   * may still be in flight): from then every wait is bounded
   * (up_limit); one without a deadline (upstream-timeout=0) was blocked
   * in poll, and the stop wakes it: stop_fd, an eventfd written once and
   * never read, polled beside the connection's socket (the loops': on
   * their ring).  stop_silent: a wait then ended for silence.  Each line
   * the stop says of what it could not finish records the losses it
   * covered (said_losses), so that the next says only what is new;
   * said_requests: the requests in flight that failed were said. */
  _Atomic bool stopping, stop_silent, said_requests;
  int stop_fd;
  _Atomic uint64_t said_losses;
};

/* ---- marks ------------------------------------------------------------- */

static inline void
raise_to (_Atomic uint64_t *x, uint64_t v)
{
  uint64_t old = atomic_load (x);
  while (old < v && !atomic_compare_exchange_weak (x, &old, v))
    ;
}

/* A write or zero on m's connection completed. */
static inline void
mark_write (struct nbd_store *u, struct mark *m)
{
  atomic_store (&m->last, atomic_fetch_add (&u->clock, 1) + 1);
}

static inline bool
mark_dirty (struct nbd_store *u, struct mark *m)
{
  uint64_t last = atomic_load (&m->last);
  return last > atomic_load (&m->flushed) &&
         (!u->multi_conn || last > atomic_load (&u->flushed));
}

/* What a flush on m's connection will cover: taken as it is sent. */
struct flush_cover {
  uint64_t last, clock;
};
static inline struct flush_cover
mark_cover (struct nbd_store *u, struct mark *m)
{
  return (struct flush_cover) { atomic_load (&m->last),
                                atomic_load (&u->clock) };
}
/* That flush succeeded. */
static inline void
mark_flushed (struct nbd_store *u, struct mark *m, struct flush_cover c)
{
  raise_to (&m->flushed, c.last);
  if (u->multi_conn)
    raise_to (&u->flushed, c.clock);
}

/* True if some connection, of the pool or of a loop, has a write
 * stamped after `after` that no flush covered (store_nbd_aio.c). */
bool up_dirty_after (struct nbd_store *u, uint64_t after);
static inline bool
up_any_dirty (struct nbd_store *u)
{
  return up_dirty_after (u, 0);
}

/* m's connection died: writes no flush covered may be gone, its own
 * and, if the upstream crashed, those of every other connection.  One
 * loss per incident: the connections that notice the same death one
 * after the other (the reaped idle ones, each loop's) count it once.
 * The clock is read before the count, so every write stamped up to it
 * began before the count and its client connection is told (struct
 * s4k_client); a death after counts again only if a write since is at
 * risk. */
static inline void
mark_lost (struct nbd_store *u, struct mark *m)
{
  pthread_mutex_lock (&u->loss_lock);
  const uint64_t upto = atomic_load (&u->clock);
  if (up_dirty_after (u, u->lost_upto)) {
    u->lost_upto = upto;
    atomic_fetch_add (&u->base.losses, 1);
  }
  raise_to (&m->flushed, atomic_load (&m->last));
  pthread_mutex_unlock (&u->loss_lock);
}

/* ---- commands, for both paths ------------------------------------------ */

enum cmd { CMD_READ, CMD_WRITE, CMD_ZERO };

/* Sends one command of at most the upstream's sizes: synchronously (its
 * result), or queued on a loop's connection (0, or -errno if libnbd
 * refused it). */
typedef int send_fn (void *arg, enum cmd cmd, char *buf, uint64_t len,
                     uint64_t off, uint32_t flags);

/* [off, off+len) as commands the upstream takes: reads and writes in
 * pieces of u->chunk, zeroes of ZERO_CHUNK (or zeroes written, for an
 * upstream without write-zeroes); FUA as the upstream's flag where it
 * has one (else the caller flushes after).  Stops at the first error. */
int up_send_range (struct nbd_store *u, send_fn *send, void *arg,
                   enum cmd cmd, char *buf, uint64_t len, uint64_t off,
                   bool fua, bool may_trim);

/* True if h still serves the export the device was built on. */
bool up_export_ok (struct nbd_store *u, struct nbd_handle *h);

/* Waits for the command cookie (nbd_aio_*'s result) on c, locked, and
 * ends it: 0 or -errno.  A connection that died, or whose upstream said
 * nothing for u->timeout, is closed (its request gets EIO). */
int up_cmd (struct nbd_store *u, struct conn *c, int64_t cookie);
/* Polls h (nbd_poll) until the command cookie has completed (cookie 0:
 * until nothing is in flight), bounded by timeout ns of silence (0:
 * none until the front end stops, then up_stop_limit): 0, -ETIMEDOUT if the upstream said nothing that long (the
 * caller takes it as down), or -EIO if it failed or h died.  For a
 * caller that owns h and may block. */
int up_wait (struct nbd_store *u, struct nbd_handle *h, int64_t cookie,
             uint64_t timeout);
/* The upstream said nothing for up_limit: one line on stderr, and it is
 * taken as down (up_set_down).  Once the front end stops, the line
 * (once) says that the requests in flight failed and whether writes
 * may be lost; none in the final flush, which says it itself.  The
 * caller closes its connection. */
void up_timed_out (struct nbd_store *u);
/* The upstream is taken as down (struct nbd_store's down; the prober
 * starts, the pool's idle connections are closed, every connection's
 * unflushed writes count as lost), without a line. */
void up_set_down (struct nbd_store *u);
/* How long a wait at a stop lasts at most: upstream-timeout=, or
 * STOP_WAIT for 0 (a stop must end). */
static inline uint64_t
up_stop_limit (struct nbd_store *u)
{
  return u->timeout ? u->timeout : STOP_WAIT;
}
/* What bounds a wait at a stop, for its line (after "no answer in Xs"). */
static inline const char *
up_stop_why (struct nbd_store *u)
{
  return u->timeout ? " (upstream-timeout=)" : ", the limit at a stop";
}
/* A line of the stop said what was lost so far. */
static inline void
up_stop_said (struct nbd_store *u)
{
  atomic_store (&u->said_losses, atomic_load (&u->base.losses));
}
/* How long a request waits for the upstream to say something: 0, no
 * limit (upstream-timeout=0), until the front end stops. */
static inline uint64_t
up_limit (struct nbd_store *u)
{
  return atomic_load_explicit (&u->stopping, memory_order_relaxed)
         ? up_stop_limit (u) : u->timeout;
}
static inline bool
up_down (struct nbd_store *u)
{
  return atomic_load_explicit (&u->down, memory_order_relaxed);
}
/* Closes h, telling the upstream (NBD_CMD_DISC) without waiting long
 * for it: the store is closing (at most until *deadline, ns). */
void up_close_handle (struct nbd_handle *h, uint64_t *deadline);
/* A synchronous flush of c (locked, connected). */
int up_flush_conn (struct nbd_store *u, struct conn *c);
/* The same if c (locked) is dirty: 0 also if the connection died (its
 * loss is counted, and the caller's flush goes on). */
int up_flush_dirty (struct nbd_store *u, struct conn *c);
/* Block status replies into a struct s4k_extent_rounder (opaque): the
 * one mapping of the upstream's runs, for both paths. */
int up_extent_cb (void *opaque, const char *context, uint64_t offset,
                  uint32_t *entries, size_t nr, int *error);

/* store_nbd_aio.c */
int up_submit (struct s4k_store *s, struct s4k_store_req *q);
/* The synchronous flush's share of the loops' connections (without
 * multi-conn): each dirty one flushed, by its own loop (asked through
 * its inbox; waited for), or here if the loop runs on the caller's
 * thread.  0, or the first error (a connection that died during it:
 * its loss counted, not an error). */
int up_flush_loops (struct nbd_store *u);
void up_aio_close (struct nbd_store *u, uint64_t *deadline);
void up_loop_gone (struct s4k_store *s, struct s4k_loop *loop);
/* The upstream is down: the loops' unflushed writes count as lost (their
 * connections stay their threads', closed when they fail). */
void up_aio_lost (struct nbd_store *u);

#endif
