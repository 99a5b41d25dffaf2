# SPDX-License-Identifier: BSD-3-Clause
"""The NBD error codes a client gets, the same from both front ends (the
plugin under nbdkit, tests/plugin/errors.t, and sect4k-server,
tests/server/errors.t), through libnbd with its strict mode off so that
it sends what the server must refuse.  The NBD spec (doc/proto.md, "Error
values" and "Block size constraints"): past the end, ENOSPC for writes
and zeroes, EINVAL for reads and trims; over the maximum, EINVAL
(EOVERFLOW is for DF reads only)."""
import os
import socket
import struct
import tempfile

from tap import ok, diag

MiB = 1 << 20
SIZE = 64 * MiB
KEYS = ("size=64M", "model=512e", "max-request=1M")


def errno_of(nbd, fn):
    """Runs fn; returns the errno of the nbd.Error it raises, or 0."""
    try:
        fn()
        return 0
    except nbd.Error as e:
        return e.errnum or -1


def lax(nbd, uri):
    """A libnbd handle that sends whatever it is asked to."""
    h = nbd.NBD()
    h.add_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
    h.set_strict_mode(0)
    h.connect_uri(uri)
    return h


def raw_read(sock, length, offset=0):
    """A read of length bytes over a fresh raw connection (NBD_OPT_GO,
    simple replies): returns the error of its reply."""
    s = socket.socket(socket.AF_UNIX)
    s.connect(sock)
    s.settimeout(20)

    def recv(n):
        b = b""
        while len(b) < n:
            c = s.recv(n - len(b))
            if not c:
                raise EOFError("closed")
            b += c
        return b
    try:
        recv(18)
        s.sendall(struct.pack(">I", 3))
        go = struct.pack(">IH", 0, 0)
        s.sendall(struct.pack(">QII", 0x49484156454F5054, 7, len(go)) + go)
        while True:
            _, _, typ, n = struct.unpack(">QIII", recv(20))
            recv(n)
            if typ != 3:
                break
        s.sendall(struct.pack(">IHHQQI", 0x25609513, 0, 0, 1, offset, length))
        magic, err, cookie = struct.unpack(">IIQ", recv(16))
        return err
    except (OSError, EOFError):
        return -1
    finally:
        s.close()


def check(nbd, start, name):
    """start(*keys) starts a server (a context manager with uri and sock)
    of the front end called name."""
    tmp = tempfile.mkdtemp(prefix="sect4k-err.")
    img = os.path.join(tmp, "disk.img")
    with open(img, "wb") as f:
        f.truncate(SIZE)
    for store, extra in (("memory", ()), ("file", ("file=" + img,))):
        at = "%s, %s store" % (name, store)
        with start(*(KEYS + extra)) as srv:
            h = lax(nbd, srv.uri)
            data = os.urandom(8192)
            e = errno_of(nbd, lambda: h.pwrite(bytes(32 * MiB + 4096), 0))
            ok(e == 22, "%s: a write of 32 MiB + 4 KiB (max-request 1M): "
               "EINVAL (%d)" % (at, e))
            h.pwrite(data, 4096)
            ok(h.pread(8192, 4096) == data,
               "%s: ... and the connection goes on" % at)
            e = errno_of(nbd, lambda: h.pread(2 * MiB, 0))
            ok(e == 22, "%s: a read over the maximum: EINVAL (%d)" % (at, e))
            e = errno_of(nbd, lambda: h.pwrite(bytes(2 * MiB), 0))
            ok(e == 22, "%s: a write over the maximum: EINVAL (%d)" % (at, e))
            e = errno_of(nbd, lambda: h.pread(4096, SIZE - 512))
            ok(e == 22, "%s: a read past the end: EINVAL (%d)" % (at, e))
            e = errno_of(nbd, lambda: h.pwrite(bytes(4096), SIZE - 512))
            ok(e == 28, "%s: a write past the end: ENOSPC (%d)" % (at, e))
            e = errno_of(nbd, lambda: h.zero(4096, SIZE - 512))
            ok(e == 28, "%s: a write zeroes past the end: ENOSPC (%d)"
               % (at, e))
            e = errno_of(nbd, lambda: h.trim(4096, SIZE - 512))
            ok(e == 22, "%s: a trim past the end: EINVAL (%d)" % (at, e))
            e = errno_of(nbd, lambda: h.pread_structured(
                0, SIZE + 4096, lambda *a: 0))
            ok(e == 22, "%s: a structured read of 0 bytes past the end: "
               "EINVAL (%d)" % (at, e))
            ok(h.pread(8192, 4096) == data,
               "%s: the connection still serves after the errors" % at)
            h.shutdown()
        # strict=false serves reads and writes over the advertised maximum
        # up to 64 MiB (nbdkit's own limit) in both front ends.
        with start(*(KEYS + extra + ("strict=false",))) as srv:
            h = lax(nbd, srv.uri)
            big = os.urandom(2 * MiB)
            e = errno_of(nbd, lambda: h.pwrite(big, 4 * MiB))
            ok(e == 0 and h.pread(2 * MiB, 4 * MiB) == big,
               "%s, strict=false: a read and a write over the maximum are "
               "served (%d)" % (at, e))
            e = errno_of(nbd, lambda: h.pwrite(bytes(64 * MiB), 0))
            ok(e == 0, "%s, strict=false: a write of 64 MiB is served (%d)"
               % (at, e))
            h.shutdown()
            e = raw_read(srv.sock, 64 * MiB + 4096)
            ok(e == 22, "%s, strict=false: a read over 64 MiB: EINVAL (%d)"
               % (at, e))
            if e != 22:
                diag(srv.log())
    os.unlink(img)
    os.rmdir(tmp)
