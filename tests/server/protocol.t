#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""sect4k-server speaks NBD: every option and command it offers, through
libnbd (and nbdinfo), and through a raw socket where libnbd would refuse
to send what we want to test."""
import json
import os
import socket
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import ok, skip, diag, done_testing, need_nbd  # noqa: E402
import srvlib  # noqa: E402
from srvlib import Server, greet, send_opt, recv_opt_reply, go, request, recv_exact  # noqa: E402

nbd = need_nbd()
srvlib.need_server()

ERR_UNKNOWN = 0x80000006
ERR_INVALID = 0x80000003
ERR_UNSUP = 0x80000001
ERR_BLOCK_SIZE_REQD = 0x80000008


def connect(uri, meta=True, structured=True, strict=True):
    h = nbd.NBD()
    if meta:
        h.add_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
    h.set_request_structured_replies(structured)
    if not strict:
        h.set_strict_mode(0)
    h.connect_uri(uri)
    return h


def ok_extents(cond, desc):
    """Holes at physical granularity are the memory store's; a file's
    follow its file system's blocks (SECT4K_STORE=file)."""
    if srvlib.STORE == "file":
        skip(desc, "the file store's holes follow the file system's blocks")
    else:
        ok(cond, desc)


def nbd_errno(fn):
    """Runs fn; returns the errno of the nbd.Error it raises, or 0."""
    try:
        fn()
        return 0
    except nbd.Error as e:
        return e.errnum or -1


def chunks_of(h, length, offset, flags=0):
    out = []

    def cb(buf, off, status, err):
        out.append((status, off, len(buf)))
        return 0
    h.pread_structured(length, offset, cb, flags)
    return out


