# SPDX-License-Identifier: BSD-3-Clause
"""sect4k-server for the Python tests: a Server context manager with the
same interface as tap.Nbdkit (uri, proc, log(), stop()), plus raw-socket
helpers for tests that must speak broken NBD."""
import os
import shlex
import socket
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import skip_all, sanitizer_env, ServerProcess  # noqa: E402,F401

SERVER = os.environ.get("SECT4K_SERVER") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "sect4k-server")


def front_ends():
    """(name, make, plugin) for the nbdkit plugin and sect4k-server, in
    that order: make(*keys) serves them (a context manager); the server
    is skipped with one ok line when it is not built."""
    from tap import Nbdkit, ok
    yield "nbdkit", lambda *a: Nbdkit(*a), True
    if os.access(SERVER, os.X_OK):
        yield "sect4k-server", lambda *a: Server(*a), False
    else:
        ok(True, "# skip sect4k-server is not built")


def need_server():
    if not os.access(SERVER, os.X_OK):
        skip_all("%s is not built" % SERVER)


def san_env():
    """A sanitizer build of the server links its runtime itself; only the
    options matter (LD_PRELOAD would also hit the tools it runs)."""
    san = os.environ.get("SECT4K_SAN", "")
    if san == "asan":
        return {"ASAN_OPTIONS": "abort_on_error=1:halt_on_error=1",
                "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1"}
    if san == "tsan":
        return {"TSAN_OPTIONS": "halt_on_error=1:exitcode=66"}
    return {}


# SECT4K_STORE=file runs a test's servers on the file store (a temporary
# file of the size= asked for) instead of memory: the same checks then go
# through the event loop's ring.
STORE = os.environ.get("SECT4K_STORE", "memory")


def parse_size(v):
    """size= as the tests write it: digits with an optional k, M or G."""
    digits = v.rstrip("kMG")
    return int(digits) << {"": 0, "k": 10, "M": 20, "G": 30}[v[len(digits):]]


class Server(ServerProcess):
    """sect4k-server on a Unix socket (or TCP with tcp=True); with
    file_store=True (or SECT4K_STORE=file) and no file=, on a file of the
    size= asked for in its own directory."""

    def __init__(self, *args, options=(), tcp=False, wait=True,
                 file_store=False):
        self.dir = tempfile.mkdtemp(prefix="sect4k-srv.")
        sizes = [a[5:] for a in args if a.startswith("size=")]
        if (file_store or STORE == "file") and sizes and \
                not any(a.startswith("file=") for a in args):
            img = os.path.join(self.dir, "disk.img")
            with open(img, "wb") as f:          # -r needs it to exist
                f.truncate(parse_size(sizes[-1]))
            args += ("file=" + img,)
        self.sock = os.path.join(self.dir, "sock")
        self.logfile = os.path.join(self.dir, "log")
        self._log = ""
        if tcp:
            self.port = free_port()
            where = ["--listen", "127.0.0.1:%d" % self.port]
            self.uri = "nbd://127.0.0.1:%d/" % self.port
        else:
            where = ["--unix", self.sock]
            self.uri = "nbd+unix:///?socket=" + self.sock
        cmd = [SERVER] + where + list(options) + list(args)
        self.cmd = " ".join(shlex.quote(c) for c in cmd)
        self.proc = subprocess.Popen(cmd, env=dict(os.environ, **san_env()),
                                     stdout=open(self.logfile, "w"),
                                     stderr=subprocess.STDOUT)
        if not wait:
            return
        for _ in range(200):
            if self.proc.poll() is not None:
                break
            if "serving " in self.log():
                return
            time.sleep(0.05)
        raise RuntimeError("sect4k-server did not start: %s\n%s"
                           % (self.cmd, self.log()))

    def connect_raw(self):
        """A plain socket to the server."""
        if self.uri.startswith("nbd://"):
            s = socket.create_connection(("127.0.0.1", self.port))
        else:
            s = socket.socket(socket.AF_UNIX)
            s.connect(self.sock)
        s.settimeout(20)
        return s


# The flush tests' device: dirtying all of it (FLUSH_CHUNK at a time)
# makes its flush, an fdatasync, take a while.
FLUSH_SIZE = 128 << 20
FLUSH_CHUNK = 4 << 20


def flush_server():
    """sect4k-server on a file store of FLUSH_SIZE bytes, with one loop
    thread: for the tests where a flush of many dirty pages overlaps
    other requests.  Skips the whole test when the file store runs
    without io_uring here."""
    srv = Server("size=%d" % FLUSH_SIZE, "model=512e", file_store=True,
                 options=["--threads", "1"])
    if "io_uring" not in srv.log():
        log = srv.log().strip()
        srv.__exit__()
        skip_all("the file store runs without io_uring here: %s" % log)
    return srv


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# ---- raw NBD ---------------------------------------------------------------

IHAVEOPT = 0x49484156454F5054
REP_MAGIC = 0x3e889045565a9


def recv_exact(s, n):
    b = b""
    while len(b) < n:
        chunk = s.recv(n - len(b))
        if not chunk:
            raise EOFError("connection closed after %d of %d bytes" % (len(b), n))
        b += chunk
    return b


def greet(s, flags=3):
    """Reads the greeting, sends client flags; returns handshake flags."""
    magic, opt, hflags = struct.unpack(">QQH", recv_exact(s, 18))
    assert magic == 0x4e42444d41474943 and opt == IHAVEOPT
    s.sendall(struct.pack(">I", flags))
    return hflags


