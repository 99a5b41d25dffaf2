/* SPDX-License-Identifier: BSD-3-Clause */
/* sect4k-server: TLS with GnuTLS, X.509 or PSK, the transport being
 * two memory buffers (tls.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <gnutls/gnutls.h>

#include "conn.h"
#include "tls.h"

static gnutls_certificate_credentials_t x509_creds;
static gnutls_psk_server_credentials_t psk_creds;
static gnutls_priority_t priority;
static int verify_peer;

struct buf {
  uint8_t *p;
  size_t len, cap, head;
};

struct tls {
  gnutls_session_t s;
  const char *name;
  struct buf in, out;
  int handshaken;
  int closed;                   /* the peer's close_notify came */
  int bye;                      /* ours is in the output */
};

static int
buf_add (struct buf *b, const void *p, size_t n)
{
  if (n == 0)
    return 0;
  if (b->head > 0 && b->head == b->len)
    b->head = b->len = 0;
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 16384;
    while (cap < b->len + n)
      cap *= 2;
    uint8_t *q = realloc (b->p, cap);
    if (!q)
      return -1;
    b->p = q;
    b->cap = cap;
  }
  memcpy (b->p + b->len, p, n);
  b->len += n;
  return 0;
}

static ssize_t
push (gnutls_transport_ptr_t ptr, const void *p, size_t n)
{
  struct tls *t = ptr;
  if (buf_add (&t->out, p, n) == -1) {
    gnutls_transport_set_errno (t->s, ENOMEM);
    return -1;
  }
  return n;
}

static ssize_t
pull (gnutls_transport_ptr_t ptr, void *p, size_t n)
{
  struct tls *t = ptr;
  size_t have = t->in.len - t->in.head;
  if (have == 0) {
    gnutls_transport_set_errno (t->s, EAGAIN);
    return -1;
  }
  if (n > have)
    n = have;
  memcpy (p, t->in.p + t->in.head, n);
  t->in.head += n;
  return n;
}

static int
path_in (char *out, size_t size, const char *dir, const char *file)
{
  if ((size_t) snprintf (out, size, "%s/%s", dir, file) >= size)
    return -1;
  return 0;
}

int
tls_setup (const struct tls_options *o)
{
  int r;
  if (gnutls_global_init () < 0) {
    log_msg ("TLS: GnuTLS did not initialise");
    return -1;
  }
  if (o->verify_peer && !o->certificates) {
    log_msg ("--tls-verify-peer needs --tls-certificates (it checks X.509 "
             "client certificates)");
    return -1;
  }
  if (o->certificates && o->psk_file) {
    log_msg ("--tls-certificates and --tls-psk: choose one");
    return -1;
  }
  if (!o->certificates && !o->psk_file) {
    log_msg ("--tls=on or require needs --tls-certificates DIR or "
             "--tls-psk FILE");
    return -1;
  }
  verify_peer = o->verify_peer;
  const char *prio = "NORMAL";
  if (o->certificates) {
    char ca[4096], cert[4096], key[4096];
    if (path_in (ca, sizeof ca, o->certificates, "ca-cert.pem") == -1 ||
        path_in (cert, sizeof cert, o->certificates, "server-cert.pem") == -1 ||
        path_in (key, sizeof key, o->certificates, "server-key.pem") == -1) {
      log_msg ("--tls-certificates: path too long");
      return -1;
    }
    if (access (cert, R_OK) == -1 || access (key, R_OK) == -1) {
      log_msg ("--tls-certificates %s: cannot read %s or %s: %s",
               o->certificates, "server-cert.pem", "server-key.pem",
               strerror (errno));
      return -1;
    }
    gnutls_certificate_allocate_credentials (&x509_creds);
    if (access (ca, R_OK) == 0) {
      r = gnutls_certificate_set_x509_trust_file (x509_creds, ca,
                                                  GNUTLS_X509_FMT_PEM);
      if (r < 0) {
        log_msg ("--tls-certificates: %s: %s", ca, gnutls_strerror (r));
        return -1;
      }
    }
    else if (verify_peer) {
      log_msg ("--tls-verify-peer: cannot read %s: %s", ca, strerror (errno));
      return -1;
    }
    r = gnutls_certificate_set_x509_key_file (x509_creds, cert, key,
                                              GNUTLS_X509_FMT_PEM);
    if (r < 0) {
      log_msg ("--tls-certificates: %s, %s: %s", cert, key,
               gnutls_strerror (r));
      return -1;
    }
  }
  else {
    if (access (o->psk_file, R_OK) == -1) {
      log_msg ("--tls-psk %s: %s", o->psk_file, strerror (errno));
      return -1;
    }
    gnutls_psk_allocate_server_credentials (&psk_creds);
    r = gnutls_psk_set_server_credentials_file (psk_creds, o->psk_file);
    if (r < 0) {
      log_msg ("--tls-psk %s: %s", o->psk_file, gnutls_strerror (r));
      return -1;
    }
    prio = "NORMAL:-VERS-SSL3.0:+ECDHE-PSK:+DHE-PSK:+PSK";
  }
  r = gnutls_priority_init (&priority, prio, NULL);
  if (r < 0) {
    log_msg ("TLS priority: %s", gnutls_strerror (r));
    return -1;
  }
  return 0;
}

