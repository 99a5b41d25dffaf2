/* SPDX-License-Identifier: BSD-3-Clause */
/* One NBD connection as a byte-in, byte-out state machine.
 *
 * No sockets here: the event loop (loop.c) puts received bytes where
 * conn_recv_area says, calls conn_received, and sends what accumulates in
 * c->out.  The fuzzer (fuzz.c) drives the same code with arbitrary bytes.
 * With an asynchronous store (file=), reads, writes, flushes, zeroes and
 * trims each take a request slot (its own engine aio, header copy and
 * buffer): up to CONN_MAX_INFLIGHT of them run at once and finish on the
 * event loop's thread, in any order (replies carry the cookie); so does
 * block status where the store's is a round trip (upstream=).  Cache,
 * other block status, refusals, and everything with the memory store run
 * inline in conn_process, in order -- except under the timing model
 * (timing=, latency-*=), where the memory store's requests take slots
 * too: each reply then waits for its modelled completion on an io_uring
 * timeout of the loop.  Inline reads of the memory store put only their
 * headers and data in c->out: only holes are sent by reference
 * (c->refs, read_by_ref in reply.c).  The code: request.c (input),
 * handshake.c (options), reply.c (replies, read paths), sched.c (slots,
 * fairness). */
#ifndef SECT4K_SERVER_CONN_H
#define SECT4K_SERVER_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <linux/time_types.h>

#include "sect4k/sect4k.h"
#include "nbd.h"

/* Bounds on what a client can make us hold. */
#define CONN_MAX_OPTION   16384u     /* option data kept in memory */
#define CONN_MAX_STRING   4096u      /* names and queries (the spec's limit) */
#define CONN_IN_SIZE      (64u * 1024 + CONN_MAX_OPTION)
#define CONN_OUT_HIGH     (256u * 1024)  /* stop parsing above this output */
#define CONN_MAX_EXTENTS  1024u      /* descriptors in one block status reply */
/* A refused write's payload is read and dropped before its error reply
 * (the connection goes on) up to this, twice the longest request served,
 * as nbdkit does; beyond, the connection ends (the spec allows it above
 * 32 MiB). */
#define CONN_MAX_DISCARD  (2u * S4K_MAX_MAX_REQUEST)
/* Asynchronous store: requests in flight at once, and the read and write
 * bytes they may hold (a single request may exceed it, alone). */
#define CONN_MAX_INFLIGHT 16u
#define CONN_INFLIGHT_BYTES (8u << 20)
/* Slot buffers above this are freed after use, and so are those that
 * would make the kept ones hold more than CONN_INFLIGHT_BYTES. */
#define CONN_SLOT_KEEP    (1u << 20)
/* Fairness: the work a connection starts per turn of the event loop,
 * counted as request bytes (read, written, zeroed, ...; at most
 * CONN_MAX_COST per request) plus CONN_REQ_COST per request.  Counting
 * reply bytes is not enough: a read of a hole gets a tiny reply. */
#define CONN_TURN_BYTES   (8u << 20)
#define CONN_REQ_COST     4096u
#define CONN_MAX_COST     (64u << 20)

/* Settings shared by every connection; read-only once serving.  One
 * per export: a connection's cfg is the export it last named. */
struct server_cfg {
  struct s4k_dev *dev;
  const char *export_name;        /* "" too always selects the first */
  const struct server_cfg *first; /* the default export (NULL: this one
                                     alone) */
  const struct server_cfg *next;  /* the next export, or NULL */
  const char *export_names;       /* "a, b, c" for messages (NULL: one) */
  char description[256];
  uint64_t size;
  uint32_t minimum, preferred, maximum;
  /* The longest read or write served: maximum, or at strict=false
   * S4K_MAX_MAX_REQUEST, nbdkit's own limit, as the plugin does. */
  uint32_t longest;
  bool readonly;
  bool rotational;                /* NBD_FLAG_ROTATIONAL: the timing model
                                     rotates (s4k_timing_rotation_rate) */
  bool require_block_size;
  bool verbose;
  int tls;                        /* enum tls_mode (tls.h) */
};

