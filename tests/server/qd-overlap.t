#!/usr/bin/python3
"""Requests of ONE connection overlap with the file store: with file=
and one loop thread, a connection flushes ~128 MiB of dirty pages (an
fdatasync that takes a while) and small reads sent on the SAME
connection after the flush must be answered while the flush is still
pending.  A server with one request in flight per connection answers
them only after the flush."""
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import ok, skip, diag, skip_all, done_testing  # noqa: E402
import srvlib  # noqa: E402
from srvlib import Server  # noqa: E402

try:
    import nbd
except ImportError:
    skip_all("python3-libnbd is not installed")
srvlib.need_server()

SIZE = 128 << 20
CHUNK = 4 << 20

img_dir = tempfile.mkdtemp(prefix="sect4k-qd.")
with Server("size=%d" % SIZE, "model=512e",
            "file=" + os.path.join(img_dir, "disk.img"),
            options=["--threads", "1"]) as srv:
    if "io_uring" not in srv.log():
        skip_all("the file store runs without io_uring here: %s" % srv.log().strip())
    h = nbd.NBD()
    h.connect_uri(srv.uri)

    # Dirty the whole device: pages in the cache, not yet on disk.
    buf = nbd.Buffer.from_bytearray(bytearray(os.urandom(CHUNK)))
    for off in range(0, SIZE, CHUNK):
        h.aio_pwrite(buf, off)
        while h.aio_in_flight() >= 8:
            h.poll(-1)
    while h.aio_in_flight():
        h.poll(-1)

    # What a read takes when nothing is in the way.
    lat = []
    for i in range(20):
        t = time.monotonic()
        h.pread(4096, i * 4096)
        lat.append(time.monotonic() - t)
    read_time = max(lat)

    flush = h.aio_flush()
    t_flush = time.monotonic()
    during = 0
    t_first = None
    flushed = None
    rbuf = nbd.Buffer(4096)
    deadline = time.monotonic() + 60
    while flushed is None and time.monotonic() < deadline:
        rc = h.aio_pread(rbuf, (during % 1000) * 4096)
        if t_first is None:
            t_first = time.monotonic()
        while flushed is None and not h.aio_command_completed(rc):
            h.poll(1000)
            # Checked after the read: a tie (both replies in one poll)
            # counts for the flush.
            if h.aio_command_completed(flush):
                flushed = time.monotonic()
        if flushed is None:
            during += 1
    flush_ms = ((flushed or time.monotonic()) - t_flush) * 1000
    diag("flush of %d MiB: %.0f ms; %d reads on the same connection "
         "answered meanwhile (an idle read takes at most %.2f ms)"
         % (SIZE >> 20, flush_ms, during, read_time * 1000))
    if during:
        ok(True, "reads answered while a flush of the same connection was "
           "pending")
    elif flushed is None:
        ok(False, "the flush did not finish within 60 s")
    elif flushed - t_first < 5 * read_time + 0.005:
        skip("reads answered while a flush of the same connection was "
             "pending", "the flush ended %.1f ms after the first read: the "
             "storage is too fast to tell" % ((flushed - t_first) * 1000))
    else:
        ok(False, "reads answered while a flush of the same connection was "
           "pending (the first read waited %.0f ms, until the flush ended)"
           % ((flushed - t_first) * 1000))
    while h.aio_in_flight():
        h.poll(-1)
    h.shutdown()
    st = srv.stop()
    ok(st == 0, "server exited cleanly (%s)" % st)
    if st:
        diag(srv.log())
shutil.rmtree(img_dir)
done_testing()
