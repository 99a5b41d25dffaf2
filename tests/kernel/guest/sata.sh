# SPDX-License-Identifier: BSD-3-Clause
# The SATA identity (issue 34), sourced by tests.sh after scsi.sh (its
# scsi_start/scsi_stop and the ok/is/says helpers).
#   sata   sect4k-server --scsi interface=sata per preset: what hdparm -I,
#          smartctl -d sat and sg_sat_identify read through ATA
#          PASS-THROUGH (SG_IO) from the disk, against the geometry; SMART
#          counting the bad sectors added through the control socket; and
#          a disk without interface=sata refusing ATA PASS-THROUGH;
#          zoned disks as ZAC drives (word 69, signature, log 30h 09h).

# NAME L P A KEYS
cat > /tmp/sata-cases <<'CASES'
512n     512   512   0     model=512n timing=hdd7200 latency-read=0 latency-write=0 latency-rmw=0 rate=0
512e     512   4096  0     model=512e write-cache=true
512e-xp  512   4096  3584  model=512e-xp
4kn      4096  4096  0     model=4kn
CASES

sata_tool () { [ -x "/opt/bin/$1" ] || { nok "sata: /opt/bin/$1 is in the guest"; return 1; }; }

# sata_case NAME L P A KEYS...
sata_case () {
  local name=$1 L=$2 P=$3 A=$4 pfx="sata $1" dev out off b first
  shift 4
  if ! scsi_start "sata-$name" interface=sata "$@"; then
    nok "$pfx: sect4k-server --scsi interface=sata printed a /dev/sdX"; return 1
  fi
  ok "$pfx: sect4k-server --scsi interface=sata printed $scsi_dev"
  dev=$scsi_dev b=${dev#/dev/}
  # The kernel's own view is unchanged by the ATA identity.
  is "$pfx: the kernel's logical/physical/alignment $L/$P/$A" \
    "$(cat /sys/block/$b/queue/logical_block_size)/$(cat /sys/block/$b/queue/physical_block_size)/$(cat /sys/block/$b/alignment_offset)" "$L/$P/$A"
  # hdparm prints word 209's offset (where LBA 0 lies in its physical
  # sector) times the logical size.
  off=$(( (P - A) % P ))
  out=$(/opt/bin/hdparm -I "$dev" 2>&1)
  printf '%s\n' "$out" | grep -e 'Sector size' -e 'Sector-0' > "/tmp/sata-$name.geo"
  says "$pfx: hdparm -I: logical $L, physical $P, Sector-0 offset $off bytes" "$out" \
    'ATA device' "Logical  Sector size: *$L bytes" "Physical Sector size: *$P bytes" \
    "Logical Sector-0 offset: *$off bytes" "LBA48  user addressable sectors: *$(( $(scsi_bytes $SCSI_SIZE) / L ))\$" \
    "Model Number: *sect4k $name"
  diag "$(printf '%s\n' "$out" | grep -e 'Model Number' -e 'Sector size' -e 'Sector-0' -e 'Rotation Rate' | sed "s/^[[:space:]]*/$pfx: hdparm -I: /")"
  case "$name" in
    512n) says "$pfx: hdparm -I: 7200 rpm (timing=hdd7200)" "$out" 'Nominal Media Rotation Rate: 7200' ;;
    *) says "$pfx: hdparm -I: solid state (no rotating timing model)" "$out" 'Nominal Media Rotation Rate: Solid State Device' ;;
  esac
  case "$name" in
    512e) says "$pfx: hdparm -I: write cache enabled (write-cache=true)" "$out" '\*[[:space:]]*Write cache' ;;
    *) says "$pfx: hdparm -I: write cache supported, not enabled" "$out" '^[[:space:]]*Write cache' ;;
  esac
  says "$pfx: hdparm -I: a valid checksum, TRIM, deterministic zeroes" "$out" \
    'Checksum: correct' 'Data Set Management TRIM supported' 'Deterministic read ZEROs after TRIM'
  out=$(/opt/bin/smartctl -i -d sat "$dev" 2>&1)
  if [ "$L" = "$P" ]; then
    says "$pfx: smartctl -i -d sat: Sector Size $L bytes logical/physical" "$out" \
      "Sector Size: *$L bytes logical/physical" 'SMART support is: *Enabled'
  else
    says "$pfx: smartctl -i -d sat: Sector Sizes $L logical, $P physical" "$out" \
      "Sector Sizes: *$L bytes logical, $P bytes physical" 'SMART support is: *Enabled'
  fi
  diag "$(printf '%s\n' "$out" | grep -e 'Sector Size' -e 'Rotation Rate' -e 'TRIM' | sed "s/^/$pfx: smartctl -i: /")"
  [ "$A" = 0 ] || says "$pfx: smartctl -i: offset $off bytes" "$out" "(offset $off bytes)"
  # sg_sat_identify's raw image (ATA PASS-THROUGH 16 and 12) is the one
  # in VPD page 89h from byte 60.
  /opt/bin/sg_sat_identify -r "$dev" > /tmp/sata.id16 2>/tmp/sata.err
  /opt/bin/sg_sat_identify -r --len=12 "$dev" > /tmp/sata.id12 2>>/tmp/sata.err
  sg_vpd -p 0x89 -r "$dev" 2>>/tmp/sata.err | tail -c 512 > /tmp/sata.vpd
  if [ "$(wc -c < /tmp/sata.id16)" = 512 ] && cmp -s /tmp/sata.id16 /tmp/sata.vpd &&
     cmp -s /tmp/sata.id12 /tmp/sata.vpd; then
    ok "$pfx: sg_sat_identify (16 and 12) returns the image of VPD 89h"
  else
    nok "$pfx: sg_sat_identify (16 and 12) returns the image of VPD 89h"; diag "$(cat /tmp/sata.err)"
  fi
  out=$(sg_vpd -p ai "$dev" 2>&1)
  says "$pfx: sg_vpd -p ai decodes VPD 89h: the model, an IDENTIFY DEVICE image" "$out" \
    'ATA information VPD page' "sect4k $name"
  out=$(/opt/bin/smartctl -H -d sat "$dev" 2>&1)
  says "$pfx: smartctl -H -d sat: PASSED (no bad sectors)" "$out" 'test result: PASSED'
  # hdparm's TRIM (DATA SET MANAGEMENT through ATA PASS-THROUGH): two
  # whole physical sectors from the 16th physical boundary read zeroes
  # after it; what is around them keeps its data.
  first=$(( 16 * P / L + A / L ))
  yes k | tr -d '\n' | head -c $(( 32 * P )) > /tmp/sata-k.img
  dd if=/tmp/sata-k.img of="$dev" bs=$P oflag=direct conv=notrunc status=none
  out=$(/opt/bin/hdparm --please-destroy-my-drive --trim-sector-ranges "$first:$(( 2 * P / L ))" "$dev" 2>&1)
  says "$pfx: hdparm --trim-sector-ranges $first:$(( 2 * P / L )) succeeded" "$out" 'succeeded'
  is "$pfx: after hdparm's TRIM: the two physical sectors read zeroes, their neighbours keep their data" \
    "$(dd if="$dev" bs=$L skip=$(( first - 1 )) count=$(( 2 * P / L + 2 )) iflag=direct status=none |
       od -An -v -tx1 | tr -s ' \n' '\n\n' | grep -v '^$' | uniq | tr '\n' ' ')" '6b 00 6b '
  # LBA 100's physical sector, and two whole physical sectors from the
  # 32nd physical boundary.
  first=$(( 32 * P / L + A / L ))
  sect4k-ctl "/tmp/sata-$name.ctl" bad add 100 >/dev/null
  sect4k-ctl "/tmp/sata-$name.ctl" bad add $first-$(( first + 2 * P / L - 1 )) >/dev/null
  out=$(/opt/bin/smartctl -A -d sat "$dev" 2>&1)
  diag "$(printf '%s\n' "$out" | awk '$1 == "ID#" || $1 == 5 || $1 == 197 || $1 == 198' | sed "s/^/$pfx: smartctl -A: /")"
  is "$pfx: smartctl -A: Current_Pending_Sector 3 after bad add (1 + 2 physical sectors)" \
    "$(printf '%s\n' "$out" | awk '$1 == 197 { print $2, $NF }')" "Current_Pending_Sector 3"
  is "$pfx: smartctl -A: Offline_Uncorrectable 3" \
    "$(printf '%s\n' "$out" | awk '$1 == 198 { print $2, $NF }')" "Offline_Uncorrectable 3"
  # A whole-sector write repairs (reallocates) the sector at LBA 100.
  dd if=/dev/zero of="$dev" bs=$P seek=$(( (100 * L - A) / P * P + A )) count=1 \
    oflag=direct,seek_bytes conv=notrunc status=none
  out=$(/opt/bin/smartctl -A -d sat "$dev" 2>&1)
  is "$pfx: after a write over LBA 100: Reallocated_Sector_Ct 1, pending 2" \
    "$(printf '%s\n' "$out" | awk '$1 == 5 || $1 == 197 { printf "%s ", $NF }')" "1 2 "
  out=$(/opt/bin/smartctl -H -d sat "$dev" 2>&1)
  says "$pfx: smartctl -H: still PASSED (thresholds not crossed)" "$out" 'test result: PASSED'
  scsi_stop "$pfx"
}

