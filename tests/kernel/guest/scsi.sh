# SPDX-License-Identifier: BSD-3-Clause
# The SCSI suites of the kernel tests (issue 22), sourced by tests.sh (its
# ok/nok/is/check/says/diag helpers and direct_io_tests).
#   scsi        sect4k-server --scsi: a local /dev/sdX (TCMU + tcm_loop)
#               per geometry, checked through sysfs, sg3-utils, partitions,
#               ext4, faults, statistics and the NBD front end; the same
#               sysfs checks on the kernel's own scsi_debug first, as the
#               reference that the expectations are the kernel's.
#   scsi_bench  fio IOPS on /dev/sdX against /dev/nbdN for one export
#               (opt-in: make bench-scsi).
# busybox runs its own blockdev (no --getalignoff) before anything on PATH.
blockdev () { /opt/bin/blockdev "$@"; }
SCSI_SIZE=64M

# The SCSI cases: geometry, what the kernel must show, the keys.
#   rot    rotational: 1 (timing=hdd7200), 0 (timing=ssd or no timing key), - (not asserted)
#   wc     write-cache=: the Caching page's WCE and sd's cache_type
#   maxreq max-request= (the Block Limits page's maximum transfer length)
# Timing presets come with their latencies set to 0: only the rotation
# rate they report is wanted here, TCG is slow enough.
cat > /tmp/scsi-cases <<'CASES'
512n     512   512   0     1  false  1M   model=512n max-request=1M timing=hdd7200 latency-read=0 latency-write=0 latency-rmw=0 rate=0
512e     512   4096  0     0  true   32M  model=512e write-cache=true write-cache-size=1M torn=none seed=11 timing=ssd latency-read=0 latency-write=0 latency-rmw=0 rate=0
512e-xp  512   4096  3584  0  true   32M  model=512e-xp write-cache=true
4kn      4096  4096  0     0  false  32M  model=4kn
l1024    1024  8192  0     0  false  32M  logical=1024 physical=8192
CASES

scsi_log2 () { v=$1 r=0; while [ "$v" -gt 1 ]; do v=$((v / 2)); r=$((r + 1)); done; echo $r; }
scsi_bytes () {  # 1M -> 1048576
  case "$1" in *K) echo $(( ${1%K} * 1024 )) ;; *M) echo $(( ${1%M} * 1048576 )) ;; *) echo "$1" ;; esac
}
# wait_for SECONDS COMMAND...: until COMMAND succeeds.
wait_for () {
  wf=$(( $1 * 10 )); shift
  while ! "$@"; do
    [ "$wf" -gt 0 ] || return 1
    sleep 0.1; wf=$((wf - 1))
  done
}

