/* SPDX-License-Identifier: BSD-3-Clause */
/* Minimal TAP producer for the C tests. */
#ifndef S4K_TAP_H
#define S4K_TAP_H

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static unsigned tap_n, tap_failed;

#define TAP_UNUSED __attribute__ ((unused))

__attribute__ ((format (printf, 2, 3)))
TAP_UNUSED static int
ok (int cond, const char *fmt, ...)
{
  va_list ap;
  printf ("%s %u - ", cond ? "ok" : "not ok", ++tap_n);
  va_start (ap, fmt);
  vprintf (fmt, ap);
  va_end (ap);
  printf ("\n");
  fflush (stdout);
  if (!cond)
    tap_failed++;
  return cond;
}

#define is_u64(got, want, ...)                                          \
  do {                                                                  \
    uint64_t g_ = (got), w_ = (want);                                   \
    if (!ok (g_ == w_, __VA_ARGS__))                                    \
      printf ("#   got %" PRIu64 ", want %" PRIu64 "\n", g_, w_);       \
  } while (0)

__attribute__ ((format (printf, 1, 2)))
TAP_UNUSED static void
diag (const char *fmt, ...)
{
  va_list ap;
  printf ("# ");
  va_start (ap, fmt);
  vprintf (fmt, ap);
  va_end (ap);
  printf ("\n");
}

__attribute__ ((noreturn, format (printf, 1, 2)))
TAP_UNUSED static void
bail (const char *fmt, ...)
{
  va_list ap;
  printf ("Bail out! ");
  va_start (ap, fmt);
  vprintf (fmt, ap);
  va_end (ap);
  printf ("\n");
  exit (1);
}

/* The tests' pseudo-random numbers (xorshift64): the same sequence from
 * the same seed on every machine, so a failure names its seed. */
TAP_UNUSED static uint64_t
xorshift64 (uint64_t *s)
{
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

TAP_UNUSED static int
done_testing (void)
{
  printf ("1..%u\n", tap_n);
  return tap_failed ? 1 : 0;
}

#endif
