# SPDX-License-Identifier: BSD-3-Clause
"""The write log's format (docs/write-log.md, dm-log-writes' on-disk
layout) for the tests: a writer that makes the small logs the oracle and
the bad-input tests need, byte for byte what lib/wlog.c writes, and a
reader for the oracle.  The real logs come from write-log=."""
import struct

MAGIC = 0x6a736677736872
SECTOR = 512
FLUSH, FUA, DISCARD, MARK, METADATA = 1, 2, 4, 8, 16
ZERO = 1 << 16
GEOMETRY = 1 << 17   # the old geometry entry's private bit (read, not written)
ATOMIC = 1 << 18     # the device wrote it atomically: never torn


class LogWriter:
    def __init__(self, path, size, logical, physical, alignment=0,
                 geometry_entry=True, old_geometry=False, zones=None):
        """zones: (model, zone size in bytes, conventional zones): the
        zone layout entry a zoned device's log has (entry 1)."""
        self.f = open(path, "wb")
        self.entries = 0
        self.f.write(b"\0" * SECTOR)
        if geometry_entry:
            self.mark("sect4k-geometry size=%d logical=%d physical=%d "
                      "alignment=%d export=" % (size, logical, physical,
                                                alignment),
                      GEOMETRY if old_geometry else 0)
        if zones:
            self.mark("sect4k-zones zoned=%s zone-size=%d "
                      "zone-conventional=%d" % zones)

    def zone_op(self, op, lba=None):
        """A zone operation's mark (lba None: the ALL form); a reset's
        zeroes are the caller's to add, as the device logs them."""
        self.mark("sect4k-zone %s %s" % (op, "all" if lba is None
                                         else "lba=%d" % lba))

    def _entry(self, flags, off, length, data, name=b""):
        h = struct.pack("<QQQQ", off // SECTOR, length // SECTOR, flags,
                        len(name)) + name
        self.f.write(h + b"\0" * (SECTOR - len(h)))
        if data is not None:
            self.f.write(data)
        self.entries += 1

    def write(self, off, data, fua=False, atomic=False):
        self._entry((FUA if fua else 0) | (ATOMIC if atomic else 0), off,
                    len(data), data)

    def zero(self, off, length):
        self._entry(ZERO, off, length, b"\0" * length)

    def trim(self, off, length):
        self._entry(DISCARD, off, length, None)

    def flush(self):
        self._entry(FLUSH, 0, 0, None)

    def mark(self, name, extra=0):
        self._entry(MARK | extra, 0, 0, None, name.encode())

    def close(self):
        self.f.seek(0)
        self.f.write(struct.pack("<QQQI", MAGIC, 1, self.entries, SECTOR))
        self.f.close()


def read_log(path):
    """[(index, flags, off, len, data or None, mark or None)]."""
    b = open(path, "rb").read()
    magic, version, n, ss = struct.unpack_from("<QQQI", b, 0)
    assert magic == MAGIC and version == 1, path
    pos, out = ss, []
    for i in range(n):
        sector, nr, flags, dlen = struct.unpack_from("<QQQQ", b, pos)
        pos += ss
        mark = data = None
        if flags & MARK:
            mark = b[pos - ss + 32:pos - ss + 32 + dlen].decode()
        elif not flags & DISCARD:
            data = b[pos:pos + nr * ss]
            pos += nr * ss
        out.append((i, flags, sector * ss, nr * ss, data, mark))
    return out
