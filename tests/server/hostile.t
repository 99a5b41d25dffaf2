#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""Hostile clients: bad flags and magics, oversized options and requests,
stalled handshakes, too many connections, non-loopback addresses.  The
server drops or refuses them, stays up, and does not grow its memory."""
import os
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import ok, diag, done_testing, rss  # noqa: E402
import srvlib  # noqa: E402
from srvlib import Server, greet, send_opt, recv_opt_reply, go, request, recv_exact, closed, serves  # noqa: E402

srvlib.need_server()
ERR_TOO_BIG = 0x80000009


def main():
    with Server("size=64M",
                options=["--handshake-timeout", "2", "--max-connections", "8"]) as srv:
        s = srv.connect_raw()
        greet(s, 0)
        ok(closed(s), "client flags without FIXED_NEWSTYLE: dropped")
        s = srv.connect_raw()
        greet(s, 1 | 8)
        ok(closed(s), "unknown client flags: dropped")
        s = srv.connect_raw()
        greet(s)
        s.sendall(b"NOTAMAGIC" * 2)
        ok(closed(s), "bad option magic: dropped")

        s = srv.connect_raw()
        greet(s)
        send_opt(s, 10, bytes(100000))
        opt, typ, data = recv_opt_reply(s)
        ok(opt == 10 and typ == ERR_TOO_BIG,
           "a 100 kB option: discarded unread, NBD_REP_ERR_TOO_BIG")
        ok(go(s)[-1][0] == 1, "... and the handshake goes on")
        s.close()
        s = srv.connect_raw()
        greet(s)
        s.sendall(struct.pack(">QII", srvlib.IHAVEOPT, 1, 1 << 30))
        ok(closed(s), "NBD_OPT_EXPORT_NAME of 1 GiB: dropped at once")

        s = srv.connect_raw()
        greet(s)
        go(s)
        request(s, 1, 0, 1 << 30, cookie=1)
        ok(closed(s), "a 1 GiB write header: dropped without reading it")
        s = srv.connect_raw()
        greet(s)
        go(s)
        s.sendall(b"\x00" * 28)
        ok(closed(s), "bad request magic: dropped")

        # Stalled handshakes are dropped after --handshake-timeout.
        t0 = time.time()
        s = srv.connect_raw()
        s.recv(18)
        c = closed(s, timeout=10)
        dt = time.time() - t0
        ok(c and 1.5 < dt < 6, "a silent client is dropped after the handshake timeout (%.1f s)" % dt)
        s = srv.connect_raw()
        greet(s)
        send_opt(s, 7, struct.pack(">I", 10) + b"dis")   # never finished
        c = closed(s, timeout=10)
        ok(c, "a client stalling inside an option is dropped too")
        ok("handshake not finished after 2 s" in srv.log(), "the timeout is logged")

        # --max-connections: the ninth is closed, the eight still work.
        conns = []
        for _ in range(8):
            s = srv.connect_raw()
            greet(s)
            go(s)
            conns.append(s)
        s = srv.connect_raw()
        ok(closed(s), "connection over --max-connections: closed")
        request(conns[0], 0, 0, 512, cookie=5)
        magic, err, cookie = struct.unpack(">IIQ", recv_exact(conns[0], 16))
        ok(err == 0 and cookie == 5, "the open connections still work")
        for s in conns:
            s.close()
        ok(serves(srv, within=10),
           "after they close, new clients are served again")
        ok("--max-connections" in srv.log(), "the refusal is logged")

        # Half-sent maximum-size writes hold only what was sent.
        base = rss(srv.proc.pid)
        conns = []
        for i in range(6):
            s = srv.connect_raw()
            greet(s)
            go(s)
            request(s, 1, 0, 32 << 20, cookie=i, payload=bytes(100))
            conns.append(s)
        time.sleep(0.3)
        grown = rss(srv.proc.pid) - base
        ok(grown < 4 << 20, "6 half-sent 32 MiB writes: memory grew %d kB only" % (grown >> 10))
        for s in conns:
            s.close()

        # Many pipelined requests whose replies are never read: the server
        # stops reading (the output backlog bound) instead of buffering.
        s = srv.connect_raw()
        greet(s)
        go(s)
        s.setblocking(False)
        sent = 0
        req = b"".join(struct.pack(">IHHQQI", 0x25609513, 0, 0, i, 0, 65536)
                       for i in range(64))
        t_end = time.time() + 3
        while time.time() < t_end:
            try:
                sent += s.send(req)
            except BlockingIOError:
                time.sleep(0.05)
        grown = rss(srv.proc.pid) - base
        ok(grown < 64 << 20, "a client that never reads replies: memory grew %d MB only "
           "(%d requests sent)" % (grown >> 20, sent // 28))
        s.close()
        time.sleep(0.2)
        ok(serves(srv), "the server still serves")
        st = srv.stop()
        ok(st == 0, "clean exit (%s)" % st)
        if st:
            diag(srv.log())

    # Non-loopback addresses need --allow-remote; nothing is bound.
    out = subprocess.run([srvlib.SERVER, "size=1M", "--listen", "0.0.0.0:%d" % srvlib.free_port()],
                         capture_output=True, text=True, timeout=10)
    ok(out.returncode == 1 and "not a loopback address" in out.stderr and
       len(out.stderr.strip().splitlines()) == 1,
       "--listen 0.0.0.0: refused with one line")
    diag(out.stderr.strip())
    with Server("size=1M", tcp=True) as srv:
        ok(serves(srv), "TCP on 127.0.0.1 works")
    d = "/tmp/sect4k-hostile.%d" % os.getpid()
    with open(d, "w") as f:
        f.write("precious")
    out = subprocess.run([srvlib.SERVER, "size=1M", "--unix", d],
                         capture_output=True, text=True, timeout=10)
    with open(d) as f:
        kept = f.read() == "precious"
    os.unlink(d)
    ok(out.returncode == 1 and "not a socket" in out.stderr and kept,
       "--unix over a regular file: refused, the file untouched")
    done_testing()


main()
