#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Where flush goes upstream (nbdkit's log filter counts it).  With
# multi-conn one flush covers every connection's writes, so one goes
# upstream; without it, each connection that wrote is flushed.  A flush
# with nothing written since the last one sends nothing.
#
# The plugin's pool: 8 writes go round its 4 connections.  The server:
# one upstream connection per event loop.  With --threads 1 every write
# is on that one; with --threads 2 and clients on both loops, a client's
# flush on one loop must also reach the connection of the other loop
# that wrote (without multi-conn), after that write.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/up.sh"
need nbdkit qemu-io
need_server
need_pynbd

# upstream_flushes LOG: flushes the upstream received.
upstream_flushes () { grep -c 'Flush id=[0-9]* \.\.\.$' "$1"; }

# start_logged MODE NAME: nbdkit memory with multi-conn-mode=MODE,
# logging to $log.
start_logged () {
  log=$tmpdir/$2.requests
  start_nbdkit up-$2 --filter=log --filter=multi-conn memory 64M \
    multi-conn-mode=$1 logfile="$log" || exit 1
  up_pid=$pid up_uri=$uri
}

for mode in auto disable; do
  start_logged $mode $mode-plugin
  start_front plugin $mode-plugin upstream="$up_uri" model=512e || exit 1
  # qemu-io flushes once more as it closes.
  qemu-io -f raw "$uri" -c 'write 0 4k' -c 'write 4k 4k' -c 'write 8k 4k' \
    -c 'write 12k 4k' -c 'write 16k 4k' -c 'write 20k 4k' \
    -c 'write 24k 4k' -c 'write 28k 4k' -c flush >/dev/null 2>&1
  n=$(upstream_flushes "$log")
  want=$([ $mode = auto ] && echo 1 || echo 4)
  [ "$n" = "$want" ]
  ok $? "plugin, upstream multi-conn-mode=$mode: $n upstream flush(es) for one client flush (want $want)"
  stop_front plugin
  stop_upstream

  # The server, one loop: its one connection has every write.
  start_logged $mode $mode-server1
  start_front server $mode-server1 --threads 1 upstream="$up_uri" \
    model=512e || exit 1
  qemu-io -f raw "$uri" -c 'write 0 4k' -c 'write 4k 4k' -c 'write 8k 4k' \
    -c 'write 12k 4k' -c 'write 16k 4k' -c 'write 20k 4k' \
    -c 'write 24k 4k' -c 'write 28k 4k' -c flush >/dev/null 2>&1
  n=$(upstream_flushes "$log")
  [ "$n" = 1 ]
  ok $? "server --threads 1, upstream multi-conn-mode=$mode: $n upstream flush(es) for one client flush (want 1)"
  stop_front server
  stop_upstream

  # The server, two loops: 8 clients write without flushing (the kernel
  # spreads them over both loops' accepts), then one flushes, twice.
  start_logged $mode $mode-server2
  start_front server $mode-server2 --threads 2 upstream="$up_uri" \
    model=512e || exit 1
  $py - "$uri" "$log" $mode <<'EOF' 2>&1 | sed 's/^/# /'
import nbd, re, sys
uri, log, mode = sys.argv[1:]
hs = []
for i in range(8):
    h = nbd.NBD()
    h.connect_uri(uri)
    hs.append(h)
for i, h in enumerate(hs):
    h.pwrite(b"x" * 4096, i * 4096)
f = nbd.NBD()
f.connect_uri(uri)
f.flush()
lines = open(log).read().splitlines()
f.flush()
again = open(log).read().splitlines()
# connection -> line of its last write; and the flushes after it
last_write, flushes = {}, []
for n, l in enumerate(lines):
    m = re.match(r".* connection=(\d+) (Write|Flush) id=\d+.*\.\.\.$", l)
    if m and m.group(2) == "Write":
        last_write[m.group(1)] = n
    elif m:
        flushes.append((m.group(1), n))
print("%d upstream connection(s) wrote, %d flush(es): %s" %
      (len(last_write), len(flushes), flushes))
bad = 0
if mode == "auto":
    bad += len(flushes) != 1
else:
    for c, w in last_write.items():
        if not any(fc == c and fn > w for fc, fn in flushes):
            print("connection %s: written, not flushed after" % c)
            bad += 1
new = [l for l in again[len(lines):] if re.search(r"Flush id=\d+ \.\.\.$", l)]
if new:
    print("a second flush with nothing written sent %d" % len(new))
    bad += 1
sys.exit(1 if bad else 0)
EOF
  ok ${PIPESTATUS[0]} "server --threads 2, upstream multi-conn-mode=$mode: $([ $mode = auto ] && echo "one upstream flush" || echo "each loop's connection that wrote is flushed after its writes"); a second flush sends none"
  stop_front server
  stop_upstream
done
done_testing
