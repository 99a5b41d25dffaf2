#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""The memory store costs what it holds, not the device size (issue 15):
a 64T device and the largest one NBD allows (2^63 bytes less a logical
sector), served by sect4k-server and by nbdkit with the plugin, open, take
10,000 random hole reads and block-status queries of the longest length
NBD carries (4 GiB less a sector) at the start, middle and end, and close
within 2 s, the server's RSS (VmRSS and VmHWM) under 32 MiB throughout;
data written far apart reads back.  Block status is at physical-sector
granularity (issue 15 item 10), in both front ends."""
import os
import random
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from srvlib import Server, need_server  # noqa: E402
from tap import ok, skip, diag, done_testing, need_nbd, Nbdkit  # noqa: E402

nbd = need_nbd()
need_server()
SAN = os.environ.get("SECT4K_SAN")
MiB = 1 << 20
TOP = (1 << 63) - 1             # nbdkit's and NBD's largest size


def status(pid):
    """VmRSS and VmHWM of pid, in bytes."""
    got = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            key = line.split(":")[0]
            if key in ("VmRSS", "VmHWM"):
                got[key] = int(line.split()[1]) * 1024
    return got["VmRSS"], got["VmHWM"]


def connect(uri):
    h = nbd.NBD()
    h.add_meta_context("base:allocation")
    h.connect_uri(uri)
    return h


def block_status(h, length, off):
    """The (length, flags) pairs the server sends for one query."""
    runs = []

    def cb(metacontext, offset, entries, err):
        runs.extend(zip(entries[0::2], entries[1::2]))
        return 0
    h.block_status(length, off, cb)
    return runs


def huge(front, start, label, size, L):
    t0 = time.monotonic()
    try:
        srv = start("size=%d" % size)
    except RuntimeError as e:
        ok(False, "%s %s: opens" % (front, label))
        diag(e)
        return
    with srv:
        pid = srv.proc.pid
        h = connect(srv.uri)
        ok(h.get_size() == size, "%s %s: opens, size %d (%.2f s)"
           % (front, label, size, time.monotonic() - t0))
        rng = random.Random(size)
        bufs = []
        for _ in range(10000):
            b = nbd.Buffer(L)
            bufs.append(b)
            h.aio_pread(b, rng.randrange(size // L) * L)
            while h.aio_in_flight() >= 64:
                h.poll(-1)
        while h.aio_in_flight() > 0:
            h.poll(-1)
        ok(not any(any(b.to_bytearray()) for b in bufs),
           "%s %s: 10000 random hole reads (64 in flight) are zeroes"
           % (front, label))
        longest = (1 << 32) - 4096
        good = True
        for off in (0, size // 2 // 4096 * 4096, size - longest):
            runs = block_status(h, longest, off)
            if not runs or runs[0] != (longest, 3):
                diag("block status at %d: %s" % (off, runs[:4]))
                good = False
        ok(good, "%s %s: block status of 4 GiB at start, middle and end: "
           "one hole each" % (front, label))

        # Far-apart writes read back and show as data where written.
        offs = [0, (1 << 40) + L, size // 3 // L * L, size - L]
        for i, off in enumerate(offs):
            h.pwrite(bytes([i + 1]) * L, off)
        ok(all(h.pread(L, off) == bytes([i + 1]) * L
               for i, off in enumerate(offs)),
           "%s %s: writes at offsets %s read back" % (front, label, offs))
        runs = block_status(h, L, size - L)
        ok(runs[:1] == [(L, 0)], "%s %s: the last sector is data (%s)"
           % (front, label, runs[:2]))
        rss, hwm = status(pid)
        h.shutdown()
        if SAN:
            skip("%s %s: RSS" % (front, label), "RSS means nothing under a "
                 "sanitizer")
        else:
            ok(rss < 32 * MiB and hwm < 32 * MiB,
               "%s %s: VmRSS %.1f MiB, VmHWM %.1f MiB (< 32 MiB)"
               % (front, label, rss / MiB, hwm / MiB))
        t0 = time.monotonic()
        code = srv.stop()
        took = time.monotonic() - t0
        ok(code == 0 and took < 2, "%s %s: exits (status %d) in %.2f s (< 2 s)"
           % (front, label, code, took))


def granularity(front, start):
    """Writes and zeroes of one logical sector, seen by block status."""
    for model, L, P in (("model=512n", 512, 512), ("model=512e", 512, 4096),
                        ("logical=1024 physical=2048", 1024, 2048)):
        with start("size=1M", *model.split()) as srv:
            h = connect(srv.uri)
            off = 3 * P + L if P > L else 3 * P
            h.pwrite(b"\x01" * L, off)
            got = block_status(h, 8 * P, 0)
            want = [(3 * P, 3), (P, 0), (4 * P, 3)]
            ok(got == want, "%s %s: a %d-byte write makes its physical "
               "sector data, no more (%s)" % (front, model, L, got))
            h.zero(L, off)
            got = block_status(h, 8 * P, 0)
            ok(got == [(8 * P, 3)], "%s %s: zeroing it makes it a hole again "
               "(%s)" % (front, model, got))
            h.pwrite(b"\x01" * P, 3 * P)
            h.trim(P, 3 * P)
            got = block_status(h, 8 * P, 0)
            ok(got == [(8 * P, 3)], "%s %s: and so does a trim (%s)"
               % (front, model, got))
            h.shutdown()


def main():
    os.environ["SECT4K_STORE"] = "memory"     # whatever the caller asked
    fronts = [("sect4k-server", lambda *a: Server(*a))]
    if shutil.which("nbdkit"):
        fronts.append(("plugin", lambda *a: Nbdkit(*a)))
    else:
        skip("the plugin's devices", "nbdkit is not installed")
    for front, start in fronts:
        huge(front, lambda *a: start(*a), "64T 512n", 64 << 40, 512)
        huge(front, lambda *a: start(*(a + ("model=512e-xp",))),
             "8E-512 512e-xp", TOP // 512 * 512, 512)
        huge(front, lambda *a: start(*(a + ("model=4kn",))),
             "8E-4096 4kn", TOP // 4096 * 4096, 4096)
        granularity(front, start)
    done_testing()


main()
