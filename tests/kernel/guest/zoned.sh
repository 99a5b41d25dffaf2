# SPDX-License-Identifier: BSD-3-Clause
# The zoned suite of the kernel tests (issue 33), sourced by tests.sh after
# scsi.sh (its helpers: ok/nok/is/check/diag, wait_for, stop_pid, tidy).
# The kernel's scsi_debug (zbc=host-managed) and sect4k-server --scsi
# with zoned=host-managed, the same zone size, conventional zones, open
# limit and sector sizes, on 512e and 4kn, compared field by field: the
# queue's zone limits in sysfs (sd_zbc.c reads them from VPD B6h, READ
# CAPACITY(16) and REPORT ZONES), then `blkzone report` line by line after
# the same sequence of writes, opens, closes, finishes and resets.
# Zoned drives are served by --scsi alone: NBD has no zone commands.

ZONED_MB=64                     # the device
ZONE_MB=4                       # zones: 16, one conventional
ZONED_KEYS="zoned=host-managed zone-size=${ZONE_MB}M zone-conventional=1 zone-max-open=2"

# zoned_sysfs DEV: the zone fields of the queue, one line.
# zone_append_max_bytes is compared apart (zoned_append): on Linux 6.1
# sd_zbc bounds it by the transport (max_segments pages, max_hw_sectors),
# and tcm_loop's 256 segments are not scsi_debug's.
zoned_sysfs () {
  local q=/sys/block/${1#/dev/}/queue f out=
  for f in zoned chunk_sectors nr_zones max_open_zones max_active_zones \
           zone_write_granularity logical_block_size physical_block_size; do
    out="$out $f=$(cat "$q/$f" 2>/dev/null || echo -)"
  done
  echo "${out# }"
}

# zoned_ops DEV: the same sequence on any such disk (zone n starts at
# sector n * 8192), then its zone report; writes are whole physical
# blocks with O_DIRECT at each write pointer.  Prints the report and one
# line per step that failed.
zoned_ops () {
  local dev=$1 z=$((ZONE_MB * 2048)) bs=4096
  zw () {  # zw ZONE OFFSET_BLOCKS COUNT: 4 KiB blocks at the zone's start + offset
    dd if=/dev/urandom of="$dev" bs=$bs seek=$(( $1 * z / 8 + $2 )) count="$3" \
       oflag=direct conv=notrunc 2>/dev/null || echo "write zone $1 +$2 x$3 failed"
  }
  zw 0 3 2                                # conventional: anywhere
  zw 1 0 2; zw 1 2 1                      # zone 1: 3 blocks, implicitly open
  zw 2 0 1                                # zone 2: implicitly open
  blkzone open -o $((3 * z)) -c 1 "$dev" || echo "open zone 3 failed"
  blkzone close -o $((1 * z)) -c 1 "$dev" || echo "close zone 1 failed"
  zw 4 0 4
  blkzone finish -o $((4 * z)) -c 1 "$dev" || echo "finish zone 4 failed"
  zw 5 0 8
  blkzone reset -o $((5 * z)) -c 1 "$dev" || echo "reset zone 5 failed"
  zw 6 0 1
  blkzone finish -o $((7 * z)) -c 1 "$dev" || echo "finish zone 7 (empty) failed"
  # Off the write pointer: refused (the kernel or the drive), the
  # pointer unchanged.
  if dd if=/dev/zero of="$dev" bs=$bs seek=$(( z / 8 )) count=1 oflag=direct \
        conv=notrunc 2>/dev/null; then
    echo "a write below zone 1's write pointer was accepted"
  fi
  blkzone report "$dev" 2>&1
}

# zoned_sense DEV L: each zone error sent from userspace (sg_raw, past
# the kernel's zone write plugging), one line each: the command and the
# status and sense sg_raw decodes.  Run after zoned_ops: zone 3 is
# explicitly open, zone 6 implicitly, zone 4 full, zone 5 empty.
zoned_sense () {
  local dev=$1 L=$2 zl pb
  zl=$(( ZONE_MB * 1048576 / L )) pb=$(( 4096 / L ))
  h8 () { printf '%016x' "$1" | sed 's/../& /g'; }
  h4 () { printf '%08x' "$1" | sed 's/../& /g'; }
  dd if=/dev/zero of=/tmp/zs.in bs=8192 count=1 2>/dev/null
  sr () {  # sr NAME sg_raw-ARGS...: one line of what sg_raw says
    local name=$1; shift
    echo "$name: $(sg_raw "$@" 2>&1 | grep -e 'SCSI Status' -e 'Sense key' -e 'Additional sense' |
      sed 's/^ *//' | tr '\n' ';')"
  }
  # shellcheck disable=SC2046
  {
  sr "write below zone 1's pointer" -s 4096 -i /tmp/zs.in "$dev" 8a 00 $(h8 $zl) $(h4 $pb) 00 00
  sr "write to full zone 4" -s 4096 -i /tmp/zs.in "$dev" 8a 00 $(h8 $((4 * zl))) $(h4 $pb) 00 00
  sr "write across zones 5 and 6" -s 8192 -i /tmp/zs.in "$dev" 8a 00 $(h8 $((6 * zl - pb))) $(h4 $((2 * pb))) 00 00
  sr "read across the conventional boundary" -r 8192 -o /dev/null "$dev" 88 00 $(h8 $((zl - pb))) $(h4 $((2 * pb))) 00 00
  sr "write at zone 8's pointer (an implicit close)" -s 4096 -i /tmp/zs.in "$dev" 8a 00 $(h8 $((8 * zl))) $(h4 $pb) 00 00
  sr "OPEN ZONE 9" "$dev" 94 03 $(h8 $((9 * zl))) 00 00 00 00 00 00
  sr "OPEN ZONE 10 (limit)" "$dev" 94 03 $(h8 $((10 * zl))) 00 00 00 00 00 00
  sr "RESET WRITE POINTER off a zone start" "$dev" 94 04 $(h8 $((zl + 1))) 00 00 00 00 00 00
  sr "RESET WRITE POINTER of the conventional zone" "$dev" 94 04 $(h8 0) 00 00 00 00 00 00
  sr "CLOSE ZONE past the end" "$dev" 94 01 $(h8 $((16 * zl))) 00 00 00 00 00 00
  sr "REPORT ZONES, reserved option 09h" -r 4096 -o /dev/null "$dev" 95 00 $(h8 0) $(h4 4096) 09 00
  sr "FINISH ALL" "$dev" 94 02 $(h8 0) 00 00 00 00 01 00
  }
  blkzone report "$dev" 2>&1
}

