#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""Requests of ONE connection overlap with the file store: with file=
and one loop thread, a connection flushes ~128 MiB of dirty pages (an
fdatasync that takes a while) and small reads sent on the SAME
connection after the flush must be answered while the flush is still
pending.  A server with one request in flight per connection answers
them only after the flush.  Then NBD_CMD_DISC and SIGTERM arriving with
many requests in flight: each of them is answered first."""
import os
import socket
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import ok, diag, done_testing, need_nbd  # noqa: E402
import srvlib  # noqa: E402
from srvlib import greet, go, request, recv_exact  # noqa: E402

nbd = need_nbd()
srvlib.need_server()

with srvlib.flush_server() as srv:
    h = nbd.NBD()
    h.connect_uri(srv.uri)

    srvlib.check_reads_during_flush(
        h, h, "reads answered while a flush of the same "
        "connection was pending")

    # NBD_CMD_DISC right behind a flush and 15 reads: all 16 are answered,
    # then the server closes.
    srvlib.dirty(h)
    s = srv.connect_raw()
    greet(s)
    go(s)
    msg = struct.pack(">IHHQQI", 0x25609513, 0, 3, 1000, 0, 0)   # flush
    msg += b"".join(struct.pack(">IHHQQI", 0x25609513, 0, 0, i, i << 20,
                                4096) for i in range(15))
    s.sendall(msg)
    request(s, 2)                                   # disconnect
    answered = set()
    try:
        while True:
            hdr = s.recv(16, socket.MSG_WAITALL)
            if not hdr:
                break
            magic, err, cookie = struct.unpack(">IIQ", hdr)
            if magic != 0x67446698 or err:
                break
            if cookie < 15:
                recv_exact(s, 4096)
            answered.add(cookie)
    except (OSError, EOFError) as e:
        diag("after the disconnect: %s" % e)
    s.close()
    ok(answered == set(range(15)) | {1000},
       "NBD_CMD_DISC behind 16 requests: all answered before the close "
       "(%d of 16)" % len(answered))

    # SIGTERM with a flush and 15 reads in flight on one connection: each
    # is answered, then the server exits cleanly.
    srvlib.dirty(h)
    rbufs = [nbd.Buffer(4096) for _ in range(15)]
    cookies = [h.aio_flush()] + [h.aio_pread(b, i << 20)
                                 for i, b in enumerate(rbufs)]
    st = srv.stop()
    results = []
    for c in cookies:
        try:
            while not h.aio_command_completed(c):
                h.poll(1000)
            results.append("ok")
        except nbd.Error as e:
            results.append(e.errno or str(e))
    ok(all(r in ("ok", "ESHUTDOWN") for r in results),
       "SIGTERM with 16 requests in flight: each is answered (%s)"
       % ", ".join(sorted(set(map(str, results)))))
    ok(st == 0, "server exited cleanly (%s)" % st)
    if st:
        diag(srv.log())
done_testing()
