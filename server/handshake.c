/* SPDX-License-Identifier: BSD-3-Clause */
/* sect4k-server: the handshake phase (NBD options: EXPORT_NAME, INFO, GO,
 * LIST, STRUCTURED_REPLY, SET/LIST_META_CONTEXT, ABORT).  request.c runs the
 * state machine and the transmission phase; protocol.h is what both
 * share. */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conn.h"
#include "protocol.h"
#include "tls.h"

/* ---- options ---------------------------------------------------------- */

static void
opt_reply (struct conn *c, uint32_t opt, uint32_t type,
           const void *data, size_t len)
{
  uint8_t *p = out_grow (c, 20 + len);
  if (!p)
    return;
  put64 (p, NBD_REP_MAGIC);
  put32 (p + 8, opt);
  put32 (p + 12, type);
  put32 (p + 16, len);
  if (len)
    memcpy (p + 20, data, len);
}

void
opt_error (struct conn *c, uint32_t opt, uint32_t type, const char *fmt, ...)
{
  char msg[512];
  va_list ap;
  va_start (ap, fmt);
  int n = vsnprintf (msg, sizeof msg, fmt, ap);
  va_end (ap);
  if (n < 0)
    n = 0;
  if ((size_t) n >= sizeof msg)
    n = sizeof msg - 1;
  if (c->cfg->verbose)
    log_msg ("%s: option %" PRIu32 " refused: %s", c->name, opt, msg);
  opt_reply (c, opt, type, msg, n);
}

static uint16_t
transmission_flags (const struct conn *c)
{
  uint16_t f = NBD_FLAG_HAS_FLAGS | NBD_FLAG_SEND_FLUSH | NBD_FLAG_SEND_CACHE |
               NBD_FLAG_CAN_MULTI_CONN;
  if (c->cfg->readonly)
    f |= NBD_FLAG_READ_ONLY;
  else
    f |= NBD_FLAG_SEND_FUA | NBD_FLAG_SEND_TRIM | NBD_FLAG_SEND_WRITE_ZEROES |
         NBD_FLAG_SEND_FAST_ZERO;
  if (c->cfg->rotational)
    f |= NBD_FLAG_ROTATIONAL;
  if (c->structured)
    f |= NBD_FLAG_SEND_DF;
  return f;
}

/* The export a client names ("" is the first), or NULL. */
static const struct server_cfg *
find_export (const struct conn *c, const uint8_t *name, size_t len)
{
  const struct server_cfg *e = c->cfg->first ? c->cfg->first : c->cfg;
  if (len == 0)
    return e;
  for (; e; e = e->next)
    if (strlen (e->export_name) == len && memcmp (e->export_name, name, len)
        == 0)
      return e;
  return NULL;
}

/* NBD_REP_ERR_UNKNOWN naming the exports that exist. */
static void
opt_unknown (struct conn *c, uint32_t opt, const uint8_t *d, size_t len)
{
  char name[80];
  printable (name, sizeof name, d, len);
  if (c->cfg->export_names)
    opt_error (c, opt, NBD_REP_ERR_UNKNOWN, "no export named '%s' (exports: "
               "%s)", name, c->cfg->export_names);
  else
    opt_error (c, opt, NBD_REP_ERR_UNKNOWN, "no export named '%s' (this "
               "server has one export, '%s')", name, c->cfg->export_name);
}

static void
enter_transmission (struct conn *c)
{
  c->transmission = true;
  c->state = ST_REQUEST;
  c->timed = c->loop && s4k_dev_timed (c->cfg->dev);
  if (c->loop && !s4k_dev_async (c->cfg->dev) && !c->timed)
    c->loop = NULL;             /* the export's requests all run inline */
  c->epoch = s4k_dev_power_cuts (c->cfg->dev);
  s4k_fault_epoch (c->epoch);   /* for requests in this same receive */
  if (c->cfg->verbose)
    log_msg ("%s: transmission (structured replies %s)", c->name,
             c->structured ? "on" : "off");
}

static void
opt_export_name (struct conn *c, const uint8_t *d, uint32_t len)
{
  char name[80];
  printable (name, sizeof name, d, len);
  const struct server_cfg *e = len > CONN_MAX_STRING ? NULL
                               : find_export (c, d, len);
  if (!e) {
    log_msg ("%s: NBD_OPT_EXPORT_NAME: no export named '%s'", c->name, name);
    hang_up (c, NULL);
    return;
  }
  c->cfg = e;
  if (c->cfg->require_block_size) {
    log_msg ("%s: client used NBD_OPT_EXPORT_NAME, which cannot ask for "
             "block sizes; refused because require-block-size=true",
             c->name);
    hang_up (c, NULL);
    return;
  }
  size_t n = c->no_zeroes ? 10 : 134;
  uint8_t *p = out_grow (c, n);
  if (!p)
    return;
  memset (p, 0, n);
  put64 (p, c->cfg->size);
  put16 (p + 8, transmission_flags (c));
  enter_transmission (c);
}