# sata_reference: qemu's AHCI disk (logical 512, physical 4096) through
# libata: hdparm -I prints the geometry lines sect4k's 512e disk printed.
sata_reference () {
  local m dev out
  for m in libata libahci ahci; do
    [ ! -f /modules/$m.ko ] || insmod /modules/$m.ko 2>/dev/null
  done
  wait_for 30 sh -c 'grep -l "QEMU HARDDISK" /sys/block/sd*/device/model >/dev/null 2>&1'
  dev=$(grep -l 'QEMU HARDDISK' /sys/block/sd*/device/model 2>/dev/null | head -n 1 | cut -d/ -f4)
  if [ -z "$dev" ]; then
    nok "sata reference: libata attached qemu's AHCI disk"
  else
    ok "sata reference: libata attached qemu's AHCI disk as /dev/$dev"
    out=$(/opt/bin/hdparm -I "/dev/$dev" 2>&1)
    diag "$(printf '%s\n' "$out" | grep -e 'Sector size' -e 'Sector-0' | sed 's/^[[:space:]]*/sata reference: hdparm -I: /')"
    # qemu leaves word 209 (alignment) invalid: hdparm prints no
    # Sector-0 offset for it; the sector size lines must be the same,
    # but for the sizes sect4k's Sector Configuration log (2Fh, which
    # qemu's disk lacks) adds: "[ Supported: 512 4096 ]".
    is "sata reference: hdparm -I sector size lines of the AHCI disk (512/4096) equal sect4k 512e's" \
      "$(printf '%s\n' "$out" | grep -e 'Sector size')" \
      "$(grep -e 'Sector size' /tmp/sata-512e.geo 2>/dev/null | sed 's/ \[ Supported: [0-9 ]*\]$//')"
    says "sata reference: sect4k's 512e lists its sector sizes (log 2Fh), qemu's none" \
      "$(cat /tmp/sata-512e.geo; printf '%s\n' "$out" | grep -c '\[ Supported:' | sed 's/^/qemu: /')" \
      'Logical  Sector size: *512 bytes \[ Supported: 512 4096 \]' '^qemu: 0$'
    says "sata reference: sect4k's 512e says Sector-0 offset 0 (word 209 valid), qemu's nothing" \
      "$(cat /tmp/sata-512e.geo; printf '%s\n' "$out" | grep -c 'Sector-0' | sed 's/^/qemu: /')" \
      'Logical Sector-0 offset: *0 bytes' '^qemu: 0$'
    is "sata reference: the kernel's logical/physical/alignment 512/4096/0" \
      "$(cat /sys/block/$dev/queue/logical_block_size)/$(cat /sys/block/$dev/queue/physical_block_size)/$(cat /sys/block/$dev/alignment_offset)" "512/4096/0"
  fi
  for m in ahci libahci libata; do rmmod $m 2>/dev/null; done
}

