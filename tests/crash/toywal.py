#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""A toy write-ahead log, as the workload and the checker of sect4k-crash's
tests (issue 23).

Layout: a super block at byte 0 (one physical sector) says which
transactions are committed; the log from byte 64 KiB holds records, each
within one logical sector: transaction t's data record in slot 2t, its
commit record in slot 2t+1.  A transaction: write the data record, flush,
write the commit record, flush, write the super block (FUA).

Two versions differ only in the slot size:
  correct  one physical sector per record: a record's write touches no
           other record, whatever the drive does to an interrupted sector;
  broken   one logical sector per record, packed: it assumes a 512-byte
           write cannot damage the sectors next to it, which on 512e share
           its physical sector (a torn RMW there can destroy committed
           records).

  toywal.py workload MODE TXNS URI            over NBD (libnbd)
  toywal.py workload MODE TXNS --log PATH --geometry SIZE,L,P
                                              the log written directly
  toywal.py check MODE [URI]                  URI default $SECT4K_URI;
                                              exit 0 consistent, 1 not
"""
import hashlib
import os
import struct
import sys
import zlib

LOG_START = 64 * 1024
MAGIC = b"TWAL"
HDR = struct.Struct("<4sB3xQI")         # magic, kind, txn, payload length
DATA, COMMIT, SUPER = 1, 2, 3


def payload(t):
    return hashlib.sha256(b"toywal %d" % t).digest() * 2


def record(kind, t, body, size):
    h = HDR.pack(MAGIC, kind, t, len(body)) + body
    r = h + struct.pack("<I", zlib.crc32(h))
    return r + b"\0" * (size - len(r))


def parse(buf):
    """(kind, txn, body) or None for anything not a whole record."""
    if len(buf) < HDR.size + 4:
        return None
    magic, kind, t, n = HDR.unpack_from(buf)
    if magic != MAGIC or HDR.size + n + 4 > len(buf):
        return None
    h = buf[:HDR.size + n]
    if struct.unpack_from("<I", buf, HDR.size + n)[0] != zlib.crc32(h):
        return None
    return kind, t, buf[HDR.size:HDR.size + n]


def slot_size(mode, logical, physical):
    return physical if mode == "correct" else logical


class NbdDev:
    def __init__(self, uri):
        import nbd
        self.h = nbd.NBD()
        self.h.connect_uri(uri)
        self.logical = self.h.get_block_size(nbd.SIZE_MINIMUM)
        self.physical = self.h.get_block_size(nbd.SIZE_PREFERRED)
        self.nbd = nbd

    def write(self, off, data, fua=False):
        self.h.pwrite(data, off, self.nbd.CMD_FLAG_FUA if fua else 0)

    def flush(self):
        self.h.flush()

    def read(self, off, n):
        return self.h.pread(n, off)

    def close(self):
        self.h.shutdown()


class LogDev:
    def __init__(self, path, size, logical, physical):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import wlogfmt
        self.w = wlogfmt.LogWriter(path, size, logical, physical)
        self.logical, self.physical = logical, physical

    def write(self, off, data, fua=False):
        self.w.write(off, data, fua)

    def flush(self):
        self.w.flush()

    def close(self):
        self.w.close()


def workload(dev, mode, txns):
    R = slot_size(mode, dev.logical, dev.physical)
    for t in range(txns):
        dev.write(LOG_START + 2 * t * R, record(DATA, t, payload(t), R))
        dev.flush()
        dev.write(LOG_START + (2 * t + 1) * R, record(COMMIT, t, b"", R))
        dev.flush()
        dev.write(0, record(SUPER, t, b"", dev.physical), fua=True)
    dev.close()


def check(dev, mode):
    """A list of what is wrong (empty: consistent)."""
    import nbd
    R = slot_size(mode, dev.logical, dev.physical)
    problems = []
    try:
        sup = dev.read(0, dev.physical)
    except nbd.Error as e:
        return ["super block unreadable: %s" % e]
    s = parse(sup)
    if s is None and sup.strip(b"\0"):
        return ["super block damaged"]
    committed = s[1] if s else -1

    def rec(slot):
        try:
            return parse(dev.read(LOG_START + slot * R, R))
        except nbd.Error:
            return None
    t, last_commit = 0, -1
    while True:
        d, c = rec(2 * t), rec(2 * t + 1)
        data_ok = d is not None and d[:2] == (DATA, t) and d[2] == payload(t)
        commit_ok = c is not None and c[:2] == (COMMIT, t)
        if t <= committed and not (data_ok and commit_ok):
            problems.append("transaction %d is committed (super block: up "
                            "to %d) but its %s record is damaged"
                            % (t, committed,
                               "data" if not data_ok else "commit"))
        if commit_ok and not data_ok:
            problems.append("transaction %d: commit record without its data"
                            % t)
        if commit_ok and last_commit != t - 1:
            problems.append("transaction %d committed after a gap (last "
                            "committed %d)" % (t, last_commit))
        if commit_ok:
            last_commit = t
        if t > committed and d is None and c is None:
            break
        t += 1
    return problems


def main(argv):
    if len(argv) >= 4 and argv[1] == "workload":
        mode, txns = argv[2], int(argv[3])
        if argv[4] == "--log":
            size, l, p = (int(x) for x in argv[7].split(","))
            dev = LogDev(argv[5], size, l, p)
        else:
            dev = NbdDev(argv[4])
        workload(dev, mode, txns)
        return 0
    if len(argv) >= 3 and argv[1] == "check":
        uri = argv[3] if len(argv) > 3 else os.environ["SECT4K_URI"]
        dev = NbdDev(uri)
        problems = check(dev, argv[2])
        dev.close()
        for p in problems:
            print("toywal: %s: %s" % (os.environ.get("SECT4K_STATE", uri), p))
        return 1 if problems else 0
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
