#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""Flushed data is never lost (issue 11): random writes, FUA writes and
flushes through libnbd on a 512e device with write-cache=true and a small
cache (so destaging happens too), power cuts at random moments through
the control socket, torn=none, sector, garbage and zero in turn; after
each cut, a new connection reads every LBA back.  Each LBA must hold a
value written no earlier than the last one made durable (acknowledged
before a completed flush, or with FUA), and nothing else, except the
LBAs the cut's report names as damaged (garbage: from garbage_lba to
the end of its physical sector, anything; zeroed: the whole physical
sector, zeroes): those may have lost even flushed data, and under
garbage and zero some must have.  (torn=unreadable is left to
tests/unit/fault.t and faults.t: its EIO would end this workload.)  On
the memory and the file store, through nbdkit and sect4k-server."""
import json
import os
import random
import socket
import struct
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import ok, diag, done_testing, Nbdkit, need_nbd  # noqa: E402
from srvlib import Server, SERVER  # noqa: E402

nbd = need_nbd()
L = 512
SIZE = 2 << 20
N = SIZE // L
ROUNDS = int(os.environ.get("SECT4K_TORTURE_ROUNDS", "12"))
TORN = ("none", "sector", "garbage", "zero")


def ctl(path, line):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    s.settimeout(60)
    s.sendall(line.encode() + b"\n")
    got = b""
    while not (got.endswith(b"\nok\n") or got == b"ok\n" or
               got.startswith(b"error: ") and got.endswith(b"\n")):
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
    s.close()
    return got.decode()


def pattern(wid, lba):
    return struct.pack("<QQ", wid, lba) * (L // 16)


def drain(h):
    """Waits for the old connection's requests to end, however they end
    (EIO from the plugin, a dropped connection from the server)."""
    deadline = time.time() + 30
    try:
        while h.aio_in_flight() > 0 and time.time() < deadline:
            h.poll(1000)
    except nbd.Error:
        pass


def run(name, make, seed):
    rng = random.Random(seed)
    d = tempfile.mkdtemp(prefix="sect4k-torture.")
    ctlpath = os.path.join(d, "ctl")
    report = os.path.join(d, "cut.json")
    args = ["size=%d" % SIZE, "model=512e", "write-cache=true",
            "write-cache-size=64k", "seed=%d" % seed, "control=" + ctlpath,
            "cut-report=" + report]
    if "file" in name:
        img = os.path.join(d, "disk.img")
        with open(img, "wb") as f:
            f.truncate(SIZE)
        args.append("file=" + img)
    # hist[x]: the write ids LBA x may hold, oldest (the durable one) first.
    hist = [[0] for _ in range(N)]
    next_id = 1
    bad = []
    cuts = 0
    lost = lost_durable = 0     # damaged LBAs, those that held durable data
    with make(*args) as srv:
        for rnd in range(ROUNDS):
            h = nbd.NBD()
            h.connect_uri(srv.uri)
            inflight = {}
            busy = set()
            last_done = {}          # LBA -> newest completed write
            cut_at = rng.randrange(10, 300)
            for op in range(cut_at):
                while len(inflight) >= 8:
                    h.poll(-1)
                    for ck in [c for c in inflight
                               if h.aio_command_completed(c)]:
                        kind, info = inflight.pop(ck)
                        if kind == "write":
                            wid, lbas, fua = info
                            for x in lbas:
                                busy.discard(x)
                                last_done[x] = wid
                                if fua:
                                    settle(hist, x, wid)
                        else:
                            for x, wid in info.items():
                                settle(hist, x, wid)
                r = rng.random()
                if r < 0.15:
                    ck = h.aio_flush()
                    inflight[ck] = ("flush", dict(last_done))
                    continue
                n = rng.choice((1, 1, 2, 3, 8, 16))
                x0 = rng.randrange(0, N - n)
                lbas = range(x0, x0 + n)
                if any(x in busy for x in lbas):
                    continue
                wid = next_id
                next_id += 1
                fua = r > 0.9
                buf = b"".join(pattern(wid, x) for x in lbas)
                ck = h.aio_pwrite(buf, x0 * L,
                                  flags=nbd.CMD_FLAG_FUA if fua else 0)
                inflight[ck] = ("write", (wid, lbas, fua))
                for x in lbas:
                    busy.add(x)
                    hist[x].append(wid)
            # The cut, with requests still in flight.
            torn = TORN[rnd % len(TORN)]
            ans = ctl(ctlpath, "power-cut torn=" + torn)
            if not ans.endswith("ok\n"):
                bad.append("round %d: power-cut answered %r" % (rnd, ans))
                break
            cuts += 1
            damaged = damage(json.loads(ans[:-len("ok\n")]))
            t0 = time.time()
            drain(h)
            if time.time() - t0 > 2:
                diag("drain took %.1f s" % (time.time() - t0))
            del h
            # Every LBA, through a new connection.
            h = nbd.NBD()
            h.connect_uri(srv.uri)
            for off in range(0, SIZE, 1 << 20):
                data = h.pread(1 << 20, off)
                for i in range(0, 1 << 20, L):
                    x = (off + i) // L
                    blk = data[i:i + L]
                    val = value(blk, x)
                    how = damaged.get(x)
                    if how == "zeroed" and val != 0 or \
                            how is None and val not in hist[x]:
                        if len(bad) < 5:
                            bad.append("round %d (torn=%s): LBA %d holds "
                                       "%s, may hold only %s%s" %
                                       (rnd, torn, x, show(val),
                                        [show(v) for v in hist[x][:8]],
                                        " (zeroed)" if how else ""))
                    elif how and val not in hist[x]:
                        lost += 1
                        # A value no longer there, written or flushed.
                        lost_durable += len(hist[x]) == 1
                    hist[x] = [val]
            h.shutdown()
            del h
            if bad:
                break
        with open(report) as f:
            rep = json.load(f)
        ok(rep["cut"] == cuts and rep["schema"] == "sect4k-cut/1",
           "%s: cut-report= holds the last cut's report (cut %d)" %
           (name, cuts))
    for b in bad:
        diag(b)
    ok(not bad and cuts == ROUNDS,
       "%s: %d power cuts, %d writes: nothing flushed or written with FUA "
       "was lost outside the sectors the reports name as damaged, nothing "
       "appeared that was not written" % (name, cuts, next_id - 1))
    if ROUNDS > TORN.index("zero"):
        ok(lost_durable > 0,
           "%s: torn=garbage and zero destroyed %d LBAs, %d of them durable "
           "(neighbours the RMW put at risk)" % (name, lost, lost_durable))
    os.system("rm -rf " + d)


def value(blk, x):
    """What an LBA holds: a write id (0: zeroes), or the bytes themselves
    when they are no write's (garbage left by a cut)."""
    if blk == bytes(L):
        return 0
    wid = struct.unpack_from("<Q", blk)[0]
    return wid if blk == pattern(wid, x) else blk


def show(val):
    return "write %d" % val if isinstance(val, int) else "garbage"


def damage(rep):
    """LBA -> "garbage" or "zeroed", as the cut's report names them."""
    out = {}
    for sec in rep["sectors"]:
        end = sec["lba"] + sec["lbas"]
        if sec["outcome"] == "garbage":
            for x in range(sec["garbage_lba"], end):
                out[x] = "garbage"
        elif sec["outcome"] == "zeroed":
            for x in range(sec["lba"], end):
                out[x] = "zeroed"
    return out


def settle(hist, x, wid):
    """Write wid to LBA x is durable: older values can no longer come
    back."""
    try:
        i = hist[x].index(wid)
    except ValueError:
        return                  # a newer one already is
    del hist[x][:i]


def main():
    runs = [("nbdkit memory", Nbdkit), ("nbdkit file", Nbdkit)]
    if os.access(SERVER, os.X_OK):
        runs += [("sect4k-server memory", Server),
                 ("sect4k-server file", Server)]
    for i, (name, make) in enumerate(runs):
        run(name, make, 1000 + i)
    done_testing()


main()
