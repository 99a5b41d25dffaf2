#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""nbdkit-sect4k-filter with write-cache=true over nbdkit's file plugin:
a clean shutdown writes the volatile cache back into the plugin's file,
as a drive flushes its cache on a clean power-down (issue 21 item 4).

Each case writes without flush or FUA (partial first and last physical
sectors: RMW in the cache), checks that the file does not hold the data
yet, ends cleanly and finds the data in the file: SIGTERM after the
client left; SIGTERM with a client still connected (nbdkit 1.32 exits
when it leaves); --run (nbdkit exits
when its command does); -s (one connection on stdin/stdout, nbdkit exits
when it ends); two connections sharing the one cache, the first leaving
while the second stays; nbdkit -r exits without an error; and a power
cut from the control socket writes what it keeps into the file."""
import json
import os
import shlex
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import (Nbdkit, ok, diag, skip, skip_all, need_nbd, done_testing,
                 sanitizer_env)

nbd = need_nbd()
FILTER = os.environ.get("SECT4K_FILTER") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "sect4k-filter.so")
if not os.path.exists(FILTER):
    skip_all(FILTER + " is not built")

OFF, LEN = 1048576 + 512, 65536
KEYS = ["model=512e", "write-cache=true"]
tmp = tempfile.mkdtemp(prefix="sect4k-test.")
img = os.path.join(tmp, "disk.img")


def fresh():
    with open(img, "wb") as f:
        f.truncate(16 << 20)


def pattern(tag):
    tag = tag.encode()
    return (tag * (LEN // len(tag) + 1))[:LEN]


def write(h, tag):
    h.pwrite(pattern(tag), OFF)


def in_file(tag):
    with open(img, "rb") as f:
        f.seek(OFF)
        return f.read(LEN) == pattern(tag)


def serve():
    return Nbdkit(img, *KEYS, options=["--filter=" + FILTER],
                  plugin="file")


def connect(uri):
    h = nbd.NBD()
    h.connect_uri(uri)
    return h


def clean(st):
    return st in (0, -15, 143)


# 1. SIGTERM after the client left.
fresh()
with serve() as srv:
    h = connect(srv.uri)
    write(h, "one")
    h.shutdown()
    del h
    ok(not in_file("one"), "the written data is in the cache, not in the file")
    st = srv.stop()
    ok(clean(st) and in_file("one"),
       "SIGTERM after the client left: nbdkit exited (%d), the file holds "
       "the data" % st)
    ok("error" not in srv.log(), "no error at shutdown")
    if not in_file("one"):
        diag(srv.log())

# 2. SIGTERM with a client still connected: nbdkit 1.32 waits for it to
# leave, then exits.
fresh()
with serve() as srv:
    h = connect(srv.uri)
    write(h, "two")
    srv.proc.send_signal(15)
    try:
        srv.proc.wait(timeout=0.5)
    except subprocess.TimeoutExpired:
        pass
    if srv.proc.poll() is None:
        ok(not in_file("two"), "SIGTERM with a client connected: the data "
           "is still in the cache")
    else:
        skip("SIGTERM with a client connected: the data is still in the "
             "cache", "nbdkit did not wait for the client")
    h.shutdown()
    del h
    st = srv.stop()
    ok(clean(st) and in_file("two"),
       "SIGTERM, then the client left: nbdkit exited (%d), the file holds "
       "the data" % st)

# 3. --run: nbdkit exits when its command does.  The command writes, then
# checks that the file does not hold the data yet.
fresh()
script = ("import nbd, os, sys\n"
          "h = nbd.NBD(); h.connect_uri(sys.argv[1])\n"
          "tag = b'three'; data = (tag * (%d // len(tag) + 1))[:%d]\n"
          "h.pwrite(data, %d); h.shutdown()\n"
          "f = open(%r, 'rb'); f.seek(%d)\n"
          "sys.exit(1 if f.read(%d) == data else 0)\n"
          % (LEN, LEN, OFF, img, OFF, LEN))
if os.environ.get("SECT4K_SAN") == "tsan":
    skip("--run", "TSan's runtime, preloaded into nbdkit, crashes the "
         "shell that runs the command")
else:
    run = subprocess.run(
        ["nbdkit", "-U", "-", "--filter=" + FILTER, "file", img] + KEYS
        + ["--run", "env -u LD_PRELOAD /usr/bin/python3 -c "
           + shlex.quote(script) + ' "$uri"'],
        env=dict(os.environ, **sanitizer_env()),
        capture_output=True, text=True, timeout=60)
    ok(run.returncode == 0 and in_file("three"),
       "--run: not in the file while served, in it after nbdkit exited (%d)"
       % run.returncode)
    if run.returncode:
        diag(run.stdout + run.stderr)

# 4. -s: the one connection on stdin/stdout; libnbd waits for nbdkit to
# exit when it closes the handle.
fresh()
env = sanitizer_env()
h = nbd.NBD()
h.connect_command(["env"] + ["%s=%s" % kv for kv in env.items()]
                  + ["nbdkit", "-s", "--exit-with-parent",
                     "--filter=" + FILTER, "file", img] + KEYS)
write(h, "four")
cached = not in_file("four")
h.shutdown()
del h
ok(cached and in_file("four"),
   "-s: in the cache while connected, in the file after the client left")

# 5. Two connections share one cache: the first writes and leaves; the
# second still reads the data from the cache, and nothing is written
# back while it is connected; all of it is after the second leaves and
# nbdkit ends.
fresh()
with serve() as srv:
    a, b = connect(srv.uri), connect(srv.uri)
    write(a, "five")
    a.shutdown()
    del a
    ok(b.pread(LEN, OFF) == pattern("five") and not in_file("five"),
       "two connections: the first left, the second reads its data from "
       "the cache, not yet in the file")
    b.shutdown()
    del b
    st = srv.stop()
    ok(clean(st) and in_file("five"),
       "two connections: after both left and SIGTERM (%d), the file holds "
       "the data" % st)

# 6. nbdkit -r: nothing can be dirty, and the plugin is not opened
# writable at shutdown.
fresh()
with Nbdkit(img, *KEYS, options=["-r", "--filter=" + FILTER],
            plugin="file") as srv:
    h = connect(srv.uri)
    h.pread(LEN, OFF)
    h.shutdown()
    del h
    st = srv.stop()
    ok(clean(st) and "error" not in srv.log(),
       "nbdkit -r: a clean exit (%d), no error" % st)
    if "error" in srv.log():
        diag(srv.log())

# 7. A power cut from the control socket (its own thread, outside any
# request) reaches the plugin: the file holds what the cut's report
# says each dirty sector kept (all, none, or the torn sector's new
# logical sectors).
fresh()
ctl = os.path.join(tmp, "ctl")
CTL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                   "scripts", "sect4k-ctl")
with Nbdkit(img, *KEYS, "control=" + ctl, "seed=1",
            options=["--filter=" + FILTER], plugin="file") as srv:
    h = connect(srv.uri)
    for i in range(16):
        h.pwrite(b"\x77" * 4096, i * 4096)
    cut = subprocess.run(["/usr/bin/python3", CTL, ctl, "power-cut",
                          "torn=sector"], capture_output=True, text=True)
    want = bytearray(16 * 4096)
    try:
        report = json.loads(cut.stdout)
        for sec in report["sectors"]:
            new = {"kept": range(sec["lba"], sec["lba"] + 8),
                   "torn": sec.get("new_lbas", [])}.get(sec["outcome"], [])
            for lba in new:
                want[lba * 512:(lba + 1) * 512] = b"\x77" * 512
        outcomes = report["outcomes"]
    except (ValueError, KeyError):
        outcomes = None
    with open(img, "rb") as f:
        have = f.read(16 * 4096)
    ok(cut.returncode == 0 and outcomes and outcomes["kept"] > 0 and
       have == bytes(want),
       "a power cut from the control socket: the file holds what the "
       "report kept (%s)" % outcomes)
    if cut.returncode:
        diag(cut.stdout + cut.stderr)
    del h

subprocess.run(["rm", "-rf", tmp])
done_testing()
