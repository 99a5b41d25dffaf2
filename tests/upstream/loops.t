#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Event loops that stop before the upstream store closes: a loop lets go
# (s4k_dev_loop_gone), its connection flushed and closed, and another
# loop's flush no longer asks it (tests/upstream/store-loops.c, against
# an upstream without multi-conn, whose log counts the flushes; at its
# end it stops, then kills, the upstream, for the synchronous flush on a
# loop's own thread whose connection fails).  Then
# sect4k-server with two loops and upstream=: clients write on both,
# none flushes, the server stops (its loops stop one by one): every
# write reached the upstream and was flushed before the server exited.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/up.sh"
need nbdkit
need_server
need_pynbd
client=$SECT4K_BUILD/tests/upstream-store-loops
[ -x "$client" ] || skip_all "$client is not built"

log=$tmpdir/up.requests
start_nbdkit up --filter=log --filter=multi-conn memory 64M \
  multi-conn-mode=disable logfile="$log" || exit 1
up_pid=$pid up_uri=$uri
tap_run_c () {
  # The client's TAP, numbered on from ours.
  local line
  while IFS= read -r line; do
    case $line in
      not\ ok*)
        tap_n=$((tap_n + 1)) tap_failed=$((tap_failed + 1))
        echo "$line" | sed "s/^not ok [0-9]*/not ok $tap_n/" ;;
      ok*)
        tap_n=$((tap_n + 1))
        echo "$line" | sed "s/^ok [0-9]*/ok $tap_n/" ;;
      1..*) ;;
      *) echo "$line" ;;
    esac
  done
}
"$client" "$up_uri" "$log" "$up_pid" > "$tmpdir/client.out" 2>&1
st=$?
kill -CONT "$up_pid" 2>/dev/null; wait "$up_pid" 2>/dev/null
tap_run_c < "$tmpdir/client.out"
[ "$st" = 0 ]
ok $? "the store's loops test exits 0 (status $st)"
# The client killed it.
start_nbdkit up --filter=log --filter=multi-conn memory 64M \
  multi-conn-mode=disable logfile="$log" || exit 1
up_pid=$pid up_uri=$uri

# The server: 8 clients write, none flushes, on its two loops; it stops.
: > "$log"
start_front server srv --threads 2 upstream="$up_uri" model=512e || exit 1
$py - "$uri" <<'PY' 2>&1 | sed 's/^/# /'
import nbd, sys
hs = []
for i in range(8):
    h = nbd.NBD()
    h.connect_uri(sys.argv[1])
    hs.append(h)
for i, h in enumerate(hs):
    h.pwrite(bytes([i + 1]) * 4096, i * 4096)
for h in hs:
    h.shutdown()
PY
stop_front server
ok $? "the server stopped cleanly"
# Each connection that wrote had a flush after its last write.
every_write_flushed "$log"
ok $? "the server's loops flushed their connections' writes as they stopped"
stop_upstream
done_testing
