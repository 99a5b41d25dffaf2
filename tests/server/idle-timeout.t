#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""--idle-timeout: a connection that receives and sends nothing for that
long is closed, so idle clients cannot hold every --max-connections slot
for ever; a new client then gets served.  Without the option, idle
connections stay."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import ok, diag, done_testing  # noqa: E402
import srvlib  # noqa: E402
from srvlib import Server, greet, go, closed, serves  # noqa: E402

srvlib.need_server()


def idle_clients(srv, n):
    """n connections past the handshake that then say nothing."""
    socks = []
    for _ in range(n):
        s = srv.connect_raw()
        greet(s)
        go(s)
        socks.append(s)
    return socks


with Server("size=16M", options=["--max-connections", "2",
                                 "--idle-timeout", "2"]) as srv:
    socks = idle_clients(srv, 2)
    t = time.monotonic()
    ok(all(closed(s, timeout=30) for s in socks),
       "idle connections are closed after --idle-timeout")
    diag("closed after %.1f s" % (time.monotonic() - t))
    ok(serves(srv, within=10), "then a new client is served")
    ok("--idle-timeout" in srv.log(), "the closing is logged")

with Server("size=16M", options=["--max-connections", "2"]) as srv:
    socks = idle_clients(srv, 2)
    ok(not any(closed(s, timeout=3) for s in socks),
       "without --idle-timeout idle connections stay")
    ok(not serves(srv), "... and hold every slot (--max-connections)")
    for s in socks:
        s.close()

done_testing()