# scsi_start NAME KEYS...: sect4k-server KEYS --scsi with a control socket
# (/tmp/NAME.ctl) and an NBD listener (/tmp/NAME.sock) on the same export
# (none for a zoned one: NBD has no zone commands); sets scsi_pid and
# scsi_dev (empty if no disk came within 60 s).
scsi_start () {
  local name=$1 nbd=yes; shift
  case " $* " in *" zoned="*) nbd= ;; esac
  rm -f "/tmp/$name.sock" "/tmp/$name.ctl" "/tmp/$name.out"
  sect4k-server size=$SCSI_SIZE "$@" control="/tmp/$name.ctl" \
    --scsi ${nbd:+--unix "/tmp/$name.sock"} >"/tmp/$name.out" 2>"/tmp/$name.log" &
  scsi_pid=$!
  wait_for 60 sh -c "grep -q '^/dev/sd' /tmp/$name.out || ! kill -0 $scsi_pid 2>/dev/null"
  scsi_dev=$(sed -n 's|^\(/dev/sd[a-z]*\).*|\1|p' "/tmp/$name.out" | head -n 1)
  [ -n "$scsi_dev" ] && [ -b "$scsi_dev" ] &&
    { [ -z "$nbd" ] || wait_for 10 test -S "/tmp/$name.sock"; } && return 0
  diag "sect4k-server --scsi for $name gave no disk:" "$(cat "/tmp/$name.out")" "$(tail -n 5 "/tmp/$name.log")"
  scsi_dev=
  return 1
}
# scsi_stop PFX: SIGTERM; the server exits 0 and the disk is gone.
scsi_stop () {
  local b=${scsi_dev#/dev/}
  stop_pid "$scsi_pid" 60
  is "$1: sect4k-server exits 0 on SIGTERM" "$stop_rc" 0
  [ -z "$b" ] || check "$1: ... and /dev/$b is gone" test ! -e "/sys/block/$b"
  scsi_pid= scsi_dev=
}

# scsi_sysfs PFX DEV L P A ROT WC: what the kernel's sd made of the disk.
scsi_sysfs () {
  local pfx=$1 dev=$2 L=$3 P=$4 A=$5 rot=$6 wc=$7 b q sd want
  b=${dev#/dev/} q=/sys/block/${2#/dev/}/queue
  is "$pfx: logical_block_size $L" "$(cat $q/logical_block_size)" "$L"
  is "$pfx: physical_block_size $P" "$(cat $q/physical_block_size)" "$P"
  is "$pfx: minimum_io_size $P (Block Limits: optimal granularity)" "$(cat $q/minimum_io_size)" "$P"
  is "$pfx: alignment_offset $A" "$(cat /sys/block/$b/alignment_offset)" "$A"
  is "$pfx: blockdev --getss --getpbsz --getalignoff" \
    "$(blockdev --getss --getpbsz --getalignoff "$dev" | tr '\n' ' ')" "$L $P $A "
  is "$pfx: discard_granularity $P" "$(cat $q/discard_granularity)" "$P"
  is "$pfx: discard_alignment $A (unmap granularity alignment)" "$(cat /sys/block/$b/discard_alignment)" "$A"
  [ "$rot" = - ] || is "$pfx: rotational $rot" "$(cat $q/rotational)" "$rot"
  sd=$(ls -d /sys/block/$b/device/scsi_disk/* 2>/dev/null | head -n 1)
  if [ "$wc" = true ]; then want="write back"; else want="write through"; fi
  is "$pfx: cache_type '$want' (write-cache=$wc)" "$(cat "$sd/cache_type" 2>/dev/null)" "$want"
  is "$pfx: FUA 1 (DPOFUA)" "$(cat "$sd/FUA" 2>/dev/null)" 1
}

# scsi_partitions PFX DEV L P A: sfdisk's default first partition starts on
# a physical boundary; one made at LBA 63 (the DOS habit) is aligned only
# where LBA 63 is a physical boundary (512e-xp), as the partition's own
# alignment_offset shows.
scsi_partitions () {
  local pfx=$1 dev=$2 L=$3 P=$4 A=$5 b start out
  b=${dev#/dev/}
  out=$(echo ',,L' | sfdisk -q "$dev" 2>&1)
  if ! wait_for 5 test -b "/dev/${b}1"; then
    nok "$pfx: sfdisk made a partition"; diag "$out"; return
  fi
  start=$(( $(cat "/sys/block/$b/${b}1/start") * 512 ))
  is "$pfx: sfdisk's first partition (byte $start) starts on a physical boundary" \
    $(( (start - A + P) % P )) 0
  is "$pfx: ... and its alignment_offset is 0" "$(cat "/sys/block/$b/${b}1/alignment_offset")" 0
  [ "$L" = 512 ] || return 0
  out=$(echo '63,,L' | sfdisk -q "$dev" 2>&1)
  wait_for 5 sh -c "[ \"\$(cat /sys/block/$b/${b}1/start 2>/dev/null)\" = 63 ]" ||
    { nok "$pfx: sfdisk made a partition at LBA 63"; diag "$out"; return; }
  got=$(cat "/sys/block/$b/${b}1/alignment_offset")
  if [ $(( (63 * 512 - A) % P )) = 0 ]; then
    is "$pfx: a partition at LBA 63 is aligned (alignment_offset 0)" "$got" 0
  else
    is "$pfx: a partition at LBA 63 is misaligned (alignment_offset $(( (P - 63 * 512 % P + A) % P )))" \
      "$got" $(( (P - 63 * 512 % P + A) % P ))
  fi
}

# scsi_pages PFX DEV L P A ROT WC MAXREQ: every page through sg3-utils.
scsi_pages () {
  local pfx=$1 dev=$2 L=$3 P=$4 A=$5 rot=$6 wc=$7 max=$8 out g al byte
  g=$((P / L)) al=$((A / L))
  out=$(sg_inq "$dev" 2>&1)
  says "$pfx: sg_inq: a disk from vendor SECT4K" "$out" \
    'Peripheral device type: disk' 'Vendor identification: SECT4K'
  out=$(sg_vpd -p sv "$dev" 2>&1)
  says "$pfx: sg_vpd: VPD pages 00, 80, 83, B0, B1, B2 supported" "$out" \
    '\[sv\]' '\[sn\]' '\[di\]' '\[bl\]' '\[bdc\]' '\[lbpv\]'
  out=$(sg_vpd -p sn "$dev" 2>&1)
  says "$pfx: sg_vpd 80h: a unit serial number" "$out" 'Unit serial number: [^ ]'
  out=$(sg_vpd -p di "$dev" 2>&1)
  says "$pfx: sg_vpd 83h: an NAA designator for the logical unit" "$out" \
    'Addressed logical unit' 'designator type: NAA'
  out=$(sg_vpd -p bl "$dev" 2>&1)
  says "$pfx: sg_vpd B0h: granularity $g, maximum transfer $((max / L)), unmap granularity $g aligned at LBA $al" \
    "$out" "Optimal transfer length granularity: $g blocks" \
    "Maximum transfer length: $((max / L)) blocks" "Optimal unmap granularity: $g blocks" \
    'Unmap granularity alignment valid: true' "Unmap granularity alignment: $al\$"
  scsi_opt_io "$pfx" "$dev" "$L" "$P" "$out"
  out=$(sg_vpd -p bdc "$dev" 2>&1)
  case "$rot" in
    1) says "$pfx: sg_vpd B1h: 7200 rpm (timing=hdd7200)" "$out" 'Nominal rotation rate: 7200 rpm' ;;
    0) says "$pfx: sg_vpd B1h: non-rotating (no rotating timing model)" "$out" 'Non-rotating medium' ;;
    *) says "$pfx: sg_vpd B1h: Block Device Characteristics" "$out" 'Block device characteristics VPD page' ;;
  esac
  out=$(sg_vpd -p lbpv "$dev" 2>&1)
  says "$pfx: sg_vpd B2h: UNMAP, WRITE SAME(16) with UNMAP, trimmed sectors read zero" "$out" \
    '(LBPU): 1' '(LBPWS): 1' '(LBPRZ): 1'
  out=$(sg_readcap -l "$dev" 2>&1)
  says "$pfx: sg_readcap -l: $L-byte blocks, exponent $(scsi_log2 $g), lowest aligned LBA $al, $(( $(scsi_bytes $SCSI_SIZE) / L )) blocks, lbpme=1 lbprz=1" \
    "$out" "Logical block length=$L bytes" \
    "Logical blocks per physical block exponent=$(scsi_log2 $g)\( \|\$\)" \
    "Lowest aligned LBA=$al\$" "Number of logical blocks=$(( $(scsi_bytes $SCSI_SIZE) / L ))\$" \
    'lbpme=1, lbprz=1'
  out=$(sg_modes -p 8 "$dev" 2>&1)
  # The Caching page's byte 2 holds WCE (bit 2); the header says DPOFUA.
  byte=$(printf '%s\n' "$out" | sed -n '/>> Caching/{n;p;}' | awk '{print $4}')
  if [ "$wc" = true ]; then want=4; else want=0; fi
  is "$pfx: sg_modes Caching page: WCE $((want / 4)) (write-cache=$wc)" \
    "$(( 0x${byte:-ff} & 4 ))" "$want"
  [ "$(( 0x${byte:-ff} & 4 ))" = "$want" ] || diag "$out"
  says "$pfx: sg_modes: DpoFua=1 in the mode parameter header" "$out" 'DpoFua=1'
  out=$(sg_modes -p 0xa "$dev" 2>&1)
  says "$pfx: sg_modes: a Control page" "$out" '>> Control'
}
# The kernel's rule (sd_validate_opt_xfer_size): io_opt is the Block Limits
# optimal transfer length when it is set, at least a page and a multiple of
# the physical sector; 0 otherwise.
scsi_opt_io () {
  local pfx=$1 dev=$2 L=$3 P=$4 otl want
  otl=$(printf '%s\n' "$5" | sed -n 's/.*Optimal transfer length: \([0-9]*\) blocks.*/\1/p')
  want=$(( ${otl:-0} * L ))
  [ "$want" -ge 4096 ] && [ $((want % P)) = 0 ] || want=0
  is "$pfx: optimal_io_size $want (optimal transfer length ${otl:-?} blocks)" \
    "$(cat /sys/block/${dev#/dev/}/queue/optimal_io_size)" "$want"
}

# scsi_ext4 PFX DEV: mkfs.ext4 and fsck on the first partition.
scsi_ext4 () {
  local pfx=$1 part=${2}1 out rc
  echo ',,L' | sfdisk -q "$2" >/dev/null 2>&1 && wait_for 5 test -b "$part"
  check "$pfx: mkfs.ext4 on the partition" mke2fs -q -F -t ext4 "$part"
  out=$(e2fsck -fn "$part" 2>&1); rc=$?
  is "$pfx: e2fsck -fn passes" "$rc" 0
  [ "$rc" = 0 ] || diag "$out"
}

# scsi_bad PFX DEV L CTL LBA FIRST: the physical sector holding LBA goes
# bad.  A READ(16) of the first 64 KiB sent with sg_raw (SG_IO) gets what
# the disk says: CHECK CONDITION, MEDIUM ERROR, unrecovered read error,
# and FIRST (the sector's first LBA) in the sense data's INFORMATION
# field; the kernel's O_DIRECT read across it fails, and the LBAs before
# it still read.  The kernel's log lines about it (scsi_io_completion's
# sense print and blk_print_req_error's "I/O error, dev sdX, sector N")
# are rate limited, 10 per 5 s for all disks together, and the power cut
# on 512e spends that budget: they are shown as comments, not asserted.
scsi_bad () {
  local pfx=$1 dev=$2 L=$3 ctl=$4 lba=$5 first=$6 b=${2#/dev/} blocks out info
  blocks=$(( 65536 / L ))   # not n: that is the TAP counter
  dmesg -c >/dev/null
  sect4k-ctl "$ctl" bad add "$lba" >/dev/null
  # READ(16): opcode 88h, LBA 0 (8 bytes), transfer length (4 bytes).
  out=$(sg_raw -r 64k -o /dev/null "$dev" 88 00 00 00 00 00 00 00 00 00 \
    $(printf '%02x %02x %02x %02x' $((blocks >> 24 & 255)) $((blocks >> 16 & 255)) $((blocks >> 8 & 255)) $((blocks & 255))) 00 00 2>&1)
  says "$pfx: bad sector at LBA $lba: READ(16) of LBAs 0-$((blocks - 1)) (sg_raw) gets CHECK CONDITION, MEDIUM ERROR, unrecovered read error" \
    "$out" 'Check Condition' 'Sense key: Medium Error' 'Unrecovered read error'
  # "Info fld=0xf [15]"; sg3-utils adds "Valid=0," when the VALID bit is clear.
  info=$(printf '%s\n' "$out" | grep -v 'Valid=0' | sed -n 's/.*Info fld=0x[0-9a-fA-F]* \[\([0-9]*\)\].*/\1/p' | head -n 1)
  is "$pfx: ... the sense data's INFORMATION field (VALID) names LBA $first, the bad physical sector's first" \
    "$info" "$first" || diag "$out"
  check "$pfx: ... an O_DIRECT read of LBAs 0-$((blocks - 1)) through the kernel fails" \
    sh -c "! /opt/bin/dd if=$dev of=/dev/null bs=64k count=1 iflag=direct status=none 2>/dev/null"
  out=$(dmesg | grep -e "\[$b\]" -e "dev $b," -e 'callbacks suppressed' | tail -n 6)
  diag "$pfx: the kernel log (rate limited, not asserted):" "${out:-  nothing: the rate limit held it back}"
  check "$pfx: ... LBAs 0-$((first - 1)) before it read" \
    dd if="$dev" of=/dev/null bs="$L" count="$first" iflag=direct status=none
  sect4k-ctl "$ctl" bad remove "$lba" >/dev/null
  check "$pfx: ... and all of them once it is repaired" \
    dd if="$dev" of=/dev/null bs=64k count=1 iflag=direct status=none
}

# write_rmw CTL: the write requests' RMW'd sectors so far.
write_rmw () {
  sect4k-ctl "$1" stats | grep '"write":' | sed -n 's/.*"rmw_sectors": \([0-9]*\).*/\1/p'
}
# scsi_stats PFX DEV CTL: the kernel's 512-byte O_DIRECT writes on 512e are
# each one RMW'd physical sector in the statistics; a 4 KiB one is none.
scsi_stats () {
  local pfx=$1 dev=$2 ctl=$3 before after
  before=$(write_rmw "$ctl")
  dd if=/dev/urandom of="$dev" bs=512 count=1 seek=17 oflag=direct conv=notrunc status=none
  dd if=/dev/urandom of="$dev" bs=512 count=1 seek=42 oflag=direct conv=notrunc status=none
  dd if=/dev/urandom of="$dev" bs=4096 count=1 seek=9 oflag=direct conv=notrunc status=none
  after=$(write_rmw "$ctl")
  is "$pfx: statistics: two 512-byte writes RMW two physical sectors, a 4 KiB one none" \
    "$(( ${after:-0} - ${before:-0} ))" 2
}

# scsi_both PFX DEV SOCK L: the SCSI disk and the NBD listener of the same
# export agree byte for byte, both ways (O_DIRECT on both sides).
scsi_both () {
  local pfx=$1 dev=$2 L=$4 nbd
  load_nbd
  nbd=$(sect4k-attach "nbd+unix:///?socket=$3" 2>/dev/null | head -n 1)
  case "$nbd" in
    /dev/nbd*) ;;
    *) nok "$pfx: sect4k-attach gave the export's NBD listener a /dev/nbdN"; unload_nbd; return ;;
  esac
  head -c 196608 /dev/urandom > /tmp/both.a
  head -c 196608 /dev/urandom > /tmp/both.b
  # 192 KiB starting one logical sector past 1 MiB: both ends cut physical sectors.
  dd if=/tmp/both.a of="$dev" bs="$L" seek=$(( 1048576 / L + 1 )) oflag=direct conv=notrunc status=none
  dd if="$nbd" of=/tmp/both.back bs="$L" skip=$(( 1048576 / L + 1 )) count=$(( 196608 / L )) iflag=direct status=none
  check "$pfx: written through $dev, read through $nbd: the same bytes" cmp -s /tmp/both.a /tmp/both.back
  dd if=/tmp/both.b of="$nbd" bs="$L" seek=$(( 2097152 / L + 3 )) oflag=direct conv=notrunc status=none
  dd if="$dev" of=/tmp/both.back bs="$L" skip=$(( 2097152 / L + 3 )) count=$(( 196608 / L )) iflag=direct status=none
  check "$pfx: written through $nbd, read through $dev: the same bytes" cmp -s /tmp/both.b /tmp/both.back
  sect4k-attach --detach "$nbd" >/dev/null 2>&1
  unload_nbd
  rm -f /tmp/both.*
}

# scsi_cut PFX DEV CTL: ext4 with write-cache=true and torn=none, fsync'd
# and unflushed files; the host "dies" (the disk offline: nothing more
# reaches it), the power is cut, the host comes back: the disk reports the
# power-on, the journal replays, every fsync'd file is intact, fsck clean.
scsi_cut () {
  local pfx=$1 dev=$2 ctl=$3 state i out rc
  state=/sys/block/${dev#/dev/}/device/state
  mkdir -p /mnt
  if ! mke2fs -q -F -t ext4 "$dev" || ! mount -t ext4 "$dev" /mnt; then
    nok "$pfx: mkfs.ext4 and mount"; return
  fi
  : > /tmp/sums
  i=0
  while [ $i -lt 8 ]; do
    head -c $(( (i % 5 + 1) * 3000 )) /dev/urandom > /tmp/data
    dd if=/tmp/data of=/mnt/synced$i conv=fsync status=none
    (cd /mnt && md5sum synced$i) >> /tmp/sums
    dd if=/dev/urandom of=/mnt/unsynced$i bs=4096 count=2 oflag=direct status=none
    i=$((i + 1))
  done
  echo offline > "$state"
  out=$(sect4k-ctl "$ctl" power-cut)
  check "$pfx: the control socket cut the power" test $? = 0
  diag "$pfx: $(printf '%s\n' "$out" | grep outcomes)"
  umount /mnt 2>/dev/null || umount -l /mnt
  sync; blockdev --flushbufs "$dev" 2>/dev/null
  echo 3 > /proc/sys/vm/drop_caches
  dmesg -c >/dev/null
  # Back to running, the kernel rescans the disk at once (scsi_sysfs.c
  # store_state_field): its own first command takes the UNIT ATTENTION, so
  # no sg_raw of ours can see it; the kernel logs ASC 29h each time with
  # scsi_report_sense's plain sdev_printk, which is not rate limited.
  echo running > "$state"
  check "$pfx: ext4 mounts after the cut (journal replayed)" mount -t ext4 "$dev" /mnt
  says "$pfx: the disk's first answer after the cut was UNIT ATTENTION, power on" "$(dmesg)" \
    'Power-on or device reset occurred'
  check "$pfx: every fsync'd file is intact" sh -c 'cd /mnt && md5sum -c -s /tmp/sums'
  umount /mnt
  out=$(e2fsck -fn "$dev" 2>&1); rc=$?
  is "$pfx: e2fsck -fn is clean" "$rc" 0
  [ "$rc" = 0 ] || diag "$out"
}

# The kernel's scsi_debug with 512e-xp's geometry passes the sysfs and
# partition checks the sect4k disks face: the expectations are the
# kernel's, on this kernel.
scsi_reference () {
  local pfx="scsi_debug 512e-xp (reference)" dev
  if ! insmod /modules/scsi_debug.ko dev_size_mb=16 sector_size=512 physblk_exp=3 \
       lowest_aligned=7 unmap_granularity=8 unmap_alignment=7 lbpu=1 2>/tmp/insmod.err; then
    nok "$pfx: insmod scsi_debug"; diag "$(cat /tmp/insmod.err)"; return
  fi
  wait_for 20 sh -c 'grep -l scsi_debug /sys/block/sd*/device/model >/dev/null 2>&1'
  dev=$(grep -l scsi_debug /sys/block/sd*/device/model 2>/dev/null | head -n 1 | cut -d/ -f4)
  if [ -z "$dev" ]; then nok "$pfx: scsi_debug made a disk"; rmmod scsi_debug; return; fi
  scsi_sysfs "$pfx" "/dev/$dev" 512 4096 3584 - true
  scsi_partitions "$pfx" "/dev/$dev" 512 4096 3584
  rmmod scsi_debug
}

suite_scsi () {
  local t0=$(date +%s) name L P A rot wc max keys pfx
  scsi_reference
  tidy "scsi_debug 512e-xp (reference)"
  if ! sect4k-server --help 2>&1 | grep -q -- '--scsi'; then
    ok "scsi: sect4k-server --scsi # SKIP this sect4k-server has no --scsi"
    diag "scsi: $(( $(date +%s) - t0 )) s"
    return
  fi
  while read -r name L P A rot wc max keys <&3; do
    # shellcheck disable=SC2086
    scsi_case "$name" "$L" "$P" "$A" "$rot" "$wc" "$max" $keys
    tidy "scsi $name"
  done 3< /tmp/scsi-cases
  scsi_lifecycle
  tidy "scsi lifecycle"
  scsi_attach_tests
  diag "scsi: the suite took $(( $(date +%s) - t0 )) s"
}

# scsi_case NAME L P A ROT WC MAXREQ KEYS...: one sect4k-server --scsi
# disk; returns at its first hard failure (the suite tidies up after it).
scsi_case () {
  local name=$1 L=$2 P=$3 A=$4 rot=$5 wc=$6 max=$7 pfx="scsi $1" dev
  shift 7
  if ! scsi_start "$name" "$@"; then
    nok "$pfx: sect4k-server --scsi printed a /dev/sdX"; return 1
  fi
  ok "$pfx: sect4k-server --scsi printed $scsi_dev"
  dev=$scsi_dev
  scsi_sysfs "$pfx" "$dev" "$L" "$P" "$A" "$rot" "$wc"
  scsi_pages "$pfx" "$dev" "$L" "$P" "$A" "$rot" "$wc" "$(scsi_bytes "$max")"
  direct_io_tests "$pfx" "$dev" "$L" "$P" ''
  scsi_partitions "$pfx" "$dev" "$L" "$P" "$A"
  case "$name" in
    512e) scsi_stats "$pfx" "$dev" "/tmp/$name.ctl" ;;
    512e-xp) scsi_bad "$pfx" "$dev" "$L" "/tmp/$name.ctl" 20 15
             scsi_both "$pfx" "$dev" "/tmp/$name.sock" "$L" ;;
    4kn) scsi_bad "$pfx" "$dev" "$L" "/tmp/$name.ctl" 5 5 ;;
  esac
  case "$name" in 512e-xp|4kn|l1024) scsi_ext4 "$pfx" "$dev" ;; esac
  [ "$name" = 512e ] && scsi_cut "$pfx ext4 power cut, torn=none" "$dev" "/tmp/$name.ctl"
  scsi_stop "$pfx"
}

