/* SPDX-License-Identifier: BSD-3-Clause */
/* sect4k-server: TLS (GnuTLS) over in-memory buffers.  The event loop
 * keeps its own non-blocking socket I/O: what it receives is fed in and
 * decrypted here, what it sends is encrypted here first.  GnuTLS never
 * touches the socket, so a client that stalls mid-handshake only holds
 * its own connection (until the handshake timeout). */
#ifndef SECT4K_SERVER_TLS_H
#define SECT4K_SERVER_TLS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum tls_mode { TLS_OFF, TLS_ON, TLS_REQUIRE };

struct tls_options {
  const char *certificates;     /* directory of ca-cert.pem, server-*.pem */
  const char *psk_file;         /* username:hexkey lines */
  int verify_peer;              /* X.509: clients must show a trusted cert */
};

/* Loads the credentials once, before serving; -1 with a message logged. */
int tls_setup (const struct tls_options *o);

struct tls;

struct tls *tls_new (const char *name);
void tls_free (struct tls *t);
/* Raw bytes received from the socket. */
int tls_feed (struct tls *t, const void *p, size_t n);
/* Drives the handshake, then decrypts into p: bytes decrypted, 0 for
 * nothing yet (more input needed), -1 for an error or close (logged). */
ssize_t tls_read (struct tls *t, void *p, size_t len);
/* After tls_read's -1: true if that was the client's close_notify. */
int tls_peer_closed (const struct tls *t);
/* Appends close_notify to the output (once, after the handshake), after
 * everything written before it: without it, a client's TLS sees the end
 * of the connection as a truncation ("The TLS connection was
 * non-properly terminated"). */
void tls_bye (struct tls *t);
/* Anything decrypted or undecrypted still buffered. */
int tls_pending (struct tls *t);
/* Encrypts len bytes into the output; -1 on error (logged). */
int tls_write (struct tls *t, const void *p, size_t len);
/* The raw bytes waiting to go to the socket; the loop takes the buffer
 * (and later frees it). */
void tls_take_output (struct tls *t, uint8_t **p, size_t *len, size_t *cap);
size_t tls_output_bytes (const struct tls *t);

#endif
