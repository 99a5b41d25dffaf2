#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# make run: serves the default 512e 10G device on loopback TCP, prints the
# URI, the geometry and how to attach, and stops on Ctrl-C (SIGINT).
. "$(dirname "$0")/../lib.sh"
need nbdkit nbdinfo
[ -z "${SECT4K_SAN:-}" ] || skip_all "make run serves the plain build"
top=$(cd "$(dirname "$0")/../.." && pwd)
port=$((20000 + RANDOM % 20000))

# start_run OUT CMD...: CMD in the background in its own process group
# (job control: a background job of a plain script ignores SIGINT, and
# its own group gets Ctrl-C as a terminal would send it), output to OUT,
# until it says how to stop it.  Sets $runpid.
start_run () {
  local out=$1; shift
  set -m
  # With SIGINT at its default, as under a terminal: a shell started in
  # the background of a script (a CI runner's, say) inherits it ignored,
  # and a shell cannot trap a signal ignored when it started.
  env --default-signal=INT "$@" >"$out" 2>&1 &
  runpid=$!
  set +m
  for _ in $(seq 300); do grep -q 'Stop with Ctrl-C' "$out" && break; sleep 0.1; done
}
# ctrl_c: Ctrl-C to the run's group; true if it stopped within 20 s (a
# bound on a hang, not a speed: the machine may be loaded).
ctrl_c () {
  local st
  kill -INT -- -$runpid
  for _ in $(seq 200); do kill -0 $runpid 2>/dev/null || break; sleep 0.1; done
  ! kill -0 $runpid 2>/dev/null; st=$?
  kill -9 -- -$runpid 2>/dev/null
  return $st
}

start_run "$tmpdir/run.out" \
  env PORT=$port SECT4K_PLUGIN="$SECT4K_PLUGIN" "$top/scripts/sect4k-run"
grep -q "serving nbd://localhost:$port" "$tmpdir/run.out" &&
  grep -q "512e: logical 512, physical 4096" "$tmpdir/run.out" &&
  grep -q "nbd-client localhost $port -b 512" "$tmpdir/run.out"
ok $? "prints the URI, the geometry and how to attach"
size=$(nbdinfo --size "nbd://localhost:$port")
[ "$size" = 10737418240 ]
ok $? "a client sees the 10G device ($size)"
# Listening sockets (state 0A) on the port, from /proc: only 127.0.0.1.
hex=$(printf '%04X' $port)
addrs=$(cat /proc/net/tcp /proc/net/tcp6 2>/dev/null |
        awk -v p=":$hex" '$4 == "0A" && substr($2, length($2) - 4) == p { print $2 }')
[ "$addrs" = "0100007F:$hex" ]
ok $? "it listens on loopback only ($addrs)"
ctrl_c && grep -q 'sect4k: stopped' "$tmpdir/run.out"
ok $? "Ctrl-C stops it"
[ $tap_failed = 0 ] || diag "$(cat "$tmpdir/run.out")"

# make run EXPORTS=...: one export per preset on the same port.
port=$((port + 1))
start_run "$tmpdir/runx.out" \
  make -s -C "$top" run EXPORTS=512n,512e,512e-xp,4kn PORT=$port SIZE=64M
grep -q "^  512e-xp .*lowest aligned LBA 7.*block sizes 512/4096" "$tmpdir/runx.out" &&
  grep -q "^  4kn .*block sizes 4096/4096" "$tmpdir/runx.out" &&
  grep -q "sect4k-attach nbd://localhost:$port/512n" "$tmpdir/runx.out"
ok $? "make run EXPORTS=... lists the four exports and how to attach one"
[ "$(nbdinfo --json "nbd://localhost:$port/4kn" | grep -c '"block_size_minimum": 4096')" = 1 ]
ok $? "a client of nbd://localhost:$port/4kn sees 4096-byte sectors"
ctrl_c
ok $? "Ctrl-C stops it"
[ $tap_failed = 0 ] || diag "$(cat "$tmpdir/runx.out")"
done_testing
