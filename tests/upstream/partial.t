#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Partial writes (partial_writes in lib/store/store.h): a 512-byte write into a
# 4 KiB physical sector reaches the upstream as one 512-byte WRITE and no
# read, where the upstream's minimum block size allows it; with
# upstream-partial-writes=false, or an upstream whose minimum block size
# is 4096 (nbdkit's blocksize-policy filter; its blocksize filter says 1),
# the upstream sees the whole-sector RMW: a 4 KiB read, then a 4 KiB
# write; and so it does under a fault layer (bad-sectors=), whose
# torn-write model needs the whole sector.  nbdkit's log filter, first on
# the upstream, records what sect4k sends.  All three front ends: plugin,
# server, filter.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/up.sh"
need nbdkit qemu-io
need_server
filter=${SECT4K_FILTER:-$(dirname "$0")/../../sect4k-filter.so}
[ -f "$filter" ] || skip_all "$filter is not built"

# seen LOG: the reads and writes the upstream got, as "R:len W:len ...".
seen () {
  sed -n 's/.* \(Read\|Write\) id=[0-9]* offset=0x[0-9a-f]* count=\(0x[0-9a-f]*\) .*/\1 \2/p' "$1" |
    while read -r op len; do printf '%s:%d ' "${op:0:1}" "$len"; done
}

for front in plugin server filter; do
  for up in min1 min4096; do
    for pw in default false faults; do
      n=$front-$up-$pw log=$tmpdir/$front-$up-$pw.requests
      bs= bskey=
      [ $up = min4096 ] && bs=--filter=blocksize-policy \
        bskey="blocksize-minimum=4096 blocksize-error-policy=error"
      keys="model=512e" what="upstream-partial-writes=$pw"
      [ $pw = faults ] && what="a fault layer"
      [ $pw = false ] && keys="$keys upstream-partial-writes=false"
      # A fault layer (a bad sector far away) keeps the whole-sector RMW.
      [ $pw = faults ] && keys="$keys bad-sectors=100000"
      if [ $front = filter ]; then
        start_nbdkit $n --filter="$filter" --filter=log $bs memory 64M \
          $bskey logfile="$log" $keys || exit 1
      else
        start_nbdkit up-$n --filter=log $bs memory 64M $bskey \
          logfile="$log" || exit 1
        up_pid=$pid
        start_front $front $n upstream="$uri" $keys || exit 1
      fi
      qemu-io -f raw "$uri" -c 'write -P 0x5a 512 512' >"$tmpdir/qio" 2>&1
      ok $? "$front over $up, $what: the write succeeds"
      got=$(seen "$log")
      want="R:4096 W:4096 "
      [ $up = min1 ] && [ $pw = default ] && want="W:512 "
      [ "$got" = "$want" ]
      ok $? "$front over $up, $what: the upstream got '$got' (want '$want')"
      qemu-io -f raw "$uri" -c 'read -P 0 0 512' -c 'read -P 0x5a 512 512' \
        -c 'read -P 0 1024 3072' >"$tmpdir/qio" 2>&1 &&
        ! grep -q "fail\|error\|differ" "$tmpdir/qio"
      ok $? "$front over $up, $what: the sector reads back right"
      # The store's line says what it does.
      case $front in
        server) info=$tmpdir/$n.log ;;
        *) info= ;;
      esac
      if [ -n "$info" ]; then
        case $up-$pw in
          min1-default) pat="partial writes yes" ;;
          *-false) pat="partial writes no (upstream-partial-writes=false)" ;;
          min1-faults) pat="whole-sector RMW, no partial writes" ;;
          *) pat="partial writes no (whole minimum blocks)" ;;
        esac
        grep -qF "$pat" "$info"
        ok $? "$front over $up, $what: the store's line says '$pat'"
      fi
      if [ $front = filter ]; then
        # With a fault layer, its write-back at unload once called the
        # next layer outside any request (a crash).
        stop_nbdkit; st=$?
        [ $st = 0 ] || [ $st = 143 ]
        ok $? "$front over $up, $what: nbdkit exited cleanly ($st)"
      else
        stop_front $front
        pid=$up_pid; stop_nbdkit
      fi
    done
  done
done
done_testing
