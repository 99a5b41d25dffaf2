#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# The engine's asynchronous requests over the file store, from two event
# loops with many requests each (see tests/file/aio.c), buffered and
# O_DIRECT (and the memory store, which answers at once), in a directory
# on the build's file system; buffered once more on tmpfs, where zeroes
# fall back to the synchronous path (no FALLOC_FL_ZERO_RANGE there).
. "$(dirname "$0")/../lib.sh"
prog=$SECT4K_BUILD/tests/file-aio
[ -x "$prog" ] || skip_all "$prog is not built"
dir=$(mktemp -d "$SECT4K_BUILD/file-aio.XXXXXX")
shm=
[ "$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ] && shm=$(mktemp -d /dev/shm/sect4k-aio.XXXXXX)
[ -n "$shm" ] || diag "no tmpfs at /dev/shm: the synchronous zero fallback is not run here"
timeout 300 "$prog" "$dir" direct $shm
st=$?
[ $st = 124 ] && echo "Bail out! file-aio did not finish in 300 s"
rm -rf "$dir" ${shm:+"$shm"}
exit $st
