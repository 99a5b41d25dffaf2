/* SPDX-License-Identifier: BSD-3-Clause */
/* sect4k-server: what the files of one connection share, private to
 * them: the state machine and request intake (request.c), the handshake's
 * options (handshake.c), replies and read paths (reply.c), request slots
 * and fairness (sched.c).  conn.h is what the event loop and the fuzzer
 * see. */
#ifndef SECT4K_PROTOCOL_H
#define SECT4K_PROTOCOL_H

#include <endian.h>
#include <stdint.h>
#include <string.h>

#include "conn.h"

/* The meta context the server offers, and its id. */
#define BASE_ALLOCATION "base:allocation"
#define META_ID 1

static inline void put16 (uint8_t *p, uint16_t v) { v = htobe16 (v); memcpy (p, &v, 2); }
static inline void put32 (uint8_t *p, uint32_t v) { v = htobe32 (v); memcpy (p, &v, 4); }
static inline void put64 (uint8_t *p, uint64_t v) { v = htobe64 (v); memcpy (p, &v, 8); }
static inline uint16_t get16 (const uint8_t *p) { uint16_t v; memcpy (&v, p, 2); return be16toh (v); }
static inline uint32_t get32 (const uint8_t *p) { uint32_t v; memcpy (&v, p, 4); return be32toh (v); }
static inline uint64_t get64 (const uint8_t *p) { uint64_t v; memcpy (&v, p, 8); return be64toh (v); }

/* ---- request.c ---- */

/* Hangs up at once (protocol violation, allocation failure): the event
 * loop closes without sending what is left in c->out. */
void hang_up (struct conn *c, const char *why);
/* Copies client bytes into a log-safe string. */
void printable (char *dst, size_t dstlen, const uint8_t *src, size_t n);

/* ---- reply.c ---- */

/* Appends n bytes to the output and returns where they go; NULL (after
 * hanging up) when memory runs out. */
uint8_t *out_grow (struct conn *c, size_t n);
/* A structured reply chunk's 20-byte header. */
void chunk_header (uint8_t *p, uint16_t flags, uint16_t type,
                   uint64_t cookie, uint32_t len);
/* An error reply to rq (err an errno value): a structured error chunk
 * carrying msg, or a simple reply. */
void reply_error (struct conn *c, const struct nbd_request *rq, int err,
                  const char *msg);
/* The same, the message formatted (and logged under -v). */
void reply_errorf (struct conn *c, const struct nbd_request *rq, int err,
                   const char *fmt, ...)
  __attribute__ ((format (printf, 4, 5)));
/* Replies to rq's engine result r (0 or -errno) for operation op. */
void reply_result (struct conn *c, const struct nbd_request *rq, int r,
                   enum s4k_op op);
/* A read of the memory store answered by reference; false (nothing done)
 * if the store cannot, so the caller reads into a copy. */
bool read_by_ref (struct conn *c, const struct nbd_request *rq);
/* The reply to a read, write, flush, zero or trim whose engine result is
 * r; a read's header space and data are in c->out from base. */
void cmd_done (struct conn *c, const struct nbd_request *rq, int r,
               size_t base);
/* Answers the block status request in c->req: through slot s where the
 * store's block status is a round trip, else (s NULL) inline. */
void cmd_block_status (struct conn *c, struct slot *s);
/* The most descriptors block status rq may get. */
unsigned status_max (const struct nbd_request *rq);
/* Slot s's block status ended with r: its reply goes to c->out. */
void slot_status_done (struct conn *c, struct slot *s, int r);

/* ---- sched.c ---- */

/* A page-aligned buffer of cap bytes starting with the first keep bytes
 * of b->p (which it frees), or NULL (b unchanged). */
uint8_t *slot_buf_alloc (struct pbuf *b, size_t cap, size_t keep);
/* Reserves a slot for the request in c->req; NULL if it must wait for a
 * slot to finish (nothing changed), or after hanging up. */
struct slot *slot_get (struct conn *c);
/* Slot s's engine result r: its reply goes to c->out, s is free again. */
void slot_done (struct conn *c, struct slot *s, int r);
/* The engine's op of a request type (S4K_OP_EXTENTS for block status,
 * which has no media time; S4K_OP_CACHE for the others). */
enum s4k_op cmd_op (uint16_t type);
/* The timing model: s's reply (result r) waits for its modelled
 * completion; false if there is nothing to wait for. */
bool slot_delay (struct conn *c, struct slot *s, int r);

/* ---- handshake.c ---- */

/* An error reply to option opt. */
void opt_error (struct conn *c, uint32_t opt, uint32_t type,
                const char *fmt, ...)
  __attribute__ ((format (printf, 4, 5)));
/* One option: its reply goes to c->out; may move the
 * connection to transmission or end it. */
void handshake_option (struct conn *c, uint32_t opt, const uint8_t *d,
                       uint32_t len);
/* Under --tls=require, before TLS, any option but STARTTLS and ABORT is
 * refused (NBD_REP_ERR_TLS_REQD; EXPORT_NAME: the connection ends),
 * whatever its length or data: true if opt was. */
bool handshake_tls_refused (struct conn *c, uint32_t opt);

#endif
