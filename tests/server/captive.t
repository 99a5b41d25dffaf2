#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# sect4k-server as a fixture, with nbdkit's conventions: --run CMD (the
# variables, CMD's exit status, 128+N for a signal, a stop signal mid-run),
# -U - (a private socket whose directory is gone at exit), -P/--pidfile,
# --exit-with-parent, SIGHUP, and systemd socket activation through the
# real systemd-socket-activate.
. "$(dirname "$0")/../lib.sh"
need nbdinfo python3
need_server

# The server under a time limit, its log in $tmpdir/NAME.log.
run_server () {  # run_server NAME ARGS...
  name=$1; shift
  timeout 20 "$server" "$@" 2>"$tmpdir/$name.log"
}

# -U - --run: the export's geometry through $uri; the socket is there
# while CMD runs and gone with its directory afterwards.
out=$(run_server geo -U - size=64M logical=512 physical=4096 \
        --run 'test -S "$unixsocket" && echo "sock=$unixsocket" &&
               echo "port=[$port] exportname=[$exportname] uri=$uri" &&
               nbdinfo --json "$uri"')
st=$?
[ "$st" = 0 ]
ok $? "-U - --run 'nbdinfo --json \"\$uri\"': exit 0 ($st)"
printf '%s\n' "$out" | grep -q '"block_size_minimum": 512,' &&
  printf '%s\n' "$out" | grep -q '"block_size_preferred": 4096,' &&
  printf '%s\n' "$out" | grep -q '"export-size": 67108864,'
ok $? "... nbdinfo sees logical 512, physical 4096, 64 MiB"
sock=$(printf '%s\n' "$out" | sed -n 's/^sock=//p')
case "$sock" in "${TMPDIR:-/tmp}"/sect4k-*/socket) true ;; *) false ;; esac
ok $? "... \$unixsocket is a socket in a new directory ($sock)"
printf '%s\n' "$out" | grep -qxF "port=[] exportname=[] uri=nbd+unix:///?socket=$sock"
ok $? "... \$port empty, \$exportname \"\", \$uri the socket's"
[ -n "$sock" ] && [ ! -e "$sock" ] && [ ! -e "$(dirname "$sock")" ]
ok $? "... the private socket and its directory are gone afterwards"

