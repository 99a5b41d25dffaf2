#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# qemu's NBD client as a second real client: it reads the block sizes and
# does its own read-modify-write below the minimum, so unaligned writes
# against a 4kn export succeed and the server never sees a misaligned
# request (strict=true would refuse and log it).
. "$(dirname "$0")/../lib.sh"
need nbdkit qemu-io

qio () { qemu-io -f raw "$uri" "$@" 2>&1; }

start_nbdkit qemu "$SECT4K_PLUGIN" size=16M model=4kn || exit 1
out=$(qio -c 'write -P 0xab 512 1000' -c 'write -P 0xcd 8191 2' \
          -c 'read -P 0 0 512' -c 'read -P 0xab 512 1000' \
          -c 'read -P 0 1512 6679' -c 'read -P 0xcd 8191 2' \
          -c 'read -P 0 8193 4095')
st=$?
[ $st = 0 ] && ! printf '%s' "$out" | grep -qiE 'error|fail|mismatch|pattern'
ok $? "qemu-io: unaligned writes on 4kn succeed and read back exactly"
[ $st = 0 ] || diag "$out"
stop_nbdkit
! grep -q 'refused' "$tmpdir/qemu.log"
ok $? "the server saw no misaligned request (qemu aligned them itself)"

# 512e: qemu aligns to 512 only, so the server does the RMW.
start_nbdkit qemu512e "$SECT4K_PLUGIN" size=16M model=512e -v -D sect4k.rmw=1 || exit 1
out=$(qio -c 'write -P 0x5a 1536 512' -c 'read -P 0x5a 1536 512' -c 'read -P 0 0 1536')
st=$?
[ $st = 0 ] && ! printf '%s' "$out" | grep -qiE 'error|fail|mismatch|pattern'
ok $? "qemu-io: a 512-byte write on 512e reads back"
stop_nbdkit
grep -q 'rmw: write offset 1536 length 512: physical sector 0' "$tmpdir/qemu512e.log"
ok $? "the server read-modify-wrote physical sector 0 for it"
done_testing
