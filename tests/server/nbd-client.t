#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# nbd-client (the kernel's userspace half) negotiates with sect4k-server:
# NBD_OPT_LIST through `nbd-client -l` needs no nbd driver.  Attaching
# /dev/nbdX needs the driver, which this host's kernel lacks: that part
# belongs to the VM harness (serve with sect4k-server instead of nbdkit).
. "$(dirname "$0")/../lib.sh"
need nbd-client
need_server
start_server s size=16M model=512e-xp -e disk || exit 1
out=$(timeout 20 nbd-client -l -unix "$sock" 2>&1)
st=$?
[ $st = 0 ] && printf '%s' "$out" | grep -q '^disk: 512e: .*lowest aligned LBA 7'
ok $? "nbd-client -l lists the export with its description"
[ $st = 0 ] || diag "$out"
stop_server
ok $? "server exited cleanly"
done_testing
