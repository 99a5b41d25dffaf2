# SPDX-License-Identifier: BSD-3-Clause
# The zoned suite of the kernel tests (issue 33), sourced by tests.sh after
# scsi.sh (its helpers: ok/nok/is/check/diag, wait_for, stop_pid, tidy).
# The kernel's scsi_debug (zbc=host-managed) and sect4k-server --scsi
# with zoned=host-managed, the same zone size, conventional zones, open
# limit and sector sizes, on 512e and 4kn, compared field by field: the
# queue's zone limits in sysfs (sd_zbc.c reads them from VPD B6h, READ
# CAPACITY(16) and REPORT ZONES), then `blkzone report` line by line after
# the same sequence of writes, opens, closes, finishes and resets, and
# s4k-zbdconf's longer one through libzbd (guest/zbdconf.c), also on
# host-aware drives where libzbd opens them (Linux 6.1), and what
# sg3-utils print of the zone pages, commands and refusals (zoned_sgu:
# where scsi_debug is wrong, zoned_sgu_allow says why and sect4k's line is
# checked exactly).
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
  # The error the writer gets is compared too (6.12: EIO, the kernel's
  # zone write plugging refuses it; 6.1: EREMOTEIO, the drive's ILLEGAL
  # REQUEST).
  if dd if=/dev/zero of="$dev" bs=$bs seek=$(( z / 8 )) count=1 oflag=direct \
        conv=notrunc 2>/tmp/zw.err; then
    echo "a write below zone 1's write pointer was accepted"
  else
    echo "a write below zone 1's write pointer: $(sed -n "s/^.*error writing '[^']*': //p" /tmp/zw.err)"
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

# zoned_zbd DEV: s4k-zbdconf's sequence through libzbd (guest/zbdconf.c,
# on the tools disk), one line per step; empty if there is no such program
# (zoned_zbd_why says why).  It starts and ends with a reset of all zones.
zoned_zbd () {
  zoned_tools || { zoned_zbd_why=$zoned_tools_why; return; }
  if [ ! -x /tools/bin/s4k-zbdconf ]; then
    zoned_zbd_why="no s4k-zbdconf on the tools disk: $(cat /tools/zbdconf.why 2>/dev/null)"; return
  fi
  timeout 120 /tools/bin/s4k-zbdconf "$1" 2>&1 || echo "s4k-zbdconf exit $?"
}

# zoned_zbd_compare PFX OUT REF [hm]: OUT equals REF line by line; hm:
# and OUT shows the host-managed rules (so two equally broken runs fail).
zoned_zbd_compare () {
  if [ -z "$3" ] || [ -z "$2" ]; then
    ok "$1: libzbd conformance sequence # SKIP ${zoned_zbd_why:-no output}"; return
  fi
  printf '%s\n' "$3" > /tmp/zbd-ref.txt; printf '%s\n' "$2" > /tmp/zbd-s4k.txt
  if diff /tmp/zbd-ref.txt /tmp/zbd-s4k.txt > /tmp/zbd.diff; then
    ok "$1: libzbd conformance sequence (s4k-zbdconf, $(printf '%s\n' "$2" | wc -l) steps): equal to scsi_debug's, line by line"
  else
    nok "$1: libzbd conformance sequence (s4k-zbdconf): equal to scsi_debug's, line by line"
    diag "$(head -n 40 /tmp/zbd.diff)"
  fi
  [ "${4:-}" = hm ] && says "$1: ... where writes below and above the pointer and to a full zone fail, an explicit open past the limit fails, zeroes are read above the pointer, and the conventional zone is written anywhere and refuses zone operations" "$2" \
    '^below the pointer: write zone 1 +0 x1: E' '^above the pointer: write zone 1 +8 x1: E' \
    '^to full zone 2: write zone 2 +0 x1: E' '^explicit open past the limit: open: E' \
    '^read above the pointer: ok, 00 ' '^conventional: write at +2 x2 (behind it): ok' \
    '^conventional: reset: E' '^after reset all: report EMPTY: 15 zones'
  diag "$(printf '%s\n' "$2" | grep -v -e '^empty: ' -e '^after reset all: ' -e '^mixed: zone ')"
}