# zoned_reference NAME SCSI_DEBUG_ARGS...: scsi_debug's sysfs and report
# (zoned_ref_sysfs, zoned_ref_report).
zoned_reference () {
  local pfx="zoned: scsi_debug zbc=host-managed $1 (reference)" dev
  shift
  zoned_ref_sysfs= zoned_ref_report= zoned_ref_append= zoned_ref_sense=
  if ! insmod /modules/scsi_debug.ko zbc=host-managed dev_size_mb=$ZONED_MB \
       zone_size_mb=$ZONE_MB zone_nr_conv=1 zone_max_open=2 "$@" 2>/tmp/insmod.err; then
    nok "$pfx: insmod scsi_debug"; diag "$(cat /tmp/insmod.err)"; return
  fi
  wait_for 20 sh -c 'grep -l scsi_debug /sys/block/sd*/device/model >/dev/null 2>&1'
  dev=$(grep -l scsi_debug /sys/block/sd*/device/model 2>/dev/null | head -n 1 | cut -d/ -f4)
  if [ -z "$dev" ]; then nok "$pfx: scsi_debug made a disk"; rmmod scsi_debug; return; fi
  zoned_ref_sysfs=$(zoned_sysfs "/dev/$dev")
  zoned_ref_append=$(cat "/sys/block/$dev/queue/zone_append_max_bytes")
  case "$zoned_ref_sysfs" in
    "zoned=host-managed "*) ok "$pfx: a host-managed disk ($zoned_ref_sysfs)" ;;
    *) nok "$pfx: a host-managed disk"; diag "  $zoned_ref_sysfs" ;;
  esac
  zoned_ref_report=$(zoned_ops "/dev/$dev")
  zoned_ref_sense=$(zoned_sense "/dev/$dev" "$(cat /sys/block/$dev/queue/logical_block_size)")
  rmmod scsi_debug
}

