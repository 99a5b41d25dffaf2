/* SPDX-License-Identifier: BSD-3-Clause */
/* s4k-atomic: untorn writes from the test guest (issue 27; guest/atomic.sh).
 * Debian 12's headers predate Linux 6.11's atomic writes, so statx and
 * RWF_ATOMIC are defined here as the kernel's uapi has them.
 *
 *   s4k-atomic statx DEV             statx (STATX_WRITE_ATOMIC): "MASK
 *                                    ATTR UNIT_MIN UNIT_MAX SEGMENTS_MAX"
 *   s4k-atomic write DEV OFF LEN     one pwritev2 (RWF_ATOMIC) on O_DIRECT:
 *                                    "ok" or the errno's name (exit 1)
 *   s4k-atomic fill DEV FIRST N GEN atomic|plain [sync]
 *                                    16 KiB pages FIRST..FIRST+N-1, each
 *                                    512-byte piece naming page, GEN and
 *                                    piece; RWF_ATOMIC or plain O_DIRECT;
 *                                    sync: fsync after (a cache flush)
 *   s4k-atomic check DEV FIRST N GEN reads them back: "pages N whole W
 *                                    torn T new G" (G: whole pages of
 *                                    generation GEN; torn: pieces of
 *                                    different generations or not ours) */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#define S4K_STATX_WRITE_ATOMIC 0x00010000u
#define S4K_STATX_ATTR_WRITE_ATOMIC 0x00400000u
#define S4K_RWF_ATOMIC 0x00000040

/* struct statx of Linux 6.11 (include/uapi/linux/stat.h), 256 bytes. */
struct s4k_statx {
  uint32_t mask, blksize;
  uint64_t attributes;
  uint32_t nlink, uid, gid;
  uint16_t mode, spare0;
  uint64_t ino, size, blocks, attributes_mask;
  struct { int64_t sec; uint32_t nsec; int32_t reserved; } ts[4];
  uint32_t rdev_major, rdev_minor, dev_major, dev_minor;
  uint64_t mnt_id;
  uint32_t dio_mem_align, dio_offset_align;
  uint64_t subvol;
  uint32_t atomic_write_unit_min, atomic_write_unit_max;
  uint32_t atomic_write_segments_max, spare1;
  uint64_t spare3[9];
};
_Static_assert (sizeof (struct s4k_statx) == 256, "struct statx layout");
_Static_assert (__builtin_offsetof (struct s4k_statx, atomic_write_unit_min)
                == 0xa8, "stx_atomic_write_unit_min at 0xa8");

#define PAGE (16 * 1024)
#define PIECE 512

static void
piece (uint8_t *p, uint32_t page, uint32_t gen, uint32_t i)
{
  uint32_t h[4] = { 0x50344b53, page, gen, i };   /* "S4KP" */
  memcpy (p, h, sizeof h);
  uint32_t x = page * 2654435761u ^ gen * 40503u ^ i;
  for (size_t k = sizeof h; k < PIECE; k++) {
    x = x * 1103515245u + 12345u;
    p[k] = (uint8_t) (x >> 16);
  }
}

/* The generation of a 512-byte piece, or -1 if it is not one we wrote. */
static long
piece_gen (const uint8_t *p, uint32_t page, uint32_t i)
{
  uint32_t h[4];
  memcpy (h, p, sizeof h);
  if (h[0] != 0x50344b53 || h[1] != page || h[3] != i)
    return -1;
  uint8_t want[PIECE];
  piece (want, page, h[2], i);
  return memcmp (want, p, PIECE) == 0 ? (long) h[2] : -1;
}

static const char *
errname (int e)
{
  switch (e) {
  case EINVAL: return "EINVAL";
  case EOPNOTSUPP: return "EOPNOTSUPP";
  case EIO: return "EIO";
  default: return strerror (e);
  }
}

int
main (int argc, char **argv)
{
  if (argc < 3) {
    fprintf (stderr, "usage: see the comment at the top of atomic.c\n");
    return 2;
  }
  const char *what = argv[1], *dev = argv[2];
  if (strcmp (what, "statx") == 0) {
    struct s4k_statx st;
    memset (&st, 0, sizeof st);
    if (syscall (SYS_statx, AT_FDCWD, dev, 0, S4K_STATX_WRITE_ATOMIC, &st)) {
      perror ("statx");
      return 1;
    }
    printf ("%s %d %u %u %u\n", st.mask & S4K_STATX_WRITE_ATOMIC ?
            "STATX_WRITE_ATOMIC" : "-",
            !!(st.attributes & S4K_STATX_ATTR_WRITE_ATOMIC),
            st.atomic_write_unit_min, st.atomic_write_unit_max,
            st.atomic_write_segments_max);
    return 0;
  }
  int fd = open (dev, (strcmp (what, "check") == 0 ? O_RDONLY : O_RDWR) |
                 O_DIRECT);
  if (fd == -1) {
    perror (dev);
    return 1;
  }
  if (strcmp (what, "write") == 0 && argc == 5) {
    const long long off = atoll (argv[3]);
    const size_t len = (size_t) atoll (argv[4]);
    void *b;
    if (posix_memalign (&b, 4096, len ? len : 4096))
      return 1;
    memset (b, 0xa7, len);
    struct iovec iov = { b, len };
    ssize_t r = pwritev2 (fd, &iov, 1, off, S4K_RWF_ATOMIC);
    if (r == (ssize_t) len) {
      printf ("ok\n");
      return 0;
    }
    printf ("%s\n", r < 0 ? errname (errno) : "short");
    return 1;
  }
  if (strcmp (what, "fill") == 0 && argc >= 7) {
    const uint32_t first = atoi (argv[3]), n = atoi (argv[4]);
    const uint32_t gen = atoi (argv[5]);
    const int flags = strcmp (argv[6], "atomic") == 0 ? S4K_RWF_ATOMIC : 0;
    uint8_t *b;
    if (posix_memalign ((void **) &b, 4096, PAGE))
      return 1;
    for (uint32_t p = first; p < first + n; p++) {
      for (uint32_t i = 0; i < PAGE / PIECE; i++)
        piece (b + i * PIECE, p, gen, i);
      struct iovec iov = { b, PAGE };
      if (pwritev2 (fd, &iov, 1, (off_t) p * PAGE, flags) != PAGE) {
        printf ("page %u: %s\n", p, errname (errno));
        return 1;
      }
    }
    if (argc > 7 && strcmp (argv[7], "sync") == 0 && fsync (fd)) {
      perror ("fsync");
      return 1;
    }
    printf ("ok\n");
    return 0;
  }
  if (strcmp (what, "check") == 0 && argc == 6) {
    const uint32_t first = atoi (argv[3]), n = atoi (argv[4]);
    const long want = atol (argv[5]);
    uint8_t *b;
    if (posix_memalign ((void **) &b, 4096, PAGE))
      return 1;
    unsigned whole = 0, torn = 0, newest = 0;
    for (uint32_t p = first; p < first + n; p++) {
      if (pread (fd, b, PAGE, (off_t) p * PAGE) != PAGE) {
        perror ("pread");
        return 1;
      }
      long g = piece_gen (b, p, 0);
      for (uint32_t i = 1; i < PAGE / PIECE && g >= 0; i++)
        if (piece_gen (b + i * PIECE, p, i) != g)
          g = -1;
      torn += g < 0;
      whole += g >= 0;
      newest += g == want;
    }
    printf ("pages %u whole %u torn %u new %u\n", n, whole, torn, newest);
    return 0;
  }
  fprintf (stderr, "s4k-atomic: bad arguments\n");
  return 2;
}
