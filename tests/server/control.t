#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""The control socket (control=PATH) on both front ends (nbdkit plugin and
sect4k-server; the filter's startup check too): a second instance on a live path stops with one line and
the first keeps it; a stale socket is replaced and said so; at exit the
path is removed only if it is still ours; clients are served at once (20
idle clients, a client that never reads, 100 at the same moment, more
idle clients than there are places); a line with a NUL or another
control byte is refused and changes nothing; with several exports a
default control= gives each its own socket."""
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import ok, diag, done_testing, Nbdkit, PLUGIN, need_nbd, sanitizer_env  # noqa: E402
from srvlib import Server, SERVER  # noqa: E402

nbd = need_nbd()
FILTER = os.environ.get("SECT4K_FILTER") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "sect4k-filter.so")


def ask(path, line, timeout=10):
    """Sends one line; returns (answer, seconds), answer up to and
    including its last line (ok or error), None if none came in time."""
    t0 = time.monotonic()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    got = b""
    try:
        s.connect(path)
        s.sendall(line)
        while True:
            lines = got.split(b"\n")[:-1]
            if any(l == b"ok" or l.startswith(b"error: ") for l in lines):
                return got.decode(errors="replace"), time.monotonic() - t0
            chunk = s.recv(65536)
            if not chunk:
                return None, time.monotonic() - t0
            got += chunk
    except OSError:
        return None, time.monotonic() - t0
    finally:
        s.close()


def idle_clients(path, n):
    """n connected clients that send nothing."""
    v = []
    for _ in range(n):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        v.append(s)
    return v


def second_instance(name, front, ctl):
    """The same front end started again on ctl: (exit status, output)."""
    d = tempfile.mkdtemp(prefix="sect4k-ctl2.")
    sock = os.path.join(d, "sock")
    if front == "nbdkit":
        cmd = ["nbdkit", "-f", "-U", sock, PLUGIN]
    else:
        cmd = [SERVER, "--unix", sock]
    cmd += ["size=1M", "control=" + ctl]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=20,
                           env=dict(os.environ, **sanitizer_env()))
        return p.returncode, p.stderr + p.stdout, os.path.exists(sock)
    except subprocess.TimeoutExpired:
        return None, "did not stop in 20 s", os.path.exists(sock)
    finally:
        subprocess.run(["rm", "-rf", d])


def takeover(name, front, make, d):
    ctl = os.path.join(d, "ctl")
    with make("size=1M", "model=512e", "control=" + ctl) as srv:
        st, out, sock = second_instance(name, front, ctl)
        ok(st == 1 and len(out.splitlines()) == 1 and
           "control=%s: a server is already listening there" % ctl in out
           and not sock,
           "%s: a second instance on a live control= path: exit 1, one "
           "line, no NBD socket (%s: %s)" % (name, st, out.strip()))
        ans, _ = ask(ctl, b"status\n")
        ok(ans is not None and "geometry=512e" in ans,
           "%s: ... and the first still answers status" % name)
        # Someone removes ours and another socket takes the path: ours
        # must not remove theirs at exit.
        os.unlink(ctl)
        other = socket.socket(socket.AF_UNIX)
        other.bind(ctl)
    ok(os.path.exists(ctl), "%s: a socket that replaced ours is left at "
       "exit" % name)
    other.close()
    # It is stale now (bound, nobody listens): the next one replaces it.
    with make("size=1M", "model=4kn", "control=" + ctl) as srv:
        ans, _ = ask(ctl, b"status\n")
        ok(ans is not None and "geometry=4kn" in ans,
           "%s: a stale socket is replaced" % name)
        log = srv.log()
        ok("control=%s: replacing a stale socket" % ctl in log,
           "%s: ... saying so" % name)
    ok(not os.path.exists(ctl), "%s: our own socket is removed at exit"
       % name)


def concurrency(name, srv, ctl):
    idle = idle_clients(ctl, 20)
    ans, secs = ask(ctl, b"status\n", timeout=5)
    ok(ans is not None and secs < 1,
       "%s: status answered in %.3f s while 20 idle clients are connected"
       % (name, secs))
    # A client that asks and never reads holds its own answer only.
    hog = socket.socket(socket.AF_UNIX)
    hog.connect(ctl)
    hog.setblocking(False)
    try:
        for _ in range(200):
            hog.send(b"stats\n" * 100)
    except BlockingIOError:
        pass
    ans, secs = ask(ctl, b"status\n", timeout=5)
    ok(ans is not None and secs < 1,
       "%s: ... and while a client that does not read has its socket full "
       "(%.3f s)" % (name, secs))
    hog.close()
    for s in idle:
        s.close()

    # 100 clients at the same moment, each connect, status, read, close.
    answers = [None] * 100
    go = threading.Barrier(100)

    def one(i):
        go.wait()
        answers[i] = ask(ctl, b"status\n", timeout=20)[0]
    ts = [threading.Thread(target=one, args=(i,)) for i in range(100)]
    t0 = time.monotonic()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    n = sum(1 for a in answers if a and a.endswith("ok\n"))
    ok(n == 100, "%s: 100 simultaneous status requests: %d answered "
       "(%.2f s)" % (name, n, time.monotonic() - t0))

    # 100 connected at once, then each sends: those past the 64 places
    # get theirs once answered ones have been idle for a second.
    socks = idle_clients(ctl, 100)
    t0 = time.monotonic()
    for s in socks:
        s.sendall(b"status\n")
    n = 0
    for s in socks:
        s.settimeout(10)
        got = b""
        try:
            while not got.endswith(b"ok\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                got += chunk
        except OSError:
            pass
        n += got.endswith(b"ok\n")             # open until the end
    ok(n == 100, "%s: 100 clients connected first, then each asks, none "
       "leaving: %d answered (%.2f s)" % (name, n, time.monotonic() - t0))
    for s in socks:
        s.close()

    # More idle clients than places (64): a new client still gets in, in
    # the place of one idle for a second.
    idle = idle_clients(ctl, 80)
    ans, secs = ask(ctl, b"status\n", timeout=10)
    ok(ans is not None and secs < 5,
       "%s: status answered in %.2f s with 80 idle clients connected"
       % (name, secs))
    for s in idle:
        s.close()


def control_bytes(name, srv, ctl):
    for line, what in ((b"bad add 5\0junk\n", "a NUL"),
                       (b"bad add 5\x1b[2J\n", "an escape"),
                       (b"bad\tadd 6\n", "a tab"),
                       (b"bad add 7\rx\n", "a CR inside the line")):
        ans, _ = ask(ctl, line)
        ok(ans is not None and ans.startswith("error: control byte") and
           ans.count("\n") == 1,
           "%s: %s in a command is refused: %r" % (name, what, ans))
    ans, _ = ask(ctl, b"bad list\r\n")
    ok(ans == "ok\n", "%s: nothing was marked bad (bad list, ended by "
       "CR LF: %r)" % (name, ans))
    h = nbd.NBD()
    h.connect_uri(srv.uri)
    try:
        data = h.pread(8 * 512, 0)
        ok(data == bytes(8 * 512), "%s: LBAs 0-7 read" % name)
    except nbd.Error as e:
        ok(False, "%s: LBAs 0-7 read: %s" % (name, e))
    h.shutdown()


def exports(name, make, d):
    ctl = os.path.join(d, "ctl")
    with make("size=1M", "exports=512n,4kn", "control=" + ctl) as srv:
        a, _ = ask(ctl + ".512n", b"status\n")
        b, _ = ask(ctl + ".4kn", b"status\n")
        ok(a and "geometry=512n" in a and b and "geometry=4kn" in b and
           not os.path.exists(ctl),
           "%s: exports=512n,4kn control=ctl: ctl.512n and ctl.4kn, each "
           "its export's" % name)


def filter_takeover(d):
    """The filter makes its device (and control socket) at the first
    connection, but refuses a live control= path at startup."""
    if not os.path.exists(FILTER):
        ok(True, "# skip the filter is not built")
        return
    ctl = os.path.join(d, "ctl")
    with Nbdkit("1M", "model=512e", "control=" + ctl,
                options=["--filter=" + FILTER], plugin="memory") as srv:
        h = nbd.NBD()
        h.connect_uri(srv.uri)                  # makes the device
        ans, _ = ask(ctl, b"status\n")
        sock = os.path.join(d, "sock2")
        p = subprocess.run(["nbdkit", "-f", "-U", sock, "--filter=" + FILTER,
                            "memory", "1M", "control=" + ctl],
                           capture_output=True, text=True, timeout=20,
                           env=dict(os.environ, **sanitizer_env()))
        out = p.stderr + p.stdout
        ok(p.returncode == 1 and len(out.splitlines()) == 1 and
           "a server is already listening there" in out,
           "filter: a second instance on a live control= path: exit 1, one "
           "line (%d: %s)" % (p.returncode, out.strip()))
        ans2, _ = ask(ctl, b"status\n")
        ok(ans and "geometry=512e" in ans and ans == ans2,
           "filter: ... and the first still answers status")
        h.shutdown()


def main():
    for name, make in (("nbdkit", lambda *a: Nbdkit(*a)),
                       ("sect4k-server", lambda *a: Server(*a))):
        if name == "sect4k-server" and not os.access(SERVER, os.X_OK):
            ok(True, "# skip sect4k-server is not built")
            continue
        d = tempfile.mkdtemp(prefix="sect4k-control.")
        try:
            takeover(name, name, make, d)
            ctl = os.path.join(d, "ctl")
            with make("size=1M", "model=512e", "control=" + ctl) as srv:
                concurrency(name, srv, ctl)
                control_bytes(name, srv, ctl)
            exports(name, make, d)
        except Exception as e:  # one front end failing still reports
            ok(False, "%s: %s" % (name, e))
        subprocess.run(["rm", "-rf", d])
    d = tempfile.mkdtemp(prefix="sect4k-control.")
    filter_takeover(d)
    subprocess.run(["rm", "-rf", d])
    done_testing()


main()
