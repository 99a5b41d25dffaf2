#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""write-log= against xfstests' replay-log, the tool dm-log-writes users
replay logs with (issue 29 item 5), built from $SECT4K_REPLAY_LOG_SRC or
shared/replay-log beside the repository (the whole file skips where
neither is there; never copied into sect4k).

For both front ends, 512n/512e/512e-xp/4kn and strict true and false: a
workload of writes, FUA writes, zeroes (plain, no-hole, fast), trims,
flushes and marks (sect4k-ctl), with the device read over NBD at each
mark.  replay-log replays the log in full, to each mark (--end-mark, and
--limit up to the entry --find gives), and from each mark (--start-mark
onto the device as it was there); each image must equal the device at
that point.  --check flush --fsck runs its command at every flush.
sect4k-crash's state at each mark equals replay-log's image to it.

Then a randomized run (seed: $SECT4K_SEED, else random, printed): a
random geometry, random aligned and unaligned writes, zeroes and trims
with strict=false, on both front ends: replay-log's full replay and
sect4k-crash's last state both equal the device."""
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "server"))
from tap import ok, diag, done_testing, Nbdkit, need_nbd, skip_all  # noqa: E402
from srvlib import Server, SERVER  # noqa: E402
from crashlib import CRASH, ROOT, build_replay_log  # noqa: E402

# Decided before anything runs: without replay-log the whole file skips.
REPLAY, why = build_replay_log()
if not REPLAY:
    skip_all(why)
nbd = need_nbd()
CTL = os.path.join(ROOT, "scripts", "sect4k-ctl")
SIZE = 1 << 20
MARK, FLUSH = 8, 1

tmp = tempfile.mkdtemp(prefix="sect4k-replay.")


def replay_log(log, base, *args):
    """replay-log onto a copy of base (bytes, or None: zeroes): (rc,
    image bytes, stderr)."""
    img = os.path.join(tmp, "img")
    with open(img, "wb") as f:
        f.write(base if base is not None else bytes(SIZE))
    p = subprocess.run([REPLAY, "--log", log, "--replay", img] + list(args),
                       capture_output=True, text=True, timeout=60)
    with open(img, "rb") as f:
        return p.returncode, f.read(), p.stderr.strip()


def crash_state(log, geom, until=None):
    """sect4k-crash's last state (at --until MARK, or the log's end): the
    image bytes, or its error."""
    rep = os.path.join(tmp, "rep.json")
    u = ["--until", until] if until else []
    p = subprocess.run([CRASH, log, "--geometry", geom, "--report", rep,
                        "--states", "1"] + u
                       + ["--", "true"], capture_output=True, text=True,
                       timeout=60)
    if p.returncode:
        return (p.stdout + p.stderr).strip()[:300]
    last = json.load(open(rep))["states"][-1]["id"]
    out = os.path.join(tmp, "state")
    p = subprocess.run([CRASH, log, "--geometry", geom] + u
                       + ["--state", last, "--output", out],
                       capture_output=True, text=True, timeout=60)
    if p.returncode:
        return p.stderr.strip()[:300]
    with open(out, "rb") as f:
        return f.read()


def flags_of(log):
    """The flags of every entry, from the log's headers."""
    with open(log, "rb") as f:
        raw = f.read()
    _, _, nr, ss = struct.unpack_from("<QQQI", raw, 0)
    pos, out = ss, []
    for _ in range(nr):
        _, n, flags, _ = struct.unpack_from("<QQQQ", raw, pos)
        out.append(flags)
        pos += ss + (0 if flags & (MARK | 4) else n * ss)
    return out


def first_diff(a, b):
    """Where image a (bytes, or an error string) differs from image b."""
    if isinstance(a, str):
        return a
    a, b = bytes(a), bytes(b)
    if len(a) != len(b):
        return "%d bytes against %d" % (len(a), len(b))
    i = next(i for i in range(len(a)) if a[i] != b[i])
    return "first difference at byte %d" % i


