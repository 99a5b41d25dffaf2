#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The kernel tests, run by /init inside the test guest (busybox sh, with GNU
# dd, util-linux and e2fsprogs in /opt/bin).  Arguments: the suites to run.
#   nbd     the Linux nbd driver attached by sect4k-attach, one case at a time
#   virtio  the virtio-blk disks the host gave qemu (one per case, serial=name)
#   faults  bad sectors and power cuts through the nbd driver
#   scsi, scsi_bench   guest/scsi.sh
#   sata    sect4k-server --scsi interface=sata: hdparm, smartctl   guest/sata.sh
#   format  sg_format --size on a sect4k-server --scsi disk   guest/format.sh
#   atomic  untorn writes on a SCSI disk (Linux 6.11 on): guest/atomic.sh
#   zoned   a host-managed sect4k SCSI disk against scsi_debug: guest/zoned.sh
#   dmlog   dm-log-writes over a 512e disk: an ext4 workload logged for the host
#   captive sect4k-server --scsi --run, sect4k-attach --run   guest/captive.sh
#   ublk, ublk_bench   sect4k-server --ublk (Linux 6.12; 6.1 skips)   guest/ublk.sh
# TAP goes to the console as "S4K: ok - ..." lines; "S4K: TESTS n" closes it.
# The host numbers the tests and checks that all of them came.
PLUGIN=/opt/sect4k/sect4k.so
# Debian's busybox sh runs its own applets before anything on PATH, and
# busybox dd quietly drops O_DIRECT: call the real tools by path.
for t in dd sfdisk mke2fs e2fsck dumpe2fs; do
  [ -x "/opt/bin/$t" ] || { echo "S4K: not ok - /opt/bin/$t is in the guest"; exit 1; }
  eval "$t () { /opt/bin/$t \"\$@\"; }"
done
SIZE=64M
n=0
ok () { n=$((n + 1)); echo "S4K: ok - $*"; }
nok () { n=$((n + 1)); echo "S4K: not ok - $*"; }
diag () { printf '%s\n' "$@" | sed 's/^/S4K: # /'; }
# is DESC GOT EXPECTED
is () {
  if [ "$2" = "$3" ]; then ok "$1"; else nok "$1"; diag "  got '$2', expected '$3'"; return 1; fi
}
# check DESC COMMAND...: fails (status 1) when COMMAND fails.
check () { d=$1; shift; if "$@"; then ok "$d"; else nok "$d"; return 1; fi; }
# says DESC TEXT PATTERN...: TEXT has a line matching every PATTERN.
says () {
  d=$1 t=$2; shift 2
  for p in "$@"; do
    printf '%s\n' "$t" | grep -q -e "$p" || { nok "$d"; diag "  no '$p' in the output"; return; }
  done
  ok "$d"
}
# refused DESC RC OUTPUT PATTERN: a command failed and said why.
refused () {
  if [ "$2" -ne 0 ] && printf '%s\n' "$3" | grep -q -e "$4"; then ok "$1"
  else nok "$1"; diag "  exit $2, expected non-zero and '$4'"; fi
  diag "  $3"
}

# The cases without comments, on fd 3 so that nothing in a loop eats them.
sed -e 's/#.*//' -e '/^[[:space:]]*$/d' /cases > /tmp/cases

server_pid= srv_pid= scsi_pid= scsi_dev= case_pids=
start_server () {  # NAME PARAMS...
  name=$1; shift
  rm -f "/tmp/$name.sock"
  nbdkit -f -U "/tmp/$name.sock" -v -D sect4k.rmw=1 -D nbdkit.backend.datapath=0 \
    "$@" 2>"/tmp/$name.log" &
  server_pid=$!
  i=0
  while [ ! -S "/tmp/$name.sock" ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i + 1)); done
  [ -S "/tmp/$name.sock" ] || { diag "nbdkit for $name did not start:"; diag "$(tail -n 5 "/tmp/$name.log")"; }
}
stop_server () { stop_pid "$server_pid"; server_pid=; }

