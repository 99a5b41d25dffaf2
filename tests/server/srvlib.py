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
    """sect4k-server on a Unix socket (or TCP with tcp=True)."""

    def __init__(self, *args, options=(), tcp=False, wait=True):
        self.dir = tempfile.mkdtemp(prefix="sect4k-srv.")
        sizes = [a[5:] for a in args if a.startswith("size=")]
        if STORE == "file" and sizes and \
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