/* The NBD side's counters besides requests[], one line each: the struct,
 * the sum over the loops and --nbd-stats expand this list. */
#define CONN_COUNTERS(X) X (errors) X (bytes_read) X (bytes_written)

struct conn_stats {
  uint64_t requests[NBD_CMD_COUNT];
#define CONN_FIELD(name) uint64_t name;
  CONN_COUNTERS (CONN_FIELD)
#undef CONN_FIELD
};

struct obuf {
  uint8_t *p;
  size_t len, cap;
};

/* Output that is not copied into an obuf: a read answered by reference
 * (s4k_read_iov), its bytes in the store's memory or a zero buffer.
 * Each piece goes into the byte stream before obuf byte `at`, after the
 * pieces listed before it with the same `at`. */
struct oref {
  size_t at;
  uint64_t before;                /* bytes of the pieces listed before */
  const void *p;
  size_t len;
};
struct orefs {
  struct oref *v;
  size_t n, cap;
  uint64_t bytes;                 /* sum of len */
};
/* Most iovecs one send takes (the kernel's UIO_MAXIOV), and one read
 * answered by reference (beyond, it is copied). */
#define CONN_IOV_MAX 1024u

/* A buffer that grows as bytes arrive (write payloads, slot data). */
struct pbuf {
  uint8_t *p;
  size_t cap;
};

/* A request header as the client sent it. */
struct nbd_request {
  uint16_t flags, type;
  uint64_t cookie, offset;
  uint32_t length;
};

struct conn;

/* Block status descriptors being gathered (8 bytes each, at most max). */
struct status_ctx {
  uint8_t *d;
  unsigned n, max;
};

/* One asynchronous request: reserved when its header is parsed (a write
 * then receives its payload into buf), in the engine from submission
 * until its done callback.  aio and buf are kept for reuse. */
struct slot {
  struct conn *c;
  struct s4k_aio *aio;            /* created on first use */
  struct nbd_request req;
  struct pbuf buf;                /* write payload, read data, or block
                                     status descriptors */
  struct status_ctx status;       /* block status: into buf */
  bool used;                      /* reserved or in the engine */
  /* The timing model: the reply waits for the modelled completion. */
  struct s4k_completion timer;
  struct __kernel_timespec due;
  int result;                     /* the engine's, replied at due */
  uint64_t client_tag;            /* s4k_client_begin's */
  bool timing;                    /* the timer is armed (a closing
                                     connection cancels it) */
};

enum conn_state {
  ST_CLIENT_FLAGS,      /* waiting for the 4-byte client flags */
  ST_OPTION,            /* waiting for an option header + data */
  ST_REQUEST,           /* transmission: waiting for a request header */
  ST_PAYLOAD,           /* receiving a write payload */
  ST_DISCARD,           /* discarding bytes of a refused option/write */
  ST_DONE,              /* no more input: flush output, then close */
};

struct conn {
  const struct server_cfg *cfg;
  enum conn_state state;
  const char *name;               /* peer, for log lines */

  uint8_t *in;                    /* CONN_IN_SIZE bytes */
  size_t in_head, in_tail;        /* unparsed bytes are in[head, tail) */

  /* The request being parsed, received or discarded. */
  struct nbd_request req;
  uint32_t option;                /* option being discarded */
  struct pbuf payload;            /* inline write payload, <= cfg->longest */
  struct slot *pay_slot;          /* the slot whose buf takes this write's
                                     payload (NULL: payload, inline) */
  size_t payload_have;
  uint64_t discard;               /* bytes still to discard */
  int discard_err;                /* its errno, replied once the payload
                                     is dropped (else 0) */
  char discard_msg[256];          /* and its message */

