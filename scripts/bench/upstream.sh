#!/bin/bash
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
# Usage: scripts/bench/upstream.sh SERVER PLUGIN FILTER
# Environment: RUNTIME (s per run, default 5), JOBS (8), DELAY (1ms).
set -euo pipefail
server=$1 plugin=$2 filter=$3
RUNTIME=${RUNTIME:-5} JOBS=${JOBS:-8} DELAY=${DELAY:-1ms}
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
declare -A r
run () {  # run CONFIG: both block sizes
  for bs in 512 4096; do r[$1,$bs]=$(iops "$1" $bs); done
  stop_all
}
serve blocksize nbdkit -f -U "$dir/blocksize.sock" --filter=blocksize \
  --filter=delay memory 1G minblock=4096 $delay
run blocksize
upstream; r[upstream,512]=-; r[upstream,4096]=$(iops up 4096); stop_all
upstream
serve plugin nbdkit -f -U "$dir/plugin.sock" "$plugin" upstream="$(sock up)" \
  upstream-connections="$JOBS" model=512e
run plugin
upstream
serve server "$server" --unix "$dir/server.sock" --threads 2 \
  upstream="$(sock up)" upstream-connections="$JOBS" model=512e
run server
serve filter nbdkit -f -U "$dir/filter.sock" --filter="$filter" \
  --filter=delay memory 1G model=512e $delay
run filter

printf '%-10s %12s %12s   %s\n' config "512 B IOPS" "4 KiB IOPS" "512 B vs blocksize, 4 KiB vs upstream"
for c in blocksize upstream plugin server filter; do
  a=${r[$c,512]} b=${r[$c,4096]}
  ra=$( [ "$a" = - ] && echo - || python3 -c "print(f'{$a/${r[blocksize,512]}:.1f}x')")
  rb=$(python3 -c "print(f'{$b/${r[upstream,4096]}:.2f}x')")
  printf '%-10s %12s %12s   %s, %s\n' $c "$a" "$b" "$ra" "$rb"
done
