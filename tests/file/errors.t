#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# file= errors: each bad case stops nbdkit with exit 1 and one line naming
# what is wrong; a block device takes its own size; direct=true refused
# where O_DIRECT cannot work; ENOSPC from a full tmpfs reaches the client
# as ENOSPC while the server stays up and flushed data stays; a file that
# cannot be opened for writing (or nbdkit -r) is served read-only.
. "$(dirname "$0")/../lib.sh"
need nbdkit nbdinfo
py=/usr/bin/python3
$py -c 'import nbd' 2>/dev/null || skip_all "python3-libnbd is not installed"
dir=$(mktemp -d "$SECT4K_BUILD/file-errors.XXXXXX")
mnt=
loop=
cleanup_file () {
  [ -n "$loop" ] && losetup -d "$loop"
  [ -n "$mnt" ] && umount "$mnt" 2>/dev/null
  rm -rf "$dir"
}
trap 'cleanup_file; cleanup' EXIT

# Under ASan, nbdkit deadlocks in exit() once strerror() has run (a
# glibc/libasan/libp11-kit freelocale lock; nbdkit's own file plugin does
# the same): there a bounded wait, and exit 124 after the message counts
# as exit 1.
asan_exit () {
  [ "$1" = 124 ] && [ "${SECT4K_SAN:-}" = asan ] && echo 1 || echo "$1"
}
stop_bounded () {
  kill "$pid" 2>/dev/null
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    diag "nbdkit hangs in exit (SECT4K_SAN=${SECT4K_SAN:-}): killed"
    kill -9 "$pid"
  fi
  wait "$pid" 2>/dev/null
}

nbdkit_t () { timeout -k 5 60 env $(sanitizer_env) nbdkit "$@"; }

# bad EXPECTED-SUBSTRING KEY=VALUE...
bad () {
  want=$1; shift
  out=$(timeout -k 5 20 env $(sanitizer_env) nbdkit -U - "$SECT4K_PLUGIN" "$@" --run true 2>&1)
  st=$(asan_exit $?)
  lines=$(printf '%s\n' "$out" | grep -c 'error')
  printf '%s' "$out" | grep -qF -- "$want"
  found=$?
  [ "$st" = 1 ] && [ "$found" = 0 ] && [ "$lines" = 1 ]
  ok $? "refused ($*): exit $st, one line naming '$want'"
  [ "$st" = 1 ] && [ "$found" = 0 ] && [ "$lines" = 1 ] || diag "$out"
}

bad "does not exist (give size=" file="$dir/none.img"
bad "cannot create it: No such file or directory" file="$dir/no/dir/x.img" size=1M
truncate -s 4M "$dir/d.img"
bad "smaller than file=$dir/d.img (4194304 bytes); refusing to truncate" file="$dir/d.img" size=1M
[ "$(stat -c %s "$dir/d.img")" = 4194304 ]; ok $? "nothing was truncated"
truncate -s 1049088 "$dir/odd.img"
bad "its size 1049088 is not a multiple of logical=4096" file="$dir/odd.img" model=4kn
: > "$dir/empty.img"
bad "the file is empty" file="$dir/empty.img"
bad "Is a directory" file="$dir"
bad "not a regular file or block device" file=/dev/null
bad "direct=true: needs file=" size=1M direct=true
bad "io=fast: must be uring or sync" file="$dir/d.img" io=fast

out=$(nbdkit_t -U - "$SECT4K_PLUGIN" file="$dir/d.img" size=8M --run 'nbdinfo --size "$uri"' 2>&1)
[ "$out" = 8388608 ] && [ "$(stat -c %s "$dir/d.img")" = 8388608 ] &&
  [ "$(stat -c %b "$dir/d.img")" = 0 ]
ok $? "a larger size= grows the file sparsely ($out)"
out=$(nbdkit_t -U - "$SECT4K_PLUGIN" file="$dir/d.img" --run 'nbdinfo --size "$uri"' 2>&1)
[ "$out" = 8388608 ]; ok $? "without size= the file's size is served ($out)"

# Permissions, as an unprivileged user (root ignores them).
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
  chmod 755 "$dir"
  printf 'P%.0s' $(seq 4096) > "$dir/perm.img"
  chmod 644 "$dir/perm.img"
  cp "$dir/perm.img" "$dir/secret.img"; chmod 600 "$dir/secret.img"
  as_nobody () { setpriv --reuid=nobody --regid=nogroup --clear-groups "$@"; }
  # No -v: nbdkit's debug lines would interleave with the client's answer.
  out=$(as_nobody timeout -k 5 60 env $(sanitizer_env) nbdkit -U - "$SECT4K_PLUGIN" \
    file="$dir/perm.img" --run "$py -c 'import nbd,sys; h=nbd.NBD(); h.connect_uri(sys.argv[1]); print(h.is_read_only(), h.pread(512, 0) == b\"P\" * 512)' \$uri" 2>&1)
  printf '%s\n' "$out" | grep -q "True$"
  ok $? "a file the user cannot write is served for reading ($(printf '%s' "$out" | grep '^[TF]'))"
  printf '%s\n' "$out" | grep -q "^True True$"
  ok $? "... and the server says it is read-only"
  out=$(as_nobody timeout -k 5 20 env $(sanitizer_env) nbdkit -U - "$SECT4K_PLUGIN" \
    file="$dir/secret.img" --run true 2>&1)
  st=$(asan_exit $?)
  [ "$st" = 1 ] && printf '%s' "$out" | grep -q "file=$dir/secret.img: cannot open it: Permission denied"
  ok $? "a file the user cannot read: exit $st, one line: $out"
  out=$(as_nobody timeout -k 5 20 env $(sanitizer_env) nbdkit -U - "$SECT4K_PLUGIN" \
    file="$dir/new.img" size=1M --run true 2>&1)
  st=$(asan_exit $?)
  [ "$st" = 1 ] && printf '%s' "$out" | grep -q "file=$dir/new.img: cannot create it: Permission denied"
  ok $? "a directory the user cannot write to: exit $st, one line: $out"