# zoned_reference NAME SCSI_DEBUG_ARGS...: scsi_debug's sysfs and report
# (zoned_ref_sysfs, zoned_ref_report).
zoned_reference () {
  local pfx="zoned: scsi_debug zbc=host-managed $1 (reference)" dev
  shift
  zoned_ref_sysfs= zoned_ref_report= zoned_ref_append= zoned_ref_sense= zoned_ref_zbd= zoned_ref_sgu= zoned_ref_sgu_count=
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
  zoned_ref_sgu=$(zoned_sgu "/dev/$dev" "$(cat /sys/block/$dev/queue/logical_block_size)")
  zoned_ref_sgu_count=$(zoned_sgu_count "/dev/$dev" "$(cat /sys/block/$dev/queue/logical_block_size)")
  zoned_ref_zbd=$(zoned_zbd "/dev/$dev")
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
  local name=$1 keys=$2 pfx="zoned $1" out zbd_t0 L
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
  L=$(cat "/sys/block/${scsi_dev#/dev/}/queue/logical_block_size")
  zoned_sgu_compare "$pfx" "$(zoned_sgu "$scsi_dev" "$L")" "$zoned_ref_sgu" \
    "$(zoned_sgu_allow "$(printf '0x%x' $(( ZONED_MB * 1048576 / L - 1 )))")"
  zoned_sgu_count_check "$pfx" "$scsi_dev" "$L" hm "$zoned_ref_sgu_count"
  zbd_t0=$(date +%s) out=$(zoned_zbd "$scsi_dev")
  zoned_zbd_compare "$pfx" "$out" "$zoned_ref_zbd" hm
  diag "$pfx: s4k-zbdconf on the sect4k disk: $(( $(date +%s) - zbd_t0 )) s"
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

# ---- sg3-utils, the other side's own tools ----------------------------------
# zoned_sgu DEV L: what sg3-utils decode or dump of the zone pages, commands
# and errors, one block per command, each line prefixed with the command
# (the device path left out) and ending with its exit status, as a zone
# conformance suite (sg3-utils and raw CDBs) sees the drive.  It resets
# every zone first, then builds each condition: zone 0 conventional, 1
# implicitly open, 2 explicitly open, 3 closed, 4 full (finished while
# empty), the rest empty; a write 8 blocks above zone 5's pointer (refused
# on host-managed, non-seq on host-aware).
zoned_sgu () {
  local dev=$1 L=$2 zl pb o z
  zl=$(( ZONE_MB * 1048576 / L )) pb=$(( 4096 / L ))
  h8 () { printf '%016x' "$1" | sed 's/../& /g'; }
  h4 () { printf '%08x' "$1" | sed 's/../& /g'; }
  dd if=/dev/urandom of=/tmp/zs.in bs=4096 count=1 2>/dev/null
  sx () {  # sx CMD ARGS...: CMD ARGS DEV, its output and exit status
    local out rc
    out=$("$@" "$dev" 2>&1); rc=$?
    printf '%s\n' "$out" | grep -v '^ *$' | sed "s|$dev|DEV|g; s|^|$*: |"
    echo "$*: exit $rc"
  }
  # shellcheck disable=SC2046
  zw () {  # zw ZONE OFFSET_BLOCKS: one physical block written there (sg_raw)
    sx sg_raw -s 4096 -i /tmp/zs.in 8a 00 $(h8 $(( $1 * zl + $2 ))) $(h4 $pb) 00 00
  }
  # The identity and the zone pages.
  sx sg_inq | grep -e 'PDT=' -e 'exit' -e 'device type' |
    sed 's/\(PDT=[0-9]*\) .*/\1/; s/ length=.*\(Peripheral device type\)/ \1/'
  sx sg_vpd -p zbdch
  sx sg_vpd -p zbdch -H
  sx sg_vpd -p bdc | grep -i -e zoned -e exit
  sx sg_readcap -l
  # The zone commands listed and their CDB usage data.
  sx sg_opcodes -n -m | grep -i -e zone -e realm -e 'write pointer' -e exit
  for o in 0x95,0 0x95,6 0x95,7 0x94,1 0x94,2 0x94,3 0x94,4 0x94,5 0x94,0x10; do
    sx sg_opcodes -n -o $o
  done
  sx sg_opcodes -n -o 0x95       # an opcode with service actions, asked without one
  # The conditions.
  sx sg_reset_wp --all
  zw 3 0; sx sg_zone --close --zone=$((3 * zl))
  zw 1 0
  sx sg_zone --finish --zone=$((4 * zl))
  sx sg_zone --open --zone=$((2 * zl))
  zw 5 $((8 * pb))
  # REPORT ZONES: every reporting option, then the cut lists.
  o=0
  while [ $o -le 63 ]; do
    sx sg_rep_zones --report=$o
    o=$((o + 1))
  done
  sx sg_rep_zones --hex --maxlen=64
  sx sg_rep_zones --hex --maxlen=200
  sx sg_rep_zones --hex --partial --maxlen=200
  sx sg_rep_zones --hex --partial --maxlen=200 --report=1
  sx sg_rep_zones --maxlen=128
  sx sg_rep_zones --partial --maxlen=128 --start=$((2 * zl))
  sx sg_rep_zones --num=2 --start=$((zl + zl / 2))
  sx sg_rep_zones --start=$((zl + zl / 2)) --report=1
  sx sg_rep_zones --start=$((16 * zl - 1))
  sx sg_rep_zones --start=$((16 * zl))
  sx sg_rep_zones --wp
  # OPEN, CLOSE, FINISH, RESET WRITE POINTER: one zone, ALL, a count,
  # and each refusal.
  sx sg_zone -v --open --zone=$((6 * zl))    # at the limit: zone 1 closed implicitly
  sx sg_zone -v --open --zone=$((7 * zl))    # two explicitly open: refused
  sx sg_zone -v --open --zone=$((4 * zl))    # full
  sx sg_zone -v --open --zone=$((2 * zl + 1))
  sx sg_zone -v --open --zone=0
  sx sg_zone -v --open --zone=$((16 * zl))
  sx sg_zone -v --close --zone=$((2 * zl))
  sx sg_zone -v --close --zone=$((3 * zl))
  sx sg_zone -v --close --zone=0
  sx sg_zone -v --finish --zone=$((1 * zl))
  sx sg_zone -v --finish --zone=$((1 * zl + pb))
  sx sg_rep_zones
  sx sg_zone -v --open --count=1 --zone=$((8 * zl))   # ZONE COUNT 1: one zone
  sx sg_zone -v --close --count=1 --zone=$((8 * zl))
  sx sg_zone -v --close --all
  sx sg_zone -v --open --zone=$((9 * zl))
  zw 10 0
  zw 11 0
  sx sg_zone -v --close --all
  sx sg_zone -v --open --all                 # closed zones 1, 10, 11 past the limit
  sx sg_zone -v --close --zone=$((11 * zl))
  sx sg_zone -v --open --all
  sx sg_rep_zones
  sx sg_zone -v --finish --all
  sx sg_zone -v --finish --all --zone=$((3 * zl + 1))
  sx sg_reset_wp -v --zone=$((4 * zl + 1))
  sx sg_reset_wp -v --zone=0
  sx sg_reset_wp -v --zone=$((4 * zl))
  sx sg_reset_wp -v --count=2 --zone=$((10 * zl))
  sx sg_reset_wp -v --zone=$((16 * zl))
  sx sg_rep_zones
  sx sg_reset_wp -v --all
  sx sg_rep_zones --report=1 --num=1
}

# zoned_sgu_count DEV L: ZBC-2's ZONE COUNT (sg_zone and sg_reset_wp
# --count), one line a command: its exit status, the sense key and
# additional sense sg3-utils decode, then every zone's condition.
zoned_sgu_count () {
  local dev=$1 zl=$(( ZONE_MB * 1048576 / $2 ))
  sc () {
    local out rc
    out=$("$@" "$dev" 2>&1); rc=$?
    echo "$*: exit $rc$(printf '%s\n' "$out" | sed -n 's/.*Sense key: \(.*\)/; \1/p; s/^ *Additional sense: \(.*\)/; \1/p' |
      tr -d '\n') |$(sg_rep_zones "$dev" | sed -n 's/^ *Zone condition: //p' |
      sed 's/Not write pointer/nw/; s/Empty/em/; s/Implicitly opened/oi/; s/Explicitly opened/oe/; s/Closed/cl/; s/Full/fu/' |
      tr '\n' ' ' | sed 's/^/ /; s/ $//')"
  }
  sg_reset_wp --all "$dev"
  sc sg_zone -v --open --count=1 --zone=$((8 * zl))
  sc sg_zone -v --open --count=2 --zone=$((8 * zl))
  sc sg_zone -v --open --count=2 --zone=$((10 * zl))
  sc sg_zone -v --close --count=2 --zone=$((8 * zl))
  sc sg_zone -v --finish --count=3 --zone=$((10 * zl))
  sc sg_reset_wp -v --count=2 --zone=$((10 * zl))
  sc sg_zone -v --open --count=2 --zone=$((15 * zl))
  sc sg_reset_wp -v --count=2 --zone=0
  sc sg_reset_wp -v --all
}

# zoned_sgu_count_want L hm|ha: what zoned_sgu_count must print (ZBC-2:
# the zones from ZONE ID on, all or none; host-managed: an open limit of 2).
zoned_sgu_count_want () {
  local zl=$(( ZONE_MB * 1048576 / $1 )) third
  third="exit 0 | nw em em em em em em em oe oe oe oe em em em em"
  [ "$2" = hm ] && third="exit 7; Data Protect; Insufficient zone resources | nw em em em em em em em oe oe em em em em em em"
  cat <<EOT
sg_zone -v --open --count=1 --zone=$((8 * zl)): exit 0 | nw em em em em em em em oe em em em em em em em
sg_zone -v --open --count=2 --zone=$((8 * zl)): exit 0 | nw em em em em em em em oe oe em em em em em em
sg_zone -v --open --count=2 --zone=$((10 * zl)): $third
sg_zone -v --close --count=2 --zone=$((8 * zl)): exit 0 | nw em em em em em em em em em $( [ "$2" = hm ] && echo em em || echo oe oe) em em em em
sg_zone -v --finish --count=3 --zone=$((10 * zl)): exit 0 | nw em em em em em em em em em fu fu fu em em em
sg_reset_wp -v --count=2 --zone=$((10 * zl)): exit 0 | nw em em em em em em em em em em em fu em em em
sg_zone -v --open --count=2 --zone=$((15 * zl)): exit 22; Illegal Request; Logical block address out of range | nw em em em em em em em em em em em fu em em em
sg_reset_wp -v --count=2 --zone=0: exit 5; Illegal Request; Invalid field in cdb | nw em em em em em em em em em em em fu em em em
sg_reset_wp -v --all: exit 0 | nw em em em em em em em em em em em em em em em
EOT
}

