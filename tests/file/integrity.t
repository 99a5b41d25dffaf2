#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""The file store through nbdkit and libnbd: random reads, writes, zeroes
and trims checked against a model, extents, strict refusals, on several
geometries, through io_uring, pread/pwrite (io=sync and SECT4K_NO_URING=1)
and O_DIRECT; the data is there again when a new server opens the file;
one io_uring per worker thread, gone when the thread exits."""
import errno
import os
import random
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from filetest import (ok, done_testing, Nbdkit, nbd, data_dir,  # noqa: E402
                      connect, uring_fds, random_ops, check_extents, read_all)

GEOMETRIES = [
    (["model=512e-xp"], 512, 4096, 3584),
    (["model=4kn"], 4096, 4096, 0),
    (["logical=1024", "physical=8192", "alignment-offset=2048"], 1024, 8192, 2048),
]
# (keys, environment, served through io_uring?)
MODES = [
    (["io=uring"], {}, True),
    (["io=sync"], {}, False),
    ([], {"SECT4K_NO_URING": "1"}, False),
    (["direct=true"], {}, True),
    (["direct=true", "io=sync"], {}, False),
]


def main():
    rng = random.Random(3)
    d = data_dir()
    for mode, env, uring in MODES:
        for keys, L, P, A in GEOMETRIES:
            path = os.path.join(d, "disk.img")
            if os.path.exists(path):
                os.unlink(path)
            size = 4 * max(P, 65536) + 3 * L + A
            size -= size % L
            name = " ".join(keys + mode + ["%s=%s" % kv for kv in env.items()])
            saved = dict(os.environ)
            os.environ.update(env)
            try:
                srv = Nbdkit("file=" + path, "size=%d" % size, *keys, *mode)
            finally:
                os.environ.clear()
                os.environ.update(saved)
            with srv:
                h = connect(srv.uri)
                model = bytearray(size)
                bad = random_ops(h, model, size, L, P, A, rng, 300)
                ok(bad == 0 and read_all(h, size) == model,
                   "%s: 300 random ops match the model" % name)
                fz = h.can_fast_zero()
                if fz:
                    h.zero(2 * P, A, nbd.CMD_FLAG_FAST_ZERO)
                    model[A:A + 2 * P] = bytes(2 * P)
                ok(fz and h.pread(2 * P, A) == model[A:A + 2 * P],
                   "%s: fast zero offered and served (punch hole)" % name)
                n = uring_fds(srv.proc.pid)
                ok((n > 0) == uring, "%s: %s (%d io_uring instances)" %
                   (name, "io_uring" if uring else "pread/pwrite", n))
                err = check_extents(h, model, size, L)
                ok(err is None, "%s: extents (%s)" % (name, err))
                h2 = connect(srv.uri, strict=False)
                try:
                    h2.pwrite(b"x" * 100, L)
                    e = 0
                except nbd.Error as ex:
                    e = ex.errnum
                ok(e == errno.EINVAL and h.pread(2 * L, 0) == model[:2 * L],
                   "%s: strict refuses a misaligned write, nothing changes" % name)
                h2.shutdown()
                h.flush()
                h.shutdown()
                if uring:
                    for _ in range(100):
                        if uring_fds(srv.proc.pid) == 0:
                            break
                        time.sleep(0.05)
                    n = uring_fds(srv.proc.pid)
                    ok(n == 0, "%s: the rings go with their threads (%d left)"
                       % (name, n))
            with Nbdkit("file=" + path, *keys, *mode) as srv:
                h = connect(srv.uri)
                ok(h.get_size() == size and read_all(h, size) == model,
                   "%s: a new server takes the file's size and has the data" % name)
                h.shutdown()
    shutil.rmtree(d)
    done_testing()


main()
