#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# The upstream store's checks and fallbacks: refusals in one line (an
# upstream whose minimum block size does not divide the physical sector,
# a read-only upstream unless served read-only: sect4k-server -r at
# start, nbdkit -r, which the plugin learns only when a client connects,
# at open; size= larger than the export, bad keys and URIs),
# the size taken from the export, write-zeroes emulated for an upstream
# without it, and extents rounded to whole physical sectors.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/up.sh"
need nbdkit nbdinfo
need_server

# watched CMD...: CMD's exit status, or 124 if it ran 20 s, or hung at
# exit as up.sh's exit_hung sees (seen twice, 0.5 s apart): killed then,
# instead of waiting the 20 s out.
watched () {
  "$@" &
  local p=$! hung=0 i
  for i in $(seq 200); do
    kill -0 $p 2>/dev/null || break
    if [ $((i % 5)) = 0 ] && exit_hung $p; then
      hung=$((hung + 1)); [ $hung -lt 2 ] || break
    fi
    sleep 0.1
  done
  if kill -0 $p 2>/dev/null; then
    kill -9 $p; wait $p 2>/dev/null; return 124
  fi
  wait $p
}

# refused FRONT DESCRIPTION PATTERN KEYS...: FRONT must exit at start with
# an error matching PATTERN.
refused () {
  local front=$1 desc=$2 pat=$3 out=$tmpdir/refused.out; shift 3
  rm -f "$tmpdir/r.sock"
  case $front in
    server) timeout 20 "$server" --unix "$tmpdir/r.sock" "$@" >"$out" 2>&1 ;;
    plugin) watched env $(sanitizer_env) nbdkit -f -U "$tmpdir/r.sock" "$SECT4K_PLUGIN" "$@" >"$out" 2>&1 ;;
  esac
  local st=$?
  # Under ASan, nbdkit's exit can hang (killed: 124) once libnbd has
  # formatted an error with strerror (libp11-kit's exit handler waits on
  # glibc's locale lock): the refusal itself is what is tested.
  [ $st = 124 ] && [ "${SECT4K_SAN:-}" = asan ] && [ $front = plugin ] &&
    diag "nbdkit hung at exit under ASan after refusing" && st=1
  [ $st != 0 ] && [ $st != 124 ] && grep -q -- "$pat" "$out"
  ok $? "$front refuses $desc"
  diag "$(grep -m1 -- "$pat" "$out" || cat "$out")"
}

start_nbdkit min8k --filter=blocksize-policy memory 64M \
  blocksize-minimum=8192 blocksize-preferred=8192 || exit 1
min8k=$uri
start_nbdkit ro -r memory 64M || exit 1
ro=$uri
start_nbdkit plain memory 64M || exit 1
plain=$uri
for front in server plugin; do
  refused $front "an upstream whose minimum block size does not divide physical" \
    "minimum block size 8192 does not divide physical=4096" \
    upstream="$min8k" physical=4096
  [ $front = server ] &&
    refused $front "a read-only upstream without -r" "the export is read-only" \
      upstream="$ro" model=512e
  refused $front "size= larger than the export" "size=134217728: larger than the upstream" \
    upstream="$plain" size=128M
  refused $front "file= with upstream=" "give one of the two" \
    upstream="$plain" file="$tmpdir/x.img"
  refused $front "upstream-connections=0" "upstream-connections=0: must be" \
    upstream="$plain" upstream-connections=0
  refused $front "upstream-partial-writes= without upstream=" \
    "upstream-partial-writes=false: needs upstream=" size=1M \
    upstream-partial-writes=false
  refused $front "upstream-partial-writes=maybe" \
    "upstream-partial-writes=maybe: not a boolean" upstream="$plain" \
    upstream-partial-writes=maybe
  refused $front "upstream-timeout=soon" \
    "upstream-timeout=soon: not a duration" upstream="$plain" \
    upstream-timeout=soon
  refused $front "upstream-timeout= without upstream=" \
    "upstream-timeout=2s: needs upstream=" size=1M upstream-timeout=2
  refused $front "an upstream nobody serves" "cannot connect" \
    upstream="nbd+unix:///?socket=$tmpdir/nobody.sock"
done