# ---- cleaning up after a case ------------------------------------------------
# A case that fails half-way returns at once; the suite then calls tidy,
# which removes whatever the case left (a mounted /mnt, the dm target,
# sect4k-attach --scsi disks, attached nbd devices, the case's servers, a
# dead server's configfs entries, scsi_debug) and says what it removed, so
# one failure fails one case and the rest of the suite runs.  A disk left
# attached is no detail: its server's upstream goes with the next case,
# and the kernel then waits on it (poweroff's cache flush included).
# alive PID: running (a zombie the shell has not reaped is not).
alive () { [ -n "$1" ] && [ -e "/proc/$1" ] && ! grep -q '^[0-9]* (.*) Z' "/proc/$1/stat" 2>/dev/null; }
# stop_pid PID [SECS]: SIGTERM, SIGKILL after SECS (default 30); sets
# stop_rc to its exit status.  Never waits for ever on a stuck server.
stop_pid () {
  stop_rc=
  [ -n "$1" ] || return 0
  kill "$1" 2>/dev/null
  sp=$(( ${2:-30} * 10 ))
  while alive "$1" && [ "$sp" -gt 0 ]; do sleep 0.1; sp=$((sp - 1)); done
  if alive "$1"; then diag "  pid $1 still running ${2:-30} s after SIGTERM: SIGKILL"; kill -9 "$1" 2>/dev/null; fi
  wait "$1" 2>/dev/null; stop_rc=$?
}
# tidy PFX [attach]: remove what the case PFX left; 'attach': only the
# devices attached by sect4k-attach (the case's servers stay).
tidy () {
  local f s p pid
  tl=
  if grep -q ' /mnt ' /proc/mounts 2>/dev/null; then
    umount /mnt 2>/dev/null || umount -l /mnt 2>/dev/null; tl="$tl /mnt"
  fi
  if command -v dmsetup >/dev/null && dmsetup info s4klog >/dev/null 2>&1; then
    DM_DISABLE_UDEV=1 dmsetup remove --noudevsync --force s4klog >/dev/null 2>&1; tl="$tl dm:s4klog"
  fi
  for f in /run/sect4k-attach/sd* /run/sect4k-attach/ublkb*; do
    case "$f" in *'*'|*.log|*.out) continue ;; esac
    [ -f "$f" ] || continue
    pid=$(sed -n 's/^pid=//p' "$f")
    if ! sect4k-attach --detach "/dev/${f##*/}" >/dev/null 2>&1; then
      alive "$pid" && kill -9 "$pid" 2>/dev/null
      rm -f "$f"
    fi
    tl="$tl /dev/${f##*/}"
  done
  for s in /sys/block/nbd*; do
    [ -e "$s/pid" ] || [ "$(cat "$s/size" 2>/dev/null || echo 0)" != 0 ] || continue
    nbd-client -d "/dev/${s##*/}" >/dev/null 2>&1; tl="$tl /dev/${s##*/}"
  done
  if [ "${2:-}" != attach ]; then
    for p in $server_pid $srv_pid $scsi_pid $case_pids; do
      alive "$p" || continue
      stop_pid "$p"
      if [ "$p" = "$scsi_pid" ] && [ -n "$scsi_dev" ]; then tl="$tl pid:$p($scsi_dev)"; else tl="$tl pid:$p"; fi
    done
    server_pid= srv_pid= scsi_pid= scsi_dev= case_pids=
    tidy_configfs
    grep -q '^scsi_debug ' /proc/modules 2>/dev/null && { rmmod scsi_debug 2>/dev/null; tl="$tl scsi_debug"; }
  fi
  [ -z "$tl" ] || diag "$1: removed what the case left:$tl"
}
# The configfs entries of sect4k-servers that no longer run (a SIGKILL, a
# server killed after SIGTERM hung): the links, LUNs, nexus, target, then
# the backstores (what sect4k-server's own start-up cleanup does).
tidy_configfs () {
  local cfs=/sys/kernel/config/target w l x h d
  for w in "$cfs"/loopback/naa.353344b*; do
    [ -d "$w" ] || continue
    alive "$(printf '%d' "0x${w##*naa.353344b}")" && continue
    for l in "$w"/tpgt_1/lun/lun_*; do
      [ -d "$l" ] || continue
      for x in "$l"/*; do [ -L "$x" ] && rm -f "$x"; done
      rmdir "$l" 2>/dev/null
    done
    [ -e "$w/tpgt_1/nexus" ] && echo NULL > "$w/tpgt_1/nexus" 2>/dev/null
    rmdir "$w/tpgt_1" "$w" 2>/dev/null; tl="$tl $w"
  done
  for h in "$cfs"/core/user_*; do
    [ -d "$h" ] || continue
    alive "${h##*/user_}" && continue
    for d in "$h"/sect4k-*; do [ -d "$d" ] && rmdir "$d" 2>/dev/null; done
    rmdir "$h" 2>/dev/null && tl="$tl $h"
  done
}

