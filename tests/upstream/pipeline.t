#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# sect4k-server's loops do not wait for the upstream: with one loop
# (--threads 1) and an upstream that takes DELAY per read and per write
# (nbdkit's delay filter, which serves a connection's requests in
# parallel), 8 requests at once finish in about one round trip (two for
# an RMW), not 8.  A loop that blocked on each would need at least 8
# DELAY for the reads and 16 for the 512-byte writes; the limits are
# half of that (the rest is slack for a loaded machine and sanitizers).
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/up.sh"
need nbdkit
need_server
need_pynbd
delay=300                       # ms

start_nbdkit up --filter=delay memory 64M rdelay=${delay}ms \
  wdelay=${delay}ms || exit 1
up_uri=$uri
start_front server front --threads 1 upstream="$up_uri" model=512e || exit 1

# run KIND: prints the milliseconds 8 requests took.  KIND: clients (8
# connections, one read each), pipelined (one connection, 8 reads in
# flight), rmw (8 connections, one 512-byte write each, distinct 4 KiB
# sectors).
run () {
  $py - "$uri" "$1" <<'EOF'
import nbd, sys, threading, time
uri, kind = sys.argv[1:]
def conn():
    h = nbd.NBD()
    h.connect_uri(uri)
    return h
hs = [conn() for i in range(8)]
hs[0].pread(512, 1 << 20)        # the loop's upstream connection is made
t0 = time.monotonic()
if kind == "pipelined":
    h = hs[0]
    bufs = [nbd.Buffer(4096) for i in range(8)]
    for i in range(8):
        h.aio_pread(bufs[i], i * 65536)
    while h.aio_in_flight() > 0:
        h.poll(-1)
else:
    def one(i):
        if kind == "rmw":
            hs[i].pwrite(b"\x55" * 512, i * 65536 + 512)
        else:
            hs[i].pread(4096, i * 65536)
    ts = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in ts: t.start()
    for t in ts: t.join()
print(round((time.monotonic() - t0) * 1000))
EOF
}

for kind in clients pipelined rmw; do
  ms=$(run $kind)
  rtts=$([ $kind = rmw ] && echo 2 || echo 1)
  limit=$((delay * 4 * rtts))
  [ -n "$ms" ] && [ "$ms" -lt $limit ]
  ok $? "--threads 1, $kind: 8 requests over a ${delay} ms upstream in $ms ms (limit $limit, one at a time would take $((delay * 8 * rtts)))"
done
stop_front server; st=$?
ok $st "the server exited cleanly ($st)"
done_testing