# zoned_append PFX DEV: zone_append_max_bytes equals scsi_debug's (6.12:
# the zone size), or, where the kernel bounds it by the transport (6.1's
# sd_zbc_revalidate_zones: the zone, max_segments pages, max_hw_sectors),
# that bound on this disk's queue.
zoned_append () {
  local q=/sys/block/${2#/dev/}/queue got bound
  got=$(cat $q/zone_append_max_bytes)
  bound=$((ZONE_MB << 20))
  [ $(( $(cat $q/max_segments) * 4096 )) -lt $bound ] && bound=$(( $(cat $q/max_segments) * 4096 ))
  [ $(( $(cat $q/max_hw_sectors_kb) * 1024 )) -lt $bound ] && bound=$(( $(cat $q/max_hw_sectors_kb) * 1024 ))
  if [ "$got" = "$zoned_ref_append" ]; then
    ok "$1: zone_append_max_bytes $got equals scsi_debug's"
  else
    is "$1: zone_append_max_bytes: the transport's bound (scsi_debug's $zoned_ref_append)" "$got" "$bound"
  fi
}

# zoned_case NAME KEYS SCSI_DEBUG_ARGS...: one geometry.
zoned_case () {
  local name=$1 keys=$2 pfx="zoned $1" out
  shift 2
  zoned_reference "$name" "$@"
  rm -f "/tmp/zoned-$name.out"
  # shellcheck disable=SC2086
  sect4k-server size=${ZONED_MB}M $keys $ZONED_KEYS --scsi \
    >"/tmp/zoned-$name.out" 2>"/tmp/zoned-$name.log" &
  scsi_pid=$!
  wait_for 60 sh -c "grep -q '^/dev/sd' /tmp/zoned-$name.out || ! kill -0 $scsi_pid 2>/dev/null"
  scsi_dev=$(sed -n 's|^\(/dev/sd[a-z]*\).*|\1|p' "/tmp/zoned-$name.out" | head -n 1)
  if [ -z "$scsi_dev" ] || [ ! -b "$scsi_dev" ]; then
    nok "$pfx: sect4k-server --scsi $keys $ZONED_KEYS printed a /dev/sdX"
    diag "$(cat "/tmp/zoned-$name.out")" "$(tail -n 5 "/tmp/zoned-$name.log")"
    tidy "$pfx"; return
  fi
  is "$pfx: sect4k disk's queue zone fields equal scsi_debug's" \
    "$(zoned_sysfs "$scsi_dev")" "${zoned_ref_sysfs:-(no reference)}"
  zoned_append "$pfx" "$scsi_dev"
  out=$(zoned_ops "$scsi_dev")
  if [ -n "$zoned_ref_report" ] && [ "$out" = "$zoned_ref_report" ]; then
    ok "$pfx: blkzone report after the same writes, opens, closes, finishes and resets: equal, line by line"
  else
    nok "$pfx: blkzone report equals scsi_debug's line by line"
    printf '%s\n' "$out" > /tmp/zoned-s4k.txt
    printf '%s\n' "$zoned_ref_report" > /tmp/zoned-ref.txt
    diag "$(diff /tmp/zoned-ref.txt /tmp/zoned-s4k.txt | head -n 40)"
  fi
  says "$pfx: ... which shows the sequence's zones (conventional, open, closed, full, empty)" "$out" \
    'zcond: 0(nw)' 'zcond: 2(oi)' 'zcond: 3(oe)' 'zcond: 4(cl)' 'zcond:14(fu)' 'zcond: 1(em)'
  if printf '%s\n' "$out" | grep -q -e 'failed$' -e 'accepted$'; then
    nok "$pfx: every step of the sequence did what it should"
    diag "$(printf '%s\n' "$out" | grep -e 'failed$' -e 'accepted$')"
  else
    ok "$pfx: every step of the sequence did what it should (a write below the pointer refused)"
  fi
  diag "$(printf '%s\n' "$out" | head -n 9)"
  out=$(zoned_sense "$scsi_dev" "$(cat /sys/block/${scsi_dev#/dev/}/queue/logical_block_size)")
  if [ -n "$zoned_ref_sense" ] && [ "$out" = "$zoned_ref_sense" ]; then
    ok "$pfx: each zone error from sg_raw: the same status and sense as scsi_debug, then the same zones"
  else
    nok "$pfx: each zone error from sg_raw: the same status and sense as scsi_debug"
    printf '%s\n' "$out" > /tmp/zoned-s4k.txt
    printf '%s\n' "$zoned_ref_sense" > /tmp/zoned-ref.txt
    diag "$(diff /tmp/zoned-ref.txt /tmp/zoned-s4k.txt | head -n 40)"
  fi
  diag "$(printf '%s\n' "$out" | head -n 12)"
  stop_pid "$scsi_pid" 60
  is "$pfx: sect4k-server exits 0 on SIGTERM" "$stop_rc" 0
  scsi_pid= scsi_dev=
}

# zoned_restart: file= keeps the zones across a restart (a SIGTERM):
# the same report, but open zones closed (empty where nothing was
# written), as a power cycle leaves a drive; the write pointers hold.
zoned_restart () {
  local pfx="zoned file= restart" img=/tmp/zoned-file.img before after want
  rm -f "$img" "$img.sect4k-zones"
  zoned_start () {
    rm -f /tmp/zoned-file.out
    # shellcheck disable=SC2086
    sect4k-server size=${ZONED_MB}M model=512e $ZONED_KEYS file="$img" --scsi \
      >/tmp/zoned-file.out 2>/tmp/zoned-file.log &
    scsi_pid=$!
    wait_for 60 sh -c "grep -q '^/dev/sd' /tmp/zoned-file.out || ! kill -0 $scsi_pid 2>/dev/null"
    scsi_dev=$(sed -n 's|^\(/dev/sd[a-z]*\).*|\1|p' /tmp/zoned-file.out | head -n 1)
    [ -n "$scsi_dev" ] && [ -b "$scsi_dev" ]
  }
  if ! zoned_start; then
    nok "$pfx: sect4k-server --scsi file=$img printed a /dev/sdX"
    diag "$(cat /tmp/zoned-file.out)" "$(tail -n 5 /tmp/zoned-file.log)"
    tidy "$pfx"; return
  fi
  before=$(zoned_ops "$scsi_dev")
  stop_pid "$scsi_pid" 60
  is "$pfx: sect4k-server exits 0 on SIGTERM" "$stop_rc" 0
  if ! zoned_start; then
    nok "$pfx: restarted on the same file"
    diag "$(cat /tmp/zoned-file.out)" "$(tail -n 5 /tmp/zoned-file.log)"
    tidy "$pfx"; return
  fi
  after=$(blkzone report "$scsi_dev" 2>&1)
  want=$(printf '%s\n' "$before" | grep '^ *start:' | awk '
    /zcond: [23]\(o[ie]\)/ {
      if ($0 ~ /wptr 0x0+ /) sub(/zcond: [23]\(o[ie]\)/, "zcond: 1(em)")
      else sub(/zcond: [23]\(o[ie]\)/, "zcond: 4(cl)")
    }
    { print }')
  if [ "$after" = "$want" ]; then
    ok "$pfx: blkzone report after a restart: the same zones, open ones closed"
  else
    nok "$pfx: blkzone report after a restart: the same zones, open ones closed"
    printf '%s\n' "$want" > /tmp/zoned-want.txt
    printf '%s\n' "$after" > /tmp/zoned-after.txt
    diag "$(diff /tmp/zoned-want.txt /tmp/zoned-after.txt | head -n 40)"
  fi
  says "$pfx: ... closed and full zones among them" "$after" 'zcond: 4(cl)' 'zcond:14(fu)'
  diag "$(printf '%s\n' "$before" | grep '^ *start:' | head -n 9)" "---- after the restart:" \
       "$(printf '%s\n' "$after" | head -n 9)"
  # Zone 1 holds 3 blocks: a write at block 3 is at its pointer, one at
  # block 0 is not.
  local z=$((ZONE_MB * 2048))
  if dd if=/dev/urandom of="$scsi_dev" bs=4096 seek=$(( z / 8 + 3 )) count=1 \
       oflag=direct conv=notrunc 2>/dev/null &&
     ! dd if=/dev/zero of="$scsi_dev" bs=4096 seek=$(( z / 8 )) count=1 \
       oflag=direct conv=notrunc 2>/dev/null; then
    ok "$pfx: zone 1's write pointer held: a write there passes, one below it fails"
  else
    nok "$pfx: zone 1's write pointer held"
    diag "$(blkzone report -o $z -c 1 "$scsi_dev" 2>&1)"
  fi
  stop_pid "$scsi_pid" 60
  is "$pfx: sect4k-server exits 0 on SIGTERM again" "$stop_rc" 0
  scsi_pid= scsi_dev=
  rm -f "$img" "$img.sect4k-zones"
}

suite_zoned () {
  local t0=$(date +%s)
  if ! sect4k-server --help 2>&1 | grep -q -- 'zoned='; then
    ok "zoned # SKIP this sect4k-server has no zoned="; return
  fi
  if ! command -v blkzone >/dev/null; then
    ok "zoned # SKIP no blkzone in the guest"; return
  fi
  # NBD has no zone commands: with --unix too, a zoned export is refused;
  # SCSI has no field for NVMe's active limit.
  out=$(timeout 30 sect4k-server size=${ZONED_MB}M $ZONED_KEYS --scsi --unix /tmp/zoned.sock 2>&1)
  refused "zoned: --scsi --unix refused (NBD has no zone commands)" $? "$out" \
    'zoned=host-managed: NBD has no zone commands .*serve a zoned drive with --scsi alone'
  out=$(timeout 30 sect4k-server size=${ZONED_MB}M $ZONED_KEYS zone-max-active=4 --scsi 2>&1)
  refused "zoned: zone-max-active refused under --scsi" $? "$out" \
    'zone-max-active=4: SCSI has no field for it'
  tidy "zoned refusals"
  zoned_case 512e model=512e sector_size=512 physblk_exp=3
  tidy "zoned 512e"
  zoned_case 4kn model=4kn sector_size=4096
  tidy "zoned 4kn"
  zoned_restart
  diag "zoned suite: $(( $(date +%s) - t0 )) s"
}