load_nbd () { insmod /modules/nbd.ko nbds_max=2 max_part=4; }
# io_min only ever grows on a reused nbd device: reload between cases.
unload_nbd () { rmmod nbd; }

# O_DIRECT I/O on DEV with geometry L, P, A and server log LOG ('' when the
# server runs elsewhere); PFX names the case in test descriptions.
direct_io_tests () {
  pfx=$1 dev=$2 L=$3 P=$4 log=$5
  head -c "$L" /dev/urandom > /tmp/pattern
  check "$pfx: O_DIRECT write of $L bytes at offset $L succeeds" \
    dd if=/tmp/pattern of="$dev" bs="$L" count=1 seek=1 oflag=direct conv=notrunc status=none
  dd if="$dev" of=/tmp/back bs="$L" count=1 skip=1 iflag=direct status=none
  check "$pfx: O_DIRECT read returns the $L bytes written" cmp -s /tmp/pattern /tmp/back
  if [ -n "$log" ]; then
    if [ "$P" -gt "$L" ]; then
      check "$pfx: the server did a read-modify-write for that write" \
        grep -q "rmw: write offset $L length $L:" "$log"
    else
      check "$pfx: the server did no read-modify-write (L = P)" \
        test -z "$(grep 'rmw: ' "$log")"
    fi
  fi
  if [ "$L" -gt 512 ]; then
    head -c 512 /dev/urandom > /tmp/small
    if dd if=/tmp/small of="$dev" bs=512 count=1 seek=1 oflag=direct conv=notrunc status=none 2>/tmp/dd.err; then
      nok "$pfx: O_DIRECT write of 512 bytes fails with EINVAL"; diag "  it succeeded"
    else
      check "$pfx: O_DIRECT write of 512 bytes fails with EINVAL" grep -q 'Invalid argument' /tmp/dd.err ||
        diag "  $(cat /tmp/dd.err)"
    fi
  fi
}

# sfdisk partition on a physical boundary, then mkfs.ext4 and fsck on it;
# the file system's block size must be at least WANT.
fs_tests () {
  pfx=$1 dev=$2 L=$3 P=$4 A=$5 want=$6
  b=${dev#/dev/}
  case "$b" in *[0-9]) pb=${b}p1 ;; *) pb=${b}1 ;; esac   # nbd0p1, vdb1
  part=/dev/$pb
  echo ',,L' | sfdisk -q "$dev" >/tmp/sfdisk.out 2>&1
  i=0
  while [ ! -b "$part" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
  if ! [ -b "$part" ]; then
    nok "$pfx: sfdisk made a partition"; diag "$(cat /tmp/sfdisk.out)"; return
  fi
  start=$(( $(cat "/sys/block/$b/$pb/start") * 512 ))
  if [ "$A" = 0 ]; then
    is "$pfx: sfdisk's partition starts on a physical boundary (byte $start mod $P)" $((start % P)) 0
  else
    # The kernel shows alignment_offset 0, so sfdisk cannot know A.
    diag "$pfx: sfdisk's partition starts at byte $start, $(( (start - A) % P )) bytes past a physical boundary (A=$A): the kernel cannot show the alignment offset"
  fi
  check "$pfx: mkfs.ext4 on the partition" mke2fs -q -F -t ext4 "$part"
  out=$(e2fsck -fn "$part" 2>&1)
  check "$pfx: fsck -n passes" [ $? = 0 ] || diag "$out"
  bsize=$(dumpe2fs -h "$part" 2>/dev/null | sed -n 's/^Block size:[[:space:]]*//p')
  check "$pfx: the file system's block size ($bsize) is at least $want" [ "${bsize:-0}" -ge "$want" ]
}

