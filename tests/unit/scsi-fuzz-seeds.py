#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""Writes the seed inputs of the SCSI fuzz corpus (tests/unit/scsi-corpus/
seed-*): every command the layer knows, well-formed and on every geometry,
in the input format of tests/unit/scsi-fuzz.c."""
import os
import struct
import sys


def cmd(cdb, data=b"", fail=None, cut=False, dlen=None):
    """One command: header, CDB, data length, data, fail byte."""
    n = len(data) if dlen is None else dlen
    h = len(cdb) | (0x80 if n > 255 else 0) | (0x20 if fail is not None else 0) \
        | (0x40 if cut else 0)
    out = bytes([h]) + bytes(cdb)
    out += struct.pack(">H", n) if n > 255 else bytes([n])
    out += data
    if fail is not None:
        out += bytes([fail])
    return out


def be(v, n):
    return v.to_bytes(n, "big")


TUR = cmd([0] * 6)
SEEDS = {
    "inquiry": cmd([0x12, 0, 0, 0, 96, 0], dlen=96),
    "vpd": b"".join(cmd([0x12, 1, p, 0, 255, 0], dlen=255)
                    for p in (0x00, 0x80, 0x83, 0xb0, 0xb1, 0xb2, 0x89)),
    "readcap": cmd([0x25] + [0] * 9, dlen=8) +
               cmd([0x9e, 0x10] + [0] * 8 + list(be(32, 4)) + [0, 0], dlen=32),
    "modesense": b"".join(cmd([0x1a, 0, pc << 6 | p, 0, 255, 0], dlen=255)
                          for pc in range(4) for p in (0x01, 0x08, 0x0a, 0x3f)) +
                 cmd([0x5a, 0x10, 0x3f, 0, 0, 0, 0, 1, 0, 0], dlen=256),
    "modeselect": cmd([0x15, 0x10, 0, 0, 24, 0],
                      bytes([0, 0, 0x10, 0, 0x08, 0x12]) + bytes(18)),
    "rw": cmd([0x2a, 0x08, 0, 0, 0, 3, 0, 0, 4, 0], bytes(range(256)) * 8) +
          cmd([0x28, 0, 0, 0, 0, 3, 0, 0, 4, 0], dlen=2048) +
          cmd([0x08, 0, 0, 3, 4, 0], dlen=2048) +
          cmd([0x0a, 0, 0, 3, 1, 0], b"\x11" * 512) +
          cmd([0xa8, 0, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0], dlen=2048) +
          cmd([0xaa, 0, 0, 0, 0, 3, 0, 0, 0, 1, 0, 0], b"\x22" * 512) +
          cmd([0x88, 0x08] + list(be(3, 8)) + list(be(4, 4)) + [0, 0], dlen=4096) +
          cmd([0x8a, 0x08] + list(be(3, 8)) + list(be(1, 4)) + [0, 0], b"\x33" * 4096),
    "badread": cmd([0x28, 0, 0, 0, 0, 0, 0, 0, 32, 0], dlen=16384) +
               cmd([0x2f, 0, 0, 0, 0, 0, 0, 0, 32, 0]),
    "failread": cmd([0x28, 0, 0, 0, 0, 0, 0, 0, 16, 0], dlen=8192, fail=0x00) +
                cmd([0x2a, 0, 0, 0, 0, 0, 0, 0, 1, 0], b"\x44" * 512, fail=0x30),
    "sync": cmd([0x35] + [0] * 9) + cmd([0x91] + [0] * 15) +
            cmd([0x1b, 0, 0, 0, 0, 0]) + cmd([0x1b, 0, 0, 0, 1, 0]),
    "writesame": cmd([0x93, 0x08] + list(be(2, 8)) + list(be(16, 4)) + [0, 0], bytes(512)) +
                 cmd([0x93, 0x01] + list(be(2, 8)) + list(be(16, 4)) + [0, 0]) +
                 cmd([0x93, 0] + list(be(2, 8)) + list(be(40, 4)) + [0, 0], b"\x5a" * 4096) +
                 cmd([0x41, 0x08, 0, 0, 0, 2, 0, 0, 4, 0], bytes(4096)),
    "unmap": cmd([0x42, 0, 0, 0, 0, 0, 0, 0, 40, 0],
                 be(38, 2) + be(32, 2) + bytes(4) + be(0, 8) + be(16, 4) + bytes(4) +
                 be(100, 8) + be(1, 4) + bytes(4)),
    "verify": cmd([0x2f, 0x02, 0, 0, 0, 0, 0, 0, 1, 0], bytes(512)) +
              cmd([0x8f, 0x06] + list(be(0, 8)) + list(be(2, 4)) + [0, 0], bytes(4096)),
    "sense": cmd([0x03, 0, 0, 0, 18, 0], dlen=18) + TUR + cmd([0x03, 0, 0, 0, 18, 0], dlen=18),
    "rsoc": cmd([0xa3, 0x0c, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0], dlen=1024) +
            cmd([0xa3, 0x0c, 1, 0x93, 0, 0, 0, 0, 0, 64, 0, 0], dlen=64) +
            cmd([0xa3, 0x0c, 2, 0x9e, 0, 0x10, 0, 0, 0, 64, 0, 0], dlen=64),
    "powercut": TUR + cmd([0x2a, 0, 0, 0, 0, 0, 0, 0, 1, 0], b"\x66" * 512, cut=True) +
                TUR + cmd([0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0], dlen=512),
    "malformed": cmd([0x28, 0x20, 0, 0, 0, 0, 0, 0, 1, 0], dlen=512) +
                 cmd([0x88, 0] + [0xff] * 8 + list(be(1, 4)) + [0, 0], dlen=512) +
                 cmd([0x8a, 0, 0, 0, 0, 0, 0, 0]) + cmd([]) + cmd([0x7f] + [0] * 15) +
                 cmd([0x2a, 0, 0, 0, 0, 0, 0, 1, 0, 0], b"x" * 100),
}

# WRITE ATOMIC(16) and the Block Limits page with atomic writes on (byte 0
# bit 7) and, for the refusals, off.
ATOMIC = {
    "atomic": cmd([0x12, 1, 0xb0, 0, 255, 0], dlen=255) +
              cmd([0xa3, 0x0c, 1, 0x9c, 0, 0, 0, 0, 0, 64, 0, 0], dlen=64) +
              cmd([0xa3, 0x0c, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0], dlen=1024) +
              cmd([0x9c, 0x08] + list(be(0, 8)) + [0, 0] + list(be(8, 2)) + [0, 0],
                  b"\x77" * 4096) +
              cmd([0x9c, 0] + list(be(32, 8)) + [0, 0] + list(be(32, 2)) + [0, 0],
                  dlen=16384) +
              cmd([0x9c, 0] + list(be(1, 8)) + [0, 0] + list(be(8, 2)) + [0, 0],
                  dlen=4096) +
              cmd([0x9c, 0] + list(be(0, 8)) + [0, 8] + list(be(8, 2)) + [0, 0],
                  dlen=4096) +
              cmd([0x9c, 0] + list(be(0, 8)) + [0, 0] + list(be(64, 2)) + [0, 0],
                  dlen=32768) +
              cmd([0x9c, 0] + list(be(8, 8)) + [0, 0] + list(be(8, 2)) + [0, 0],
                  b"\x78" * 4096, cut=True) + TUR +
              cmd([0x9c, 0] + list(be(16, 8)) + [0, 0] + list(be(8, 2)) + [0, 0],
                  b"\x79" * 4096, fail=0x00),
}

# Zoned LUNs (issue 33; geometry byte 5, 6, 7 with bit 3): REPORT ZONES, ZBC OUT,
# writes at and off the write pointer, reads across zone types.  Zones
# of 32 KiB: 64 LBAs on 512n and 512e.
def zbc_out(sa, lba, all_=False):
    return cmd([0x94, sa] + list(be(lba, 8)) + [0, 0, 0, 0, 1 if all_ else 0, 0])


def zbc_in(lba, opt, alloc):
    return cmd([0x95, 0] + list(be(lba, 8)) + list(be(alloc, 4)) + [opt, 0], dlen=alloc)


def w16(lba, n, byte=0x33, bs=512):
    return cmd([0x8a, 0] + list(be(lba, 8)) + list(be(n, 4)) + [0, 0], bytes([byte]) * (n * bs))


ZBC = {
    "zbc": (cmd([0x12, 0, 0, 0, 96, 0], dlen=96) +
              cmd([0x12, 1, 0xb6, 0, 255, 0], dlen=255) +
              cmd([0x12, 1, 0xb1, 0, 255, 0], dlen=255) +
              cmd([0xa3, 0x0c, 2, 0x95, 0, 0, 0, 0, 0, 64, 0, 0], dlen=64) +
              zbc_in(0, 0, 1024) + zbc_in(70, 0x80, 192) + zbc_in(0, 0x3f, 32) +
              zbc_in(0, 0x09, 256) + zbc_in(1 << 40, 0, 256) +
              w16(64, 8) + w16(64, 8) + w16(72, 1) + w16(120, 16) +
              cmd([0x88, 0] + list(be(60, 8)) + list(be(8, 4)) + [0, 0], dlen=4096) +
              zbc_out(3, 128) + zbc_out(3, 192) + w16(256, 8) + zbc_out(1, 0, True) +
              zbc_out(2, 64) + w16(64, 8) + zbc_out(4, 64) + zbc_out(4, 65) +
              zbc_out(4, 0) + zbc_out(3, 0, True) + zbc_out(2, 0, True) +
              zbc_out(4, 0, True) + zbc_in(0, 0, 4096) +
              cmd([0x42, 0, 0, 0, 0, 0, 0, 0, 24, 0],
                  be(22, 2) + be(16, 2) + bytes(4) + be(0, 8) + be(128, 4) + bytes(4)) +
              cmd([0x93, 0x08] + list(be(64, 8)) + list(be(16, 4)) + [0, 0], bytes(512)) +
              cmd([0x8a, 0] + list(be(64, 8)) + list(be(8, 4)) + [0, 0],
                  b"\x44" * 4096, fail=0x00) + zbc_in(64, 0, 128)),
}


def ata16(proto, flags, command, features=0, count=0, lba=0, ext=False):
    return [0x85, proto << 1 | ext, flags, features >> 8, features & 255,
            count >> 8, count & 255, lba >> 24 & 255, lba & 255, lba >> 32 & 255,
            lba >> 8 & 255, lba >> 40 & 255, lba >> 16 & 255, 0x40, command, 0]


# ATA PASS-THROUGH on a SATA LUN (interface=sata: geometry 5-7) and, for
# the refusals, on a SCSI one.
SMART = 0xc24f00
ATA = {
    "ata": cmd([0x12, 1, 0x89, 2, 0x40, 0], dlen=576) +
           cmd(ata16(4, 0x0e, 0xec, count=1), dlen=512) +
           cmd([0xa1, 4 << 1, 0x0e, 0, 1, 0, 0, 0, 0x40, 0xec, 0, 0], dlen=512) +
           cmd(ata16(4, 0x0e, 0x2f, count=3, lba=0x30, ext=True), dlen=1536) +
           cmd(ata16(6, 0x0e, 0x47, count=1, ext=True), dlen=512) +
           cmd(ata16(4, 0x0e, 0xb0, 0xd0, 1, SMART), dlen=512) +
           cmd(ata16(4, 0x0e, 0xb0, 0xd1, 1, SMART), dlen=512) +
           cmd(ata16(4, 0x0e, 0xb0, 0xd5, 1, SMART | 0x30), dlen=512) +
           cmd(ata16(3, 0x20, 0xb0, 0xda, 0, SMART)) +
           cmd(ata16(3, 0x20, 0xe5)) +
           cmd(ata16(3, 0x20, 0xea, ext=True)) +
           cmd(ata16(3, 0, 0xe7), fail=0x00) +
           cmd(ata16(3, 0, 0x00)) +
           cmd(ata16(0, 0, 0xea)) + cmd(ata16(4, 0, 0xec, count=1), dlen=512) +
           cmd(ata16(4, 0x0a, 0xec, count=100), dlen=512),
}


def main(outdir):
    os.makedirs(outdir, exist_ok=True)
    for name, body in SEEDS.items():
        # geometry byte: 512e plus, for the fault seeds, the fault layer
        for b0, tag in ((0x01, "512e"), (0x4a, "512e-xp-faults"), (0x13, "4kn-ro"),
                        (0x0c, "1k8k-wc")):
            with open(os.path.join(outdir, "seed-%s-%s" % (name, tag)), "wb") as f:
                f.write(bytes([b0]) + body)
    # Zoned: geometry 5-7 (SATA) with byte 0 bit 3 (no write cache then).
    for name, body in ZBC.items():
        for b0, tag in ((0x0d, "hm-512n"), (0x0e, "hm-512e"), (0x0f, "ha-512e"),
                        (0x5e, "hm-512e-faults-ro"), (0x01, "512e-off")):
            with open(os.path.join(outdir, "seed-%s-%s" % (name, tag)), "wb") as f:
                f.write(bytes([b0]) + body)
    for name, body in ATA.items():
        for b0, tag in ((0x06, "512e-sata"), (0x47, "512e-xp-sata-faults"),
                        (0x15, "512n-sata-ro"), (0x01, "512e-scsi")):
            with open(os.path.join(outdir, "seed-%s-%s" % (name, tag)), "wb") as f:
                f.write(bytes([b0]) + body)
    for name, body in ATOMIC.items():
        for b0, tag in ((0x81, "512e"), (0xca, "512e-xp-faults"), (0x93, "4kn-ro"),
                        (0x8c, "1k8k-wc"), (0x00, "512n-off")):
            with open(os.path.join(outdir, "seed-%s-%s" % (name, tag)), "wb") as f:
                f.write(bytes([b0]) + body)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else
         os.path.join(os.path.dirname(os.path.abspath(__file__)), "scsi-corpus"))
