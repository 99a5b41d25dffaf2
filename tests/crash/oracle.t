#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""A brute-force oracle for sect4k-crash on small logs: every state the
device could reach per the fault layer's model (README "Faults",
lib/fault/fault.c: per physical sector kept, reverted or the torn= outcome of
an interrupted write, over the durable prefix and any subset of the
unflushed writes) is enumerated here independently, per logical sector,
and compared with what the tool serves with --states all: every state it
generates is allowed, and every allowed state is generated.  Garbage is
compared as "neither a value ever written there nor zeroes".  A sector
reverted or torn goes back to the durable image or, as the device's
destaging, FUA writes and settled atomic units leave it, to the image
with its first b kept writes.  A second log has atomic writes
(S4K_WLOG_ATOMIC, whole physical sectors as the engine makes them): a
sector only goes back to an image with the last kept atomic write over
it (all or nothing, whatever torn=), and with none after it is kept."""
import itertools
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))
import tap  # noqa: E402
import wlogfmt  # noqa: E402
from crashlib import tmp, CRASH  # noqa: E402

SIZE, L = 16384, 512
NL = SIZE // L


def make_log(path, physical, atomic):
    w = wlogfmt.LogWriter(path, SIZE, L, physical)
    w.write(1 * L, b"\x11" * L)
    w.write(2 * L, b"\x22" * L + b"\x23" * L)
    w.flush()
    if atomic:
        # one physical sector (512e) and two, a plain write inside the
        # first after it, and one with FUA over the second
        w.write(8 * L, bytes(range(0x80, 0x88)) * L, atomic=True)
        w.write(10 * L, b"\xaa" * L)
        w.write(16 * L, bytes(range(0xc0, 0xd0)) * L, atomic=True)
        w.write(24 * L, b"\xee" * 8 * L, fua=True, atomic=True)
        w.close()
        return
    w.write(5 * L, b"\x55" * L)
    w.write(9 * L, b"\x99" * L, fua=True)
    w.write(10 * L, b"\xaa" * L)
    w.write(3 * L, b"\x33" * L)
    w.close()


def oracle(path, physical, torn):
    ents = wlogfmt.read_log(path)
    writes, points = [], []       # points: (nw, f)
    f = 0
    for i, flags, off, ln, data, mark in ents:
        if flags & wlogfmt.MARK:
            continue
        if flags & wlogfmt.FLUSH:
            points.append((len(writes), f))
            f = len(writes)
        if ln:
            early = bool(flags & (wlogfmt.FUA | wlogfmt.ZERO |
                                  wlogfmt.DISCARD))
            if early:
                points.append((len(writes), f))
            writes.append((off // L, [data[j * L:(j + 1) * L]
                                      for j in range(ln // L)], early,
                           bool(flags & wlogfmt.ATOMIC)))
    points.append((len(writes), f))
    per = physical // L
    zero = bytes(L)
    states = set()
    for nw, f in points:
        flushed = [zero] * NL
        for lba, d, _, _ in writes[:f]:
            flushed[lba:lba + len(d)] = d
        epoch = list(range(f, nw))
        vol = [i for i in epoch if not writes[i][2]]
        for r in range(len(vol) + 1):
            for S in itertools.combinations(vol, r):
                old, new = list(flushed), list(flushed)
                for i in epoch:
                    lba, d, early, _ = writes[i]
                    if early:
                        old[lba:lba + len(d)] = d
                    if early or i in S:
                        new[lba:lba + len(d)] = d
                touched = sorted({(writes[i][0] + j) // per for i in S
                                  for j in range(len(writes[i][1]))})
                choices = []
                for p in touched:
                    lbas = range(p * per, (p + 1) * per)
                    kept = [i for i in S if any(
                        p * per <= writes[i][0] + j < (p + 1) * per
                        for j in range(len(writes[i][1])))]
                    # base b: the durable image with the first b kept
                    # writes (destaged or settled before the cut); from
                    # the last kept atomic write on
                    a = max((n + 1 for n, i in enumerate(kept)
                             if writes[i][3]), default=0)
                    opts = [{x: new[x] for x in lbas}]
                    for b in range(a, len(kept)):
                        base = list(flushed)
                        for i in epoch:
                            lba, d, early, _ = writes[i]
                            if early or i in kept[:b]:
                                base[lba:lba + len(d)] = d
                        opts.append({x: base[x] for x in lbas})
                        if torn == "sector" and per > 1:
                            for m in itertools.product((0, 1), repeat=per):
                                if 0 < sum(m) < per:
                                    opts.append({x: (new if m[k] else base)[x]
                                                 for k, x in enumerate(lbas)})
                    if a == len(kept):
                        choices.append(opts)
                        continue
                    if torn == "unreadable" and per > 1:
                        opts.append({x: "E" for x in lbas})
                    if torn == "garbage":
                        for b in range(per):      # garbage from a byte
                            opts.append({x: new[x] if k < b else "G"
                                         for k, x in enumerate(lbas)})
                    if torn == "zero":
                        opts.append({x: zero for x in lbas})
                    choices.append(opts)
                for combo in itertools.product(*choices):
                    img = list(old)
                    for o in combo:
                        for x, v in o.items():
                            img[x] = v
                    states.add(tuple(v if isinstance(v, str) else v.hex()
                                     for v in img))
    known = {zero.hex()} | {d.hex() for _, ds, _, _ in writes for d in ds}
    return states, known


for (geom, physical), atomic in itertools.product(
        (("512e", 4096), ("512n", 512)), (False, True)):
    label = geom + (" atomic" if atomic else "")
    log = os.path.join(tmp, "oracle-%s-%d.log" % (geom, atomic))
    make_log(log, physical, atomic)
    for torn in ("none", "sector", "unreadable", "garbage", "zero"):
        d = os.path.join(tmp, "%s-%s-%d" % (geom, torn, atomic))
        os.mkdir(d)
        r = subprocess.run([CRASH, log, "--geometry", geom, "--torn", torn,
                            "--states", "all", "--", sys.executable,
                            os.path.join(HERE, "dumpstate.py"), d],
                           capture_output=True, text=True)
        want, known = oracle(log, physical, torn)
        got = set()
        for name in os.listdir(d):
            got.add(tuple(v if v in known or v == "E" else "G"
                          for v in open(os.path.join(d, name)).read()
                          .split("\n")))
        n = len(os.listdir(d))
        tap.ok(r.returncode == 0 and got <= want,
               "%s torn=%s: all %d generated states are allowed (%d not)"
               % (label, torn, n, len(got - want)))
        tap.ok(want <= got, "%s torn=%s: all %d allowed states are "
               "generated (%d missing)" % (label, torn, len(want),
                                            len(want - got)))
tap.done_testing()
