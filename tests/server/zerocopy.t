#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""Reads of the memory store answered by reference (server/reply.c,
read_by_ref): holes go out as hole chunks or from one buffer of zeroes,
never copied into the reply buffer; data is copied, each logical sector
whole (a reference would let a write in flight tear a sector while the
kernel copies it; tests/server/torn-concurrent.t).

- Data: random writes and zeroes on several geometries, then reads
  across chunk boundaries, of holes, of both, up to 32 MiB, checked
  byte for byte against a model, with structured replies (hole chunks),
  with DF (one data chunk) and with simple replies.
- A raw client that reads its replies slowly through a small receive
  buffer, so that every reply is sent in many short sendmsgs, each
  continued where the last stopped: the byte stream must be exact.
- No copy of holes: 32 MiB reads of holes leave the server's peak
  memory (VmHWM) where it was; a copied reply needs a 32 MiB buffer.
  (Counted in bytes with a wide margin, not timed.)"""
import os
import random
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import ok, diag, done_testing, need_nbd, skip  # noqa: E402
import srvlib  # noqa: E402
from srvlib import Server, greet, go, request, recv_exact  # noqa: E402

nbd = need_nbd()
srvlib.need_server()

MiB = 1 << 20
SIZE = 96 * MiB
BIG = 32 * MiB                  # the longest request (max-request default)


def connect(uri, structured=True):
    h = nbd.NBD()
    h.set_request_structured_replies(structured)
    h.connect_uri(uri)
    return h


def chunks_of(h, length, offset, flags=0):
    """The structured read's chunks as (type, offset, length), and its
    bytes."""
    out, buf = [], bytearray(length)

    def cb(data, off, status, err):
        out.append((status, off, len(data)))
        buf[off - offset:off - offset + len(data)] = data
        return 0
    h.pread_structured(length, offset, cb, flags)
    return sorted(out, key=lambda c: c[1]), bytes(buf)


def fill(h, model, L, rng, span):
    """Random writes and zeroes over [0, span): runs that cross chunk
    boundaries, single logical blocks, and holes left between."""
    for _ in range(60):
        n = L * rng.choice([1, 3, 8, 200, 1100, 4096])
        n = min(n, 4 * MiB)
        off = rng.randrange(0, (span - n) // L) * L
        if rng.random() < 0.8:
            data = os.urandom(n)
            h.pwrite(data, off)
            model[off:off + n] = data
        else:
            h.zero(n, off, 0 if rng.random() < 0.5 else nbd.CMD_FLAG_NO_HOLE)
            model[off:off + n] = bytes(n)


def data_checks(name, keys, L):
    rng = random.Random(name)
    with Server("size=%d" % SIZE, *keys) as srv:
        hs = connect(srv.uri)
        hp = connect(srv.uri, structured=False)
        model = bytearray(SIZE)
        span = SIZE - BIG           # the last 32 MiB stay a hole
        fill(hs, model, L, rng, span)
        bad = []
        reads = [(0, BIG), (span - MiB, 2 * MiB)]
        for _ in range(40):
            n = L * rng.choice([1, 2, 7, 8, 9, 64, 129, 1024, 2048, 8192])
            n = min(n, 4 * MiB)
            reads.append((rng.randrange(0, (SIZE - n) // L) * L, n))
        holes = 0
        for off, n in reads:
            want = bytes(model[off:off + n])
            if hp.pread(n, off) != want:
                bad.append(("simple", off, n))
            ch, got = chunks_of(hs, n, off)
            holes += sum(1 for c in ch if c[0] == nbd.READ_HOLE)
            cover = sum(c[2] for c in ch) == n and all(
                a[1] + a[2] == b[1] for a, b in zip(ch, ch[1:]))
            if got != want or not cover or ch[0][1] != off:
                bad.append(("structured", off, n))
            if n == BIG:
                continue
            ch, got = chunks_of(hs, n, off, nbd.CMD_FLAG_DF)
            if got != want or len(ch) != 1 or ch[0][0] != nbd.READ_DATA:
                bad.append(("DF", off, n))
        ok(not bad, "%s: %d reads (simple, structured, DF) up to 32 MiB "
           "match the model (%s)" % (name, len(reads), bad[:5]))
        ok(holes > 0, "%s: structured replies carry hole chunks (%d)"
           % (name, holes))
        ch, _ = chunks_of(hs, BIG, SIZE - BIG)
        ok(ch == [(nbd.READ_HOLE, SIZE - BIG, BIG)],
           "%s: a 32 MiB read of a hole is one hole chunk (%s)"
           % (name, ch[:3]))
        hs.shutdown()
        hp.shutdown()


def raw_simple(srv):
    """A raw connection without structured replies, in transmission."""
    s = srv.connect_raw()
    greet(s)
    go(s)
    return s


def slow_reader(name, keys, L):
    """Pipelined reads answered by reference, read back slowly through a
    tiny receive buffer: the server's sendmsgs are short and continued."""
    rng = random.Random(name + "slow")
    with Server("size=%d" % SIZE, *keys) as srv:
        h = connect(srv.uri)
        model = bytearray(SIZE)
        fill(h, model, L, rng, SIZE - BIG)
        h.shutdown()
        s = srv.connect_raw()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        greet(s)
        go(s)
        reads = [(0, BIG), (SIZE - BIG - 4 * MiB, BIG), (L, L), (3 * L, 5 * MiB)]
        for i, (off, n) in enumerate(reads):
            request(s, 0, off, n, cookie=i + 1)
        good = True
        t = time.monotonic()
        for i, (off, n) in enumerate(reads):
            hdr = recv_exact(s, 16)
            magic, err, cookie = struct.unpack(">IIQ", hdr)
            got = bytearray()
            while len(got) < n:
                b = s.recv(min(16384, n - len(got)))
                if not b:
                    break
                got += b
                if len(got) % (2 * MiB) < 16384:
                    time.sleep(0.02)        # the socket fills up meanwhile
            good = good and magic == 0x67446698 and err == 0 and \
                cookie == i + 1 and got == model[off:off + n]
        diag("%s: %d MiB read slowly in %.1f s"
             % (name, sum(n for _, n in reads) // MiB, time.monotonic() - t))
        ok(good, "%s: a slow reader gets every byte of 4 pipelined replies "
           "(72 MiB) in order" % name)
        s.close()


def hwm(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def copy_gone():
    with Server("size=%d" % SIZE, "model=512e") as srv:
        h = connect(srv.uri)
        for off in range(0, BIG, MiB):       # 1 MiB writes: small buffers
            h.pwrite(os.urandom(MiB), off)
        h.shutdown()
        base = hwm(srv.proc.pid)
        for structured in (True, False):
            h = connect(srv.uri, structured)
            for _ in range(2):
                h.pread(BIG, SIZE - BIG)         # a hole
            h.shutdown()
        grew = hwm(srv.proc.pid) - base
        diag("peak memory before the 32 MiB reads %d MiB, grown by %.1f MiB"
             % (base // MiB, grew / MiB))
        # A copied reply of 32 MiB needs that much buffer (twice, with the
        # one being sent); by reference it needs a few iovecs.
        ok(grew < 12 * MiB, "32 MiB reads of holes, simple and structured, "
           "need no reply buffer (peak memory grew %.1f MiB, under 12)"
           % (grew / MiB))


def main():
    if srvlib.STORE == "file":
        skip("reads by reference", "only the memory store answers by "
             "reference")
        done_testing()
        return
    for name, keys, L in [("512n", ["model=512n"], 512),
                          ("512e-xp", ["model=512e-xp"], 512),
                          ("4kn", ["model=4kn"], 4096),
                          ("64k physical", ["logical=4096",
                                            "physical=65536"], 4096)]:
        data_checks(name, keys, L)
    slow_reader("512e-xp", ["model=512e-xp"], 512)
    copy_gone()
    done_testing()


main()
