#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""sect4k-crash on bad input: a truncated or corrupt log, a log of another
geometry: one clear line, exit 2.  A checker that hangs (--timeout) or
crashes: the report says which states were not checked and why.  A state
ID that tears an atomic write is refused.  Two
runs give the same report (determinism), and --state ID reproduces a
state byte for byte."""
import hashlib
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import tap  # noqa: E402
import wlogfmt  # noqa: E402
from crashlib import toy_log, crash, valid, tmp, CRASH, TOYWAL  # noqa: E402

log = toy_log("good.log", "broken", "512e", txns=2)
data = open(log, "rb").read()


def one_line(rc, err, want, desc):
    lines = err.strip().splitlines()
    tap.ok(rc == 2 and len(lines) == 1 and want in err,
           "%s: one line: %s" % (desc, err.strip()))


bad = os.path.join(tmp, "bad.log")
open(bad, "wb").write(data[:len(data) - 700])
rc, out, err, _ = crash(bad, "512e")
one_line(rc, err, "truncated", "a truncated log")
open(bad, "wb").write(b"\x01" * 8 + data[8:])
rc, out, err, _ = crash(bad, "512e")
one_line(rc, err, "not a write log", "a corrupt super block")
rc, out, err, _ = crash(log, "4kn")
one_line(rc, err, "another geometry", "a log of another geometry")
rc, out, err, _ = crash(log, "bogus")
one_line(rc, err, "unknown model", "an unknown geometry")

# A hanging checker: every state times out, and says so.
rc, out, err, rep = crash(log, "512e", "--timeout", "0.3", "--states", "2",
                          checker=("sleep", "30"))
nc = [s for s in rep["states"] if s["result"] == "not checked"]
tap.ok(rc == 3 and valid(rep) and nc and len(nc) == rep["summary"]["states"]
       and all("timeout" in s["reason"] for s in nc),
       "a hanging checker: %d states not checked: timeout" % len(nc))
tap.ok("NOT CHECKED" in out and "timeout" in out,
       "the summary lists the states not checked")
# A crashing checker.
rc, out, err, rep = crash(log, "512e", "--states", "2",
                          checker=("sh", "-c", "kill -SEGV $$"))
tap.ok(rc == 3 and rep["summary"]["not_checked"] > 0 and
       all("signal 11" in s["reason"] for s in rep["states"]),
       "a crashing checker: not checked, killed by signal 11")

# Determinism: the same log, geometry, policy and seed.
runs = [crash(log, "512e", "--torn", "sector", "--states", "5", "--seed",
              "7", checker=("sh", "-c", "case $SECT4K_STATE in *g*|2-*) "
                            "exit 1;; esac"))[3] for _ in range(2)]
tap.ok(runs[0] == runs[1] and runs[0]["summary"]["states"] > 0,
       "two runs give the same report (%d states)"
       % runs[0]["summary"]["states"])

# --state ID --output IMAGE: the bytes the checker saw.
rc, out, err, rep = crash(log, "512e", "--torn", "garbage",
                          checker=(sys.executable, TOYWAL, "check", "broken"))
failed = [s for s in rep["states"] if s["result"] == "failed"]
sid = failed[0]["id"] if failed else "none"
img = os.path.join(tmp, "state.img")
r = subprocess.run([CRASH, log, "--geometry", "512e", "--torn", "garbage",
                    "--state", sid, "--output", img], capture_output=True,
                   text=True)
dump = os.path.join(tmp, "seen.img")
r2 = subprocess.run([CRASH, log, "--geometry", "512e", "--torn", "garbage",
                     "--state", sid, "--", "sh", "-c",
                     'nbdcopy "$SECT4K_URI" ' + dump], capture_output=True,
                    text=True)


def digest(p):
    return hashlib.sha256(open(p, "rb").read()).hexdigest() \
        if os.path.exists(p) else None


tap.ok(failed and r.returncode == 0 and r2.returncode == 0 and
       digest(img) == digest(dump) and digest(img),
       "--state %s --output writes the image the checker reads" % sid)
r3 = subprocess.run([CRASH, log, "--geometry", "512e", "--torn", "garbage",
                     "--state", sid, "--", sys.executable, TOYWAL, "check",
                     "broken"], capture_output=True, text=True)
tap.ok(r3.returncode == 1, "--state %s alone reproduces the failure: %s"
       % (sid, r3.stdout.strip().splitlines()[-1:]))
r4 = subprocess.run([CRASH, log, "--geometry", "512e", "--state", "0-7-k",
                     "--", "true"], capture_output=True, text=True)
tap.ok(r4.returncode == 2 and len(r4.stderr.strip().splitlines()) == 1,
       "a bad state ID: one line: %s" % r4.stderr.strip())

# An atomic write's sector is kept whole: a state ID that reverts it is
# refused, one that keeps it is served.
alog = os.path.join(tmp, "atomic.log")
w = wlogfmt.LogWriter(alog, 1 << 20, 512, 4096)
w.write(4096, b"\xa5" * 8192, atomic=True)
w.close()
for sid, want in (("0-1-r.k", 2), ("0-1-k*2", 0)):
    r5 = subprocess.run([CRASH, alog, "--geometry", "512e", "--state", sid,
                         "--", "true"], capture_output=True, text=True)
    tap.ok(r5.returncode == want and (want == 0 or "atomic" in r5.stderr and
                                      len(r5.stderr.strip().splitlines()) == 1),
           "--state %s of an atomic write: exit %d %s" % (sid, r5.returncode,
                                                       r5.stderr.strip()))
# A plain write inside a kept atomic write's sector (after it: it settled
# the unit) may tear that sector back to the atomic write's data (@1);
# never below it, and the atomic write's other sector stays kept.
alog2 = os.path.join(tmp, "atomic2.log")
w = wlogfmt.LogWriter(alog2, 1 << 20, 512, 4096)
w.write(4096, b"\xa5" * 8192, atomic=True)
w.write(4608, b"\x5a" * 512)
w.close()
for sid, want, why in (("0-3-g0.k", 0, ""), ("0-3-r@1.k", 0, ""),
                       ("0-3-r.k", 2, "atomic"), ("0-3-k.g0", 2, "atomic"),
                       ("0-3-r@2.k", 2, "base"), ("0-1-r@1.k", 2, "atomic"),
                       ("0-3-g0@1.k", 2, "base")):
    r6 = subprocess.run([CRASH, alog2, "--geometry", "512e", "--torn",
                         "garbage", "--state", sid, "--", "true"],
                        capture_output=True, text=True)
    tap.ok(r6.returncode == want and (want == 0 or why in r6.stderr and
                                      len(r6.stderr.strip().splitlines()) == 1),
           "--state %s after a plain write inside an atomic one: exit %d %s"
           % (sid, r6.returncode, r6.stderr.strip()))
tap.done_testing()
