#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Concurrency torture on the file store (the client of tests/plugin/torture.c):
# racing RMWs of neighbouring logical sectors with aligned writes, zeroes
# and trims from 8 connections, checked for lost or torn updates, through
# io_uring, pread/pwrite and O_DIRECT.
. "$(dirname "$0")/../lib.sh"
need nbdkit
client=$SECT4K_BUILD/tests/client-torture
[ -x "$client" ] || skip_all "$client is not built"
rounds=${SECT4K_FILE_TORTURE_ROUNDS:-20}
[ "${SECT4K_SAN:-}" = tsan ] && rounds=4
dir=$(mktemp -d "$SECT4K_BUILD/file-torture.XXXXXX")
for mode in io=uring io=sync "direct=true io=uring" "direct=true io=sync"; do
  rm -f "$dir/disk.img"
  start_nbdkit torture "$SECT4K_PLUGIN" file="$dir/disk.img" size=64M \
    model=512e-xp $mode || exit 1
  "$client" "$uri" 512 4096 3584 256 "$rounds" 16 | sed "s/^/# /"
  st=${PIPESTATUS[0]}
  stop_nbdkit; sst=$?
  ok "$st" "$mode: the 512e-xp torture client passed ($rounds rounds)"
  [ "$sst" = 0 ] || [ "$sst" = 143 ]; ok $? "$mode: nbdkit exited cleanly ($sst)"
  [ "$sst" = 0 ] || [ "$sst" = 143 ] || diag "$(tail -30 "$tmpdir/torture.log")"
done
rm -rf "$dir"
done_testing
