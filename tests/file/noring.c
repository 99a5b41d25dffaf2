/* SPDX-License-Identifier: BSD-3-Clause */
/* noring COMMAND...: runs COMMAND under a seccomp filter that refuses
 * io_uring_setup with EPERM, as a container's policy may. */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

int
main (int argc, char **argv)
{
  struct sock_filter filter[] = {
    BPF_STMT (BPF_LD | BPF_W | BPF_ABS, offsetof (struct seccomp_data, nr)),
    BPF_JUMP (BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
    BPF_STMT (BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
    BPF_STMT (BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = { sizeof filter / sizeof filter[0], filter };

  if (argc < 2) {
    fprintf (stderr, "usage: %s COMMAND [ARGS...]\n", argv[0]);
    return 2;
  }
  if (prctl (PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == -1 ||
      prctl (PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == -1) {
    perror ("noring: seccomp");
    return 1;
  }
  execvp (argv[1], argv + 1);
  perror (argv[1]);
  return 127;
}