def send_opt(s, opt, data=b""):
    s.sendall(struct.pack(">QII", IHAVEOPT, opt, len(data)) + data)


def recv_opt_reply(s):
    magic, opt, typ, length = struct.unpack(">QIII", recv_exact(s, 20))
    assert magic == REP_MAGIC, hex(magic)
    return opt, typ, recv_exact(s, length)


def go(s, name=b"", infos=(3,), opt=7):
    """NBD_OPT_GO (or INFO); returns the list of (type, data) replies."""
    data = struct.pack(">I", len(name)) + name + struct.pack(">H", len(infos))
    data += b"".join(struct.pack(">H", i) for i in infos)
    send_opt(s, opt, data)
    replies = []
    while True:
        o, typ, d = recv_opt_reply(s)
        replies.append((typ, d))
        if typ != 3:
            return replies


def request(s, typ, offset=0, length=0, flags=0, cookie=1, payload=b""):
    s.sendall(struct.pack(">IHHQQI", 0x25609513, flags, typ, cookie, offset,
                          length) + payload)


def closed(s, timeout=5):
    """True if the server closes the connection (EOF or reset) in time."""
    s.settimeout(timeout)
    try:
        while True:
            if not s.recv(65536):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def dirty(h, size=FLUSH_SIZE, chunk=FLUSH_CHUNK):
    """Writes size bytes through h, chunk at a time: dirty pages in the
    file store's page cache, not yet on disk."""
    import nbd
    buf = nbd.Buffer.from_bytearray(bytearray(os.urandom(chunk)))
    for off in range(0, size, chunk):
        h.aio_pwrite(buf, off)
        while h.aio_in_flight() >= 8:
            h.poll(-1)
    while h.aio_in_flight():
        h.poll(-1)


def wait_any(handles, timeout):
    """Waits up to timeout seconds for any handle's socket, then lets
    every ready one (in the order given) read or write."""
    import nbd
    import select
    fds = {h.aio_get_fd(): h for h in handles}
    rd = [fd for fd, h in fds.items()
          if h.aio_get_direction() & nbd.AIO_DIRECTION_READ]
    wr = [fd for fd, h in fds.items()
          if h.aio_get_direction() & nbd.AIO_DIRECTION_WRITE]
    r, w, _ = select.select(rd, wr, [], timeout)
    for h in handles:
        fd = h.aio_get_fd()
        if fd in r:
            h.aio_notify_read()
        if fd in w:
            h.aio_notify_write()


def serves(srv, within=0):
    """A new client gets through the handshake and a 512-byte read, at
    once or, trying again, within that many seconds (connections the
    clients have seen closed count against --max-connections until the
    server has freed them)."""
    deadline = time.monotonic() + within
    while True:
        s = srv.connect_raw()
        try:
            greet(s)
            if go(s)[-1][0] == 1:
                request(s, 0, 0, 512, cookie=77)
                magic, err, cookie = struct.unpack(">IIQ", recv_exact(s, 16))
                if err == 0 and cookie == 77 and \
                        len(recv_exact(s, 512)) == 512:
                    return True
        except (OSError, EOFError, AssertionError):
            pass
        finally:
            s.close()
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def check_reads_during_flush(writer, reader, name, size=FLUSH_SIZE,
                             chunk=FLUSH_CHUNK):
    """The non-blocking proof: writer dirties size bytes and flushes them
    (an fdatasync that takes a while); reader's 4 KiB reads, sent after
    the flush, must be answered while it is still pending.  A server that
    waited for the disk would answer them only after the flush.  Skips
    (rather than passes) when the flush is too quick to tell."""
    import nbd
    from tap import ok, skip, diag
    dirty(writer, size, chunk)
    lat = []                    # what a read takes when nothing is in the way
    for i in range(20):
        t = time.monotonic()
        reader.pread(4096, i * 4096)
        lat.append(time.monotonic() - t)
    read_time = max(lat)
    handles = [writer] if reader is writer else [writer, reader]

    flush = writer.aio_flush()
    t_flush = time.monotonic()
    time.sleep(0.01)            # let the server start the fdatasync
    during, t_first, flushed = 0, None, None
    rbuf = nbd.Buffer(4096)
    deadline = time.monotonic() + 60
    while flushed is None and time.monotonic() < deadline:
        rc = reader.aio_pread(rbuf, (during % 1000) * 4096)
        if t_first is None:
            t_first = time.monotonic()
        while flushed is None and not reader.aio_command_completed(rc):
            wait_any(handles, 1)
            # Checked after the read: a tie counts for the flush.
            if writer.aio_command_completed(flush):
                flushed = time.monotonic()
        if flushed is None:
            during += 1
    while reader.aio_in_flight() or writer.aio_in_flight():
        wait_any(handles, 1)
    diag("flush of %d MiB: %.0f ms; %d reads answered meanwhile (an idle "
         "read takes at most %.2f ms)"
         % (size >> 20, ((flushed or time.monotonic()) - t_flush) * 1000,
            during, read_time * 1000))
    if during:
        ok(True, name)
    elif flushed is None:
        ok(False, "%s: the flush did not finish within 60 s" % name)
    elif flushed - t_first < 5 * read_time + 0.005:
        skip(name, "the flush ended %.1f ms after the first read: the "
             "storage is too fast to tell" % ((flushed - t_first) * 1000))
    else:
        ok(False, "%s (the first read waited %.0f ms, until the flush ended)"
           % (name, (flushed - t_first) * 1000))
