#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""Clean shutdown: SIGTERM or SIGINT while clients have requests in
flight.  Every request gets a reply (success or ESHUTDOWN) or the
connection ends; nothing hangs; the server exits 0 and writes --nbd-stats."""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import ok, diag, done_testing, need_nbd  # noqa: E402
import srvlib  # noqa: E402
from srvlib import Server  # noqa: E402

nbd = need_nbd()
srvlib.need_server()


def run(sig, name):
    stats = "/tmp/sect4k-stats.%d.%s" % (os.getpid(), name)
    with Server("size=64M", "model=512e", options=["--nbd-stats", stats]) as srv:
        handles = []
        for _ in range(3):
            h = nbd.NBD()
            h.connect_uri(srv.uri)
            handles.append(h)
        results = {"ok": 0, "shutdown": 0, "other": 0}

        def done(err):
            e = err.value if hasattr(err, "value") else err
            results["ok" if e == 0 else "shutdown" if e == 108 else "other"] += 1
            return 1
        buf = bytearray(os.urandom(4096))
        n = 0
        t_sig = time.time() + 0.5
        sent_sig = False
        closed = set()
        t_end = time.time() + 15
        while time.time() < t_end and len(closed) < len(handles):
            for i, h in enumerate(handles):
                if i in closed:
                    continue
                try:
                    while h.aio_in_flight() < 32 and not sent_sig:
                        h.aio_pwrite(buf, (n % 16000) * 4096, completion=lambda e: done(e))
                        n += 1
                    h.poll(10)
                    if sent_sig and h.aio_in_flight() == 0:
                        closed.add(i)
                except nbd.Error:
                    closed.add(i)     # the server closed the connection
            if not sent_sig and time.time() > t_sig:
                srv.proc.send_signal(sig)
                sent_sig = True
        ok(len(closed) == len(handles), "%s: every client saw its requests end (%s)"
           % (name, results))
        ok(results["other"] == 0 and results["ok"] > 0,
           "%s: replies are successes or ESHUTDOWN only" % name)
        try:
            st = srv.proc.wait(timeout=10)
        except Exception:
            st = "hung"
        ok(st == 0, "%s: the server exited 0 (%s)" % (name, st))
        ok("finishing requests in flight" in srv.log(), "%s: shutdown logged" % name)
        if st != 0:
            diag(srv.log())
        try:
            with open(stats) as f:
                kv = dict(line.strip().split("=", 1) for line in f if "=" in line)
            os.unlink(stats)
        except OSError:
            kv = {}
        ok(int(kv.get("requests_write", 0)) >= results["ok"] and
           int(kv.get("bytes_written", 0)) >= 4096 * results["ok"] and
           kv.get("connections") == "3",
           "%s: --nbd-stats counts the connections and writes (%s)" % (name, kv))


run(signal.SIGTERM, "SIGTERM")
run(signal.SIGINT, "SIGINT")
done_testing()
