#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""sect4k-server over the file store (file=): what one server wrote, a
second one started on the same file reads back, and the file holds it
at the same offsets (the engine's RMW included)."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import ok, diag, done_testing, need_nbd  # noqa: E402
import srvlib  # noqa: E402
from srvlib import Server  # noqa: E402

nbd = need_nbd()
srvlib.need_server()

d = tempfile.mkdtemp(prefix="sect4k-file.")
img = os.path.join(d, "disk.img")
with open(img, "wb") as f:
    f.truncate(16 << 20)
data = os.urandom(8192)
with Server("file=" + img, "model=512e-xp") as srv:
    h = nbd.NBD()
    h.connect_uri(srv.uri)
    ok(h.get_size() == 16 << 20, "the size comes from the file")
    h.pwrite(data, 4096)
    h.pwrite(b"\x5a" * 512, 512, nbd.CMD_FLAG_FUA)   # RMW of the short sector 0
    h.flush()
    h.shutdown()
    st = srv.stop()
    ok(st == 0, "server exited cleanly (%s)" % st)
    ok("file=" + img in srv.log(), "the log names the store")
    if st:
        diag(srv.log())
with open(img, "rb") as f:
    content = f.read()
ok(content[4096:12288] == data and content[512:1024] == b"\x5a" * 512 and
   content[:512] == bytes(512), "the file holds the writes at their offsets")
with Server("file=" + img, "model=512e-xp", options=["-r"]) as srv:
    h = nbd.NBD()
    h.connect_uri(srv.uri)
    ok(h.pread(8192, 4096) == data and h.pread(512, 512) == b"\x5a" * 512,
       "a second server (read-only) reads them back")
    h.shutdown()
os.unlink(img)
os.rmdir(d)
done_testing()