FRONTENDS = [("nbdkit", lambda *a: Nbdkit(*a)),
             ("sect4k-server", lambda *a: Server(*a))]
GEOMS = {"512n": 512, "512e": 512, "512e-xp": 512, "4kn": 4096}


def workload(h, ctl, L, strict, snaps):
    """Writes, FUA, zeroes, trims, flushes and three marks; snaps[mark] =
    the device read over NBD right after the mark."""
    rnd = random.Random(L)
    u = 0 if strict else 1              # unaligned requests too

    def data(n):
        return bytes(rnd.randrange(1, 256) for _ in range(n))

    def mark(name):
        h.flush()
        r = subprocess.run([CTL, ctl, "mark", name], capture_output=True,
                           text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        snaps[name] = bytes(h.pread(SIZE, 0))

    h.pwrite(data(8 * L), 0)
    h.pwrite(data(16384), 65536, nbd.CMD_FLAG_FUA)
    h.pwrite(data(L), 8192 + L)
    if u:
        h.pwrite(data(1000), 5000)
        h.pwrite(data(100), 200000 + 77, nbd.CMD_FLAG_FUA)
    mark("writes")
    h.zero(4 * L, 0)
    h.zero(8192, 65536 + 4096, nbd.CMD_FLAG_NO_HOLE)
    if h.can_fast_zero():
        h.zero(4096, 131072, nbd.CMD_FLAG_FAST_ZERO)
    h.pwrite(data(32768), 262144)
    if u:
        h.zero(300, 262144 + 1000)
        h.zero(5000, 262144 + 7000, nbd.CMD_FLAG_NO_HOLE)
    mark("zeroes")
    h.trim(65536, 262144)
    h.trim(4 * L, 8192 + L)
    if u:
        h.trim(9000, 300000 + 100)
    h.flush()
    h.pwrite(data(2 * L), 262144 + 4 * L, nbd.CMD_FLAG_FUA)
    mark("trims")
    h.pwrite(data(4096), 512 * 1024)
    if u:
        h.pwrite(data(10), 512 * 1024 + 4090)
    h.zero(L, 600000 // L * L)


def check(fe, start, model, strict):
    name = "%s %s strict=%s" % (fe, model, strict)
    L = GEOMS[model]
    d = tempfile.mkdtemp(prefix="w.", dir=tmp)
    log, ctl = os.path.join(d, "log"), os.path.join(d, "ctl")
    snaps = {}
    with start("size=%d" % SIZE, "model=" + model,
               "strict=" + ("true" if strict else "false"),
               "write-log=" + log, "control=" + ctl) as srv:
        h = nbd.NBD()
        h.set_strict_mode(0)
        h.connect_uri(srv.uri)
        workload(h, ctl, L, strict, snaps)
        final = bytes(h.pread(SIZE, 0))
        h.shutdown()
        srv.stop()
    geom = "%s,size=%d" % (model, SIZE)
    bad = []
    rc, img, err = replay_log(log, None)
    if rc or img != final:
        bad.append("full replay: rc %d %s %s" % (rc, err, first_diff(img, final)
                                                  if not rc else ""))
    prev = None
    for m, snap in snaps.items():
        rc, img, err = replay_log(log, None, "--end-mark", m)
        if rc or img != snap:
            bad.append("--end-mark %s: rc %d %s" % (m, rc, err))
        p = subprocess.run([REPLAY, "--log", log, "--find", "--end-mark", m],
                           capture_output=True, text=True, timeout=60)
        entry = int(p.stdout.split("@")[0]) if p.returncode == 0 else -1
        rc, img, err = replay_log(log, None, "--limit", str(entry + 1))
        if entry < 0 or rc or img != snap:
            bad.append("--limit %d (--find %s): rc %d %s" % (entry + 1, m,
                                                             rc, err))
        rc, img, err = replay_log(log, snap, "--start-mark", m)
        if rc or img != final:
            bad.append("--start-mark %s: rc %d %s" % (m, rc, err))
        if prev is not None:
            rc, img, err = replay_log(log, snaps[prev], "--start-mark", prev,
                                      "--end-mark", m)
            if rc or img != snap:
                bad.append("--start-mark %s --end-mark %s: rc %d" % (prev, m,
                                                                    rc))
        prev = m
        st = crash_state(log, geom, m)
        if st != snap:
            bad.append("sect4k-crash --until %s: %s" % (m, first_diff(st,
                                                                     snap)))
    count = os.path.join(d, "fscks")
    rc, img, err = replay_log(log, None, "--check", "flush", "--fsck",
                              "echo x >> " + count)
    fscks = len(open(count).read().split()) if os.path.exists(count) else 0
    flushes = sum(1 for f in flags_of(log) if f & FLUSH)
    if rc or img != final or fscks != flushes or flushes < 4:
        bad.append("--check flush --fsck: rc %d, %d fsck runs for %d "
                   "flushes %s" % (rc, fscks, flushes, err))
    ok(not bad, "%s: replay-log in full, to, from and between each of %d "
       "marks, --limit, --check flush --fsck; sect4k-crash at each mark"
       % (name, len(snaps)))
    for b in bad:
        diag(b)


for fe, start in FRONTENDS:
    for model in GEOMS:
        for strict in (True, False):
            check(fe, start, model, strict)


# ---- randomized: random geometry, requests with strict=false ----------

seed = int(os.environ.get("SECT4K_SEED") or random.randrange(1 << 30))
diag("randomized part: SECT4K_SEED=%d" % seed)
rnd = random.Random(seed)
L = rnd.choice([512, 1024, 2048, 4096])
P = L << rnd.randrange(0, 5 if L < 4096 else 3)
A = rnd.randrange(0, P // L) * L
geo = ("logical=%d" % L, "physical=%d" % P, "alignment-offset=%d" % A)
geom = ",".join(geo + ("size=%d" % SIZE,))


def random_ops(h, rnd):
    for _ in range(150):
        op = rnd.random()
        aligned = rnd.random() < 0.4
        n = rnd.choice([1, 10, 100, L - 1, L, L + 1, 3 * L, P, 2 * P + 7,
                        rnd.randrange(1, 40000)])
        off = rnd.randrange(0, SIZE - n)
        if aligned:
            off, n = off // L * L, max(L, n // L * L)
            if off + n > SIZE:
                off = SIZE - n
        fl = nbd.CMD_FLAG_FUA if rnd.random() < 0.2 else 0
        if op < 0.55:
            h.pwrite(bytes(rnd.randrange(256) for _ in range(n)), off, fl)
        elif op < 0.75:
            if rnd.random() < 0.5:
                fl |= nbd.CMD_FLAG_NO_HOLE
            h.zero(n, off, fl)
        elif op < 0.9:
            h.trim(n, off, fl)
        else:
            h.flush()


for fe, start in FRONTENDS:
    d = tempfile.mkdtemp(prefix="r.", dir=tmp)
    log = os.path.join(d, "log")
    with start("size=%d" % SIZE, "strict=false", "write-log=" + log,
               *geo) as srv:
        h = nbd.NBD()
        h.set_strict_mode(0)
        h.connect_uri(srv.uri)
        random_ops(h, random.Random(seed))
        h.flush()
        final = bytes(h.pread(SIZE, 0))
        h.shutdown()
        srv.stop()
    rc, img, err = replay_log(log, None)
    ok(rc == 0 and img == final,
       "random %s, logical=%d physical=%d alignment-offset=%d: replay-log's "
       "replay is the device%s" % (fe, L, P, A, "" if rc == 0 and img == final
                                   else ": rc %d %s %s" % (rc, err,
                                                           first_diff(img,
                                                                      final))))
    st = crash_state(log, geom)
    ok(st == final, "random %s: sect4k-crash's last state is the device%s"
       % (fe, "" if st == final else ": " + first_diff(st, final)))

shutil.rmtree(tmp, ignore_errors=True)
done_testing()
