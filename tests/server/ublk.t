#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# sect4k-server --ublk on a host without ublk_drv (this one; the real
# devices are tested in the guest kernels, tests/kernel/guest/ublk.sh):
# one line saying the driver is missing and how to load it, exit 1, and
# nothing made; zoned=host-aware refused from its keys (ublk zones are
# host-managed); --run with both --scsi and --ublk refused; --help.
. "$(dirname "$0")/../lib.sh"
need_server
[ ! -e /dev/ublk-control ] ||
  skip_all "/dev/ublk-control exists here: the refusal cannot be shown"

# refused DESC PATTERN ARGS...: exit 1 with one line matching PATTERN.
refused () {
  desc=$1 pat=$2; shift 2
  out=$(timeout 10 "$server" "$@" 2>&1)
  st=$?
  lines=$(printf '%s\n' "$out" | wc -l)
  printf '%s' "$out" | grep -q -e "$pat"
  ok $(( st != 1 || $? != 0 || lines != 1 )) "$desc: exit $st, $lines line: $out"
}
nomod='--ublk: no /dev/ublk-control: the ublk driver is not loaded (modprobe ublk_drv'
refused "--ublk" "$nomod" size=1M --ublk
refused "--ublk with --unix" "$nomod" size=1M --ublk --unix "$tmpdir/s.sock"
ok "$([ ! -e "$tmpdir/s.sock" ]; echo $?)" "... and no socket was made"
refused "--ublk with file=" "$nomod" size=1M file="$tmpdir/disk.img" --ublk
ok "$([ ! -e "$tmpdir/disk.img" ]; echo $?)" "... and no file was made"
refused "--ublk with exports= and --run" "$nomod" exports=512n,4kn size=1M --ublk --run true
# Zones: host-managed goes on to the driver; host-aware is no ublk device
# (refused from the keys, before the driver is looked for or a file made).
refused "--ublk zoned=host-managed" "$nomod" size=64M zoned=host-managed zone-size=4M --ublk
refused "--ublk zoned=host-aware" \
  '^sect4k-server: --ublk: zoned=host-aware: a ublk device is host-managed or not zoned (Linux has no host-aware ublk): use --scsi$' \
  size=64M zoned=host-aware zone-size=4M file="$tmpdir/ha.img" --ublk
ok "$([ ! -e "$tmpdir/ha.img" ]; echo $?)" "... and no file was made"
refused "--ublk-recovery zoned=host-managed" \
  '^sect4k-server: --ublk-recovery: zoned=: the requests resent after a restart would meet write pointers already moved (a write fails, an append lands twice)$' \
  size=64M zoned=host-managed zone-size=4M --ublk --ublk-recovery
refused "--ublk --scsi --run" '--run: give --scsi or --ublk, not both' \
  size=1M --ublk --scsi --run true
refused "--ublk-recovery without --ublk" '--ublk-recovery needs --ublk' \
  size=1M --ublk-recovery --unix "$tmpdir/s.sock"
"$server" --help | grep -q -- '--ublk'
ok $? "--help names --ublk"
done_testing