# scsi_attach_case PFX URI L P A WHY [KEY=VALUE...]: sect4k-attach --scsi
# gives the remote export a local disk with the whole geometry, saying
# where the alignment offset came from; --detach stops its server.
scsi_attach_case () {
  local pfx=$1 uri=$2 L=$3 P=$4 A=$5 why=$6 out rc dev b
  shift 6
  out=$(sect4k-attach --scsi "$uri" "$@" 2>&1); rc=$?
  dev=$(printf '%s\n' "$out" | head -n 1)
  diag "$out"
  case "$rc:$dev" in
    0:/dev/sd*) ok "$pfx: sect4k-attach --scsi attached $dev" ;;
    *) nok "$pfx: sect4k-attach --scsi attached a disk"; tidy "$pfx" attach; return 1 ;;
  esac
  b=${dev#/dev/}
  is "$pfx: logical, physical, alignment_offset" \
    "$(cat /sys/block/$b/queue/logical_block_size) $(cat /sys/block/$b/queue/physical_block_size) $(cat /sys/block/$b/alignment_offset)" \
    "$L $P $A"
  says "$pfx: sect4k-attach says where the alignment offset came from" "$out" "alignment offset $A ($why"
  head -c 65536 /dev/urandom > /tmp/att.a
  check "$pfx: an O_DIRECT write to $dev and its flush succeed" \
    dd if=/tmp/att.a of="$dev" bs=65536 seek=3 oflag=direct conv=notrunc,fsync status=none
  attached=$dev
}
scsi_detach () {
  local pfx=$1 dev=$2 out rc
  out=$(sect4k-attach --detach "$dev" 2>&1); rc=$?
  is "$pfx: sect4k-attach --detach $dev" "$rc:$out" "0:$dev detached"
  check "$pfx: ... and $dev is gone" test ! -e "/sys/block/${dev#/dev/}"
}