# $nbd, as nbdkit >= 1.24 sets it: the same URI as $uri, so that commands
# written for nbdkit (qemu-img ... $nbd) run unchanged.
if command -v qemu-img >/dev/null; then
  out=$(run_server nbdvar -U - 4M \
          --run 'echo "same=$([ "$nbd" = "$uri" ] && echo yes)" &&
                 qemu-img info -f raw --output=json "$nbd"')
  st=$?
  [ "$st" = 0 ] && printf '%s\n' "$out" | grep -qx 'same=yes' &&
    printf '%s\n' "$out" | grep -q '"virtual-size": 4194304,'
  ok $? "--run 'qemu-img info \"\$nbd\"': \$nbd is \$uri, qemu-img reads 4 MiB ($st)"
else
  echo "ok $((tap_n += 1)) # SKIP qemu-img is not installed"
fi

# status_case NAME CMD STATUS LOG-LINE DESCRIPTION: the server's exit
# status is STATUS and its log says LOG-LINE.
status_case () {
  run_server "$1" -U - 1M --run "$2"
  st=$?
  [ "$st" = "$3" ]
  ok $? "$5 ($st)"
  grep -q "$4" "$tmpdir/$1.log"
  ok $? "... and says so"
}
status_case exit7 'exit 7' 7 "the command exited with status 7" "--run 'exit 7' exits 7"
status_case killed 'kill -KILL $$' 137 "killed by signal 9" \
  "a command killed by SIGKILL: exit 128+9"

# Named exports: $exportname and $uri are the default (first) export's.
out=$(run_server named -U - size=1M exports=512n,4kn \
        --run 'echo "$exportname"; nbdinfo --json "$uri" | grep block_size_minimum')
[ "$(printf '%s\n' "$out" | head -n 1)" = 512n ] &&
  printf '%s\n' "$out" | grep -q '"block_size_minimum": 512,'
ok $? "exports=512n,4kn: \$exportname 512n, \$uri reaches it ($out)"

# TCP: $port and an nbd:// URI; an export name is percent-encoded.
out=$(run_server tcp --listen 127.0.0.1:0 -e 'a b' 4M \
        --run 'echo "$port $unixsocket|$uri"; nbdinfo --size "$uri"')
port=$(printf '%s\n' "$out" | head -n 1 | cut -d' ' -f1)
[ -n "$port" ] && [ "$(printf '%s\n' "$out" | head -n 1)" = "$port |nbd://127.0.0.1:$port/a%20b" ] &&
  [ "$(printf '%s\n' "$out" | tail -n 1)" = $((4 << 20)) ]
ok $? "--listen: \$port, \$unixsocket empty, \$uri nbd://127.0.0.1:PORT/a%20b serves ($out)"

# SIGTERM to the server mid-run: it stops, the command's process group
# gets SIGTERM (a background child of it too), the status is the
# command's (143).
wait_for () { for _ in $(seq 100); do "$@" && return 0; sleep 0.05; done; return 1; }
"$server" -U - 1M --run "sleep 60 & echo \$! > $tmpdir/bg.pid; wait" \
  2>"$tmpdir/term.log" &
spid=$!
server_pids="$server_pids $spid"
wait_for test -s "$tmpdir/bg.pid"
ok $? "a command that leaves a background sleep runs"
kill -TERM "$spid"
wait "$spid"; st=$?
[ "$st" = 143 ]
ok $? "SIGTERM to the server mid-run: exit 128+15, the command's ($st)"
bg=$(cat "$tmpdir/bg.pid")
wait_for sh -c "! kill -0 $bg 2>/dev/null"
ok $? "... and the command's background child is gone too"
grep -q "stopping the command" "$tmpdir/term.log"
ok $? "... the server says it stopped the command"

# -P: written once the socket listens, holds the pid while serving.
"$server" -U "$tmpdir/p.sock" -P "$tmpdir/p.pid" 1M 2>"$tmpdir/p.log" &
spid=$!
server_pids="$server_pids $spid"
wait_for test -s "$tmpdir/p.pid"
[ "$(cat "$tmpdir/p.pid")" = "$spid" ] && [ -S "$tmpdir/p.sock" ] &&
  nbdinfo --size "nbd+unix:///?socket=$tmpdir/p.sock" >/dev/null
ok $? "--pidfile holds the server's pid ($spid) while it serves"

# SIGHUP stops the server cleanly, as in nbdkit.
kill -HUP "$spid"
wait "$spid"; st=$?
[ "$st" = 0 ] && [ ! -e "$tmpdir/p.sock" ] && grep -q "Hangup: finishing" "$tmpdir/p.log"
ok $? "SIGHUP: a clean stop, exit 0, socket removed ($st)"

# --exit-with-parent: the parent (a shell) is killed; the server stops.
sh -c '"$1" --exit-with-parent -U "$2/ewp.sock" -P "$2/ewp.pid" 1M 2>"$2/ewp.log" &
       exec sleep 60' sh "$server" "$tmpdir" &
parent=$!
wait_for test -s "$tmpdir/ewp.pid"
spid=$(cat "$tmpdir/ewp.pid")
server_pids="$server_pids $spid"
kill -0 "$spid" 2>/dev/null
ok $? "--exit-with-parent: the server runs while its parent does"
kill -KILL "$parent"; wait "$parent" 2>/dev/null
wait_for sh -c "! kill -0 $spid 2>/dev/null"
ok $? "... and stops when its parent dies"
[ ! -e "$tmpdir/ewp.sock" ] && grep -q "Terminated: finishing" "$tmpdir/ewp.log"
ok $? "... cleanly (SIGTERM, socket removed)"

# Socket activation: systemd-socket-activate binds, execs the server on
# the first connection; nbdinfo is served through the inherited socket.
# Bad socket activation: one line, exit 1.
out=$(sh -c 'LISTEN_PID=$$ LISTEN_FDS=17 exec "$0" 1M' "$server" 2>&1)
st=$?
[ "$st" = 1 ] && [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] &&
  printf '%s' "$out" | grep -q "LISTEN_FDS=17: sect4k-server serves 1 to 16 sockets"
ok $? "LISTEN_FDS=17: exit 1, one line ($st: $out)"
out=$(sh -c 'LISTEN_PID=$$ LISTEN_FDS=1 exec "$0" 1M 3</dev/null' "$server" 2>&1)
st=$?
[ "$st" = 1 ] && printf '%s' "$out" | grep -q "fd 3 is not a listening stream socket"
ok $? "LISTEN_FDS=1 with fd 3 not a socket: exit 1 ($st: $out)"
out=$("$server" --help)
for k in --run --pidfile --exit-with-parent "-U - makes" LISTEN_FDS '$dev_NAME'; do
  printf '%s' "$out" | grep -qF -- "$k" || { diag "--help lacks $k"; false; }
done
ok $? "--help names --run, --pidfile, --exit-with-parent, -U -, socket activation"

if command -v systemd-socket-activate >/dev/null; then
  sa=$tmpdir/sa.sock
  systemd-socket-activate -l "$sa" "$server" -P "$tmpdir/sa.pid" size=8M \
    physical=4096 2>"$tmpdir/sa.log" &
  spid=$!
  server_pids="$server_pids $spid"
  wait_for test -S "$sa"
  out=$(timeout 10 nbdinfo --json "nbd+unix:///?socket=$sa")
  printf '%s\n' "$out" | grep -q '"block_size_preferred": 4096,' &&
    printf '%s\n' "$out" | grep -q '"export-size": 8388608,'
  ok $? "systemd-socket-activate -l PATH sect4k-server: nbdinfo through the inherited socket"
  [ "$(cat "$tmpdir/sa.pid")" = "$spid" ] && grep -q "on unix:$sa" "$tmpdir/sa.log"
  ok $? "... the server is the activated process and says where it serves"
  kill "$spid"; wait "$spid"; st=$?
  [ "$st" = 0 ]
  ok $? "... and stops cleanly ($st)"

  # Two sockets (ListenStream= twice): a Unix one and a loopback TCP
  # port, both served, as nbdkit does; connections on either, in turn.
  port=$(python3 -c 'import socket; s = socket.socket()
s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  systemd-socket-activate -l "$tmpdir/sa3.sock" -l "127.0.0.1:$port" \
    "$server" size=8M physical=4096 2>"$tmpdir/sa3.log" &
  spid=$!
  server_pids="$server_pids $spid"
  wait_for test -S "$tmpdir/sa3.sock"
  a=$(timeout 10 nbdinfo --size "nbd+unix:///?socket=$tmpdir/sa3.sock")
  b=$(timeout 10 nbdinfo --size "nbd://127.0.0.1:$port")
  c=$(timeout 10 nbdinfo --size "nbd+unix:///?socket=$tmpdir/sa3.sock")
  [ "$a" = 8388608 ] && [ "$b" = 8388608 ] && [ "$c" = 8388608 ] &&
    grep -q "on unix:$tmpdir/sa3.sock, 127.0.0.1:$port " "$tmpdir/sa3.log"
  ok $? "systemd-socket-activate -l PATH -l 127.0.0.1:PORT: both served (sizes $a, $b, $c)"
  kill "$spid"; wait "$spid"; st=$?
  [ "$st" = 0 ]
  ok $? "... and it stops cleanly ($st)"

  systemd-socket-activate -l "$tmpdir/sa2.sock" "$server" -U "$tmpdir/x.sock" \
    1M 2>"$tmpdir/sa2.log" &
  spid=$!
  server_pids="$server_pids $spid"
  wait_for test -S "$tmpdir/sa2.sock"
  timeout 10 nbdinfo --size "nbd+unix:///?socket=$tmpdir/sa2.sock" >/dev/null 2>&1
  wait "$spid"; st=$?
  [ "$st" = 1 ] && grep -q "socket activation (LISTEN_FDS) cannot be combined with --unix" "$tmpdir/sa2.log"
  ok $? "socket activation with --unix: exit 1, one line ($st: $(tail -n 1 "$tmpdir/sa2.log"))"
else
  for _ in 1 2 3 4 5 6; do echo "ok $((tap_n += 1)) # SKIP systemd-socket-activate is not installed"; done
fi
done_testing
