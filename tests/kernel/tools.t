#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# sect4k-qemu-args against real sect4k exports on the host, and the argument
# errors of sect4k-attach and sect4k-qemu-args (this host has no nbd driver:
# attaching is tested inside the guests of linux-*.t).
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
attach=$top/scripts/sect4k-attach
qargs=$top/scripts/sect4k-qemu-args
[ -z "${SECT4K_SAN:-}" ] || { echo "1..0 # SKIP the attach tools are tested in the plain build only"; exit 0; }
if ! command -v nbdkit >/dev/null || ! command -v nbdinfo >/dev/null; then
  echo "1..0 # SKIP nbdkit and nbdinfo are needed (scripts/deps/core.txt)"; exit 0
fi
plugin=${SECT4K_PLUGIN:-$top/sect4k.so}
[ -f "$plugin" ] || { echo "Bail out! no plugin at $plugin (run make first, or set SECT4K_PLUGIN)"; exit 1; }

n=0
ok () { n=$((n + 1)); echo "ok $n - $*"; }
nok () { n=$((n + 1)); echo "not ok $n - $*"; }
is () { if [ "$2" = "$3" ]; then ok "$1"; else nok "$1"; echo "#   got '$2'"; echo "#   expected '$3'"; fi; }
# fails DESC PATTERN COMMAND...: exits 1 with one line on stderr matching PATTERN.
fails () {
  local d=$1 pat=$2 out rc
  shift 2
  out=$("$@" 2>&1 >/dev/null); rc=$?
  if [ "$rc" = 1 ] && [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] && printf '%s\n' "$out" | grep -q -e "$pat"; then
    ok "$d"
  else
    nok "$d"; echo "#   exit $rc, stderr: $out"
  fi
}

dir=$(mktemp -d /tmp/sect4k-tools.XXXXXX) || exit 1
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT
serve () {  # NAME ARGS...: nbdkit on $dir/NAME.sock
  local name=$1; shift
  nbdkit -f -U "$dir/$name.sock" "$@" 2>"$dir/$name.log" &
  pids+=($!)
  for _ in $(seq 100); do [ -S "$dir/$name.sock" ] && return; sleep 0.1; done
  echo "# nbdkit $* did not start: $(tail -n 1 "$dir/$name.log")"
}

while read -r name L P _ params; do
  # shellcheck disable=SC2086
  serve "$name" "$plugin" size=16M $params
  sock=$dir/$name.sock
  is "qemu-args $name: virtio-blk with logical $L and physical $P" \
    "$("$qargs" "nbd+unix:///?socket=$sock" "d-$name")" \
    "-blockdev driver=nbd,node-name=d-$name,server.type=unix,server.path=$sock -device virtio-blk-pci,drive=d-$name,serial=d-$name,logical_block_size=$L,physical_block_size=$P"
done < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$here/cases")

sock=$dir/512e.sock
is "qemu-args: the export name goes to export=, the default ID is sect4k0" \
  "$("$qargs" "nbd+unix:///disk1?socket=$sock")" \
  "-blockdev driver=nbd,node-name=sect4k0,server.type=unix,server.path=$sock,export=disk1 -device virtio-blk-pci,drive=sect4k0,serial=sect4k0,logical_block_size=512,physical_block_size=4096"
serve many "$plugin" size=16M exports=512n,512e,512e-xp,4kn
sock=$dir/many.sock
for x in 512n:512:512 512e-xp:512:4096 4kn:4096:4096; do
  IFS=: read -r name L P <<<"$x"
  is "qemu-args: export $name of a many-export server: logical $L, physical $P" \
    "$("$qargs" "nbd+unix:///$name?socket=$sock" "m$L")" \
    "-blockdev driver=nbd,node-name=m$L,server.type=unix,server.path=$sock,export=$name -device virtio-blk-pci,drive=m$L,serial=m$L,logical_block_size=$L,physical_block_size=$P"