# srv_case PFX L P A KEYS...: sect4k-server serving KEYS to the kernel's
# nbd driver through sect4k-attach: O_DIRECT I/O, then a file system.
srv_case () {
  pfx=$1 L=$2 P=$3 A=$4; shift 4
  rm -f /tmp/srv.sock
  sect4k-server --unix /tmp/srv.sock "$@" 2>/tmp/srv.log &
  srv_pid=$!
  i=0
  while [ ! -S /tmp/srv.sock ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
  out=$(sect4k-attach 'nbd+unix:///?socket=/tmp/srv.sock' 2>&1)
  dev=$(printf '%s\n' "$out" | head -n 1)
  case "$dev" in
    /dev/nbd*)
      is "$pfx: logical_block_size $L" \
        "$(cat "/sys/block/${dev#/dev/}/queue/logical_block_size")" "$L"
      direct_io_tests "$pfx" "$dev" "$L" "$P" ""
      fs_tests "$pfx" "$dev" "$L" "$P" "$A" "$L"
      sect4k-attach --detach "$dev" >/dev/null 2>&1 ;;
    *) nok "$pfx: sect4k-attach attached a device"; diag "$out" "$(cat /tmp/srv.log)" ;;
  esac
  tidy "$pfx" attach
  stop_pid "$srv_pid"; srv_pid=
  is "$pfx: the server exited cleanly" "$stop_rc" 0
}

# two_exports PFX LOG: one server on /tmp/two.sock serving exports 512e
# and 4kn (issue 13), both attached at once by name (sect4k-attach passes
# nbd-client -N): each device has its export's logical size and O_DIRECT
# behaviour.  LOG: the server's RMW log ('' if it has none).
two_exports () {
  tpfx=$1 tlog=$2          # direct_io_tests sets pfx and log
  i=0
  while [ ! -S /tmp/two.sock ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
  # 4kn first: no RMW may be logged until the 512e export is written.
  out=$(sect4k-attach 'nbd+unix:///4kn?socket=/tmp/two.sock' /dev/nbd1 2>&1)
  is "$tpfx: sect4k-attach export 4kn on /dev/nbd1" "$?:$(printf '%s\n' "$out" | head -n 1)" "0:/dev/nbd1"
  out=$(sect4k-attach 'nbd+unix:///512e?socket=/tmp/two.sock' /dev/nbd0 2>&1)
  is "$tpfx: sect4k-attach export 512e on /dev/nbd0 while nbd1 stays attached" \
    "$?:$(printf '%s\n' "$out" | head -n 1)" "0:/dev/nbd0"
  is "$tpfx: /dev/nbd0 logical_block_size 512" "$(cat /sys/block/nbd0/queue/logical_block_size)" 512
  is "$tpfx: /dev/nbd1 logical_block_size 4096" "$(cat /sys/block/nbd1/queue/logical_block_size)" 4096
  direct_io_tests "$tpfx 4kn nbd1" /dev/nbd1 4096 4096 "$tlog"
  direct_io_tests "$tpfx 512e nbd0" /dev/nbd0 512 4096 "$tlog"
  # Separate stores: nbd1's first sector is still zero after nbd0's writes.
  /opt/bin/dd if=/dev/nbd1 of=/tmp/first bs=4096 count=1 iflag=direct status=none
  head -c 4096 /dev/zero > /tmp/zero4k
  check "$tpfx: the 512e export's writes do not show in the 4kn export" cmp -s /tmp/first /tmp/zero4k
  sect4k-attach --detach /dev/nbd0 >/dev/null 2>&1
  sect4k-attach --detach /dev/nbd1 >/dev/null 2>&1
}

# nbd_case NAME L P A PARAMS...: the plugin serving one geometry to the
# nbd driver through sect4k-attach; returns at its first hard failure
# (the suite tidies up after it).
nbd_case () {
  name=$1 L=$2 P=$3 A=$4; shift 4
  start_server "$name" $PLUGIN size=$SIZE "$@"
  uri="nbd+unix:///?socket=/tmp/$name.sock"
  min=$(nbdinfo --json --no-content "$uri" | sed -n 's/.*"block_size_minimum": \([0-9]*\).*/\1/p')
  is "nbd $name: the server advertises minimum $L" "$min" "$L"
  out=$(sect4k-attach "$uri" 2>&1); rc=$?
  dev=$(printf '%s\n' "$out" | head -n 1)
  diag "$out"
  case "$rc:$dev" in
    0:/dev/nbd*) ok "nbd $name: sect4k-attach attached $dev" ;;
    *) nok "nbd $name: sect4k-attach attached a device"; return 1 ;;
  esac
  b=${dev#/dev/}
  is "nbd $name: logical_block_size is the advertised minimum" \
    "$(cat "/sys/block/$b/queue/logical_block_size")" "$min"
  # The nbd driver has one block size for both and no alignment offset.
  is "nbd $name: physical_block_size shows the logical size" \
    "$(cat "/sys/block/$b/queue/physical_block_size")" "$L"
  is "nbd $name: minimum_io_size follows it" "$(cat "/sys/block/$b/queue/minimum_io_size")" "$L"
  is "nbd $name: alignment_offset is 0" "$(cat "/sys/block/$b/alignment_offset")" 0
  if [ "$A" != 0 ]; then
    says "nbd $name: sect4k-attach says what the kernel cannot show" "$out" \
      "cannot show: physical sector $P .*alignment offset $A"
  elif [ "$P" != "$L" ]; then
    says "nbd $name: sect4k-attach says what the kernel cannot show" "$out" \
      "cannot show: physical sector $P "
  else
    says "nbd $name: sect4k-attach says the kernel shows it all" "$out" "shows the whole geometry"
  fi
  direct_io_tests "nbd $name" "$dev" "$L" "$P" "/tmp/$name.log"
  # mke2fs takes at least the kernel's logical size (4096 on 4kn); the
  # physical size is unknown to it here.
  case "$name" in 4kn|512e-xp|l2048) fs_tests "nbd $name" "$dev" "$L" "$P" "$A" "$L" ;; esac
  out=$(sect4k-attach --detach "$dev" 2>&1)
  is "nbd $name: sect4k-attach --detach $dev" "$?:$out" "0:$dev detached"
  is "nbd $name: $dev has size 0 after detaching" "$(cat "/sys/block/$b/size")" 0
  stop_server
}

