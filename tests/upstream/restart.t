#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# The upstream killed (SIGKILL) and restarted while four clients write:
# requests in flight fail with EIO, then service resumes on new upstream
# connections, and no acknowledged write is lost (tests/upstream/slots.c
# checks every slot); the server also with one event loop, whose one
# upstream connection all four share.  Upstreams whose acknowledged
# writes survive their own SIGKILL: nbdkit file, and qemu-nbd on qcow2
# in writethrough mode.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/up.sh"
need_fronts upstream-slots
qcow2_cache=writethrough

for up in file qcow2; do
  for front in plugin server server1; do
    if ! have_upstream $up; then
      skip_one "$up upstream: not installed"; continue
    fi
    start_upstream $up up-$up-$front || exit 1
    start_front $front $up-$front upstream="$up_uri" model=512e || exit 1
    front_pid=$pid marker=$tmpdir/$up-$front.marker
    timeout 300 "$client" restart "$uri" "$marker" >"$tmpdir/client.out" 2>&1 &
    cpid=$!
    for _ in $(seq 600); do [ -e "$marker" ] && break; sleep 0.1; done
    kill -9 "$up_pid"; wait "$up_pid" 2>/dev/null
    sleep 1
    start_upstream $up up-$up-$front || exit 1
    wait $cpid; st=$?
    diag "$(cat "$tmpdir/client.out")"
    ok $st "$front over $up: upstream restarted under load, EIO then service, nothing acknowledged lost"
    pid=$front_pid
    stop_front $front || diag "$(tail -20 "$tmpdir/$up-$front.log")"
    stop_upstream
  done
done
done_testing
