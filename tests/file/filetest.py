"""Shared by the file store tests: a model checker, extents check, where
to put data files, and how many io_uring instances a process holds."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import ok, diag, skip_all, done_testing, Nbdkit  # noqa: E402,F401

try:
    import nbd
except ImportError:
    skip_all("python3-libnbd is not installed")


def data_dir():
    """A fresh directory on the build's file system (not tmpfs: O_DIRECT)."""
    base = os.environ.get("SECT4K_BUILD") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "build")
    os.makedirs(base, exist_ok=True)
    return tempfile.mkdtemp(prefix="file-test.", dir=base)


def connect(uri, strict=True):
    h = nbd.NBD()
    h.add_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
    if not strict:
        h.set_strict_mode(h.get_strict_mode() & ~nbd.STRICT_ALIGN)
    h.connect_uri(uri)
    return h


def uring_fds(pid):
    """io_uring instances open in process pid."""
    n = 0
    d = "/proc/%d/fd" % pid
    for fd in os.listdir(d):
        try:
            n += "io_uring" in os.readlink(os.path.join(d, fd))
        except OSError:
            pass
    return n


def boundary(off, size, P, A):
    return off == 0 or off == size or (off >= A and (off - A) % P == 0)


def random_ops(h, model, size, L, P, A, rng, n):
    """n random ops (L-aligned) checked against model; returns mismatches."""
    bad = 0
    for _ in range(n):
        length = min(rng.randrange(1, 3 * P // L + 1) * L, size, 1 << 20)
        off = rng.randrange(0, (size - length) // L + 1) * L
        kind = rng.random()
        if kind < 0.45:
            data = rng.randbytes(length)
            h.pwrite(data, off, nbd.CMD_FLAG_FUA if rng.random() < 0.2 else 0)
            model[off:off + length] = data
        elif kind < 0.6:
            h.zero(length, off, 0 if rng.random() < 0.5 else nbd.CMD_FLAG_NO_HOLE)
            model[off:off + length] = bytes(length)
        elif kind < 0.7:
            h.trim(length, off)
            s, e = off, off + length
            while s < e and not boundary(s, size, P, A):
                s += L
            while e > s and not boundary(e, size, P, A):
                e -= L
            model[s:e] = bytes(e - s)
        else:
            if h.pread(length, off) != model[off:off + length]:
                bad += 1
                if bad == 1:
                    diag("read at %d length %d differs" % (off, length))
    return bad


def check_extents(h, model, size, L):
    """None if extents cover the device at logical granularity and holes
    read as zeroes, else what is wrong."""
    runs = []

    def cb(metacontext, offset, entries, err):
        for i in range(0, len(entries), 2):
            runs.append((entries[i], entries[i + 1]))
        return 0
    off = 0
    while off < size:
        runs.clear()
        h.block_status(size - off, off, cb)
        for length, flags in runs:
            if length % L and off + length != size:
                return "extent length %d at %d not a multiple of %d" % (length, off, L)
            if flags & nbd.STATE_ZERO and any(model[off:off + length]):
                return "extent at %d marked zero holds data" % off
            off += length
    return None


def read_all(h, size):
    out = bytearray()
    while len(out) < size:
        n = min(size - len(out), 8 << 20)
        out += h.pread(n, len(out))
    return out
