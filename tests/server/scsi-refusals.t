#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# sect4k-server --scsi on a host without target_core_user (this one; the
# real disks are tested in the guest kernels, tests/kernel): one line
# saying which module is missing and how to load it, exit 1, and nothing
# made: no file=, no --unix socket.
. "$(dirname "$0")/../lib.sh"
need_server
[ ! -e /sys/module/target_core_user ] ||
  skip_all "target_core_user is loaded here: the refusal cannot be shown"

# refused DESC ARGS...: exit 1 with one line naming the module.
refused () {
  desc=$1; shift
  out=$(timeout 10 "$server" "$@" 2>&1)
  st=$?
  lines=$(printf '%s\n' "$out" | wc -l)
  printf '%s' "$out" | grep -q 'target_core_user is not loaded (modprobe target_core_user'
  ok $(( st != 1 || $? != 0 || lines != 1 )) "$desc: exit $st, $lines line: $out"
}
refused "--scsi" size=1M --scsi
refused "--scsi with --unix" size=1M --scsi --unix "$tmpdir/s.sock"
ok "$([ ! -e "$tmpdir/s.sock" ]; echo $?)" "... and no socket was made"
refused "--scsi with file=" size=1M file="$tmpdir/disk.img" --scsi
ok "$([ ! -e "$tmpdir/disk.img" ]; echo $?)" "... and no file was made"
refused "--scsi with exports=" exports=512n,4kn size=1M --scsi
"$server" --help | grep -q -- '--scsi'
ok $? "--help names --scsi"
done_testing