# zoned_sgu_allow MAXLBA [ha]: the sed script that turns scsi_debug's
# zoned_sgu lines into sect4k's where scsi_debug is wrong (or configured
# otherwise), each with its reason; MAXLBA as sg_rep_zones prints it.
zoned_sgu_allow () {
  # scsi_debug runs without lbpu: no provisioning; sect4k unmaps its
  # conventional zones (docs/zoned.md, Trims).
  echo 's/^\(sg_readcap -l:    Logical block provisioning: \)lbpme=0, lbprz=0$/\1lbpme=1, lbprz=1/'
  # The CONTROL byte: scsi_debug marks NACA, LINK and the vendor bits
  # used (C7h) though it has no ACA (NormACA 0) nor linked commands.
  echo '/^sg_opcodes -n -o 0x9[45],[0-9]*:   Usage data: /s/ c7 $/ 00 /'
  # 95h/06h, REPORT REALMS: scsi_debug lists a second REPORT ZONES there,
  # with no handler; neither drive has realms.
  echo '/^sg_opcodes -n -o 0x95,6:   Command is supported/s/ supported .*/ NOT supported/'
  echo '/^sg_opcodes -n -o 0x95,6:   Usage data: /d'
  echo '/^sg_opcodes -n -m:  95  *6  .*Report realms$/d'
  # Reporting option 08h (ZBC-2: zones whose condition is INACTIVE):
  # none without zone domains, an empty list; scsi_debug takes it for a
  # reserved option.
  echo '/^sg_rep_zones --report=8: sg_rep_zones failed: /d'
  echo '/^sg_rep_zones --report=8: exit 5$/s/5$/0/'
  printf '%s\n' '/^sg_rep_zones --report=8: Report zones command: Illegal request$/c\' \
    'sg_rep_zones --report=8: Report zones response:\' \
    'sg_rep_zones --report=8:   Same=0: zone type and length may differ in each descriptor\' \
    "sg_rep_zones --report=8:   Maximum LBA: $1"
  [ "${2:-}" = ha ] || return 0
  # Host-aware: ZBC-2 has the drive give B6h and ZONED 01b in B1h;
  # scsi_debug zbc=host-aware on Linux 6.12 gives neither (the block
  # layer has no host-aware model any more).  sect4k's page, exact.
  echo '/^sg_vpd -p zbdch/d'
  echo '/^sg_vpd -p bdc:   ZONED=/d'
  printf '%s\n' '/^sg_vpd -p bdc: exit /i\' \
    'sg_vpd -p zbdch: Zoned block device characteristics VPD page (SBC, ZBC):\' \
    'sg_vpd -p zbdch:   Zoned block device extension: not reported\' \
    'sg_vpd -p zbdch:   AAORB: 0\' \
    'sg_vpd -p zbdch:   URSWRZ: 1\' \
    'sg_vpd -p zbdch:   Optimal number of open sequential write preferred zones: not reported\' \
    'sg_vpd -p zbdch:   Optimal number of non-sequentially written sequential write preferred zones: not reported\' \
    'sg_vpd -p zbdch:   Maximum number of open sequential write required zones: no limit\' \
    'sg_vpd -p zbdch: exit 0\' \
    'sg_vpd -p zbdch -H: Zoned block device characteristics VPD page (SBC, ZBC):\' \
    'sg_vpd -p zbdch -H:  00     00 b6 00 3c 01 00 00 00  ff ff ff ff ff ff ff ff    ...<............\' \
    'sg_vpd -p zbdch -H:  10     ff ff ff ff 00 00 00 00  00 00 00 00 00 00 00 00    ................\' \
    'sg_vpd -p zbdch -H:  20     00 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00    ................\' \
    'sg_vpd -p zbdch -H:  30     00 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00    ................\' \
    'sg_vpd -p zbdch -H: exit 0\' \
    'sg_vpd -p bdc:   ZONED=1  [host-aware]'
}

# zoned_sgu_count_check PFX DEV L hm|ha REF: ZONE COUNT on the sect4k
# disk does what ZBC-2 says, exactly; scsi_debug ignores the field (one
# zone: resp_open_zone and the others read ZONE ID and ALL only), so its
# lines are shown, not compared.
zoned_sgu_count_check () {
  local out
  out=$(zoned_sgu_count "$2" "$3")
  is "$1: sg_zone/sg_reset_wp --count (ZBC-2 ZONE COUNT): those zones, all or none, the sense of each refusal" \
    "$out" "$(zoned_sgu_count_want "$3" "$4")" && diag "$out"
  diag "scsi_debug (ZONE COUNT ignored):" "$5"
}

# zoned_sgu_compare PFX OUT REF [ALLOWED]: OUT equals REF line by line
# once the sed script ALLOWED (the differences where scsi_debug is
# wrong, each turning its line into sect4k's exact one) has run on REF.
zoned_sgu_compare () {
  if [ -z "$3" ]; then nok "$1: sg3-utils: scsi_debug's output (no reference)"; return; fi
  printf '%s\n' "$3" | sed -e "${4:-}" > /tmp/sgu-ref.txt
  printf '%s\n' "$2" > /tmp/sgu-s4k.txt
  if diff /tmp/sgu-ref.txt /tmp/sgu-s4k.txt > /tmp/sgu.diff; then
    ok "$1: sg3-utils ($(grep -c ': exit ' /tmp/sgu-s4k.txt) commands: sg_inq, sg_vpd zbdch/bdc, sg_readcap -l, sg_opcodes, sg_rep_zones, sg_zone, sg_reset_wp): equal to scsi_debug's line by line$([ -n "${4:-}" ] && echo ", but the allowed differences")"
  else
    nok "$1: sg3-utils: equal to scsi_debug's line by line"
    diag "$(head -n 400 /tmp/sgu.diff)"
  fi
  diag "$(grep -e '^sg_inq: ' -e '^sg_vpd -p zbdch: ' -e '^sg_vpd -p bdc: ' -e '^sg_readcap -l: ' \
    -e '^sg_opcodes -n -m: ' -e 'Usage data' /tmp/sgu-s4k.txt)"
}