def main():
    keys = ("size=64M", "model=512e-xp", "max-request=1M")
    with Server(*keys, options=["-e", "disk"]) as srv:
        # ---- nbdinfo: NBD_OPT_GO + INFO_* + LIST_META_CONTEXT -------------
        out = subprocess.run(["nbdinfo", "--json", srv.uri], capture_output=True,
                             text=True)
        ok(out.returncode == 0, "nbdinfo --json runs")
        info = json.loads(out.stdout)["exports"][0] if out.returncode == 0 else {}
        ok(info.get("block_size_minimum") == 512 and
           info.get("block_size_preferred") == 4096 and
           info.get("block_size_maximum") == 1 << 20,
           "block sizes: minimum = logical, preferred = physical, maximum = max-request")
        ok("alignment offset 3584" in info.get("description", "") and
           "lowest aligned LBA 7" in info.get("description", ""),
           "the description publishes the alignment offset")
        ok(info.get("export-size") == 64 << 20, "export size")
        ok(info.get("contexts") == ["base:allocation"], "base:allocation listed")
        ok(all(info.get(k) is True for k in (
            "can_multi_conn", "can_flush", "can_fua", "can_trim", "can_zero",
            "can_fast_zero", "can_cache", "can_df")) and
           info.get("is_read_only") is False,
           "export flags: multi-conn, flush, FUA, trim, zeroes, fast zero, cache, DF")
        out = subprocess.run(["nbdinfo", "--list", "--json", srv.uri],
                             capture_output=True, text=True)
        names = [e.get("export-name") for e in json.loads(out.stdout)["exports"]] \
            if out.returncode == 0 else []
        ok(names == ["disk"], "NBD_OPT_LIST names the one export (%s)" % names)

        # ---- opt mode: INFO, LIST_META_CONTEXT, unknown name, ABORT -------
        h = nbd.NBD()
        h.set_opt_mode(True)
        h.connect_uri(srv.uri)
        h.set_export_name("disk")
        h.opt_info()
        ok(h.get_size() == 64 << 20 and h.get_block_size(nbd.SIZE_MINIMUM) == 512,
           "NBD_OPT_INFO gives size and block sizes")
        got = []
        h.opt_list_meta_context(lambda name: got.append(name) or 0)
        ok(got == ["base:allocation"], "NBD_OPT_LIST_META_CONTEXT: %s" % got)
        h.set_export_name("nope")
        ok(nbd_errno(h.opt_info) != 0, "NBD_OPT_INFO of an unknown export fails")
        h.set_export_name("")
        h.set_full_info(True)
        h.opt_go()
        ok(h.get_canonical_export_name() == "disk",
           "\"\" selects the export; NBD_INFO_NAME gives its name")
        h.shutdown()
        h = nbd.NBD()
        h.set_opt_mode(True)
        h.connect_uri(srv.uri)
        h.opt_abort()
        ok(h.aio_is_closed(), "NBD_OPT_ABORT closes the connection")

        # ---- commands -----------------------------------------------------
        h = connect(srv.uri)
        ok(h.get_structured_replies_negotiated() and
           h.can_meta_context(nbd.CONTEXT_BASE_ALLOCATION),
           "structured replies and base:allocation negotiated")
        data = os.urandom(8192)
        h.pwrite(data, 4096, nbd.CMD_FLAG_FUA)
        ok(h.pread(8192, 4096) == data, "write (FUA) then read")
        ch = chunks_of(h, 65536, 0)
        # The memory store answers by reference: its holes are the
        # physical sectors never written, as block status says (below);
        # the file store's reads are copied and scanned for logical
        # blocks of zeroes.
        if srvlib.STORE == "file":
            want = [(nbd.READ_HOLE, 0, 4096), (nbd.READ_DATA, 4096, 8192),
                    (nbd.READ_HOLE, 12288, 65536 - 12288)]
        else:
            want = [(nbd.READ_HOLE, 0, 3584), (nbd.READ_DATA, 3584, 12288),
                    (nbd.READ_HOLE, 15872, 65536 - 15872)]
        ok(ch == want,
           "a read over data and holes: OFFSET_HOLE and OFFSET_DATA chunks (%s)" % ch)
        ch = chunks_of(h, 65536, 0, nbd.CMD_FLAG_DF)
        ok(ch == [(nbd.READ_DATA, 0, 65536)], "DF: one data chunk (%s)" % ch)
        ok(h.pread(65536, 0) == bytes(4096) + data + bytes(65536 - 12288),
           "the chunks reassemble to the right bytes")
        ents = []
        h.block_status(65536, 0, lambda m, o, e, err: ents.extend(e) or 0)
        # 512e-xp: physical sectors start at 3584 + k*4096, so the write
        # of [4096, 12288) allocates the sectors covering [3584, 15872).
        ok_extents(ents == [3584, 3, 12288, 0, 65536 - 15872, 3],
           "block status: hole, data, hole at physical granularity (%s)" % ents)
        ents = []
        h.block_status(65536, 0, lambda m, o, e, err: ents.extend(e) or 0,
                       nbd.CMD_FLAG_REQ_ONE)
        ok_extents(ents == [3584, 3], "block status REQ_ONE: one extent (%s)" % ents)
        h.zero(4096, 4096, nbd.CMD_FLAG_NO_HOLE)
        ok(h.pread(4096, 4096) == bytes(4096), "write zeroes NO_HOLE")
        h.zero(4096, 8192, nbd.CMD_FLAG_FAST_ZERO | nbd.CMD_FLAG_FUA)
        ok(h.pread(4096, 8192) == bytes(4096), "write zeroes FAST_ZERO|FUA")
        h.pwrite(data, 0)
        h.trim(4096, 0, nbd.CMD_FLAG_FUA)
        ents = []
        h.block_status(8192, 0, lambda m, o, e, err: ents.extend(e) or 0)
        ok_extents(ents[:2] == [3584, 3],
           "trim frees the whole physical sector [0, 3584) only (%s)" % ents)
        h.flush()
        h.cache(1 << 20, 0)
        ok(True, "flush and cache succeed")

        # ---- errors -------------------------------------------------------
        ok(nbd_errno(lambda: h.pread(512, 64 << 20)) == 22,
           "read past the end: EINVAL")
        ok(nbd_errno(lambda: h.pwrite(bytes(512), 64 << 20)) == 28,
           "write past the end: ENOSPC")
        h2 = connect(srv.uri, strict=False)
        ok(nbd_errno(lambda: h2.pread(100, 1)) == 22,
           "unaligned read: EINVAL (strict)")
        ok(nbd_errno(lambda: h2.pwrite(bytes(100), 512)) == 22,
           "unaligned write: EINVAL, and the connection goes on")
        ok(h2.pread(512, 4096) == data[4096:4608], "... the next request is served")
        h2.shutdown()
        h.shutdown()

        # ---- simple replies (no NBD_OPT_STRUCTURED_REPLY) ----------------
        h = connect(srv.uri, meta=False, structured=False)
        ok(not h.get_structured_replies_negotiated() and h.pread(512, 4096) == data[4096:4608],
           "without structured replies, reads get simple replies")
        ok(not h.can_df(), "DF is not offered without structured replies")
        h.shutdown()

        # ---- multi-conn: a flushed write is seen by another connection ---
        a, b = connect(srv.uri), connect(srv.uri)
        a.pwrite(b"\x77" * 4096, 1 << 20)
        a.flush()
        ok(b.pread(4096, 1 << 20) == b"\x77" * 4096, "multi-conn: visible across connections")
        a.shutdown()
        b.shutdown()

        # ---- raw socket: what libnbd will not send -------------------------
        s = srv.connect_raw()
        greet(s)
        send_opt(s, 8)
        ok(recv_opt_reply(s)[1] == 1, "raw: NBD_OPT_STRUCTURED_REPLY acked")
        send_opt(s, 8, b"x")
        ok(recv_opt_reply(s)[1] == ERR_INVALID, "raw: STRUCTURED_REPLY with data: ERR_INVALID")
        send_opt(s, 3, b"x")
        ok(recv_opt_reply(s)[1] == ERR_INVALID, "raw: NBD_OPT_LIST with data: ERR_INVALID")
        send_opt(s, 5)
        ok(recv_opt_reply(s)[1] == ERR_UNSUP, "raw: STARTTLS: ERR_UNSUP")
        send_opt(s, 99)
        ok(recv_opt_reply(s)[1] == ERR_UNSUP, "raw: unknown option: ERR_UNSUP")
        send_opt(s, 7, struct.pack(">I", 100) + b"x")
        ok(recv_opt_reply(s)[1] == ERR_INVALID, "raw: GO with a name past the data: ERR_INVALID")
        r = go(s, b"nope")
        ok(r[-1][0] == ERR_UNKNOWN and b"nope" in r[-1][1],
           "raw: GO of an unknown export: ERR_UNKNOWN naming it")
        r = go(s, b"disk", infos=(1, 2))
        types = [struct.unpack(">H", d[:2])[0] for t, d in r if t == 3]
        ok(r[-1][0] == 1 and types == [0, 1, 2, 3],
           "raw: GO with NAME and DESCRIPTION: EXPORT, NAME, DESCRIPTION, BLOCK_SIZE (%s)" % types)
        # Transmission without a metadata context, with structured replies.
        request(s, 7, 0, 4096, cookie=5)
        magic, flags, typ, cookie, length = struct.unpack(">IHHQI", recv_exact(s, 20))
        payload = recv_exact(s, length)
        ok(typ == 0x8001 and cookie == 5 and struct.unpack(">I", payload[:4])[0] == 22,
           "raw: block status without base:allocation: EINVAL error chunk")
        request(s, 0, 0, 2 << 20, cookie=6)
        magic, flags, typ, cookie, length = struct.unpack(">IHHQI", recv_exact(s, 20))
        payload = recv_exact(s, length)
        ok(typ == 0x8001 and struct.unpack(">I", payload[:4])[0] == 22 and flags & 1,
           "raw: a read over the maximum: EINVAL (not EOVERFLOW), nothing read")
        # The reply to a refused write comes only once its payload is in:
        # a client reading replies while it sends must not see it early.
        request(s, 1, 0, 2 << 20, cookie=7, payload=bytes(1 << 20))
        s.settimeout(1)
        try:
            early = s.recv(1)
        except socket.timeout:
            early = b""
        s.settimeout(20)
        s.sendall(bytes(1 << 20))
        magic, flags, typ, cookie, length = struct.unpack(">IHHQI",
                                                          early + recv_exact(s, 20 - len(early)))
        payload = recv_exact(s, length)
        ok(not early and cookie == 7 and struct.unpack(">I", payload[:4])[0] == 22,
           "raw: a write over the maximum: EINVAL, replied after its payload "
           "(%s before it)" % (early or "nothing"))
        request(s, 0, 0, 512, flags=0x40, cookie=8)
        magic, flags, typ, cookie, length = struct.unpack(">IHHQI", recv_exact(s, 20))
        payload = recv_exact(s, length)
        ok(cookie == 8 and struct.unpack(">I", payload[:4])[0] == 22,
           "raw: an unknown command flag: EINVAL")
        request(s, 42, 0, 0, cookie=9)
        magic, flags, typ, cookie, length = struct.unpack(">IHHQI", recv_exact(s, 20))
        payload = recv_exact(s, length)
        ok(cookie == 9 and struct.unpack(">I", payload[:4])[0] == 22,
           "raw: an unknown command: EINVAL")
        request(s, 0, 1 << 20, 512, cookie=10)
        magic, flags, typ, cookie, length = struct.unpack(">IHHQI", recv_exact(s, 20))
        payload = recv_exact(s, length)
        ok(typ == 1 and flags & 1 and payload[8:] == b"\x77" * 512,
           "raw: the connection still serves after the errors")
        request(s, 2)
        ok(srvlib.closed(s), "raw: NBD_CMD_DISC closes the connection")
        s.close()

        # Writes pipelined before a bad request magic are done and replied
        # to before the server closes.
        s = srv.connect_raw()
        greet(s)
        go(s, b"disk")
        reqs = b""
        for i in range(8):
            reqs += struct.pack(">IHHQQI", 0x25609513, 0, 1, 100 + i,
                                (2 << 20) + i * 4096, 4096) + bytes([i + 1]) * 4096
        s.sendall(reqs + b"\xde\xad" * 14)
        got = set()
        try:
            while True:
                magic, err, cookie = struct.unpack(">IIQ", recv_exact(s, 16))
                if err == 0:
                    got.add(cookie)
        except (OSError, EOFError):
            pass
        s.close()
        h = connect(srv.uri)
        done = all(h.pread(4096, (2 << 20) + i * 4096) == bytes([i + 1]) * 4096
                   for i in range(8))
        h.shutdown()
        ok(got == set(range(100, 108)) and done,
           "raw: a bad request magic after 8 writes: all 8 done and replied "
           "to (%d replies) before the server closes" % len(got))

        # NBD_OPT_EXPORT_NAME, with and without the 124 zero bytes.
        for flags, extra in ((3, 0), (1, 124)):
            s = srv.connect_raw()
            greet(s, flags)
            send_opt(s, 1, b"disk")
            size, tflags = struct.unpack(">QH", recv_exact(s, 10))
            pad = recv_exact(s, extra)
            request(s, 0, 1 << 20, 512, cookie=3)
            magic, err, cookie = struct.unpack(">IIQ", recv_exact(s, 16))
            got = recv_exact(s, 512)
            ok(size == 64 << 20 and tflags & 1 and pad == bytes(extra) and
               magic == 0x67446698 and err == 0 and got == b"\x77" * 512,
               "raw: NBD_OPT_EXPORT_NAME (client flags %d): size, flags, "
               "%d zero bytes, simple replies" % (flags, extra))
            s.close()
        st = srv.stop()
        ok(st == 0, "server exited cleanly on SIGTERM (%s)" % st)
        if st != 0:
            diag(srv.log())

    # ---- read-only -------------------------------------------------------
    with Server("size=16M", options=["-r"]) as srv:
        h = connect(srv.uri)
        ok(h.is_read_only() and not h.can_trim() and not h.can_zero(),
           "-r: read-only export without trim or zeroes")
        h.set_strict_mode(0)
        ok(nbd_errno(lambda: h.pwrite(bytes(512), 0)) == 1, "-r: write gets EPERM")
        ok(nbd_errno(lambda: h.trim(512, 0)) == 1, "-r: trim gets EPERM")
        ok(h.pread(512, 0) == bytes(512), "-r: reads work")
        h.shutdown()

    # ---- require-block-size ------------------------------------------------
    with Server("size=16M", "model=4kn", "require-block-size=true") as srv:
        h = nbd.NBD()
        h.set_request_block_size(False)
        try:
            h.connect_uri(srv.uri)
            msg = ""
        except nbd.Error as e:
            msg = str(e)
        ok("block size" in msg,
           "require-block-size: a client not asking for block sizes is refused")
        diag(msg)
        h = connect(srv.uri)
        ok(h.get_block_size(nbd.SIZE_MINIMUM) == 4096, "require-block-size: libnbd's default connects")
        h.shutdown()
        s = srv.connect_raw()
        greet(s)
        r = go(s, b"", infos=())
        ok(r[-1][0] == ERR_BLOCK_SIZE_REQD and b"logical sector size 4096" in r[-1][1],
           "raw: NBD_REP_ERR_BLOCK_SIZE_REQD with a message naming the size")
        diag(r[-1][1].decode())
        send_opt(s, 1, b"")
        ok(srvlib.closed(s), "raw: NBD_OPT_EXPORT_NAME (no block sizes possible) is dropped")
        srv.stop()
        ok("require-block-size=true" in srv.log(), "the refusal is logged")

    done_testing()


main()
