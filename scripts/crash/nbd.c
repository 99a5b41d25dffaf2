/* SPDX-License-Identifier: BSD-3-Clause */
/* sect4k-crash: the NBD server that serves a state
 * (the files: crash.h). */
#include "crash.h"

struct state cur;                /* the state being served */
struct map scratch;              /* the checker's own writes */
int listen_fd = -1;
char sock_path[108], sock_dir[64];

struct tsec *
state_sector (uint64_t k)
{
  size_t lo = 0, hi = cur.nt;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (cur.t[mid].k < k)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < cur.nt && cur.t[lo].k == k ? &cur.t[lo] : NULL;
}

/* Sector k as the checker sees it; -EIO if unreadable. */
int
read_sector (uint64_t k, unsigned char *buf)
{
  uint64_t s, e;
  sector_range (k, &s, &e);
  struct sec *x = map_find (&scratch, k);
  if (x) {
    memcpy (buf, x->data, e - s);
    return 0;
  }
  struct tsec *t = state_sector (k);
  if (t) {
    if (t->unreadable)
      return -EIO;
    memcpy (buf, t->img, e - s);
    return 0;
  }
  read_durable (k, buf);
  return 0;
}

static int
serve_read (unsigned char *buf, uint64_t off, uint64_t len)
{
  unsigned char *sb = xcalloc (1, P);
  int r = 0;
  for (uint64_t k = s4k_sector_index (&g, off);
       r == 0 && k <= s4k_sector_index (&g, off + len - 1); k++) {
    uint64_t s, e;
    sector_range (k, &s, &e);
    if ((r = read_sector (k, sb)) == 0) {
      uint64_t a = off > s ? off : s, b = off + len < e ? off + len : e;
      memcpy (buf + (a - off), sb + (a - s), b - a);
    }
  }
  free (sb);
  return r;
}

/* The checker's writes: whole sectors into scratch; a partial write of
 * an unreadable sector fails as the RMW's read does, a whole one repairs
 * it. */
static int
serve_write (const unsigned char *data, uint64_t off, uint64_t len)
{
  for (uint64_t k = s4k_sector_index (&g, off);
       k <= s4k_sector_index (&g, off + len - 1); k++) {
    uint64_t s, e;
    sector_range (k, &s, &e);
    struct sec *x = map_find (&scratch, k);
    if (!x) {
      unsigned char *b = xcalloc (1, P);
      const bool whole = off <= s && off + len >= e;
      if (read_sector (k, b) == -EIO && !whole) {
        free (b);
        return -EIO;
      }
      x = map_add (&scratch, k);
      x->data = b;
    }
    const struct wr w = { 0, off, len, data, false, false, -1, UINT64_MAX,
                          false, false };
    apply (&w, k, x->data);
  }
  return 0;
}

static int
read_full (int fd, void *buf, size_t n)
{
  char *p = buf;
  while (n) {
    ssize_t r = read (fd, p, n);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return -1;
    p += r, n -= r;
  }
  return 0;
}

static int
write_full (int fd, const void *buf, size_t n)
{
  const char *p = buf;
  while (n) {
    ssize_t r = send (fd, p, n, MSG_NOSIGNAL);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return -1;
    p += r, n -= r;
  }
  return 0;
}

static void
put16 (unsigned char *p, uint16_t v) { v = htobe16 (v); memcpy (p, &v, 2); }
static void
put32 (unsigned char *p, uint32_t v) { v = htobe32 (v); memcpy (p, &v, 4); }
static void
put64 (unsigned char *p, uint64_t v) { v = htobe64 (v); memcpy (p, &v, 8); }
static uint16_t
get16 (const unsigned char *p) { uint16_t v; memcpy (&v, p, 2); return be16toh (v); }
static uint32_t
get32 (const unsigned char *p) { uint32_t v; memcpy (&v, p, 4); return be32toh (v); }
static uint64_t
get64 (const unsigned char *p) { uint64_t v; memcpy (&v, p, 8); return be64toh (v); }

static const uint16_t tflags = NBD_FLAG_HAS_FLAGS | NBD_FLAG_SEND_FLUSH |
  NBD_FLAG_SEND_FUA | NBD_FLAG_SEND_TRIM | NBD_FLAG_SEND_WRITE_ZEROES |
  NBD_FLAG_CAN_MULTI_CONN;
#define MAX_REQUEST (32u << 20)

static int
opt_reply (int fd, uint32_t opt, uint32_t type, const void *data,
           uint32_t len)
{
  unsigned char h[20];
  put64 (h, NBD_REP_MAGIC);
  put32 (h + 8, opt);
  put32 (h + 12, type);
  put32 (h + 16, len);
  return write_full (fd, h, 20) || (len && write_full (fd, data, len))
         ? -1 : 0;
}

