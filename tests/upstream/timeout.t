#!/bin/bash
# upstream-timeout= (issue 29 item 3), upstream-timeout=2 on both front
# ends:
# - an upstream that accepts and never answers (a Python listener on a
#   Unix socket): the start fails within the timeout, exit 1, one line;
# - an upstream that goes silent (nbdkit memory, SIGSTOPped) after a
#   write and a flush: a read fails with EIO within the timeout;
# - then six reads in flight on it and SIGTERM: they fail, and the
#   front end exits 0 (nbdkit: 0 or 143) within a few seconds.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/up.sh"
need nbdkit
need_server
need_pynbd

# since START: seconds since START (date +%s.%N), to 0.01 s.
since () { awk -v s="$1" -v n="$(date +%s.%N)" 'BEGIN { printf "%.2f", n - s }'; }

# The silent upstream: accepts, keeps every connection, says nothing.
silent=$tmpdir/silent.sock
$py - "$silent" <<'EOF' &
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
s.listen(64)
held = []
while True:
    held.append(s.accept()[0])
EOF
server_pids="$server_pids $!"
for _ in $(seq 50); do [ -S "$silent" ] && break; sleep 0.1; done

for front in server plugin; do
  out=$tmpdir/silent-$front.out
  rm -f "$tmpdir/s.sock"
  start=$(date +%s.%N)
  case $front in
    server) timeout 20 "$server" --unix "$tmpdir/s.sock" \
              upstream="nbd+unix:///?socket=$silent" upstream-timeout=2 \
              >"$out" 2>&1 ;;
    plugin) timeout 20 env $(sanitizer_env) nbdkit -f -U "$tmpdir/s.sock" \
              "$SECT4K_PLUGIN" upstream="nbd+unix:///?socket=$silent" \
              upstream-timeout=2 >"$out" 2>&1 ;;
  esac
  st=$?
  took=$(since "$start")
  # Under ASan, nbdkit's exit can hang after an error (see params.t).
  [ $st = 124 ] && [ "${SECT4K_SAN:-}" = asan ] && [ $front = plugin ] && st=1
  lines=$(grep -c . "$out")
  [ $st = 1 ] && [ "$lines" = 1 ] &&
    grep -q "upstream=nbd+unix:///?socket=$silent: no answer in 2s (upstream-timeout=)" "$out" &&
    [ "${took%.*}" -lt 8 ]
  ok $? "$front: an upstream that never answers fails the start in ${took}s, exit $st, one line"
  diag "$(cat "$out")"
done

for front in server plugin; do
  start_nbdkit up-$front memory 64M || exit 1
  up_pid=$pid up_uri=$uri
  start_front $front $front upstream="$up_uri" upstream-timeout=2 \
    model=512e || exit 1
  front_pid=$pid
  rm -f "$tmpdir/stopped" "$tmpdir/pending"
  $py - "$uri" "$tmpdir" >"$tmpdir/client.out" 2>&1 <<'EOF' &
import errno, nbd, os, sys, time
uri, tmp = sys.argv[1:]
h = nbd.NBD()
h.connect_uri(uri)
h.pwrite(b"x" * 4096, 0)
h.flush()
open(os.path.join(tmp, "stop"), "w").close()
while not os.path.exists(os.path.join(tmp, "stopped")):
    time.sleep(0.05)
t = time.time()
try:
    h.pread(4096, 0)
    print("read: ok (want EIO)")
    sys.exit(1)
except nbd.Error as e:
    took = time.time() - t
    print("read: %s after %.1fs" % (e.errnum == errno.EIO and "EIO" or e,
                                     took))
    if e.errnum != errno.EIO or took > 6:
        sys.exit(1)
# Six reads in flight, then the front end gets SIGTERM.
g = nbd.NBD()
g.connect_uri(uri)
bufs = [nbd.Buffer(4096) for i in range(6)]
cookies = [g.aio_pread(b, i * 4096) for i, b in enumerate(bufs)]
open(os.path.join(tmp, "pending"), "w").close()
failed = 0
end = time.time() + 20
while time.time() < end and cookies:
    try:
        g.poll(1000)
    except nbd.Error:
        break                   # the connection ended
    for c in list(cookies):
        try:
            if g.aio_command_completed(c):
                cookies.remove(c)
        except nbd.Error:
            cookies.remove(c)
            failed += 1
print("%d reads failed, %d left when the connection ended" %
      (failed, len(cookies)))
sys.exit(0)
EOF
  cpid=$!
  for _ in $(seq 100); do [ -e "$tmpdir/stop" ] && break; sleep 0.1; done
  kill -STOP "$up_pid"
  touch "$tmpdir/stopped"
  for _ in $(seq 150); do [ -e "$tmpdir/pending" ] && break; sleep 0.1; done
  sleep 0.5
  start=$(date +%s.%N)
  pid=$front_pid
  stop_front $front; st=$?
  took=$(since "$start")
  wait $cpid; cst=$?
  diag "$(cat "$tmpdir/client.out")"
  ok $cst "$front: a read on an upstream gone silent fails with EIO within the timeout"
  [ $st = 0 ] && [ "${took%.*}" -lt 8 ]
  ok $? "$front: SIGTERM with six reads pending on it exits $st in ${took}s"
  grep "upstream-timeout" "$tmpdir/$front.log" | head -3 | sed 's/^/# /'
  # Its own exit after SIGSTOP/SIGCONT is not under test (it can hang
  # under ASan's preload).
  kill -9 "$up_pid"; kill -CONT "$up_pid"; wait "$up_pid" 2>/dev/null
  rm -f "$tmpdir/stop"
done
done_testing
