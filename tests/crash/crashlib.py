# SPDX-License-Identifier: BSD-3-Clause
"""Helpers for tests/crash/*.t: the tool, the toy WAL and the schema."""
import json
import os
import subprocess
import sys
import tempfile
import time

import tap

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CRASH = os.path.join(ROOT, "scripts", "sect4k-crash")
TOYWAL = os.path.join(HERE, "toywal.py")
SCHEMA = os.path.join(ROOT, "docs", "crash-report.schema.json")
GEOMS = {"512e": (512, 4096), "4kn": (4096, 4096), "512n": (512, 512)}
SIZE = 4 << 20
tmp = tempfile.mkdtemp(prefix="sect4k-crash-test.")


def toy_log(name, mode, geom, txns=4):
    path = os.path.join(tmp, name)
    l, p = GEOMS[geom]
    subprocess.run([sys.executable, TOYWAL, "workload", mode, str(txns),
                    "--log", path, "--geometry", "%d,%d,%d" % (SIZE, l, p)],
                   check=True)
    return path


def crash(log, geom, *args, checker=("true",)):
    """(exit code, stdout, stderr, report or None)."""
    rep = os.path.join(tmp, "report.json")
    if os.path.exists(rep):
        os.unlink(rep)
    r = subprocess.run([CRASH, log, "--geometry", geom, "--report", rep]
                       + list(args) + ["--"] + list(checker),
                       capture_output=True, text=True, timeout=300)
    report = json.load(open(rep)) if os.path.exists(rep) else None
    return r.returncode, r.stdout, r.stderr, report


def valid(report):
    import jsonschema
    jsonschema.validate(report, json.load(open(SCHEMA)))
    return True


def record(name, argv, workload, image=0):
    """Runs a front end (argv: SOCK and LOG stand for its socket and log)
    and the workload (argv: URI stands for the export) on it: (the log,
    the device's first `image` bytes at the end, or None)."""
    sock = os.path.join(tmp, name + ".sock")
    log = os.path.join(tmp, name + ".log")
    env = dict(os.environ, **(tap.sanitizer_env() or {}))
    p = subprocess.Popen([a.replace("SOCK", sock).replace("LOG", log)
                          for a in argv], env=env, stderr=subprocess.DEVNULL)
    for _ in range(100):
        if os.path.exists(sock):
            break
        time.sleep(0.05)
    uri = "nbd+unix:///?socket=" + sock
    subprocess.run([a.replace("URI", uri) for a in workload], check=True)
    data = None
    if image:
        import nbd
        h = nbd.NBD()
        h.connect_uri(uri)
        data = h.pread(image, 0)
        h.shutdown()
    p.terminate()
    p.wait(30)
    return log, data


REPLAY_LOG_VAR = "SECT4K_REPLAY_LOG_SRC"


def replay_log_sources():
    """xfstests' replay-log sources (a directory holding replay-log.c):
    $SECT4K_REPLAY_LOG_SRC if set ("none" or "": look nowhere), else
    ../shared/replay-log beside the checkout.  (dir, None) or (None, the
    reason there are none); never skips, so a test can decide before it
    runs anything."""
    var = os.environ.get(REPLAY_LOG_VAR)
    if var is not None:
        if var in ("", "none"):
            return None, "%s=%s" % (REPLAY_LOG_VAR, var or '""')
        if os.path.exists(os.path.join(var, "replay-log.c")):
            return var, None
        return None, "%s=%s holds no replay-log.c" % (REPLAY_LOG_VAR, var)

    def git(*a):
        return subprocess.run(["git", "-C", ROOT] + list(a),
                              capture_output=True, text=True).stdout.strip()
    # The checkout's top, and (a git worktree) the main checkout's.
    tops = [git("rev-parse", "--show-toplevel") or ROOT]
    common = git("rev-parse", "--path-format=absolute", "--git-common-dir")
    if common:
        tops.append(os.path.dirname(common))
    cands = [os.path.normpath(os.path.join(t, "..", "shared", "replay-log"))
             for t in dict.fromkeys(tops)]
    for c in cands:
        if os.path.exists(os.path.join(c, "replay-log.c")):
            return c, None
    return None, ("no replay-log sources in %s (set %s to xfstests' "
                  "src/log-writes directory)" % (", ".join(cands),
                                                  REPLAY_LOG_VAR))


def build_replay_log():
    """replay-log built from replay_log_sources(): (path, None), or (None,
    the reason it cannot be had here)."""
    src, why = replay_log_sources()
    if not src:
        return None, why
    exe = os.path.join(os.environ.get("SECT4K_BUILD", os.path.join(
        ROOT, "build", "default")), "replay-log")
    p = subprocess.run(["cc", "-O2", "-D_GNU_SOURCE", "-o", exe,
                        os.path.join(src, "replay-log.c"),
                        os.path.join(src, "log-writes.c")],
                       capture_output=True, text=True)
    if p.returncode:
        return None, "replay-log does not build here: %s" % p.stderr.strip()[:200]
    return exe, None