/* Fixed newstyle handshake: 0 in transmission, -1 to close. */
int
handshake (int fd)
{
  unsigned char b[18];
  put64 (b, NBD_MAGIC);
  put64 (b + 8, NBD_IHAVEOPT);
  put16 (b + 16, NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES);
  uint32_t cflags;
  if (write_full (fd, b, 18) || read_full (fd, &cflags, 4))
    return -1;
  const bool no_zeroes = be32toh (cflags) & NBD_FLAG_C_NO_ZEROES;
  for (;;) {
    unsigned char h[16];
    if (read_full (fd, h, 16) || get64 (h) != NBD_IHAVEOPT)
      return -1;
    const uint32_t opt = get32 (h + 8), len = get32 (h + 12);
    if (len > 65536)
      return -1;
    unsigned char *data = xcalloc (1, len);
    if (len && read_full (fd, data, len)) {
      free (data);
      return -1;
    }
    int r = 1;
    if (opt == NBD_OPT_EXPORT_NAME) {
      unsigned char rep[10 + 124] = { 0 };
      put64 (rep, g.size);
      put16 (rep + 8, tflags);
      r = write_full (fd, rep, no_zeroes ? 10 : sizeof rep) ? -1 : 0;
    }
    else if (opt == NBD_OPT_GO || opt == NBD_OPT_INFO) {
      unsigned char ex[12], bs[14];
      put16 (ex, NBD_INFO_EXPORT);
      put64 (ex + 2, g.size);
      put16 (ex + 10, tflags);
      put16 (bs, NBD_INFO_BLOCK_SIZE);
      put32 (bs + 2, L);
      put32 (bs + 6, P);
      put32 (bs + 10, MAX_REQUEST);
      if (opt_reply (fd, opt, NBD_REP_INFO, ex, 12) ||
          opt_reply (fd, opt, NBD_REP_INFO, bs, 14) ||
          opt_reply (fd, opt, NBD_REP_ACK, NULL, 0))
        r = -1;
      else if (opt == NBD_OPT_GO)
        r = 0;
    }
    else if (opt == NBD_OPT_ABORT) {
      opt_reply (fd, opt, NBD_REP_ACK, NULL, 0);
      r = -1;
    }
    else if (opt == NBD_OPT_LIST) {
      unsigned char z[4] = { 0 };
      if (opt_reply (fd, opt, NBD_REP_SERVER, z, 4) ||
          opt_reply (fd, opt, NBD_REP_ACK, NULL, 0))
        r = -1;
    }
    else if (opt_reply (fd, opt, NBD_REP_ERR_UNSUP, NULL, 0))
      r = -1;
    free (data);
    if (r <= 0)
      return r;
  }
}

/* One request: 0, or -1 to close the connection. */
int
serve_request (int fd)
{
  unsigned char h[28], rep[16];
  if (read_full (fd, h, 28) || get32 (h) != NBD_REQUEST_MAGIC)
    return -1;
  const uint16_t type = get16 (h + 6);
  const uint64_t off = get64 (h + 16);
  const uint32_t len = get32 (h + 24);
  int err = 0;
  unsigned char *buf = NULL;
  if (type == NBD_CMD_DISC)
    return -1;
  const bool io = type == NBD_CMD_READ || type == NBD_CMD_WRITE ||
                  type == NBD_CMD_TRIM || type == NBD_CMD_WRITE_ZEROES;
  if (io && (len > MAX_REQUEST || off > g.size || len > g.size - off))
    err = type == NBD_CMD_WRITE && len > MAX_REQUEST ? -1 : EINVAL;
  if (err == -1)
    return -1;
  if (type == NBD_CMD_WRITE) {
    buf = xcalloc (1, len);
    if (read_full (fd, buf, len)) {
      free (buf);
      return -1;
    }
  }
  if (!err && io && (off % L || len % L || !len))
    err = EINVAL;
  if (!err) {
    switch (type) {
    case NBD_CMD_READ:
      buf = xcalloc (1, len);
      err = -serve_read (buf, off, len);
      break;
    case NBD_CMD_WRITE:
      err = -serve_write (buf, off, len);
      break;
    case NBD_CMD_TRIM:
    case NBD_CMD_WRITE_ZEROES: {
      unsigned char *z = xcalloc (1, len);
      err = -serve_write (z, off, len);
      free (z);
      break;
    }
    case NBD_CMD_FLUSH:
      break;
    default:
      err = EINVAL;
    }
  }
  put32 (rep, NBD_SIMPLE_REPLY_MAGIC);
  put32 (rep + 4, err);
  memcpy (rep + 8, h + 8, 8);
  int r = write_full (fd, rep, 16);
  if (r == 0 && type == NBD_CMD_READ && !err)
    r = write_full (fd, buf, len);
  free (buf);
  return r;
}

/* At exit and from the signal handler (checker.c): async-signal-safe. */
void
cleanup_socket (void)
{
  if (sock_path[0])
    unlink (sock_path);
  if (sock_dir[0])
    rmdir (sock_dir);
}

void
open_socket (void)
{
  const char *tmp = getenv ("TMPDIR");
  snprintf (sock_dir, sizeof sock_dir, "%s/sect4k-crash.XXXXXX",
            tmp && strlen (tmp) < 32 ? tmp : "/tmp");
  if (!mkdtemp (sock_dir))
    die ("cannot create a directory for the socket: %s", strerror (errno));
  snprintf (sock_path, sizeof sock_path, "%s/nbd.sock", sock_dir);
  atexit (cleanup_socket);
  struct sockaddr_un a = { .sun_family = AF_UNIX };
  snprintf (a.sun_path, sizeof a.sun_path, "%s", sock_path);
  listen_fd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd < 0 || bind (listen_fd, (struct sockaddr *) &a, sizeof a) ||
      listen (listen_fd, 64))
    die ("%s: %s", sock_path, strerror (errno));
}

