#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""A slow flush on one connection does not stall the others of its event
loop: with file= and one loop thread, connection A flushes ~128 MiB of
dirty pages (an fdatasync that takes a while) and connection B's small
reads must be answered while A's flush is still pending.  A server that
ran the engine inline would answer B only after the fdatasync."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import ok, diag, done_testing, need_nbd  # noqa: E402
import srvlib  # noqa: E402

nbd = need_nbd()
srvlib.need_server()

with srvlib.flush_server() as srv:
    a, b = nbd.NBD(), nbd.NBD()
    a.connect_uri(srv.uri)
    b.connect_uri(srv.uri)

    srvlib.check_reads_during_flush(
        a, b, "B's reads were answered while A's flush was "
        "pending")
    b.shutdown()

    # SIGTERM while A's flush is in flight: the flush finishes, its reply
    # is sent, then the server exits.
    srvlib.dirty(a)
    cookie = a.aio_flush()
    time.sleep(0.01)
    st = srv.stop()
    try:
        while not a.aio_command_completed(cookie):
            a.poll(1000)
        answered = True
    except nbd.Error as e:
        answered = False
        diag("the flush: %s" % e)
    ok(answered, "SIGTERM during a flush: the flush is answered with success")
    ok(st == 0, "server exited cleanly (%s)" % st)
    if st:
        diag(srv.log())
done_testing()
