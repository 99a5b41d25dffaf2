# SPDX-License-Identifier: BSD-3-Clause
# The captive suite of the kernel tests (issue 28), sourced by tests.sh
# after scsi.sh (their ok/nok/is/check/says/diag helpers, start_server,
# load_nbd, wait_for):
#   captive  sect4k-server --scsi --run and sect4k-attach --run (--scsi and
#            nbd) on 512e-xp: the command sees $dev with the alignment
#            offset 3584, and no disk, configfs entry or nbd connection is
#            left, also when the command fails and when the server (or
#            sect4k-attach) gets SIGTERM mid-run.
CAP_CFS=/sys/kernel/config/target

# cap_left: what of ours is left in configfs (empty: nothing).
cap_left () { ls -d $CAP_CFS/core/user_* $CAP_CFS/loopback/naa.353344b* 2>/dev/null; }
# The command: the disk and what sysfs says of it, then exit $1.
CAP_CMD='b=${dev#/dev/}; echo "dev=$dev"; test -b "$dev" && echo "block=yes";
  echo "sectors=$(cat /sys/block/$b/size)";
  echo "align=$(cat /sys/block/$b/alignment_offset) lbs=$(cat /sys/block/$b/queue/logical_block_size) pbs=$(cat /sys/block/$b/queue/physical_block_size)"'

# cap_check PFX RC-GOT RC-WANTED OUTFILE: the status, $dev seen with
# 512e-xp's geometry (sysfs ALIGN), its disk gone, nothing left in configfs.
cap_check () {
  local pfx=$1 got=$2 want=$3 out=$4 align=${5:-3584} dev
  is "$pfx: exit status $want" "$got" "$want"
  dev=$(sed -n 's/^dev=//p' "$out")
  says "$pfx: the command saw \$dev ($dev) with alignment offset $align" "$(cat "$out")" \
    "^block=yes" "^sectors=32768\$" "^align=$align lbs=512 pbs=4096"
  check "$pfx: ... and its disk is gone afterwards" test -n "$dev" -a ! -e "/sys/block/${dev#/dev/}"
  is "$pfx: ... and nothing of ours is left in configfs" "$(cap_left)" ""
}

suite_captive () {
  local pfx st pid dev
  # sect4k-server --scsi --run: the command succeeds, then fails.
  pfx="captive server --run"
  sect4k-server size=16M model=512e-xp --scsi --run "$CAP_CMD" >/tmp/cap1.out 2>/tmp/cap1.log
  cap_check "$pfx" $? 0 /tmp/cap1.out
  pfx="captive server --run, the command fails"
  sect4k-server size=16M model=512e-xp --scsi --run "$CAP_CMD; exit 3" >/tmp/cap2.out 2>/tmp/cap2.log
  cap_check "$pfx" $? 3 /tmp/cap2.out
  # SIGTERM to the server while the command runs: the command is stopped
  # (SIGTERM, so 128+15), the disk removed.
  pfx="captive server --run, SIGTERM mid-run"
  rm -f /tmp/cap3.ready
  sect4k-server size=16M model=512e-xp --scsi \
    --run "$CAP_CMD; touch /tmp/cap3.ready; exec sleep 120" >/tmp/cap3.out 2>/tmp/cap3.log &
  pid=$!
  wait_for 60 test -e /tmp/cap3.ready || diag "$(cat /tmp/cap3.out /tmp/cap3.log)"
  kill -TERM "$pid"; wait "$pid"; st=$?
  cap_check "$pfx" $st 143 /tmp/cap3.out

  # Named exports: $dev is the first's disk, $dev_NAME each one's.
  pfx="captive server --run, named exports"
  sect4k-server size=16M exports=512e,4kn --scsi --run 'for d in "$dev" "$dev_512e" "$dev_4kn"; do
      echo "$d $(cat /sys/block/${d#/dev/}/queue/logical_block_size)"; done' >/tmp/capn.out 2>/tmp/capn.log
  is "$pfx: exit status 0" $? 0
  says "$pfx: \$dev and \$dev_512e are the 512e disk, \$dev_4kn the 4kn one" "$(cat /tmp/capn.out)" \
    "^/dev/sd[a-z]* 512\$" "^/dev/sd[a-z]* 4096\$"
  is "$pfx: ... \$dev is \$dev_512e" "$(sed -n 1p /tmp/capn.out)" "$(sed -n 2p /tmp/capn.out)"
  is "$pfx: ... and nothing of ours is left in configfs" "$(cap_left)" ""

  # sect4k-attach --run --scsi over an NBD export of the plugin.
  start_server capup $PLUGIN size=16M model=512e-xp
  local uri="nbd+unix:///?socket=/tmp/capup.sock"
  pfx="captive sect4k-attach --run --scsi"
  sect4k-attach --run "$CAP_CMD" --scsi "$uri" >/tmp/cap4.out 2>/tmp/cap4.log
  cap_check "$pfx" $? 0 /tmp/cap4.out
  pfx="captive sect4k-attach --run --scsi, the command fails"
  sect4k-attach --run "$CAP_CMD; exit 4" --scsi "$uri" >/tmp/cap5.out 2>/tmp/cap5.log
  cap_check "$pfx" $? 4 /tmp/cap5.out
  pfx="captive sect4k-attach --run --scsi, SIGTERM mid-run"
  rm -f /tmp/cap6.ready
  sect4k-attach --run "$CAP_CMD; touch /tmp/cap6.ready; exec sleep 120" --scsi "$uri" \
    >/tmp/cap6.out 2>/tmp/cap6.log &
  pid=$!
  wait_for 60 test -e /tmp/cap6.ready || diag "$(cat /tmp/cap6.out /tmp/cap6.log)"
  kill -TERM "$pid"; wait "$pid"; st=$?
  cap_check "$pfx" $st 143 /tmp/cap6.out

  # sect4k-attach --run on the nbd driver: one block size, no alignment
  # offset (the driver has none); detached afterwards in every case.
  load_nbd
  pfx="captive sect4k-attach --run (nbd)"
  sect4k-attach --run "$CAP_CMD" "$uri" >/tmp/cap7.out 2>/tmp/cap7.log
  st=$?
  is "$pfx: exit status 0" $st 0
  says "$pfx: the command saw \$dev" "$(cat /tmp/cap7.out)" "^dev=/dev/nbd0" "^block=yes" "^sectors=32768\$" "^align=0 lbs=512"
  check "$pfx: ... and nbd0 is detached afterwards" test ! -e /sys/block/nbd0/pid
  pfx="captive sect4k-attach --run (nbd), the command fails"
  sect4k-attach --run "$CAP_CMD; exit 5" "$uri" >/tmp/cap8.out 2>/tmp/cap8.log
  is "$pfx: exit status 5" $? 5
  check "$pfx: ... and nbd0 is detached afterwards" test ! -e /sys/block/nbd0/pid
  pfx="captive sect4k-attach --run (nbd), SIGTERM mid-run"
  rm -f /tmp/cap9.ready
  sect4k-attach --run "touch /tmp/cap9.ready; exec sleep 120" "$uri" >/tmp/cap9.out 2>/tmp/cap9.log &
  pid=$!
  wait_for 60 test -e /tmp/cap9.ready || diag "$(cat /tmp/cap9.out /tmp/cap9.log)"
  kill -TERM "$pid"; wait "$pid"; st=$?
  is "$pfx: exit status 143" $st 143
  check "$pfx: ... and nbd0 is detached afterwards" test ! -e /sys/block/nbd0/pid
  unload_nbd
  stop_server
}
