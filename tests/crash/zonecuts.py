# SPDX-License-Identifier: BSD-3-Clause
"""Real power cuts of a zoned device for tests/crash/zoned-superset.t and
zoned-aware.t: tests/unit-zonelog runs an op sequence on the engine,
cuts, and saves each image; canon() names each LBA by the write that put
it there, so the device's images and the explorer's states compare."""
import os
import random
import struct
import subprocess
import sys

import tap
from crashlib import tmp, ROOT

BUILD = os.environ.get("SECT4K_BUILD", os.path.join(ROOT, "build",
                                                    "default"))
ZONELOG = os.path.join(BUILD, "tests", "unit-zonelog")
CUTS = int(os.environ.get("SECT4K_SUPERSET_CUTS", "40"))
# (logical, size, zone LBAs) per model: one conventional zone, three
# sequential ones of four physical sectors.
GEOMS = {"512e": (512, 65536, 32), "4kn": (4096, 262144, 16)}


def need_zonelog():
    if not os.path.exists(ZONELOG):
        tap.skip_all("tests/unit-zonelog is not built")


def block(wid, lba, L):
    """What op wid puts in LBA lba (tests/unit/zonelog.c's pattern)."""
    return struct.pack("<QQ", wid + 1, lba) * (L // 16)


def known_blocks(ops, L):
    out = {}
    for wid, op in enumerate(ops):
        if op.startswith("w:"):
            _, lba, n = op.split(":")[:3]
            for i in range(int(n)):
                out[block(wid, int(lba) + i, L)] = "w%d" % wid
    return out


def canon_lbas(lbas, L, known):
    """Each LBA's bytes (None or "E": EIO) as the write that put them
    there ("w3"), "0" for zeroes, "E", or "G" (garbage)."""
    zero = bytes(L)
    return tuple("E" if b is None or b == "E" else "0" if b == zero
                 else known.get(bytes(b), "G") for b in lbas)


def canon(data, eio, L, known):
    lbas = [data[i:i + L] for i in range(0, len(data), L)]
    for a, b in eio:
        lbas[a:b + 1] = [None] * (b + 1 - a)
    return canon_lbas(lbas, L, known)


def read_eio(path):
    if not os.path.exists(path):
        return []
    return [tuple(map(int, line.split("-"))) for line in open(path)]


def keys(geom, torn, seed, extra="", model="host-managed"):
    L, size, zl = GEOMS[geom]
    return ("size=%d model=%s zoned=%s zone-size=%d "
            "zone-conventional=1 write-cache=true torn=%s "
            "power-cut-after=1000000000 %sseed=%d"
            % (size, geom, model, zl * L, torn,
               extra + " " if extra else "", seed))


def device_cuts(geom, torn, ops, seed, runs, extra="", model="host-managed"):
    """(the log, the canon() images of runs cuts)."""
    d = os.path.join(tmp, "dev-%d-%d" % (seed, random.randrange(1 << 30)))
    os.mkdir(d)
    log = os.path.join(d, "log")
    env = dict(os.environ, **(tap.sanitizer_env() or {}))
    p = subprocess.run([ZONELOG, "cuts", log, d,
                        keys(geom, torn, seed, extra, model), str(runs)]
                       + ops, capture_output=True, text=True, env=env)
    if p.returncode:
        print("Bail out! unit-zonelog cuts %s: %s"
              % (" ".join(ops), (p.stdout + p.stderr).strip()[:300]))
        sys.exit(1)
    L = GEOMS[geom][0]
    known = known_blocks(ops, L)
    images = [canon(open(os.path.join(d, str(r)), "rb").read(),
                    read_eio(os.path.join(d, "%d.eio" % r)), L, known)
              for r in range(runs)]
    return log, images


def scale(geom, ops):
    """4kn: in 4 KiB blocks, the same place in the same zone (512e's
    zones of 32 LBAs, 4kn's of 16), counts / 8 (at least 1)."""
    if geom == "512e":
        return ops
    out = []
    for op in ops:
        f = op.split(":")
        if len(f) > 1 and f[1] != "all":
            lba = int(f[1])
            f[1] = str(lba // 32 * 16 + lba % 32 // 8)
        if f[0] in ("w", "z"):
            f[2] = str(max(1, int(f[2]) // 8))
        out.append(":".join(f))
    return out
