#!/usr/bin/python3
"""--idle-timeout: a connection that receives and sends nothing for that
long is closed, so idle clients cannot hold every --max-connections slot
for ever; a new client then gets served.  Without the option, idle
connections stay."""
import os
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import ok, diag, done_testing  # noqa: E402
import srvlib  # noqa: E402
from srvlib import Server, greet, go, request, recv_exact, closed  # noqa: E402

srvlib.need_server()


def served(srv):
    """A new client finishes the handshake and a read."""
    s = srv.connect_raw()
    try:
        greet(s)
        if go(s)[-1][0] != 1:
            return False
        request(s, 0, 0, 512, cookie=9)
        magic, err, cookie = struct.unpack(">IIQ", recv_exact(s, 16))
        return err == 0 and cookie == 9 and len(recv_exact(s, 512)) == 512
    except (OSError, EOFError, AssertionError):
        return False
    finally:
        s.close()


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
    ok(served(srv), "then a new client is served")
    ok("--idle-timeout" in srv.log(), "the closing is logged")

with Server("size=16M", options=["--max-connections", "2"]) as srv:
    socks = idle_clients(srv, 2)
    ok(not any(closed(s, timeout=3) for s in socks),
       "without --idle-timeout idle connections stay")
    ok(not served(srv), "... and hold every slot (--max-connections)")
    for s in socks:
        s.close()

done_testing()
