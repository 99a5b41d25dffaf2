#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Block status over an upstream (issue 21 item 3).
#
# Timing: sect4k-server's loop does not wait for the upstream's block
# status.  With one loop (--threads 1) and an upstream that takes 300 ms
# per block status (nbdkit's delay filter, delay-extents=), 8 block
# status requests at once (one connection with 8 in flight, and 8
# connections with one each) finish in about one round trip; a loop that
# waited for each would need 8.  The limit is two round trips (three
# under a sanitizer).  The upstream killed with one in flight: an
# error, and service again once it is back.
#
# Identity: over an upstream whose extents alternate at 512-byte
# granularity and which answers at most 5 of them at a time (nbdkit's
# eval plugin), the server's asynchronous block status and the plugin's
# synchronous one give the same runs for every range asked, on 512e-xp
# (alignment offset 3584), with and without REQ_ONE.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/up.sh"
need nbdkit
need_server
need_pynbd
delay=300                       # ms

# ---- timing ----
start_nbdkit up --filter=delay memory 64M delay-extents=${delay}ms || exit 1
up_uri=$uri up_pid=$pid
start_front server front --threads 1 upstream="$up_uri" model=512e || exit 1

# run KIND: the milliseconds 8 block status requests took (KIND:
# pipelined, one connection; clients, 8 connections).
run () {
  $py - "$uri" "$1" <<'EOF'
import nbd, sys, threading, time
uri, kind = sys.argv[1:]
def conn():
    h = nbd.NBD()
    h.add_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
    h.connect_uri(uri)
    return h
def cb(*args):
    return 0
hs = [conn() for i in range(8 if kind == "clients" else 1)]
hs[0].pwrite(b"\x11" * 4096, 1 << 20)
hs[0].flush()                       # nothing lost when it is killed below
hs[0].block_status(65536, 0, cb)    # the loop's upstream connection is made
t0 = time.monotonic()
if kind == "pipelined":
    h = hs[0]
    for i in range(8):
        h.aio_block_status(65536, i * (1 << 20), cb)
    while h.aio_in_flight() > 0:
        h.poll(-1)
else:
    ts = [threading.Thread(target=lambda i=i: hs[i].block_status(
              65536, i * (1 << 20), cb)) for i in range(8)]
    for t in ts: t.start()
    for t in ts: t.join()
print(round((time.monotonic() - t0) * 1000))
EOF
}

rtts=2
[ -n "${SECT4K_SAN:-}" ] && rtts=3
for kind in pipelined clients; do
  ms=$(run $kind)
  limit=$((delay * rtts))
  [ -n "$ms" ] && [ "$ms" -lt $limit ]
  ok $? "--threads 1, $kind: 8 block status requests over a ${delay} ms upstream in $ms ms (limit $limit; one at a time would take $((delay * 8)))"
done

# The upstream dies with a block status in flight: the client gets an
# error, not a hang; once it is back, block status works again (the
# loop's connection is made anew, with base:allocation).
disown "$up_pid"                # no "Killed" notice from bash
$py - "$uri" "$tmpdir/up.pid" "$tmpdir/restart" <<'EOF' &
import nbd, os, signal, sys, time
uri, pidfile, flag = sys.argv[1:]
h = nbd.NBD()
h.add_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
h.connect_uri(uri)
cookie = h.aio_block_status(65536, 0, lambda *a: 0)
time.sleep(0.1)
os.kill(int(open(pidfile).read()), signal.SIGKILL)
t0 = time.monotonic()
try:
    while not h.aio_command_completed(cookie):
        h.poll(1000)
        if time.monotonic() - t0 > 10:
            sys.exit(2)         # hung
    print("# block status succeeded with its upstream killed")
    sys.exit(1)
except nbd.Error as e:
    print("# block status with the upstream killed:", e.string)
open(flag, "w").close()         # restart it
for i in range(100):
    try:
        h.block_status(65536, 0, lambda *a: 0)
        sys.exit(0)
    except nbd.Error:
        time.sleep(0.1)
sys.exit(3)
EOF
client=$!
for _ in $(seq 200); do [ -e "$tmpdir/restart" ] && break; sleep 0.05; done
front_pid=$pid
start_nbdkit up --filter=delay memory 64M delay-extents=10ms || exit 1
up_pid=$pid pid=$front_pid
wait $client
ok $? "the upstream killed during block status: an error, then service once it is back"

stop_front server; st=$?
ok $st "the server exited cleanly ($st)"
stop_upstream

# ---- identity with the synchronous path ----
table=$tmpdir/extents.table
$py - "$table" <<'EOF'
import random, sys
# 1 MiB in runs of 1 to 24 logical sectors: data, hole+zero, or zero.
random.seed(21)
off, size, out = 0, 1 << 20, []
while off < size:
    n = min(random.randint(1, 24) * 512, size - off)
    out.append("%d %d %s" % (off, n, random.choice(["", "hole,zero", "zero"])))
    off += n
open(sys.argv[1], "w").write("\n".join(out) + "\n")
EOF
# (No sanitizer runtime: there is no sect4k code in it, and TSan's
# crashes the eval plugin's shells.)
SECT4K_SAN= start_nbdkit frag eval get_size='echo 1M' \
  pread='dd if=/dev/zero count=$3 iflag=count_bytes status=none' \
  can_extents='exit 0' \
  extents="awk -v o=\$4 'n < 5 && \$1 + \$2 > o { print; n++ }' $table" ||
  exit 1
up_uri=$uri up_pid=$pid
start_front plugin sync -r upstream="$up_uri" model=512e-xp || exit 1
sync_uri=$uri sync_pid=$pid
start_front server async -r --threads 1 upstream="$up_uri" model=512e-xp ||
  exit 1
async_uri=$uri async_pid=$pid

$py - "$sync_uri" "$async_uri" <<'EOF'
import nbd, random, sys
def conn(uri):
    h = nbd.NBD()
    h.add_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
    h.connect_uri(uri)
    return h
hs, ha = conn(sys.argv[1]), conn(sys.argv[2])
size = hs.get_size()
def runs(h, length, off, flags):
    out = []
    def cb(ctx, o, entries, err):
        if ctx == nbd.CONTEXT_BASE_ALLOCATION:
            out.extend(entries)
        return 0
    h.block_status(length, off, cb, flags)
    return out
random.seed(3)
ranges = [(size, 0), (4096, 3584), (512, 512)]
for i in range(120):
    off = random.randrange(size // 512) * 512
    ranges.append((random.randint(1, min(256, (size - off) // 512)) * 512,
                   off))
differ, total = 0, 0
for length, off in ranges:
    for flags in (0, nbd.CMD_FLAG_REQ_ONE):
        a, b = runs(hs, length, off, flags), runs(ha, length, off, flags)
        total += len(a) // 2
        if a != b:
            differ += 1
            if differ <= 3:
                print("# %d at %d, flags %d: plugin %s, server %s"
                      % (length, off, flags, a[:8], b[:8]))
print("# %d block status requests, %d runs, %d differ"
      % (2 * len(ranges), total, differ))
sys.exit(0 if differ == 0 and total > 200 else 1)
EOF
ok $? "identity: the server's asynchronous block status gives the plugin's runs"
pid=$async_pid; stop_front server; st=$?
ok $st "the server exited cleanly ($st)"
pid=$sync_pid; stop_front plugin; st=$?
ok $st "nbdkit exited cleanly ($st)"
done_testing
