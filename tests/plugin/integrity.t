#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""Through a real client (libnbd): advertised block sizes, random reads,
writes, zeroes and trims checked byte for byte against a model, strict
refusals, strict=false service, extents, description, RMW debug log."""
import errno
import json
import os
import random
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import ok, done_testing, Nbdkit, need_nbd  # noqa: E402

nbd = need_nbd()
from nbdmodel import connect, random_ops, read_all, check_extents  # noqa: E402

GEOMETRIES = [
    # (keys, L, P, A)
    (["model=512n"], 512, 512, 0),
    (["model=512e"], 512, 4096, 0),
    (["model=512e-xp"], 512, 4096, 3584),
    (["model=4kn"], 4096, 4096, 0),
    (["logical=1024", "physical=8192", "alignment-offset=2048"], 1024, 8192, 2048),
    (["logical=2048", "physical=65536", "lowest-aligned=31"], 2048, 65536, 63488),
    (["physical=1M", "alignment-offset=3584", "max-request=2M"], 512, 1 << 20, 3584),
]


def main():
    rng = random.Random(4242)
    for keys, L, P, A in GEOMETRIES:
        size = 4 * max(P, 65536) + 3 * L + A
        size -= size % L
        name = " ".join(keys)
        with Nbdkit("size=%d" % size, *keys) as srv:
            h = connect(srv.uri)
            ok((h.get_block_size(nbd.SIZE_MINIMUM),
                h.get_block_size(nbd.SIZE_PREFERRED)) == (L, P),
               "%s: advertises minimum %d, preferred %d" % (name, L, P))
            mx = h.get_block_size(nbd.SIZE_MAXIMUM)
            want_max = 2 << 20 if "max-request=2M" in keys else 32 << 20
            ok(mx == want_max, "%s: advertises maximum %d" % (name, mx))
            ok(h.can_multi_conn() and h.can_fua() and h.can_trim() and
               h.can_zero() and h.can_fast_zero() and h.can_cache() and
               h.can_flush() and h.can_meta_context(nbd.CONTEXT_BASE_ALLOCATION),
               "%s: multi-conn, FUA, trim, zero, fast-zero, cache, flush, "
               "base:allocation" % name)
            model = bytearray(size)
            bad = random_ops(h, model, size, L, P, A, rng, 300, L)
            ok(bad == 0 and read_all(h, size) == model,
               "%s: 300 random ops match the model byte for byte" % name)
            err = check_extents(h, model, size, L)
            ok(err is None, "%s: extents at logical granularity (%s)" % (name, err))
            h.flush()
            h.cache(L, 0)

            # Strict: a misaligned request gets EINVAL and changes nothing.
            if L > 1:
                h2 = connect(srv.uri, strict=False)
                refused = 0
                for op in ("read", "write", "zero", "trim"):
                    try:
                        if op == "read":
                            h2.pread(L, 1)
                        elif op == "write":
                            h2.pwrite(b"x" * 100, L)
                        elif op == "zero":
                            h2.zero(L + 1, 0)
                        else:
                            h2.trim(L, L // 2)
                    except nbd.Error as e:
                        refused += e.errnum == errno.EINVAL
                ok(refused == 4, "%s: strict refuses misaligned read, write, "
                   "zero and trim with EINVAL" % name)
                ok(read_all(h2, size) == model,
                   "%s: refused requests changed nothing" % name)
                h2.shutdown()
            h.shutdown()
        ok(srv.proc.returncode == 0 or srv.proc.returncode == -15,
           "%s: server exited cleanly (%s)" % (name, srv.proc.returncode))
        log = srv.log()
        if L > 1:
            n = log.count("refused: offset and length must be multiples")
            ok(n == 1, "%s: strict refusals logged once per connection (%d)" % (name, n))

    # strict=false serves any byte range through RMW.
    for keys, L, P, A in GEOMETRIES[1:4]:
        size = 256 * 1024 + A
        with Nbdkit("size=%d" % size, "strict=false", *keys) as srv:
            h = connect(srv.uri, strict=False)
            model = bytearray(size)
            bad = random_ops(h, model, size, L, P, A, rng, 300, 1)
            ok(bad == 0 and read_all(h, size) == model,
               "strict=false %s: 300 unaligned random ops match the model" % " ".join(keys))
            h.shutdown()

    # strict: a read or write longer than max-request is refused too.
    with Nbdkit("size=8M", "physical=4096", "max-request=1M") as srv:
        h = connect(srv.uri, strict=False)
        h.set_strict_mode(h.get_strict_mode() & ~nbd.STRICT_BOUNDS)
        refused = 0
        for op in (lambda: h.pread(2 << 20, 0), lambda: h.pwrite(b"z" * (2 << 20), 0)):
            try:
                op()
            except nbd.Error as e:
                refused += e.errnum == errno.EINVAL
        ok(refused == 2, "a 2M read and write past max-request=1M are refused with EINVAL")
        ok(h.pread(1 << 20, 0) == bytes(1 << 20), "a 1M read is served and nothing was written")
        h.zero(4 << 20, 0)      # zero and trim carry no payload: no limit
        h.shutdown()
    ok("longer than the advertised maximum request 1048576" in srv.log(),
       "the refusal names the rule")

    # Description and geometry through nbdinfo.
    with Nbdkit("size=1G", "model=512e-xp") as srv:
        out = subprocess.run(["nbdinfo", "--json", srv.uri], capture_output=True,
                             text=True)
        info = json.loads(out.stdout)["exports"][0]
        ok(info.get("description") ==
           "512e: logical 512, physical 4096, alignment offset 3584 (lowest aligned LBA 7)",
           "nbdinfo shows the description: %s" % info.get("description"))

    # -D sect4k.rmw=1 logs each RMW: a 512-byte write on 512e RMWs once,
    # an aligned 4 KiB write not at all.
    with Nbdkit("size=1M", "model=512e", options=["-v", "-D", "sect4k.rmw=1"]) as srv:
        h = connect(srv.uri)
        h.pwrite(b"a" * 4096, 8192)
        h.pwrite(b"b" * 512, 512)
        h.pwrite(b"c" * 8192, 4096 + 512)       # cuts two sectors
        h.shutdown()
        srv.stop()
        rmw = [line for line in srv.log().splitlines() if "rmw:" in line]
        ok(len(rmw) == 3, "-D sect4k.rmw=1 logs one line per RMW'd sector (%d)" % len(rmw))
        ok(any("physical sector 0 [0, 4096)" in line for line in rmw),
           "the RMW log names the physical sector and its range")
    done_testing()


main()
