# SPDX-License-Identifier: BSD-3-Clause
"""Shared by the file store tests: a model checker, extents check, where
to put data files, and how many io_uring instances a process holds."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import ok, diag, skip_all, done_testing, Nbdkit, need_nbd  # noqa: E402,F401

nbd = need_nbd()
from nbdmodel import (connect, boundary, random_ops,  # noqa: E402,F401
                      check_extents, read_all)


def data_dir():
    """A fresh directory on the build's file system (not tmpfs: O_DIRECT)."""
    base = os.environ.get("SECT4K_BUILD") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "build")
    os.makedirs(base, exist_ok=True)
    return tempfile.mkdtemp(prefix="file-test.", dir=base)


def uring_fds(pid):
    """io_uring instances open in process pid."""
    n = 0
    d = "/proc/%d/fd" % pid
    for fd in os.listdir(d):
        try:
            n += "io_uring" in os.readlink(os.path.join(d, fd))
        except OSError:
            pass
    return n
