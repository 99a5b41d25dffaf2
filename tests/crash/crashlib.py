"""Helpers for tests/crash/*.t: the tool, the toy WAL and the schema."""
import json
import os
import subprocess
import sys
import tempfile

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
