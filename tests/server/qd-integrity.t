#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""Data integrity with many requests in flight on ONE connection: libnbd
keeps 16 reads and writes in flight on a 512e file store (buffered, then
direct=true), writes being random 512-byte-aligned pieces shorter than
the 4K physical sector, so concurrent writes RMW the same sectors.  No
two requests in flight touch the same bytes if one of them writes (their
order would be unspecified), but they do share physical sectors.  Every
read must return what the model holds (the acknowledged writes), and so
must the whole device at the end, read back on a fresh connection."""
import os
import random
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import ok, diag, skip, done_testing, need_nbd  # noqa: E402
import srvlib  # noqa: E402
from srvlib import Server  # noqa: E402

nbd = need_nbd()
srvlib.need_server()

SIZE = 256 << 10                # 64 physical sectors: they collide often
QD = 16
OPS = 12000
L = 512


def run(srv, rng):
    """Returns (bad reads, out-of-order replies, first mismatch)."""
    h = nbd.NBD()
    h.connect_uri(srv.uri)
    model = bytearray(SIZE)
    inflight = {}               # cookie -> (kind, off, len, buf, data)
    seq = [0]
    done_order = []             # issue numbers, in reply order
    bad = []

    def conflicts(kind, off, ln):
        for k, o, n, _, _ in inflight.values():
            if o < off + ln and off < o + n and (k == "w" or kind == "w"):
                return True
        return False

    def completion(n):
        def cb(err):
            done_order.append(n)
            return 0
        return cb

    def reap():
        h.poll(-1)
        for cookie in [c for c in inflight if h.aio_command_completed(c)]:
            kind, off, ln, buf, data = inflight.pop(cookie)
            if kind == "w":
                model[off:off + ln] = data
            elif kind == "r":
                got = buf.to_bytearray()
                if got != model[off:off + ln]:
                    bad.append("read at %d length %d" % (off, ln))

    for _ in range(OPS):
        while len(inflight) >= QD:
            reap()
        r = rng.random()
        kind = "f" if r < 0.01 else "w" if r < 0.6 else "r"
        for _ in range(50):
            ln = L * rng.randint(1, 7 if kind == "w" else 16)
            off = L * rng.randrange((SIZE - ln) // L + 1)
            if kind == "f" or not conflicts(kind, off, ln):
                break
        else:
            reap()
            continue
        cb = completion(seq[0])
        seq[0] += 1
        if kind == "w":
            data = rng.randbytes(ln)
            buf = nbd.Buffer.from_bytearray(bytearray(data))
            cookie = h.aio_pwrite(buf, off, completion=cb)
        elif kind == "r":
            data, buf = None, nbd.Buffer(ln)
            cookie = h.aio_pread(buf, off, completion=cb)
        else:
            data = buf = None
            off = ln = 0
            cookie = h.aio_flush(completion=cb)
        inflight[cookie] = (kind, off, ln, buf, data)
    while inflight:
        reap()
    h.shutdown()
    # Read back on a fresh connection.
    h = nbd.NBD()
    h.connect_uri(srv.uri)
    final = h.pread(SIZE, 0)
    h.shutdown()
    first = None
    if final != model:
        at = next(i for i in range(SIZE) if final[i] != model[i])
        first = "first difference at byte %d (physical sector %d)" % (at, at // 4096)
    ooo = sum(1 for i in range(1, len(done_order))
              if done_order[i] < done_order[i - 1])
    return bad, ooo, first


seed = int(os.environ.get("SEED", random.randrange(1 << 32)))
diag("SEED=%d" % seed)
img_dir = tempfile.mkdtemp(prefix="sect4k-qdi.")
for extra in ([], ["direct=true"]):
    what = "file store%s" % (" " + extra[0] if extra else "")
    img = os.path.join(img_dir, "disk%d.img" % len(extra))
    try:
        srv = Server("size=%d" % SIZE, "model=512e", "file=" + img, *extra,
                     options=["--threads", "1"])
    except RuntimeError as e:
        skip("%s: integrity with %d requests in flight" % (what, QD),
             "the server does not start: %s" % e)
        continue
    with srv:
        if "io_uring" not in srv.log():
            diag("%s runs without io_uring here: requests do not overlap: "
                 "%s" % (what, srv.log().strip()))
        bad, ooo, first = run(srv, random.Random(seed))
        if "io_uring" in srv.log():
            ok(ooo > 0, "%s: requests overlapped (%d replies came back out "
               "of order)" % (what, ooo))
        else:
            skip("%s: requests overlapped" % what, "no io_uring")
        ok(not bad, "%s: %d requests with %d in flight, every read returns "
           "the acknowledged data" % (what, OPS, QD))
        for b in bad[:5]:
            diag("  wrong data: %s" % b)
        ok(first is None, "%s: the device holds exactly the acknowledged "
           "writes" % what)
        if first:
            diag("  " + first)
        st = srv.stop()
        ok(st == 0, "%s: server exited cleanly (%s)" % (what, st))
        if st:
            diag(srv.log())
shutil.rmtree(img_dir)
done_testing()
