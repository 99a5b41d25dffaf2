#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""write-log= through both front ends (nbdkit plugin, sect4k-server on the
memory and the file store): a libnbd workload (writes, FUA, zero, trim,
flush, an unaligned write, a mark through sect4k-ctl) gives the expected
entries in order, read here with an independent parser of dm-log-writes'
format and with the engine's reader (sect4k-wlog-dump); replaying the log
onto a zeroed image gives the device's final content byte for byte.  Bad
input: write-log= on an unwritable path is one clear line and exit.
strict=false on 4Kn: unaligned requests are logged as the whole logical
sectors the device changed (the log's sectorsize is the logical sector
size), which sect4k-crash reads and replays to the device's bytes."""
import os
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import ok, diag, done_testing, Nbdkit, need_nbd, sanitizer_env  # noqa: E402
from srvlib import Server, SERVER  # noqa: E402

nbd = need_nbd()
TOP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
CTL = os.path.join(TOP, "scripts", "sect4k-ctl")
CRASH = os.path.join(TOP, "scripts", "sect4k-crash")
DUMP = os.path.join(os.environ.get("SECT4K_BUILD", os.path.join(TOP, "build",
                                                                "default")),
                    "sect4k-wlog-dump")
SIZE = 1 << 20
MAGIC = 0x6a736677736872
FLUSH, FUA, DISCARD, MARK, ZERO = 1, 2, 4, 8, 1 << 16


def parse(path):
    """(nr_entries, [(flags, off, len, data or mark name)]): the format as
    Linux's dm-log-writes lays it out, written out here independently."""
    with open(path, "rb") as f:
        raw = f.read()
    magic, version, nr, ss = struct.unpack_from("<QQQI", raw, 0)
    assert magic == MAGIC and version == 1, (magic, version)
    pos, out = ss, []
    for _ in range(nr):
        sector, nsect, flags, dlen = struct.unpack_from("<QQQQ", raw, pos)
        if flags & MARK:
            out.append((flags, 0, 0, raw[pos + 32:pos + 32 + dlen].decode()))
            pos += ss
            continue
        n = nsect * ss
        data = b"" if flags & DISCARD else raw[pos + ss:pos + ss + n]
        out.append((flags, sector * ss, n, data))
        pos += ss + len(data)
    return nr, out


def replay(entries):
    """The device's content rebuilt from the log: writes, zeroes; a trim
    reads back as zeroes on sect4k's stores."""
    img = bytearray(SIZE)
    for flags, off, n, data in entries:
        if flags & MARK:
            continue
        img[off:off + n] = bytes(n) if flags & DISCARD else data
    return bytes(img)


def workload(h, ctlpath):
    h.pwrite(b"a" * 4096, 8192)                          # whole sector
    h.pwrite(b"b" * 512, 1024, nbd.CMD_FLAG_FUA)         # RMW, FUA
    h.zero(8192, 65536)
    h.trim(16384 + 512, 131072)          # the whole sectors within it
    h.trim(512, 4096 + 512)              # inside one sector: nothing
    h.flush()
    r = subprocess.run([CTL, ctlpath, "mark", "after-flush"],
                       capture_output=True, text=True, timeout=60)
    h.pwrite(b"c" * 100, 3000)                           # off 512 sectors
    h.pwrite(os.urandom(12288), 200704, nbd.CMD_FLAG_FUA)
    return r.returncode


# (flags, off, len) of what the workload above gives, in order.
EXPECTED = [
    (MARK, 0, 0),             # the geometry: a plain mark (replay-log)
    (0, 8192, 4096),
    (FUA, 1024, 512),
    (ZERO, 65536, 8192),
    (DISCARD, 131072, 16384),
    (FLUSH, 0, 0),
    (MARK, 0, 0),
    (0, 2560, 1024),          # [3000, 3100) widened to 512-byte sectors
    (FUA, 200704, 12288),
]


def check(name, start):
    d = tempfile.mkdtemp(prefix="sect4k-wlog.")
    log, ctlpath = os.path.join(d, "log"), os.path.join(d, "ctl")
    args = ("size=%d" % SIZE, "model=512e", "strict=false",
            "write-log=" + log, "control=" + ctlpath)
    with start(*args) as srv:
        h = nbd.NBD()
        h.set_strict_mode(0)            # let the unaligned write through
        h.connect_uri(srv.uri)
        ok(workload(h, ctlpath) == 0, "%s: sect4k-ctl mark" % name)
        final = h.pread(SIZE, 0)
        h.shutdown()
        srv.stop()
    nr, entries = parse(log)
    got = [(f, o, n) for f, o, n, _ in entries]
    # sect4k-server flushes when the client disconnects: a last flush.
    if not ok(got[:len(EXPECTED)] == EXPECTED and
              all(e == (FLUSH, 0, 0) for e in got[len(EXPECTED):]),
              "%s: the entries, in order" % name):
        diag("got %s" % got)
    ok(entries[0][3].startswith("sect4k-geometry size=1048576 logical=512 "
                                "physical=4096 alignment=0"),
       "%s: the geometry entry: %s" % (name, entries[0][3]))
    ok(entries[6][3] == "after-flush", "%s: the mark's name" % name)
    ok(replay(entries) == final,
       "%s: replaying the log onto zeroes gives the device's content" % name)
    p = subprocess.run([DUMP, log, "--summary"], capture_output=True,
                       text=True)
    ok(p.returncode == 0 and p.stdout.startswith(
        "entries=%d writes=5 zeros=1 discards=1 flushes=%d fua=2 atomic=0 "
        "marks=2 "
        % (nr, nr - 8)),
       "%s: the engine's reader agrees: %s" % (name, p.stdout.strip()
                                              or p.stderr.strip()))


