# SPDX-License-Identifier: BSD-3-Clause
"""Named exports (issue 13), the same checks for both front ends: one
server with exports=512n,512e,512e-xp,4kn; nbdinfo --list shows the four
with their block sizes and descriptions; libnbd connections to each see
their geometry; writes to one never show in another; RMW statistics are
counted per export (statsfile per export, stats= summaries); an unknown
name gets NBD_REP_ERR_UNKNOWN naming the exports; without export=, the
single unnamed export is as before.  Refusals are in the params tests.

run(start, raw) is called by tests/plugin/exports.t and
tests/server/exports.t: start(*args) returns a started server context
manager (uri, log(), stop()); raw(srv) a plain socket to it, or None."""
import json
import os
import socket
import struct
import subprocess
import tempfile

from tap import ok, diag, done_testing

# name: (logical, physical, alignment offset, description prefix)
PRESETS = {
    "512n": (512, 512, 0, "512n: logical 512, physical 512, alignment offset 0"),
    "512e": (512, 4096, 0, "512e: logical 512, physical 4096, alignment offset 0"),
    "512e-xp": (512, 4096, 3584,
                "512e: logical 512, physical 4096, alignment offset 3584 "
                "(lowest aligned LBA 7)"),
    "4kn": (4096, 4096, 0, "4kn: logical 4096, physical 4096, alignment offset 0"),
}
ORDER = ["512n", "512e", "512e-xp", "4kn"]
SIZE = 4 << 20
# Physical sectors the writes below read-modify-write, per export:
# [0, 4096) then [512, 4608) (logical 512 only).  512e: the first is
# aligned, the second cuts two sectors.  512e-xp (boundaries at 3584 +
# k*4096): the first covers the short sector 0 whole and cuts the next,
# the second cuts both.
RMW = {"512n": 0, "512e": 2, "512e-xp": 3, "4kn": 0}

REP_ERR_UNKNOWN = (1 << 31) + 6


def uri_for(uri, name):
    # nbd+unix:///?socket=S -> nbd+unix:///NAME?socket=S
    return uri.replace(":///?", ":///%s?" % name, 1)


def unknown_reply(s):
    """NBD_OPT_GO for 'nope' on a raw socket: (reply type, message)."""
    magic, opt, flags = struct.unpack(">QQH", s.recv(18, socket.MSG_WAITALL))
    s.sendall(struct.pack(">I", 3))
    name = b"nope"
    data = struct.pack(">I", len(name)) + name + struct.pack(">H", 0)
    s.sendall(struct.pack(">QII", opt, 7, len(data)) + data)
    _, _, typ, length = struct.unpack(">QIII", s.recv(20, socket.MSG_WAITALL))
    msg = s.recv(length, socket.MSG_WAITALL) if length else b""
    return typ, msg.decode(errors="replace")


