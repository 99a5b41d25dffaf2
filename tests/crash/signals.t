#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""sect4k-crash killed by SIGINT, SIGTERM or SIGHUP while its checker runs
(or while it serves one state until interrupted) kills and reaps the
checker with what it started, removes its socket's directory, and dies of
the signal: Python sees -N, a shell 128+N.  Each run has a private
TMPDIR, so that "nothing left" is exact."""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import tap  # noqa: E402
from crashlib import toy_log, crash, tmp, CRASH  # noqa: E402

log = toy_log("sig.log", "good", "512e", txns=2)


def wait_file(path, secs=30):
    end = time.time() + secs
    while time.time() < end:
        if os.path.exists(path) and open(path).read().strip():
            return open(path).read().strip()
        time.sleep(0.05)
    return None


def alive(pid):
    """A process (not a zombie) with that pid."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def ppid(pid):
    with open("/proc/%d/stat" % pid) as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def run(sig, argv, shell=False):
    """Starts sect4k-crash with a checker that records its pid, then a
    grandchild's, and sleeps; sends sig to sect4k-crash.  (exit status,
    what TMPDIR holds, checker pids still alive)."""
    # Short: the socket path must fit in sun_path.
    private = tempfile.mkdtemp(prefix="s4k-sig.", dir="/tmp")
    pidfile = os.path.join(tmp, "checker.pid")
    if os.path.exists(pidfile):
        os.unlink(pidfile)
    env = dict(os.environ, TMPDIR=private, PIDFILE=pidfile)
    if shell:
        p = subprocess.Popen(["sh", "-c", '"$@"; echo "status=$?"', "sh"]
                             + argv, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
    else:
        p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    pids = wait_file(pidfile)
    pids = [int(x) for x in pids.split()] if pids else []
    # Wait for the grandchild's pid too: the checker writes it second.
    end = time.time() + 10
    while len(pids) < 2 and time.time() < end:
        time.sleep(0.05)
        pids = [int(x) for x in open(pidfile).read().split()]
    if not pids:
        p.kill()
        p.wait()
        return None, [], []
    target = ppid(pids[0])          # sect4k-crash, whoever started it
    os.kill(target, sig)
    try:
        out, _ = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
    rc = p.returncode
    if shell:
        rc = int(out.split("status=")[1]) if "status=" in (out or "") else None
    left = os.listdir(private)
    live = [x for x in pids if alive(x)]
    for x in live:
        os.kill(x, signal.SIGKILL)
    shutil.rmtree(private, ignore_errors=True)
    return rc, left, live


# The checker: its pid, then a background child's, then it waits.
CHECKER = ["sh", "-c", 'echo $$ > "$PIDFILE"; sleep 300 & '
           'echo $! >> "$PIDFILE"; wait']

for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    rc, left, live = run(sig, [CRASH, log, "--geometry", "512e", "--states",
                               "2", "--"] + CHECKER)
    tap.ok(rc == -sig and not left and not live,
           "%s during a check: died of it (%s), TMPDIR holds %s, checker "
           "processes alive: %s" % (sig.name, rc, left, live))

rc, left, live = run(signal.SIGTERM, [CRASH, log, "--geometry", "512e",
                                      "--states", "2", "--"] + CHECKER,
                     shell=True)
tap.ok(rc == 128 + signal.SIGTERM and not left and not live,
       "SIGTERM, as a shell sees it: exit status %s, TMPDIR holds %s"
       % (rc, left))

# --state ID alone: serves the state until interrupted.  Its stand-in
# checker is sleep, whose pid comes from the process list.
rc, out, err, rep = crash(log, "512e", "--states", "2")
sid = rep["states"][0]["id"] if rep and rep["states"] else "0-0"
private = tempfile.mkdtemp(prefix="s4k-sig.", dir="/tmp")
p = subprocess.Popen([CRASH, log, "--geometry", "512e", "--state", sid],
                     env=dict(os.environ, TMPDIR=private),
                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                     text=True)
uri = p.stdout.readline().strip()
served = subprocess.run(["nbdinfo", "--size", uri], capture_output=True,
                        text=True, timeout=60)
kids = []
for d in os.listdir("/proc"):
    if d.isdigit():
        try:
            if ppid(int(d)) == p.pid:
                kids.append(int(d))
        except (OSError, IndexError):
            pass
p.send_signal(signal.SIGINT)
try:
    p.wait(timeout=30)
except subprocess.TimeoutExpired:
    p.kill()
    p.wait()
left = os.listdir(private)
live = [x for x in kids if alive(x)]
tap.ok(served.returncode == 0 and kids and p.returncode == -signal.SIGINT
       and not left and not live,
       "--state %s served (%s), then SIGINT: died of it (%s), TMPDIR holds "
       "%s, its sleep alive: %s" % (sid, served.stdout.strip(), p.returncode,
                                    left, live))
shutil.rmtree(private, ignore_errors=True)
shutil.rmtree(tmp, ignore_errors=True)
tap.done_testing()