check("nbdkit", lambda *a: Nbdkit(*a))
check("sect4k-server", lambda *a: Server(*a))
check("sect4k-server file store", lambda *a: Server(*a, file_store=True))

def unaligned_4kn(name, start):
    """Issue 29 item 6: a 1000-byte write at 5000 on 4Kn, strict=false,
    was logged as [4608, 6144) and sect4k-crash refused the log."""
    d = tempfile.mkdtemp(prefix="sect4k-wlog.")
    log = os.path.join(d, "log")
    with start("size=%d" % SIZE, "model=4kn", "strict=false",
               "write-log=" + log) as srv:
        h = nbd.NBD()
        h.set_strict_mode(0)
        h.connect_uri(srv.uri)
        h.pwrite(b"x" * 8192, 4096)
        h.pwrite(b"y" * 1000, 5000)
        h.zero(300, 6500)
        h.flush()
        final = h.pread(SIZE, 0)
        h.shutdown()
        srv.stop()
    with open(log, "rb") as f:
        ss = struct.unpack_from("<QQQI", f.read(28))[3]
    nr, entries = parse(log)
    got = [(f, o, n) for f, o, n, _ in entries[1:4]]
    ok(ss == 4096 and got == [(0, 4096, 8192), (0, 4096, 4096),
                              (ZERO, 4096, 4096)],
       "%s, 4Kn strict=false: sectorsize %d, whole logical sectors: %s"
       % (name, ss, got))
    after_write = b"x" * 904 + b"y" * 1000 + b"x" * 2192
    ok(entries[2][3] == after_write and entries[3][3] == final[4096:8192],
       "%s, 4Kn strict=false: each entry holds the sector as the device "
       "left it" % name)
    rep = os.path.join(d, "rep.json")
    p = subprocess.run([CRASH, log, "--geometry", "4kn", "--report", rep,
                        "--", "true"], capture_output=True, text=True,
                       timeout=60)
    ok(p.returncode == 0, "%s, 4Kn strict=false: sect4k-crash reads the "
       "log: %s" % (name, (p.stdout + p.stderr).strip()[:300]))
    if p.returncode == 0:
        import json
        last = json.load(open(rep))["states"][-1]["id"]
        img = os.path.join(d, "img")
        subprocess.run([CRASH, log, "--geometry", "4kn", "--state", last,
                        "--output", img], capture_output=True, timeout=60)
        ok(os.path.exists(img) and open(img, "rb").read() == final,
           "%s, 4Kn strict=false: sect4k-crash's last state is the device"
           % name)


unaligned_4kn("nbdkit", lambda *a: Nbdkit(*a))
unaligned_4kn("sect4k-server", lambda *a: Server(*a))

# Block status on sect4k-server over an upstream (whose extents run
# asynchronously) is not a write: it was logged as one of zeroes.
d = tempfile.mkdtemp(prefix="sect4k-wlog.")
log = os.path.join(d, "log")
with Nbdkit("1M", plugin="memory") as ups, \
        Server("model=512e", "upstream=" + ups.uri, "write-log=" + log) as srv:
    h = nbd.NBD()
    h.add_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
    h.connect_uri(srv.uri)
    h.pwrite(b"a" * 4096, 8192)
    h.block_status(65536, 0, lambda *a: 0)
    h.flush()
    final = h.pread(SIZE, 0)
    h.shutdown()
    srv.stop()
nr, entries = parse(log)
got = [(f, o, n) for f, o, n, _ in entries]
ok(got[1:] and got[1] == (0, 8192, 4096) and
   all(f == FLUSH for f, _, _ in got[2:]) and replay(entries) == final,
   "sect4k-server over an upstream: block status logs nothing: %s" % got)

# Several exports: each its own log, named as statsfile= names them.
d = tempfile.mkdtemp(prefix="sect4k-wlog.")
with Server("write-log=" + os.path.join(d, "w.log"), "size=1M",
            "export=a", "export=b") as srv:
    for name in "ab":
        h = nbd.NBD()
        h.connect_uri(srv.uri.replace(":///", ":///" + name))
        h.pwrite(b"x" * 4096, 4096 if name == "a" else 8192)
        h.shutdown()
    srv.stop()
