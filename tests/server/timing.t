#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""The timing model felt by a client, in both front ends (the nbdkit plugin
and sect4k-server): with timing=hdd7200 on 512e, a fio 4 KiB random write
job offset by 512 bytes costs >= 2x the aligned job per request, the
difference being RMW; reads straddling two physical sectors pay twice the
transfer; queue-depth=1 serialises, queue-depth=32 does not; the export is
rotational only under timing=hdd7200 (plugin, filter, server).  Assertions
are on the modelled time in the statistics, and on wall time only as a
lower bound (a sleep is never shorter), so a loaded machine cannot make
them fail."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, ".."))
sys.path.insert(0, here)
from tap import ok, diag, skip, skip_all, done_testing, need_nbd, Nbdkit  # noqa: E402
from srvlib import Server, SERVER  # noqa: E402

nbd = need_nbd()
if not os.access(SERVER, os.X_OK):
    skip_all("%s is not built" % SERVER)
FIO = shutil.which("fio")
tmp = tempfile.mkdtemp(prefix="sect4k-timing.")
FRONTS = {"plugin": Nbdkit, "server": Server}


def served(front, name, *args):
    """Runs a device with args and the client work in the yielded server;
    returns its statistics (written at exit)."""
    path = os.path.join(tmp, "%s-%s.json" % (front, name))

    class Run:
        def __enter__(self):
            self.srv = FRONTS[front]("size=64M", "statsfile=" + path, *args)
            return self.srv

        def __exit__(self, *exc):
            self.srv.__exit__(*exc)
            with open(path) as f:
                self.stats = json.load(f)
    return Run()


def fio(uri, **opts):
    cmd = [FIO, "--name=job", "--ioengine=nbd", "--uri=" + uri,
           "--output-format=json"] + ["--%s=%s" % kv for kv in opts.items()]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        diag(r.stdout[-500:] + r.stderr[-500:])
    return r.returncode == 0


def per_request(op, field):
    return op[field] / max(op["modelled_requests"], 1)


