#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""Fairness: connections that pipeline 8 MiB reads of never-written
space with structured replies (each answered by a tiny hole chunk, so
no reply backlog ever stops them) must not take over the event loop.
A well-behaved client's sequential 4 KiB reads are still answered
promptly, the queued requests of a client that has gone are dropped,
and SIGTERM still stops the server.  One event-loop thread, so every
connection shares it.

Such a read costs real work (8 MiB zeroed and scanned) where reads are
copied: here the fault layer (bad-sectors=, on a sector nobody reads)
keeps them copied.  Without it, the memory store answers a hole by
reference for next to nothing, and is charged so: then the floods get
thousands of reads done per turn, and the good client's reads must
still be served (counted in turns, and within a wide time bound).  The
file store (fairness-file.t) answers no read by reference: its reads
of holes are copied through the request slots, each 8 MiB zeroed,
copied and scanned (about 13 ms each here, 4 s for the good client's
100 reads, 20 s with two busy loops beside), so there they are counted
as copied reads, not timed."""
import os
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import ok, diag, done_testing, need_nbd  # noqa: E402
import srvlib  # noqa: E402
from srvlib import Server, greet, send_opt, recv_opt_reply, go, recv_exact  # noqa: E402

nbd = need_nbd()
srvlib.need_server()

BIG = 8 << 20
HDR = struct.pack(">IHHQQI", 0x25609513, 0, 0, 1, 0, BIG)   # 8 MiB read
BOUND = 30          # seconds to exit after SIGTERM or to serve after floods
# A hole reply to an 8 MiB read is one 32-byte chunk; while the good
# client waits for each read, every flood gets about one request done.
PER_READ = 16
served = [0]        # flood replies received (bytes / 32)


def hostile(srv):
    """A raw connection with structured replies, ready to pipeline."""
    s = srv.connect_raw()
    greet(s)
    send_opt(s, 8)                          # NBD_OPT_STRUCTURED_REPLY
    recv_opt_reply(s)
    go(s)
    return s


def flood(s, stop):
    """Sends read headers as fast as the server takes them, and drains
    the replies, until stop is set or the server closes."""
    def drain():
        try:
            while True:
                b = s.recv(65536)
                if not b:
                    break
                served[0] += len(b) / 32
        except OSError:
            pass
    t = threading.Thread(target=drain, daemon=True)
    t.start()
    batch = HDR * 64
    try:
        while not stop.is_set():
            s.sendall(batch)
    except OSError:
        pass


def good_reads(srv, n=100):
    """Seconds for n sequential 4 KiB reads by libnbd, or None."""
    h = nbd.NBD()
    t = time.monotonic()
    try:
        h.connect_uri(srv.uri)
        for i in range(n):
            h.pread(4096, i * 4096)
            if time.monotonic() - t > 600:      # a server that never answers
                return None
        return time.monotonic() - t
    except nbd.Error as e:
        diag("the well-behaved client failed: %s" % e)
        return None


# Copied reads: the last physical sector is "bad", which nobody reads.
COPIED = "bad-sectors=%d" % ((1 << 30) // 512 - 1)
# Per good read, the loop runs at most a turn's credit of flood work
# (CONN_TURN_BYTES) a few times; a hole by reference is charged
# CONN_REQ_COST, 4 KiB.
PER_READ_REF = 16 * (8 << 20) // 4096


def floods_beside_good_reads(srv, per_read):
    stop = threading.Event()
    socks = [hostile(srv) for _ in range(4)]
    threads = [threading.Thread(target=flood, args=(s, stop), daemon=True)
               for s in socks]
    for t in threads:
        t.start()
    time.sleep(1)                       # let the backlogs build
    before = served[0]
    took = good_reads(srv)
    during = served[0] - before
    diag("100 reads of 4 KiB beside 4 flooding connections: %s s, "
         "while the floods got %d reads done"
         % ("failed" if took is None else "%.2f" % took, during))
    # Counted, not timed: how long a read takes depends on the load.
    ok(took is not None and during <= 100 * 4 * per_read,
       "a well-behaved client's 100 reads are served between the floods' "
       "requests (%d of theirs, at most %d)" % (during, 100 * 4 * per_read))
    return stop, socks, took


def main():
    with Server("size=1G", options=["--threads", "1"]) as srv:
        if srvlib.STORE == "file":
            # No read by reference: copied, charged its length.
            stop, socks, took = floods_beside_good_reads(srv, PER_READ)
        else:
            stop, socks, took = floods_beside_good_reads(srv, PER_READ_REF)
            ok(took is not None and took < BOUND,
               "holes by reference: the good client's reads within %d s"
               % BOUND)
        stop.set()
        for s in socks:
            s.close()

    with Server("size=1G", COPIED, options=["--threads", "1"]) as srv:
        stop, socks, took = floods_beside_good_reads(srv, PER_READ)

        # SIGTERM with the floods still going: acts, and the server exits.
        t = time.monotonic()
        srv.proc.send_signal(15)
        try:
            st = srv.proc.wait(timeout=60)
        except Exception:
            st = "hung"
        took = time.monotonic() - t
        diag("exit %.2f s after SIGTERM" % took)
        ok(st == 0 and took < BOUND,
           "SIGTERM under the floods: exit 0 within %d s (%s)" % (BOUND, st))
        stop.set()
        for s in socks:
            s.close()

    with Server("size=1G", COPIED, options=["--threads", "1"]) as srv:
        # 100 headers, then gone: their work is dropped, not done.
        gone = []
        for _ in range(4):
            s = hostile(srv)
            s.sendall(HDR * 100)
            s.shutdown(socket.SHUT_RDWR)
            s.close()
            gone.append(s)
        took = good_reads(srv)
        diag("100 reads after 4 clients left 100 queued 8 MiB reads each: %s s"
             % ("failed" if took is None else "%.2f" % took))
        ok(took is not None and took < BOUND,
           "the work queued by clients that left is dropped (%d s)" % BOUND)


main()
done_testing()
