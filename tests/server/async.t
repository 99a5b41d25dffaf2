#!/usr/bin/python3
"""A slow flush on one connection does not stall the others of its event
loop: with file= and one loop thread, connection A flushes ~128 MiB of
dirty pages (an fdatasync that takes a while) and connection B's small
reads must be answered while A's flush is still pending.  A server that
ran the engine inline would answer B only after the fdatasync."""
import os
import select
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import ok, skip, diag, skip_all, done_testing, need_nbd  # noqa: E402
import srvlib  # noqa: E402
from srvlib import Server  # noqa: E402

nbd = need_nbd()
srvlib.need_server()

SIZE = 128 << 20
CHUNK = 4 << 20


def wait_any(handles, timeout):
    """Waits up to timeout seconds for any handle's socket, then lets
    every ready one (in the order given) read or write."""
    fds = {h.aio_get_fd(): h for h in handles}
    rd = [fd for fd, h in fds.items() if h.aio_get_direction() & nbd.AIO_DIRECTION_READ]
    wr = [fd for fd, h in fds.items() if h.aio_get_direction() & nbd.AIO_DIRECTION_WRITE]
    r, w, _ = select.select(rd, wr, [], timeout)
    for h in handles:
        fd = h.aio_get_fd()
        if fd in r:
            h.aio_notify_read()
        if fd in w:
            h.aio_notify_write()


img_dir = tempfile.mkdtemp(prefix="sect4k-async.")
with Server("size=%d" % SIZE, "model=512e",
            "file=" + os.path.join(img_dir, "disk.img"),
            options=["--threads", "1"]) as srv:
    if "io_uring" not in srv.log():
        skip_all("the file store runs without io_uring here: %s" % srv.log().strip())
    a, b = nbd.NBD(), nbd.NBD()
    a.connect_uri(srv.uri)
    b.connect_uri(srv.uri)

    buf = nbd.Buffer.from_bytearray(bytearray(os.urandom(CHUNK)))

    def dirty():
        """A writes the whole device: dirty pages, not yet on disk."""
        for off in range(0, SIZE, CHUNK):
            a.aio_pwrite(buf, off)
            while a.aio_in_flight() >= 8:
                a.poll(-1)
        while a.aio_in_flight():
            a.poll(-1)

    dirty()

    # What a read takes when nothing is in the way.
    lat = []
    for i in range(20):
        t = time.monotonic()
        b.pread(4096, i * 4096)
        lat.append(time.monotonic() - t)
    read_time = max(lat)

    cookie = a.aio_flush()
    t_flush = time.monotonic()
    time.sleep(0.01)            # let the server start the fdatasync
    during = 0
    t_first = None
    flushed = None
    rbuf = nbd.Buffer(4096)
    deadline = time.monotonic() + 60
    while flushed is None and time.monotonic() < deadline:
        rc = b.aio_pread(rbuf, (during % 1000) * 4096)
        if t_first is None:
            t_first = time.monotonic()
        while flushed is None and not b.aio_command_completed(rc):
            wait_any([a, b], 1)             # A first: a tie counts for A
            if a.aio_command_completed(cookie):
                flushed = time.monotonic()
        if flushed is None:
            during += 1
    flush_ms = ((flushed or time.monotonic()) - t_flush) * 1000
    diag("flush of %d MiB: %.0f ms; %d reads of B answered meanwhile "
         "(an idle read takes at most %.2f ms)"
         % (SIZE >> 20, flush_ms, during, read_time * 1000))
    if during:
        ok(True, "B's reads were answered while A's flush was pending")
    elif flushed is None:
        ok(False, "A's flush did not finish within 60 s")
    elif flushed - t_first < 5 * read_time + 0.005:
        skip("B's reads answered while A's flush was pending",
             "the flush ended %.1f ms after B's first read: the storage is "
             "too fast to tell" % ((flushed - t_first) * 1000))
    else:
        ok(False, "B's reads were answered while A's flush was pending "
           "(B's first read waited %.0f ms, until the flush ended)"
           % ((flushed - t_first) * 1000))
    b.shutdown()

    # SIGTERM while A's flush is in flight: the flush finishes, its reply
    # is sent, then the server exits.
    dirty()
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
shutil.rmtree(img_dir)
done_testing()
