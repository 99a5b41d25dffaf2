#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""sect4k-crash's states include every state a zoned device's power cut
can produce (issue 33), as tests/crash/superset.t shows for a plain one:
a checker that passes the explorer passes on the device.  A zoned device
is served only by sect4k-server --scsi (NBD refuses zoned=), which needs
the kernel, so the engine runs the sequences (tests/unit/zonelog.c
"cuts": each run a new host-managed device with write-cache=true, its
own seed=, cut with s4k_dev_power_cut after the sequence, its image and
EIO sectors written out; the first run writes the write log).  Every
image must be among the states sect4k-crash --states all builds at the
log's last crash point.  On 512e and 4Kn, fixed sequences (writes over
several zones, FUA, flush, CLOSE, FINISH, RESET, OPEN, ALL) and random
ones (seed: $SECT4K_SEED, else random, printed), under torn= none,
zero, unreadable, garbage and sector.  A random sequence's states are
counted by the explorer up to a budget (STATE_BUDGET at the last crash
point): one over it is drawn again from the same seed, since garbage
multiplies per cut sector (24 of seeds 1-200 drew one over 4096;
SECT4K_SEED=23 one of 6.8 million, 400 GB of images).  The converse
on tiny logs: every state the explorer builds is an image some seed gives, the counts
equal.  Images are compared per logical sector: the bytes a write put
there, zeroes, E (EIO) or G (anything else)."""
import os
import random
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))
import tap  # noqa: E402
from crashlib import tmp, CRASH  # noqa: E402
from zonecuts import (CUTS, GEOMS, canon, device_cuts,  # noqa: E402
                      known_blocks, need_zonelog, read_eio, scale)

need_zonelog()
RANDOM = 8              # random sequences per geometry
# A random sequence's states at its last crash point, at most (a fixed
# one has up to 1021; at most this many images of 64 or 256 KiB are
# written per crash point to find out).
STATE_BUDGET = 4096


def explorer_states(log, geom, torn, known, budget=None):
    """The states of the log's last crash point, as canon() gives them,
    and how many there are.  With a budget, the explorer builds them all
    only if there are fewer: otherwise budget samples (then count ==
    budget, and the states are not all of them)."""
    L = GEOMS[geom][0]
    d = os.path.join(tmp, "states-%d" % random.randrange(1 << 40))
    os.mkdir(d)
    r = subprocess.run([CRASH, log, "--geometry", geom, "--torn", torn,
                        "--states", str(budget) if budget else "all",
                        "--output", d],
                       capture_output=True, text=True, timeout=300)
    if r.returncode:
        tap.diag("sect4k-crash: exit %d: %s" % (r.returncode,
                                                 r.stderr.strip()[:300]))
    names = [n for n in os.listdir(d) if not n.endswith(".eio")]
    last = max((int(n.split("-")[0]) for n in names), default=-1)
    states = set()
    count = 0
    for n in names:
        if int(n.split("-")[0]) != last:
            continue
        count += 1
        states.add(canon(open(os.path.join(d, n), "rb").read(),
                         read_eio(os.path.join(d, n + ".eio")), L, known))
    shutil.rmtree(d)
    return states, count


# Fixed sequences on 512e (LBAs: zone 0 conventional 0-31, zones at 32,
# 64, 96; physical sectors of 8 LBAs), scaled by 1/8 on 4kn.
FIXED = [
    ("one-zone", ["w:32:8", "w:40:8", "w:48:16"]),
    ("prefix", ["w:32:8", "w:40:8", "w:48:8", "w:64:8", "w:72:16"]),
    ("flush-fua", ["w:32:8", "f", "w:40:8", "w:48:8", "w:64:8",
                   "w:56:8:fua", "w:72:8"]),
    ("close", ["w:32:8", "w:40:8", "close:32", "w:48:8", "w:64:8",
               "open:64", "w:72:8"]),
    ("finish-reset", ["w:32:8", "w:64:8", "finish:32", "w:72:8",
                      "reset:64", "w:64:8", "w:96:8"]),
    ("all", ["w:32:8", "w:64:8", "w:0:3", "close:all", "w:40:8",
             "w:96:16", "finish:all", "reset:64", "w:64:8"]),
    ("conventional", ["w:0:1", "w:4:8", "w:32:8", "f", "w:2:4", "w:40:8",
                      "w:1:2:fua"]),
]


def random_ops(rng, geom):
    """3 to 7 requests a host-managed drive takes: sequential writes at
    each zone's pointer (whole physical sectors), some FUA, conventional
    writes anywhere in zone 0, flushes and zone operations."""
    L, size, zl = GEOMS[geom]
    P = 4096 // L
    wp = {z: z * zl for z in (1, 2, 3)}
    opened = set()              # explicitly opened while empty
    ops = []
    for _ in range(rng.randrange(3, 8)):
        r = rng.random()
        z = rng.choice((1, 2, 3))
        if r < 0.55:
            n = rng.choice((1, 1, 2)) * P
            if wp[z] + n > (z + 1) * zl:
                continue
            ops.append("w:%d:%d%s" % (wp[z], n,
                                      ":fua" if rng.random() < 0.15 else ""))
            wp[z] += n
        elif r < 0.67:
            lba = rng.randrange(zl)
            ops.append("w:%d:%d" % (lba, rng.randint(1, min(P, zl - lba))))
        elif r < 0.75:
            ops.append("f")
        else:
            op = rng.choice(("close", "finish", "reset", "open"))
            all_ = rng.random() < 0.15
            ops.append("%s:%s" % (op, "all" if all_ else z * zl))
            for k in ((1, 2, 3) if all_ else (z,)):
                # FINISH ALL takes open and closed zones: an empty zone
                # opened explicitly too, not one left empty.
                if op == "finish" and (not all_ or wp[k] > k * zl or
                                       k in opened):
                    wp[k] = (k + 1) * zl
                elif op == "reset":
                    wp[k] = k * zl
                if op == "open" and not all_ and wp[k] < (k + 1) * zl:
                    opened.add(k)
                elif op != "open":
                    opened.discard(k)
    return ops or ["w:%d:%d" % (zl, P)]


TORNS = {"512e": ("none", "zero", "unreadable", "garbage", "sector"),
         "4kn": ("none", "zero", "garbage")}
seed = int(os.environ.get("SECT4K_SEED") or random.randrange(1 << 30))
tap.diag("random sequences: SECT4K_SEED=%d" % seed)
rng = random.Random(seed)
cases = []
for geom in GEOMS:
    for name, ops in FIXED:
        for torn in TORNS[geom]:
            # torn=sector's 2^8 mixes per cut sector multiply across
            # zones: one zone's sequence only.
            if torn == "sector" and name != "one-zone":
                continue
            cases.append((geom, name, scale(geom, ops), torn))
    for _ in range(RANDOM):
        ops = random_ops(rng, geom)
        cases.append((geom, "random", ops,
                      rng.choice(tuple(t for t in TORNS[geom]
                                       if t != "sector"))))
t0 = time.time()
for geom, name, ops, torn in cases:
    L = GEOMS[geom][0]
    while True:
        dev_seed = rng.randrange(1 << 30)
        log, images = device_cuts(geom, torn, ops, dev_seed, CUTS)
        states, n = explorer_states(log, geom, torn, known_blocks(ops, L),
                                    STATE_BUDGET if name == "random"
                                    else None)
        if name != "random" or n < STATE_BUDGET:
            break
        tap.diag("%s torn=%s %s: %d states or more, over the budget: "
                 "drawn again" % (geom, torn, " ".join(ops), n))
        ops = random_ops(rng, geom)
    label = "%s %s torn=%s%s" % (geom, name, torn,
                                 " %s" % " ".join(ops) if name == "random"
                                 else "")
    missing = sorted(set(images) - states)
    if not tap.ok(images and not missing,
                  "%s: all %d cuts (%d distinct images) are among the %d "
                  "states (device seeds from %d)"
                  % (label, len(images), len(set(images)), n, dev_seed)):
        for m in missing[:3]:
            tap.diag("not among them: " + " ".join(m))

# The converse on tiny logs: every explorer state is an image the device
# gives for some seed.
TINY = [("512e", "zero", ["w:32:8", "w:40:8", "w:64:8"]),
        ("512e", "unreadable", ["w:32:8", "f", "w:40:8", "close:32",
                                "w:48:8"]),
        ("4kn", "garbage", ["w:16:1", "w:17:1", "w:32:1"])]
for geom, torn, ops in TINY:
    L = GEOMS[geom][0]
    log, images = device_cuts(geom, torn, ops, 1, 400)
    states, n = explorer_states(log, geom, torn, known_blocks(ops, L))
    got = set(images)
    if not tap.ok(got == states and n == len(states),
                  "%s torn=%s %s: the %d explorer states are the %d distinct "
                  "images of 400 seeds" % (geom, torn, " ".join(ops), n,
                                           len(got))):
        for m in sorted(states - got)[:3]:
            tap.diag("no seed gave: " + " ".join(m))
        for m in sorted(got - states)[:3]:
            tap.diag("not a state: " + " ".join(m))
tap.diag("%.1fs" % (time.time() - t0))
shutil.rmtree(tmp, ignore_errors=True)
tap.done_testing()