# sata_hex: the bytes of an sg3-utils hex dump (-H: an offset, then up to
# 16 bytes a line) on stdin, one line, space-separated.
sata_hex () {
  awk '{ for (i = 2; i <= 17 && $i ~ /^[0-9a-f][0-9a-f]$/; i++) printf "%s ", $i }'
}

# sata_zoned MODEL: a zoned SATA disk is a ZAC drive: host-aware says so
# in IDENTIFY word 69 (smartctl -i), host-managed by its signature
# (ABCDh, in sg_vpd's ATA Information page); the Zoned Device
# Information page (log 30h page 09h, read by sg_sat_read_gplog) states
# the open limit that sg_vpd decodes from VPD B6h, as libata would
# translate it (a qword without bit 63 set: FFFFFFFFh, no limit).
sata_zoned () {
  local model=$1 pfx="sata zoned=$1" out sig lim b6 hex
  local limit=zone-max-open=3
  [ "$model" = host-aware ] && limit=   # host-managed drives only
  # shellcheck disable=SC2086
  if ! scsi_start "sata-$model" interface=sata model=512e zoned=$model \
       zone-size=8192 zone-conventional=1 $limit; then
    nok "$pfx: sect4k-server --scsi interface=sata printed a /dev/sdX"; return 1
  fi
  out=$(/opt/bin/smartctl -i -d sat "$scsi_dev" 2>&1)
  diag "$(printf '%s\n' "$out" | grep -e 'Zoned' -e 'Sector Sizes' | sed "s/^/$pfx: smartctl -i: /")"
  case $model in
    host-aware) says "$pfx: smartctl -i -d sat: Zoned Device: Host aware" "$out" \
                  'Zoned Device: *Host Aware Zones' 'SMART support is: *Enabled' ;;
    *) says "$pfx: smartctl -i -d sat: no zoned capabilities in word 69 (host-managed: the signature)" \
         "$out" 'SMART support is: *Enabled'
       is "$pfx: smartctl -i -d sat prints no Zoned Device line" \
         "$(printf '%s\n' "$out" | grep -c 'Zoned Device')" 0 ;;
  esac
  # VPD 89h's bytes 36-42, the Register D2H FIS: 34h, flags, status 50h,
  # error 01h, then LBA low, mid and high.
  sig=$(/opt/bin/sg_vpd -p ai -H "$scsi_dev" 2>&1 | sata_hex | cut -d' ' -f37-43)
  case $model in
    host-managed) is "$pfx: sg_vpd -p ai: the device signature ABCD01h (ZAC host-managed)" "$sig" '34 00 50 01 01 cd ab' ;;
    *) is "$pfx: sg_vpd -p ai: the ATA signature 000001h" "$sig" '34 00 50 01 01 00 00' ;;
  esac
  # Page 09h's bytes 40-47: the maximum open zones, valid in bit 63.
  hex=$(/opt/bin/sg_sat_read_gplog -L 0x30 -p 9 -H "$scsi_dev" 2>&1 | sata_hex)
  lim=short
  # shellcheck disable=SC2086
  set -- $hex
  if [ $# -ge 48 ]; then
    if [ $((0x${48} & 0x80)) = 0 ]; then lim=4294967295
    else lim=$((0x${41} | 0x${42} << 8 | 0x${43} << 16 | 0x${44} << 24)); fi
  fi
  # sg_vpd prints a number, or words for FFFFFFFFh.
  b6=$(/opt/bin/sg_vpd -p zbdch "$scsi_dev" 2>&1 | grep -i 'open sequential write required')
  diag "$pfx: sg_vpd -p zbdch: $b6"
  b6=$(printf '%s\n' "$b6" | sed -n 's/.*zones: *\([0-9][0-9]*\).*/\1/p')
  [ -n "$b6" ] || b6=4294967295
  diag "$pfx: log 30h page 09h: $(printf '%s' "$hex" | cut -c1-150)"
  is "$pfx: log 30h page 09h (sg_sat_read_gplog) states the open limit of VPD B6h (sg_vpd): $b6" "$lim" "$b6"
  case $model in
    host-managed) is "$pfx: ... which is zone-max-open=3" "$lim" 3 ;;
  esac
  scsi_stop "$pfx"
}

