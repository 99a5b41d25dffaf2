#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""The file store on file systems that zero differently: tmpfs and ext2
have no FALLOC_FL_ZERO_RANGE (the store punches a hole and allocates
again), ext4 has both.  Random ops against a model, fast zero, extents,
on each file system this machine can mount (root: loop mounts)."""
import os
import random
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from filetest import (ok, diag, skip_all, done_testing, Nbdkit, nbd,  # noqa: E402
                      data_dir, connect, random_ops, check_extents, read_all)

L, P, A = 512, 4096, 3584
SIZE = 4 << 20


def run(*cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


def main():
    if os.getuid() != 0:
        skip_all("mounting file systems needs root")
    d = data_dir()
    mounts = []
    fss = []
    for fs in ("tmpfs", "ext2", "ext4"):
        mnt = os.path.join(d, fs)
        os.mkdir(mnt)
        if fs == "tmpfs":
            r = run("mount", "-t", "tmpfs", "-o", "size=16M", "tmpfs", mnt)
        else:
            img = os.path.join(d, fs + ".img")
            with open(img, "wb") as f:
                f.truncate(32 << 20)
            r = run("mkfs." + fs, "-q", "-F", img)
            if r.returncode == 0:
                r = run("mount", "-o", "loop", img, mnt)
        if r.returncode != 0:
            diag("%s: cannot mount, skipped: %s" % (fs, r.stderr.strip()))
            continue
        mounts.append(mnt)
        fss.append((fs, mnt))
    if not fss:
        shutil.rmtree(d)
        skip_all("no file system could be mounted")
    rng = random.Random(11)
    try:
        for fs, mnt in fss:
            for mode in (["io=uring"], ["io=sync"]):
                name = "%s %s" % (fs, " ".join(mode))
                path = os.path.join(mnt, "disk.img")
                if os.path.exists(path):
                    os.unlink(path)
                model = bytearray(SIZE)
                with Nbdkit("file=" + path, "size=%d" % SIZE, "model=512e-xp",
                            *mode) as srv:
                    h = connect(srv.uri)
                    bad = random_ops(h, model, SIZE, L, P, A, rng, 300)
                    ok(bad == 0 and read_all(h, SIZE) == model,
                       "%s: 300 random ops match the model" % name)
                    # A NO_HOLE zero of written sectors, then a fast zero.
                    h.pwrite(b"w" * 8 * P, A)
                    h.zero(4 * P, A, nbd.CMD_FLAG_NO_HOLE)
                    model[A:A + 8 * P] = bytes(4 * P) + b"w" * 4 * P
                    fz = h.can_fast_zero()
                    if fz:
                        h.zero(2 * P, A + 4 * P, nbd.CMD_FLAG_FAST_ZERO)
                        model[A + 4 * P:A + 6 * P] = bytes(2 * P)
                    ok(h.pread(8 * P, A) == model[A:A + 8 * P],
                       "%s: NO_HOLE zero%s" % (name, " and fast zero" if fz else
                                               " (fast zero not offered)"))
                    ok(fz, "%s: fast zero offered (the file system punches holes)" % name)
                    err = check_extents(h, model, SIZE, L)
                    ok(err is None, "%s: extents (%s)" % (name, err))
                    h.flush()
                    h.shutdown()
    finally:
        for mnt in mounts:
            run("umount", mnt)
        shutil.rmtree(d)
    done_testing()


main()
