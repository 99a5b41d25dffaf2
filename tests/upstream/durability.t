#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# SIGKILL of sect4k after a flush loses nothing upstream: 4096 writes of
# 512 bytes (RMWs of 4 KiB sectors) through sect4k, a flush, SIGKILL,
# then every slot read straight from the upstream.  The qcow2 upstream
# (qemu-nbd, writeback cache) is SIGKILLed and restarted too before the
# check, so the flush must have reached its image, not only its memory.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/up.sh"
need_fronts upstream-slots

for up in memory qcow2; do
  for front in plugin server; do
    if ! have_upstream $up; then
      skip_one "$up upstream: not installed"; skip_one ""; continue
    fi
    start_upstream $up up-$up-$front || exit 1
    start_front $front $up-$front upstream="$up_uri" model=512e || exit 1
    "$client" write "$uri" 4096 2>&1 | sed "s/^/# /"
    ok ${PIPESTATUS[0]} "$front over $up: 4096 writes of 512 bytes and a flush"
    kill -9 "$pid"; wait "$pid" 2>/dev/null
    if [ $up = qcow2 ]; then
      kill -9 "$up_pid"; wait "$up_pid" 2>/dev/null
      start_upstream $up up-$up-$front || exit 1
    fi
    "$client" verify "$up_uri" 4096 2>&1 | sed "s/^/# /"
    ok ${PIPESTATUS[0]} "$front over $up: after SIGKILL every write is upstream"
    stop_upstream
  done
done
done_testing
