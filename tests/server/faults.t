#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""Faults through both front ends (nbdkit plugin and sect4k-server), with
libnbd: bad sectors (reads, partial and whole writes, zero, trim), the
control socket (every command, bad commands, its mode) and a power cut
(connections from before it refused or dropped, new ones see what
survived)."""
import json
import os
import socket
import stat
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import ok, diag, done_testing, need_nbd, errno_name  # noqa: E402
from srvlib import front_ends  # noqa: E402

nbd = need_nbd()
TOP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
CTL = os.path.join(TOP, "scripts", "sect4k-ctl")


def ctl(path, *words):
    """(exit status, stdout, stderr) of scripts/sect4k-ctl."""
    p = subprocess.run([CTL, path] + list(words), capture_output=True,
                       text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def raw(path, data):
    """Sends raw bytes to the control socket; returns the answer's lines
    up to and including the last (ok or error)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    s.settimeout(30)
    s.sendall(data)
    got = b""
    while True:
        lines = got.decode(errors="replace").split("\n")[:-1]
        if any(l == "ok" or l.startswith("error: ") for l in lines):
            break
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
    s.close()
    return got.decode(errors="replace")


def connect(uri):
    h = nbd.NBD()
    h.connect_uri(uri)
    return h


def bad_sectors(name, srv, ctlpath):
    h = connect(srv.uri)
    EIO = "EIO"
    fails = [errno_name(lambda i=i: h.pread(512, i * 512)) for i in range(20)]
    ok(fails == [0] * 8 + [EIO] * 8 + [0] * 4,
       "%s 512e bad-sectors=9: exactly LBAs 8-15 fail with EIO" % name)
    ok(errno_name(lambda: h.pread(65536, 0)) == EIO,
       "%s: a read touching the bad sector fails whole" % name)
    ok(errno_name(lambda: h.pwrite(b"\x11" * 512, 9 * 512)) == EIO,
       "%s: a partial write of it fails with EIO" % name)
    ok(errno_name(lambda: h.zero(512, 10 * 512)) == EIO,
       "%s: a partial zero too" % name)
    rc, out, _ = ctl(ctlpath, "bad", "list")
    ok(rc == 0 and out == "8-15\n", "%s: bad list: %r" % (name, out))
    rc, _, _ = ctl(ctlpath, "bad", "remove", "12")
    ok(rc == 0 and h.pread(4096, 4096) == b"\0" * 4096,
       "%s: bad remove; the failed writes changed nothing" % name)
    ctl(ctlpath, "bad", "add", "9")
    h.pwrite(b"\x22" * 4096, 4096)
    ok(h.pread(4096, 4096) == b"\x22" * 4096,
       "%s: a whole-sector write repairs it" % name)
    ctl(ctlpath, "bad", "add", "9,17-18")
    rc, out, _ = ctl(ctlpath, "bad", "list")
    ok(out == "8-23\n", "%s: bad add 9,17-18 merges into 8-23: %r" % (name, out))
    h.zero(8192, 4096)
    ok(h.pread(8192, 4096) == b"\0" * 8192, "%s: a whole-sector zero repairs "
       "them" % name)
    ctl(ctlpath, "bad", "add", "8-15")
    h.trim(4096, 4096)
    ok(errno_name(lambda: h.pread(4096, 4096)) == 0,
       "%s: a whole-sector trim repairs it" % name)
    rc, out, _ = ctl(ctlpath, "stats")
    doc = json.loads(out)
    r, w = doc["ops"]["read"], doc["ops"]["write"]
    ok(r["bad_sector_errors"] == 9 and w["bad_sector_errors"] == 1 and
       w["bad_sectors_cleared"] == 1 and
       doc["ops"]["zero"]["bad_sectors_cleared"] == 2 and
       doc["ops"]["trim"]["bad_sectors_cleared"] == 1,
       "%s: stats count the failures and the repairs" % name)
    h.shutdown()


def control(name, srv, ctlpath):
    st = os.stat(ctlpath)
    ok(stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600,
       "%s: the control socket has mode 0600" % name)
    rc, out, _ = ctl(ctlpath, "status")
    kv = dict(l.split("=", 1) for l in out.splitlines())
    ok(rc == 0 and kv.get("geometry", "").startswith("512e") and
       kv.get("write-cache") == "true" and kv.get("power-cuts") == "0",
       "%s: status: %s" % (name, out.replace("\n", " ")))
    for words, why in ((["frobnicate"], "unknown command"),
                       (["bad", "add", "x"], "must be LBA"),
                       (["bad", "add", "5-2"], "must be LBA"),
                       (["bad", "add", "99999999"], "the last LBA"),
                       (["bad"], "usage"),
                       (["power-cut", "torn=maybe"], "torn=maybe"),
                       (["power-cut", "now"], "usage"),
                       (["stats", "please"], "unknown command")):
        rc, out, err = ctl(ctlpath, *words)
        ok(rc == 1 and why in err and len(err.splitlines()) == 1,
           "%s: '%s' refused in one line: %s" % (name, " ".join(words),
                                                 err.strip()))
    ans = raw(ctlpath, b"x" * 10000 + b"\nstatus\n")
    ok(ans.startswith("error: line too long"),
       "%s: a line too long is refused" % name)
    ans = raw(ctlpath, b"\n")
    ok(ans.startswith("error: empty command"), "%s: an empty line too" % name)
    rc, out, _ = ctl(ctlpath, "bad", "list")
    ok(rc == 0 and out == "", "%s: bad commands changed nothing" % name)


