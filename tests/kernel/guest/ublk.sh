# SPDX-License-Identifier: BSD-3-Clause
# The ublk suite of the kernel tests (issue 35), sourced by tests.sh after
# scsi.sh (its ok/nok/is/check/says/diag helpers, wait_for, write_rmw):
#   ublk  sect4k-server --ublk: /dev/ublkbN per geometry (512n, 512e,
#         4kn) checked through sysfs; one RMW for a 512-byte O_DIRECT
#         write on 512e; ext4; a power cut through the control socket
#         against its report; --ublk --run leaves no device on success,
#         failure and SIGTERM; a SIGKILLed server's device is deleted by
#         the next start; with --ublk-recovery it stays, its I/O held, and
#         the next start takes it over (ext4 mounted, a writer running);
#         zoned=host-managed against the SCSI disk of the same keys, and
#         btrfs on it (zone append; with the tools disk); zone reports of
#         65536 and 131072 zones; an unprivileged user refused.
#         Linux 6.1 has no ublk_drv in Debian: it skips.
blockdev () { /opt/bin/blockdev "$@"; }

# NAME L P ROT WC MAXREQ(KiB) KEYS: what the kernel must show.  Timing
# presets with their latencies at 0: only the rotation they report.
cat > /tmp/ublk-cases <<'CASES'
512n  512   512   1  false  256    model=512n max-request=256k timing=hdd7200 latency-read=0 latency-write=0 latency-rmw=0 rate=0
512e  512   4096  0  true   1024   model=512e max-request=1M write-cache=true write-cache-size=1M torn=none timing=ssd latency-read=0 latency-write=0 latency-rmw=0 rate=0
4kn   4096  4096  0  false  32768  model=4kn --threads 2
CASES

# ublk_devs: our ublk devices in sysfs (the control nodes stay until
# DEL_DEV: empty when nothing of ours is left).
ublk_devs () { ls -d /sys/class/ublk-char/ublkc* /sys/block/ublkb* 2>/dev/null | tr '\n' ' '; }

