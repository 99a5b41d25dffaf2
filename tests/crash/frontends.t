#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""The toy WAL's workload through a real export with write-log=, on both
front ends (sect4k-server and nbdkit + the plugin): sect4k-crash finds the
broken WAL's failure on 512e from either log, and both give the same
states with the same results (determinism across front ends)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import tap  # noqa: E402
from crashlib import crash, record, TOYWAL, ROOT  # noqa: E402

server = os.environ.get("SECT4K_SERVER", os.path.join(ROOT, "sect4k-server"))
plugin = os.environ.get("SECT4K_PLUGIN", os.path.join(ROOT, "sect4k.so"))
if not os.path.exists(server) or not os.path.exists(plugin):
    tap.skip_all("sect4k-server or the plugin is not built")
WORKLOAD = [sys.executable, TOYWAL, "workload", "broken", "3", "URI"]
logs = {
    "server": record("server", [server, "-U", "SOCK", "4M", "model=512e",
                                "write-log=LOG"], WORKLOAD)[0],
    "nbdkit": record("nbdkit", ["nbdkit", "-f", "-U", "SOCK", plugin,
                                "size=4M", "model=512e", "write-log=LOG"],
                     WORKLOAD)[0],
}
reps = {}
for name, log in logs.items():
    rc, out, err, rep = crash(log, "512e", "--torn", "garbage",
                              checker=(sys.executable, TOYWAL, "check",
                                       "broken"))
    reps[name] = rep
    tap.ok(rc == 1 and rep and rep["summary"]["failed"] > 0,
           "%s's log: the broken WAL's failure is found: %s"
           % (name, out.splitlines()[:1] or err))


def states(rep):
    return [(s["id"], s["result"]) for s in rep["states"]] if rep else None


tap.ok(states(reps["server"]) == states(reps["nbdkit"]) and
       states(reps["server"]),
       "both front ends' logs give the same %d states and results"
       % len(states(reps["server"]) or []))
tap.done_testing()