def run(start, raw, what):
    import nbd
    try:
        import jsonschema
    except ImportError:
        jsonschema = None
    tmp = tempfile.mkdtemp(prefix="sect4k-exports.")
    stats = os.path.join(tmp, "stats.json")
    with start("size=4M", "exports=512n,512e,512e-xp,4kn",
               "statsfile=" + stats, "stats=true") as srv:
        out = subprocess.run(["nbdinfo", "--list", "--json", srv.uri],
                             capture_output=True, text=True, timeout=60)
        listed = json.loads(out.stdout)["exports"] if out.returncode == 0 \
            else []
        names = [e.get("export-name") for e in listed]
        ok(names == ORDER, "%s: nbdinfo --list shows the four exports in "
           "order (%s)" % (what, names))
        for e in listed:
            L, P, A, desc = PRESETS.get(e.get("export-name"), (0, 0, 0, "?"))
            ok(e.get("block_size_minimum") == L and
               e.get("block_size_preferred") == P and
               e.get("description", "").startswith(desc) and
               e.get("export-size") == SIZE,
               "%s: --list: %s has minimum %s, preferred %s, '%s'"
               % (what, e.get("export-name"), e.get("block_size_minimum"),
                  e.get("block_size_preferred"), e.get("description")))

        handles = {}
        for name in ORDER:
            L, P, A, desc = PRESETS[name]
            h = nbd.NBD()
            h.set_export_name(name)
            h.set_full_info(True)
            h.connect_uri(uri_for(srv.uri, name))
            handles[name] = h
            ok(h.get_block_size(nbd.SIZE_MINIMUM) == L and
               h.get_block_size(nbd.SIZE_PREFERRED) == P and
               h.get_size() == SIZE and
               h.get_export_description().startswith(desc),
               "%s: libnbd on %s sees logical %d, physical %d (%s)"
               % (what, name, h.get_block_size(nbd.SIZE_MINIMUM),
                  h.get_block_size(nbd.SIZE_PREFERRED),
                  h.get_export_description()))

        h = nbd.NBD()
        h.set_full_info(True)
        h.connect_uri(srv.uri)
        ok(h.get_block_size(nbd.SIZE_MINIMUM) == 512 and
           h.get_block_size(nbd.SIZE_PREFERRED) == 512 and
           h.get_canonical_export_name() in ("512n", ""),
           "%s: the empty name is the first export, 512n (canonical '%s')"
           % (what, h.get_canonical_export_name()))
        h.shutdown()

        for i, name in enumerate(ORDER):
            handles[name].pwrite(bytes([0x41 + i]) * 4096, 0)
            if PRESETS[name][0] == 512:
                handles[name].pwrite(bytes([0x61 + i]) * 4096, 512)
        for i, name in enumerate(ORDER):
            if PRESETS[name][0] == 512:
                want = bytes([0x41 + i]) * 512 + bytes([0x61 + i]) * 4096
            else:
                want = bytes([0x41 + i]) * 4096
            got = handles[name].pread(8192, 0)
            ok(got == want + bytes(8192 - len(want)),
               "%s: %s reads back only its own writes" % (what, name))
        for h in handles.values():
            h.shutdown()

        h = nbd.NBD()
        h.set_export_name("nope")
        try:
            h.connect_uri(uri_for(srv.uri, "nope"))
            failed = False
        except nbd.Error:
            failed = True
        ok(failed, "%s: libnbd cannot connect to an unknown export" % what)
        s = raw(srv)
        typ, msg = unknown_reply(s)
        s.close()
        ok(typ == REP_ERR_UNKNOWN, "%s: NBD_OPT_GO 'nope' gets "
           "NBD_REP_ERR_UNKNOWN (%#x)" % (what, typ))
        names_msg = "no export named 'nope' (exports: 512n, 512e, 512e-xp, 4kn)"
        ok(names_msg in msg or names_msg in srv.log(),
           "%s: the message names the exports (client: '%s')" % (what, msg))
        status = srv.stop()
        ok(status == 0, "%s: exits cleanly (%s)" % (what, status))
        log = srv.log()

    schema = None
    if jsonschema:
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                               "..", "docs", "stats.schema.json")) as f:
            schema = json.load(f)
    for name in ORDER:
        path = os.path.join(tmp, "stats.%s.json" % name)
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            ok(False, "%s: statsfile of %s: %s" % (what, name, e))
            continue
        w = doc["ops"]["write"]
        writes = 2 if PRESETS[name][0] == 512 else 1
        ok(doc.get("export") == name and w["requests"] == writes and
           w["rmw_sectors"] == RMW[name] and
           doc["geometry"]["physical"] == PRESETS[name][1],
           "%s: %s counts its own %d writes and %d RMWs (%s, %s RMWs)"
           % (what, os.path.basename(path), writes, RMW[name],
              w["requests"], w["rmw_sectors"]))
        if schema:
            try:
                jsonschema.validate(doc, schema)
                err = None
            except jsonschema.ValidationError as e:
                err = e.message
            ok(err is None, "%s: %s validates against the schema (%s)"
               % (what, os.path.basename(path), err))
    ok(not os.path.exists(stats), "%s: no combined %s" % (what, stats))
    for name in ORDER:
        ok("sect4k statistics of export %s:" % name in log,
           "%s: stats= prints a summary naming export %s" % (what, name))

    # Without export=: the one unnamed export, as before.
    with start("size=1M", "model=4kn", "statsfile=" + stats) as srv:
        out = subprocess.run(["nbdinfo", "--list", "--json", srv.uri],
                             capture_output=True, text=True, timeout=60)
        listed = json.loads(out.stdout)["exports"] if out.returncode == 0 \
            else []
        ok([e.get("export-name") for e in listed] == [""] and
           listed[0].get("block_size_minimum") == 4096,
           "%s: without export=, --list shows one unnamed 4kn export (%s)"
           % (what, [e.get("export-name") for e in listed]))
        srv.stop()
    with open(stats) as f:
        doc = json.load(f)
    ok("export" not in doc, "%s: the single export's statsfile has no "
       "'export' field" % what)

    subprocess.run(["rm", "-rf", tmp])
    diag("done")
    done_testing()
