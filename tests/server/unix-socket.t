#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# --unix PATH is never taken from a live server: a second sect4k-server on
# the path of a running one stops (exit 1, one line) and the first keeps
# its clients; a stale socket (nothing answers) is replaced; at exit the
# path is removed only if it is still this server's socket.
. "$(dirname "$0")/../lib.sh"
need nbdinfo python3
need_server

start_server a size=16M || { ok 1 "server a starts"; done_testing; exit; }
pida=$pid sa=$sock
out=$(timeout 10 "$server" --unix "$sa" size=32M 2>&1)
st=$?
[ "$st" = 1 ] && [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] &&
  printf '%s' "$out" | grep -qF "already listening"
ok $? "a second server on a live socket: exit 1, one line ($st: $out)"
[ "$(nbdinfo --size "$uri")" = $((16 << 20)) ]
ok $? "... and the first one still has the path"

# Someone removes a's socket and b starts there: stopping a leaves b's.
rm "$sa"
start_server a size=32M || ok 1 "server b starts on the freed path"
pidb=$pid
pid=$pida stop_server
[ -S "$sa" ] && [ "$(nbdinfo --size "$uri")" = $((32 << 20)) ]
ok $? "stopping a server whose path was taken over leaves the new socket"
pid=$pidb stop_server
[ ! -e "$sa" ]
ok $? "a server removes its own socket at exit"

# A stale socket: bound, then its process gone without removing it.
stale=$tmpdir/stale.sock
python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$stale"
[ -S "$stale" ]
ok $? "a stale socket exists"
# start_server returns as soon as the path is a socket, which the stale
# one already is: wait until the new server answers on it.
start_server stale size=16M &&
  wait_started nbdinfo --can connect "$uri" 2>/dev/null &&
  [ "$(nbdinfo --size "$uri")" = $((16 << 20)) ]
ok $? "a server starts on a stale socket and serves"
grep -q "stale socket" "$tmpdir/stale.log"
ok $? "... saying it replaced it"
stop_server
[ ! -e "$stale" ]
ok $? "... and removes it at exit"
done_testing
