#!/bin/bash
# The plugin's concurrency torture (tests/plugin/torture.c: one libnbd
# connection per writer, many requests in flight, racing RMWs of
# neighbouring logical sectors) run against sect4k-server, whose event
# loops serve all connections from a few threads.  With SECT4K_STORE=file
# (torture-file.t) the requests of many connections of one loop wait for
# the same sector locks asynchronously: a blocking wait would deadlock, so
# a hang is a failure, not a stuck test.
. "$(dirname "$0")/../lib.sh"
server=${SECT4K_SERVER:-$(dirname "$0")/../../sect4k-server}
[ -x "$server" ] || skip_all "$server is not built"
client=$SECT4K_BUILD/tests/client-torture
[ -x "$client" ] || skip_all "$client is not built"
rounds=100
[ "${SECT4K_SAN:-}" = tsan ] && rounds=10   # TSan is ~10x slower

# start_server NAME ARGS...: sets $sock, $pid, $uri.
start_server () {
  name=$1; shift
  sock=$tmpdir/$name.sock
  "$server" --unix "$sock" "$@" >"$tmpdir/$name.log" 2>&1 &
  pid=$!
  uri="nbd+unix:///?socket=$sock"
  for _ in $(seq 100); do
    [ -S "$sock" ] && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  diag "$(cat "$tmpdir/$name.log")"
  return 1
}

# stop_server: SIGTERM; a server still there after 30 s is hung (killed,
# so the status is not 0).
stop_server () {
  kill "$pid"
  for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && { diag "the server hung at exit"; kill -9 "$pid"; }
  wait "$pid"
}

# torture ARGS...: the client, killed if it hangs; sets $st.
torture () {
  timeout 120 "$client" "$uri" "$@" | sed "s/^/# /"
  st=${PIPESTATUS[0]}
  [ "$st" != 124 ] || diag "the torture hung (killed after 120 s)"
}

for threads in 1 2; do
  start_server t$threads size=64M model=512e-xp --threads $threads \
    $(store_arg t$threads) || exit 1
  torture 512 4096 3584 256 $rounds 16
  stop_server; sst=$?
  ok $st "512e-xp torture, $threads event-loop thread(s), ${SECT4K_STORE:-memory} store"
  ok $sst "server exited cleanly ($sst)"
  [ "$sst" = 0 ] || diag "$(tail -30 "$tmpdir/t$threads.log")"
done
start_server t3 size=16M logical=1024 physical=8192 $(store_arg t3) || exit 1
torture 1024 8192 0 64 $((rounds / 5)) 8
stop_server; sst=$?
ok $st "1k/8k torture"
ok $sst "server exited cleanly ($sst)"
done_testing
