#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Benchmark: sect4k-server against nbdkit + the sect4k plugin, same
# device, same run.  Usage: server/bench.sh SERVER PLUGIN
#
# 1. IOPS: fio's nbd engine over a Unix socket, 4 KiB random read and
#    random write, queue depth 16, 2 jobs (one connection each), on a
#    prefilled 512e device.  Runs alternate between the two servers
#    (REPEATS times each); medians and ratios are printed.
# 2. Instructions per request: each server under callgrind serves two
#    fixed request counts; (Ir(N2) - Ir(N1)) / (N2 - N1) removes start-up.
#
# Environment: CG_ONLY=1 (the instruction counts alone),
# RUNTIME (s per fio run, default 8), REPEATS (default 3),
# SIZE (default 256M), CG_N1/CG_N2/CG_SIZE (callgrind request counts and
# device size), CG_BS (callgrind read size in bytes, default 4096),
# CG_KINDS (default "server nbdkit"), OUT (the
# result file, default build/bench-server.txt).
set -euo pipefail
server=$1 plugin=$2
RUNTIME=${RUNTIME:-8} REPEATS=${REPEATS:-3} SIZE=${SIZE:-256M}
CG_N1=${CG_N1:-4000} CG_N2=${CG_N2:-20000} CG_SIZE=${CG_SIZE:-16M}
CG_BS=${CG_BS:-4096} bs=4096
OUT=${OUT:-build/bench-server.txt}
for c in fio nbdkit valgrind callgrind_control python3; do
  command -v $c >/dev/null || { echo "bench: $c is not installed" >&2; exit 1; }
done
keys="size=$SIZE model=512e"
dir=$(mktemp -d /tmp/sect4k-bench.XXXXXX)
pid=
server_opts=()
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; rm -rf "$dir"' EXIT

# start KIND [wrapper...]: serves $keys on $dir/sock; sets $pid.
start () {
  kind=$1; shift
  rm -f "$dir/sock"
  case $kind in
    server) "$@" "$server" "${server_opts[@]}" --unix "$dir/sock" $keys 2>"$dir/$kind.log" & ;;
    nbdkit) "$@" nbdkit -f -U "$dir/sock" "$plugin" $keys 2>"$dir/$kind.log" & ;;
  esac
  pid=$!
  for _ in $(seq 600); do [ -S "$dir/sock" ] && return; sleep 0.05; done
  echo "bench: $kind did not start: $(cat "$dir/$kind.log")" >&2; exit 1
}
stop () { kill -TERM $pid; wait $pid || true; pid=; }
uri () { echo "nbd+unix:///?socket=$dir/sock"; }

# fio_run RW [extra...]: prints IOPS.
fio_run () {
  rw=$1; shift
  fio --name=b --ioengine=nbd --uri="$(uri)" --rw=$rw --bs=$bs --size=$SIZE \
      --iodepth=16 --numjobs=2 --group_reporting --output-format=json \
      --output="$dir/fio.json" "$@" >/dev/null
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1]))["jobs"][0]
print(round(j[sys.argv[2]]["iops"]))' "$dir/fio.json" \
    "$([ "$rw" = randread ] && echo read || echo write)"
}
fill () {
  fio --name=fill --ioengine=nbd --uri="$(uri)" --rw=write --bs=1M --size=$SIZE \
      --iodepth=4 --output="$dir/fill.json" >/dev/null
}
median () { printf '%s\n' "$@" | sort -n | sed -n "$(( ($# + 1) / 2 ))p"; }

exec > >(tee "$OUT")
echo "# sect4k-server vs nbdkit $(nbdkit --version | awk '{print $2}') + sect4k plugin"
echo "# $(date -u +%FT%TZ), $(nproc) CPUs, $(uname -r)"
echo "# fio $(fio --version): 4k, iodepth 16, 2 jobs, ${RUNTIME}s per run, $REPEATS runs each, alternating"
# The memory store, then the file store (a file in $dir on $(df --output=fstype "$dir" | tail -1)),
# buffered and O_DIRECT: there the server's store I/O goes through its
# event loops' rings, nbdkit's through its worker threads.
for store in $([ -n "${CG_ONLY:-}" ] || echo memory file file-direct); do
  case $store in
    memory) keys="size=$SIZE model=512e" ;;
    file) keys="file=$dir/disk.img size=$SIZE model=512e" ;;
    file-direct) keys="file=$dir/disk.img size=$SIZE model=512e direct=true" ;;
  esac
  echo "# device: $keys"
  for rw in randread randwrite; do
    s_all=() n_all=()
    for r in $(seq "$REPEATS"); do
      for kind in server nbdkit; do
        start $kind
        fill
        iops=$(fio_run $rw --time_based --runtime="$RUNTIME")
        stop
        if [ $kind = server ]; then s_all+=("$iops"); else n_all+=("$iops"); fi
        echo "$store $rw run $r $kind: $iops IOPS"
      done
    done
    s=$(median "${s_all[@]}") n=$(median "${n_all[@]}")
    echo "$store $rw median: server $s IOPS, nbdkit $n IOPS, ratio $(python3 -c "print(f'{$s/$n:.2f}')")x"
  done
  rm -f "$dir/disk.img"
done

# Instructions per request under callgrind (randread, QD16, 2 jobs).
# Under valgrind the server runs one event-loop thread: valgrind runs one
# thread at a time, and a thread waiting in io_uring_enter stalls the
# others and signal delivery.  So the counters are dumped with
# callgrind_control and the process killed, the same for both servers.
ir () {      # ir KIND N: total instructions of the server for N requests
  kind=$1 n=$2
  server_opts=(-t 1)
  start $kind valgrind --tool=callgrind --callgrind-out-file="$dir/cg.out" -q
  fill                          # same in both runs: cancels out
  fio_run randread --io_size=$((n / 2 * bs)) >/dev/null   # per job
  callgrind_control -d $pid >/dev/null 2>&1
  kill -KILL $pid; wait $pid 2>/dev/null || true; pid=
  server_opts=()
  total=0
  for f in "$dir"/cg.out*; do
    t=$(sed -n 's/^totals: *//p' "$f" | head -1 | awk '{print $1}')
    total=$((total + ${t:-0}))
  done
  rm -f "$dir"/cg.out*
  ios=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["jobs"][0]["read"]["total_ios"])' "$dir/fio.json")
  echo "$total $ios"
}
keys="size=$CG_SIZE model=512e" SIZE=$CG_SIZE bs=$CG_BS
echo "# callgrind: instructions per $bs-byte random read (QD16, 2 jobs) = difference of two runs ($CG_N1 and $CG_N2 requests) / difference of requests, prefilled $CG_SIZE device"
for kind in ${CG_KINDS:-server nbdkit}; do
  read -r a na < <(ir $kind $CG_N1)
  read -r b nb < <(ir $kind $CG_N2)
  per=$(( (b - a) / (nb - na) ))
  eval "ipr_$kind=$per"
  echo "$kind: $per instructions per request (Ir $a for $na requests, $b for $nb)"
done
[ -z "${ipr_server:-}" ] || [ -z "${ipr_nbdkit:-}" ] ||
  echo "instructions per request: server/nbdkit = $(python3 -c "print(f'{$ipr_server/$ipr_nbdkit:.2f}')")"