done
fails "qemu-args names an export the server does not have" "cannot query" \
  "$qargs" "nbd+unix:///9kn?socket=$sock"
serve nosize memory 1M
fails "qemu-args refuses a server that advertises no block sizes" "advertises no block sizes" \
  "$qargs" "nbd+unix:///?socket=$dir/nosize.sock"
fails "qemu-args names a server it cannot reach" "cannot query" \
  "$qargs" "nbd+unix:///?socket=$dir/none.sock"
fails "qemu-args refuses a non-NBD URI" "is not an NBD URI" "$qargs" "http://localhost/"
fails "qemu-args refuses a URI without socket=" "no socket= parameter" "$qargs" "nbd+unix:///x"
fails "qemu-args refuses an ID that qemu would not take" "must start with a letter" "$qargs" "nbd+unix:///?socket=$sock" 9x
fails "qemu-args refuses a port that is not a number" "is not a number" "$qargs" "nbd://localhost:x/"

fails "attach refuses a non-NBD URI" "is not an NBD URI" "$attach" "/dev/sda"
fails "attach refuses a URI without socket=" "no socket= parameter" "$attach" "nbd+unix:///x"
fails "attach refuses TLS URIs" "TLS is not handled" "$attach" "nbds://localhost/"
fails "attach refuses a port that is not a number" "is not a number" "$attach" "nbd://localhost:x/"
out=$("$attach" 2>&1 >/dev/null)
is "attach without arguments exits 1 with its usage" "$?:$(printf '%s\n' "$out" | head -n 1 | cut -c1-33)" "1:usage: sect4k-attach URI [DEVICE]"
if [ -d /sys/module/nbd ]; then
  echo "ok $((n + 1)) - attach refuses when the nbd driver is missing # SKIP this host has the nbd driver"; n=$((n + 1))
else
  fails "attach refuses when the nbd driver is missing" "nbd driver is missing" \
    "$attach" "nbd+unix:///?socket=$sock"
fi
# sect4k-attach --scsi: what it refuses before starting a server (the
# disk itself needs target_core_user: linux-*.t test it in the guests).
export SECT4K_ATTACH_STATE=$dir/state SECT4K_SERVER=${SECT4K_SERVER:-$top/sect4k-server}
fails "attach --scsi refuses a non-NBD URI" "is not an NBD URI" "$attach" --scsi /dev/sda
fails "attach --scsi refuses a server that advertises no block sizes" "advertises no block sizes" \
  "$attach" --scsi "nbd+unix:///?socket=$dir/nosize.sock"
fails "attach --scsi names a server it cannot reach" "cannot query" \
  "$attach" --scsi "nbd+unix:///?socket=$dir/none.sock"
fails "attach --scsi refuses a key it sets itself" "sets physical= itself" \
  "$attach" --scsi "nbd+unix:///512e?socket=$sock" physical=512
fails "attach --scsi refuses an alignment-offset= that is not a number" "is not a number of bytes" \
  "$attach" --scsi "nbd+unix:///512e?socket=$sock" alignment-offset=3.5K
fails "attach --scsi refuses a word that is not KEY=VALUE" "is not KEY=VALUE" \
  "$attach" --scsi "nbd+unix:///512e?socket=$sock" write-cache
if [ -x "$SECT4K_SERVER" ] && [ ! -d /sys/module/target_core_user ]; then
  fails "attach --scsi relays the server's one line when the kernel cannot make the disk" \
    "sect4k-server --scsi gave no disk: ." "$attach" --scsi "nbd+unix:///512e?socket=$sock"
  is "attach --scsi leaves no state behind when it fails" "$(ls "$dir/state" 2>/dev/null)" ""
fi
fails "detach refuses a SCSI disk it did not attach" "was not attached by sect4k-attach --scsi" \
  "$attach" --detach /dev/sdzz
echo "1..$n"
