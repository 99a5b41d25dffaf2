#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""The server behaves like nbdkit + the plugin: the same random sequence of
writes, zeroes, trims and reads goes to both, for several geometries; every
read must match the other server and a byte model, every error must be the
same, and block status must agree.  Then pipelined random I/O (many
requests in flight, partial-sector writes) checked against the model."""
import os
import random
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import ok, diag, skip_all, done_testing, Nbdkit, need_nbd  # noqa: E402
import srvlib  # noqa: E402
from srvlib import Server  # noqa: E402

nbd = need_nbd()
from nbdmodel import connect, read_all  # noqa: E402
srvlib.need_server()
if not os.path.exists(os.environ.get("SECT4K_PLUGIN", "")) or \
        os.system("command -v nbdkit >/dev/null") != 0:
    skip_all("nbdkit or the plugin is missing (the reference to compare with)")

GEOMETRIES = [
    (["model=512e"], 512, 4096),
    (["model=512e-xp"], 512, 4096),
    (["model=4kn"], 4096, 4096),
    (["logical=1024", "physical=8192", "alignment-offset=2048"], 1024, 8192),
    (["physical=1M", "alignment-offset=3584", "max-request=2M"], 512, 1 << 20),
]


def call(fn):
    """(result, errno) of one request."""
    try:
        return fn(), 0
    except nbd.Error as e:
        return None, e.errnum


def extents(h, size):
    out = []
    off = 0
    while off < size:
        runs = []
        h.block_status(size - off, off, lambda m, o, e, err: runs.extend(e) or 0)
        out.extend(runs)
        off += sum(runs[0::2])
    return out


def compare(name, keys, L, P, strict, rng, nops):
    size = 4 * max(P, 65536) + 3 * L
    unit = L if strict else 1
    args = ["size=%d" % size] + keys + ([] if strict else ["strict=false"])
    # The reference uses the same store, so block status can agree.
    ref_args = args + (["file=" + tempfile.mktemp(dir=tmp)]
                       if srvlib.STORE == "file" else [])
    with Nbdkit(*ref_args) as ref, Server(*args) as srv:
        a, b = connect(ref.uri, strict), connect(srv.uri, strict)
        model = bytearray(size)
        diffs = bad = 0
        for i in range(nops):
            length = min(rng.randrange(1, 3 * P // unit + 1) * unit, size, 1 << 20)
            off = rng.randrange(0, (size - length) // unit + 1) * unit
            if rng.random() < 0.05:      # misaligned or out of range on purpose
                off += rng.choice([1, L // 2, size])
            kind = rng.random()
            if kind < 0.4:
                data = rng.randbytes(length)
                flags = nbd.CMD_FLAG_FUA if rng.random() < 0.2 else 0
                ra, rb = call(lambda: a.pwrite(data, off, flags)), call(lambda: b.pwrite(data, off, flags))
                if ra[1] == 0:
                    model[off:off + length] = data
            elif kind < 0.55:
                flags = 0 if rng.random() < 0.5 else nbd.CMD_FLAG_NO_HOLE
                ra, rb = call(lambda: a.zero(length, off, flags)), call(lambda: b.zero(length, off, flags))
                if ra[1] == 0:
                    model[off:off + length] = bytes(length)
            elif kind < 0.65:
                ra, rb = call(lambda: a.trim(length, off)), call(lambda: b.trim(length, off))
                if ra[1] == 0:          # the reference tells what trim did
                    model[:] = read_all(a, size)
            else:
                ra, rb = call(lambda: a.pread(length, off)), call(lambda: b.pread(length, off))
                if ra[1] == 0 and ra[0] != model[off:off + length]:
                    bad += 1
            if ra != rb:
                diffs += 1
                if diffs == 1:
                    diag("op %d at %d length %d: nbdkit %s, server %s"
                         % (i, off, length, ra[1], rb[1]))
        ok(diffs == 0, "%s: %d ops give the same results and errors as nbdkit" % (name, nops))
        ok(bad == 0 and read_all(b, size) == model, "%s: the data matches the model" % name)
        ea, eb = extents(a, size), extents(b, size)
        ok(ea == eb, "%s: block status agrees with nbdkit (%d extents)" % (name, len(eb) // 2))
        a.shutdown()
        b.shutdown()
        st = srv.stop()
        ok(st == 0, "%s: server exited cleanly" % name)


def pipelined(rng):
    """Many requests in flight on two connections; disjoint ranges per
    batch so the expected result is defined."""
    size = 8 << 20
    with Server("size=%d" % size, "model=512e-xp") as srv:
        hs = [connect(srv.uri, True), connect(srv.uri, True)]
        model = bytearray(size)
        for batch in range(40):
            slots = rng.sample(range(size // 16384), 64)
            for j, slot in enumerate(slots):
                h = hs[j % 2]
                base = slot * 16384
                length = rng.randrange(1, 24) * 512
                off = base + rng.randrange(0, (16384 - length) // 512 + 1) * 512
                if rng.random() < 0.8:
                    data = rng.randbytes(length)
                    h.aio_pwrite(data, off)
                    model[off:off + length] = data
                else:
                    h.aio_zero(length, off)
                    model[off:off + length] = bytes(length)
            for h in hs:
                while h.aio_in_flight() > 0:
                    h.poll(-1)
        bufs = []
        for k in range(0, size, 1 << 20):
            buf = nbd.Buffer(1 << 20)
            hs[k >> 20 & 1].aio_pread(buf, k)
            bufs.append(buf)
        for h in hs:
            while h.aio_in_flight() > 0:
                h.poll(-1)
        got = b"".join(buf.to_bytearray() for buf in bufs)
        ok(got == model, "2 connections x 32 in flight, 2560 partial-sector writes and "
           "zeroes: the data matches the model")
        for h in hs:
            h.shutdown()


tmp = tempfile.mkdtemp(prefix="sect4k-integrity.")


def main():
    rng = random.Random(7)
    for keys, L, P in GEOMETRIES:
        compare(" ".join(keys), keys, L, P, True, rng, 300)
    compare("512e-xp strict=false", ["model=512e-xp"], 512, 4096, False, rng, 300)
    pipelined(rng)
    shutil.rmtree(tmp)
    done_testing()


main()
