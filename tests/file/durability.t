#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""Durability: write through a client (aligned writes, RMW writes, zeroes,
trims), flush, then FUA writes; kill nbdkit with SIGKILL; a new server on
the same file must read back everything flushed or written with FUA.
Through io_uring, pread/pwrite and O_DIRECT."""
import os
import random
import shutil
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from filetest import (ok, done_testing, Nbdkit, nbd, data_dir,  # noqa: E402
                      connect, random_ops, read_all)

L, P, A = 512, 4096, 3584
SIZE = 16 << 20


def main():
    rng = random.Random(7)
    d = data_dir()
    for mode in (["io=uring"], ["io=sync"], ["direct=true"]):
        name = " ".join(mode)
        path = os.path.join(d, "disk.img")
        if os.path.exists(path):
            os.unlink(path)
        model = bytearray(SIZE)
        srv = Nbdkit("file=" + path, "size=%d" % SIZE, "model=512e-xp", *mode)
        h = connect(srv.uri)
        bad = random_ops(h, model, SIZE, L, P, A, rng, 400)
        # Big writes across the device too.
        for off in range(0, SIZE, 4 << 20):
            data = rng.randbytes(1 << 20)
            h.pwrite(data, off + 512)
            model[off + 512:off + 512 + len(data)] = data
        h.flush()
        for _ in range(50):                    # FUA: durable on reply
            off = rng.randrange(0, SIZE // L - 8) * L
            data = rng.randbytes(8 * L)
            h.pwrite(data, off, nbd.CMD_FLAG_FUA)
            model[off:off + len(data)] = data
        srv.proc.send_signal(signal.SIGKILL)
        st = srv.proc.wait()
        ok(bad == 0 and st == -signal.SIGKILL,
           "%s: wrote, flushed, wrote with FUA, killed the server (%d)" % (name, st))
        try:
            h.close()
        except Exception:
            pass
        srv.__exit__(None, None, None)
        with Nbdkit("file=" + path, "model=512e-xp", *mode) as srv2:
            h = connect(srv2.uri)
            got = read_all(h, SIZE)
            same = got == model
            if not same:
                first = next(i for i in range(SIZE) if got[i] != model[i])
                print("# first difference at byte %d" % first)
            ok(h.get_size() == SIZE and same,
               "%s: a new server on the same file reads back everything" % name)
            h.shutdown()
    shutil.rmtree(d)
    done_testing()


main()