# Two export names on one upstream server name two devices as far as
# sect4k can know: served (the refusals of one export twice are in
# tests/exports-refusals.sh).
named="nbd+unix:///NAME?socket=$tmpdir/plain.sock"
for front in server plugin; do
  start_front $front names-$front export=a upstream="${named/NAME/a}" \
    export=b upstream="${named/NAME/b}" model=512e || exit 1
  [ "$(nbdinfo --size "nbd+unix:///b?socket=$sock")" = 67108864 ]
  ok $? "$front serves two upstream export names of one server as two exports"
  stop_front $front
done

start_server big8k upstream="$min8k" physical=8192 || exit 1
[ "$(nbdinfo --size "$uri")" = 67108864 ]
ok $? "physical=8192 over a minimum of 8192 serves the export's 64M"
stop_server
start_server ro-r -r upstream="$ro" model=512e || exit 1
nbdinfo "$uri" | grep -q "is_read_only: true"
ok $? "sect4k-server -r serves a read-only upstream, read-only"
stop_server
# The plugin cannot know -r at config time: it starts, refuses writable
# connections in one line, and serves nbdkit -r read-only.
start_nbdkit ro-plugin "$SECT4K_PLUGIN" upstream="$ro" model=512e || exit 1
! nbdinfo "$uri" >/dev/null 2>&1 &&
  grep -q "upstream=.*: the export is read-only; serve it read-only (nbdkit -r)" \
    "$tmpdir/ro-plugin.log"
ok $? "the plugin refuses a writable connection to a read-only upstream"
diag "$(grep -m1 "read-only" "$tmpdir/ro-plugin.log")"
stop_nbdkit
start_nbdkit ro-plugin-r -r "$SECT4K_PLUGIN" upstream="$ro" model=512e || exit 1
nbdinfo "$uri" | grep -q "is_read_only: true" &&
  qemu-io -r -f raw "$uri" -c 'read -P 0 0 4k' >/dev/null 2>&1
ok $? "nbdkit -r serves a read-only upstream, read-only"
stop_nbdkit
start_server small upstream="$plain" size=32M upstream-connections=2 || exit 1
[ "$(nbdinfo --size "$uri")" = 33554432 ]
ok $? "size=32M over a 64M export serves 32M"
grep -q "2 connection(s)" "$tmpdir/small.log"
ok $? "upstream-connections=2: the store says so"
diag "$(grep upstream= "$tmpdir/small.log")"
stop_server

# An upstream without write-zeroes: zeroes are written.
start_nbdkit nozero --filter=nozero memory 64M || exit 1
nozero=$uri
start_server nz upstream="$nozero" model=512e || exit 1
grep -q "zero by writing zeroes" "$tmpdir/nz.log"
ok $? "an upstream without write-zeroes is noticed"
qemu-io -f raw "$uri" -c 'write -P 0x55 0 64k' -c 'write -z 512 8192' \
  -c 'read -P 0x55 0 512' -c 'read -P 0 512 8192' \
  -c 'read -P 0x55 8704 56832' >"$tmpdir/qio" 2>&1
! grep -qi "fail\|error" "$tmpdir/qio"
ok $? "zero over it (an RMW on each side) reads back as zeroes, the rest kept"
stop_server

# Extents: an upstream that reports 512-byte runs (qcow2, 512-byte
# clusters); a sector with one written 512 is data as a whole.
if have_upstream qcow2; then
  qemu-img create -q -f qcow2 -o cluster_size=512 "$tmpdir/ext.qcow2" 64M
  qemu-io -f qcow2 "$tmpdir/ext.qcow2" -c 'write -P 1 1049088 512' >/dev/null
  sock=$tmpdir/ext.sock
  qemu-nbd -f qcow2 -k "$sock" -e 8 -t "$tmpdir/ext.qcow2" >"$tmpdir/ext.log" 2>&1 &
  pid=$!; server_pids="$server_pids $pid"
  wait_started nbdinfo --size "nbd+unix:///?socket=$sock" >/dev/null 2>&1
  start_server ext-front upstream="nbd+unix:///?socket=$sock" model=512e || exit 1
  nbdinfo --map "$uri" | awk '{print $1, $2, $3}' >"$tmpdir/map"
  printf '%s\n' "0 1048576 3" "1048576 4096 0" "1052672 66056192 3" |
    diff - "$tmpdir/map" >"$tmpdir/map.diff"
  ok $? "extents: the written 512 makes its whole 4 KiB sector data"
  diag "$(cat "$tmpdir/map.diff")"
  stop_server
else
  skip_one "qemu-nbd is not installed"
fi
done_testing