got = {n: parse(os.path.join(d, "w.%s.log" % n))[1] for n in "ab"
       if os.path.exists(os.path.join(d, "w.%s.log" % n))}
ok(len(got) == 2 and got["a"][1][1] == 4096 and got["b"][1][1] == 8192 and
   got["a"][0][3].endswith("export=a"),
   "several exports: w.a.log and w.b.log, each its export's writes")

# Bad input: one clear line, and no server.
p = subprocess.run([SERVER, "--unix", os.path.join(d, "s"), "size=1M",
                    "write-log=/nonexistent/dir/log"],
                   capture_output=True, text=True, timeout=60)
err = [l for l in p.stderr.splitlines() if "write-log" in l]
ok(p.returncode != 0 and len(err) == 1 and
   "write-log=/nonexistent/dir/log: cannot create the log: No such file"
   in err[0], "sect4k-server, unwritable write-log=: %s" % p.stderr.strip())
p = subprocess.run(["nbdkit", "-U", os.path.join(d, "s2"), "-f",
                    os.environ.get("SECT4K_PLUGIN", os.path.join(TOP,
                                                                 "sect4k.so")),
                    "size=1M", "write-log=/nonexistent/dir/log"],
                   capture_output=True, text=True, timeout=60,
                   env=dict(os.environ, **sanitizer_env()))
err = [l for l in p.stderr.splitlines() if "write-log" in l]
ok(p.returncode != 0 and len(err) == 1 and "cannot create the log" in err[0],
   "nbdkit, unwritable write-log=: %s" % p.stderr.strip())
# An atomic write (atomic-write-max=, implicit: a fitting write is one) is
# logged with S4K_WLOG_ATOMIC; sect4k-wlog-dump names the flag, as it
# names fua, and --summary counts such writes.
d = tempfile.mkdtemp(prefix="sect4k-wlog.")
log = os.path.join(d, "log")
with Nbdkit("size=%d" % SIZE, "model=512e", "atomic-write-max=16K",
            "write-log=" + log) as srv:
    h = nbd.NBD()
    h.connect_uri(srv.uri)
    h.pwrite(b"p" * 16384, 16384)                        # atomic
    h.pwrite(b"q" * 16384, 32768, nbd.CMD_FLAG_FUA)      # atomic, FUA
    h.pwrite(b"r" * 512, 512000)                         # RMW: plain
    h.shutdown()
    srv.stop()
p = subprocess.run([DUMP, log], capture_output=True, text=True)
lines = [ln.split(" ", 2)[2] for ln in p.stdout.splitlines()[2:5]]
ok(p.returncode == 0 and lines == ["atomic off=16384 len=16384",
                                   "fua,atomic off=32768 len=16384",
                                   "write off=512000 len=512"],
   "sect4k-wlog-dump names the atomic flag: %s" % (lines or p.stderr))
p = subprocess.run([DUMP, log, "--summary"], capture_output=True, text=True)
ok(p.returncode == 0 and " writes=3 " in p.stdout and
   " fua=1 atomic=2 " in p.stdout,
   "sect4k-wlog-dump --summary counts atomic writes: %s"
   % (p.stdout.strip() or p.stderr.strip()))


def stale_flush(name, make):
    """A flush from a connection opened before a power cut is refused
    (EIO), and so is not in the log: a logged flush says the writes before
    it are durable, which the cut just undid."""
    d = tempfile.mkdtemp(prefix="sect4k-wlog-cut.")
    log, ctl = os.path.join(d, "w.log"), os.path.join(d, "ctl")
    srv = make("size=1M", "model=512e", "write-cache=true",
               "write-log=" + log, "control=" + ctl)
    h = nbd.NBD()
    h.connect_uri(srv.uri)
    h.pwrite(b"s" * 4096, 0)
    cut = subprocess.run([CTL, ctl, "power-cut"], capture_output=True,
                         text=True)
    try:
        h.flush()
        err = 0
    except nbd.Error as e:
        err = e.errno
    subprocess.run([CTL, ctl, "mark", "after-stale-flush"], check=True,
                   capture_output=True)
    srv.stop()
    _, entries = parse(log)
    names = [e[3] if e[0] & MARK else ("flush" if e[0] & FLUSH and not e[2]
                                       else "write") for e in entries[1:]]
    ok(cut.returncode == 0 and err and
       names[:2] == ["write", "after-stale-flush"],
       "%s: a flush after a power cut on a connection opened before it: "
       "EIO (%s), not logged: %s" % (name, err, names))


stale_flush("nbdkit", lambda *a: Nbdkit(*a))
stale_flush("sect4k-server", lambda *a: Server(*a))
done_testing()
