#!/bin/bash
# The contended-RMW torture (tests/plugin/torture.c, exact verification)
# through the upstream store, over nbdkit memory and over qemu-nbd
# serving a qcow2 image, with both front ends, and the server with one
# event loop too (--threads 1: every client's requests pipelined on its
# one upstream connection).
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/up.sh"
need nbdkit
need_server
client=$SECT4K_BUILD/tests/client-torture
[ -x "$client" ] || skip_all "$client is not built"
rounds=10                  # 8 writers x 256 sectors x 10 rounds: 20,000 RMWs
[ "${SECT4K_SAN:-}" = tsan ] && rounds=3

for up in memory qcow2; do
  for front in plugin server server1; do
    if ! have_upstream $up; then
      skip_one "$up upstream: not installed"; skip_one ""; continue
    fi
    start_upstream $up up-$up-$front || exit 1
    start_front $front $up-$front upstream="$up_uri" model=512e-xp || exit 1
    timeout 300 "$client" "$uri" 512 4096 3584 256 $rounds 16 | sed "s/^/# /"
    st=${PIPESTATUS[0]}
    ok $st "512e-xp torture, $front over $up"
    stop_front $front; sst=$?
    ok $sst "$front exited cleanly ($sst)"
    [ "$sst" = 0 ] || diag "$(tail -20 "$tmpdir/$up-$front.log")"
    stop_upstream
  done
done
done_testing
