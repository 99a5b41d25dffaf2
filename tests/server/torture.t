#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# The plugin's concurrency torture (tests/plugin/torture.c: one libnbd
# connection per writer, many requests in flight, racing RMWs of
# neighbouring logical sectors) run against sect4k-server, whose event
# loops serve all connections from a few threads.  With SECT4K_STORE=file
# (torture-file.t) the requests of many connections of one loop wait for
# the same sector locks asynchronously: a blocking wait would deadlock, so
# a hang is a failure, not a stuck test.
. "$(dirname "$0")/../lib.sh"
need_server
client=$SECT4K_BUILD/tests/client-torture
[ -x "$client" ] || skip_all "$client is not built"
rounds=100
[ "${SECT4K_SAN:-}" = tsan ] && rounds=10   # TSan is ~10x slower

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
