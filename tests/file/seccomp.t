#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""Where a seccomp policy refuses io_uring_setup (EPERM), the file store
falls back to pread/pwrite by itself: same data, no io_uring instance,
one debug line saying so."""
import os
import random
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from filetest import (ok, skip_all, done_testing, Nbdkit,  # noqa: E402
                      data_dir, connect, uring_fds, random_ops, read_all)

L, P, A = 512, 4096, 3584
SIZE = 1 << 20


def main():
    build = os.environ.get("SECT4K_BUILD", "")
    noring = os.path.join(build, "tests", "file-noring")
    if not os.path.exists(noring):
        skip_all(noring + " is not built")
    nbdkit = shutil.which("nbdkit")
    if subprocess.run([noring, "true"]).returncode != 0:
        skip_all("cannot install a seccomp filter here")
    d = data_dir()
    # "nbdkit" on PATH becomes nbdkit under the filter.
    wrap = os.path.join(d, "bin")
    os.mkdir(wrap)
    with open(os.path.join(wrap, "nbdkit"), "w") as f:
        f.write('#!/bin/sh\nexec "%s" "%s" "$@"\n' % (noring, nbdkit))
    os.chmod(os.path.join(wrap, "nbdkit"), 0o755)

    path = os.path.join(d, "disk.img")
    rng = random.Random(9)
    saved = os.environ["PATH"]
    os.environ["PATH"] = wrap + ":" + saved
    try:
        srv = Nbdkit("file=" + path, "size=%d" % SIZE, "model=512e-xp",
                     options=["-v"])
    finally:
        os.environ["PATH"] = saved
    with srv:
        h = connect(srv.uri)
        model = bytearray(SIZE)
        bad = random_ops(h, model, SIZE, L, P, A, rng, 200)
        ok(bad == 0 and read_all(h, SIZE) == model,
           "io_uring refused by seccomp: 200 random ops match the model")
        n = uring_fds(srv.proc.pid)
        ok(n == 0, "no io_uring instance (%d)" % n)
        h.flush()
        h.shutdown()
    line = "pread/pwrite (io_uring unavailable (io_uring_setup: Operation not permitted))"
    ok(line in srv.log(), "the debug line says pread/pwrite and why")
    with Nbdkit("file=" + path, "model=512e-xp") as srv:
        h = connect(srv.uri)
        got = read_all(h, SIZE)
        n = uring_fds(srv.proc.pid)
        ok(got == model and n > 0,
           "without the filter: the same data, through io_uring (%d)" % n)
        h.shutdown()
    shutil.rmtree(d)
    done_testing()


main()
