#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""The "RMW under latency" table (issue 12): 512-byte writes on a 512e
device whose writes take 1 ms, so every write is a read-modify-write of
a 4 KiB physical sector that a drive would take 1 ms over.

Contenders, each on a Unix socket: the sect4k plugin under nbdkit, the
sect4k-server, and nbdkit's own answer, `--filter=blocksize
--filter=delay memory` (minblock=4096, delay-write=1ms), whose one global
lock holds every RMW for its whole delay.  Workloads (fio, nbd engine):
  distinct: 8 jobs, each in its own 16 MiB region, 512-byte random writes
            at 4 KiB-aligned offsets (every write RMWs a sector no other
            write in flight touches), QD 8 each;
  same:     8 jobs all writing their own 512-byte slot of one physical
            sector, QD 1 each, then verifying (fio verify=crc32c): the
            RMWs must serialise, at most one per ms, and lose nothing.
The table replaces the part of BENCHMARKS.md between its markers.

Usage: rmw-latency.py --plugin sect4k.so --server sect4k-server
                      [--out BENCHMARKS.md] [--runtime SECONDS]
"""
import argparse
import json
import os
import platform
import shutil
import subprocess
import tempfile
import time

BEGIN, END = "<!-- rmw-latency:begin -->", "<!-- rmw-latency:end -->"
THREADS = 64        # nbdkit -t: one worker per request in flight (8 x 8)


def contenders(plugin, server):
    s4k = ["size=1G", "model=512e", "latency-write=1ms"]
    return {
        "sect4k plugin": ["nbdkit", "-t", str(THREADS), plugin] + s4k,
        "sect4k-server": [server] + s4k,
        "nbdkit blocksize+delay memory": [
            "nbdkit", "-t", str(THREADS), "--filter=blocksize",
            "--filter=delay", "memory", "size=1G", "minblock=4096",
            "delay-write=1ms"],
    }


def start(argv, tmp):
    sock = os.path.join(tmp, "sock")
    if os.path.exists(sock):
        os.unlink(sock)
    if argv[0] == "nbdkit":
        cmd = argv[:1] + ["-f", "-U", sock] + argv[1:]
    else:
        cmd = argv[:1] + ["--unix", sock] + argv[1:]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                         stderr=open(os.path.join(tmp, "log"), "a"))
    for _ in range(200):
        if os.path.exists(sock):
            return p, "nbd+unix:///?socket=" + sock
        if p.poll() is not None:
            break
        time.sleep(0.05)
    p.kill()
    raise RuntimeError("did not start: %s" % " ".join(cmd))


def fio(uri, tmp, opts):
    job = os.path.join(tmp, "job.fio")
    with open(job, "w") as f:
        f.write("[global]\nioengine=nbd\nuri=%s\ngroup_reporting=1\n"
                "[job]\n" % uri)
        f.write("".join("%s=%s\n" % kv for kv in opts.items()))
    out = os.path.join(tmp, "out.json")
    # cwd: fio's verify leaves its state files there.
    r = subprocess.run(["fio", "--output-format=json", "--output=" + out, job],
                       capture_output=True, text=True, cwd=tmp)
    text = open(out).read() if os.path.exists(out) else ""
    # fio may print warnings before the JSON.
    doc = json.loads(text[text.index("{"):]) if "{" in text else {}
    jobs = doc.get("jobs", [{}])
    errors = sum(j.get("error", 0) for j in jobs)
    iops = sum(j.get("write", {}).get("iops", 0) for j in jobs)
    return iops, r.returncode == 0 and errors == 0, r.stderr.strip()[-300:]


def workloads(runtime):
    return {
        "distinct": dict(rw="randwrite", bs=512, blockalign=4096, iodepth=8,
                         numjobs=8, size="16M", offset_increment="16M",
                         time_based=1, runtime=runtime),
        "same": dict(rw="write", bs=512, iodepth=1, numjobs=8, size=512,
                     offset_increment=512, loops=max(1, int(runtime * 50)),
                     verify="crc32c", do_verify=1, verify_fatal=1),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--plugin", required=True)
    ap.add_argument("--server", required=True)
    ap.add_argument("--out", default="BENCHMARKS.md")
    ap.add_argument("--runtime", type=float, default=float(
        os.environ.get("BENCH_RMW_RUNTIME", "3")))
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="sect4k-rmwlat.")
    res = {}
    # When, at which commit and under what load: the IOPS are timings.
    load = lambda: " ".join("%.2f" % x for x in os.getloadavg())
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    commit = subprocess.run(["git", "describe", "--always", "--dirty"],
                            capture_output=True, text=True).stdout.strip()
    load0 = load()
    try:
        for name, argv in contenders(os.path.abspath(a.plugin),
                                     os.path.abspath(a.server)).items():
            for wl, opts in workloads(a.runtime).items():
                p, uri = start(argv, tmp)
                try:
                    res[(name, wl)] = fio(uri, tmp, opts)
                finally:
                    p.terminate()
                    p.wait()
                print("%-32s %-9s %10.0f IOPS%s" % (
                    name, wl, res[(name, wl)][0],
                    "" if res[(name, wl)][1] else "  FAILED " +
                    res[(name, wl)][2]), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    load1 = load()
    ref = res[("nbdkit blocksize+delay memory", "distinct")][0] or 1
    L = ["### RMW under latency",
         "",
         "512-byte writes on 512e (every one a read-modify-write of a "
         "4 KiB physical sector), each write taking 1 ms "
         "(`latency-write=1ms`; nbdkit: `--filter=blocksize --filter=delay "
         "memory minblock=4096 delay-write=1ms`), nbdkit with `-t %d`, "
         "%s s per run, %d cores, %s.  *distinct*: 8 fio jobs, each in "
         "its own 16 MiB region, random 512 B writes at 4 KiB-aligned "
         "offsets, QD 8 each.  *same sector*: 8 jobs each writing its own "
         "512 B slot of one physical sector, QD 1, verified "
         "(`verify=crc32c`): these RMWs must serialise, 1000/s at most."
         % (THREADS, a.runtime, os.cpu_count(), platform.release()),
         "",
         "| server | distinct: write IOPS | vs blocksize filter | same sector: "
         "write IOPS | same sector: data verified |",
         "|---|---:|---:|---:|---|"]
    for name in contenders("", ""):
        d, s = res[(name, "distinct")], res[(name, "same")]
        L.append("| %s | %.0f%s | %.1fx | %.0f | %s |" % (
            name, d[0], "" if d[1] else " (failed)", d[0] / ref, s[0],
            "yes" if s[1] else "NO"))
    L += ["", "One fio run per cell, on %s at commit %s; load average "
          "before/after %s / %s (other jobs may share the machine)." % (
              when, commit or "(not a git tree)", load0, load1),
          "", "Reproduce: `make bench-rmw-latency` (BENCH_RMW_RUNTIME=SECONDS)."]
    body = "\n".join(L)
    print(body)
    old = open(a.out).read() if os.path.exists(a.out) else "# Benchmarks\n"
    if BEGIN not in old:
        old += "\n%s\n%s\n" % (BEGIN, END)
    pre, rest = old.split(BEGIN, 1)
    post = rest.split(END, 1)[1]
    with open(a.out, "w") as f:
        f.write(pre + BEGIN + "\n" + body + "\n" + END + post)


if __name__ == "__main__":
    main()