suite_nbd () {
  out=$(sect4k-attach 'nbd+unix:///?socket=/tmp/none.sock' 2>&1)
  refused "sect4k-attach refuses without the nbd driver" $? "$out" "nbd driver is missing"

  while read -r name L P A params <&3; do
    load_nbd
    # shellcheck disable=SC2086
    nbd_case "$name" "$L" "$P" "$A" $params
    tidy "nbd $name"
    unload_nbd
  done 3< /tmp/cases

  # The nbd driver of Linux < 6.15 takes at most PAGE_SIZE.
  load_nbd
  start_server big $PLUGIN size=$SIZE logical=8192 physical=8192
  out=$(sect4k-attach 'nbd+unix:///?socket=/tmp/big.sock' 2>&1)
  refused "nbd l8192: sect4k-attach refuses a minimum of 8192" $? "$out" "more than this kernel"
  is "nbd l8192: nbd0 stays unattached" "$(cat /sys/block/nbd0/size)" 0
  stop_server
  tidy "nbd l8192"
  # Why sect4k-attach exists: plain nbd-client never asks for the block size.
  start_server plain $PLUGIN size=$SIZE model=4kn
  nbd-client -unix /tmp/plain.sock /dev/nbd0 >/dev/null 2>&1
  is "plain nbd-client on 4kn: the kernel gets logical_block_size 512, not 4096" \
    "$(cat /sys/block/nbd0/queue/logical_block_size)" 512
  check "plain nbd-client on 4kn: reading the first 512 bytes fails" \
    sh -c '! /opt/bin/dd if=/dev/nbd0 of=/dev/null bs=512 count=1 iflag=direct status=none 2>/dev/null'
  nbd-client -d /dev/nbd0 >/dev/null 2>&1
  stop_server
  tidy "plain nbd-client"
  # A server maximum below the driver's 32 MiB caps the kernel's requests.
  start_server maxreq $PLUGIN size=$SIZE model=512e max-request=64K
  out=$(sect4k-attach 'nbd+unix:///?socket=/tmp/maxreq.sock' 2>&1)
  dev=$(printf '%s\n' "$out" | head -n 1)
  is "max-request=64K: sect4k-attach caps max_sectors_kb at 64" \
    "$(cat "/sys/block/${dev#/dev/}/queue/max_sectors_kb" 2>/dev/null)" 64
  check "max-request=64K: a 1 MiB O_DIRECT write succeeds (split by the kernel)" \
    /opt/bin/dd if=/dev/zero of="$dev" bs=1M count=1 oflag=direct conv=notrunc status=none
  check "max-request=64K: the server refused nothing" sh -c '! grep -q refused /tmp/maxreq.log'
  sect4k-attach --detach "$dev" >/dev/null 2>&1
  stop_server
  tidy "max-request=64K"
  # The standalone server (no nbdkit) serves the kernel the same way, from
  # memory and from a file (whose I/O goes through the server's rings).
  if [ -x /opt/bin/sect4k-server ]; then
    srv_case "sect4k-server 4kn" 4096 4096 0 size=$SIZE model=4kn
    srv_case "sect4k-server file 512e-xp" 512 4096 3584 \
      file=/tmp/srv.img size=$SIZE model=512e-xp
    check "sect4k-server file 512e-xp: the file store went through io_uring" \
      grep -q "io_uring" /tmp/srv.log
    rm -f /tmp/srv.img
  fi
  # Two exports of one server attached at once (nbdkit, then sect4k-server).
  unload_nbd
  load_nbd
  start_server two $PLUGIN size=$SIZE exports=512e,4kn
  two_exports "two exports of nbdkit" /tmp/two.log
  stop_server
  tidy "two exports of nbdkit"
  if [ -x /opt/bin/sect4k-server ]; then
    unload_nbd
    load_nbd
    rm -f /tmp/two.sock
    sect4k-server --unix /tmp/two.sock size=$SIZE exports=512e,4kn 2>/tmp/srv2.log &
    srv_pid=$!
    two_exports "two exports of sect4k-server" ""
    tidy "two exports of sect4k-server" attach
    stop_pid "$srv_pid"; srv_pid=
    is "two exports of sect4k-server: the server exited cleanly" "$stop_rc" 0
  fi
  # nbdkit's memory plugin advertises no block sizes.
  start_server nosize memory 1M
  out=$(sect4k-attach 'nbd+unix:///?socket=/tmp/nosize.sock' 2>&1)
  refused "sect4k-attach refuses a server that advertises no block sizes" $? "$out" "advertises no block sizes"
  stop_server
  tidy "nbd: no block sizes"
  unload_nbd
}

suite_virtio () {
  while read -r name L P A params <&3; do
    dev=
    for s in /sys/block/vd*; do
      [ "$(cat "$s/serial" 2>/dev/null)" = "s4k-$name" ] && dev=/dev/${s##*/}
    done
    if [ -z "$dev" ]; then nok "virtio $name: the guest has a disk with serial s4k-$name"; continue; fi
    ok "virtio $name: the guest has the disk as $dev"
    b=${dev#/dev/}
    is "virtio $name: logical_block_size" "$(cat "/sys/block/$b/queue/logical_block_size")" "$L"
    is "virtio $name: physical_block_size" "$(cat "/sys/block/$b/queue/physical_block_size")" "$P"
    # virtio-blk carries no alignment offset.
    is "virtio $name: alignment_offset is 0" "$(cat "/sys/block/$b/alignment_offset")" 0
    direct_io_tests "virtio $name" "$dev" "$L" "$P" ''
    # sfdisk's 1 MiB start is on a physical boundary whenever A = 0.
    case "$name" in 512e|l1024) fs_tests "virtio $name" "$dev" "$L" "$P" "$A" "$L" ;; esac
  done 3< /tmp/cases
}

# fs_cut TORN: ext4 on a 512e device with a write cache, files written
# with and without fsync, a power cut, a reattach: with torn=none every
# fsync'd file is intact and e2fsck is clean; otherwise the result is
# recorded, not asserted.
fs_cut () {
  torn=$1 pfx="faults ext4 torn=$1"
  rm -f /tmp/ctl
  start_server cut $PLUGIN size=$SIZE model=512e write-cache=true \
    write-cache-size=1M control=/tmp/ctl torn=$torn seed=11 cut-report=/tmp/cut.json
  uri='nbd+unix:///?socket=/tmp/cut.sock'
  dev=$(sect4k-attach "$uri" 2>/dev/null | head -n 1)
  case "$dev" in /dev/nbd*) ;; *) nok "$pfx: attached"; stop_server; return ;; esac
  mkdir -p /mnt
  if ! mke2fs -q -F -t ext4 "$dev" || ! mount -t ext4 "$dev" /mnt; then
    nok "$pfx: mkfs.ext4 and mount"; sect4k-attach --detach "$dev" >/dev/null 2>&1
    stop_server; return
  fi
  : > /tmp/sums
  i=0
  while [ $i -lt 12 ]; do
    head -c $(( (i % 5 + 1) * 3000 )) /dev/urandom > /tmp/data
    dd if=/tmp/data of=/mnt/synced$i conv=fsync status=none
    (cd /mnt && md5sum synced$i) >> /tmp/sums
    # Written to the device (O_DIRECT) but never flushed: at risk.
    dd if=/dev/urandom of=/mnt/unsynced$i bs=4096 count=2 oflag=direct status=none
    i=$((i + 1))
  done
  out=$(sect4k-ctl /tmp/ctl power-cut)
  check "$pfx: the control socket cut the power" test $? = 0
  diag "$pfx: the report's outcomes: $(printf '%s\n' "$out" | grep outcomes)"
  check "$pfx: cut-report= has the report, with sectors at risk" \
    sh -c "grep -q '\"cut\": 1' /tmp/cut.json && grep -q '\"lba\"' /tmp/cut.json"
  # The connection from before the cut only gets EIO now.
  umount /mnt 2>/dev/null || umount -l /mnt 2>/dev/null
  sect4k-attach --detach "$dev" >/dev/null 2>&1
  echo 3 > /proc/sys/vm/drop_caches
  dev=$(sect4k-attach "$uri" 2>/dev/null | head -n 1)
  if [ "$torn" = none ]; then
    check "$pfx: the file system mounts after the cut (journal replayed)" \
      mount -t ext4 "$dev" /mnt
    check "$pfx: every fsync'd file is intact" sh -c 'cd /mnt && md5sum -c -s /tmp/sums'
    umount /mnt
    out=$(e2fsck -fn "$dev" 2>&1)
    check "$pfx: e2fsck -fn is clean" test $? = 0 || diag "$out"
  else
    if mount -t ext4 "$dev" /mnt 2>/dev/null; then
      good=$(cd /mnt && md5sum -c /tmp/sums 2>/dev/null | grep -c ': OK')
      umount /mnt
      diag "$pfx: mounted after the cut; $good of 12 fsync'd files intact"
    else
      diag "$pfx: the file system does not mount after the cut"
    fi
    out=$(e2fsck -fn "$dev" 2>&1); rc=$?
    diag "$pfx: e2fsck -fn exit $rc (recorded, not asserted):" \
      "$(printf '%s\n' "$out" | tail -n 8)"
    ok "$pfx: recorded what e2fsck finds (not asserted: torn sectors may break it)"
  fi
  sect4k-attach --detach "$dev" >/dev/null 2>&1
  stop_server
}

