#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""statsfile= (periodic and at exit, atomically, valid against the schema),
stats=true (summary on stderr), scripts/sect4k-stats (table and plot)."""
import json
import os
import subprocess
import sys
import tempfile
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, ".."))
from tap import ok, diag, skip_all, done_testing, Nbdkit  # noqa: E402

try:
    import nbd
    import jsonschema
except ImportError as e:
    skip_all("missing Python module: %s" % e.name)

top = os.path.join(here, "..", "..")
with open(os.path.join(top, "docs", "stats.schema.json")) as f:
    schema = json.load(f)
tmp = tempfile.mkdtemp(prefix="sect4k-stats.")
path = os.path.join(tmp, "stats.json")

with Nbdkit("size=64M", "model=512e-xp", "statsfile=" + path,
            "stats-interval=1", "stats=true") as srv:
    h = nbd.NBD()
    h.connect_uri(srv.uri)
    for i in range(100):
        h.pwrite(b"x" * 4096, i * 4096)          # every one cuts a sector
    h.pwrite(b"y" * 4096, 3584)                 # physically aligned
    h.pread(4096, 4096)
    time.sleep(2.5)
    ok(os.path.exists(path), "statsfile written while running (stats-interval=1)")
    with open(path) as f:
        mid = json.load(f)
    ok(mid["ops"]["write"]["requests"] == 101,
       "the periodic file counts the writes so far (%d)" % mid["ops"]["write"]["requests"])
    h.zero(512, 512)
    h.shutdown()
    status = srv.stop()
    ok(status == 0, "nbdkit exited cleanly (%s)" % status)
    log = srv.log()

with open(path) as f:
    doc = json.load(f)
try:
    jsonschema.validate(doc, schema)
    valid = None
except jsonschema.ValidationError as e:
    valid = e.message
ok(valid is None, "the JSON validates against docs/stats.schema.json (%s)" % valid)
w = doc["ops"]["write"]
# On 512e-xp a 4 KiB write at a multiple of 4096 straddles the boundary
# at +3584 and cuts two sectors -- except the first, at 0, which covers
# the short sector 0 [0, 3584) whole: 1 + 99 * 2 = 199 RMWs.
ok(w["requests"] == 101 and w["aligned_physical"] == 1 and
   w["aligned_logical"] == 100 and w["rmw_sectors"] == 199 and
   w["store_write_bytes"] == 3584 + 4096 + 99 * 8192 + 4096,
   "final counts: 101 writes, 199 RMWs, store bytes (%s)" % {k: w[k] for k in ("requests", "aligned_physical", "aligned_logical", "rmw_sectors", "store_write_bytes")})
ok(doc["ops"]["zero"]["requests"] == 1 and doc["ops"]["read"]["extra_sectors"] == 1,
   "the zero at exit and the 2-sector read are counted")
ok(doc["write_amplification"] > 1.5,
   "write amplification %.2f (each cut write also rewrites a neighbour)" % doc["write_amplification"])
ok(not [f for f in os.listdir(tmp) if ".tmp." in f], "no temporary files left behind")
ok("sect4k statistics: 512e: logical 512, physical 4096, alignment offset 3584" in log
   and "write amplification" in log, "stats=true printed the summary on stderr")
if "write amplification" not in log:
    diag(log)

# Without -f nbdkit forks into the background after loading the plugin:
# the periodic saver must run in the daemon, not die with the parent.
from tap import PLUGIN, sanitizer_env  # noqa: E402
dpath = os.path.join(tmp, "daemon.json")
pidfile = os.path.join(tmp, "daemon.pid")
env = dict(os.environ, **sanitizer_env())
subprocess.run(["nbdkit", "-U", os.path.join(tmp, "d.sock"), "-P", pidfile, PLUGIN,
                "size=1M", "statsfile=" + dpath, "stats-interval=1"], env=env, check=True)
time.sleep(2.5)
ok(os.path.exists(dpath), "the periodic statsfile is written by a daemonised nbdkit too")
with open(pidfile) as f:
    os.kill(int(f.read()), 15)

tool = os.path.join(top, "scripts", "sect4k-stats")
png = os.path.join(tmp, "align.png")
r = subprocess.run([tool, path, "--plot", png], capture_output=True, text=True)
ok(r.returncode == 0 and "rmw-sect" in r.stdout and "+0: 1, +512: 100" in r.stdout,
   "sect4k-stats prints the table")
diag(r.stdout + r.stderr)
with open(png, "rb") as f:
    magic = f.read(8) if os.path.exists(png) else b""
ok(magic == b"\x89PNG\r\n\x1a\n", "sect4k-stats --plot draws a PNG")
r = subprocess.run([tool, "/nonexistent.json"], capture_output=True, text=True)
ok(r.returncode == 1 and r.stderr.count("\n") == 1, "a missing file: one line, exit 1")
subprocess.run(["rm", "-rf", tmp])
done_testing()
