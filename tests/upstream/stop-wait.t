#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# upstream-timeout=0 lets a request wait forever on a silent upstream,
# but a stop must end: a read in flight on an upstream gone silent
# (nbdkit memory, SIGSTOPped) when the front end gets SIGTERM fails once
# the upstream has said nothing for 30 s from the stop (STOP_WAIT), and
# the front end exits 0 with one line saying so.  Before, the stop op
# came only after the loops had stopped (the server) or never reached a
# request (the plugin: nbdkit waits for its requests before unloading):
# the exit hung.  Three front ends at once (each waits the real 30 s):
# - server-pool: sect4k-server with a fault layer (bad-sectors= far
#   away), which runs requests on the upstream's synchronous pool;
# - server: its event loop's own connection, driven through its ring;
# - plugin: nbdkit with the plugin (the pool).
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/up.sh"
need nbdkit
need_server
need_pynbd

since () { awk -v s="$1" -v n="$(date +%s.%N)" 'BEGIN { printf "%.1f", n - s }'; }

fronts="server-pool server plugin"
declare -A up front client st took
for f in $fronts; do
  start_nbdkit up-$f memory 64M || exit 1
  up[$f]=$pid
  keys="upstream=$uri upstream-timeout=0 model=512e"
  case $f in
    server-pool) start_front server $f $keys bad-sectors=100000 ;;
    *) start_front $f $f $keys ;;
  esac || exit 1
  front[$f]=$pid
  # A read that passes (the connection is made), then, once the
  # upstream is stopped, one in flight until the connection ends.
  $py - "$uri" "$tmpdir/$f" >"$tmpdir/$f.client" 2>&1 <<'EOF' &
import nbd, os, sys, time
uri, base = sys.argv[1], sys.argv[2]
h = nbd.NBD()
h.connect_uri(uri)
h.pread(4096, 0)
open(base + ".ready", "w").close()
while not os.path.exists(base + ".stopped"):
    time.sleep(0.05)
c = h.aio_pread(nbd.Buffer(4096), 8192)
open(base + ".pending", "w").close()
end = time.time() + 120
while time.time() < end:
    try:
        h.poll(1000)
        if h.aio_command_completed(c):
            print("the read passed")
            break
    except nbd.Error as e:
        print("the read failed: %s" % e)
        break
EOF
  client[$f]=$!
done
for f in $fronts; do
  for _ in $(seq 100); do [ -e "$tmpdir/$f.ready" ] && break; sleep 0.1; done
  sigstop "${up[$f]}" || exit 1
  touch "$tmpdir/$f.stopped"
done
for f in $fronts; do
  for _ in $(seq 100); do [ -e "$tmpdir/$f.pending" ] && break; sleep 0.1; done
done
sleep 1                         # the reads reach the upstream's socket
start=$(date +%s.%N)
for f in $fronts; do kill "${front[$f]}"; done
# Each front end's exit: its status, or "hung" after 50 s.
for _ in $(seq 500); do
  for f in $fronts; do
    [ -n "${st[$f]:-}" ] && continue
    kill -0 "${front[$f]}" 2>/dev/null && continue
    wait "${front[$f]}"; st[$f]=$?; took[$f]=$(since "$start")
    [ $f = plugin ] && [ "${st[$f]}" = 143 ] && st[$f]=0
  done
  [ ${#st[@]} = 3 ] && break
  sleep 0.1
done
line="no answer in 30s, the limit at a stop: the requests in flight on it failed (EIO)"
for f in $fronts; do
  if [ -z "${st[$f]:-}" ]; then
    kill -9 "${front[$f]}"; st[$f]=hung; took[$f]=">50"
  fi
  wait "${client[$f]}"
  log=$tmpdir/$f.log
  t=${took[$f]%.*}
  # nbdkit's known exit hang under a sanitizer's preload (up.sh's
  # exit_hung), once sect4k has said its line and the read failed.
  if [ "${st[$f]}" = hung ] && [ -n "${SECT4K_SAN:-}" ] && [ $f = plugin ] &&
     grep -qF "$line" "$log" && grep -q "the read failed" "$tmpdir/$f.client"; then
    skip_one "$f: the read failed and the line was said, then nbdkit hung at exit under $SECT4K_SAN"
  else
    [ "${st[$f]}" = 0 ] && [ "$t" -ge 29 ] && [ "$t" -lt 45 ] &&
      [ "$(grep -c "no answer\|did not complete" "$log")" = 1 ] &&
      grep -qF "$line" "$log" && grep -q "the read failed" "$tmpdir/$f.client"
    ok $? "$f: upstream-timeout=0, a read in flight on a silent upstream: SIGTERM exits ${st[$f]} in ${took[$f]}s, one line"
  fi
  grep -e "no answer" -e "did not complete" "$log" | sed 's/^/# /'
  sed 's/^/# client: /' "$tmpdir/$f.client"
  kill -9 "${up[$f]}"; kill -CONT "${up[$f]}" 2>/dev/null
  wait "${up[$f]}" 2>/dev/null
done
done_testing
