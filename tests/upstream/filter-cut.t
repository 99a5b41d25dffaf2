#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""nbdkit-sect4k-filter: a power cut from the control socket cuts off the
connections opened before it, as in the plugin (issue 32 item 2).

1. Over nbdkit's memory and file plugins: a connection opened before the
   cut gets EIO for read, write, zero, trim, flush, cache and block
   status after it, and its write is not applied; a new connection
   reads what the cut kept and works.  The same after a cut by
   power-cut-after=.  Over file, after a clean stop
   and a restart of nbdkit over the same file, the data is what the cut
   kept plus the new connection's writes, without the old one's.
2. Racing: four writers (one connection each, partial-sector writes,
   no flush, a cache that never destages) over the file plugin while
   the cut happens.  No write sent after the cut answered succeeds; a
   new connection right after the cut reads exactly what the report
   says each physical sector kept (kept or torn: each new LBA holds the
   last write acknowledged before the cut began or one in flight across
   it; the rest the file's old zeroes); and after the writers gave up,
   a clean stop and a restart over the same file serve that same data."""
import json
import os
import random
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import Nbdkit, ok, diag, skip_all, need_nbd, done_testing, errno_name  # noqa: E402

nbd = need_nbd()
TOP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
FILTER = os.environ.get("SECT4K_FILTER") or os.path.join(TOP,
                                                         "sect4k-filter.so")
if not os.path.exists(FILTER):
    skip_all(FILTER + " is not built")
CTL = os.path.join(TOP, "scripts", "sect4k-ctl")
L, P = 512, 4096
tmp = tempfile.mkdtemp(prefix="sect4k-filter-cut.")
ctlpath = os.path.join(tmp, "ctl")


def ctl(*words):
    p = subprocess.run(["/usr/bin/python3", CTL, ctlpath] + list(words),
                       capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def cut_now(line):
    """Sends a command on a socket connected beforehand, so that the
    window of a request racing the cut is the cut's own: ((sent,
    answered), the answer without its "ok", an error or "")."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(ctlpath)
    s.settimeout(60)
    sent = time.monotonic()
    s.sendall(line.encode() + b"\n")
    got = b""
    while not (got.endswith(b"\nok\n") or got.startswith(b"error: ") and
               got.endswith(b"\n")):
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
    answered = time.monotonic()
    s.close()
    got = got.decode()
    if not got.endswith("\nok\n"):
        return (sent, answered), "", got.strip() or "no answer"
    return (sent, answered), got[:-len("ok\n")], ""


def connect(uri):
    h = nbd.NBD()
    h.add_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
    h.connect_uri(uri)
    return h


def serve(plugin, img, *keys):
    args = [img] if plugin == "file" else ["size=%d" % SIZE]
    return Nbdkit(*args, "model=512e", *keys,
                  options=["--filter=" + FILTER], plugin=plugin)


def fresh(img):
    with open(img, "wb") as f:
        f.truncate(SIZE)


# ---- 1. every request of an old connection, memory and file ------------

SIZE = 1 << 20


