/* Fuzz target: arbitrary client bytes into the handshake and request
 * parser (conn.c) over a small memory device.
 *
 * Input: byte 0 picks the device and server settings, byte 1 the size
 * of the pieces the bytes arrive in, the rest is what the client sends.
 * Besides the sanitizers, it checks the bounds a hostile client must not
 * break (output and payload buffers stay within what the limits allow)
 * and that the replies do not depend on how the input is split.
 *
 * Built with clang -fsanitize=fuzzer by `make fuzz`; built with
 * -DFUZZ_REPLAY_MAIN it is a plain program that runs the files named on
 * its command line (the regression corpus in `make check`). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conn.h"

static bool verbose;

void
log_msg (const char *fmt, ...)
{
  if (!verbose)
    return;
  va_list ap;
  va_start (ap, fmt);
  vfprintf (stderr, fmt, ap);
  va_end (ap);
  fputc ('\n', stderr);
}

#define CHECK(cond) \
  do { if (!(cond)) { fprintf (stderr, "fuzz: bound broken: %s\n", #cond); \
                      abort (); } } while (0)

/* FNV-1a over everything the server sends. */
static void
hash_out (uint64_t *h, struct obuf *out)
{
  for (size_t i = 0; i < out->len; i++)
    *h = (*h ^ out->p[i]) * UINT64_C(0x100000001b3);
  out->len = 0;
}

/* Serves the client bytes arriving in pieces of piece_len; returns a hash
 * of the whole output. */
static uint64_t
run (uint8_t mode, size_t piece_len, const uint8_t *data, size_t size)
{
  struct s4k_config cfg;
  char err[256];
  s4k_config_init (&cfg);
  s4k_config_set (&cfg, "size", "1M", err, sizeof err);
  s4k_config_set (&cfg, "logical", mode & 1 ? "4096" : "512", err, sizeof err);
  s4k_config_set (&cfg, "physical", "4096", err, sizeof err);
  s4k_config_set (&cfg, "max-request", "64k", err, sizeof err);
  if (mode & 2)
    s4k_config_set (&cfg, "strict", "false", err, sizeof err);
  if ((mode & 5) == 4)
    s4k_config_set (&cfg, "lowest-aligned", "7", err, sizeof err);
  cfg.readonly = mode & 8;
  if (s4k_config_finish (&cfg, err, sizeof err) == -1) {
    fprintf (stderr, "fuzz: %s\n", err);
    abort ();
  }
  struct s4k_dev *dev;
  if (s4k_dev_open (&dev, &cfg, err, sizeof err) < 0) {
    fprintf (stderr, "fuzz: %s\n", err);
    abort ();
  }
  struct server_cfg scfg = {
    .dev = dev, .export_name = mode & 16 ? "disk" : "",
    .size = s4k_dev_geometry (dev)->size,
    .minimum = s4k_dev_geometry (dev)->logical,
    .preferred = s4k_dev_geometry (dev)->physical,
    .maximum = s4k_dev_max_request (dev),
    .readonly = cfg.readonly, .require_block_size = mode & 32,
    .verbose = verbose,
  };
  s4k_dev_describe (dev, scfg.description, sizeof scfg.description);

  struct conn c;
  if (conn_init (&c, &scfg, "fuzz", NULL) == -1)
    abort ();
  /* What one reply round may hold: the backlog limit plus one read reply
   * or block status reply. */
  const size_t out_bound = CONN_OUT_HIGH + 28 + scfg.maximum +
                           24 + 8 * CONN_MAX_EXTENTS + 4096;
  uint64_t h = UINT64_C(0xcbf29ce484222325);
  unsigned round = 0;
  for (;;) {
    uint8_t *p;
    size_t len;
    CHECK (c.out.len <= out_bound);
    CHECK (c.payload.cap <= scfg.maximum);
    if (c.hangup)
      break;
    if (mode & 64 || round++ % 2)       /* the "socket" drains the output */
      hash_out (&h, &c.out);
    conn_process (&c);
    conn_recv_area (&c, &p, &len);
    if (len == 0) {
      if (conn_done (&c) || c.out.len == 0)
        break;
      hash_out (&h, &c.out);    /* backlog: drain and go on */
      continue;
    }
    size_t n = len < piece_len ? len : piece_len;
    if (n > size)
      n = size;
    if (n == 0)
      break;
    memcpy (p, data, n);
    data += n;
    size -= n;
    conn_received (&c, n);
  }
  if (mode & 128) {             /* server shutdown in the middle */
    c.stopping = true;
    conn_process (&c);
  }
  /* Everything produced counts, even after a hang-up (which the real
   * loop does not send): what was sent before it depends on timing. */
  hash_out (&h, &c.out);
  conn_free (&c);
  s4k_dev_close (dev);
  return h;
}

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

/* Besides the sanitizers and the bounds above: the replies must not
 * depend on how the bytes were split into receives. */
int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  if (size < 2)
    return 0;
  uint8_t mode = data[0], piece = data[1];
  uint64_t a = run (mode, piece ? piece : 65536, data + 2, size - 2);
  uint64_t b = run (mode, SIZE_MAX, data + 2, size - 2);
  if (a != b) {
    fprintf (stderr, "fuzz: the replies differ when the input arrives in "
             "pieces of %u bytes\n", piece);
    abort ();
  }
  return 0;
}

#ifdef FUZZ_REPLAY_MAIN
int
main (int argc, char **argv)
{
  verbose = getenv ("FUZZ_VERBOSE") != NULL;
  for (int i = 1; i < argc; i++) {
    FILE *f = fopen (argv[i], "rb");
    if (!f) {
      perror (argv[i]);
      return 1;
    }
    static uint8_t buf[1 << 20];
    size_t n = fread (buf, 1, sizeof buf, f);
    fclose (f);
    LLVMFuzzerTestOneInput (buf, n);
  }
  return 0;
}
#endif
