# SPDX-License-Identifier: BSD-3-Clause
# The atomic suite of the kernel tests (issue 27), sourced by tests.sh after
# scsi.sh (its helpers: ok/nok/is/check/says/diag, wait_for, scsi_start,
# scsi_stop).  Linux 6.11 added untorn writes; on 6.12:
#   - the kernel's scsi_debug with atomic_wr=1 and sect4k-server --scsi
#     with the same limits (512e, 16 KiB maximum, 4 KiB granularity and
#     alignment) give the same queue/atomic_write_* in sysfs: sd.c reads
#     them from the Block Limits page (sd_read_block_limits,
#     sd_config_atomic);
#   - statx (STATX_WRITE_ATOMIC) on the sect4k disk reports them;
#   - pwritev2 (RWF_ATOMIC) of the unit succeeds, a larger or misaligned
#     one gets EINVAL;
#   - WRITE ATOMIC(16) sent with sg_raw reaches sect4k-server through
#     target_core_user (LIO passes it through: passthrough_parse_cdb);
#   - on 4kn with a 16 KiB maximum, WRITE ATOMIC(16) of 2 blocks at LBA 3
#     (across a multiple of the maximum, which Block Limits allows) is
#     GOOD on scsi_debug and on the sect4k disk alike (issue 32);
#   - atomic-writes=explicit, write-cache=true, torn=garbage: a power cut
#     after a stream of 16 KiB RWF_ATOMIC writes leaves no torn page, the
#     same stream of plain O_DIRECT writes leaves torn pages.
# Linux 6.1 has none of it: the suite skips there.
ATOMIC_KEYS="model=512e atomic-write-max=16K atomic-write-min=4K"

