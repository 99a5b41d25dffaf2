#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Loops letting go of the upstream store while others flush, on threads,
# and a thread writing and flushing with the synchronous calls beside
# them (as --scsi on the same export) (tests/upstream/
# store-loops-concurrent.c; make check-tsan runs it under TSan): every
# request ends, no loss is counted, and in the upstream's log every
# connection that wrote had a flush after its last write.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/up.sh"
need nbdkit
need_pynbd
client=$SECT4K_BUILD/tests/upstream-store-loops-concurrent
[ -x "$client" ] || skip_all "$client is not built"

log=$tmpdir/up.requests
start_nbdkit up --filter=log --filter=multi-conn memory 64M \
  multi-conn-mode=disable logfile="$log" || exit 1
up_pid=$pid up_uri=$uri
"$client" "$up_uri" > "$tmpdir/client.out" 2>&1
st=$?
sed 's/^/# /' "$tmpdir/client.out"
[ "$st" = 0 ] && grep -q '^ok 1 ' "$tmpdir/client.out" &&
  grep -q '^ok 2 ' "$tmpdir/client.out"
ok $? "loops letting go while others flush: every request ended, no loss (status $st)"
every_write_flushed "$log"
ok $? "every loop's writes were flushed upstream after the last"
stop_upstream
done_testing