scsi_attach_tests () {
  local uri='nbd+unix:///?socket=/tmp/up.sock' nbd
  start_server up $PLUGIN size=$SCSI_SIZE model=512e-xp
  if scsi_attach_case "attach --scsi 512e-xp" "$uri" 512 4096 3584 "from the sect4k export's description" write-cache=true; then
    # The data went to the remote export: the kernel's nbd driver reads it there.
    load_nbd
    nbd=$(sect4k-attach "$uri" 2>/dev/null | head -n 1)
    dd if="$nbd" of=/tmp/att.b bs=65536 skip=3 count=1 iflag=direct status=none 2>/dev/null
    check "attach --scsi 512e-xp: the remote export holds what was written to the disk" cmp -s /tmp/att.a /tmp/att.b
    sect4k-attach --detach "$nbd" >/dev/null 2>&1
    unload_nbd
    scsi_detach "attach --scsi 512e-xp" "$attached"
  fi
  tidy "attach --scsi 512e-xp" attach
  scsi_attach_case "attach --scsi 512e-xp alignment-offset=0" "$uri" 512 4096 0 "given by alignment-offset=" \
    alignment-offset=0 && scsi_detach "attach --scsi 512e-xp alignment-offset=0" "$attached"
  tidy "attach --scsi 512e-xp alignment-offset=0" attach
  stop_server
  # Not sect4k: nbdkit's memory plugin with block sizes from a filter.
  start_server other --filter=blocksize-policy memory $SCSI_SIZE \
    blocksize-minimum=4096 blocksize-preferred=4096
  scsi_attach_case "attach --scsi nbdkit memory (4096)" 'nbd+unix:///?socket=/tmp/other.sock' \
    4096 4096 0 "not a sect4k export" && scsi_detach "attach --scsi nbdkit memory" "$attached"
  tidy "attach --scsi nbdkit memory" attach
  stop_server
  rm -f /tmp/att.*
}

