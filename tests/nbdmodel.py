# SPDX-License-Identifier: BSD-3-Clause
"""What the Python client tests share: a libnbd connection, the geometry
contract written the plain way, random requests checked against a
byte-array model, and extents checks."""
import nbd

from tap import diag


def connect(uri, strict=True):
    h = nbd.NBD()
    h.add_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
    if not strict:
        h.set_strict_mode(h.get_strict_mode() & ~nbd.STRICT_ALIGN)
    h.connect_uri(uri)
    return h


def boundary(off, size, P, A):
    return off == 0 or off == size or (off >= A and (off - A) % P == 0)


def sector_start(off, P, A):
    return 0 if off < A else A + (off - A) // P * P


def sector_end(off, size, P, A):
    e = A if off < A else sector_start(off, P, A) + P
    return min(e, size)


def random_ops(h, model, size, L, P, A, rng, n, unit=None):
    """n random ops checked against model (offsets and lengths multiples of
    unit, by default L); returns how many reads differed."""
    unit = unit or L
    bad = 0
    for _ in range(n):
        length = rng.randrange(1, 3 * P // unit + 1) * unit
        length = min(length, size, 1 << 20)
        off = rng.randrange(0, (size - length) // unit + 1) * unit
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
            s = off if boundary(off, size, P, A) else sector_end(off, size, P, A)
            e = off + length
            if not boundary(e, size, P, A):
                e = sector_start(e, P, A)
            if s < e:
                model[s:e] = bytes(e - s)
        else:
            got = h.pread(length, off)
            if got != model[off:off + length]:
                bad += 1
                if bad == 1:
                    diag("read at %d length %d differs" % (off, length))
    return bad


def read_all(h, size):
    """The whole device, in requests no longer than the advertised maximum."""
    step = h.get_block_size(nbd.SIZE_MAXIMUM)
    return b"".join(h.pread(min(step, size - off), off) for off in range(0, size, step))


def check_extents(h, model, size, L):
    """Extents cover the device at logical granularity; holes read as zero."""
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
