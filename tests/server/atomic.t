#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""Atomic writes over NBD (issue 27), on both front ends (the nbdkit
plugin and sect4k-server) and the nbdkit filter (power cuts, over
nbdkit's memory plugin), 512e and 4kn.

- Power cuts: write-cache=true, torn=garbage, a stream of 16 KiB aligned
  writes from one connection while the control socket cuts the power,
  again and again: with atomic-write-max=16K no 16 KiB page is ever torn
  (each reads wholly as it was at the last flush or as one of the writes
  sent to it), and every cut report lists atomic writes kept or dropped
  whole; the same stream without the key tears pages.
- Concurrent reads: on the memory store (lock-free reads, a 64 KiB unit
  over sixteen 4 KiB chunks), writers fill whole units with one byte
  while readers on other connections read units and spans of three:
  with atomic-write-max=64K no read sees part of a write."""
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import ok, diag, done_testing, Nbdkit, need_nbd  # noqa: E402
from srvlib import front_ends  # noqa: E402

nbd = need_nbd()
TOP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
CTL = os.path.join(TOP, "scripts", "sect4k-ctl")
FILTER = os.environ.get("SECT4K_FILTER") or os.path.join(
    os.path.dirname(os.environ.get("SECT4K_PLUGIN", os.path.join(TOP, "x"))),
    "sect4k-filter.so")
SIZE = 1 << 20
PAGE = 16384
PAGES = SIZE // PAGE
CUTS = 4
SLOW = os.environ.get("SECT4K_SAN", "") != ""
SCHEMA = json.load(open(os.path.join(TOP, "docs", "cut-report.schema.json")))


def valid(rep):
    """The report against docs/cut-report.schema.json."""
    import jsonschema
    try:
        jsonschema.validate(rep, SCHEMA)
        return True
    except jsonschema.ValidationError as e:
        diag("the cut report does not match its schema: %s" % e.message)
        return False


def connect(uri):
    h = nbd.NBD()
    h.connect_uri(uri)
    return h


def stream(uri, allowed, stop, rnd):
    """Writes 16 KiB aligned pages, each filled with a new byte, until the
    cut fails a write (or stop is set); every byte sent is recorded as
    allowed for its page before it is sent."""
    h = connect(uri)
    b = 0x10
    try:
        while not stop.is_set():
            p = rnd.randrange(PAGES)
            b = 0x10 + (b - 0x10 + 1) % 0xe0
            allowed[p].add(b)
            h.pwrite(bytes([b]) * PAGE, p * PAGE)
    except nbd.Error:
        pass                    # the cut: EIO, or the connection dropped


def cut_rounds(name, srv, ctlpath, seed):
    """CUTS power cuts under a stream; returns (torn pages, pages
    checked, atomic writes the reports list, any of them torn in the
    report's sense)."""
    rnd = random.Random(seed)
    torn = checked = listed = 0
    bad_report = False
    for r in range(CUTS):
        h = connect(srv.uri)
        old = 1 + r
        h.pwrite(bytes([old]) * SIZE, 0)
        h.flush()
        h.shutdown()
        allowed = [{old} for _ in range(PAGES)]
        stop = threading.Event()
        t = threading.Thread(target=stream,
                             args=(srv.uri, allowed, stop, rnd))
        t.start()
        time.sleep(0.05 + rnd.random() * 0.1)
        p = subprocess.run([CTL, ctlpath, "power-cut"], capture_output=True,
                           text=True, timeout=60)
        stop.set()
        t.join(30)
        try:
            rep = json.loads(p.stdout)
        except ValueError:
            rep = None
            bad_report = True
            diag("%s: the report is not JSON: %r %r" % (name, p.stdout[-300:],
                                                         p.stderr))
        if rep and not valid(rep):
            bad_report = True
        if rep:
            listed += len(rep.get("atomic", []))
            # Every sector of a listed atomic write shares its outcome.
            for i, a in enumerate(rep.get("atomic", [])):
                outs = {s["outcome"] for s in rep["sectors"]
                        if s.get("atomic") == i}
                want = "kept" if a["outcome"] == "kept" else "reverted"
                if outs != {want}:
                    bad_report = True
        h = connect(srv.uri)
        data = h.pread(SIZE, 0)
        h.shutdown()
        for pg in range(PAGES):
            page = data[pg * PAGE:(pg + 1) * PAGE]
            checked += 1
            if page != bytes([page[0]]) * PAGE or page[0] not in allowed[pg]:
                torn += 1
    return torn, checked, listed, bad_report


def power_cuts(name, make, models=("512e", "4kn")):
    d = tempfile.mkdtemp(prefix="sect4k-atomic.")
    ctlpath = os.path.join(d, "ctl")
    for model in models:
        res = {}
        for key in (True, False):
            args = ["size=1M"] * (name != "filter") + ["model=" + model, "write-cache=true",
                    "torn=garbage", "seed=%d" % (7 + key),
                    "control=" + ctlpath]
            if key:
                args.append("atomic-write-max=16K")
            with make(*args) as srv:
                res[key] = cut_rounds(name, srv, ctlpath, 42)
        torn, checked, listed, bad = res[True]
        ok(torn == 0 and checked == CUTS * PAGES,
           "%s %s atomic-write-max=16K write-cache=true torn=garbage: %d "
           "cuts under a stream of 16 KiB writes, %d of %d pages torn"
           % (name, model, CUTS, torn, checked))
        ok(listed > 0 and not bad,
           "%s %s: the cut reports list %d atomic writes, each kept or "
           "dropped whole, as docs/cut-report.schema.json says"
           % (name, model, listed))
        torn, checked, listed, bad = res[False]
        ok(torn > 0 and listed == 0,
           "%s %s without atomic-write-max: the same stream tears %d of %d "
           "pages (no atomic writes listed)" % (name, model, torn, checked))
    os.rmdir(d)


def concurrent_reads(name, make):
    unit, units = 65536, 16
    stop = threading.Event()
    torn = [0]
    reads = [0]

    def writer(uri, seed):
        h = connect(uri)
        rnd = random.Random(seed)
        while not stop.is_set():
            h.pwrite(bytes([rnd.randrange(1, 256)]) * unit,
                     rnd.randrange(units) * unit)
        h.shutdown()

    def reader(uri, seed):
        h = connect(uri)
        rnd = random.Random(seed)
        while not stop.is_set():
            u = rnd.randrange(units - 3)
            wide = rnd.random() < 0.5
            off = u * unit + (unit // 2 if wide else 0)
            n = 3 * unit if wide else unit
            data = h.pread(n, off)
            s = 0
            while s < n:
                e = min(((off + s) // unit + 1) * unit - off, n)
                if data[s:e] != bytes([data[s]]) * (e - s):
                    torn[0] += 1
                s = e
            reads[0] += 1
        h.shutdown()

    for model in ("4kn", "512e"):
        torn[0] = reads[0] = 0
        stop.clear()
        with make("size=1M", "model=" + model, "atomic-write-max=64K") as srv:
            ts = [threading.Thread(target=writer, args=(srv.uri, i))
                  for i in range(2)]
            ts += [threading.Thread(target=reader, args=(srv.uri, 10 + i))
                   for i in range(2)]
            for t in ts:
                t.start()
            time.sleep(2 if SLOW else 1)
            stop.set()
            for t in ts:
                t.join(60)
        ok(torn[0] == 0 and reads[0] > 0,
           "%s %s atomic-write-max=64K: %d concurrent reads, none saw part "
           "of a 64 KiB write" % (name, model, reads[0]))


def report_lbas(name, make):
    """The cut report's "atomic" entry names the write's LBAs, and
    "sectors" the physical sectors it settles: on 512e-xp (alignment
    offset 3584) a 16 KiB write at LBA 32 covers LBAs 32-63 and settles
    physical sectors 4-8 (LBAs 31-70).  A unit that took in an earlier
    atomic write within its sectors names both writes' LBAs: 512 bytes at
    LBA 31, then 4 KiB at LBA 32 (sectors 4-5), LBAs 31-39."""
    d = tempfile.mkdtemp(prefix="sect4k-atomic.")
    ctlpath = os.path.join(d, "ctl")
    got = []
    with make("size=1M", "model=512e-xp", "write-cache=true", "torn=none",
              "atomic-write-max=16K", "atomic-write-min=512",
              "control=" + ctlpath) as srv:
        for writes in ([(16384, 16384)], [(512, 31 * 512), (4096, 32 * 512)]):
            h = connect(srv.uri)
            for n, off in writes:
                h.pwrite(b"n" * n, off)
            p = subprocess.run([CTL, ctlpath, "power-cut"],
                               capture_output=True, text=True, timeout=60)
            try:
                rep = json.loads(p.stdout)
                if not valid(rep):
                    rep = {}
                got.append((rep["atomic"],
                            [(x["sector"], x["lba"], x["lbas"])
                             for x in rep["sectors"]]))
            except (ValueError, KeyError):
                got.append((p.stdout + p.stderr, None))
            try:
                h.shutdown()
            except nbd.Error:
                pass
    os.rmdir(d)
    want = ([{"lba": 32, "lbas": 32, "sectors": [4, 8], "outcome": "dropped"}],
            [(4, 31, 8), (5, 39, 8), (6, 47, 8), (7, 55, 8), (8, 63, 8)])
    ok(got[0] == want, "%s 512e-xp: 16 KiB at LBA 32: atomic lba 32, lbas "
       "32, sectors [4, 8] (LBAs 31-70): %s" % (name, got[0]))
    want = ([{"lba": 31, "lbas": 9, "sectors": [4, 5], "outcome": "dropped"}],
            [(4, 31, 8), (5, 39, 8)])
    ok(got[1] == want, "%s 512e-xp: 512 bytes at LBA 31, then 4 KiB at LBA "
       "32 taking it in: atomic lba 31, lbas 9: %s" % (name, got[1]))


def main():
    for name, make, _ in front_ends():
        power_cuts(name, make)
        concurrent_reads(name, make)
        report_lbas(name, make)
    power_cuts("filter", lambda *a: Nbdkit("1M", *a, plugin="memory",
                                           options=["--filter=" + FILTER]),
               models=("4kn",))
    done_testing()


main()
