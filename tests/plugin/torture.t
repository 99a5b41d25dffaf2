#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Concurrency torture through nbdkit and libnbd (see tests/plugin/torture.c).
. "$(dirname "$0")/../lib.sh"
need nbdkit
client=$SECT4K_BUILD/tests/client-torture
[ -x "$client" ] || skip_all "$client is not built"
rounds=100                 # 8 writers x 256 sectors x 100 rounds > 200,000 RMWs
[ "${SECT4K_SAN:-}" = tsan ] && rounds=10   # TSan is ~10x slower
# 512e with an alignment offset: sector 0 of the region starts at 3584.
start_nbdkit torture "$SECT4K_PLUGIN" size=64M model=512e-xp || exit 1
"$client" "$uri" 512 4096 3584 256 $rounds 16 | sed "s/^/# /"
st=${PIPESTATUS[0]}
stop_nbdkit; sst=$?
ok $st "the 512e-xp torture client passed"
[ "$sst" = 0 ] || [ "$sst" = 143 ]; ok $? "nbdkit exited cleanly ($sst)"
[ "$sst" = 0 ] || [ "$sst" = 143 ] || diag "$(tail -30 "$tmpdir/torture.log")"
# 1k logical, 8k physical: 8 writers, fewer rounds.
start_nbdkit torture2 "$SECT4K_PLUGIN" size=16M logical=1024 physical=8192 || exit 1
"$client" "$uri" 1024 8192 0 64 $((rounds / 5)) 8 | sed "s/^/# /"
st=${PIPESTATUS[0]}
stop_nbdkit; sst=$?
ok $st "the 1k/8k torture client passed"
[ "$sst" = 0 ] || [ "$sst" = 143 ]; ok $? "nbdkit exited cleanly ($sst)"
done_testing