def cut_off(plugin):
    img = os.path.join(tmp, "cut.img")
    fresh(img)
    name = "over " + plugin
    with serve(plugin, img, "write-cache=true", "control=" + ctlpath,
               "seed=1") as srv:
        old = connect(srv.uri)
        old.pwrite(b"\x33" * P, 0)
        old.flush()
        old.pwrite(b"\x44" * L, L)      # unflushed: reverted by torn=none
        rc, out, _ = ctl("power-cut", "torn=none")
        rep = json.loads(out) if rc == 0 else {}
        ok(rc == 0 and [(s["lba"], s["outcome"]) for s in rep["sectors"]]
           == [(0, "reverted")],
           "%s: the cut reverts the unflushed write (%s)" % (name, out[:60]))
        # can_cache and can_extents are the filter's: always offered.
        got = [errno_name(f) for f in (
            lambda: old.pread(L, 0),
            lambda: old.pwrite(b"\x66" * P, 2 * P),
            lambda: old.zero(P, 3 * P),
            lambda: old.trim(P, 0),
            lambda: old.flush(),
            lambda: old.cache(P, 0),
            lambda: old.block_status(P, 0, lambda *a: 0))]
        ok(got == ["EIO"] * 7,
           "%s: the connection from before the cut gets EIO for read, "
           "write, zero, trim, flush, cache, block status (%s)"
           % (name, got))
        new = connect(srv.uri)
        ok(new.pread(3 * P, 0) == b"\x33" * P + bytes(2 * P),
           "%s: a new connection reads the flushed data, not the unflushed "
           "write nor the old connection's write after the cut" % name)
        new.pwrite(b"\x55" * P, 4 * P)
        new.flush()
        new.pwrite(b"\x77" * L, 5 * P + L)   # left in the cache
        ok(new.pread(2 * P, 4 * P) == b"\x55" * P + bytes(L) + b"\x77" * L
           + bytes(P - 2 * L), "%s: the new connection writes, flushes and "
           "reads" % name)
        ok(errno_name(lambda: old.pwrite(b"\x66" * L, 4 * P)) == "EIO" and
           new.pread(L, 4 * P) == b"\x55" * L,
           "%s: the old connection still gets EIO, after a new one came"
           % name)
        log = srv.log()
        ok(log.count("this connection was opened before it") == 1,
           "%s: nbdkit logs the cut-off connection once" % name)
        old.shutdown()
        new.shutdown()
        del old, new
        st = srv.stop()
    if plugin != "file":
        return
    # The cache written back at the clean stop holds only the new
    # connection's write.
    with serve(plugin, img) as srv:
        h = connect(srv.uri)
        want = bytearray(SIZE)
        want[0:P] = b"\x33" * P
        want[4 * P:5 * P] = b"\x55" * P
        want[5 * P + L:5 * P + 2 * L] = b"\x77" * L
        have = h.pread(SIZE, 0)
        ok(st in (0, 143) and have == bytes(want),
           "%s: restarted over the same file: what the cut kept and the new "
           "connection's writes, nothing of the old one after the cut (%s)"
           % (name, st))
        if have != bytes(want):
            diag("LBAs differing: %s" % [x for x in range(SIZE // L)
                 if have[x * L:(x + 1) * L] != want[x * L:(x + 1) * L]][:20])
        h.shutdown()


def cut_after():
    """power-cut-after=: the write that cuts fails, and its connection
    with it."""
    name = "power-cut-after=3 over memory"
    with serve("memory", None, "power-cut-after=3", "torn=none") as srv:
        h = connect(srv.uri)
        h.pwrite(b"\x55" * P, 0)
        h.pwrite(b"\x66" * P, P)
        got = [errno_name(f) for f in (
            lambda: h.pwrite(b"\x77" * L, 2 * P),
            lambda: h.pread(L, 0),
            lambda: h.pwrite(b"\x77" * P, 3 * P),
            lambda: h.flush())]
        ok(got == ["EIO"] * 4, "%s: the third write fails, then read, "
           "write and flush on its connection (%s)" % (name, got))
        new = connect(srv.uri)
        ok(new.pread(4 * P, 0) == b"\x55" * P + b"\x66" * P + bytes(2 * P),
           "%s: a new connection reads the first two writes only" % name)
        new.shutdown()


# ---- 2. writers racing the cut, over file ------------------------------

WRITERS = 4


def pattern(wid, seq, lba, n):
    return b"".join(struct.pack("<IIQ", wid, seq, x) * (L // 16)
                    for x in range(lba, lba + n))


def value(blk, x):
    """(writer, seq) of a write to LBA x, 0 for zeroes, None otherwise."""
    if blk == bytes(L):
        return 0
    wid, seq, lba = struct.unpack_from("<IIQ", blk)
    return (wid, seq) if lba == x and blk == pattern(wid, seq, x, 1) \
        else None


class Writer(threading.Thread):
    """Writes without flush to its own part of the device until told to
    stop and it sent `after` writes after the cut."""

    def __init__(self, uri, wid, first, lbas, cut_done, stop, seed):
        super().__init__()
        self.h = connect(uri)
        self.wid, self.first, self.lbas = wid, first, lbas
        self.cut_done, self.stop = cut_done, stop
        self.rng = random.Random(seed)
        self.log = []           # (seq, lba, n, sent, answered, errno)
        self.after = 20

    def run(self):
        seq, sent_after = 0, 0
        while not (self.stop.is_set() and sent_after >= self.after):
            seq += 1
            n = self.rng.choice((1, 1, 2, 3, 8, 16))
            x = self.first + self.rng.randrange(self.lbas - n)
            sent = time.monotonic()
            e = errno_name(lambda: self.h.pwrite(
                pattern(self.wid, seq, x, n), x * L))
            self.log.append((seq, x, n, sent, time.monotonic(), e))
            if self.cut_done[0] and sent > self.cut_done[0]:
                sent_after += 1


def race(rnd, torn):
    global SIZE
    SIZE = 4 << 20
    name = "racing writers, torn=%s" % torn
    img = os.path.join(tmp, "race.img")
    fresh(img)
    report = os.path.join(tmp, "cut.json")
    n = SIZE // L
    with serve("file", img, "write-cache=true",
               "write-cache-size=%d" % SIZE, "control=" + ctlpath,
               "cut-report=" + report, "seed=%d" % (7 + rnd)) as srv:
        cut_done, stop = [0.0], threading.Event()
        part = n // WRITERS
        ws = [Writer(srv.uri, w + 1, w * part, part, cut_done, stop,
                     rnd * 10 + w) for w in range(WRITERS)]
        for w in ws:
            w.start()
        time.sleep(0.3 + 0.2 * rnd)
        rc, out, err = cut_now("power-cut torn=" + torn)
        cut_start, cut_done[0] = rc
        # The device right after the cut, through a new connection,
        # while the old ones still write.
        h = connect(srv.uri)
        snap = h.pread(SIZE, 0)
        h.shutdown()
        del h
        stop.set()
        for w in ws:
            w.join(120)
        rep = json.loads(out) if not err else {"sectors": []}
        ok(not err and all(not w.is_alive() for w in ws),
           "%s: the cut answered (%s), the writers ended" %
           (name, rep.get("outcomes", err)))
        before = sum(1 for w in ws for r in w.log if r[4] < cut_start)
        late = [(w.wid,) + r[:3] for w in ws for r in w.log
                if r[3] > cut_done[0] and r[5] == 0]
        refused = sum(1 for w in ws for r in w.log
                      if r[3] > cut_done[0] and r[5] == "EIO")
        ok(before > 0 and not late and refused >= WRITERS * 20,
           "%s: %d writes acknowledged before the cut, none of those sent "
           "after it succeeded (%d got EIO)%s" %
           (name, before, refused, " late: %s" % late[:5] if late else ""))
        for w in ws:
            w.h.shutdown()
            del w.h
        st = srv.stop()
    # What each LBA may hold: zeroes (the file before), or where the
    # report says the sector's new data survived, the last write
    # acknowledged before the cut began or one in flight across it.
    new = set()
    for s in rep["sectors"]:
        if s["outcome"] == "kept":
            new.update(range(s["lba"], s["lba"] + s["lbas"]))
        elif s["outcome"] == "torn":
            new.update(s["new_lbas"])
    last, racing = {}, {}
    for w in ws:
        for seq, x, cnt, sent, answered, e in w.log:
            for y in range(x, x + cnt):
                if answered < cut_start and e == 0:
                    last[y] = (w.wid, seq)
                    racing.pop(y, None)
                elif sent < cut_done[0] and answered >= cut_start:
                    racing.setdefault(y, set()).add((w.wid, seq))
    bad = []
    for x in range(n):
        v = value(snap[x * L:(x + 1) * L], x)
        allowed = {last.get(x, 0)} | racing.get(x, set()) if x in new \
            else {0}
        if v not in allowed:
            bad.append((x, v, sorted(allowed, key=str)[:3]))
    held = sum(1 for x in range(n) if value(snap[x * L:(x + 1) * L], x))
    ok(not bad and (len(new) > 0) == (torn != "none"),
       "%s: a new connection after the cut reads what the report kept "
       "(%d LBAs new, %d of them written, %d of those by a write in "
       "flight across the cut; %d LBAs differ)" %
       (name, len(new), held, sum(1 for x in range(n) if value(
           snap[x * L:(x + 1) * L], x) in racing.get(x, ())), len(bad)))
    for b in bad[:5]:
        diag("LBA %d holds %s, may hold %s" % b)
    with serve("file", img) as srv:
        h = connect(srv.uri)
        have = h.pread(SIZE, 0)
        h.shutdown()
    diff = sum(1 for x in range(n)
               if have[x * L:(x + 1) * L] != snap[x * L:(x + 1) * L])
    ok(st in (0, 143) and diff == 0,
       "%s: after a clean stop (%d) and a restart over the same file, the "
       "data is what the device kept at the cut (%d LBAs differ)"
       % (name, st, diff))


for plugin in ("memory", "file"):
    cut_off(plugin)
cut_after()
for rnd, torn in enumerate(("sector", "none", "sector")):
    race(rnd, torn)
subprocess.run(["rm", "-rf", tmp])
done_testing()
