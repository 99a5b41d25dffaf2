#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# The contended-RMW torture (tests/plugin/torture.c, exact verification)
# through the upstream store, over nbdkit memory and over qemu-nbd
# serving a qcow2 image, with both front ends (and the server with one
# event loop too, --threads 1: every client's requests pipelined on its
# one upstream connection), in both modes: writes that cut sectors sent
# upstream as they are (partial writes, the default) and whole-sector
# RMW (upstream-partial-writes=false).
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/up.sh"
need_fronts client-torture
rounds=10                  # 8 writers x 256 sectors x 10 rounds: 20,000 RMWs
[ "${SECT4K_SAN:-}" = tsan ] && rounds=3

for up in memory qcow2; do
  for front in plugin server server1; do
    for pw in true false; do
      if ! have_upstream $up; then
        skip_one "$up upstream: not installed"; skip_one ""; continue
      fi
      n=$up-$front-$pw
      start_upstream $up up-$n || exit 1
      start_front $front $n upstream="$up_uri" model=512e-xp \
        upstream-partial-writes=$pw || exit 1
      timeout 300 "$client" "$uri" 512 4096 3584 256 $rounds 16 | sed "s/^/# /"
      st=${PIPESTATUS[0]}
      ok $st "512e-xp torture, $front over $up, upstream-partial-writes=$pw"
      stop_front $front; sst=$?
      ok $sst "$front exited cleanly ($sst)"
      [ "$sst" = 0 ] || diag "$(tail -20 "$tmpdir/$n.log")"
      stop_upstream
    done
  done
done
done_testing
