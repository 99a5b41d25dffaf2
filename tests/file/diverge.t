#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# The synchronous and the asynchronous driver of the engine's one request
# plan give the same results, bytes, extents and statistics for the same
# random script, on the memory and the file store (see
# tests/file/diverge.c), in a directory on the build's file system.
. "$(dirname "$0")/../lib.sh"
prog=$SECT4K_BUILD/tests/file-diverge
[ -x "$prog" ] || skip_all "$prog is not built"
dir=$(mktemp -d "$SECT4K_BUILD/file-diverge.XXXXXX")
timeout 600 "$prog" "$dir"
st=$?
[ $st = 124 ] && echo "Bail out! file-diverge did not finish in 600 s"
rm -rf "$dir"
exit $st