def power_cut(name, srv, ctlpath, plugin):
    old = connect(srv.uri)
    old.pwrite(b"\x33" * 4096, 0)
    old.flush()
    old.pwrite(b"\x44" * 512, 512)       # unflushed: reverts with torn=none
    rc, out, _ = ctl(ctlpath, "power-cut", "torn=none")
    rep = json.loads(out)
    secs = rep["sectors"]
    if not ok(rc == 0 and rep["torn"] == "none" and len(secs) == 1 and
       secs[0]["lba"] == 0 and secs[0]["lbas"] == 8 and
       secs[0]["outcome"] == "reverted",
       "%s: power-cut: the report names physical sector 0, LBAs 0-7, "
       "reverted" % name):
        diag("rc %d: %r %r" % (rc, rep, secs))
    if plugin:
        ok(errno_name(lambda: old.pread(512, 0)) == "EIO",
           "%s: the connection from before the cut gets EIO" % name)
    else:
        gone = False
        for _ in range(100):
            try:
                old.pread(512, 0)
            except nbd.Error:
                gone = True
                break
            time.sleep(0.05)
        ok(gone, "%s: the connection from before the cut is dropped" % name)
    new = connect(srv.uri)
    ok(new.pread(4096, 0) == b"\x33" * 4096,
       "%s: a new connection sees the flushed data, not the unflushed" % name)
    rc, out, _ = ctl(ctlpath, "status")
    ok("power-cuts=1" in out, "%s: status counts the cut" % name)
    new.shutdown()


def cut_after(name, srv, report):
    h = connect(srv.uri)
    h.pwrite(b"\x55" * 4096, 0)
    h.pwrite(b"\x66" * 4096, 4096)
    got = errno_name(lambda: h.pwrite(b"\x77" * 512, 8192))
    ok(got == "EIO", "%s: power-cut-after=3: the third write fails with EIO "
       "(%s)" % (name, got))
    ok(errno_name(lambda: h.pread(512, 0)) != 0,
       "%s: ... and the connection is cut off" % name)
    new = connect(srv.uri)
    ok(new.pread(4096, 0) == b"\x55" * 4096 and
       new.pread(4096, 4096) == b"\x66" * 4096 and
       new.pread(4096, 8192) == bytes(4096),
       "%s: a new connection sees the first two writes, not the cut one"
       % name)
    with open(report) as f:
        rep = json.load(f)
    ok(rep["trigger"] == "power-cut-after" and
       [(x["lba"], x["outcome"]) for x in rep["sectors"]] == [(16, "reverted")],
       "%s: the report names the cut write's physical sector (LBAs 16-23)"
       % name)
    new.shutdown()


def per_export(name, srv):
    """Fault keys are an export's own: a cut of one leaves the other's
    connections, opened before it, working."""
    base, query = srv.uri.split("?", 1) if "?" in srv.uri else (srv.uri, "")
    uri = lambda export: base + export + ("?" + query if query else "")
    plain, cut = connect(uri("plain")), connect(uri("cut"))
    plain.pwrite(b"\x11" * 4096, 0)
    cut.pwrite(b"\x55" * 4096, 0)
    cut.pwrite(b"\x66" * 4096, 4096)
    got = errno_name(lambda: cut.pwrite(b"\x77" * 4096, 8192))
    ok(got == "EIO", "%s: export cut, power-cut-after=3: the third write "
       "fails with EIO (%s)" % (name, got))
    ok(errno_name(lambda: cut.pread(512, 0)) != 0,
       "%s: ... and that connection is cut off" % name)
    plain.pwrite(b"\x22" * 4096, 4096)
    ok(plain.pread(8192, 0) == b"\x11" * 4096 + b"\x22" * 4096,
       "%s: export plain (no fault keys): its connection from before the "
       "cut goes on" % name)
    plain.shutdown()


def main():
    for name, make, plugin in front_ends():
        import tempfile
        d = tempfile.mkdtemp(prefix="sect4k-faults.")
        ctlpath = os.path.join(d, "ctl")
        with make("size=1M", "model=512e", "bad-sectors=9",
                  "control=" + ctlpath) as srv:
            bad_sectors(name, srv, ctlpath)
        ok(not os.path.exists(ctlpath), "%s: the socket is gone at exit"
           % name)
        with make("size=1M", "model=512e", "write-cache=true",
                  "control=" + ctlpath) as srv:
            control(name, srv, ctlpath)
            power_cut(name, srv, ctlpath, plugin)
            diag(srv.log()[-2000:]) if False else None
        report = os.path.join(d, "cut.json")
        with make("size=1M", "model=512e", "power-cut-after=3", "torn=none",
                  "cut-report=" + report) as srv:
            cut_after(name, srv, report)
        os.unlink(report)
        # plain first: the default export, the one a front end that took
        # the first export's keys for all would get right.
        with make("size=1M", "model=512e", "export=plain", "export=cut",
                  "power-cut-after=3", "torn=none") as srv:
            per_export(name, srv)
        os.rmdir(d)
    done_testing()


main()