static void
send_info (struct conn *c, uint32_t opt, uint16_t type, const void *data,
           size_t len)
{
  uint8_t buf[2 + CONN_MAX_STRING];
  put16 (buf, type);
  memcpy (buf + 2, data, len);
  opt_reply (c, opt, NBD_REP_INFO, buf, 2 + len);
}

/* NBD_OPT_INFO and NBD_OPT_GO. */
static void
opt_info_go (struct conn *c, uint32_t opt, const uint8_t *d, uint32_t len)
{
  const struct server_cfg *cfg = c->cfg;
  if (len < 6 || get32 (d) > len - 6) {
    opt_error (c, opt, NBD_REP_ERR_INVALID, "option data too short");
    return;
  }
  uint32_t namelen = get32 (d);
  uint16_t nreq = get16 (d + 4 + namelen);
  if ((uint64_t) 4 + namelen + 2 + 2u * nreq != len) {
    opt_error (c, opt, NBD_REP_ERR_INVALID,
               "option length %" PRIu32 " does not match its contents", len);
    return;
  }
  if (namelen > CONN_MAX_STRING) {
    opt_error (c, opt, NBD_REP_ERR_INVALID, "export name longer than %u bytes",
               CONN_MAX_STRING);
    return;
  }
  bool want_name = false, want_desc = false, want_bs = false;
  for (unsigned i = 0; i < nreq; i++) {
    switch (get16 (d + 4 + namelen + 2 + 2 * i)) {
    case NBD_INFO_NAME: want_name = true; break;
    case NBD_INFO_DESCRIPTION: want_desc = true; break;
    case NBD_INFO_BLOCK_SIZE: want_bs = true; break;
    default: break;             /* unknown requests are ignored */
    }
  }
  const struct server_cfg *e = find_export (c, d + 4, namelen);
  if (!e) {
    opt_unknown (c, opt, d + 4, namelen);
    return;
  }
  c->cfg = cfg = e;
  if (cfg->require_block_size && !want_bs) {
    log_msg ("%s: client did not ask for block sizes; refused with "
             "NBD_REP_ERR_BLOCK_SIZE_REQD (require-block-size=true)", c->name);
    opt_error (c, opt, NBD_REP_ERR_BLOCK_SIZE_REQD,
               "this server requires clients to ask for block sizes "
               "(NBD_INFO_BLOCK_SIZE): requests must be multiples of the "
               "logical sector size %" PRIu32, cfg->minimum);
    return;
  }

  uint8_t exp[10];
  put64 (exp, cfg->size);
  put16 (exp + 8, transmission_flags (c));
  send_info (c, opt, NBD_INFO_EXPORT, exp, sizeof exp);
  if (want_name)
    send_info (c, opt, NBD_INFO_NAME, cfg->export_name,
               strlen (cfg->export_name));
  if (want_desc)
    send_info (c, opt, NBD_INFO_DESCRIPTION, cfg->description,
               strlen (cfg->description));
  /* Sent even when not asked for: the spec allows it and a client that
   * knows the field learns the geometry. */
  uint8_t bs[12];
  put32 (bs, cfg->minimum);
  put32 (bs + 4, cfg->preferred);
  put32 (bs + 8, cfg->maximum);
  send_info (c, opt, NBD_INFO_BLOCK_SIZE, bs, sizeof bs);
  opt_reply (c, opt, NBD_REP_ACK, NULL, 0);
  if (opt == NBD_OPT_GO)
    enter_transmission (c);
}

static void
opt_list (struct conn *c, uint32_t len)
{
  if (len != 0) {
    opt_error (c, NBD_OPT_LIST, NBD_REP_ERR_INVALID,
               "NBD_OPT_LIST takes no data");
    return;
  }
  for (const struct server_cfg *cfg = find_export (c, NULL, 0); cfg;
       cfg = cfg->next) {
    size_t nl = strlen (cfg->export_name), dl = strlen (cfg->description);
    uint8_t buf[4 + CONN_MAX_STRING + sizeof cfg->description];
    put32 (buf, nl);
    memcpy (buf + 4, cfg->export_name, nl);
    memcpy (buf + 4 + nl, cfg->description, dl);
    opt_reply (c, NBD_OPT_LIST, NBD_REP_SERVER, buf, 4 + nl + dl);
  }
  opt_reply (c, NBD_OPT_LIST, NBD_REP_ACK, NULL, 0);
}


static void
meta_reply (struct conn *c, uint32_t opt, uint32_t id)
{
  uint8_t buf[4 + sizeof BASE_ALLOCATION];
  put32 (buf, id);
  memcpy (buf + 4, BASE_ALLOCATION, sizeof BASE_ALLOCATION - 1);
  opt_reply (c, opt, NBD_REP_META_CONTEXT, buf, sizeof buf - 1);
}

