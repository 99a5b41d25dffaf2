/* SPDX-License-Identifier: BSD-3-Clause */
/* LD_PRELOAD shim: a file system without fallocate (every mode fails
 * with EOPNOTSUPP), to test the store's slow zero path and honest
 * fast-zero. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>

int
fallocate (int fd, int mode, off_t off, off_t len)
{
  (void) fd; (void) mode; (void) off; (void) len;
  errno = EOPNOTSUPP;
  return -1;
}

int
fallocate64 (int fd, int mode, off_t off, off_t len)
{
  return fallocate (fd, mode, off, len);
}
