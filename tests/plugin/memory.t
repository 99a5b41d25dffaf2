#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""The sparse memory store: an empty 10 GiB device is cheap, memory grows
with what is written (at 4 KiB / physical granularity), and zeroing or
trimming whole sectors gives it back.  RSS is read from /proc."""
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import ok, skip_all, done_testing, Nbdkit, rss, need_nbd  # noqa: E402

nbd = need_nbd()
if os.environ.get("SECT4K_SAN"):
    skip_all("RSS means nothing under a sanitizer")

MiB = 1 << 20


def write_random(uri, size, block, total, seed):
    """Writes total bytes as distinct random blocks; returns the offsets."""
    h = nbd.NBD()
    h.connect_uri(uri)
    rng = random.Random(seed)
    offs = rng.sample(range(size // block), total // block)
    data = bytes(rng.randrange(1, 256) for _ in range(block))
    for i, b in enumerate(offs):
        h.aio_pwrite(data, b * block)
        while h.aio_in_flight() >= 32:
            h.poll(-1)
    while h.aio_in_flight() > 0:
        h.poll(-1)
    return h, [b * block for b in offs]


def main():
    with Nbdkit("size=10G", "model=512e") as srv:
        pid = srv.proc.pid
        h = nbd.NBD()
        h.connect_uri(srv.uri)
        h.pread(4096, 5 << 30)       # reading a hole allocates nothing
        h.shutdown()
        ok(rss(pid) < 20 * MiB, "10 GiB 512e device: %.1f MiB RSS before any "
           "write (< 20 MiB)" % (rss(pid) / MiB))

    for label, args in (("sect4k 4kn", ("size=10G", "model=4kn")),
                        ("sect4k 512e-xp", ("size=10G", "model=512e-xp"))):
        with Nbdkit(*args) as srv:
            pid = srv.proc.pid
            base = rss(pid)
            h, offs = write_random(srv.uri, 10 << 30, 4096, 100 * MiB, 7)
            used = rss(pid)
            if "4kn" in label:
                ok(used < 120 * MiB, "%s: 100 MiB of random 4 KiB writes cost "
                   "%.1f MiB RSS (< 120 MiB)" % (label, used / MiB))
            else:
                # Misaligned by 3584: each 4 KiB write straddles two physical
                # sectors, each with its own 4 KiB chunk.
                ok(used < 230 * MiB, "%s: 100 MiB of random 4 KiB writes "
                   "straddling two sectors each cost %.1f MiB RSS (< 230 MiB)"
                   % (label, used / MiB))
            data = h.pread(4096, offs[0])
            ok(any(data), "%s: data reads back" % label)
            # Zero half, trim the rest, over a range wide enough to hold
            # every sector a write touched: whole sectors give memory back.
            for i, off in enumerate(offs):
                start = max(0, off - 4096)
                length = min(off + 8192, 10 << 30) - start
                if i % 2:
                    h.aio_zero(length, start)
                else:
                    h.aio_trim(length, start)
                while h.aio_in_flight() >= 32:
                    h.poll(-1)
            while h.aio_in_flight() > 0:
                h.poll(-1)
            after = rss(pid)
            ok(after < base + 24 * MiB, "%s: zero and trim gave the memory "
               "back: %.1f MiB RSS (started at %.1f)" % (label, after / MiB,
                                                           base / MiB))
            ok(h.pread(4096, offs[0]) == bytes(4096), "%s: and it reads as zeroes"
               % label)
            h.shutdown()
    done_testing()


main()
