/* sect4k-server: what the connection's two halves share: the handshake
 * (handshake.c) and the state machine with the transmission phase
 * (conn.c). */
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

/* Hangs up at once (protocol violation, allocation failure): the event
 * loop closes without sending what is left in c->out. */
void hang_up (struct conn *c, const char *why);
/* Appends n bytes to the output and returns where they go; NULL (after
 * hanging up) when memory runs out. */
uint8_t *out_grow (struct conn *c, size_t n);
/* Copies client bytes into a log-safe string. */
void printable (char *dst, size_t dstlen, const uint8_t *src, size_t n);

/* An error reply to option opt (handshake.c). */
void opt_error (struct conn *c, uint32_t opt, uint32_t type,
                const char *fmt, ...)
  __attribute__ ((format (printf, 4, 5)));
/* One option (handshake.c): its reply goes to c->out; may move the
 * connection to transmission or end it. */
void handshake_option (struct conn *c, uint32_t opt, const uint8_t *d,
                       uint32_t len);

#endif