suite_faults () {
  load_nbd
  # One bad 4 KiB sector of a 512e device fails all eight 512-byte LBAs
  # for O_DIRECT reads from the kernel; dd of the whole sector repairs it.
  start_server bad $PLUGIN size=$SIZE model=512e bad-sectors=9
  dev=$(sect4k-attach 'nbd+unix:///?socket=/tmp/bad.sock' 2>/dev/null | head -n 1)
  got=
  for i in 6 7 8 9 10 11 12 13 14 15 16 17; do
    if dd if="$dev" of=/dev/null bs=512 count=1 skip=$i iflag=direct status=none 2>/dev/null
    then got="$got ok"; else got="$got EIO"; fi
  done
  is "faults 512e bad-sectors=9: O_DIRECT reads of LBAs 6-17" "$got" \
    " ok ok EIO EIO EIO EIO EIO EIO EIO EIO ok ok"
  check "faults: an O_DIRECT 512-byte write into the bad sector fails" \
    sh -c "! /opt/bin/dd if=/dev/zero of=$dev bs=512 count=1 seek=9 oflag=direct conv=notrunc status=none 2>/dev/null"
  check "faults: dd of the whole 4 KiB sector succeeds" \
    dd if=/dev/zero of="$dev" bs=4096 count=1 seek=1 oflag=direct conv=notrunc status=none
  check "faults: ... and repairs it: the eight LBAs read again" \
    dd if="$dev" of=/dev/null bs=512 count=8 skip=8 iflag=direct status=none
  sect4k-attach --detach "$dev" >/dev/null 2>&1
  stop_server
  tidy "faults 512e bad-sectors=9"
  if grep -q '^ext4 ' /proc/modules || grep -q ext4 /proc/filesystems; then
    fs_cut none; tidy "faults ext4 torn=none"
    fs_cut sector; tidy "faults ext4 torn=sector"
  else
    diag "faults: no ext4 in this kernel: the file-system power cuts are not run"
  fi
  unload_nbd
}