suite_sata () {
  local t0=$(date +%s) name L P A keys out rc
  for t in hdparm smartctl sg_sat_identify; do sata_tool $t || return; done
  if ! sect4k-server --help 2>&1 | grep -q -- '--scsi'; then
    ok "sata # SKIP this sect4k-server has no --scsi"; return
  fi
  while read -r name L P A keys <&3; do
    # shellcheck disable=SC2086
    sata_case "$name" "$L" "$P" "$A" $keys
    tidy "sata $name"
  done 3< /tmp/sata-cases
  # Without interface=sata: ATA PASS-THROUGH is an unknown command, as on
  # scsi_debug.
  if scsi_start sata-scsi model=512e; then
    out=$(/opt/bin/sg_sat_identify "$scsi_dev" 2>&1); rc=$?
    says "sata: interface=scsi: sg_sat_identify fails, invalid opcode" "$rc:$out" \
      '^[1-9]' '[Ii]nvalid.*op'
    scsi_stop "sata scsi"
  else
    nok "sata: interface=scsi disk"
  fi
  tidy "sata interface=scsi"
  for m in host-managed host-aware; do
    sata_zoned $m
    tidy "sata zoned=$m"
  done
  sata_reference
  diag "sata: the suite took $(( $(date +%s) - t0 )) s"
}