# ---- scsi_bench: fio IOPS, /dev/sdX against /dev/nbdN ----------------------
# One sect4k-server export (512e, memory), seen by the kernel twice: as a
# SCSI disk (TCMU + tcm_loop) and through the nbd driver (its --unix
# listener).  4 KiB random reads and writes, O_DIRECT, libaio at queue
# depth 16, each device in turn, twice.  TCG makes the absolute numbers
# meaningless: the ratio is the result.
BENCH_SECS=4
fio_iops () {  # DEV RW: IOPS (integer)
  fio --name=b --filename="$1" --direct=1 --ioengine=libaio --rw="$2" --bs=4k \
    --iodepth=${BENCH_QD:-16} --size=128M --runtime=$BENCH_SECS --time_based --norandommap \
    --randrepeat=0 --output-format=terse --terse-version=3 2>/tmp/fio.err |
    awk -F';' -v rw="$2" '{ print (rw == "randread") ? $8 : $49 }'
}
suite_scsi_bench () {
  local SCSI_SIZE=256M nbd sd rw rep a b sum_sd sum_nbd
  [ -x /opt/bin/fio ] || { nok "scsi bench: fio is in the guest"; return; }
  if ! sect4k-server --help 2>&1 | grep -q -- '--scsi'; then
    ok "scsi bench # SKIP this sect4k-server has no --scsi"; return
  fi
  if ! scsi_start bench model=512e; then nok "scsi bench: sect4k-server --scsi printed a /dev/sdX"; return; fi
  sd=$scsi_dev
  load_nbd
  nbd=$(sect4k-attach 'nbd+unix:///?socket=/tmp/bench.sock' 2>/dev/null | head -n 1)
  case "$nbd" in /dev/nbd*) ;; *) nok "scsi bench: the export's NBD listener attached"; scsi_stop "scsi bench"; unload_nbd; return ;; esac
  # Reads of never-written sectors are cheaper: write the range first.
  dd if=/dev/urandom of=/tmp/fill bs=1M count=8 status=none
  for i in 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15; do
    dd if=/tmp/fill of="$sd" bs=1M seek=$((i * 8)) oflag=direct conv=notrunc status=none
  done
  rm -f /tmp/fill
  diag "scsi bench: 512e, memory store, 4 KiB O_DIRECT libaio QD 16, $BENCH_SECS s per run, $sd (SCSI) and $nbd (nbd) on one export"
  for rw in randread randwrite; do
    sum_sd=0 sum_nbd=0
    for rep in 1 2; do
      a=$(fio_iops "$sd" $rw) b=$(fio_iops "$nbd" $rw)
      diag "scsi bench: $rw run $rep: $sd ${a:-?} IOPS, $nbd ${b:-?} IOPS"
      sum_sd=$((sum_sd + ${a:-0})) sum_nbd=$((sum_nbd + ${b:-0}))
    done
    if [ "$sum_sd" -gt 0 ] && [ "$sum_nbd" -gt 0 ]; then
      ok "scsi bench: fio $rw ran on both"
      diag "scsi bench: $rw: SCSI/nbd IOPS ratio $((sum_sd * 100 / sum_nbd / 100)).$(printf '%02d' $((sum_sd * 100 / sum_nbd % 100))) ($((sum_sd / 2)) against $((sum_nbd / 2)) IOPS)"
    else
      nok "scsi bench: fio $rw ran on both"; diag "$(cat /tmp/fio.err)"
    fi
  done
  sect4k-attach --detach "$nbd" >/dev/null 2>&1
  unload_nbd
  scsi_stop "scsi bench"
}

