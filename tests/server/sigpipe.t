#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""SIGPIPE is ignored: with standard error a pipe whose reader has gone,
the next log line (a misaligned request is enough) fails to be written
instead of killing the server, which goes on serving."""
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import ok, diag, done_testing, need_nbd  # noqa: E402
import srvlib  # noqa: E402

nbd = need_nbd()
srvlib.need_server()


def main():
    tmp = tempfile.mkdtemp(prefix="sect4k-pipe.")
    sock = os.path.join(tmp, "sock")
    uri = "nbd+unix:///?socket=" + sock
    r, w = os.pipe()
    proc = subprocess.Popen([srvlib.SERVER, "--unix", sock, "size=16M"],
                            env=dict(os.environ, **srvlib.san_env()),
                            stdout=subprocess.DEVNULL, stderr=w)
    os.close(w)
    started = b""
    with os.fdopen(r, "rb") as f:
        while b"serving " not in started:
            line = f.readline()
            if not line:
                break
            started += line
    # The reader is gone: the server's next line meets a broken pipe.
    ok(b"serving " in started, "the server started")
    h = nbd.NBD()
    h.set_strict_mode(0)
    h.connect_uri(uri)
    try:
        h.pread(100, 1)
        refused = False
    except nbd.Error as e:
        refused = e.errnum == 22
    ok(refused, "a misaligned read is refused (and logged, to the dead pipe)")
    try:
        h.shutdown()
    except nbd.Error:
        pass
    time.sleep(0.2)
    ok(proc.poll() is None, "the server is still running (status %s)"
       % proc.poll())
    try:
        h = nbd.NBD()
        h.connect_uri(uri)
        served = h.pread(512, 0) == bytes(512)
        h.shutdown()
    except nbd.Error as e:
        diag(str(e))
        served = False
    ok(served, "... and serving a new client")
    if proc.poll() is None:
        proc.terminate()
    st = proc.wait(timeout=30)
    ok(st == 0, "it exits 0 on SIGTERM (%s)" % st)
    ok(not os.path.exists(sock), "its socket is removed")
    subprocess.run(["rm", "-rf", tmp])
    done_testing()


main()
