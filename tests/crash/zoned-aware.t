#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""sect4k-crash on a host-aware zoned device's log: the states the device
can produce, and every one of them.  A host-aware zone takes writes
anywhere; one written only at its write pointer keeps a prefix of its
unflushed writes at a cut, as a host-managed zone; one written off its
pointer (NON_SEQ, lib/zone/zone.c write_aware; cleared by a reset only)
has its sectors' outcomes one by one, as a conventional zone, and its
pointer goes back to the end of the highest sector the medium holds
(lib/fault/fault_zone.c).  A FUA write or zero settles the zone's
sectors below it (fault_zone_settle); a trim and a reset's zeroes move
no pointer.

1. An oracle simulates the device per logical sector (its durable image,
   its cache, each zone's pointer, durable pointer and NON_SEQ) on logs
   the engine wrote (tests/unit/zonelog.c record, zoned=host-aware, 512n),
   and the states at each mark (--until) and at the end must be the
   explorer's exactly: count and content.  The cases include a zone that
   goes NON_SEQ mid-log, one a reset brings back to the prefix rule, a
   write after FINISH, a FUA write off the pointer settling the sectors
   below it (cutting a write in two), a write across two zones, a trim.
2. Real cuts (tests/unit/zonelog.c cuts, write-cache=true, a seed each):
   every image is among the explorer's states at the log's last crash
   point, on 512e and 4Kn, fixed and random sequences (seed:
   $SECT4K_SEED, else random, printed); on tiny logs the converse too.
3. The report lists the host-aware zones; the summary names them."""
import json
import os
import random
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))
import tap  # noqa: E402
import wlogfmt  # noqa: E402
from crashlib import tmp, CRASH, build_replay_log  # noqa: E402
from zonecuts import (CUTS, GEOMS, ZONELOG, canon_lbas,  # noqa: E402
                      device_cuts, known_blocks, need_zonelog, scale)

need_zonelog()


def run(cmd, **kw):
    env = dict(os.environ, **(tap.sanitizer_env() or {}))
    return subprocess.run(cmd, capture_output=True, text=True, env=env,
                          timeout=300, **kw)


def explorer(log, geom, torn, until=None, report=None, base=None):
    """The images (tuples of per-LBA bytes, E for EIO) of the last crash
    point, their count, and the summary."""
    d = os.path.join(tmp, "states-%d" % random.randrange(1 << 40))
    os.mkdir(d)
    cmd = [CRASH, log, "--geometry", geom, "--torn", torn, "--states",
           "all", "--output", d]
    if until:
        cmd += ["--until", until]
    if report:
        cmd += ["--report", report]
    if base:
        cmd += ["--base", base]
    p = run(cmd)
    if p.returncode:
        tap.diag("sect4k-crash: exit %d: %s" % (p.returncode,
                                                 p.stderr.strip()[:300]))
    names = [n for n in os.listdir(d) if not n.endswith(".eio")]
    last = max((int(n.split("-")[0]) for n in names), default=-1)
    out = []
    for n in names:
        if int(n.split("-")[0]) != last:
            continue
        b = open(os.path.join(d, n), "rb").read()
        L = 512 if geom != "4kn" else 4096
        img = [b[i:i + L] for i in range(0, len(b), L)]
        e = os.path.join(d, n + ".eio")
        if os.path.exists(e):
            for line in open(e):
                a, z = map(int, line.split("-"))
                img[a:z + 1] = ["E"] * (z + 1 - a)
        out.append(tuple(img))
    shutil.rmtree(d)
    return out, p.stdout


# ---- 1. the oracle ---------------------------------------------------------

def oracle(log, until=None, torn="none", base=None):
    """The device's images at the crash before mark `until` (or the
    end): a set of tuples of per-LBA bytes.  L = P (512n).  base: the
    device's bytes where the log starts (its zones: the log's
    sect4k-zonewp entries)."""
    ents = wlogfmt.read_log(log)
    geo = dict(kv.split("=") for kv in ents[0][5].split()[1:] if "=" in kv)
    size, L = int(geo["size"]), int(geo["logical"])
    assert int(geo["physical"]) == L
    lay = dict(kv.split("=") for kv in ents[1][5].split()[1:])
    zl = int(lay["zone-size"]) // L
    conv = int(lay["zone-conventional"])
    NL, zero = size // L, bytes(L)
    nz = (NL + zl - 1) // zl
    seq = range(conv, nz)
    D = [zero] * NL                     # the medium
    if base:
        b = open(base, "rb").read()
        D = [b[x * L:(x + 1) * L] for x in range(NL)]
    cache = {}                          # LBA -> the cached bytes
    wp = {z: z * zl for z in seq}       # the zone model's pointer
    dwp = dict(wp)                      # durable pointer
    mwp = dict(wp)                      # end of what was destaged
    nonseq, opened = set(), set()

    def zone(x):
        return x // zl if x // zl >= conv else None

    def zend(z):
        return min((z + 1) * zl, NL)

    def destage(lbas):
        for x in lbas:
            if x in cache:
                D[x] = cache.pop(x)
                z = zone(x)
                if z is not None:
                    mwp[z] = max(mwp[z], x + 1)

    def zone_lbas(z):
        return range(z * zl, zend(z))

    def moved(a, b):                    # write_aware
        for z in seq:
            s, e = max(a, z * zl), min(b, zend(z))
            if s >= e:
                continue
            if s != wp[z]:
                nonseq.add(z)
            wp[z] = max(wp[z], e)

    reset_zone = None
    for i, flags, off, ln, data, mark in ents[2:]:
        if flags & wlogfmt.MARK:
            reset_zone = None
            if mark == until:
                break
            if mark.startswith("sect4k-zonewp "):
                kv = mark.split()
                z = zone(int(kv[1][4:]))
                wp[z] = dwp[z] = mwp[z] = int(kv[2][3:])
                if "non-seq" in kv:
                    nonseq.add(z)
                continue
            if not mark.startswith("sect4k-zone "):
                continue
            op, arg = mark.split()[1:]
            zs = list(seq) if arg == "all" else [zone(int(arg[4:]))]
            for z in zs:
                empty = wp[z] == z * zl and z not in opened
                if op == "open":
                    if arg != "all" and wp[z] == z * zl:
                        opened.add(z)
                    continue
                if op == "close":
                    opened.discard(z)
                    destage(zone_lbas(z))
                    dwp[z] = mwp[z] = wp[z]
                    continue
                if arg == "all" and empty:
                    continue            # RESET/FINISH ALL skip EMPTY
                destage(zone_lbas(z))
                opened.discard(z)
                if op == "reset":
                    wp[z] = z * zl
                    nonseq.discard(z)
                    reset_zone = reset_zone or set()
                    reset_zone.add(z)
                else:                   # finish
                    wp[z] = zend(z)
                dwp[z] = mwp[z] = wp[z]
            continue
        a, b = off // L, (off + ln) // L
        if flags & wlogfmt.FLUSH:
            destage(list(cache))
            dwp.update(wp)
        if not ln:
            continue
        if flags & wlogfmt.DISCARD:
            for x in range(a, b):
                cache.pop(x, None)
                D[x] = zero
            continue
        raw = (reset_zone and flags & wlogfmt.ZERO and zone(a) in reset_zone
               and a == zone(a) * zl)
        if not raw:
            reset_zone = None
            moved(a, b)
        durable = flags & (wlogfmt.FUA | wlogfmt.ZERO)
        if durable:
            z = zone(a)
            if z is not None:           # fault_zone_settle: below it
                destage(range(z * zl, a))
                dwp[z] = max(dwp[z], min(b, zend(z)))
        for x in range(a, b):
            v = data[(x - a) * L:(x - a + 1) * L]
            if durable:
                cache.pop(x, None)
                D[x] = v
            else:
                cache[x] = v
    # The cut: per conventional or NON_SEQ sector, or a prefix per zone.
    groups = []
    zero_opt = torn == "zero"
    for x in sorted(cache):
        if zone(x) is None:
            groups.append([{x: cache[x]}, {}] +
                          ([{x: zero}] if zero_opt else []))
    for z in seq:
        dirty = [x for x in sorted(cache) if zone(x) == z]
        opts = []
        if z in nonseq:
            for m in range(3 ** len(dirty) if zero_opt else
                           2 ** len(dirty)):
                o, k = {}, m
                for x in dirty:
                    c, k = k % (3 if zero_opt else 2), k // (3 if zero_opt
                                                             else 2)
                    if c == 0:
                        o[x] = cache[x]
                    elif c == 2:
                        o[x] = zero
                medium = max([dwp[z], mwp[z]] + [x + 1 for x in o])
                for x in range(min(medium, wp[z]), wp[z]):
                    o[x] = zero
                opts.append(o)
        elif dirty:
            run_ = [dirty[0]]
            while len(run_) < len(dirty) and dirty[len(run_)] == \
                    run_[-1] + 1:
                run_.append(dirty[len(run_)])
            for c in range(len(run_) + 1):
                o = {x: cache[x] for x in run_[:c]}
                for x in range(run_[0] + c, wp[z]):
                    o[x] = zero
                opts.append(o)
                if zero_opt and c < len(run_):
                    o = dict(o)
                    o[run_[c]] = zero
                    opts.append(o)
        if opts:
            groups.append(opts)
    images = {tuple(D)}
    for g in groups:
        nxt = set()
        for img in images:
            for o in g:
                new = list(img)
                for x, v in o.items():
                    new[x] = v
                nxt.add(tuple(new))
        images = nxt
    return images


KEYS512N = ("size=32K model=512n zoned=host-aware zone-size=8K "
            "zone-conventional=1")
# LBAs: zone 0 conventional 0-15, sequential zones at 16, 32, 48.
CASES = [
    # A zone written at its pointer, then off it (a gap): the prefix
    # rule before the mark, sectors one by one after it.
    ("nonseq-mid", ["w:16:1", "w:17:2", "w:32:1", "mark:m1", "w:21:1",
                    "w:33:1", "w:2:1"]),
    # Off the pointer below it: a rewrite of a flushed sector.
    ("rewrite", ["w:16:2", "f", "w:18:1", "mark:m1", "w:16:1", "w:19:1"]),
    # NON_SEQ, then a reset: the prefix rule again (the reset's zeroes
    # move nothing); NON_SEQ survives a flush and a finish.
    ("reset", ["w:20:1", "w:16:1", "f", "w:17:1", "mark:m1", "reset:16",
               "w:16:1", "w:17:1", "mark:m2", "w:34:1", "f",
               "finish:32", "w:35:1"]),
    # After FINISH the pointer is the zone's end: any write is off it.
    ("finish", ["w:16:1", "finish:16", "w:17:2", "mark:m1", "w:32:1",
                "w:33:1", "finish:all", "w:36:1"]),
    # A FUA write off the pointer settles the zone's sectors below it,
    # cutting a write across it in two; a zero too.
    ("fua", ["w:16:4", "mark:m1", "w:18:1:fua", "w:24:2", "mark:m2",
             "w:32:3", "w:40:1", "z:34:1", "w:41:1"]),
    # A write across two zones at both pointers: a prefix in each; a
    # trim moves no pointer; an explicitly opened empty zone finishes
    # with FINISH ALL.
    ("across", ["w:16:14", "w:30:4", "mark:m1", "w:34:1", "trim:36:2",
                "w:35:1", "open:48", "finish:all", "w:48:1"]),
    # RESET ALL clears NON_SEQ; close settles.
    ("all", ["w:16:1", "w:18:1", "w:33:1", "close:16", "w:19:1",
             "mark:m1", "reset:all", "w:16:1", "w:17:1", "w:32:1"]),
]


for name, ops in CASES:
    log = os.path.join(tmp, name + ".log")
    p = run([ZONELOG, "record", log, os.path.join(tmp, name + ".img"),
             KEYS512N] + ops)
    if not tap.ok(p.returncode == 0, "%s: the engine wrote the log: %s"
                  % (name, (p.stdout + p.stderr).strip()[:200])):
        continue
    marks = [o[5:] for o in ops if o.startswith("mark:")] + [None]
    for torn in ("none", "zero"):
        for m in marks:
            want = oracle(log, m, torn)
            got, _ = explorer(log, "512n", torn, until=m)
            ok = tap.ok(len(got) == len(want) and set(got) == want,
                        "%s torn=%s %s: the explorer's %d states are the "
                        "device's %d" % (name, torn,
                                         "before " + m if m else "at the end",
                                         len(got), len(want)))
            if not ok:
                extra, miss = set(got) - want, want - set(got)
                tap.diag("%d not the device's, %d missing"
                         % (len(extra), len(miss)))

# ---- the zones' state where the log starts ----------------------------------
# A device whose zones file= restored logs them after the layout
# ("sect4k-zonewp"): zone 16 NON_SEQ at 19, zone 32 at 33, both taken
# as they are (the same writes from empty zones would be off both
# pointers: 16 states, not 12).  replay-log takes the entries as marks.
d = os.path.join(tmp, "restored")
os.mkdir(d)
F, base = os.path.join(d, "F"), os.path.join(d, "base")
keys = KEYS512N + " file=" + F
l1, l2 = os.path.join(d, "l1"), os.path.join(d, "l2")
p1 = run([ZONELOG, "record", l1, l1 + ".img", keys, "w:16:1", "w:18:1",
          "w:32:1", "f"])
shutil.copy(F, base)
p2 = run([ZONELOG, "record", l2, l2 + ".img", keys, "w:19:1", "w:20:1",
          "w:33:1", "w:34:1"])
marks = [e[5] for e in wlogfmt.read_log(l2) if e[5]]
tap.ok(p1.returncode == 0 and p2.returncode == 0 and
       marks[2:] == ["sect4k-zonewp lba=16 wp=19 non-seq",
                     "sect4k-zonewp lba=32 wp=33"],
       "a device with restored zones logs them after the layout: %s %s"
       % (marks[2:], (p1.stderr + p2.stderr).strip()[:200]))
for torn in ("none", "zero"):
    want = oracle(l2, None, torn, base)
    got, _ = explorer(l2, "512n", torn, base=base)
    tap.ok(len(got) == len(want) and (torn != "none" or len(want) == 12) and
           set(got) == want, "restored zones torn=%s: the explorer's %d "
           "states are the device's %d" % (torn, len(got), len(want)))
for name, want in (("sect4k-zonewp lba=17 wp=18", "no sequential zone "
                    "starts at LBA 17"),
                   ("sect4k-zonewp lba=16 wp=40", "with its pointer there"),
                   ("sect4k-zonewp lba=16 wp=18 nonseq", "does not parse")):
    bad = os.path.join(d, "bad.log")
    w = wlogfmt.LogWriter(bad, 32768, 512, 512,
                          zones=("host-aware", 8192, 1))
    w.mark(name)
    w.write(16 * 512, bytes(512))
    w.close()
    p = run([CRASH, bad, "--geometry", "512n", "--states", "all",
             "--output", d])
    tap.ok(p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and
           want in p.stderr, "%s: refused in one line: %s"
           % (name, p.stderr.strip()))
REPLAY, no_replay = build_replay_log()
if not REPLAY:
    tap.skip("replay-log replays a log with zone states", no_replay)
else:
    out = os.path.join(d, "replay")
    shutil.copy(base, out)
    p = run([REPLAY, "--log", l2, "--replay", out])
    tap.ok(p.returncode == 0 and open(out, "rb").read() ==
           open(l2 + ".img", "rb").read(),
           "replay-log replays a log with zone states to the device's "
           "image: %s" % p.stderr.strip()[:200])

# ---- 2. real cuts ------------------------------------------------------------
def cut_images(geom, torn, ops, seed, runs):
    log, imgs = device_cuts(geom, torn, ops, seed, runs, model="host-aware")
    return log, imgs, known_blocks(ops, GEOMS[geom][0])


# 512e: zone 0 conventional 0-31, zones at 32, 64, 96; 8 LBAs a sector.
FIXED = [
    ("nonseq", ["w:32:8", "w:40:8", "w:56:8", "w:64:8", "w:72:8"]),
    ("nonseq-below", ["w:32:16", "f", "w:48:8", "w:32:8", "w:56:8"]),
    ("reset-prefix", ["w:40:8", "w:32:8", "reset:32", "w:32:8", "w:40:8",
                      "w:48:8"]),
    ("finish-write", ["w:32:8", "finish:32", "w:40:8", "w:48:8"]),
    ("fua-below", ["w:32:8", "w:48:16", "w:40:8:fua", "w:64:8",
                   "w:80:8", "w:72:8:fua"]),
    ("across", ["w:32:24", "w:56:16", "w:72:8", "w:0:8"]),
    ("sub-sector", ["w:32:3", "w:35:5", "w:64:2", "w:70:4"]),
]


def random_ops(rng, geom):
    """3 to 7 requests: writes at a zone's pointer or anywhere in it
    (whole physical sectors), some FUA, conventional writes, flushes,
    zone operations."""
    L, size, zl = GEOMS[geom]
    P = 4096 // L
    wp = {z: z * zl for z in (1, 2, 3)}
    ops = []
    for _ in range(rng.randrange(3, 8)):
        r = rng.random()
        z = rng.choice((1, 2, 3))
        fua = ":fua" if rng.random() < 0.15 else ""
        if r < 0.4 and wp[z] < (z + 1) * zl:
            n = min(rng.choice((1, 1, 2)) * P, (z + 1) * zl - wp[z])
            ops.append("w:%d:%d%s" % (wp[z], n, fua))
            wp[z] += n
        elif r < 0.6:
            lba = z * zl + rng.randrange(zl // P) * P
            ops.append("w:%d:%d%s" % (lba, P, fua))
            wp[z] = max(wp[z], lba + P)
        elif r < 0.68:
            lba = rng.randrange(zl)
            ops.append("w:%d:%d" % (lba, rng.randint(1, min(P, zl - lba))))
        elif r < 0.76:
            ops.append("f")
        else:
            op = rng.choice(("close", "finish", "reset", "open"))
            all_ = rng.random() < 0.15
            ops.append("%s:%s" % (op, "all" if all_ else z * zl))
            for k in ((1, 2, 3) if all_ else (z,)):
                if op == "finish" and (not all_ or wp[k] > k * zl):
                    wp[k] = (k + 1) * zl
                elif op == "reset":
                    wp[k] = k * zl
    return ops or ["w:%d:%d" % (zl, P)]


seed = int(os.environ.get("SECT4K_SEED") or random.randrange(1 << 30))
tap.diag("random sequences: SECT4K_SEED=%d" % seed)
rng = random.Random(seed)
cases = []
for geom in GEOMS:
    torns = ("none", "zero", "garbage") + (("unreadable",)
                                           if geom == "512e" else ())
    for name, ops in FIXED:
        if geom == "4kn" and name == "sub-sector":
            continue
        for torn in torns:
            cases.append((geom, name, scale(geom, ops), torn))
    for _ in range(8):
        cases.append((geom, "random", random_ops(rng, geom),
                      rng.choice(torns)))
for geom, name, ops, torn in cases:
    dev_seed = rng.randrange(1 << 30)
    log, imgs, known = cut_images(geom, torn, ops, dev_seed, CUTS)
    L = GEOMS[geom][0]
    got, _ = explorer(log, geom, torn)
    states = {canon_lbas(s, L, known) for s in got}
    missing = sorted(set(imgs) - states)
    if not tap.ok(imgs and not missing,
                  "%s %s torn=%s%s: all %d cuts (%d distinct) are among "
                  "the %d states (device seeds from %d)"
                  % (geom, name, torn, " " + " ".join(ops)
                     if name == "random" else "", len(imgs),
                     len(set(imgs)), len(got), dev_seed)):
        for m in missing[:3]:
            tap.diag("not among them: " + " ".join(m))

# The converse on tiny logs: every state is an image some seed gives.
TINY = [("512e", "zero", ["w:32:8", "w:48:8", "w:40:8"]),
        ("512e", "zero", ["w:32:8", "w:40:8", "w:64:8", "w:80:8"]),
        ("4kn", "garbage", ["w:16:1", "w:18:1", "w:32:1", "w:33:1"]),
        ("512e", "zero", ["w:40:8", "w:32:8", "reset:32", "w:32:8",
                          "w:40:8"])]
for geom, torn, ops in TINY:
    L = GEOMS[geom][0]
    log, imgs, known = cut_images(geom, torn, ops, 1, 400)
    got, _ = explorer(log, geom, torn)
    states = {canon_lbas(s, L, known) for s in got}
    if not tap.ok(set(imgs) == states and len(got) == len(states),
                  "%s torn=%s %s: the %d states are the %d distinct images "
                  "of 400 seeds" % (geom, torn, " ".join(ops), len(got),
                                    len(set(imgs)))):
        for m in sorted(states - set(imgs))[:3]:
            tap.diag("no seed gave: " + " ".join(m))
        for m in sorted(set(imgs) - states)[:3]:
            tap.diag("not a state: " + " ".join(m))

# ---- 3. the report ------------------------------------------------------------
log = os.path.join(tmp, "nonseq-mid.log")
rep = os.path.join(tmp, "aware-report.json")
got, out = explorer(log, "512n", "none", report=rep)
r = json.load(open(rep)) if os.path.exists(rep) else {"states": []}
last = [s for s in r["states"] if s["crash_point"] ==
        max(x["crash_point"] for x in r["states"])]
zs = {tuple((z["zone"], z["wp_before"], z["wp_after"], z["cond_after"])
            for z in s.get("zones", [])) for s in last}
tap.ok("host-aware zones of 8192 bytes (sequential from LBA 16)" in out,
       "the summary names the host-aware zones: %s" % out.strip()[:200])
# Zone 16 NON_SEQ (w:16:1 w:17:2, then w:21:1): back to the end of its
# highest sector kept; zone 32 a prefix of w:32:1 w:33:1.
tap.ok(((16, 22, 22, "closed"), (32, 34, 34, "closed")) in zs and
       ((16, 22, 17, "closed"), (32, 34, 32, "empty")) in zs and
       ((16, 22, 16, "empty"), (32, 34, 33, "closed")) in zs and
       not any(z[0][2] in (20, 21) for z in zs) and len(zs) == 5 * 3,
       "the report lists the host-aware zones, a NON_SEQ one's pointer "
       "at its highest kept sector (%d combinations)" % len(zs))
shutil.rmtree(tmp, ignore_errors=True)
tap.done_testing()