# scsi_lifecycle: two exports, two LUNs; a SIGKILL leaves the configfs
# entries, the next start removes them (and only them); a second server
# beside a running one is refused nothing and leaves the first alone.
scsi_lifecycle () {
  local pfx="scsi lifecycle" cfs=/sys/kernel/config/target out pid1 pid2
  sect4k-server size=16M exports=512e,4kn --scsi >/tmp/lc1.out 2>/tmp/lc1.log &
  pid1=$! case_pids=$!
  wait_for 60 sh -c "[ \$(grep -c '^/dev/sd' /tmp/lc1.out) -ge 2 ] || ! kill -0 $pid1 2>/dev/null"
  is "$pfx: two exports, two disks" "$(grep -c '^/dev/sd[a-z]* \(512e\|4kn\)' /tmp/lc1.out)" 2
  [ "$(grep -c . /tmp/lc1.out)" = 2 ] || diag "$(cat /tmp/lc1.out /tmp/lc1.log)"
  kill -9 "$pid1"; wait "$pid1" 2>/dev/null
  check "$pfx: SIGKILL leaves the backstores in configfs" test -d "$cfs/core/user_$pid1/sect4k-$pid1-0"
  sect4k-server size=16M model=512e --scsi >/tmp/lc2.out 2>/tmp/lc2.log &
  pid2=$! case_pids=$!
  wait_for 60 sh -c "grep -q '^/dev/sd' /tmp/lc2.out || ! kill -0 $pid2 2>/dev/null"
  says "$pfx: the next start says it removed them" "$(cat /tmp/lc2.log)" "left by sect4k-server $pid1"
  check "$pfx: ... and they are gone" test ! -e "$cfs/core/user_$pid1"
  out=$(sed -n 's|^\(/dev/sd[a-z]*\) - *$|\1|p' /tmp/lc2.out)
  check "$pfx: the new server's disk ($out) answers" dd if="$out" of=/dev/null bs=4096 count=1 iflag=direct status=none
  stop_pid "$pid2" 60; case_pids=
  is "$pfx: after SIGTERM nothing of ours is left in configfs" \
    "$(ls -d $cfs/core/user_* $cfs/loopback/naa.353344b* 2>/dev/null | wc -l)" 0
}