# atomic_sysfs DEV: "max unit_min unit_max boundary" in bytes.
atomic_sysfs () {
  local q=/sys/block/${1#/dev/}/queue
  echo "$(cat $q/atomic_write_max_bytes) $(cat $q/atomic_write_unit_min_bytes)" \
       "$(cat $q/atomic_write_unit_max_bytes) $(cat $q/atomic_write_boundary_bytes)"
}

# The reference: scsi_debug with the same geometry and limits, in logical
# blocks (512e: atomic_wr_max_length=32 is 16 KiB, atomic_wr_align and
# _gran=8 are 4 KiB; 4kn: 4, 1 and 1), no ATOMIC BOUNDARY fields, as
# sect4k's page has.  atomic_reference NAME WANT SCSI_DEBUG_ARGS...: sets
# atomic_ref to what its sysfs shows.
atomic_reference () {
  local pfx="atomic: scsi_debug atomic_wr=1 $1 (reference)" name=$1 want=$2 dev
  shift 2
  atomic_ref=
  if ! insmod /modules/scsi_debug.ko dev_size_mb=16 atomic_wr=1 "$@" \
       atomic_wr_max_length_bndry=0 atomic_wr_max_bndry=0 2>/tmp/insmod.err; then
    nok "$pfx: insmod scsi_debug"; diag "$(cat /tmp/insmod.err)"; return
  fi
  wait_for 20 sh -c 'grep -l scsi_debug /sys/block/sd*/device/model >/dev/null 2>&1'
  dev=$(grep -l scsi_debug /sys/block/sd*/device/model 2>/dev/null | head -n 1 | cut -d/ -f4)
  if [ -z "$dev" ]; then nok "$pfx: scsi_debug made a disk"; rmmod scsi_debug; return; fi
  atomic_ref=$(atomic_sysfs "/dev/$dev")
  is "$pfx: queue/atomic_write_max_bytes unit_min unit_max boundary" "$atomic_ref" "$want"
  [ "$name" != 4kn ] || atomic_lba3 "$pfx" "/dev/$dev"
  rmmod scsi_debug
}

# atomic_lba3 PFX DEV: on 4kn with a 16 KiB maximum, WRITE ATOMIC(16) of
# 2 blocks at LBA 3 (across LBA 4, a multiple of the maximum: Block
# Limits allows it) is GOOD and the data reads back.
atomic_lba3 () {
  local out rc
  head -c 8192 /dev/urandom > /tmp/aw3.in
  out=$(sg_raw -s 8192 -i /tmp/aw3.in "$2" 9c 00 00 00 00 00 00 00 00 03 00 00 00 02 00 00 2>&1); rc=$?
  is "$1: sg_raw WRITE ATOMIC(16) of 2 blocks at LBA 3 (across a multiple of the maximum): GOOD" "$rc" 0
  [ "$rc" = 0 ] || diag "$out"
  dd if="$2" of=/tmp/aw3.out bs=4096 skip=3 count=2 iflag=direct status=none
  check "$1: ... the data reads back" cmp -s /tmp/aw3.in /tmp/aw3.out
  rm -f /tmp/aw3.*
}

# atomic_4kn: the same comparison on 4kn (limits in 4096-byte blocks).
atomic_4kn () {
  local pfx="atomic 4kn"
  atomic_reference 4kn "16384 4096 16384 0" sector_size=4096 \
    atomic_wr_max_length=4 atomic_wr_align=1 atomic_wr_gran=1
  if ! scsi_start atomic4kn model=4kn atomic-write-max=16K; then
    nok "$pfx: sect4k-server --scsi printed a /dev/sdX"; scsi_stop "$pfx"; return
  fi
  is "$pfx: sect4k disk queue/atomic_write_* equal scsi_debug's" \
    "$(atomic_sysfs "$scsi_dev")" "${atomic_ref:-16384 4096 16384 0}"
  is "$pfx: statx STATX_WRITE_ATOMIC on $scsi_dev" \
    "$(s4k-atomic statx "$scsi_dev" 2>&1)" "STATX_WRITE_ATOMIC 1 4096 16384 1"
  atomic_lba3 "$pfx" "$scsi_dev"
  scsi_stop "$pfx"
}

suite_atomic () {
  local t0=$(date +%s) pfx=atomic dev out rc b
  case "$(uname -r)" in
    6.1|6.1.*|6.[0-9]|6.[0-9].*|6.10|6.10.*|[1-5].*)
      ok "atomic: queue/atomic_write_*, statx, RWF_ATOMIC, WRITE ATOMIC(16) # SKIP Linux $(uname -r) has no atomic writes (6.11 added them)"
      return ;;
  esac
  if ! sect4k-server --help 2>&1 | grep -q -- 'atomic-write-max'; then
    ok "atomic # SKIP this sect4k-server has no atomic-write-max="; return
  fi
  atomic_reference 512e "16384 4096 16384 0" sector_size=512 physblk_exp=3 \
    atomic_wr_max_length=32 atomic_wr_align=8 atomic_wr_gran=8
  # shellcheck disable=SC2086
  if ! scsi_start atomic $ATOMIC_KEYS; then
    nok "$pfx: sect4k-server --scsi $ATOMIC_KEYS printed a /dev/sdX"; scsi_stop "$pfx"; return
  fi
  dev=$scsi_dev b=${dev#/dev/}
  is "atomic: sect4k disk queue/atomic_write_max_bytes unit_min unit_max boundary equal scsi_debug's" \
    "$(atomic_sysfs "$dev")" "${atomic_ref:-16384 4096 16384 0}"
  out=$(sg_vpd -p bl "$dev" 2>&1)
  says "atomic: sg_vpd -p bl: the Block Limits page's atomic fields" "$out" \
    'Maximum atomic transfer length: 32' 'Atomic alignment: 8' \
    'Atomic transfer length granularity: 8'
  is "atomic: statx STATX_WRITE_ATOMIC on $dev: mask, attribute, unit min, unit max, segments" \
    "$(s4k-atomic statx "$dev" 2>&1)" "STATX_WRITE_ATOMIC 1 4096 16384 1"
  is "atomic: pwritev2 RWF_ATOMIC of 16384 bytes at 16384 succeeds" \
    "$(s4k-atomic write "$dev" 16384 16384 2>&1)" ok
  is "atomic: pwritev2 RWF_ATOMIC of 4096 bytes (unit min) at 4096 succeeds" \
    "$(s4k-atomic write "$dev" 4096 4096 2>&1)" ok
  is "atomic: pwritev2 RWF_ATOMIC of 32768 bytes (above unit max) gets EINVAL" \
    "$(s4k-atomic write "$dev" 0 32768 2>&1)" EINVAL
  is "atomic: pwritev2 RWF_ATOMIC of 16384 bytes at 4096 (misaligned) gets EINVAL" \
    "$(s4k-atomic write "$dev" 4096 16384 2>&1)" EINVAL
  is "atomic: pwritev2 RWF_ATOMIC of 2048 bytes (below unit min) gets EINVAL" \
    "$(s4k-atomic write "$dev" 0 2048 2>&1)" EINVAL

  # WRITE ATOMIC(16) from userspace (sg_raw): LIO hands 9Ch to the server
  # (target_core_user), which writes it: the data reads back.
  head -c 16384 /dev/urandom > /tmp/aw.in
  out=$(sg_raw -s 16384 -i /tmp/aw.in "$dev" 9c 08 00 00 00 00 00 00 01 00 00 00 00 20 00 00 2>&1); rc=$?
  is "atomic: sg_raw WRITE ATOMIC(16) of 32 blocks at LBA 256 with FUA: GOOD" "$rc" 0
  [ "$rc" = 0 ] || diag "$out"
  dd if="$dev" of=/tmp/aw.out bs=16384 skip=8 count=1 iflag=direct status=none
  check "atomic: ... the server wrote it (read back with O_DIRECT)" cmp -s /tmp/aw.in /tmp/aw.out
  out=$(sg_raw -s 4096 -i /tmp/aw.in "$dev" 9c 00 00 00 00 00 00 00 01 00 00 08 00 08 00 00 2>&1); rc=$?
  says "atomic: sg_raw WRITE ATOMIC(16) with an ATOMIC BOUNDARY: the server's INVALID FIELD IN CDB at byte 10" \
    "$out" 'Illegal Request' 'Invalid field in cdb' 'byte 10'
  out=$(sg_raw -s 20480 -i /dev/zero "$dev" 9c 00 00 00 00 00 00 00 01 00 00 00 00 28 00 00 2>&1)
  says "atomic: sg_raw WRITE ATOMIC(16) of 40 blocks (above 32): INVALID FIELD IN CDB at byte 12" \
    "$out" 'Illegal Request' 'Invalid field in cdb' 'byte 12'
  rm -f /tmp/aw.*
  scsi_stop "$pfx"

  atomic_4kn
  atomic_cut
  diag "atomic: the suite took $(( $(date +%s) - t0 )) s"
}

# The power cut: 64 pages of 16 KiB written and flushed (generation 0),
# then written again without a flush (generation 1): pages 0-63 with
# RWF_ATOMIC (WRITE ATOMIC(16), atomic under atomic-writes=explicit),
# pages 64-127 with plain O_DIRECT writes (WRITE(10), not atomic).  The
# cut gives each physical sector of unflushed data its outcome: an atomic
# write's sectors all the same one.
atomic_cut () {
  local pfx="atomic: power cut, torn=garbage" dev state out a p
  # shellcheck disable=SC2086
  if ! scsi_start atomiccut $ATOMIC_KEYS atomic-writes=explicit write-cache=true \
       torn=garbage seed=27; then
    nok "$pfx: sect4k-server --scsi printed a /dev/sdX"; scsi_stop "$pfx"; return
  fi
  dev=$scsi_dev state=/sys/block/${dev#/dev/}/device/state
  is "$pfx: 128 pages of generation 0 written and flushed" \
    "$(s4k-atomic fill "$dev" 0 128 0 plain sync 2>&1)" ok
  is "$pfx: pages 0-63 rewritten with RWF_ATOMIC, no flush" \
    "$(s4k-atomic fill "$dev" 0 64 1 atomic 2>&1)" ok
  is "$pfx: pages 64-127 rewritten with plain O_DIRECT writes, no flush" \
    "$(s4k-atomic fill "$dev" 64 64 1 plain 2>&1)" ok
  echo offline > "$state"
  out=$(sect4k-ctl "/tmp/atomiccut.ctl" power-cut 2>&1)
  check "$pfx: the control socket cut the power" test $? = 0
  diag "$pfx: $(printf '%s\n' "$out" | grep -i outcomes | head -n 1)"
  blockdev --flushbufs "$dev" 2>/dev/null
  echo 3 > /proc/sys/vm/drop_caches
  echo running > "$state"
  # The first command after the cut gets UNIT ATTENTION (sd retries it).
  dd if="$dev" of=/dev/null bs=4096 count=1 iflag=direct status=none 2>/dev/null
  a=$(s4k-atomic check "$dev" 0 64 1 2>&1)
  p=$(s4k-atomic check "$dev" 64 64 1 2>&1)
  diag "$pfx: RWF_ATOMIC pages: $a" "$pfx: plain pages: $p"
  set -- $a
  is "$pfx: RWF_ATOMIC (WRITE ATOMIC(16)) pages torn: $6 of $2 ($8 kept whole, the rest reverted whole)" "$6" 0
  set -- $p
  check "$pfx: plain O_DIRECT pages torn: ${6:-?} of ${2:-?} (not atomic under atomic-writes=explicit)" \
    test "${6:-0}" -gt 0
  scsi_stop "$pfx"
}
