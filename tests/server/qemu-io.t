#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# qemu's NBD client against sect4k-server: it asks for block sizes and
# aligns to the minimum itself, over a Unix socket and over TCP.
. "$(dirname "$0")/../lib.sh"
need qemu-io
need_server

qio () { qemu-io -f raw "$uri" "$@" 2>&1; }
clean () { [ "$1" = 0 ] && ! printf '%s' "$2" | grep -qiE 'error|fail|mismatch|pattern'; }

start_server q size=16M model=4kn $(store_arg q) || exit 1
out=$(qio -c 'discard 0 16384' -c 'write -P 0xab 512 1000' -c 'write -P 0xcd 8191 2' \
          -c 'read -P 0 0 512' -c 'read -P 0xab 512 1000' \
          -c 'read -P 0 1512 6679' -c 'read -P 0xcd 8191 2' \
          -c 'read -P 0 8193 4095' -c 'write -z 65536 65536' \
          -c 'read -P 0 65536 65536' -c 'flush')
st=$?
clean $st "$out"
ok $? "qemu-io on 4kn: unaligned writes (qemu's RMW), zeroes, discard, flush"
[ $st = 0 ] || diag "$out"
out=$(qemu-img map --output=json -f raw "$uri" 2>&1)
printf '%s' "$out" | grep -q '"data": false' && printf '%s' "$out" | grep -q '"data": true'
ok $? "qemu-img map sees data and holes through base:allocation"
stop_server
ok $? "server exited cleanly"
! grep -q refused "$tmpdir/q.log"
ok $? "the server saw no misaligned request"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$server" --listen 127.0.0.1:$port size=16M model=512e $(store_arg t) \
  >"$tmpdir/t.log" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q serving "$tmpdir/t.log" && break; sleep 0.05; done
uri="nbd://127.0.0.1:$port/"
out=$(qio -c 'write -P 0x5a 1536 512' -c 'read -P 0x5a 1536 512' -c 'read -P 0 0 1536')
clean $? "$out"
ok $? "qemu-io over TCP on 512e"
kill $pid; wait $pid
ok $? "server exited cleanly"
done_testing
