#!/bin/bash
# nbd-client (the kernel's userspace half) negotiates with sect4k-server:
# NBD_OPT_LIST through `nbd-client -l` needs no nbd driver.  Attaching
# /dev/nbdX needs the driver, which this host's kernel lacks: that part
# belongs to the VM harness (serve with sect4k-server instead of nbdkit).
. "$(dirname "$0")/../lib.sh"
need nbd-client
server=${SECT4K_SERVER:-$(dirname "$0")/../../sect4k-server}
[ -x "$server" ] || skip_all "$server is not built"
"$server" --unix "$tmpdir/s.sock" size=16M model=512e-xp -e disk >"$tmpdir/log" 2>&1 &
pid=$!
for _ in $(seq 100); do [ -S "$tmpdir/s.sock" ] && break; sleep 0.05; done
out=$(timeout 20 nbd-client -l -unix "$tmpdir/s.sock" 2>&1)
st=$?
[ $st = 0 ] && printf '%s' "$out" | grep -q '^disk: 512e: .*lowest aligned LBA 7'
ok $? "nbd-client -l lists the export with its description"
[ $st = 0 ] || diag "$out"
kill $pid; wait $pid
ok $? "server exited cleanly"
done_testing