fi

# A block device: a loop device with 4 KiB sectors.
truncate -s 8M "$dir/loop.img"
if loop=$(losetup -f --show --sector-size 4096 "$dir/loop.img" 2>/dev/null); then
  out=$(nbdkit_t -U - "$SECT4K_PLUGIN" file="$loop" model=4kn --run 'nbdinfo --size "$uri"' 2>&1)
  [ "$out" = 8388608 ]; ok $? "a block device serves its own size ($out)"
  bad "size=8388608: not allowed with a block device" file="$loop" size=8M
  bad "needs O_DIRECT I/O in multiples of 4096 bytes" file="$loop" model=512e-xp direct=true
  cat > "$dir/loop.py" <<'PY'
import nbd, sys
h = nbd.NBD(); h.connect_uri(sys.argv[1])
h.pwrite(b"q" * 8192, 4096); h.zero(4096, 16384); h.trim(8192, 65536); h.flush()
print(h.pread(8192, 4096) == b"q" * 8192)
PY
  out=$(nbdkit_t -U - "$SECT4K_PLUGIN" file="$loop" model=4kn direct=true \
    --run "$py $dir/loop.py \$uri" 2>&1)
  [ "$out" = True ]; ok $? "direct=true on a 4k block device: write, zero, trim, read back ($out)"
  cmp -s -i 4096:0 -n 8192 "$dir/loop.img" <(printf 'q%.0s' $(seq 8192))
  ok $? "the data reached the block device's backing file"
else
  diag "losetup failed: block device cases skipped"
  loop=
fi

# ENOSPC: a 1 MiB tmpfs under an 8 MiB device.
mnt=$dir/small
mkdir -p "$mnt"
if mount -t tmpfs -o size=1M tmpfs "$mnt" 2>/dev/null; then
  start_nbdkit enospc "$SECT4K_PLUGIN" file="$mnt/d.img" size=8M model=512e || exit 1
  out=$($py - "$uri" <<'PY' 2>&1
import errno, nbd, sys
h = nbd.NBD(); h.connect_uri(sys.argv[1])
h.pwrite(b"k" * 65536, 0); h.flush()
err = 0
try:
    # Sector by sector: a failed write writes nothing, so this fills it.
    for off in range(65536, 8 << 20, 4096):
        h.pwrite(b"z" * 4096, off)
except nbd.Error as e:
    err = e.errnum
try:
    h.pwrite(b"r" * 512, 4 << 20 | 512)     # an RMW into a full disk
    rmw = 0
except nbd.Error as e:
    rmw = e.errnum
print(err == errno.ENOSPC, rmw == errno.ENOSPC, h.pread(65536, 0) == b"k" * 65536)
h.shutdown()
PY
)
  [ "$out" = "True True True" ]
  ok $? "ENOSPC on a full tmpfs: the client gets ENOSPC, RMW too, flushed data intact ($out)"
  kill -0 "$pid"; ok $? "the server is still up"
  n=$(grep -c "No space left on device" "$tmpdir/enospc.log")
  [ "$n" -ge 1 ]; ok $? "the log names ENOSPC ($n lines)"
  stop_bounded
  umount "$mnt"

  # Read-only: a file on a read-only mount.
  mount -t tmpfs -o size=1M tmpfs "$mnt"
  printf 'R%.0s' $(seq 4096) > "$mnt/ro.img"
  mount -o remount,ro "$mnt"
  for r in "" -r; do
    start_nbdkit ro$r -v $r "$SECT4K_PLUGIN" file="$mnt/ro.img" model=512e || exit 1
    out=$($py - "$uri" <<'PY' 2>&1
import errno, nbd, sys
h = nbd.NBD(); h.connect_uri(sys.argv[1])
got = h.pread(4096, 0) == b"R" * 4096
try:
    h.pwrite(b"w" * 512, 0); e = 0
except nbd.Error as ex:
    e = ex.errnum
print(got, e == errno.EPERM, h.pread(4096, 0) == b"R" * 4096)
h.shutdown()
PY
)
    [ "$out" = "True True True" ]
    ok $? "read-only mount${r:+ and nbdkit -r}: reads work, writes get EPERM, nothing changes ($out)"
    stop_bounded
    # The plugin logs the store's line.
    grep -q "sect4k: file=$mnt/ro.img: .*read-only: file=.* cannot be opened for writing (Read-only file system)" \
      "$tmpdir/ro$r.log"
    ok $? "read-only mount${r:+ and nbdkit -r}: the log says read-only and why"
    grep -q "sect4k: file=$mnt/ro.img: .*io_uring" "$tmpdir/ro$r.log"
    ok $? "the log says the store reads through io_uring"
  done
  start_nbdkit sync -v "$SECT4K_PLUGIN" file="$mnt/ro.img" io=sync || exit 1
  stop_bounded
  grep -q "sect4k: file=$mnt/ro.img: .*pread/pwrite (io=sync)" "$tmpdir/sync.log"
  ok $? "io=sync: one debug line says pread/pwrite and why"
  umount "$mnt"
  mnt=
else
  diag "mount -t tmpfs failed (not root?): ENOSPC and read-only cases skipped"
  mnt=
fi
done_testing
