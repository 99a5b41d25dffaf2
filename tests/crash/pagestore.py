#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""A toy page store, as the workload and the checker of sect4k-crash's
atomic-write tests (issue 27): what a database without a doublewrite
buffer or full-page writes does, and what atomic writes make safe.

Layout: PAGES pages of 16 KiB from byte 0.  Version v of page i holds a
header (magic, i, v), bytes derived from (i, v), and a CRC-32 of all that
in its last 4 bytes.  The workload writes every page (version 0) and
flushes, then ROUNDS times rewrites every page in place, one 16 KiB write
each, and flushes.  A crash may leave each page old or new; a page that
is neither (its checksum wrong) is torn: the drive wrote some of its
physical sectors and not the others, which only an atomic write unit of
16 KiB (atomic-write-max=16K) rules out.

  pagestore.py workload PAGES ROUNDS URI   over NBD (libnbd)
  pagestore.py check PAGES [URI]           URI default $SECT4K_URI; exit
                                           0: no torn page, 1: torn pages
"""
import os
import struct
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from toywal import NbdDev  # noqa: E402

PAGE = 16384
MAGIC = b"TPS1"
HDR = struct.Struct("<4sIQ")            # magic, page, version


def page(i, v):
    body = HDR.pack(MAGIC, i, v)
    body += bytes((i * 7 + v * 13 + k) & 0xff
                  for k in range(PAGE - 4 - len(body)))
    return body + struct.pack("<I", zlib.crc32(body))


def intact(buf, i):
    """True if buf is a whole version of page i, or never written."""
    if not buf.strip(b"\0"):
        return True
    magic, n, _ = HDR.unpack_from(buf)
    return (magic == MAGIC and n == i and
            struct.unpack_from("<I", buf, PAGE - 4)[0] ==
            zlib.crc32(buf[:PAGE - 4]))


def workload(dev, pages, rounds):
    for v in range(rounds + 1):
        for i in range(pages):
            dev.write(i * PAGE, page(i, v))
        dev.flush()
    dev.close()


def main(argv):
    if len(argv) == 5 and argv[1] == "workload":
        workload(NbdDev(argv[4]), int(argv[2]), int(argv[3]))
        return 0
    if len(argv) in (3, 4) and argv[1] == "check":
        import nbd
        uri = argv[3] if len(argv) > 3 else os.environ["SECT4K_URI"]
        dev = NbdDev(uri)
        torn = []
        for i in range(int(argv[2])):
            try:
                ok = intact(dev.read(i * PAGE, PAGE), i)
            except nbd.Error:
                ok = False
            if not ok:
                torn.append(i)
        dev.close()
        if torn:
            print("pagestore: %s: torn pages %s"
                  % (os.environ.get("SECT4K_STATE", uri), torn))
        return 1 if torn else 0
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