# ---- host-aware: a regular disk to Linux -------------------------------------
# zoned_ha_ops DEV: writes a host-aware drive takes anywhere (off the
# write pointer too), one line each, then REPORT ZONES of zones 1-3 as
# sg_rep_zones decodes them (blkzone needs a zoned queue).
zoned_ha_ops () {
  local dev=$1 z=$((ZONE_MB * 256)) r   # zone length in 4 KiB blocks
  for r in "1 0 2" "2 8 1" "3 0 1" "3 4 1" "3 2 1"; do
    set -- $r
    if dd if=/dev/urandom of="$dev" bs=4096 seek=$(( $1 * z + $2 )) count="$3" \
          oflag=direct conv=notrunc 2>/dev/null; then
      echo "write zone $1 +$2 x$3: accepted"
    else
      echo "write zone $1 +$2 x$3: refused"
    fi
  done
  sg_rep_zones --start=$(( z * 4096 / $(cat /sys/block/${dev#/dev/}/queue/logical_block_size) )) \
    --num=3 "$dev" 2>&1 | grep -v -e '^ *Maximum LBA' -e 'Reported zone'
}

# Host-aware: scsi_debug zbc=host-aware and sect4k zoned=host-aware, same
# zones, 512e: the same sysfs (Linux 6.12 uses both as regular disks,
# queue/zoned none; 6.1 shows host-aware on a disk with no partitions),
# and both take unaligned writes, with the same zone report after them.
zoned_host_aware () {
  local pfx="zoned host-aware 512e" dev ref_sysfs= ref_ops= ref_zbd= ref_sgu= ref_sgu_count= out t0=$(date +%s)
  if insmod /modules/scsi_debug.ko zbc=host-aware dev_size_mb=$ZONED_MB \
       zone_size_mb=$ZONE_MB zone_nr_conv=1 sector_size=512 physblk_exp=3 2>/tmp/insmod.err; then
    wait_for 20 sh -c 'grep -l scsi_debug /sys/block/sd*/device/model >/dev/null 2>&1'
    dev=$(grep -l scsi_debug /sys/block/sd*/device/model 2>/dev/null | head -n 1 | cut -d/ -f4)
    if [ -n "$dev" ]; then
      ref_sysfs=$(zoned_sysfs "/dev/$dev")
      ref_ops=$(zoned_ha_ops "/dev/$dev")
      ref_sgu=$(zoned_sgu "/dev/$dev" 512)
      ref_sgu_count=$(zoned_sgu_count "/dev/$dev" 512)
      ref_zbd=$(zoned_zbd "/dev/$dev")
    fi
    rmmod scsi_debug
  fi
  [ -n "$ref_sysfs" ] || { nok "$pfx: scsi_debug zbc=host-aware made a disk"; diag "$(cat /tmp/insmod.err)"; return; }
  # shellcheck disable=SC2086
  sect4k-server size=${ZONED_MB}M model=512e zoned=host-aware zone-size=${ZONE_MB}M \
    zone-conventional=1 --scsi >/tmp/zoned-ha.out 2>/tmp/zoned-ha.log &
  scsi_pid=$!
  wait_for 60 sh -c "grep -q '^/dev/sd' /tmp/zoned-ha.out || ! kill -0 $scsi_pid 2>/dev/null"
  scsi_dev=$(sed -n 's|^\(/dev/sd[a-z]*\).*|\1|p' /tmp/zoned-ha.out | head -n 1)
  if [ -z "$scsi_dev" ] || [ ! -b "$scsi_dev" ]; then
    nok "$pfx: sect4k-server --scsi zoned=host-aware printed a /dev/sdX"
    diag "$(cat /tmp/zoned-ha.out)" "$(tail -n 5 /tmp/zoned-ha.log)"; return
  fi
  is "$pfx: sect4k disk's queue fields equal scsi_debug's ($ref_sysfs)" \
    "$(zoned_sysfs "$scsi_dev")" "$ref_sysfs"
  out=$(zoned_ha_ops "$scsi_dev")
  if [ "$out" = "$ref_ops" ]; then
    ok "$pfx: unaligned and aligned writes accepted, then REPORT ZONES equal scsi_debug's line by line"
  else
    nok "$pfx: the same writes accepted and the same REPORT ZONES as scsi_debug"
    printf '%s\n' "$out" > /tmp/zoned-s4k.txt; printf '%s\n' "$ref_ops" > /tmp/zoned-ref.txt
    diag "$(diff /tmp/zoned-ref.txt /tmp/zoned-s4k.txt | head -n 40)"
  fi
  says "$pfx: ... both took the write off the write pointer (non-seq set)" "$out" \
    '^write zone 2 +8 x1: accepted$' '^write zone 3 +2 x1: accepted$' 'Non.seq.*1'
  diag "$(printf '%s\n' "$out" | head -n 20)"
  zoned_sgu_compare "$pfx" "$(zoned_sgu "$scsi_dev" 512)" "$ref_sgu" \
    "$(zoned_sgu_allow "$(printf '0x%x' $(( ZONED_MB * 2048 - 1 )))" ha)"
  zoned_sgu_count_check "$pfx" "$scsi_dev" 512 ha "$ref_sgu_count"
  zoned_zbd_compare "$pfx" "$(zoned_zbd "$scsi_dev")" "$ref_zbd"
  stop_pid "$scsi_pid" 60
  is "$pfx: sect4k-server exits 0 on SIGTERM" "$stop_rc" 0
  scsi_pid= scsi_dev=
  diag "$pfx: $(( $(date +%s) - t0 )) s"
}

# ---- real users of zones: f2fs, btrfs, fio ---------------------------------
# The programs and modules come on the host's tools disk (vm-test: a
# read-only ext4 image, serial s4k-tools) so that the initramfs stays small.
zoned_tools () {
  local s dev= m
  # Mounted already (maybe in a subshell, whose PATH is gone).
  if [ -x /tools/bin/fio ]; then
    case ":$PATH:" in *:/tools/bin:*) ;; *) PATH=$PATH:/tools/bin ;; esac
    return 0
  fi
  for s in /sys/block/vd*; do
    [ "$(cat "$s/serial" 2>/dev/null)" = s4k-tools ] && dev=/dev/${s##*/}
  done
  [ -n "$dev" ] || { zoned_tools_why="no tools disk (the host's TAP says why)"; return 1; }
  mkdir -p /tools
  mount -t ext4 -o ro "$dev" /tools 2>/tmp/tools.err ||
    { zoned_tools_why="cannot mount $dev: $(cat /tmp/tools.err)"; return 1; }
  for m in $(cat /tools/modules/order); do
    grep -q "^$m " /proc/modules || insmod "/tools/modules/$m.ko" 2>>/tmp/tools.err ||
      { zoned_tools_why="insmod $m: $(tail -n 1 /tmp/tools.err)"; return 1; }
  done
  PATH=$PATH:/tools/bin
}

# The users' disk: 512 MiB of 4 MiB zones, 16 of them conventional (f2fs
# keeps its metadata there: a single-device f2fs needs them, as mkfs.f2fs
# -m says), no open limit (f2fs wants one open zone per active log).
ZONED_USER_KEYS="size=512M model=512e zoned=host-managed zone-size=4M zone-conventional=16"

zoned_f2fs () {
  local pfx="zoned users: f2fs" dev=$1 out sum t0=$(date +%s)
  mkdir -p /mnt
  out=$(mkfs.f2fs -f -m "$dev" 2>&1)
  check "$pfx: mkfs.f2fs -m succeeds" test $? = 0 || { diag "$out"; return; }
  diag "$(printf '%s\n' "$out" | grep -i -e zone -e 'Format successful' | head -n 6)"
  check "$pfx: mount" mount -t f2fs "$dev" /mnt || return
  head -c 8388608 /dev/urandom > /tmp/f2fs.dat
  sum=$(md5sum < /tmp/f2fs.dat)
  cp /tmp/f2fs.dat /mnt/data && mkdir /mnt/d &&
    for i in 1 2 3 4 5 6 7 8; do echo "file $i" > /mnt/d/f$i; done && sync
  check "$pfx: an 8 MiB file and 8 small ones written, synced" test $? = 0
  check "$pfx: unmount" umount /mnt || return
  out=$(fsck.f2fs -f "$dev" 2>&1)
  check "$pfx: fsck.f2fs -f clean (exit 0)" test $? = 0 || diag "$out"
  diag "$(printf '%s\n' "$out" | grep -e 'Info: .*zone' -e 'features' -e '\[FSCK\]' -e 'Done' | head -n 16)"
  if mount -t f2fs -o ro "$dev" /mnt; then
    is "$pfx: the file reads back after a remount" "$(md5sum < /mnt/data)" "$sum"
    umount /mnt
  else
    nok "$pfx: remount read-only"
  fi
  rm -f /tmp/f2fs.dat
  diag "$pfx: $(( $(date +%s) - t0 )) s"
}

# zoned_btrfs_reference: btrfs scrub's error summary on scsi_debug
# zbc=host-managed with the users' zones (256 MiB: scsi_debug keeps it
# all in the guest's RAM), the same mkfs, file and scrub.
zoned_btrfs_reference () {
  local d
  insmod /modules/scsi_debug.ko zbc=host-managed dev_size_mb=256 zone_size_mb=4 \
    zone_nr_conv=16 sector_size=512 physblk_exp=3 2>/dev/null || { echo "insmod scsi_debug failed"; return; }
  wait_for 20 sh -c 'grep -l scsi_debug /sys/block/sd*/device/model >/dev/null 2>&1'
  d=/dev/$(grep -l scsi_debug /sys/block/sd*/device/model 2>/dev/null | head -n 1 | cut -d/ -f4)
  mkdir -p /mnt2
  if mkfs.btrfs -f -d single -m single "$d" >/dev/null 2>&1 && mount -t btrfs "$d" /mnt2; then
    cp /tmp/btrfs.dat /mnt2/data && sync
    btrfs scrub start -B /mnt2 2>&1 | grep 'Error summary'
    umount /mnt2
  else
    echo "mkfs.btrfs or mount on scsi_debug failed"
  fi
  rmmod scsi_debug
}

zoned_btrfs () {
  local pfx="zoned users: btrfs" dev=$1 out sum t0=$(date +%s)
  out=$(mkfs.btrfs -f -d single -m single "$dev" 2>&1)
  check "$pfx: mkfs.btrfs succeeds" test $? = 0 || { diag "$out"; return; }
  says "$pfx: ... in zoned mode" "$out" 'Zoned device: *yes'
  diag "$(printf '%s\n' "$out" | grep -i -e zone | head -n 4)"
  check "$pfx: mount" mount -t btrfs "$dev" /mnt || return
  check "$pfx: the mounted file system is zoned (sysfs features/zoned)" \
    sh -c 'ls /sys/fs/btrfs/*/features/zoned >/dev/null 2>&1'
  head -c 8388608 /dev/urandom > /tmp/btrfs.dat
  sum=$(md5sum < /tmp/btrfs.dat)
  cp /tmp/btrfs.dat /mnt/data && sync
  check "$pfx: an 8 MiB file written, synced" test $? = 0
  out=$(btrfs scrub start -B /mnt 2>&1)
  check "$pfx: btrfs scrub start -B: exit 0" test $? = 0
  if printf '%s\n' "$out" | grep -q 'Error summary: *no errors found'; then
    ok "$pfx: ... no errors found"
  else
    # Linux before 6.9 looks for a zoned device's superblock where a
    # regular one's is ("btrfs: zoned: use zone aware sb location for
    # scrub", 2024) and counts super=1: the same on scsi_debug is the
    # kernel's, not the drive's.
    ref=$(zoned_btrfs_reference)
    is "$pfx: ... scrub's errors are the kernel's: scsi_debug (same zones) gets the same summary" \
      "$(printf '%s\n' "$out" | grep 'Error summary')" "$ref"
    diag "$pfx: scsi_debug's scrub: $ref"
  fi
  diag "$(printf '%s\n' "$out" | tail -n 4)"
  is "$pfx: the file reads back" "$(md5sum < /mnt/data)" "$sum"
  check "$pfx: unmount" umount /mnt
  rm -f /tmp/btrfs.dat
  diag "$pfx: $(( $(date +%s) - t0 )) s"
}

zoned_fio () {
  local pfx="zoned users: fio" dev=$1 out t0=$(date +%s)
  # Sequential zones 16-19 (bytes 64-80 MiB), reset first (btrfs used
  # them); 16 MiB: fio takes seconds under TCG.
  blkzone reset -o $((64 * 2048)) -l $((16 * 2048)) "$dev"
  out=$(fio --name=zbd --filename="$dev" --direct=1 --ioengine=psync --zonemode=zbd \
    --rw=write --bs=64k --offset=64m --size=16m --max_open_zones=4 \
    --verify=crc32c --do_verify=1 --output-format=terse --terse-version=3 2>&1)
  rc=$?
  check "$pfx: --zonemode=zbd sequential writes with crc32c verify: exit 0" test $rc = 0
  # terse v3: field 5 is the error, 6 the KiB read (the verify), 47 written.
  is "$pfx: no error, 16 MiB written and read back by the verify" \
    "$(printf '%s\n' "$out" | tail -n 1 | awk -F';' '{print $5 "," $6 "," $47}')" "0,16384,16384" ||
    diag "$(printf '%s\n' "$out" | tail -n 5)"
  diag "$pfx: $(( $(date +%s) - t0 )) s"
}

# An unaligned O_DIRECT write to a sequential zone: EIO, the zone's write
# pointer where it was, and the same write from sg_raw (past the kernel,
# which on 6.12 refuses it itself: zone write plugging) gets the drive's
# CHECK CONDITION, ILLEGAL REQUEST, UNALIGNED WRITE COMMAND (21h/04h).
zoned_unaligned () {
  local pfx="zoned users: unaligned O_DIRECT write" dev=$1 zl=$((32 * 8192)) e0 e1 out
  blkzone reset -o $zl -c 1 "$dev"
  dd if=/dev/urandom of="$dev" bs=4096 seek=$((zl / 8)) count=1 oflag=direct conv=notrunc 2>/dev/null
  e0=$(cat /sys/block/${dev#/dev/}/device/ioerr_cnt)
  dd if=/dev/urandom of="$dev" bs=4096 seek=$((zl / 8 + 2)) count=1 oflag=direct \
    conv=notrunc 2>/tmp/dd.err
  rc=$?
  e1=$(cat /sys/block/${dev#/dev/}/device/ioerr_cnt)
  # 6.12's zone write plugging knows the write pointer and fails it with
  # EIO before the drive sees it; 6.1 sends it, and the drive's ILLEGAL
  # REQUEST becomes BLK_STS_TARGET: EREMOTEIO.
  if [ "$e0" = "$e1" ]; then want='Input/output error' who="the kernel refused it (EIO)"
  else want='Remote I/O error' who="the drive refused it, ILLEGAL REQUEST: EREMOTEIO"; fi
  if [ $rc != 0 ] && grep -q "$want" /tmp/dd.err; then
    ok "$pfx: 4 KiB at zone 32's write pointer + 8 sectors fails: $who"
  else
    nok "$pfx: 4 KiB at zone 32's write pointer + 8 sectors fails: $who"; diag "exit $rc: $(cat /tmp/dd.err)"
  fi
  diag "$pfx: the drive's ioerr_cnt went $e0 -> $e1"
  is "$pfx: the write pointer did not move" \
    "$(blkzone report -o $zl -c 1 "$dev" | sed -n 's/.*wptr \(0x[0-9a-f]*\).*zcond: *\([0-9]*\).*/\1 \2/p')" "0x000008 2"
  dd if=/dev/zero of=/tmp/zs.in bs=4096 count=1 2>/dev/null
  out=$(sg_raw -s 4096 -i /tmp/zs.in "$dev" 8a 00 $(printf '%016x' $((zl + 16)) | sed 's/../& /g') \
        00 00 00 08 00 00 2>&1)
  says "$pfx: the same write from sg_raw: CHECK CONDITION, Illegal Request, Unaligned write command" "$out" \
    'SCSI Status: Check Condition' 'Sense key: Illegal Request' 'Additional sense: Unaligned write command'
  diag "$(printf '%s\n' "$out" | grep -e Status -e Sense -e 'Additional sense' | head -n 3)"
}

# ---- a power cut under f2fs (write-cache=true) --------------------------------
# The whole machine loses power: the host stops sending at once (the
# disk offline in sysfs: nothing more reaches it), the drive's power is
# cut through the control socket, and the host "reboots": it forgets the
# disk (device/delete: its page cache, and on 6.12 the zone write plugs
# with their cached write pointers) and finds it again with a host scan,
# as a booting host would (the LUN's first command gets the power-on
# UNIT ATTENTION). The server keeps running: a drive powers on by itself
# (README "Faults").

# zcut_norm: `blkzone report` lines -> "start wp cond" (absolute LBAs,
# sequential zones; a full zone's pointer at its end, as sd_zbc says).
zcut_norm () {
  local s l w c
  sed -n 's/.*start: *\(0x[0-9a-f]*\), len \(0x[0-9a-f]*\),.*wptr \(0x[0-9a-f]*\).*zcond: *[0-9]*(\([a-z]*\)).*SEQ_WRITE.*/\1 \2 \3 \4/p' |
  while read -r s l w c; do
    if [ "$c" = fu ]; then w=$((s + l)); else w=$((s + w)); fi
    echo "$((s)) $w $c"
  done
}
# zcut_expect LIST REPORT: `sect4k-ctl zone list` before the cut, patched
# by the cut report's "zones" (wp_after, cond_after): what REPORT ZONES
# must say after it, as zcut_norm prints it.
zcut_expect () {
  awk -v rep="$2" '
    function cc(c) {
      return c == "empty" ? "em" : c ~ /^imp/ ? "oi" : c ~ /^exp/ ? "oe" :
             c == "closed" ? "cl" : c == "full" ? "fu" : c == "read-only" ? "ro" :
             c == "offline" ? "ol" : c }
    BEGIN {
      while ((getline line < rep) > 0) {
        if (line !~ /"wp_after"/) continue
        z = line; sub(/.*"zone": /, "", z); sub(/,.*/, "", z)
        w = line; sub(/.*"wp_after": /, "", w); sub(/,.*/, "", w)
        c = line; sub(/.*"cond_after": "/, "", c); sub(/".*/, "", c)
        aw[z] = w; ac[z] = cc(c)
      }
    }
    /type=seq/ {
      for (i = 1; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
      s = f["start"]; w = f["wp"]; c = cc(f["cond"])
      if (s in aw) { w = aw[s]; c = ac[s] }
      if (c == "fu") w = s + f["len"]
      printf "%d %d %s\n", s, w, c }' "$1"
}
# zcut_nonzero DEV FROM COUNT: the bytes not zero in COUNT 4 KiB blocks from
# 512-byte sector FROM (O_DIRECT: the drive's data); EIO if unreadable.
zcut_nonzero () {
  dd if="$1" of=/tmp/zcut.blk bs=4096 skip=$(( $2 / 8 )) count="$3" iflag=direct \
    2>/dev/null || { echo EIO; return; }
  echo $(( $(tr -d '\000' < /tmp/zcut.blk | wc -c) ))
}
# zcut_zones DEV REPORT < ZONES: each sequential zone (zcut_norm's lines)
# reads data in the 4 KiB below its pointer and zeroes from the pointer
# to its end (but the sector the cut tore, which must lie at the
# pointer). Zones empty before and after the cut (never written since
# mkfs reset them): the first 64 KiB of every 8th (a dd each is 0.3 s
# under TCG).
# One line per zone that does not.
zcut_zones () {
  local dev=$1 rep=$2 s w c end top torn nz changed torns
  changed=" $(sed -n 's/.*"zone": \([0-9]*\),.*/\1/p' "$rep" | tr '\n' ' ')"
  torns=" $(sed -n 's/.*"zone": \([0-9]*\),.*"torn_sector": \([0-9]*\).*/\1:\2/p' "$rep" | tr '\n' ' ')"
  : > /tmp/zcut.empty
  while read -r s w c; do
    end=$(( s + ZCUT_ZONE )) top=$w torn=
    case "$torns" in *" $s:"*) torn=${torns#* $s:} torn=${torn%% *} ;; esac
    if [ -n "$torn" ]; then
      [ $(( torn * 8 )) = "$w" ] || echo "zone $s: the torn sector $torn is not at the pointer $w"
      top=$(( w + 8 ))
    fi
    if [ "$c" = em ] && [ "$w" = "$s" ]; then
      case "$changed" in
        *" $s "*) ;;
        *) [ $(( s / ZCUT_ZONE % 8 )) = 0 ] &&
             { dd if="$dev" bs=4096 skip=$(( s / 8 )) count=16 iflag=direct 2>/dev/null \
                 >> /tmp/zcut.empty || echo "zone $s: unreadable"; }
           continue ;;
      esac
    fi
    if [ "$w" -gt "$s" ]; then
      nz=$(zcut_nonzero "$dev" $(( w - 8 )) 1)
      case "$nz" in 0|EIO) echo "zone $s: the 4 KiB below the pointer $w: $nz non-zero bytes" ;; esac
    fi
    if [ "$top" -lt "$end" ]; then
      nz=$(zcut_nonzero "$dev" "$top" $(( (end - top) / 8 )))
      [ "$nz" = 0 ] || echo "zone $s: above the pointer $w: $nz non-zero bytes"
    fi
  done
  nz=$(( $(tr -d '\000' < /tmp/zcut.empty | wc -c) ))
  [ "$nz" = 0 ] || echo "the zones empty before and after the cut: $nz non-zero bytes in their first 64 KiB"
  rm -f /tmp/zcut.empty
}

ZCUT_ZONE=8192                  # the users' zones, in 512-byte sectors

# zcut_start NAME KEYS...: sect4k-server KEYS --scsi; sets scsi_pid and
# scsi_dev, fails if no disk came (/tmp/NAME.log says why).
zcut_start () {
  local name=$1; shift
  rm -f "/tmp/$name.out"
  sect4k-server "$@" --scsi >"/tmp/$name.out" 2>"/tmp/$name.log" &
  scsi_pid=$!
  wait_for 60 sh -c "grep -q '^/dev/sd' /tmp/$name.out || ! kill -0 $scsi_pid 2>/dev/null"
  scsi_dev=$(sed -n 's|^\(/dev/sd[a-z]*\).*|\1|p' "/tmp/$name.out" | head -n 1)
  [ -n "$scsi_dev" ] && [ -b "$scsi_dev" ]
}
# zcut_writer NAME: until /tmp/zcut.stop, "sync" writes files of 24-120
# KiB with fsync (each listed in /tmp/zcut.sums once its fsync returned),
# any other NAME 1 MiB files without (the last 16 kept).
zcut_writer () {
  local i=0
  while [ ! -e /tmp/zcut.stop ]; do
    if [ "$1" = sync ]; then
      head -c $(( (i % 5 + 1) * 24576 + i * 512 )) /dev/urandom > /tmp/zcut.s$i
      dd if=/tmp/zcut.s$i of=/mnt/s/$i bs=64k conv=fsync status=none 2>/dev/null &&
        echo "$(md5sum < /tmp/zcut.s$i | cut -d' ' -f1)  s/$i" >> /tmp/zcut.sums
      rm -f /tmp/zcut.s$i
      sleep 0.2
    else
      dd if=/dev/urandom of=/mnt/$1.$i bs=64k count=16 status=none 2>/dev/null
      [ $i -lt 16 ] || rm -f /mnt/$1.$((i - 16))
    fi
    i=$((i + 1))
  done
}

# zoned_f2fs_cut memory|file: f2fs on the users' disk with write-cache=true,
# writers running, the power cut (see above), then the drive's word:
# REPORT ZONES equals the zone list before the cut with the cut report's
# pointers, no zone open, data below each pointer and zeroes above; then
# f2fs mounts, the fsync'd files are intact, fsck.f2fs -f is clean. With
# file=, a restart between the cut and the mount shows the same zones.
zoned_f2fs_cut () {
  local mode=$1 pfx="zoned f2fs power cut ($1)" t0=$(date +%s) exp wb
  zoned_tools || { ok "$pfx # SKIP $zoned_tools_why"; return; }
  exp=$(cat /proc/sys/vm/dirty_expire_centisecs) wb=$(cat /proc/sys/vm/dirty_writeback_centisecs)
  # Writeback within 0.2 s: data reaches the drive's cache without a
  # flush between the writers' fsyncs.
  echo 20 > /proc/sys/vm/dirty_expire_centisecs
  echo 10 > /proc/sys/vm/dirty_writeback_centisecs
  zcut_run "$mode" "$pfx"
  touch /tmp/zcut.stop
  for p in $case_pids; do wait "$p" 2>/dev/null; done
  case_pids=
  echo "$exp" > /proc/sys/vm/dirty_expire_centisecs
  echo "$wb" > /proc/sys/vm/dirty_writeback_centisecs
  tidy "$pfx"
  rm -f /tmp/zcut.img /tmp/zcut.img.sect4k-zones /tmp/zcut.blk /tmp/zcut.stop
  diag "$pfx: $(( $(date +%s) - t0 )) s"
}

zcut_run () {
  local mode=$1 pfx=$2 ctl=/tmp/zcut.ctl rep=/tmp/zcut.json img=/tmp/zcut.img
  local keys dev b z host out rc got want synced dirty moved errs try t=$(date +%s) tt=
  keys="$ZONED_USER_KEYS write-cache=true control=$ctl cut-report=$rep"
  rm -f "$ctl" "$rep" /tmp/zcut.stop /tmp/zcut.sums "$img" "$img.sect4k-zones"
  [ "$mode" = file ] && keys="$keys file=$img"
  # shellcheck disable=SC2086
  if ! zcut_start zcut $keys; then
    # file= with write-cache=true on a zoned drive: refused until the
    # zone state file keeps only durable pointers (docs/zoned.md).
    if [ "$mode" = file ] && grep -q 'write-cache=true: ' /tmp/zcut.log; then
      ok "$pfx # SKIP $(head -n 1 /tmp/zcut.log)"; return
    fi
    nok "$pfx: sect4k-server $keys --scsi printed a /dev/sdX"
    diag "$(cat /tmp/zcut.out)" "$(tail -n 5 /tmp/zcut.log)"; return
  fi
  dev=$scsi_dev
  out=$(mkfs.f2fs -f -m "$dev" 2>&1) || { nok "$pfx: mkfs.f2fs -m"; diag "$out"; return; }
  mkdir -p /mnt
  check "$pfx: mkfs.f2fs -m, mount" mount -t f2fs "$dev" /mnt || return
  mkdir /mnt/s
  zcut_writer sync & case_pids=$!
  zcut_writer a & case_pids="$case_pids $!"
  zcut_writer b & case_pids="$case_pids $!"
  # Mid-write: four fsync'd files done, a sequential zone open, at least
  # 64 KiB unflushed in the drive's cache.  The host dies: nothing more
  # reaches the drive (what it had in flight completes: a fsync's flush
  # can leave nothing unflushed, then the host lives on and we try again).
  wait_for 120 sh -c '[ "$(cat /tmp/zcut.sums 2>/dev/null | wc -l)" -ge 4 ]'
  b=${dev#/dev/} dirty=0
  for try in 1 2 3 4 5; do
    wait_for 60 sh -c "sect4k-ctl $ctl zone list | grep -q 'type=seq-required cond=imp-open' &&
      sect4k-ctl $ctl status | grep -q '^dirty-bytes=[1-9][0-9]\{4,\}'"
    echo offline > "/sys/block/$b/device/state"
    wait_for 10 sh -c "read r w < /sys/block/$b/inflight && [ \$r = 0 ] && [ \$w = 0 ]"
    dirty=$(sect4k-ctl "$ctl" status | sed -n 's/^dirty-bytes=//p')
    [ "${dirty:-0}" -gt 0 ] && break
    echo running > "/sys/block/$b/device/state"
  done
  sect4k-ctl "$ctl" zone list > /tmp/zcut.pre
  tt="writers $(( $(date +%s) - t )) s (try $try)"; t=$(date +%s)
  sect4k-ctl "$ctl" power-cut >/dev/null
  check "$pfx: the control socket cut the power with $dirty bytes unflushed" test $? = 0 -a -s "$rep" || return
  touch /tmp/zcut.stop
  for p in $case_pids; do wait "$p" 2>/dev/null; done
  case_pids=
  synced=$(wc -l < /tmp/zcut.sums)
  umount /mnt 2>/dev/null || umount -l /mnt
  # The host comes back: it forgets the disk and scans for it anew.
  host=$(readlink -f "/sys/block/$b/device" | sed -n 's|.*/\(host[0-9]*\)/.*|\1|p')
  echo 1 > "/sys/block/$b/device/delete"
  wait_for 30 test ! -e "/sys/block/$b"
  echo '- - -' > "/sys/class/scsi_host/$host/scan"
  wait_for 60 sh -c "ls -d /sys/class/scsi_host/$host/device/target*/*/block/sd* >/dev/null 2>&1"
  b=$(ls -d /sys/class/scsi_host/$host/device/target*/*/block/sd* 2>/dev/null | head -n 1)
  dev=/dev/${b##*/} scsi_dev=/dev/${b##*/}
  wait_for 10 test -b "$dev"
  check "$pfx: the disk is back after a host scan ($dev, $(cat "$b/queue/zoned" 2>/dev/null), $(cat "$b/device/state" 2>/dev/null))" \
    test -b "$dev" -a "$(cat "$b/queue/zoned" 2>/dev/null)" = host-managed || return
  tt="$tt, cut and scan $(( $(date +%s) - t )) s"; t=$(date +%s)
  out=$(blkzone report "$dev" 2>&1)
  got=$(printf '%s\n' "$out" | zcut_norm)
  want=$(zcut_expect /tmp/zcut.pre "$rep")
  if [ -n "$got" ] && [ "$got" = "$want" ]; then
    ok "$pfx: blkzone report: each zone's pointer and condition as the cut report's \"zones\" says ($(grep -c '"wp_after"' "$rep") changed), the others as before the cut"
  else
    nok "$pfx: blkzone report equals the zone list before the cut with the cut report's pointers"
    printf '%s\n' "$want" > /tmp/zcut.want; printf '%s\n' "$got" > /tmp/zcut.got
    diag "$(diff /tmp/zcut.want /tmp/zcut.got | head -n 20)" "$(grep '"wp_after"' "$rep" | head -n 10)"
  fi
  is "$pfx: no zone is open after the cut" "$(printf '%s\n' "$got" | grep -c ' o[ie]$')" 0
  moved=$(sed -n 's/.*"wp_before": \([0-9]*\), "wp_after": \([0-9]*\),.*/\1 \2/p' "$rep" |
    while read -r x y; do [ "$x" -gt "$y" ] && echo "$x $y"; done | wc -l)
  check "$pfx: the cut moved $((moved)) write pointers back" test "$moved" -gt 0 ||
    diag "the zones before the cut:" "$(grep -v -e 'cond=empty' -e 'cond=not-wp' -e 'cond=full' /tmp/zcut.pre | head -n 8)"
  errs=$(printf '%s\n' "$got" | zcut_zones "$dev" "$rep")
  is "$pfx: every sequential zone reads data below its pointer, zeroes above it" "$errs" ""
  tt="$tt, zone checks $(( $(date +%s) - t )) s"; t=$(date +%s)
  diag "$(grep '"wp_after"' "$rep" | head -n 4)"
  for z in $(sed -n 's/.*"zone": \([0-9]*\),.*/\1/p' "$rep" | head -n 4); do
    printf '%s\n' "$out" | grep "start: $(printf '0x%09x' "$z")"
  done > /tmp/zcut.changed
  diag "$(cat /tmp/zcut.changed)"
  if [ "$mode" = file ]; then
    stop_pid "$scsi_pid" 60
    is "$pfx: sect4k-server exits 0 on SIGTERM" "$stop_rc" 0
    # shellcheck disable=SC2086
    if ! zcut_start zcut $keys; then
      nok "$pfx: restarted on the same file"; diag "$(tail -n 5 /tmp/zcut.log)"; return
    fi
    dev=$scsi_dev
    is "$pfx: after a restart on file=, blkzone report shows the same zones" \
      "$(blkzone report "$dev" 2>&1 | zcut_norm)" "$got"
  fi
  check "$pfx: f2fs mounts after the cut" mount -t f2fs "$dev" /mnt || return
  check "$pfx: the $synced fsync'd files are intact" sh -c 'cd /mnt && md5sum -c -s /tmp/zcut.sums'
  umount /mnt
  out=$(fsck.f2fs -f "$dev" 2>&1); rc=$?
  is "$pfx: fsck.f2fs -f is clean (exit 0)" "$rc" 0 || diag "$(printf '%s\n' "$out" | tail -n 20)"
  diag "$pfx: $tt, mount and fsck $(( $(date +%s) - t )) s"
  stop_pid "$scsi_pid" 60
  is "$pfx: sect4k-server exits 0 on SIGTERM" "$stop_rc" 0
  scsi_pid= scsi_dev=
}

zoned_users () {
  local pfx="zoned users" t0=$(date +%s)
  if ! zoned_tools; then ok "zoned users # SKIP $zoned_tools_why"; return; fi
  diag "$pfx: the tools disk mounted, f2fs and btrfs loaded: $(( $(date +%s) - t0 )) s"
  # shellcheck disable=SC2086
  sect4k-server $ZONED_USER_KEYS --scsi >/tmp/zoned-users.out 2>/tmp/zoned-users.log &
  scsi_pid=$!
  wait_for 60 sh -c "grep -q '^/dev/sd' /tmp/zoned-users.out || ! kill -0 $scsi_pid 2>/dev/null"
  scsi_dev=$(sed -n 's|^\(/dev/sd[a-z]*\).*|\1|p' /tmp/zoned-users.out | head -n 1)
  if [ -z "$scsi_dev" ] || [ ! -b "$scsi_dev" ]; then
    nok "$pfx: sect4k-server --scsi $ZONED_USER_KEYS printed a /dev/sdX"
    diag "$(cat /tmp/zoned-users.out)" "$(tail -n 5 /tmp/zoned-users.log)"; return
  fi
  diag "$pfx: sect4k-server $ZONED_USER_KEYS --scsi: $(head -n 1 /tmp/zoned-users.out)" \
    "$pfx: $scsi_dev: $(zoned_sysfs "$scsi_dev")"
  zoned_f2fs "$scsi_dev"; tidy "zoned f2fs" attach
  zoned_btrfs "$scsi_dev"; tidy "zoned btrfs" attach
  zoned_fio "$scsi_dev"
  zoned_unaligned "$scsi_dev"
  stop_pid "$scsi_pid" 60
  is "$pfx: sect4k-server exits 0 on SIGTERM" "$stop_rc" 0
  scsi_pid= scsi_dev=
  diag "$pfx: $(( $(date +%s) - t0 )) s"
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
    'zoned=host-managed: NBD has no zone commands .*serve a zoned drive with --scsi or --ublk alone'
  out=$(timeout 30 sect4k-server size=${ZONED_MB}M $ZONED_KEYS zone-max-active=4 --scsi 2>&1)
  refused "zoned: zone-max-active refused under --scsi" $? "$out" \
    'zone-max-active=4: SCSI has no field for it'
  tidy "zoned refusals"
  zoned_case 512e model=512e sector_size=512 physblk_exp=3
  tidy "zoned 512e"
  zoned_case 4kn model=4kn sector_size=4096
  tidy "zoned 4kn"
  zoned_restart
  tidy "zoned restart"
  zoned_host_aware
  tidy "zoned host-aware"
  zoned_users
  zoned_f2fs_cut memory
  zoned_f2fs_cut file
  diag "zoned suite: $(( $(date +%s) - t0 )) s"
}
