#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""Writes the seed inputs of the fuzz corpus (tests/server/corpus/seed-*):
client byte streams for every option and command (format in fuzz.c), over
the memory store (seed-NAME-mMODE-pPIECE) and through the request slots
of the file store (seed-NAME-mMODE-slots-pPIECE: byte 1's top bit)."""
import os
import struct
import sys

IHAVEOPT = 0x49484156454F5054


def opt(o, data=b""):
    return struct.pack(">QII", IHAVEOPT, o, len(data)) + data


def go(name=b"", infos=(1, 2, 3), o=7):
    return opt(o, struct.pack(">I", len(name)) + name + struct.pack(">H", len(infos)) +
               b"".join(struct.pack(">H", i) for i in infos))


def meta(o, queries, name=b""):
    d = struct.pack(">I", len(name)) + name + struct.pack(">I", len(queries))
    return opt(o, d + b"".join(struct.pack(">I", len(q)) + q for q in queries))


def req(t, off=0, length=0, flags=0, cookie=1, payload=b""):
    return struct.pack(">IHHQQI", 0x25609513, flags, t, cookie, off, length) + payload


def main(outdir):
    flags = struct.pack(">I", 3)
    hs = flags + opt(8) + meta(10, [b"base:allocation"]) + go()
    cmds = (req(1, 4096, 4096, payload=b"\xaa" * 4096) + req(0, 0, 16384, cookie=2) +
            req(7, 0, 65536, cookie=3) + req(7, 0, 65536, flags=8, cookie=4) +
            req(4, 0, 8192, cookie=5) + req(6, 8192, 8192, flags=2, cookie=6) +
            req(6, 0, 4096, flags=16, cookie=7) + req(5, 0, 4096, cookie=8) +
            req(3, cookie=9) + req(0, 0, 8192, flags=4, cookie=10) +
            req(1, 100, 100, flags=1, payload=b"u" * 100) + req(0, 1 << 20, 512) +
            req(9) + req(0, 0, 512, flags=0x80) + req(2))
    seeds = {
        "full": hs + cmds,
        "export-name": struct.pack(">I", 1) + opt(1, b"") + cmds,
        "export-name-disk": flags + opt(1, b"disk") + cmds,
        "list-info-abort": flags + opt(3) + go(o=6) + opt(8) + meta(9, []) +
                           meta(9, [b"base:"]) + meta(10, [b"x", b"base:allocation"]) + opt(2),
        "bad-options": flags + opt(3, b"x") + opt(8, b"x") + opt(5) + opt(99) +
                       opt(7, struct.pack(">I", 99)) + meta(10, [b"base:allocation"]) +
                       opt(10, b"\0\0\0\0\0\0\0\5\0\0\0\9") + go(b"nope") + go(infos=()) +
                       opt(11, bytes(20000)) + go(),
        "bad-magic": flags + opt(8) + go() + b"\0" * 28,
        "bad-flags": struct.pack(">I", 0x10),
        "no-fixed": struct.pack(">I", 0) + opt(1),
        "huge-write": hs + req(1, 0, 1 << 30),
        "oversize": hs + req(1, 0, 70000, payload=bytes(70000)) + req(0, 0, 1 << 17) + req(0, 0, 512),
        "pipeline": hs + b"".join(req(1, i * 4096 + 512, 1024, payload=bytes([i]) * 1024) +
                                  req(0, i * 4096, 4096) for i in range(12)),
    }
    # For the slots: more requests than slots, reads that together
    # exceed CONN_INFLIGHT_BYTES (max-request is 2M there), overlapping
    # writes, reads, zeroes and trims in flight, cut sectors.
    qd = (b"".join(req(0, 0, 1 << 20, cookie=100 + i) for i in range(12)) +
          b"".join(req(1, (i % 3) * 1536, 2048, flags=i & 1, cookie=200 + i,
                       payload=bytes([i]) * 2048) +
                   req(0, 1024, 4096, flags=4 * (i & 1), cookie=300 + i)
                   for i in range(10)) +
          req(6, 512, 7680, cookie=400) + req(6, 4096, 8192, flags=2, cookie=401) +
          req(4, 0, 4096, cookie=402) + req(4, 1000, 3000, cookie=403) +
          req(0, 0, 16384, cookie=404) + req(7, 0, 16384, cookie=405) +
          req(3, flags=1, cookie=406) + req(1, 1 << 20, 4096, cookie=407, payload=bytes(4096)) +
          req(0, 0, 3 << 19, cookie=408) + req(0, 0, 1 << 21, cookie=409) +
          req(0, 4096, 8192, cookie=411) + req(2))
    ro = (b"".join(req(0, i * 65536, 1 << 19, cookie=i) for i in range(20)) +
          req(7, 0, 1 << 20, cookie=50) + req(0, 0, 0, cookie=51) +
          req(0, 100, 412, cookie=52) + req(3, cookie=53) + req(0, 0, 2048, flags=4) +
          req(2))
    slot_seeds = {
        "full": seeds["full"],
        "export-name": seeds["export-name"],
        "pipeline": seeds["pipeline"],
        "qd": hs + qd,
        "qd-simple": struct.pack(">I", 1) + opt(1, b"") + qd,
        "reads": hs + ro,
        # A payload growing past PAYLOAD_STEP into its slot (the replay
        # reads inputs of up to 1M).
        "bigwrite": hs + req(1, 4096, 600000, cookie=1, payload=b"w" * 600000) +
                    req(0, 0, 1 << 20, cookie=2) + req(2),
        "reads-simple": flags + opt(1, b"") + ro,
    }
    for mode in (0, 1, 2, 4, 8, 16, 32, 64, 128):
        for piece in (0, 1, 7, 100):
            for name, data in seeds.items():
                if mode and name not in ("full", "export-name"):
                    continue
                if piece and name not in ("full", "pipeline"):
                    continue
                fn = os.path.join(outdir, "seed-%s-m%d-p%d" % (name, mode, piece))
                with open(fn, "wb") as f:
                    f.write(bytes([mode, piece]) + data)
        for piece in (0, 1, 7):
            for name, data in slot_seeds.items():
                if mode not in (0, 1, 2, 4, 8) and name not in ("full", "qd"):
                    continue
                if (piece or mode) and name == "bigwrite":
                    continue
                if piece and name not in ("full", "qd", "pipeline", "reads", "reads-simple"):
                    continue
                if piece and mode not in (0, 4):
                    continue
                fn = os.path.join(outdir, "seed-%s-m%d-slots-p%d" % (name, mode, piece))
                with open(fn, "wb") as f:
                    f.write(bytes([mode, 0x80 | piece]) + data)

main(sys.argv[1])
