#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""sect4k-crash finds the broken toy WAL's failure on 512e with
torn=garbage (a 512-byte commit's RMW destroys committed records next to
it), and nothing on 4kn or 512n; the correct WAL passes everywhere."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import tap  # noqa: E402
from crashlib import toy_log, crash, valid, TOYWAL  # noqa: E402

for mode in ("correct", "broken"):
    for geom in ("512e", "4kn", "512n"):
        log = toy_log("%s-%s.log" % (geom, mode), mode, geom)
        rc, out, err, rep = crash(log, geom, "--torn", "garbage",
                                  "--timeout", "30",
                                  checker=(sys.executable, TOYWAL, "check",
                                           mode))
        tap.ok(rep is not None and valid(rep),
               "%s on %s: the report matches the schema" % (mode, geom))
        s = rep["summary"] if rep else {}
        tap.diag(out.splitlines()[0] if out else err)
        if mode == "broken" and geom == "512e":
            fails = [x for x in rep["states"] if x["result"] == "failed"]
            tap.ok(rc == 1 and s.get("failed", 0) > 0,
                   "broken on 512e: failures found (%s)" % s)
            f = fails[0] if fails else {}
            tap.ok(f.get("neighbours_damaged") and f.get("torn"),
                   "broken on 512e: the failure names the torn write and "
                   "damaged neighbours: %s" % {k: f.get(k) for k in
                   ("id", "torn", "neighbours_damaged")})
            tap.ok("FAILED " + f.get("id", "?") in out,
                   "the summary names the failed state")
        else:
            tap.ok(rc == 0 and s.get("failed") == 0 and
                   s.get("checked", 0) > 0,
                   "%s on %s: no failure (%s)" % (mode, geom, s))
tap.done_testing()
