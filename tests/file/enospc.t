#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# ENOSPC loses nothing: on a full tmpfs, a 512-byte write into a physical
# sector that is half allocated (alignment-offset=2048 puts sector 1 on
# the second half of page 0 and the first half of page 1, a hole) fails
# with ENOSPC and leaves the sector as it was, in the file and as read
# back; with room made, the same write then succeeds.  A trim frees page 1
# again: on a full file system the same write then fails and changes
# nothing again (the store knows the sector is no longer allocated).
# Through the plugin and sect4k-server, io=uring, io=sync and direct=true.
. "$(dirname "$0")/../lib.sh"
need nbdkit
py=/usr/bin/python3
$py -c 'import nbd' 2>/dev/null || skip_all "python3-libnbd is not installed"
need_server
[ "$(id -u)" = 0 ] || skip_all "mounting a small tmpfs needs root"
mnt=$tmpdir/small
mkdir -p "$mnt"
mount -t tmpfs -o size=256k tmpfs "$mnt" 2>/dev/null ||
  skip_all "mount -t tmpfs refused: cannot make a small full file system"
trap 'umount "$mnt" 2>/dev/null; cleanup' EXIT

# Kills $pid, bounded (nbdkit under ASan can hang in exit after strerror).
stop_bounded () {
  kill "$pid" 2>/dev/null
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
}

# A 64 KiB device whose page 0 holds 'o's and whose page 1 is a hole, on
# a tmpfs filled up to its last page.
fill () {
  rm -f "$mnt"/*
  truncate -s 64k "$mnt/d.img"
  printf 'o%.0s' $(seq 4096) | dd of="$mnt/d.img" conv=notrunc status=none
  dd if=/dev/zero of="$mnt/fill" bs=4k status=none 2>/dev/null
  head -c 8192 "$mnt/d.img" > "$tmpdir/before"
}

cat > "$tmpdir/client.py" <<'PY'
import errno, nbd, os, sys
h = nbd.NBD(); h.connect_uri(sys.argv[1])

def write_error(data):
    """The error a 512-byte write at 2048 gets, or "no error"."""
    try:
        h.pwrite(data, 2048)
        return "no error"
    except nbd.Error as e:
        return errno.errorcode.get(e.errnum, str(e.errnum))

old = h.pread(4096, 2048)
err = write_error(b"n" * 512)
same = h.pread(4096, 2048) == old
with open(sys.argv[3], "rb") as img, open(sys.argv[4], "rb") as before:
    file_same = img.read(8192) == before.read()
os.unlink(sys.argv[2])               # room again: the write now works
h.pwrite(b"n" * 512, 2048)
new = h.pread(4096, 2048) == b"n" * 512 + old[512:]

def fill():
    with open(sys.argv[2], "ab", buffering=0) as f:
        try:
            while True:
                f.write(b"f" * 4096)
        except OSError as e:
            assert e.errno == errno.ENOSPC

fill()
h.trim(8192, 2048)                   # sectors 1 and 2: page 1 is freed
fill()
want = h.pread(4096, 2048)
err2 = write_error(b"t" * 512)
after_trim = want == bytes(4096) and h.pread(4096, 2048) == want
print(err, same, file_same, new, err2, after_trim)
h.shutdown()
PY

# case NAME START-FUNCTION ARGS...
case_ () {
  name=$1 start=$2; shift 2
  fill
  $start "$(echo "$name" | tr ' =' '--')" "$@" || { ok 1 "$name: server started"; return; }
  out=$($py "$tmpdir/client.py" "$uri" "$mnt/fill" "$mnt/d.img" "$tmpdir/before" 2>&1)
  stop_bounded
  [ "$out" = "ENOSPC True True True ENOSPC True" ]
  ok $? "$name: ENOSPC, sector unchanged (read back, and in the file), written once there is room, unchanged again after a trim ($out)"
  # The file: page 0's 'o's up to the trimmed sectors, then zeroes.
  head -c 2048 "$tmpdir/before" > "$tmpdir/want"
  head -c 8192 /dev/zero >> "$tmpdir/want"
  cmp -s <(head -c 10240 "$mnt/d.img") "$tmpdir/want"
  ok $? "$name: the file holds the old bytes, then the trimmed sectors' zeroes"
}

plugin () { name=$1; shift; start_nbdkit "$name" "$SECT4K_PLUGIN" "$@"; }
server () { name=$1; shift; start_server "$name" "$@"; }

geo=(file="$mnt/d.img" logical=512 physical=4096 alignment-offset=2048)
# tmpfs takes O_DIRECT from Linux 6.6 on.
direct=true
: > "$mnt/probe"
$py -c 'import os,sys; os.close(os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECT))' \
  "$mnt/probe" 2>/dev/null || direct=
for io in uring sync; do
  case_ "plugin io=$io" plugin "${geo[@]}" io=$io
  case_ "server io=$io" server "${geo[@]}" io=$io
  if [ -n "$direct" ]; then
    case_ "plugin io=$io direct" plugin "${geo[@]}" io=$io direct=true
    case_ "server io=$io direct" server "${geo[@]}" io=$io direct=true
  else
    diag "tmpfs here refuses O_DIRECT (Linux before 6.6): direct=true cases skipped"
  fi
done
done_testing