/* NBD_OPT_LIST_META_CONTEXT and NBD_OPT_SET_META_CONTEXT. */
static void
opt_meta (struct conn *c, uint32_t opt, const uint8_t *d, uint32_t len)
{
  if (!c->structured) {
    opt_error (c, opt, NBD_REP_ERR_INVALID,
               "negotiate structured replies before metadata contexts");
    return;
  }
  if (len < 8 || get32 (d) > len - 8) {
    opt_error (c, opt, NBD_REP_ERR_INVALID, "option data too short");
    return;
  }
  uint32_t namelen = get32 (d);
  uint32_t nq = get32 (d + 4 + namelen);
  uint32_t pos = 8 + namelen;
  /* Check the whole query list before answering anything. */
  for (uint32_t i = 0; i < nq; i++) {
    if (len - pos < 4 || get32 (d + pos) > len - pos - 4) {
      opt_error (c, opt, NBD_REP_ERR_INVALID,
                 "query %" PRIu32 " runs past the option data", i);
      return;
    }
    pos += 4 + get32 (d + pos);
  }
  if (pos != len) {
    opt_error (c, opt, NBD_REP_ERR_INVALID,
               "option length %" PRIu32 " does not match its contents", len);
    return;
  }
  if (!find_export (c, d + 4, namelen)) {
    opt_unknown (c, opt, d + 4, namelen);
    return;
  }
  bool set = opt == NBD_OPT_SET_META_CONTEXT, found = false;
  if (set)
    c->meta_allocation = false;
  if (!set && nq == 0)
    found = true;               /* list everything */
  pos = 8 + namelen;
  for (uint32_t i = 0; i < nq; i++) {
    uint32_t ql = get32 (d + pos);
    const uint8_t *q = d + pos + 4;
    pos += 4 + ql;
    bool exact = ql == strlen (BASE_ALLOCATION) &&
                 memcmp (q, BASE_ALLOCATION, ql) == 0;
    bool ns = ql == 5 && memcmp (q, "base:", 5) == 0;
    if (exact || (!set && ns))
      found = true;
  }
  if (found) {
    meta_reply (c, opt, set ? META_ID : 0);
    if (set)
      c->meta_allocation = true;
  }
  opt_reply (c, opt, NBD_REP_ACK, NULL, 0);
}

/* NBD_OPT_STARTTLS: the reply goes out in clear, then the loop starts
 * TLS; what was negotiated before is forgotten (the spec). */
static void
opt_starttls (struct conn *c, uint32_t len)
{
  if (c->cfg->tls == TLS_OFF)
    opt_error (c, NBD_OPT_STARTTLS, NBD_REP_ERR_UNSUP,
               "TLS is not enabled on this server (--tls)");
  else if (c->tls_active)
    opt_error (c, NBD_OPT_STARTTLS, NBD_REP_ERR_INVALID,
               "TLS is already on");
  else if (len != 0)
    opt_error (c, NBD_OPT_STARTTLS, NBD_REP_ERR_INVALID,
               "NBD_OPT_STARTTLS takes no data");
  else {
    opt_reply (c, NBD_OPT_STARTTLS, NBD_REP_ACK, NULL, 0);
    c->starttls = true;
    c->tls_active = true;
    c->structured = false;
    c->meta_allocation = false;
    c->cfg = c->cfg->first ? c->cfg->first : c->cfg;
  }
}

bool
handshake_tls_refused (struct conn *c, uint32_t opt)
{
  if (c->cfg->tls != TLS_REQUIRE || c->tls_active ||
      opt == NBD_OPT_STARTTLS || opt == NBD_OPT_ABORT)
    return false;
  if (opt == NBD_OPT_EXPORT_NAME) {
    log_msg ("%s: NBD_OPT_EXPORT_NAME before TLS (--tls=require): "
             "connection closed", c->name);
    hang_up (c, NULL);
  }
  else
    opt_error (c, opt, NBD_REP_ERR_TLS_REQD,
               "this server requires TLS (--tls=require): send "
               "NBD_OPT_STARTTLS first");
  return true;
}

void
handshake_option (struct conn *c, uint32_t opt, const uint8_t *d, uint32_t len)
{
  if (handshake_tls_refused (c, opt))
    return;
  switch (opt) {
  case NBD_OPT_EXPORT_NAME:
    opt_export_name (c, d, len);
    break;
  case NBD_OPT_ABORT:
    opt_reply (c, opt, NBD_REP_ACK, NULL, 0);
    c->state = ST_DONE;
    break;
  case NBD_OPT_LIST:
    opt_list (c, len);
    break;
  case NBD_OPT_INFO:
  case NBD_OPT_GO:
    opt_info_go (c, opt, d, len);
    break;
  case NBD_OPT_STRUCTURED_REPLY:
    if (len != 0)
      opt_error (c, opt, NBD_REP_ERR_INVALID,
                 "NBD_OPT_STRUCTURED_REPLY takes no data");
    else {
      c->structured = true;
      opt_reply (c, opt, NBD_REP_ACK, NULL, 0);
    }
    break;
  case NBD_OPT_LIST_META_CONTEXT:
  case NBD_OPT_SET_META_CONTEXT:
    opt_meta (c, opt, d, len);
    break;
  case NBD_OPT_STARTTLS:
    opt_starttls (c, len);
    break;
  default:
    opt_error (c, opt, NBD_REP_ERR_UNSUP, "option %" PRIu32 " is not "
               "supported", opt);
    break;
  }
}