# dm-log-writes over a 512e disk (issue 23): an ext4 workload logged for
# the host, which reads the log with sect4k-crash after the guest exits.
suite_dmlog () {
  data= log=
  for s in /sys/block/vd*; do
    case "$(cat "$s/serial" 2>/dev/null)" in
      dmlog-data) data=/dev/${s##*/} ;;
      dmlog-log) log=/dev/${s##*/} ;;
    esac
  done
  if [ -z "$data" ] || [ -z "$log" ]; then nok "dmlog: the guest has the data and log disks"; return; fi
  dmlog_case "$data" "$log"
  tidy dmlog
  sync
}
dmlog_case () {
  data=$1 log=$2
  is "dmlog: the data disk is 512e" \
    "$(cat /sys/block/${data#/dev/}/queue/logical_block_size) $(cat /sys/block/${data#/dev/}/queue/physical_block_size)" "512 4096"
  export DM_DISABLE_UDEV=1
  sectors=$(blockdev --getsz "$data")
  out=$(dmsetup create --noudevsync s4klog --table "0 $sectors log-writes $data $log" 2>&1)
  check "dmlog: dmsetup creates a log-writes target" test $? = 0 || { diag "$out"; return; }
  dmsetup mknodes s4klog >/dev/null 2>&1
  dev=/dev/mapper/s4klog
  mkdir -p /mnt
  if mke2fs -q -F -t ext4 "$dev" && mount -t ext4 "$dev" /mnt; then
    i=0
    while [ $i -lt 4 ]; do
      head -c $(( (i + 1) * 5000 )) /dev/urandom > /tmp/data
      dd if=/tmp/data of=/mnt/f$i conv=fsync status=none
      i=$((i + 1))
    done
    umount /mnt
    ok "dmlog: mkfs.ext4, mount, 4 fsync'd files, umount through log-writes"
  else
    nok "dmlog: mkfs.ext4, mount, 4 fsync'd files, umount through log-writes"
  fi
  check "dmlog: dmsetup message mark workload-done" dmsetup message s4klog 0 mark workload-done
  check "dmlog: dmsetup removes the target" dmsetup remove --noudevsync s4klog
}

# The SCSI suites (issue 22) and untorn writes (issue 27).
. /scsi.sh
# sect4k-server --scsi --run and sect4k-attach --run (issue 28).
. /captive.sh
. /atomic.sh
# The SATA identity (issue 34).
. /sata.sh
# Zoned drives against scsi_debug (issue 33).
. /zoned.sh
# Sector-size conversion in place (issue 34).
. /format.sh
. /ublk.sh
for suite in "$@"; do "suite_$suite"; tidy "$suite suite"; done
echo "S4K: TESTS $n"