# ublk_serve OUT ARGS...: sect4k-server ARGS --ublk in the background,
# its stdout in OUT and its stderr in OUT's .log (/tmp/NAME.out and
# /tmp/NAME.log); waits for its device line.  Sets ublk_pid and ublk_dev;
# without a device, says what the server said and returns 1 (the server
# may still run: tidy stops it).
ublk_serve () {
  local out="$1" log="${1%.out}.log"; shift
  rm -f "$out"
  sect4k-server "$@" --ublk >"$out" 2>"$log" &
  ublk_pid=$!
  case_pids="$case_pids $ublk_pid"   # tidy stops it if the case fails
  wait_for 60 sh -c "grep -q '^/dev/ublkb' $out || ! kill -0 $ublk_pid 2>/dev/null"
  ublk_dev=$(sed -n 's|^\(/dev/ublkb[0-9]*\).*|\1|p' "$out" | head -n 1)
  [ -n "$ublk_dev" ] && wait_for 10 test -b "$ublk_dev" && return 0
  diag "sect4k-server $* --ublk gave no device:" "$(cat "$out")" "$(tail -n 5 "$log")"
  ublk_dev=
  return 1
}
# ublk_start NAME KEYS...: ublk_serve with a control socket /tmp/NAME.ctl
# and an NBD listener /tmp/NAME.sock on the same export.
ublk_start () {
  local name=$1; shift
  rm -f "/tmp/$name.ctl" "/tmp/$name.sock"
  ublk_serve "/tmp/$name.out" size=64M "$@" control="/tmp/$name.ctl" --unix "/tmp/$name.sock"
}
# ublk_stop PFX: SIGTERM; exit 0, the device gone.
ublk_stop () {
  local b=${ublk_dev#/dev/}
  stop_pid "$ublk_pid" 60
  is "$1: sect4k-server exits 0 on SIGTERM" "$stop_rc" 0
  [ -z "$b" ] || check "$1: ... and /dev/$b is gone" test ! -e "/sys/block/$b"
  ublk_pid= ublk_dev=
}

ublk_sysfs () {
  local pfx=$1 dev=$2 L=$3 P=$4 rot=$5 wc=$6 max=$7 q want fua
  q=/sys/block/${dev#/dev/}/queue
  is "$pfx: logical_block_size $L" "$(cat $q/logical_block_size)" "$L"
  is "$pfx: physical_block_size $P" "$(cat $q/physical_block_size)" "$P"
  is "$pfx: minimum_io_size $P" "$(cat $q/minimum_io_size)" "$P"
  is "$pfx: optimal_io_size $P (ublk cannot say none: the physical size)" "$(cat $q/optimal_io_size)" "$P"
  is "$pfx: alignment_offset 0" "$(cat /sys/block/${dev#/dev/}/alignment_offset)" 0
  is "$pfx: max_hw_sectors_kb $max (max-request)" "$(cat $q/max_hw_sectors_kb)" "$max"
  check "$pfx: max_sectors_kb $(cat $q/max_sectors_kb) <= $max" test "$(cat $q/max_sectors_kb)" -le "$max"
  is "$pfx: rotational $rot" "$(cat $q/rotational)" "$rot"
  if [ "$wc" = true ]; then want="write back" fua=1; else want="write through" fua=0; fi
  is "$pfx: write_cache '$want' (write-cache=$wc)" "$(cat $q/write_cache)" "$want"
  is "$pfx: fua $fua" "$(cat $q/fua)" "$fua"
  is "$pfx: discard_granularity $P" "$(cat $q/discard_granularity)" "$P"
  is "$pfx: discard_max_hw_bytes 1 GiB (as the SCSI disk's UNMAP)" "$(cat $q/discard_max_hw_bytes)" 1073741824
  is "$pfx: write_zeroes_max_bytes 1 GiB (as WRITE SAME)" "$(cat $q/write_zeroes_max_bytes)" 1073741824
  is "$pfx: blockdev --getss --getpbsz --getalignoff" \
    "$(blockdev --getss --getpbsz --getalignoff "$dev" | tr '\n' ' ')" "$L $P 0 "
}

# ublk_data PFX DEV L: O_DIRECT writes read back, discard and zeroes.
ublk_data () {
  local pfx=$1 dev=$2 L=$3
  head -c 196608 /dev/urandom > /tmp/ub.a
  dd if=/tmp/ub.a of="$dev" bs="$L" seek=$(( 1048576 / L + 1 )) oflag=direct conv=notrunc status=none
  dd if="$dev" of=/tmp/ub.back bs="$L" skip=$(( 1048576 / L + 1 )) count=$(( 196608 / L )) iflag=direct status=none
  check "$pfx: O_DIRECT write and read back: the same bytes" cmp -s /tmp/ub.a /tmp/ub.back
  check "$pfx: blkdiscard -z (write zeroes) of 1 MiB" /opt/bin/blkdiscard -z -o 1048576 -l 1048576 "$dev"
  dd if="$dev" of=/tmp/ub.back bs=65536 skip=16 count=16 iflag=direct status=none
  check "$pfx: ... reads as zeroes" test -z "$(tr -d '\0' < /tmp/ub.back | head -c 1)"
  check "$pfx: blkdiscard of the whole device" /opt/bin/blkdiscard "$dev"
  rm -f /tmp/ub.*
}

# ublk_fs PFX DEV: ext4 made, mounted, written, unmounted, fsck clean.
ublk_fs () {
  local pfx=$1 dev=$2 out rc
  mkdir -p /mnt
  if ! mke2fs -q -F -t ext4 "$dev" || ! mount -t ext4 "$dev" /mnt; then
    nok "$pfx: mkfs.ext4 and mount"; return
  fi
  head -c 300000 /dev/urandom > /tmp/ub.f
  cp /tmp/ub.f /mnt/f && sync
  check "$pfx: ext4: a file written reads back" cmp -s /tmp/ub.f /mnt/f
  umount /mnt
  out=$(e2fsck -fn "$dev" 2>&1); rc=$?
  is "$pfx: e2fsck -fn is clean" "$rc" 0
  [ "$rc" = 0 ] || diag "$out"
  rm -f /tmp/ub.f
}

# ublk_cut PFX DEV CTL: write-cache=true, torn=none: a flushed write stays,
# an unflushed one in the volatile cache is lost at the cut, as the cut
# report says (one sector reverted, at LBA 4096), and the device reads so.
ublk_cut () {
  local pfx=$1 dev=$2 ctl=$3 out
  head -c 4096 /dev/urandom > /tmp/ub.kept
  head -c 4096 /dev/urandom > /tmp/ub.lost
  dd if=/tmp/ub.kept of="$dev" bs=4096 seek=256 oflag=direct conv=notrunc,fsync status=none
  dd if=/tmp/ub.lost of="$dev" bs=4096 seek=512 oflag=direct conv=notrunc status=none
  out=$(sect4k-ctl "$ctl" power-cut)
  check "$pfx: the control socket cut the power" test $? = 0
  says "$pfx: the cut report: one sector reverted, LBA 4096 (the unflushed write)" "$out" \
    '"reverted": 1' '"lba": 4096,.*"outcome": "reverted"'
  dd if="$dev" of=/tmp/ub.back bs=4096 skip=256 count=1 iflag=direct status=none
  check "$pfx: the flushed write is on the device" cmp -s /tmp/ub.kept /tmp/ub.back
  dd if="$dev" of=/tmp/ub.back bs=4096 skip=512 count=1 iflag=direct status=none
  check "$pfx: the unflushed one is gone, as reported (zeroes)" test -z "$(tr -d '\0' < /tmp/ub.back | head -c 1)"
  check "$pfx: the device serves after the cut" \
    dd if=/tmp/ub.lost of="$dev" bs=4096 seek=512 oflag=direct conv=notrunc,fsync status=none
  rm -f /tmp/ub.*
}

ublk_captive () {
  local pfx st pid cmd
  cmd='b=${dev#/dev/}; echo "dev=$dev"; test -b "$dev" && echo block=yes;
    echo "lbs=$(cat /sys/block/$b/queue/logical_block_size) pbs=$(cat /sys/block/$b/queue/physical_block_size)"'
  pfx="ublk --run"
  sect4k-server size=16M model=512e --ublk --run "$cmd" >/tmp/ucap1.out 2>/tmp/ucap1.log
  is "$pfx: exit status 0" $? 0
  says "$pfx: the command saw \$dev, 512e" "$(cat /tmp/ucap1.out)" '^dev=/dev/ublkb' '^block=yes' '^lbs=512 pbs=4096'
  is "$pfx: ... and no ublk device is left" "$(ublk_devs)" ""
  pfx="ublk --run, the command fails"
  sect4k-server size=16M model=512e --ublk --run "$cmd; exit 3" >/tmp/ucap2.out 2>/tmp/ucap2.log
  is "$pfx: exit status 3" $? 3
  is "$pfx: ... and no ublk device is left" "$(ublk_devs)" ""
  pfx="ublk --run, SIGTERM mid-run"
  rm -f /tmp/ucap3.ready
  sect4k-server size=16M model=512e --ublk \
    --run "$cmd; touch /tmp/ucap3.ready; exec sleep 120" >/tmp/ucap3.out 2>/tmp/ucap3.log &
  pid=$!
  wait_for 60 test -e /tmp/ucap3.ready || diag "$(cat /tmp/ucap3.out /tmp/ucap3.log)"
  kill -TERM "$pid"; wait "$pid"; st=$?
  is "$pfx: exit status 143" $st 143
  is "$pfx: ... and no ublk device is left" "$(ublk_devs)" ""
  pfx="ublk --run, named exports"
  sect4k-server size=16M exports=512e,4kn --ublk --run 'for d in "$dev" "$dev_512e" "$dev_4kn"; do
      echo "$d $(cat /sys/block/${d#/dev/}/queue/logical_block_size)"; done' >/tmp/ucapn.out 2>/tmp/ucapn.log
  is "$pfx: exit status 0" $? 0
  says "$pfx: \$dev and \$dev_512e are 512e, \$dev_4kn 4kn" "$(cat /tmp/ucapn.out)" \
    "^/dev/ublkb[0-9]* 512\$" "^/dev/ublkb[0-9]* 4096\$"
  is "$pfx: ... \$dev is \$dev_512e" "$(sed -n 1p /tmp/ucapn.out)" "$(sed -n 2p /tmp/ucapn.out)"
  is "$pfx: ... and no ublk device is left" "$(ublk_devs)" ""
  pfx="ublk -r"
  out=$(sect4k-server size=16M model=512e -r --ublk --run 'b=${dev#/dev/}; echo "ro=$(cat /sys/block/$b/ro)"
      if dd if=/dev/zero of="$dev" bs=4096 count=1 oflag=direct status=none 2>/dev/null; then echo wrote; else echo refused; fi' 2>/dev/null)
  says "$pfx: a read-only device, a write refused" "$out" '^ro=1$' '^refused$'
}

# sect4k-attach --ublk over an NBD export of the plugin: attach and
# detach, --run, and 512e-xp refused (ublk has no alignment offset).
ublk_attach () {
  local pfx="ublk sect4k-attach" uri out st dev
  start_server ubup $PLUGIN size=16M model=512e
  uri="nbd+unix:///?socket=/tmp/ubup.sock"
  out=$(sect4k-attach --ublk "$uri" 2>&1); st=$?
  dev=$(printf '%s\n' "$out" | head -n 1)
  is "$pfx --ublk: exit 0" "$st" 0
  says "$pfx --ublk: a ublk device, 512e" "$out" '^/dev/ublkb[0-9]*$' 'logical_block_size 512, physical_block_size 4096'
  check "$pfx --detach $dev" sect4k-attach --detach "$dev"
  is "$pfx: ... and no ublk device is left" "$(ublk_devs)" ""
  sect4k-attach --run 'b=${dev#/dev/}; echo "lbs=$(cat /sys/block/$b/queue/logical_block_size) pbs=$(cat /sys/block/$b/queue/physical_block_size)"; exit 4' \
    --ublk "$uri" >/tmp/uatt.out 2>/tmp/uatt.log
  is "$pfx --run --ublk: the command's exit status 4" $? 4
  says "$pfx --run --ublk: \$dev is 512e" "$(cat /tmp/uatt.out)" '^lbs=512 pbs=4096$'
  is "$pfx: ... and no ublk device is left" "$(ublk_devs)" ""
  stop_server
  start_server ubup $PLUGIN size=16M model=512e-xp
  out=$(sect4k-attach --ublk "$uri" 2>&1); st=$?
  refused "$pfx --ublk of 512e-xp is refused (alignment offset)" "$st" "$out" 'alignment offset 3584.*use --scsi'
  stop_server
}

# SIGKILL leaves the device (its server gone); the next start deletes it.
ublk_stale () {
  local pfx="ublk SIGKILL" out
  ublk_start stale model=512e || { nok "$pfx: a device to kill"; return; }
  kill -9 "$ublk_pid"; wait "$ublk_pid" 2>/dev/null
  wait_for 20 sh -c "test ! -e /sys/block/${ublk_dev#/dev/}"
  diag "$pfx: left after SIGKILL: $(ublk_devs)"
  sect4k-server -v size=16M model=512e --ublk --run 'ls -d /sys/class/ublk-char/ublkc* | wc -l' \
    >/tmp/ustale.out 2>/tmp/ustale.log
  is "$pfx: the next start runs" $? 0
  says "$pfx: ... and deletes the dead server's device" "$(cat /tmp/ustale.log)" "deleted ublkb.*left by sect4k-server pid $ublk_pid"
  diag "$pfx: the next start said:" "$(grep ublkb /tmp/ustale.log)"
  is "$pfx: ... its command saw one device, its own" "$(cat /tmp/ustale.out)" 1
  is "$pfx: ... and nothing is left" "$(ublk_devs)" ""
  ublk_pid= ublk_dev=
}

# --ublk-recovery: ext4 mounted, a writer running (rate= keeps it running
# for seconds), SIGKILL of the server: the device stays with the I/O
# held; a restart with the same file= takes it over, the writer finishes,
# its data is there after a remount, e2fsck is clean.
ublk_recovery () {
  local pfx="ublk recovery" dev wpid rc out
  keys="model=512e file=/tmp/rec.img rate=4M --ublk-recovery"
  rm -f /tmp/rec.img
  # shellcheck disable=SC2086
  ublk_start rec $keys || { nok "$pfx: a device"; return; }
  dev=$ublk_dev
  mkdir -p /mnt
  if ! mke2fs -q -F -t ext4 "$dev" || ! mount -t ext4 "$dev" /mnt; then
    nok "$pfx: mkfs.ext4 and mount"; return
  fi
  head -c 12582912 /dev/urandom > /tmp/rec.src
  dd if=/tmp/rec.src of=/mnt/big bs=65536 oflag=direct status=none 2>/tmp/rec.dd &
  wpid=$!
  sleep 1
  kill -9 "$ublk_pid"; wait "$ublk_pid" 2>/dev/null
  sleep 2
  check "$pfx: after SIGKILL, the writer waits (its I/O held)" alive "$wpid"
  check "$pfx: ... and $dev is still there" test -b "$dev" -a -e "/sys/block/${dev#/dev/}"
  # shellcheck disable=SC2086
  ublk_start rec2 $keys || { nok "$pfx: the restart gave a device"; kill -9 "$wpid"; return; }
  is "$pfx: the restart took over the same device" "$ublk_dev" "$dev"
  says "$pfx: ... and says so" "$(cat /tmp/rec2.log)" "took over $dev"
  wait "$wpid"; rc=$?
  is "$pfx: the writer finished, exit 0" "$rc" 0
  [ "$rc" = 0 ] || diag "$(cat /tmp/rec.dd)"
  umount /mnt
  echo 3 > /proc/sys/vm/drop_caches
  if mount -t ext4 "$dev" /mnt; then
    check "$pfx: after a remount, the file has every byte written" cmp -s /tmp/rec.src /mnt/big
    umount /mnt
  else
    nok "$pfx: ext4 mounts again"
  fi
  out=$(e2fsck -fn "$dev" 2>&1); rc=$?
  is "$pfx: e2fsck -fn is clean" "$rc" 0
  [ "$rc" = 0 ] || diag "$out"
  ublk_stop "$pfx"
  rm -f /tmp/rec.img /tmp/rec.src
}

# ublk_zoned: zoned=host-managed through ublk against the sect4k SCSI
# disk of the same keys (zoned.sh's ZONED_KEYS, 512e): the queue's zone
# fields (zoned_sysfs) but zone_write_granularity, which ublk cannot set,
# then `blkzone report` line by line after zoned_ops (writes, opens,
# closes, finishes, resets, and a write below a write pointer refused).
ublk_zoned () {
  local pfx="ublk zoned 512e" t0 ref ref_ops out q zam
  t0=$(date +%s)
  command -v blkzone >/dev/null || { ok "$pfx # SKIP no blkzone in the guest"; return; }
  # shellcheck disable=SC2086
  sect4k-server size=${ZONED_MB}M model=512e $ZONED_KEYS --scsi >/tmp/uz-scsi.out 2>/tmp/uz-scsi.log &
  scsi_pid=$!
  wait_for 60 sh -c "grep -q '^/dev/sd' /tmp/uz-scsi.out || ! kill -0 $scsi_pid 2>/dev/null"
  scsi_dev=$(sed -n 's|^\(/dev/sd[a-z]*\).*|\1|p' /tmp/uz-scsi.out | head -n 1)
  if [ -z "$scsi_dev" ] || [ ! -b "$scsi_dev" ]; then
    nok "$pfx: the SCSI disk of the same keys (the reference)"
    diag "$(cat /tmp/uz-scsi.out /tmp/uz-scsi.log)"; return
  fi
  ref=$(zoned_sysfs "$scsi_dev" | sed 's/ zone_write_granularity=[0-9]*//')
  ref_ops=$(zoned_ops "$scsi_dev")
  stop_pid "$scsi_pid" 60
  scsi_pid= scsi_dev=
  # shellcheck disable=SC2086
  if ! ublk_serve /tmp/uz.out size=${ZONED_MB}M model=512e $ZONED_KEYS; then
    nok "$pfx: sect4k-server --ublk $ZONED_KEYS made a device"; return
  fi
  ok "$pfx: sect4k-server --ublk $ZONED_KEYS made $ublk_dev"
  q=/sys/block/${ublk_dev#/dev/}/queue
  is "$pfx: the queue's zone fields equal the SCSI disk's" \
    "$(zoned_sysfs "$ublk_dev" | sed 's/ zone_write_granularity=[0-9]*//')" "$ref"
  diag "$pfx: $ref; zone_write_granularity $(cat $q/zone_write_granularity) (ublk has no parameter for it)"
  zam=$(cat $q/zone_append_max_bytes)
  check "$pfx: zone_append_max_bytes $zam: zone append offered (ublk requires it), at most max_hw_sectors_kb" \
    test "$zam" -gt 0 -a "$zam" -le $(( $(cat $q/max_hw_sectors_kb) * 1024 ))
  out=$(zoned_ops "$ublk_dev")
  if [ "$out" = "$ref_ops" ]; then
    ok "$pfx: blkzone report after the same writes, opens, closes, finishes and resets: equal to the SCSI disk's, line by line"
  else
    nok "$pfx: blkzone report equals the SCSI disk's line by line"
    printf '%s\n' "$ref_ops" > /tmp/uz-ref.txt; printf '%s\n' "$out" > /tmp/uz-ublk.txt
    diag "$(diff /tmp/uz-ref.txt /tmp/uz-ublk.txt | head -n 40)"
  fi
  says "$pfx: ... a write below zone 1's write pointer failed; closed, full, open zones shown" "$out" \
    "^a write below zone 1's write pointer: " 'zcond: 4(cl)' 'zcond:14(fu)' 'zcond: 3(oe)'
  diag "$(printf '%s\n' "$out" | head -n 10)"
  ublk_stop "$pfx"
  diag "$pfx: $(( $(date +%s) - t0 )) s"
}

# ublk_zoned_limits: zone-max-open= and zone-max-active= of at least the
# sequential zones (15 here) never bind: the device starts with no limit,
# as Linux's block layer takes such limits (ublk refused them at
# SET_PARAMS with EINVAL before); lower ones are shown as given.
ublk_zoned_limits () {
  local pfx="ublk zoned limits" keys="size=64M model=512e zoned=host-managed zone-size=4M zone-conventional=1" q open active
  for lim in "64 64 0 0" "8 12 8 12"; do
    set -- $lim
    # shellcheck disable=SC2086
    if ! ublk_serve /tmp/uzl.out $keys zone-max-open=$1 zone-max-active=$2; then
      nok "$pfx: zone-max-open=$1 zone-max-active=$2 on 15 sequential zones made a device"
      stop_pid "$ublk_pid" 60; ublk_pid=; continue
    fi
    q=/sys/block/${ublk_dev#/dev/}/queue
    open=$(cat $q/max_open_zones) active=$(cat $q/max_active_zones)
    # No limit: some kernels show their write plug pool (at most the
    # sequential zones) as max_open_zones.
    [ "$3 $4" = "0 0" ] && [ "$open $active" = "15 0" ] && open=0
    is "$pfx: zone-max-open=$1 zone-max-active=$2 on 15 sequential zones: max_open_zones max_active_zones" \
      "$open $active" "$3 $4"
    ublk_stop "$pfx"
  done
}

# ublk_zoned_btrfs: btrfs's zoned mode writes its data with zone append
# (REQ_OP_ZONE_APPEND, btrfs_use_zone_append), each extent where the
# device says it went: an 8 MiB file on a zoned ublk device reads back
# after a remount (the page cache dropped) and scrub finds no error.
# No conventional zones: btrfs would put its data there, without append.
# Needs the tools disk (zoned.sh's zoned_tools).
ublk_zoned_btrfs () {
  local pfx="ublk zoned btrfs (zone append)" out sum t0
  local keys="size=512M model=512e zoned=host-managed zone-size=4M"
  t0=$(date +%s)
  if ! zoned_tools; then ok "$pfx # SKIP $zoned_tools_why"; return; fi
  # shellcheck disable=SC2086
  if ! ublk_serve /tmp/uzb.out $keys; then
    nok "$pfx: sect4k-server $keys --ublk made a device"; return
  fi
  out=$(mkfs.btrfs -f -d single -m single "$ublk_dev" 2>&1)
  says "$pfx: mkfs.btrfs on $ublk_dev: a zoned device" "$out" 'Zoned device: *yes' || { diag "$out"; return; }
  mkdir -p /mnt
  check "$pfx: mount" mount -t btrfs "$ublk_dev" /mnt || return
  head -c 8388608 /dev/urandom > /tmp/uzb.dat
  sum=$(md5sum < /tmp/uzb.dat)
  cp /tmp/uzb.dat /mnt/data && sync
  umount /mnt
  echo 3 > /proc/sys/vm/drop_caches
  if mount -t btrfs "$ublk_dev" /mnt; then
    is "$pfx: an 8 MiB file reads back after a remount" "$(md5sum < /mnt/data)" "$sum"
    out=$(btrfs scrub start -B /mnt 2>&1)
    says "$pfx: btrfs scrub: no errors found" "$out" 'Error summary: *no errors found' || diag "$out"
    umount /mnt
  else
    nok "$pfx: mount again"
  fi
  rm -f /tmp/uzb.dat
  ublk_stop "$pfx"
  diag "$pfx: $(( $(date +%s) - t0 )) s"
}

# ublk_notroot: an unprivileged user is refused in one line, exit 1,
# before anything is made (ublk_check; on a host without the driver the
# missing /dev/ublk-control is said first).  timeout: a server that took
# it would serve on.
ublk_notroot () {
  local pfx="ublk as an unprivileged user (uid 65534)" st
  [ -x /opt/bin/setpriv ] || { ok "$pfx # SKIP no util-linux setpriv in the guest"; return; }
  is "$pfx: setpriv drops root" \
    "$(/opt/bin/setpriv --reuid=65534 --regid=65534 --clear-groups id -u)" 65534 || return
  timeout 60 /opt/bin/setpriv --reuid=65534 --regid=65534 --clear-groups \
    sect4k-server size=16M model=512e --ublk >/tmp/unr.out 2>/tmp/unr.log; st=$?
  is "$pfx: exit status 1" "$st" 1
  is "$pfx: one line, on stderr: needs root" "$(cat /tmp/unr.out /tmp/unr.log)" \
    "sect4k-server: --ublk: needs root (it adds block devices through /dev/ublk-control)"
  is "$pfx: ... and no ublk device" "$(ublk_devs)" ""
}

# ublk_zoned_many: zone reports of more zones than one report request
# holds (512e, 4 KiB zones).  ublk_drv asks in requests of at most
# max_hw_sectors (64 bytes a zone), each from where the last stopped, and
# Linux 6.12 cannot map one above 4 MiB (ENOMEM): with 131072 zones under
# the default max-request=32M, START_DEV's zone revalidation failed, so
# the server asks for requests of 4 MiB then; 65536 zones (4 MiB) need
# no limit (started: all went in one request; 4096 of them listed).
# max-request=64k: 1024 zones a request, fewer than the 4096
# blkzone asks at a time, whose answer ublk_drv misplaces (its callback
# index starts at 0 each request): the server says so; a report of one
# request is right.
ublk_zoned_many () {
  local pfx keys nr kb out t0 t1 want
  while read -r kb keys; do
    pfx="ublk zoned, many zones: $keys"
    t0=$(date +%s)
    # shellcheck disable=SC2086
    if ! ublk_serve /tmp/uzm.out model=512e zoned=host-managed $keys; then
      nok "$pfx: a device"; diag "$(dmesg | grep ublk | tail -n 3)"
      stop_pid "$ublk_pid" 60; ublk_pid=; continue
    fi
    t1=$(date +%s)
    nr=$(cat "/sys/block/${ublk_dev#/dev/}/queue/nr_zones")
    ok "$pfx: $ublk_dev, $nr zones"
    is "$pfx: max_hw_sectors_kb $kb" "$(cat "/sys/block/${ublk_dev#/dev/}/queue/max_hw_sectors_kb")" "$kb"
    case $kb in
      64)
        says "$pfx: the server says blkzone's reports will be misplaced" "$(cat /tmp/uzm.log)" \
          "16384 zones, 1024 a report request (max-request=64k): ublk_drv misplaces"
        want=1024 ;;
      4096)
        says "$pfx: the server says why (requests of 4M)" "$(cat /tmp/uzm.log)" \
          "$nr zones: requests of at most 4M, not max-request's 32768k"
        want=$nr ;;
      *) want=4096 ;;   # started: its 65536 zones went in one request
    esac
    [ "$kb" = 32768 ] || diag "$pfx: the server said:" "$(grep ' zones' /tmp/uzm.log)"
    out=$(blkzone report -c "$want" "$ublk_dev" 2>&1)
    is "$pfx: blkzone report lists $want zones" "$(printf '%s\n' "$out" | grep -c '^  start: ')" "$want"
    says "$pfx: ... from sector 0 to zone $((want - 1))'s, in order" "$(printf '%s\n' "$out" | sed -n '1p;$p' | tr '\n' ' ')" \
      "^  start: 0x000000000, len 0x000008,.*  start: $(printf '0x%09x' $(( (want - 1) * 8 ))), len 0x000008"
    diag "$pfx: started in $((t1 - t0)) s, reported in $(( $(date +%s) - t1 )) s"
    case $keys in
      *max-request=64k*)
        diag "$pfx: all zones with blkzone (ublk_drv's misplacing, not checked):" \
          "$(blkzone report "$ublk_dev" 2>&1 | sed -n '$=;1p')" ;;
    esac
    ublk_stop "$pfx"
  done <<'EOF2'
4096 size=512M zone-size=4k
32768 size=256M zone-size=4k
64 size=64M zone-size=4k max-request=64k
EOF2
}

suite_ublk () {
  local name L P rot wc max keys pfx before after
  if [ ! -e /dev/ublk-control ]; then
    ok "ublk # SKIP Linux $(uname -r) has no ublk_drv (Debian builds it from 6.12 on)"
    return
  fi
  if ! sect4k-server --help 2>&1 | grep -q -e '--ublk'; then
    ok "ublk # SKIP this sect4k-server has no --ublk"; return
  fi
  out=$(sect4k-server size=16M model=512e-xp --ublk 2>&1); st=$?
  refused "ublk: 512e-xp (alignment offset) is refused, pointing to --scsi" "$st" "$out" 'alignment offset 3584.*use --scsi'
  while read -r name L P rot wc max keys; do
    pfx="ublk $name"
    # shellcheck disable=SC2086
    ublk_start "$name" $keys || { nok "$pfx: sect4k-server --ublk made a device"; continue; }
    ok "$pfx: sect4k-server --ublk made $ublk_dev"
    is "$pfx: its line: the device and - (the unnamed export)" "$(cat "/tmp/$name.out")" "$ublk_dev -"
    ublk_sysfs "$pfx" "$ublk_dev" "$L" "$P" "$rot" "$wc" "$max"
    ublk_data "$pfx" "$ublk_dev" "$L"
    case " $keys " in
      *" --threads 2 "*)
        # The kernel gives a device one queue per CPU at most.
        nq=$(( $(nproc) < 2 ? $(nproc) : 2 ))
        is "$pfx: --threads 2 on $(nproc) CPU(s): $nq hardware queue(s)" "$(ls /sys/block/${ublk_dev#/dev/}/mq | wc -l)" "$nq"
        says "$pfx: ... as the server says" "$(cat /tmp/$name.log)" "$nq queues* of 64" ;;
    esac
    # The same export through NBD at the same time (scsi.sh's check).
    scsi_both "$pfx" "$ublk_dev" "/tmp/$name.sock" "$L"
    if [ "$name" = 512e ]; then
      before=$(write_rmw "/tmp/$name.ctl")
      dd if=/dev/urandom of="$ublk_dev" bs=512 count=1 seek=17 oflag=direct conv=notrunc status=none
      after=$(write_rmw "/tmp/$name.ctl")
      is "$pfx: statistics: a 512-byte O_DIRECT write is one RMW'd sector" "$(( ${after:-0} - ${before:-0} ))" 1
      ublk_fs "$pfx" "$ublk_dev"
      ublk_cut "$pfx power cut" "$ublk_dev" "/tmp/$name.ctl"
    fi
    ublk_stop "$pfx"
  done < /tmp/ublk-cases
  ublk_zoned
  tidy "ublk zoned"
  ublk_zoned_limits
  tidy "ublk zoned limits"
  ublk_zoned_btrfs
  tidy "ublk zoned btrfs"
  ublk_zoned_many
  tidy "ublk zoned many"
  ublk_notroot
  ublk_captive
  ublk_attach
  ublk_stale
  ublk_recovery
}

# ublk_bench (opt-in: SECT4K_VM_SUITES=ublk_bench): one 512e export of one
# server as /dev/ublkbN, /dev/sdX (--scsi) and /dev/nbdN (--unix and the
# nbd driver); fio 4 KiB random read and write, O_DIRECT, QD 32, on each.
# Under qemu TCG the numbers compare the three paths, nothing more.
suite_ublk_bench () {
  local BENCH_QD=32 pid ub sd nbd rw rep i d v line
  [ -x /opt/bin/fio ] || { nok "ublk bench: fio is in the guest"; return; }
  [ -e /dev/ublk-control ] || { ok "ublk bench # SKIP Linux $(uname -r) has no ublk_drv"; return; }
  rm -f /tmp/ubench.sock
  sect4k-server size=256M model=512e --ublk --scsi --unix /tmp/ubench.sock \
    >/tmp/ubench.out 2>/tmp/ubench.log &
  pid=$! case_pids="$case_pids $!"
  wait_for 60 sh -c "grep -q '^/dev/ublkb' /tmp/ubench.out && grep -q '^/dev/sd' /tmp/ubench.out || ! kill -0 $pid 2>/dev/null"
  ub=$(sed -n 's|^\(/dev/ublkb[0-9]*\).*|\1|p' /tmp/ubench.out | head -n 1)
  sd=$(sed -n 's|^\(/dev/sd[a-z]*\).*|\1|p' /tmp/ubench.out | head -n 1)
  load_nbd
  nbd=$(sect4k-attach 'nbd+unix:///?socket=/tmp/ubench.sock' 2>/dev/null | head -n 1)
  if [ -z "$ub" ] || [ -z "$sd" ] || [ "${nbd#/dev/nbd}" = "$nbd" ]; then
    nok "ublk bench: one export as ublk, SCSI and nbd"; diag "$(cat /tmp/ubench.out /tmp/ubench.log)"
    unload_nbd; return
  fi
  dd if=/dev/urandom of=/tmp/fill bs=1M count=8 status=none
  for i in 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15; do
    dd if=/tmp/fill of="$ub" bs=1M seek=$((i * 8)) oflag=direct conv=notrunc status=none
  done
  rm -f /tmp/fill
  diag "ublk bench: 512e, memory store, 4 KiB O_DIRECT libaio QD $BENCH_QD, $BENCH_SECS s per run, $(nproc) CPU(s): $ub (ublk), $sd (SCSI), $nbd (nbd)"
  for rw in randread randwrite; do
    line="ublk bench: $rw IOPS (mean of 2 runs):"
    for d in "$ub" "$sd" "$nbd"; do
      v=0
      for rep in 1 2; do v=$((v + $(fio_iops "$d" $rw | cut -d. -f1 | sed 's/^$/0/'))); done
      line="$line $d $((v / 2))"
      [ "$v" -gt 0 ] || { nok "ublk bench: fio $rw on $d"; diag "$(cat /tmp/fio.err)"; }
    done
    ok "ublk bench: fio $rw ran on the three"
    diag "$line"
  done
  sect4k-attach --detach "$nbd" >/dev/null 2>&1
  unload_nbd
  stop_pid "$pid" 60
  is "ublk bench: sect4k-server exits 0 on SIGTERM" "$stop_rc" 0
}