  bool transmission;              /* handshake finished */
  bool starttls;                  /* STARTTLS answered: the loop starts
                                     TLS once that reply is sent */
  bool tls_active;                /* the session runs over TLS */
  unsigned epoch;                 /* its export's power cuts before it */
  struct s4k_client client;       /* its writes a loss may have taken */
  bool no_zeroes, structured, meta_allocation;
  bool refusal_logged;
  bool recv_payload;              /* the receive area is the payload */
  bool stopping;                  /* server shutdown: no new input */
  bool eshutdown;                 /* server shutdown: requests still come
                                     in, and get ESHUTDOWN */
  bool hangup;                    /* close without sending what is left */
  bool yielded;                   /* out of credit: call conn_turn later */
  int64_t credit;                 /* work left this turn (may go below 0) */

  struct obuf out;                /* replies not yet handed to the socket */
  struct orefs refs;              /* and their bytes sent by reference */
  uint64_t req_cost;              /* the work of the request parsed last,
                                     beyond CONN_REQ_COST (fairness) */
  struct conn_stats stats;

  /* Asynchronous store only (loop NULL: everything inline).  The engine
   * only ever writes into slot buffers, never into out, so out may be
   * handed to the socket at any time. */
  struct s4k_loop *loop;
  bool timed;                     /* timing model: replies wait on timers */
  unsigned inflight;              /* slots in the engine or waiting for
                                     their modelled completion */
  unsigned slots_used;            /* slots reserved or in the engine */
  uint64_t inflight_bytes;        /* read/write bytes of the used slots */
  uint64_t kept_bytes;            /* buffer bytes of the idle slots */
  /* Set by the event loop: a request finished (reply in out, parsing
   * resumed), so the connection can send and receive again. */
  void (*wake) (struct conn *c);
  struct slot slots[CONN_MAX_INFLIGHT];
};

/* Queues the greeting.  With a loop and an asynchronous device, reads,
 * writes, flushes, zeroes and trims finish on that loop (set c->wake
 * too); with NULL, everything runs inline.  Returns -1 on allocation
 * failure. */
int conn_init (struct conn *c, const struct server_cfg *cfg, const char *name,
               struct s4k_loop *loop);
void conn_free (struct conn *c);

/* Where the next received bytes go; *len 0 means do not receive now
 * (output backlog, or no more input wanted). */
void conn_recv_area (struct conn *c, uint8_t **p, size_t *len);
/* n bytes arrived at the area conn_recv_area gave; parses and runs what
 * is complete. */
void conn_received (struct conn *c, size_t n);
/* Parses and runs what is complete (after output was drained). */
void conn_process (struct conn *c);
/* A new turn of the event loop for a connection that yielded: its
 * credit grows by CONN_TURN_BYTES (to at most that), then conn_process.
 * Returns the work done (credit used). */
int64_t conn_turn (struct conn *c);
/* The socket is closing: parse and start nothing more (requests in
 * flight still finish; free only once c->inflight is 0). */
void conn_close (struct conn *c);

/* Bytes of output not yet handed to the socket. */
static inline uint64_t conn_out_bytes (const struct conn *c)
{
  return c->out.len + c->refs.bytes;
}
/* The output b (with its pieces r) from stream byte pos on, as at most
 * max (>= 1) iovecs.  *k is the first piece not wholly before pos: 0 at
 * first, kept while pos only grows.  Returns how many iovecs. */
struct iovec;
unsigned out_iov (const struct obuf *b, const struct orefs *r, uint64_t pos,
                  size_t *k, struct iovec *iov, unsigned max);

static inline bool conn_in_handshake (const struct conn *c)
{
  return !c->transmission && c->state != ST_DONE;
}
/* No more input will be read: once no request is in flight
 * (c->inflight == 0), send what is in c->out (unless hangup), then
 * close.  Slot buffers and aios are freed (conn_free) only then. */
static inline bool conn_done (const struct conn *c)
{
  return c->state == ST_DONE;
}

void log_msg (const char *fmt, ...) __attribute__ ((format (printf, 1, 2)));

#endif
