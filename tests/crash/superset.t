#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""sect4k-crash's states include every state the device's power cut can
produce (issue 32 item 3): a checker that passes the explorer passes on
the device.  For short write sequences on 512e and 512e-xp, plain and
with atomic-write-max=16K, under each torn= policy, a real sect4k-server
with write-cache=true runs the sequence and is cut (control socket) many
times, each with new outcomes (one seed, the PRNG going on), its image
read back after each cut; every image must be among the states
sect4k-crash --states all builds from the write log up to that cut.

One server per sequence: each run starts from zeroes made durable by a
FUA write of the whole device, and the log's entries from the run's mark
to its cut are checked to be the first run's, so the first run's states
are every run's.  Images are compared per logical sector: the bytes a
write put there, zeroes, E (EIO) or G (garbage: anything else).  The
sequences: the report's (8K, flush, 8K atomic, 512 bytes inside it), a
FUA write over earlier unflushed ones, a zero that cuts a sector, a
cache small enough to destage (write-cache-size=4K), and random ones (seed: $SECT4K_SEED, else random, printed)."""
import os
import random
import shutil
import socket
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))
import tap  # noqa: E402
import wlogfmt  # noqa: E402
from crashlib import tmp, CRASH, ROOT  # noqa: E402

nbd = tap.need_nbd()
build = os.environ.get("SECT4K_BUILD", "")
server = os.environ.get("SECT4K_SERVER") or next(
    (p for p in (os.path.join(build, "sect4k-server"),
                 os.path.join(ROOT, "sect4k-server")) if os.path.exists(p)),
    None)
if not server:
    tap.skip_all("sect4k-server is not built")
CUTS = int(os.environ.get("SECT4K_SUPERSET_CUTS", "40"))
RANDOM = 5              # random sequences per geometry, plain and atomic
SIZE, L = 16384, 512
ZERO = bytes(L)


def block(wid, lba):
    """What write wid puts in LBA lba: unique, so a sector's value says
    which write it came from."""
    return struct.pack("<QQ", wid + 1, lba) * (L // 16)


def ctl(path, line):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    s.sendall(line.encode() + b"\n")
    out = []
    for reply in s.makefile("r"):
        if reply.rstrip("\n") == "ok":
            break
        if reply.startswith("error: "):
            raise RuntimeError("%s: %s" % (line, reply.strip()))
        out.append(reply)
    s.close()
    return "".join(out)


def run_ops(h, ops):
    for wid, op in enumerate(ops):
        kind, off, ln, fua = (op + (0, 0, False))[:4]
        flags = nbd.CMD_FLAG_FUA if fua else 0
        if kind == "w":
            h.pwrite(b"".join(block(wid, (off + i) // L)
                              for i in range(0, ln, L)), off, flags)
        elif kind == "z":
            h.zero(ln, off, flags)
        elif kind == "t":
            h.trim(ln, off, flags)
        else:
            h.flush()


def known_blocks(ops):
    return {block(wid, (op[1] + i) // L): "w%d" % wid
            for wid, op in enumerate(ops) if op[0] == "w"
            for i in range(0, op[2], L)}


def canon(lbas, known):
    """One label per logical sector: bytes as a write or zeroes left them,
    E (EIO) or G (anything else)."""
    return tuple("E" if b is None else "0" if b == ZERO
                 else known.get(bytes(b), "G") for b in lbas)


def read_image(h):
    try:
        d = h.pread(SIZE, 0)
        return [d[i:i + L] for i in range(0, SIZE, L)]
    except nbd.Error:
        out = []
        for lba in range(SIZE // L):
            try:
                out.append(h.pread(L, lba * L))
            except nbd.Error:
                out.append(None)
        return out


def segment(ents, start, stop):
    """The log's entries between marks start and stop, as comparable
    tuples."""
    names = [m for _, _, _, _, _, m in ents]
    a, b = names.index(start), names.index(stop)
    return [(fl, off, ln, data) for _, fl, off, ln, data, _ in ents[a + 1:b]]


def device_cuts(geom, torn, atomic, ops, seed, extra=()):
    """Runs ops CUTS times on one server, cutting after each run: (the
    log, the images, whether every run logged the same entries)."""
    d = os.path.join(tmp, "dev-%d" % seed)
    os.mkdir(d)
    sock, ctlp, log = (os.path.join(d, n) for n in ("sock", "ctl", "log"))
    argv = [server, "-U", sock, str(SIZE), "model=" + geom,
            "write-cache=true", "torn=" + torn, "seed=%d" % seed,
            "control=" + ctlp, "write-log=" + log]
    if atomic:
        argv.append("atomic-write-max=16K")
    argv += list(extra)
    env = dict(os.environ, **(tap.sanitizer_env() or {}))
    p = subprocess.Popen(argv, env=env, stderr=subprocess.DEVNULL)
    try:
        for _ in range(400):
            if os.path.exists(sock) and os.path.exists(ctlp):
                break
            time.sleep(0.025)
        uri = "nbd+unix:///?socket=" + sock
        known = known_blocks(ops)
        images = []
        for run in range(CUTS):
            h = nbd.NBD()
            h.connect_uri(uri)
            ctl(ctlp, "mark run%d" % run)
            h.pwrite(bytes(SIZE), 0, nbd.CMD_FLAG_FUA)
            run_ops(h, ops)
            ctl(ctlp, "mark cut%d" % run)
            ctl(ctlp, "power-cut")
            del h               # the server dropped it at the cut
            h = nbd.NBD()
            h.connect_uri(uri)
            images.append(canon(read_image(h), known))
            h.shutdown()
    finally:
        p.terminate()
        p.wait(30)
    ents = wlogfmt.read_log(log)
    first = segment(ents, "run0", "cut0")
    same = all(segment(ents, "run%d" % r, "cut%d" % r) == first
               for r in range(1, CUTS))
    return log, images, same


def explorer_states(log, geom, torn, known, crash=CRASH):
    """The states of the last crash point up to mark cut0, as canon()
    gives them, and how many there are."""
    d = os.path.join(tmp, "states-%d" % random.randrange(1 << 40))
    os.mkdir(d)
    r = subprocess.run([crash, log, "--geometry", geom, "--torn", torn,
                        "--until", "cut0", "--states", "all", "--output", d],
                       capture_output=True, text=True, timeout=120)
    if r.returncode:
        tap.diag("sect4k-crash: exit %d: %s" % (r.returncode,
                                                 r.stderr.strip()[:300]))
    names = [n for n in os.listdir(d) if not n.endswith(".eio")]
    last = max((int(n.split("-")[0]) for n in names), default=-1)
    states = set()
    for n in names:
        if int(n.split("-")[0]) != last:
            continue
        data = open(os.path.join(d, n), "rb").read()
        lbas = [data[i:i + L] for i in range(0, SIZE, L)]
        if os.path.exists(os.path.join(d, n + ".eio")):
            for line in open(os.path.join(d, n + ".eio")):
                a, b = map(int, line.split("-"))
                lbas[a:b + 1] = [None] * (b + 1 - a)
        states.add(canon(lbas, known))
    shutil.rmtree(d)
    return states, len(names)


K = 1024
# (name, ops, torn= plain, torn= atomic): w OFF LEN [FUA], z OFF LEN [FUA],
# t OFF LEN, f.  torn=sector only where no plain write is large (its
# 2^8 mixes per sector multiply).
FIXED = [
    # The report: the later write settles the atomic one, then tears.
    ("report", [("w", 0, 8 * K), ("f",), ("w", 0, 8 * K), ("w", 512, 512)],
     "garbage", "garbage"),
    # A FUA write makes the earlier unflushed data in its sector durable;
    # a later write to both sectors then tears one of them.
    ("fua", [("w", 0, 8 * K), ("w", 512, 512, True), ("w", 3584, 1024)],
     "unreadable", "sector"),
    # A zero that cuts its sectors: their RMW goes through the cache.
    ("zero", [("w", 0, 12 * K), ("f",), ("z", 1024, 8 * K)],
     "none", "zero"),
    # A full cache destages its oldest sector: sector 1 durable with the
    # second write, sector 0 with the first, then a third write tears it.
    ("destage", [("w", 0, 8 * K), ("w", 0, 8 * K), ("w", 512, 512)],
     "zero", "zero", "write-cache-size=4K"),
]


def random_ops(rng):
    """2 to 5 requests, mostly writes over the same few sectors, the
    last one not a flush."""
    ops = []
    for _ in range(rng.randrange(2, 6)):
        r = rng.random()
        off = rng.randrange(0, 24) * L
        ln = rng.choice((1, 1, 2, 8)) * L
        if r < 0.65:
            ops.append(("w", off, ln, rng.random() < 0.15))
        elif r < 0.75:
            ops.append(("z", off, ln, rng.random() < 0.3))
        elif r < 0.8:
            ops.append(("t", off, ln))
        elif ops:
            ops.append(("f",))
    while ops and ops[-1] == ("f",):
        ops.pop()
    return ops or [("w", 0, L, False)]


seed = int(os.environ.get("SECT4K_SEED") or random.randrange(1 << 30))
tap.diag("random sequences: SECT4K_SEED=%d" % seed)
rng = random.Random(seed)
cases = []
for geom in ("512e", "512e-xp"):
    for atomic in (True, False):
        for name, ops, plain, atom, *extra in FIXED:
            cases.append((geom, atomic, name, ops, atom if atomic else plain,
                          extra))
        for _ in range(RANDOM):
            ops = random_ops(rng)
            # garbage's 8 outcomes and torn=sector's 2^8 mixes per
            # sector multiply: kept for short sequences of small writes
            small = all(op[0] != "w" or op[2] <= 2 * L for op in ops)
            few = sum(op[0] in "wz" for op in ops) <= 3
            cases.append((geom, atomic, "random", ops, rng.choice(
                ("none", "zero", "unreadable")
                + (("garbage",) if few else ())
                + (("sector",) * 2 if small and few else ())), ()))
t0 = time.time()
for geom, atomic, name, ops, torn, extra in cases:
    dev_seed = rng.randrange(1 << 30)
    label = "%s%s %s torn=%s%s" % (geom, " atomic" if atomic else "",
                                   name, torn, " %s" % ops
                                   if name == "random" else "")
    log, images, same = device_cuts(geom, torn, atomic, ops, dev_seed,
                                    extra)
    states, n = explorer_states(log, geom, torn, known_blocks(ops))
    missing = sorted(set(images) - states)
    tap.ok(same, "%s: every run logged the same entries" % label)
    if not tap.ok(images and not missing,
                  "%s: all %d cuts (%d distinct images) are among the %d "
                  "states (device seed %d)" % (label, len(images),
                                               len(set(images)), n,
                                               dev_seed)):
        for m in missing[:3]:
            tap.diag("not among them: " + " ".join(m))
tap.diag("%.1fs" % (time.time() - t0))
shutil.rmtree(tmp, ignore_errors=True)
tap.done_testing()
