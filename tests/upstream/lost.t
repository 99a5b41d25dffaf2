#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# After an upstream crash, every client connection whose acknowledged
# writes may be gone learns it at its next flush (issue 29 item 2).
# Connection D writes and flushes, then A and B write, and C opens
# after the crash; the upstream (nbdkit file) is SIGKILLed and restarted; then
# B flushes (EIO), B flushes again (ok), A writes with FUA (ok: that
# write is durable by itself, and does not clear the loss), A flushes
# (EIO), A flushes again (ok), C and D flush (ok: nothing of theirs
# was at risk).  Upstream with multi-conn (one flush covers all) and
# without (each connection is flushed); the plugin's pool, the server
# with two event loops and with one.  The stats at exit count that
# crash as one loss (upstream.losses), however many of sect4k's
# connections held writes no flush had covered (A's 32 writes went over
# the pool's 4 connections, or the loops'): before, each connection
# that noticed it counted one more.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/up.sh"
need nbdkit
need_server
need_pynbd

# start_file_upstream MODE NAME: nbdkit file with multi-conn-mode=MODE
# on $tmpdir/NAME.img (kept across restarts).
start_file_upstream () {
  [ -e "$tmpdir/$2.img" ] || truncate -s 64M "$tmpdir/$2.img"
  start_nbdkit "$2" --filter=multi-conn file "$tmpdir/$2.img" \
    multi-conn-mode=$1 || return 1
  up_uri=$uri up_pid=$pid
}

for mode in auto disable; do
  for front in plugin server server1; do
    fname=$mode-$front
    start_file_upstream $mode up-$fname || exit 1
    upname=up-$fname
    start_front $front $fname upstream="$up_uri" model=512e \
      statsfile="$tmpdir/$fname.json" || exit 1
    front_pid=$pid
    rm -f "$tmpdir/crashed" "$tmpdir/restarted"
    $py - "$uri" "$tmpdir" >"$tmpdir/lost.out" 2>&1 <<'EOF' &
import errno, nbd, os, sys, time
uri, tmp = sys.argv[1:]
def conn():
    h = nbd.NBD()
    h.connect_uri(uri)
    return h
def flush(h):
    try:
        h.flush()
        return "ok"
    except nbd.Error as e:
        return "EIO" if e.errnum == errno.EIO else "error %s" % e
A, B, D = conn(), conn(), conn()
D.pwrite(b"d" * 4096, 128 * 4096)
print("D flush before:", flush(D))
for i in range(32):
    A.pwrite(b"a" * 4096, i * 4096)
for i in range(8):
    B.pwrite(b"b" * 4096, (64 + i) * 4096)
open(os.path.join(tmp, "crashed"), "w").close()
while not os.path.exists(os.path.join(tmp, "restarted")):
    time.sleep(0.05)
C = conn()
got = {}
got["B1"] = flush(B)
got["B2"] = flush(B)
try:
    A.pwrite(b"A" * 4096, 0, nbd.CMD_FLAG_FUA)
    got["A-fua"] = "ok"
except nbd.Error as e:
    got["A-fua"] = "error %s" % e
got["A1"] = flush(A)
got["A2"] = flush(A)
got["C"] = flush(C)
got["D"] = flush(D)
want = {"B1": "EIO", "B2": "ok", "A-fua": "ok", "A1": "EIO", "A2": "ok",
        "C": "ok", "D": "ok"}
for k in want:
    print("%s: %s (want %s)" % (k, got[k], want[k]))
sys.exit(0 if got == want else 1)
EOF
    cpid=$!
    for _ in $(seq 100); do [ -e "$tmpdir/crashed" ] && break; sleep 0.1; done
    kill -9 "$up_pid"; wait "$up_pid" 2>/dev/null
    start_file_upstream $mode $upname || exit 1
    touch "$tmpdir/restarted"
    wait $cpid; st=$?
    diag "$(cat "$tmpdir/lost.out")"
    ok $st "$front, upstream multi-conn-mode=$mode: B's flush after the crash fails, then passes; A's fails too, after a FUA write that passes; C's and D's pass"
    pid=$front_pid
    stop_front $front || diag "$(tail -5 "$tmpdir/$fname.log")"
    losses=$($py -c 'import json, sys; print(json.load(open(sys.argv[1]))["upstream"]["losses"])' \
               "$tmpdir/$fname.json" 2>&1)
    [ "$losses" = 1 ]
    ok $? "$front, upstream multi-conn-mode=$mode: one crash, one loss in the stats (upstream.losses: $losses)"
    stop_upstream
  done
done
done_testing