for front in FRONTS:
    # ---- aligned vs offset by 512 bytes: fio, then a read each ----------
    jobs = {}
    for name, offset in (("aligned", 0), ("misaligned", 512)):
        run = served(front, name, "model=512e", "timing=hdd7200")
        with run as srv:
            if FIO:
                good = fio(srv.uri, rw="randwrite", bs=4096, iodepth=8,
                           offset=offset, size="4M", io_size="200k")
                ok(good, "%s: fio 4 KiB random writes, offset %d" %
                   (front, offset))
            h = nbd.NBD()
            h.connect_uri(srv.uri)
            for i in range(8):
                h.pread(4096, 8 << 20 | i * 65536 | offset)
            if not FIO:         # the same writes, one at a time
                for i in range(50):
                    h.pwrite(b"w" * 4096, i * 8192 + offset)
            h.shutdown()
        jobs[name] = run.stats["ops"]
    a, m = jobs["aligned"]["write"], jobs["misaligned"]["write"]
    if not FIO:
        skip("%s: fio jobs" % front, "fio is not installed (libnbd writes instead)")
    am, mm = per_request(a, "modelled_ns"), per_request(m, "modelled_ns")
    ok(a["modelled_requests"] >= 50 and m["modelled_requests"] >= 50 and
       mm >= 2 * am,
       "%s: modelled time per write, misaligned %.2f ms >= 2x aligned %.2f ms"
       % (front, mm / 1e6, am / 1e6))
    ok(a["modelled_rmw_ns"] == 0 and m["rmw_sectors"] == 2 * m["requests"],
       "%s: the aligned job RMWs nothing, the misaligned two sectors a write"
       % front)
    rm = per_request(m, "modelled_rmw_ns")
    ok(rm >= 0.9 * (mm - am),
       "%s: RMW (%.2f ms a write) accounts for the difference (%.2f ms)"
       % (front, rm / 1e6, (mm - am) / 1e6))
    ra, rmis = jobs["aligned"]["read"], jobs["misaligned"]["read"]
    ta, tm = (per_request(ra, "modelled_transfer_ns"),
              per_request(rmis, "modelled_transfer_ns"))
    ok(ra["modelled_requests"] == 8 and rmis["modelled_requests"] == 8 and
       ta > 0 and abs(tm / ta - 2) < 0.01,
       "%s: a 4 KiB read straddling two sectors pays twice the transfer "
       "(%.0f ns vs %.0f ns)" % (front, tm, ta))
    ok(ra["modelled_rmw_ns"] == 0 and rmis["modelled_rmw_ns"] == 0,
       "%s: reads never RMW" % front)

    # ---- queue depth: 16 writes of 20 ms in flight at once ---------------
    N, LAT = 16, 0.020
    for depth in (1, 32):
        run = served(front, "qd%d" % depth, "model=512e", "latency-write=20ms",
                     "queue-depth=%d" % depth)
        with run as srv:
            h = nbd.NBD()
            h.connect_uri(srv.uri)
            buf = nbd.Buffer.from_bytearray(bytearray(b"q" * 4096))
            t0 = time.monotonic()
            cookies = [h.aio_pwrite(buf, i * 4096) for i in range(N)]
            while h.aio_in_flight() > 0:
                h.poll(-1)
            for c in cookies:
                h.aio_command_completed(c)      # raises if one failed
            wall = time.monotonic() - t0
            h.shutdown()
        w = run.stats["ops"]["write"]
        wait = w["modelled_wait_ns"] / 1e9
        if depth == 1:
            # The 16 end one service after another: >= 16 x 20 ms of wall
            # time.  Request i waits for the i before it (up to 120
            # services in all), less how late it arrived: a loaded machine
            # spreads arrivals, so only a few services of waiting are
            # asserted.
            ok(wall >= N * LAT * 0.95 and wait >= 2 * LAT,
               "%s: queue-depth=1 serialises: %d writes took %.3f s "
               "(>= %.2f s), modelled wait %.2f s" %
               (front, N, wall, N * LAT, wait))
        else:
            ok(w["modelled_requests"] == N and w["modelled_wait_ns"] == 0,
               "%s: queue-depth=32 serves all %d at once: no modelled wait "
               "(wall %.3f s, %.2f s if serial)" % (front, N, wall, N * LAT))

    # ---- a client gone while its reply waits an hour: no wait to stop ----
    # The server cancels the timer of a closing connection; the plugin's
    # nbdkit_nanosleep wakes at shutdown.  Under a sanitizer (preloaded
    # into nbdkit) nbdkit 1.32's own exit hangs once it has logged the
    # failed reply to the gone client, whatever the plugin does.
    if front == "plugin" and os.environ.get("SECT4K_SAN"):
        skip("plugin: stops with a modelled reply an hour away",
             "nbdkit's exit hangs under a sanitizer after a failed reply")
    else:
        srv = FRONTS[front]("size=1M", "latency-write=3600s")
        try:
            h = nbd.NBD()
            h.connect_uri(srv.uri)
            h.aio_pwrite(nbd.Buffer.from_bytearray(bytearray(4096)), 0)
            h.poll(0)           # the request is on its way, not answered
            time.sleep(0.5)
            del h               # closes the socket, the reply still due
            t0 = time.monotonic()
            status = srv.stop()
            took = time.monotonic() - t0
            ok(status == 0 and took < 15,
               "%s: stops in %.1f s with a modelled reply an hour away for "
               "a client that has gone (status %s)" % (front, took, status))
        finally:
            srv.__exit__(None, None, None)

    # ---- the statistics file: schema, table, plot ------------------------
    if front == "server":
        doc = os.path.join(tmp, "server-misaligned.json")
        try:
            import jsonschema
            schema = json.load(open(os.path.join(here, "..", "..", "docs",
                                                 "stats.schema.json")))
            try:
                jsonschema.validate(json.load(open(doc)), schema)
                err = None
            except jsonschema.ValidationError as e:
                err = e.message
            ok(err is None, "timed statistics validate against the schema (%s)"
               % err)
        except ImportError:
            skip("timed statistics against the schema", "no python3-jsonschema")
        png = os.path.join(tmp, "time.png")
        r = subprocess.run([os.path.join(here, "..", "..", "scripts",
                                         "sect4k-stats"), doc, "--plot", png],
                           capture_output=True, text=True)
        ok("modelled write:" in r.stdout and "RMW 16.667" in r.stdout,
           "sect4k-stats shows where the modelled time went")
        if shutil.which("gnuplot"):
            ok(r.returncode == 0 and open(png, "rb").read(4) == b"\x89PNG",
               "sect4k-stats --plot draws it (%s)" % r.stderr.strip())
        else:
            skip("sect4k-stats --plot", "gnuplot is not installed")

# ---- rotational: the NBD flag says what the SCSI disk's B1h page says ----
# (tests/unit/scsi.t): only a rotating preset rotates, on every front end;
# the filter says the same whatever the plugin under it says.
FILTER = os.environ.get("SECT4K_FILTER") or os.path.join(
    here, "..", "..", "sect4k-filter.so")
fronts = dict(FRONTS)
if os.path.exists(FILTER):
    fronts["filter"] = lambda *a: Nbdkit(*a, options=["--filter=" + FILTER],
                                         plugin="memory")
else:
    skip("the filter's rotational flag", FILTER + " is not built")
for front in fronts:
    for keys, want in (((), False), (("timing=ssd",), False),
                       (("latency-read=4ms", "latency-rmw=8ms"), False),
                       (("timing=hdd7200",), True)):
        with fronts[front]("size=1M", *keys) as srv:
            h = nbd.NBD()
            h.connect_uri(srv.uri)
            got = bool(h.is_rotational())
            h.shutdown()
        ok(got == want, "%s %s: NBD_FLAG_ROTATIONAL %s" %
           (front, " ".join(keys) or "(no timing key)",
            "set" if want else "clear"))

subprocess.run(["rm", "-rf", tmp])
done_testing()
