# SPDX-License-Identifier: BSD-3-Clause
"""Minimal TAP for the Python tests, and an nbdkit running the plugin."""
import os
import shlex
import subprocess
import sys
import tempfile
import time

_n = 0
_failed = 0


def ok(cond, desc):
    global _n, _failed
    _n += 1
    print(("ok" if cond else "not ok") + " %d - %s" % (_n, desc), flush=True)
    if not cond:
        _failed += 1
    return cond


def skip(desc, why):
    """A check that does not apply here: counted, never failed."""
    global _n
    _n += 1
    print("ok %d - %s # skip %s" % (_n, desc, why), flush=True)


def diag(msg):
    for line in str(msg).splitlines():
        print("# " + line, flush=True)


def skip_all(why):
    print("1..0 # SKIP " + why)
    sys.exit(0)


def need_nbd():
    """The libnbd Python module, or skip the whole test without it."""
    try:
        import nbd
    except ImportError:
        skip_all("python3-libnbd is not installed")
    return nbd


def errno_name(fn):
    """Runs fn, a libnbd call: 0, or the errno of the nbd.Error it raises
    as a name ("EIO"), whichever form this libnbd gives it in."""
    import errno
    import nbd
    try:
        fn()
        return 0
    except nbd.Error as e:
        return errno.errorcode.get(e.errno, e.errno) \
            if isinstance(e.errno, int) else e.errno


def done_testing():
    print("1..%d" % _n)
    sys.exit(1 if _failed else 0)


def rss(pid):
    """Resident memory of process pid in bytes, from /proc."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


PLUGIN = os.environ.get("SECT4K_PLUGIN") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "sect4k.so")


def sanitizer_env():
    san = os.environ.get("SECT4K_SAN", "")
    gcc = lambda lib: subprocess.run(["gcc", "-print-file-name=" + lib],
                                     capture_output=True, text=True).stdout.strip()
    if san == "asan":
        return {"LD_PRELOAD": gcc("libasan.so") + ":" + gcc("libubsan.so"),
                "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1",
                "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1"}
    if san == "tsan":
        return {"LD_PRELOAD": gcc("libtsan.so"),
                "TSAN_OPTIONS": "halt_on_error=1:exitcode=66"}
    return {}


class ServerProcess:
    """A server the tests started (self.proc, self.logfile, self.dir): its
    log, stopping it, and a context manager that cleans up."""

    def log(self):
        if os.path.exists(self.logfile):
            with open(self.logfile) as f:
                self._log = f.read()
        return self._log

    def stop(self, sig=15):
        """Stops the server; returns its exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        self.log()
        subprocess.run(["rm", "-rf", self.dir])


class Nbdkit(ServerProcess):
    """nbdkit serving the plugin (or another one, named by plugin) on a
    Unix socket (a context manager)."""

    def __init__(self, *args, options=(), plugin=PLUGIN):
        self.dir = tempfile.mkdtemp(prefix="sect4k-test.")
        self.sock = os.path.join(self.dir, "sock")
        self.pidfile = os.path.join(self.dir, "pid")
        self.logfile = os.path.join(self.dir, "log")
        self._log = ""
        self.uri = "nbd+unix:///?socket=" + self.sock
        env = dict(os.environ, **sanitizer_env())
        cmd = (["nbdkit", "-f", "-U", self.sock, "-P", self.pidfile]
               + list(options) + [plugin] + list(args))
        self.cmd = " ".join(shlex.quote(c) for c in cmd)
        self.proc = subprocess.Popen(cmd, env=env,
                                     stdout=open(self.logfile, "w"),
                                     stderr=subprocess.STDOUT)
        for _ in range(200):
            if os.path.exists(self.pidfile) and os.path.getsize(self.pidfile):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError("nbdkit did not start: %s\n%s" % (self.cmd, self.log()))
