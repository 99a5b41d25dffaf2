#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# sect4k-server takes exactly the plugin's keys: every bad parameter or
# option stops it with exit 1 and one line naming it; --help lists the
# keys; the magic size works; the defaults match the plugin's; --nbd-stats
# and its deprecated old name --stats.
. "$(dirname "$0")/../lib.sh"
need nbdinfo
need_server

# bad EXPECTED-SUBSTRING ARGS...: exit 1, one line, naming the problem.
bad () {
  want=$1; shift
  out=$(timeout 10 "$server" "$@" 2>&1)
  st=$?
  lines=$(printf '%s\n' "$out" | wc -l)
  printf '%s' "$out" | grep -qF -- "$want"
  found=$?
  [ "$st" = 1 ] && [ "$found" = 0 ] && [ "$lines" = 1 ]
  ok $? "refused: $* ($out)"
}
bad "size" logical=4096
bad "logical=1000" size=1M logical=1000
bad "physical=256" size=1M physical=256
bad "alignment" size=1M physical=4096 alignment-offset=100
bad "model=9kn" size=1M model=9kn
bad "frob" size=1M frob=1
bad "require-block-size=maybe" size=1M require-block-size=maybe
bad "max-request" size=1M max-request=1G
bad "--threads" size=1M --threads 0
bad "--max-connections" size=1M --max-connections x
bad "expected KEY=VALUE" 1M 2M
bad "--listen" size=1M --listen nocolon
bad "not both" size=1M --listen 127.0.0.1:1 --unix "$tmpdir/x.sock"

. "$(dirname "$0")/../exports-refusals.sh"
bad "export=a: require-block-size=true cannot vary per export" size=1M export=a require-block-size=true
bad "--export-name disk: with export= or exports=" size=1M exports=512n -e disk
# Zoned drives (issue 33): NBD has no zone commands, --scsi serves them
# (--scsi needs the kernel's target modules: its refusal with --unix is
# not tested here).
bad "zoned=host-managed: NBD has no zone commands (a client would see a plain disk): serve a zoned drive with --scsi or --ublk" \
  size=64M zoned=host-managed zone-size=4M --unix "$tmpdir/z.sock"

out=$("$server" --help)
for k in size= logical= physical= alignment-offset= lowest-aligned= model= \
         max-request= strict= require-block-size= export= exports= --unix --listen --readonly \
         --nbd-stats; do
  printf '%s' "$out" | grep -qF -- "$k" || { diag "--help lacks $k"; false; }
done
ok $? "--help lists every key and option"
"$server" --version | grep -q '^sect4k-server [0-9]'
ok $? "--version"

# The magic key and the defaults: same answers as the plugin would give.
sock=$tmpdir/s.sock
"$server" --unix "$sock" 1G model=512e-xp >"$tmpdir/log" 2>&1 &
spid=$!
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
info=$(nbdinfo --json "nbd+unix:///?socket=$sock")
printf '%s' "$info" | grep -q '"export-size": 1073741824' &&
  printf '%s' "$info" | grep -q '"block_size_minimum": 512' &&
  printf '%s' "$info" | grep -q '"block_size_preferred": 4096' &&
  printf '%s' "$info" | grep -q '"block_size_maximum": 33554432' &&
  printf '%s' "$info" | grep -q 'lowest aligned LBA 7'
ok $? "'sect4k-server 1G model=512e-xp': size, 512/4096/32M, description"
kill $spid; wait $spid
ok $? "exit status 0 after SIGTERM"
[ ! -e "$sock" ]
ok $? "the socket is removed at exit"

# --nbd-stats writes the NBD side's counts; its old name --stats, easy to
# mistake for the device's stats=, still works and says once that it is
# deprecated.
for opt in --nbd-stats --stats; do
  counts=$tmpdir/counts$opt
  start_server "counts$opt" "$opt" "$counts" 1M &&
    nbdinfo "$uri" >/dev/null && stop_server
  st=$?
  dep=$(grep -c 'deprecated' "$tmpdir/counts$opt.log")
  want=0; [ "$opt" = --stats ] && want=1
  [ "$st" = 0 ] && grep -qx 'connections=1' "$counts" && [ "$dep" = "$want" ]
  ok $? "$opt FILE writes the counts; $want deprecation line ($dep)"
done
done_testing