struct tls *
tls_new (const char *name)
{
  struct tls *t = calloc (1, sizeof *t);
  if (!t)
    return NULL;
  t->name = name;
  if (gnutls_init (&t->s, GNUTLS_SERVER | GNUTLS_NONBLOCK) < 0) {
    free (t);
    return NULL;
  }
  gnutls_priority_set (t->s, priority);
  if (x509_creds) {
    gnutls_credentials_set (t->s, GNUTLS_CRD_CERTIFICATE, x509_creds);
    gnutls_certificate_server_set_request (t->s, verify_peer
                                           ? GNUTLS_CERT_REQUIRE
                                           : GNUTLS_CERT_IGNORE);
    if (verify_peer)
      gnutls_session_set_verify_cert (t->s, NULL, 0);
  }
  else
    gnutls_credentials_set (t->s, GNUTLS_CRD_PSK, psk_creds);
  gnutls_transport_set_ptr (t->s, t);
  gnutls_transport_set_push_function (t->s, push);
  gnutls_transport_set_pull_function (t->s, pull);
  return t;
}

void
tls_free (struct tls *t)
{
  if (!t)
    return;
  gnutls_deinit (t->s);
  free (t->in.p);
  free (t->out.p);
  free (t);
}

int
tls_feed (struct tls *t, const void *p, size_t n)
{
  return buf_add (&t->in, p, n);
}

ssize_t
tls_read (struct tls *t, void *p, size_t len)
{
  if (!t->handshaken) {
    int r = gnutls_handshake (t->s);
    if (r == GNUTLS_E_AGAIN || r == GNUTLS_E_INTERRUPTED)
      return 0;
    if (r < 0) {
      log_msg ("%s: TLS handshake failed: %s", t->name, gnutls_strerror (r));
      return -1;
    }
    t->handshaken = 1;
  }
  if (len == 0)
    return 0;
  ssize_t r = gnutls_record_recv (t->s, p, len);
  if (r == GNUTLS_E_AGAIN || r == GNUTLS_E_INTERRUPTED)
    return 0;
  if (r == 0) {
    t->closed = 1;              /* close_notify */
    return -1;
  }
  if (r < 0) {
    log_msg ("%s: TLS: %s", t->name, gnutls_strerror (r));
    return -1;
  }
  return r;
}

int
tls_pending (struct tls *t)
{
  return gnutls_record_check_pending (t->s) > 0 || t->in.len > t->in.head;
}

int
tls_write (struct tls *t, const void *p, size_t len)
{
  const uint8_t *q = p;
  while (len > 0) {
    ssize_t r = gnutls_record_send (t->s, q, len);
    if (r < 0) {
      log_msg ("%s: TLS: %s", t->name, gnutls_strerror (r));
      return -1;
    }
    q += r;
    len -= r;
  }
  return 0;
}

size_t
tls_output_bytes (const struct tls *t)
{
  return t->out.len - t->out.head;
}

void
tls_take_output (struct tls *t, uint8_t **p, size_t *len, size_t *cap)
{
  *p = t->out.p;
  *len = t->out.len;
  *cap = t->out.cap;
  t->out = (struct buf) { 0 };
}

int
tls_peer_closed (const struct tls *t)
{
  return t->closed;
}

void
tls_bye (struct tls *t)
{
  if (!t->handshaken || t->bye)
    return;
  t->bye = 1;
  /* SHUT_WR: the alert is pushed into the output and gnutls_bye returns
   * without waiting for the client's own (nbdkit does not wait either). */
  int r = gnutls_bye (t->s, GNUTLS_SHUT_WR);
  if (r < 0)
    log_msg ("%s: TLS close_notify: %s", t->name, gnutls_strerror (r));
}
