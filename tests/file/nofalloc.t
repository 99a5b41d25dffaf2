#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""A file system without fallocate (an LD_PRELOAD shim fails every mode
with EOPNOTSUPP): the store writes zeroes instead, does not offer fast
zero (clients then never get a slow zero for a fast one), and trim is
advice only (the data stays, as nbdkit's file plugin does)."""
import os
import random
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from filetest import (ok, skip_all, done_testing, Nbdkit, nbd, data_dir,  # noqa: E402
                      connect, read_all)

L, P, A = 512, 4096, 3584
SIZE = 1 << 20


def main():
    if os.environ.get("SECT4K_SAN"):
        skip_all("the fallocate shim and the sanitizer runtime both want LD_PRELOAD")
    shim = os.path.join(os.environ.get("SECT4K_BUILD", ""), "tests", "file-nofalloc.so")
    if not os.path.exists(shim):
        skip_all(shim + " is not built")
    d = data_dir()
    path = os.path.join(d, "disk.img")
    rng = random.Random(5)
    os.environ["LD_PRELOAD"] = shim
    try:
        srv = Nbdkit("file=" + path, "size=%d" % SIZE, "model=512e-xp")
    finally:
        del os.environ["LD_PRELOAD"]
    with srv:
        h = connect(srv.uri)
        ok(not h.can_fast_zero(), "fast zero is not offered")
        model = bytearray(SIZE)
        bad = 0
        for _ in range(300):
            length = rng.randrange(1, 3 * P // L + 1) * L
            off = rng.randrange(0, (SIZE - length) // L + 1) * L
            if rng.random() < 0.6:
                data = rng.randbytes(length)
                h.pwrite(data, off)
                model[off:off + length] = data
            else:
                h.zero(length, off, 0 if rng.random() < 0.5 else nbd.CMD_FLAG_NO_HOLE)
                model[off:off + length] = bytes(length)
        ok(bad == 0 and read_all(h, SIZE) == model,
           "writes and zeroes (written as zeroes) match the model")
        h.trim(4 * P, A)
        ok(read_all(h, SIZE) == model, "trim is advice only: the data stays")
        h.flush()
        h.shutdown()
    shutil.rmtree(d)
    done_testing()


main()
