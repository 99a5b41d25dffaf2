#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Benchmark: sect4k in front of a slow upstream (issue 16).  The upstream
# is nbdkit memory behind nbdkit's delay filter (DELAY per read and per
# write, default 1ms).  fio's nbd engine, JOBS jobs (one connection
# each, one request at a time), each on its own 1 MiB region, so no two
# jobs touch the same physical sector; 512-byte random writes (an RMW of
# a 4 KiB sector each) and 4 KiB aligned writes.
#
#   blocksize   nbdkit --filter=blocksize --filter=delay memory (minblock=4096)
#   upstream    the delayed upstream alone (no RMW: the 4 KiB reference)
#   plugin      nbdkit + sect4k.so upstream=URI (upstream-connections=JOBS)
#   server      sect4k-server upstream=URI (--threads 2: a connection per
#               loop, every request in flight on it at once)
#   filter      nbdkit --filter=sect4k-filter.so --filter=delay memory
#
# plugin, server and filter send a 512-byte write upstream as it is (one
# round trip: partial writes, the default); their -whole rows add
# upstream-partial-writes=false, so the upstream sees whole 4 KiB sectors
# (a read, then a write: two round trips, as the blocksize filter).
#
# Every config runs REPEAT times, the rounds interleaved (each round runs
# every config once), so a slow spell of a shared machine hits them all;
# the table shows median IOPS and the median of each round's ratios.
#
# Usage: scripts/bench/upstream.sh SERVER PLUGIN FILTER
# Environment: RUNTIME (s per run, default 5), JOBS (8), DELAY (1ms),
# REPEAT (3).
set -euo pipefail
server=$1 plugin=$2 filter=$3
RUNTIME=${RUNTIME:-5} JOBS=${JOBS:-8} DELAY=${DELAY:-1ms} REPEAT=${REPEAT:-3}
for c in fio nbdkit python3; do
  command -v $c >/dev/null || { echo "bench: $c is not installed" >&2; exit 1; }
done
dir=$(mktemp -d /tmp/sect4k-bench-up.XXXXXX)
pids=
trap 'for p in $pids; do kill $p 2>/dev/null; done; wait; rm -rf "$dir"' EXIT
delay="rdelay=$DELAY wdelay=$DELAY"

# serve NAME CMD...: runs CMD (which serves $dir/NAME.sock) until stopped.
serve () {
  local name=$1; shift
  rm -f "$dir/$name.sock"
  "$@" >"$dir/$name.log" 2>&1 &
  pids="$pids $!"
  for _ in $(seq 200); do [ -S "$dir/$name.sock" ] && return; sleep 0.05; done
  echo "bench: $name did not start: $(cat "$dir/$name.log")" >&2; exit 1
}
stop_all () { for p in $pids; do kill $p 2>/dev/null; done; wait 2>/dev/null || true; pids=; }
sock () { echo "nbd+unix:///?socket=$dir/$1.sock"; }

# iops NAME BS: write IOPS of JOBS jobs.
iops () {
  fio --name=b --ioengine=nbd --uri="$(sock "$1")" --rw=randwrite --bs="$2" \
      --size=1M --offset_increment=1M --numjobs="$JOBS" --iodepth=1 \
      --time_based --runtime="$RUNTIME" --group_reporting \
      --output-format=json --output="$dir/fio.json" >/dev/null
  python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["jobs"][0]["write"]["iops"]))' "$dir/fio.json"
}

upstream () { serve up nbdkit -f -U "$dir/up.sock" --filter=delay memory 1G $delay; }

# start CONFIG: serves CONFIG on $dir/CONFIG.sock (the upstream on up.sock).
start () {
  local c=$1 keys=
  case $c in *-whole) keys=upstream-partial-writes=false ;; esac
  case $c in
    blocksize)
      serve blocksize nbdkit -f -U "$dir/blocksize.sock" --filter=blocksize \
        --filter=delay memory 1G minblock=4096 $delay ;;
    upstream) upstream ;;
    plugin*)
      upstream
      serve $c nbdkit -f -U "$dir/$c.sock" "$plugin" upstream="$(sock up)" \
        upstream-connections="$JOBS" model=512e $keys ;;
    server*)
      upstream
      serve $c "$server" --unix "$dir/$c.sock" --threads 2 \
        upstream="$(sock up)" upstream-connections="$JOBS" model=512e \
        $keys ;;
    filter*)
      serve $c nbdkit -f -U "$dir/$c.sock" --filter="$filter" \
        --filter=delay memory 1G model=512e $delay $keys ;;
  esac
}

configs="blocksize upstream plugin plugin-whole server server-whole filter filter-whole"
: >"$dir/results"
for round in $(seq "$REPEAT"); do
  for c in $configs; do
    start $c
    s=$c; [ $c = upstream ] && s=up
    for bs in 512 4096; do
      # The upstream alone does no RMW: 512 B has no reference there.
      [ $c = upstream ] && [ $bs = 512 ] && continue
      echo "$round $c $bs $(iops $s $bs)" >>"$dir/results"
    done
    stop_all
  done
done

python3 - "$dir/results" "$REPEAT" $configs <<'PY'
import statistics as st, sys
res = {}
for line in open(sys.argv[1]):
    rnd, c, bs, v = line.split()
    res[(int(rnd), c, int(bs))] = int(v)
rounds, configs = int(sys.argv[2]), sys.argv[3:]
def med(c, bs):
    v = [res[(r, c, bs)] for r in range(1, rounds + 1) if (r, c, bs) in res]
    return round(st.median(v)) if v else None
def ratio(c, bs, ref):
    v = [res[(r, c, bs)] / res[(r, ref, bs)] for r in range(1, rounds + 1)
         if (r, c, bs) in res and (r, ref, bs) in res]
    return st.median(v) if v else None
print(f"{rounds} interleaved round(s); medians")
print(f"{'config':<13} {'512 B IOPS':>10} {'4 KiB IOPS':>10}   512 B vs blocksize, 4 KiB vs upstream")
for c in configs:
    a, b = med(c, 512), med(c, 4096)
    ra, rb = ratio(c, 512, "blocksize"), ratio(c, 4096, "upstream")
    print(f"{c:<13} {a if a is not None else '-':>10} {b:>10}   "
          f"{f'{ra:.1f}x' if ra is not None else '-'}, {rb:.2f}x")
PY
