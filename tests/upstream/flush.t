#!/bin/bash
# Where flush goes upstream (nbdkit's log filter counts it): with
# multi-conn one flush covers every connection's writes, so one goes
# upstream; without it, each of the 4 connections that wrote is flushed.
# A flush with nothing written since the last one sends nothing.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/up.sh"
need nbdkit qemu-io
need_server

# upstream_flushes LOG: flushes the upstream received.
upstream_flushes () { grep -c 'Flush id=[0-9]* \.\.\.$' "$1"; }

for mode in auto disable; do
  for front in plugin server; do
    log=$tmpdir/$mode-$front.requests
    start_nbdkit up-$mode-$front --filter=log --filter=multi-conn memory 64M \
      multi-conn-mode=$mode logfile="$log" || exit 1
    up_pid=$pid up_uri=$uri
    start_front $front $mode-$front upstream="$up_uri" model=512e || exit 1
    # 8 writes in a row go round the 4 connections; qemu-io flushes once
    # more as it closes.
    qemu-io -f raw "$uri" -c 'write 0 4k' -c 'write 4k 4k' -c 'write 8k 4k' \
      -c 'write 12k 4k' -c 'write 16k 4k' -c 'write 20k 4k' \
      -c 'write 24k 4k' -c 'write 28k 4k' -c flush >/dev/null 2>&1
    n=$(upstream_flushes "$log")
    want=$([ $mode = auto ] && echo 1 || echo 4)
    [ "$n" = "$want" ]
    ok $? "$front, upstream multi-conn-mode=$mode: $n upstream flush(es) for one client flush (want $want)"
    stop_front $front
    stop_upstream
  done
done
done_testing
