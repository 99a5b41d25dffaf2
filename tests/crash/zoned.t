#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""sect4k-crash on a zoned device's log (issue 33, sect4k-crash(1) "Zoned
drives"): in every sequential write required zone a state keeps a prefix,
in log (acknowledged) order, of the zone's unflushed writes, cut at a
physical sector that torn= may tear; conventional zones keep the per-sector
rule; a FUA write, a zero, a reset, a finish or a close makes its zone durable
(the device destages a zone it closes: lib/fault/fault_zone.c).
An oracle enumerates those states here independently, per logical sector,
and each crash point's states must be exactly the tool's (--states all,
--output DIR): count and content.  Hand-built logs (512n: the prefix
rule, durability; 512e: torn, unreadable and garbage cut sectors), then a
log the engine wrote (tests/unit/zonelog.c record: writes, FUA, flush,
finish, reset, open, close on a host-managed device), whose last state
with everything kept is the device's image and whose states served to a
checker over NBD are the same.  A state where a zone keeps
a later write without an earlier one is absent and refused by --state;
a log a host-managed drive cannot write is refused in one line.
replay-log checks (the engine's log replays to the device's image) are
skipped with the reason where its sources are absent."""
import itertools
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))
import tap  # noqa: E402
import wlogfmt  # noqa: E402
from crashlib import tmp, CRASH, ROOT, build_replay_log  # noqa: E402

BUILD = os.environ.get("SECT4K_BUILD", os.path.join(ROOT, "build",
                                                    "default"))
ZONELOG = os.path.join(BUILD, "tests", "unit-zonelog")
DUMP = os.path.join(BUILD, "sect4k-wlog-dump")
if not os.path.exists(ZONELOG) or not os.path.exists(DUMP):
    tap.skip_all("tests/unit-zonelog or sect4k-wlog-dump is not built")
REPLAY, no_replay = build_replay_log()


def torn_opts(torn, lbas, old, new):
    """What an interrupted write leaves in a sector (lbas), per policy."""
    per = len(lbas)
    out = []
    if torn == "sector" and per > 1:
        for m in itertools.product((0, 1), repeat=per):
            if 0 < sum(m) < per:
                out.append({x: (new if m[k] else old)[x]
                            for k, x in enumerate(lbas)})
    if torn == "unreadable" and per > 1:
        out.append({x: "E" for x in lbas})
    if torn == "garbage":
        for b in range(per):
            out.append({x: new[x] if k < b else "G"
                        for k, x in enumerate(lbas)})
    if torn == "zero":
        out.append({x: bytes(len(new[x])) for x in lbas})
    return out


def oracle(path, torn):
    """{crash point: set of images}, images as tuples of per-LBA values
    (hex, E, G), and the values written."""
    ents = wlogfmt.read_log(path)
    geo = dict(kv.split("=") for kv in ents[0][5].split()[1:] if "=" in kv)
    size, L, P = int(geo["size"]), int(geo["logical"]), int(geo["physical"])
    lay = dict(kv.split("=") for kv in ents[1][5].split()[1:])
    zl = int(lay["zone-size"]) // L
    seq0 = int(lay["zone-conventional"]) * zl
    per, NL, zero = P // L, size // L, bytes(L)

    def zone(lba):
        return lba // zl if lba >= seq0 else None

    writes, pend, cps = [], [], []
    st = {"f": 0}

    def durable(before, i):
        w = writes[i]
        return w["early"] or (w["settled"] is not None and
                              w["settled"] < before)

    def add_cp(before):
        f, nw = st["f"], len(writes)
        d = frozenset(i for i in range(f, nw) if durable(before, i))
        if cps:
            _, pnw, pf, pd = cps[-1]
            if pnw == nw and ((pf == f and pd == d) or
                              (len(pd) == pnw - pf and len(d) == nw - f)):
                return
        cps.append((before, nw, f, d))

    def settle(z, e):
        for i in list(pend):
            if z is None or writes[i]["zone"] == z:
                writes[i]["settled"] = e
                pend.remove(i)

    for i, flags, off, ln, data, mark in ents:
        if flags & wlogfmt.MARK:
            if mark.startswith("sect4k-zone "):
                op, arg = mark.split()[1:]
                z = None if arg == "all" else zone(int(arg[4:]))
                if op in ("reset", "finish", "close") and any(
                        z is None or writes[j]["zone"] == z for j in pend):
                    add_cp(i)
                    settle(z, i)
            continue
        if flags & wlogfmt.FLUSH:
            add_cp(i)
            st["f"] = len(writes)
            pend.clear()
        if ln:
            early = bool(flags & (wlogfmt.FUA | wlogfmt.ZERO |
                                  wlogfmt.DISCARD))
            if early:
                add_cp(i)
            z = zone(off // L)
            writes.append({"lba": off // L, "early": early, "zone": z,
                           "atomic": bool(flags & wlogfmt.ATOMIC),
                           "settled": None,
                           "d": [data[j * L:(j + 1) * L]
                                 for j in range(ln // L)]})
            if z is not None and not early:
                pend.append(len(writes) - 1)
            if z is not None and early:
                settle(z, i)
    add_cp(len(ents))

    def apply(img, w):
        img[w["lba"]:w["lba"] + len(w["d"])] = w["d"]

    def sectors(w):
        return sorted({(w["lba"] + j) // per for j in range(len(w["d"]))})

    out = {}
    for cpi, (before, nw, f, dur) in enumerate(cps):
        old = [zero] * NL
        for w in writes[:f]:
            apply(old, w)
        for i in sorted(dur):
            apply(old, writes[i])
        vol = [i for i in range(f, nw) if i not in dur]
        free = [i for i in vol if writes[i]["zone"] is None]
        groups = {}
        for i in vol:
            if writes[i]["zone"] is not None:
                groups.setdefault(writes[i]["zone"], []).append(i)
        # Per zone: its choices, each a dict of LBA values over old.
        zchoices = []
        for z, ws in groups.items():
            stream = [(p, i) for i in ws for p in sectors(writes[i])]
            opts = []
            for c in range(len(stream) + 1):
                img = list(old)
                for p, i in stream[:c]:
                    new = list(img)
                    apply(new, writes[i])
                    img[p * per:(p + 1) * per] = new[p * per:(p + 1) * per]
                base = {x: img[x] for p, _ in stream[:c]
                        for x in range(p * per, (p + 1) * per)}
                if c < len(stream):
                    p, i = stream[c]
                    first = p == sectors(writes[i])[0]
                    if writes[i]["atomic"] and not first:
                        continue        # an atomic write is never cut
                    opts.append(base)
                    if writes[i]["atomic"]:
                        continue
                    new = list(old)
                    apply(new, writes[i])
                    lbas = range(p * per, (p + 1) * per)
                    for t in torn_opts(torn, lbas, old, new):
                        o = dict(base)
                        o.update(t)
                        opts.append(o)
                else:
                    opts.append(base)
            zchoices.append(opts)
        images = set()
        for r in range(len(free) + 1):
            for S in itertools.combinations(free, r):
                new = list(old)
                for i in range(f, nw):
                    if i in dur or i in S:
                        apply(new, writes[i])
                fchoices = []
                for p in sorted({p for i in S for p in sectors(writes[i])}):
                    lbas = range(p * per, (p + 1) * per)
                    fchoices.append([{x: new[x] for x in lbas},
                                     {x: old[x] for x in lbas}] +
                                    torn_opts(torn, lbas, old, new))
                for combo in itertools.product(*(fchoices + zchoices)):
                    img = list(old)
                    for o in combo:
                        for x, v in o.items():
                            img[x] = v
                    images.add(tuple(v if isinstance(v, str) else v.hex()
                                     for v in img))
        out[cpi] = images
    known = {zero.hex()} | {d.hex() for w in writes for d in w["d"]}
    return out, known, L


def tool(path, geom, torn, name):
    """{crash point: [images]} from --states all --output DIR (or the
    error line)."""
    d = os.path.join(tmp, name)
    os.mkdir(d)
    p = subprocess.run([CRASH, path, "--geometry", geom, "--torn", torn,
                        "--states", "all", "--output", d],
                       capture_output=True, text=True, timeout=300)
    if p.returncode:
        return p.stderr.strip()
    return d


def compare(path, geom, torn, name, counts=None):
    want, known, L = oracle(path, torn)
    d = tool(path, geom, torn, name)
    if not os.path.isdir(d):
        tap.ok(False, "%s torn=%s: %s" % (name, torn, d))
        return {}
    got = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".eio"):
            continue
        b = open(os.path.join(d, f), "rb").read()
        img = [b[x * L:(x + 1) * L].hex() for x in range(len(b) // L)]
        img = [v if v in known else "G" for v in img]
        if os.path.exists(os.path.join(d, f + ".eio")):
            for line in open(os.path.join(d, f + ".eio")):
                a, z = map(int, line.split("-"))
                img[a:z + 1] = ["E"] * (z + 1 - a)
        got.setdefault(int(f.split("-")[0]), []).append(tuple(img))
    n = {c: len(v) for c, v in got.items()}
    nwant = {c: len(v) for c, v in want.items()}
    tap.ok(n == nwant and all(set(got[c]) == want[c] for c in want),
           "%s torn=%s: every crash point's states are the oracle's "
           "(%s)" % (name, torn, " ".join("%d:%d" % (c, nwant[c])
                                          for c in sorted(nwant))))
    if n != nwant:
        tap.diag("tool %s" % n)
    for c in want:
        extra, missing = set(got.get(c, [])) - want[c], want[c] - set(
            got.get(c, []))
        if extra or missing:
            tap.diag("crash point %d: %d not allowed, %d missing"
                     % (c, len(extra), len(missing)))
    if counts is not None:
        tap.ok(sum(n.values()) == counts, "%s torn=%s: %d states (want %d)"
               % (name, torn, sum(n.values()), counts))
    return got


def blk(v, L=512):
    return bytes([v]) * L


# ---- 512n, 8 KiB, zones of 4 LBAs, the first conventional -------------------
SIZE, L = 8192, 512
ZONES = ("host-managed", 2048, 1)
a_log = os.path.join(tmp, "a.log")
w = wlogfmt.LogWriter(a_log, SIZE, L, L, zones=ZONES)
w.write(4 * L, blk(0xa1))                       # zone 1: a, b (2), c
w.write(5 * L, blk(0xb1) + blk(0xb2))
w.write(7 * L, blk(0xc1))
w.write(8 * L, blk(0xd1))                       # zone 2: d
w.write(0, blk(0xe1))                           # conventional: e
w.close()
# zone 1: 4 sectors, 5 cuts; zone 2: 2; e kept or not: 20.  torn=garbage:
# each cut sector garbage too: 9 x 3 x 3.  (torn=zero: a zeroed cut
# sector of an empty zone is the cut before it.)
got = compare(a_log, "512n", "none", "prefix", counts=20)
compare(a_log, "512n", "zero", "prefix-zero", counts=20)
compare(a_log, "512n", "garbage", "prefix-garbage", counts=81)
# Seeded samples (fewer than the states) keep the rule too.
want, known, _ = oracle(a_log, "garbage")
d = os.path.join(tmp, "sampled")
os.mkdir(d)
p = subprocess.run([CRASH, a_log, "--geometry", "512n", "--torn", "garbage",
                    "--states", "12", "--seed", "3", "--output", d],
                   capture_output=True, text=True)
imgs = [open(os.path.join(d, f), "rb").read() for f in os.listdir(d)]
imgs = [tuple(v if v in known else "G" for v in
              (b[x * L:(x + 1) * L].hex() for x in range(len(b) // L)))
        for b in imgs]
tap.ok(p.returncode == 0 and len(imgs) == 12 and
       all(i in want[0] for i in imgs),
       "12 seeded samples of 81: all the oracle's: %s" % p.stderr.strip())
# c kept without a (and b): a state no zoned drive reaches.
zero = bytes(L).hex()
bad = [zero] * (SIZE // L)
bad[7] = blk(0xc1).hex()
tap.ok(all(tuple(bad) not in v for v in got.values()) and
       any(tuple(bad[:7] + [zero] * 9) in v for v in got.values()),
       "no state keeps a zone's later write without its earlier ones")
for sid, want in (("0-4-k", "keeps write 2 without write 0 before it"),
                  ("0-3-r.k*2", "physical sector 4 of the sequential zone "
                   "at LBA 4 is reverted")):
    p = subprocess.run([CRASH, a_log, "--geometry", "512n", "--state", sid,
                        "--output", os.path.join(tmp, "s")],
                       capture_output=True, text=True)
    lines = p.stderr.strip().splitlines()
    tap.ok(p.returncode == 2 and len(lines) == 1 and want in p.stderr,
           "--state %s is refused: %s" % (sid, p.stderr.strip()))
p = subprocess.run([CRASH, a_log, "--geometry", "512n", "--torn", "zero",
                    "--state", "0-3-k.k.z", "--output",
                    os.path.join(tmp, "s")], capture_output=True, text=True)
tap.ok(p.returncode == 0 and open(os.path.join(tmp, "s"), "rb").read()[
    4 * L:8 * L] == blk(0xa1) + blk(0xb1) + bytes(L) + bytes(L),
       "--state 0-3-k.k.z: a and b's first sector kept, its second "
       "zeroed by the cut: %s" % p.stderr.strip())

# Durability: a FUA write settles its zone's earlier writes, a close, a
# finish and a reset theirs; open nothing; a flush everything.
b_log = os.path.join(tmp, "b.log")
w = wlogfmt.LogWriter(b_log, SIZE, L, L, zones=ZONES)
w.write(4 * L, blk(0xa1))
w.flush()
w.write(5 * L, blk(0xb1))
w.write(6 * L, blk(0xc1), fua=True)             # settles b
w.write(7 * L, blk(0xd1))
w.zone_op("open", 4)
w.zone_op("close", 4)                           # settles d
w.zone_op("finish", 4)
w.write(8 * L, blk(0xe1))
w.write(12 * L, blk(0xf1))
w.zone_op("reset", 8)                           # settles e, then zeroes
w.zero(8 * L, L)
w.write(13 * L, blk(0xf2))
w.write(1 * L, blk(0x11))
w.zone_op("finish")                             # FINISH ALL: f1, f2
w.close()
# Crash points: the flush (a: 2), the FUA write (b: 2), the close (d:
# 2), the reset (e, f1: 4), its zero (f1: 2), FINISH ALL (f1, f2 a
# prefix of zone 3, 1 conventional: 6), the end (1: 2).
got = compare(b_log, "512n", "none", "durable", counts=20)
compare(b_log, "512n", "zero", "durable-zero")
# A close makes its zone durable, the writes after it pending again
# (with open and close changing nothing the end would have 3 states).
g_log = os.path.join(tmp, "g.log")
w = wlogfmt.LogWriter(g_log, SIZE, L, L, zones=ZONES)
w.write(8 * L, blk(0xe1))
w.zone_op("open", 8)
w.zone_op("close", 8)                           # settles e1: 2
w.write(9 * L, blk(0xe2))
w.close()                                       # e2: 2
compare(g_log, "512n", "none", "close", counts=2 + 2)
# 512e: a physical sector of 8 LBAs, cut sectors torn, unreadable,
# garbage.  Zones of 16 LBAs, the first conventional; an atomic write is
# kept or dropped whole.
c_log = os.path.join(tmp, "c.log")
w = wlogfmt.LogWriter(c_log, 32768, L, 4096, zones=("host-managed", 8192,
                                                     1))
w.write(16 * L, bytes(range(0x10, 0x18)) * L)
w.write(24 * L, bytes(range(0x20, 0x28)) * L)
w.write(32 * L, bytes(range(0x30, 0x40)) * L, atomic=True)
w.write(48 * L, bytes(range(0x40, 0x48)) * L)
w.close()
for torn, n in (("none", 3 * 2 * 2), ("sector", (3 + 2 * 254) * 2 * 256),
                ("unreadable", 5 * 2 * 3), ("garbage", (3 + 2 * 8) * 2 * 10)):
    if torn == "sector":
        continue        # 261,632 images: the oracle is too slow for them
    compare(c_log, "512e", torn, "512e-" + torn, counts=n)
# torn=sector on the first zone alone: 3 cuts and 2 x 254 mixes.
d_log = os.path.join(tmp, "d.log")
w = wlogfmt.LogWriter(d_log, 32768, L, 4096, zones=("host-managed", 8192,
                                                     1))
w.write(16 * L, bytes(range(0x10, 0x18)) * L)
w.write(24 * L, bytes(range(0x20, 0x28)) * L)
w.close()
compare(d_log, "512e", "sector", "512e-sector", counts=3 + 2 * 254)

# Logs a host-managed drive cannot write: one line each.
for name, ops, want in (
        ("over", [(4, 1), (4, 1)], "write over entry 2 in sequential zone 1"),
        ("cross", [(6, 4)], "cross a sequential zone's boundary")):
    path = os.path.join(tmp, name + ".log")
    w = wlogfmt.LogWriter(path, SIZE, L, L, zones=ZONES)
    for lba, n in ops:
        w.write(lba * L, blk(0x55) * n)
    w.close()
    p = subprocess.run([CRASH, path, "--geometry", "512n", "--states", "all",
                        "--output", tmp], capture_output=True, text=True)
    lines = p.stderr.strip().splitlines()
    tap.ok(p.returncode == 2 and len(lines) == 1 and want in p.stderr,
           "%s: refused: %s" % (name, p.stderr.strip()))

# ---- a log the engine wrote --------------------------------------------------
KEYS = "size=64K model=512e zoned=host-managed zone-size=16K " \
       "zone-conventional=1"
OPS = ["w:0:8", "w:32:8", "w:40:16", "f", "w:56:8", "w:64:8", "w:72:8:fua",
       "mark:m1", "w:80:8", "open:64", "finish:64", "reset:32", "w:32:8",
       "w:96:8", "w:104:8", "close:all", "w:8:8"]
e_log, e_img = os.path.join(tmp, "e.log"), os.path.join(tmp, "e.img")
p = subprocess.run([ZONELOG, "record", e_log, e_img, KEYS] + OPS,
                   capture_output=True, text=True)
tap.ok(p.returncode == 0, "the engine wrote a zoned log: %s"
       % (p.stdout + p.stderr).strip())
p = subprocess.run([DUMP, e_log], capture_output=True, text=True)
tap.ok(p.returncode == 0 and
       " zoned=host-managed zone-size=16384 zone-conventional=1\n"
       in p.stdout and '"sect4k-zone reset lba=32" zone-reset lba=32\n'
       in p.stdout and '"sect4k-zone close all" zone-close all\n' in p.stdout
       and "zero off=16384 len=16384\n" in p.stdout,
       "sect4k-wlog-dump shows the layout, the zone operations and the "
       "reset's zeroes")
# Crash points: the flush (conventional 2 x zone 1's 3 sectors 4), the
# FUA write (2 x 2), the finish (2 x 2), the reset (2), its zero (1),
# CLOSE ALL (zone 1's 2 x zone 3's 3), the end (2).
got = compare(e_log, "512e", "none", "engine",
              counts=8 + 4 + 4 + 2 + 1 + 6 + 2)
compare(e_log, "512e", "zero", "engine-zero")
# The same states served to a checker over NBD (dumpstate.py writes
# each one's LBAs), and the summary names the zones.
try:
    import nbd  # noqa: F401  (dumpstate.py's)
    has_nbd = True
except ImportError:
    has_nbd = False
dd = os.path.join(tmp, "served")
os.mkdir(dd)
if not has_nbd:
    tap.skip("served to a checker", "python3-libnbd is not installed")
p = not has_nbd or subprocess.run([CRASH, e_log, "--geometry", "512e", "--torn", "none",
                    "--states", "all", "--", sys.executable,
                    os.path.join(HERE, "dumpstate.py"), dd],
                   capture_output=True, text=True, timeout=300)
served = {}
for f in os.listdir(dd):
    served.setdefault(int(f.split("-")[0]), set()).add(tuple(
        open(os.path.join(dd, f)).read().split("\n")))
if has_nbd:
    tap.ok(p.returncode == 0 and served == {c: set(v) for c, v in
                                            got.items()} and
           "host-managed zones of 16384 bytes (sequential from LBA 32)"
           in p.stdout, "served to a checker: the same states; %s"
           % p.stdout.strip())
# --until a zone operation's mark: the crash points before it.
os.mkdir(os.path.join(tmp, "until"))
rc = subprocess.run([CRASH, e_log, "--geometry", "512e", "--torn", "none",
                     "--until", "sect4k-zone reset lba=32", "--states",
                     "all", "--output", os.path.join(tmp, "until")],
                    capture_output=True, text=True)
tap.ok(rc.returncode == 0 and "4 crash points, 18 states" in rc.stdout,
       "--until a reset's mark: the 4 crash points before it: %s"
       % (rc.stdout + rc.stderr).strip())
# The report: each state's zones (pointer and condition after the cut),
# against the schema, by hand for a few states, and against each state's
# image: a closed zone holds data up to its pointer and zeroes above it.
import json  # noqa: E402
from crashlib import valid  # noqa: E402
rd = os.path.join(tmp, "reported")
os.mkdir(rd)
rep_path = os.path.join(tmp, "zoned-report.json")
p = subprocess.run([CRASH, e_log, "--geometry", "512e", "--torn", "none",
                    "--states", "all", "--output", rd, "--report",
                    rep_path], capture_output=True, text=True)
rep = json.load(open(rep_path)) if os.path.exists(rep_path) else {}
states = {s["id"]: s for s in rep.get("states", [])}
try:
    import jsonschema  # noqa: F401
    tap.ok(p.returncode == 0 and valid(rep) and len(states) == 27 and
           all("zones" in s for s in states.values()),
           "the zoned report matches the schema, every state with zones")
except ImportError:
    tap.skip("the zoned report matches the schema",
             "python3-jsonschema is not installed")


def zones_of(sid):
    return [(z["zone"], z["wp_before"], z["wp_after"], z["cond_after"])
            for z in states.get(sid, {}).get("zones", [])]


# Before the flush: zone 32's w:32:8 and w:40:16 unflushed (the second cut
# after its first sector); the FUA write's crash point: zone 32 flushed
# to 56, w:56:8 kept (full) or not, zone 64 empty or w:64:8 kept; after
# the finish and the reset: zone 32 empty, zone 64 full.
want = {"0-0-0": [(32, 56, 32, "empty")],
        "0-6-k*2.r": [(32, 56, 48, "closed")],
        "1-1-k": [(32, 64, 64, "full"), (64, 72, 64, "empty")],
        "1-2-k": [(32, 64, 56, "closed"), (64, 72, 72, "closed")],
        "4-0-0": [(32, 32, 32, "empty"), (64, 96, 96, "full")],
        "5-2-k": [(32, 40, 32, "empty"), (64, 96, 96, "full"),
                  (96, 112, 104, "closed")]}
bad = {s: zones_of(s) for s in want if zones_of(s) != want[s]}
tap.ok(not bad, "the zones of six states, by hand: %s" % (bad or "as "
                                                          "expected"))
mism = []
for sid, s in states.items():
    path = os.path.join(rd, sid)
    if not os.path.exists(path):
        mism.append(sid + ": no image")
        continue
    b = open(path, "rb").read()
    for z in s["zones"]:
        lbas = [any(b[x * 512:(x + 1) * 512])
                for x in range(z["zone"], z["zone"] + z["lbas"])]
        w = z["wp_after"] - z["zone"]
        if z["cond_after"] == "closed" and not (lbas[w - 1] and
                                               not any(lbas[w:])):
            mism.append("%s zone %d" % (sid, z["zone"]))
tap.ok(states and not mism, "every closed zone of every state: data up to "
       "its reported pointer, zeroes above (%s)" % (mism or "all agree"))
img = open(e_img, "rb").read()
last = max(got) if got else 0
tap.ok(any(bytes.fromhex("".join(s)) == img for s in got.get(last, [])),
       "the engine's log: its last crash point has the device's image "
       "(everything kept)")

# replay-log replays the engine's zoned log to the device's image, and
# stops at a zone operation's mark.
desc = ["replay-log replays the zoned log to the device's image",
        "replay-log stops at the mark of a reset"]
if not REPLAY:
    for d in desc:
        tap.skip(d, no_replay)
else:
    out = os.path.join(tmp, "replay.img")
    open(out, "wb").write(bytes(len(img)))
    p = subprocess.run([REPLAY, "--log", e_log, "--replay", out],
                       capture_output=True, text=True)
    tap.ok(p.returncode == 0 and open(out, "rb").read() == img,
           "%s: %s" % (desc[0], p.stderr.strip()[:200]))
    open(out, "wb").write(bytes(len(img)))
    mark = "sect4k-zone reset lba=32"
    p = subprocess.run([REPLAY, "--log", e_log, "--replay", out,
                        "--end-mark", mark], capture_output=True, text=True)
    want = bytearray(len(img))
    for i, flags, off, ln, data, m in wlogfmt.read_log(e_log):
        if m == mark:
            break
        if data is not None:
            want[off:off + ln] = data
    tap.ok(p.returncode == 0 and open(out, "rb").read() == want and
           any(want[32 * 512:64 * 512]),
           "%s: %s" % (desc[1], p.stderr.strip()[:200]))
tap.done_testing()
