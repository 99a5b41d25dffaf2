#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""Atomic writes in sect4k-crash (issue 27): the toy page store (16 KiB
pages with a checksum, rewritten in place, no doublewrite) recorded with
write-log= by sect4k-server, on 512e and 4kn.  Without atomic writes
sect4k-crash finds torn pages; with atomic-write-max=16K the log marks
every page write atomic and no state has a torn page.  xfstests'
replay-log replays the log with atomic writes to the device's image
(those checks skipped with the reason where its sources are absent)."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))
import tap  # noqa: E402
import wlogfmt  # noqa: E402
from crashlib import crash, record, build_replay_log, tmp, ROOT  # noqa: E402

PAGESTORE = os.path.join(HERE, "pagestore.py")
PAGES, ROUNDS, SIZE = 2, 1, 1 << 20
server = os.environ.get("SECT4K_SERVER", os.path.join(ROOT, "sect4k-server"))
if not os.path.exists(server):
    tap.skip_all("sect4k-server is not built")
tap.need_nbd()
# replay-log is looked for before anything runs: without it the replay
# checks are skipped with the reason and the rest still runs.
REPLAY, no_replay = build_replay_log()

atomic_logs = []
for geom in ("512e", "4kn"):
    for atomic in (False, True):
        name = "%s%s" % (geom, " atomic-write-max=16K" if atomic else "")
        log, image = record(
            "pages-%s-%d" % (geom, atomic),
            [server, "-U", "SOCK", str(SIZE), "model=" + geom,
             "write-log=LOG"] + (["atomic-write-max=16K"] if atomic else []),
            [sys.executable, PAGESTORE, "workload", str(PAGES), str(ROUNDS),
             "URI"], image=SIZE)
        writes = [e for e in wlogfmt.read_log(log) if e[3] and e[4]]
        marked = [e for e in writes if e[1] & wlogfmt.ATOMIC]
        tap.ok(len(marked) == (len(writes) if atomic else 0) and writes,
               "%s: the log marks %d of its %d writes atomic"
               % (name, len(marked), len(writes)))
        rc, out, err, rep = crash(log, geom, "--states", "12",
                                  checker=(sys.executable, PAGESTORE,
                                           "check", str(PAGES)))
        s = rep["summary"] if rep else {}
        torn = [x for x in rep["states"] if "torn pages" in
                x.get("output", "")] if rep else []
        tap.diag(out.splitlines()[0] if out else err)
        if atomic:
            atomic_logs.append((name, log, image))
            tap.ok(rc == 0 and s.get("failed") == 0 and s.get("checked"),
                   "%s: no torn page in %s states" % (name, s.get("checked")))
        else:
            tap.ok(rc == 1 and torn, "%s: torn pages found (%d of %s "
                   "states): %s" % (name, len(torn), s.get("states"),
                                    torn[0]["output"].strip()
                                    if torn else out))

for name, log, image in atomic_logs:
    desc = ("%s: replay-log replays the log with atomic writes to the "
            "device's image" % name)
    if not REPLAY:
        tap.skip(desc, no_replay)
        continue
    img = os.path.join(tmp, "replayed")
    with open(img, "wb") as f:
        f.write(bytes(SIZE))
    p = subprocess.run([REPLAY, "--log", log, "--replay", img],
                       capture_output=True, text=True, timeout=60)
    with open(img, "rb") as f:
        got = f.read()
    tap.ok(p.returncode == 0 and got == image,
           desc + ((": " + p.stderr.strip()[:200]) if p.returncode else ""))
tap.done_testing()
