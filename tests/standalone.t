#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""The tree stands alone (issue 32 item 1): a clone with no ../shared
beside it passes make check.  Only replay-log comes from there
(tests/crash/crashlib.py's replay_log_sources); this checks that the
look-up finds nothing where nothing is, says how to point it at sources,
and that every test file using it, run by prove with replay-log hidden,
passes or skips as a whole (prove fails "planned 0 tests but ran 8")."""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "crash"))
import tap  # noqa: E402
import crashlib  # noqa: E402
if os.environ.get("SECT4K_SAN"):
    tap.skip_all("the replay-log look-up is checked in the plain build only (Python; the sanitizers add nothing)")

ROOT = os.path.dirname(HERE)
VAR = crashlib.REPLAY_LOG_VAR

# The look-up itself, in a scratch checkout with and without ../shared.
tmp = tempfile.mkdtemp(prefix="sect4k-standalone.")
repo = os.path.join(tmp, "clone")
subprocess.run(["git", "init", "-q", repo], check=True)
env_save = os.environ.pop(VAR, None)
crashlib.ROOT = repo
src, why = crashlib.replay_log_sources()
tap.ok(src is None and VAR in (why or "") and "shared" in why,
       "no ../shared, no %s: no sources, and the reason says how to give "
       "them: %s" % (VAR, why))
shared = os.path.join(tmp, "shared", "replay-log")
os.makedirs(shared)
open(os.path.join(shared, "replay-log.c"), "w").close()
src, why = crashlib.replay_log_sources()
tap.ok(src == shared, "../shared/replay-log beside the clone is found: %s"
       % (src or why))
os.environ[VAR] = os.path.join(tmp, "elsewhere")
src, why = crashlib.replay_log_sources()
tap.ok(src is None and "elsewhere" in (why or ""),
       "%s naming a directory without replay-log.c: refused: %s"
       % (VAR, why))
os.environ[VAR] = "none"
src, why = crashlib.replay_log_sources()
tap.ok(src is None and why, "%s=none: looks nowhere, even with ../shared "
       "there: %s" % (VAR, why))
crashlib.ROOT = ROOT
if env_save is not None:
    os.environ[VAR] = env_save
else:
    del os.environ[VAR]

# Every test that can use replay-log, under prove, with replay-log hidden.
users = []
for d, _, files in os.walk(HERE):
    for f in sorted(files):
        p = os.path.join(d, f)
        if f.endswith(".t") and p != os.path.abspath(__file__):
            with open(p, errors="replace") as fh:
                text = fh.read()
            if "build_replay_log" in text or "replay_log_sources" in text:
                users.append(p)
tap.ok(len(users) >= 2, "test files that use replay-log: %s"
       % ", ".join(os.path.relpath(u, ROOT) for u in sorted(users)))
env = dict(os.environ, **{VAR: "none"})
here_src, here_why = crashlib.replay_log_sources()
for u in sorted(users):
    if here_src is None:
        # This suite already runs them without replay-log (a clone with
        # nothing beside it, as CI's): not twice.
        tap.skip("%s with replay-log hidden" % os.path.relpath(u, ROOT),
                 "this suite runs it without replay-log already (%s)"
                 % here_why)
        continue
    p = subprocess.run(["prove", "--exec", "", u], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=900)
    last = (p.stdout.strip().splitlines() or [""])[-1]
    tap.ok(p.returncode == 0 and last in ("Result: PASS", "Result: NOTESTS"),
           "%s with replay-log hidden: passes or skips as a whole%s"
           % (os.path.relpath(u, ROOT),
              "" if p.returncode == 0 else ": " + p.stdout[-600:]))

# Nothing else in the tracked tree (docs aside) reaches for ../shared.
ls = subprocess.run(["git", "-C", ROOT, "ls-files"], capture_output=True,
                    text=True)
if ls.returncode:
    tap.skip("no tracked file but crashlib.py and the docs name ../shared",
             "not a git checkout")
else:
    bad = []
    for f in ls.stdout.split():
        path = os.path.join(ROOT, f)
        # The docs may say where replay-log is looked for.
        if f in ("tests/crash/crashlib.py", "tests/standalone.t") or \
                f.endswith(".md") or not os.path.isfile(path):
            continue
        with open(path, "rb") as fh:
            if b"../shared" in fh.read():
                bad.append(f)
    tap.ok(not bad, "no tracked file but crashlib.py and the docs name ../shared%s"
           % (": " + ", ".join(bad) if bad else ""))
tap.done_testing()
