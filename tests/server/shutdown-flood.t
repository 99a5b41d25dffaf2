#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""SIGTERM under a flood: a raw client pipelines 4 KiB reads and writes
without pause and goes on sending after ESHUTDOWN (the spec says it
must disconnect).  It does not hold the server up for its whole 5 s
grace (the old server waited all of it): every request the client had
handed to its socket before the signal gets a complete reply (success
or ESHUTDOWN), then the connection ends, and the server exits 0 within
BOUND seconds.  Over a Unix socket and over TCP.  And a client that
reads its replies only a second after the signal (the server's output
backs up, so what it sent before stays unread in the socket) still gets
a reply to each request it had sent."""
import os
import signal
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import ok, diag, done_testing  # noqa: E402
import srvlib  # noqa: E402
from srvlib import Server, greet, go  # noqa: E402

srvlib.need_server()

BOUND = 2.5         # seconds from the signal to the exit; the grace is 5
LEN = 4096
ESHUTDOWN = 108
PAYLOAD = b"f" * LEN


def ended(how):
    """The stream ended after whole replies: end of file, or a reset with
    nothing partial left over (a peer closing a socket it has unread
    bytes in resets it, and these clients go on sending)."""
    return how in ("end of file",
                   "[Errno 104] Connection reset by peer (0 bytes unparsed)")


def is_read(cookie, writes):
    """With writes, even cookies read and odd ones write; else all read."""
    return not writes or cookie % 2 == 0


def header(cookie, writes):
    """A request of 4 KiB of its own."""
    typ = 0 if is_read(cookie, writes) else 1
    return struct.pack(">IHHQQI", 0x25609513, 0, typ, cookie,
                       (cookie % 4096) * LEN, LEN) + (PAYLOAD if typ else b"")


class Flood:
    """A sender thread that never pauses, and a reader thread that
    parses every reply (a read's data follows a success), from the
    start or once read_now is set."""

    def __init__(self, srv, writes=True, read_now=None):
        self.s = srv.connect_raw()
        self.s.settimeout(None)
        greet(self.s)
        go(self.s)
        self.writes = writes
        self.read_now = read_now
        self.sent = 0               # requests handed to the socket
        self.replies = {}           # cookie -> error
        self.end = None             # how the reply stream ended
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=f, daemon=True)
                        for f in (self.send, self.read)]
        for t in self.threads:
            t.start()

    def send(self):
        n = 0
        try:
            while not self.stop.is_set():
                self.s.sendall(b"".join(header(n + i, self.writes)
                                        for i in range(16)))
                n += 16
                self.sent = n
        except OSError:
            pass

    def read(self):
        buf, at = bytearray(), 0
        if self.read_now:
            self.read_now.wait()
        try:
            while True:
                b = self.s.recv(1 << 20)
                if not b:
                    self.end = "end of file"
                    break
                buf += b
                while len(buf) - at >= 16:
                    magic, err, cookie = struct.unpack_from(">IIQ", buf, at)
                    if magic != 0x67446698:
                        self.end = "bad reply magic %#x" % magic
                        return
                    data = is_read(cookie, self.writes) and err == 0
                    size = 16 + (LEN if data else 0)
                    if len(buf) - at < size:
                        break
                    self.replies[cookie] = err
                    at += size
                del buf[:at]
                at = 0
            if buf:
                self.end = "%d bytes of a partial reply, then end of file" \
                    % len(buf)
        except OSError as e:
            self.end = "%s (%d bytes unparsed)" % (e, len(buf) - at)

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(30)
        self.s.close()


def run(tcp):
    name = "TCP" if tcp else "Unix socket"
    with Server("size=64M", "model=512e", tcp=tcp) as srv:
        floods = [Flood(srv) for _ in range(2)]
        time.sleep(0.5)
        before = [f.sent for f in floods]
        t = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        try:
            st = srv.proc.wait(timeout=30)
        except Exception:
            st = "hung"
        took = time.monotonic() - t
        for f in floods:
            f.finish()
        diag("%s: exit %.2f s after SIGTERM; %s requests sent before it" %
             (name, took, before))
        ok(st == 0 and took < BOUND,
           "%s: SIGTERM under 2 floods: exit 0 within %.1f s, not the 5 s "
           "grace (%s, %.2f s)" % (name, BOUND, st, took))
        for i, f in enumerate(floods):
            missing = [c for c in range(before[i]) if c not in f.replies]
            wrong = {c: e for c, e in f.replies.items()
                     if e not in (0, ESHUTDOWN)}
            errs = list(f.replies.values())
            ok(before[i] > 0 and not missing and not wrong and ended(f.end),
               "%s, flood %d: each of the %d requests sent before the signal "
               "got a complete reply (%d successes, %d ESHUTDOWN in all), "
               "then the end (missing %s, wrong %s, stream: %s)"
               % (name, i, before[i], errs.count(0), errs.count(ESHUTDOWN),
                  missing[:5], list(wrong.items())[:5], f.end))
        if st != 0:
            diag(srv.log())


def late_reader():
    """Reads whose replies the client leaves unread at first: the
    server's output backs up, it stops parsing, and requests the client
    had sent wait in the socket through the signal.  They are read and
    answered once the client reads its replies a second later."""
    with Server("size=64M", "model=512e") as srv:
        read_now = threading.Event()
        f = Flood(srv, writes=False, read_now=read_now)
        time.sleep(0.5)
        before = f.sent
        srv.proc.send_signal(signal.SIGTERM)
        time.sleep(1)
        read_now.set()
        try:
            st = srv.proc.wait(timeout=30)
        except Exception:
            st = "hung"
        f.finish()
        missing = [c for c in range(before) if c not in f.replies]
        errs = list(f.replies.values())
        ok(st == 0 and before > 0 and not missing and
           set(errs) <= {0, ESHUTDOWN} and ended(f.end),
           "replies read 1 s after the signal: each of the %d requests sent "
           "before it got one (%d successes, %d ESHUTDOWN; missing %s; "
           "stream: %s; exit %s)" % (before, errs.count(0),
                                     errs.count(ESHUTDOWN), missing[:5],
                                     f.end, st))


run(tcp=False)
run(tcp=True)
late_reader()
done_testing()
