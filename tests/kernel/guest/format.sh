# SPDX-License-Identifier: BSD-3-Clause
# Sector-size conversion in place (issue 34), sourced by tests.sh after
# scsi.sh (its scsi_start/scsi_stop and the ok/is/says helpers).
#   format  sg_format --format --size=4096 on a 512e sect4k-server --scsi
#           disk, a rescan, then the kernel's logical size, the same
#           capacity in bytes, zeroes; back with --size=512; lengths the
#           disk does not list (VPD B4h) refused; scsi_debug for
#           comparison.

# fmt_zeroes DEV BS: the first 64 KiB read as zeroes (O_DIRECT).
fmt_zeroes () {
  [ "$(dd if="$1" bs="$2" count=$((65536 / $2)) iflag=direct status=none | tr -d '\000' | wc -c)" = 0 ]
}

# fmt_to PFX DEV SIZE: sg_format --size=SIZE, a rescan, what the kernel sees.
fmt_to () {
  local pfx=$1 dev=$2 L=$3 b=${2#/dev/} out rc
  out=$(/opt/bin/sg_format --format --size="$L" --quick --wait "$dev" 2>&1); rc=$?
  if [ $rc = 0 ]; then ok "$pfx: sg_format --format --size=$L --quick --wait"
  else nok "$pfx: sg_format --format --size=$L --quick --wait"; diag "  exit $rc:" "$out"; return 1; fi
  diag "$(printf '%s\n' "$out" | grep -i -e 'block size' -e 'number of blocks' -e 'format unit' | sed "s/^[[:space:]]*/$pfx: sg_format: /")"
  echo 1 > "/sys/block/$b/device/rescan"
  is "$pfx: after a rescan, queue/logical_block_size $L" "$(cat /sys/block/$b/queue/logical_block_size)" "$L"
  is "$pfx: physical_block_size stays 4096" "$(cat /sys/block/$b/queue/physical_block_size)" 4096
  is "$pfx: the capacity in bytes is unchanged" "$(blockdev --getsize64 "$dev")" "$(scsi_bytes $SCSI_SIZE)"
  out=$(sg_readcap --long "$dev" 2>&1)
  says "$pfx: READ CAPACITY(16): $L-byte blocks" "$out" "Logical block length=$L bytes" \
    "Number of logical blocks=$(( $(scsi_bytes $SCSI_SIZE) / L ))\$"
  check "$pfx: the data reads as zeroes" fmt_zeroes "$dev" "$L"
  dmesg | grep -i 'capacity data has changed' | tail -n 1 | sed "s/^/S4K: # $pfx: dmesg: /"
}

suite_format () {
  local t0=$(date +%s) dev b out rc
  [ -x /opt/bin/sg_format ] || { nok "format: /opt/bin/sg_format is in the guest"; return; }
  if ! sect4k-server --help 2>&1 | grep -q -- '--scsi'; then
    ok "format # SKIP this sect4k-server has no --scsi"; return
  fi
  if ! scsi_start fmt model=512e; then nok "format: sect4k-server --scsi model=512e printed a /dev/sdX"; return; fi
  dev=$scsi_dev b=${dev#/dev/}
  out=$(sg_vpd -p sbl "$dev" 2>&1)
  says "format: sg_vpd -p sbl (B4h): block lengths 512 and 4096" "$out" \
    'Logical block length: 512$' 'Logical block length: 4096$'
  dd if=/dev/urandom of=/tmp/fmt.data bs=65536 count=1 status=none
  dd if=/tmp/fmt.data of="$dev" bs=65536 oflag=direct status=none
  if fmt_zeroes "$dev" 512; then nok "format: data written before the format"; fi
  fmt_to "format 512e->4096" "$dev" 4096
  dd if=/tmp/fmt.data of="$dev" bs=65536 oflag=direct status=none
  fmt_to "format 4096->512" "$dev" 512
  # Lengths the disk does not list: MODE SELECT refused with INVALID
  # FIELD IN PARAMETER LIST; sg_format stops before FORMAT UNIT.
  out=$(/opt/bin/sg_format --format --size=1024 --quick --wait -v "$dev" 2>&1); rc=$?
  refused "format: sg_format --size=1024 refused (MODE SELECT: Invalid field in parameter list)" \
    "$rc" "$out" 'Invalid field in parameter list'
  is "format: ... and the disk keeps 512-byte blocks" "$(cat /sys/block/$b/queue/logical_block_size)" 512
  scsi_stop "format"
  tidy "format 512e"
  # A 512n disk keeps its physical sector: 4096 is not on its list.
  if scsi_start fmt-512n model=512n; then
    out=$(/opt/bin/sg_format --format --size=4096 --quick --wait -v "$scsi_dev" 2>&1); rc=$?
    refused "format: 512n: sg_format --size=4096 refused" "$rc" "$out" 'Invalid field in parameter list'
    scsi_stop "format 512n"
  else
    nok "format: sect4k-server --scsi model=512n"
  fi
  tidy "format 512n"
  # file=: the new size is recorded beside the file; the next start with
  # the same keys is the 4Kn disk.
  dd if=/dev/zero of=/tmp/fmt.img bs=1M count=64 status=none
  if scsi_start fmt-file model=512e file=/tmp/fmt.img; then
    fmt_to "format file=" "$scsi_dev" 4096
    dd if=/tmp/fmt.data of="$scsi_dev" bs=65536 oflag=direct status=none
    scsi_stop "format file="
    is "format file=: /tmp/fmt.img.sect4k-geometry records it" \
      "$(cat /tmp/fmt.img.sect4k-geometry)" "sect4k-geometry logical=4096 physical=4096 alignment=0"
    if scsi_start fmt-file model=512e file=/tmp/fmt.img; then
      b=${scsi_dev#/dev/}
      is "format file=: restarted with the same keys: logical_block_size 4096" \
        "$(cat /sys/block/$b/queue/logical_block_size)" 4096
      dd if="$scsi_dev" of=/tmp/fmt.back bs=65536 count=1 iflag=direct status=none
      check "format file=: the data written after the format reads back" cmp -s /tmp/fmt.data /tmp/fmt.back
      scsi_stop "format file= restarted"
    else
      nok "format file=: restarted"
    fi
  else
    nok "format: sect4k-server --scsi model=512e file="
  fi
  rm -f /tmp/fmt.img /tmp/fmt.img.sect4k-geometry
  tidy "format file="
  # interface=sata: hdparm --set-sector-size (SET SECTOR CONFIGURATION
  # EXT through ATA PASS-THROUGH), as on a SATA drive.
  if [ -x /opt/bin/hdparm ] && scsi_start fmt-sata model=512e interface=sata; then
    dev=$scsi_dev b=${dev#/dev/}
    dd if=/tmp/fmt.data of="$dev" bs=65536 oflag=direct status=none
    out=$(/opt/bin/hdparm --set-sector-size 4096 --please-destroy-my-drive "$dev" 2>&1); rc=$?
    says "format sata: hdparm --set-sector-size 4096 succeeded" "$rc:$out" '^0:' 'succeeded'
    diag "$(printf '%s\n' "$out" | grep -i 'sector size' | sed 's/^/format sata: hdparm: /')"
    echo 1 > "/sys/block/$b/device/rescan"
    is "format sata: after a rescan, logical_block_size 4096" "$(cat /sys/block/$b/queue/logical_block_size)" 4096
    is "format sata: the capacity in bytes is unchanged" "$(blockdev --getsize64 "$dev")" "$(scsi_bytes $SCSI_SIZE)"
    check "format sata: the data reads as zeroes" fmt_zeroes "$dev" 4096
    out=$(/opt/bin/hdparm -I "$dev" 2>&1)
    says "format sata: hdparm -I: logical 4096, physical 4096" "$out" \
      'Logical  Sector size: *4096 bytes' 'Physical Sector size: *4096 bytes'
    diag "$(printf '%s\n' "$out" | grep -e 'Sector size' -e 'user addressable' | sed 's/^[[:space:]]*/format sata: hdparm -I: /')"
    out=$(/opt/bin/hdparm --set-sector-size 1024 --please-destroy-my-drive "$dev" 2>&1); rc=$?
    refused "format sata: hdparm --set-sector-size 1024: not in the Sector Configuration log" "$rc" "$out" 'unsupported sector size'
    out=$(/opt/bin/hdparm --set-sector-size 512 --please-destroy-my-drive "$dev" 2>&1); rc=$?
    says "format sata: and back: hdparm --set-sector-size 512 succeeded" "$rc:$out" '^0:' 'succeeded'
    echo 1 > "/sys/block/$b/device/rescan"
    is "format sata: after a rescan, logical_block_size 512" "$(cat /sys/block/$b/queue/logical_block_size)" 512
    scsi_stop "format sata"
  else
    nok "format sata: sect4k-server --scsi model=512e interface=sata"
  fi
  tidy "format sata"
  # scsi_debug for comparison: its MODE SELECT takes no new block length
  # (and its disk has no FORMAT UNIT), so sg_format stops there.
  if insmod /modules/scsi_debug.ko sector_size=512 physblk_exp=3 dev_size_mb=16 2>/tmp/insmod.err; then
    wait_for 20 sh -c 'grep -l scsi_debug /sys/block/sd*/device/model >/dev/null 2>&1'
    dev=$(grep -l scsi_debug /sys/block/sd*/device/model 2>/dev/null | head -n 1 | cut -d/ -f4)
    if [ -n "$dev" ]; then
      out=$(/opt/bin/sg_format --format --size=4096 --quick --wait "/dev/$dev" 2>&1); rc=$?
      refused "format: scsi_debug (reference): sg_format --size=4096 refused at MODE SELECT" "$rc" "$out" 'MODE SELECT command: Illegal request'
      is "format: scsi_debug keeps 512-byte blocks" "$(cat /sys/block/$dev/queue/logical_block_size)" 512
    else
      nok "format: scsi_debug gave a disk"
    fi
    rmmod scsi_debug 2>/dev/null
  else
    nok "format: insmod scsi_debug"; diag "$(cat /tmp/insmod.err)"
  fi
  diag "format: the suite took $(( $(date +%s) - t0 )) s"
}
