#!/bin/bash
# The engine's asynchronous requests over the file store, from two event
# loops with many requests each (see tests/file/aio.c), buffered and
# O_DIRECT (and the memory store, which answers at once), in a directory
# on the build's file system.
. "$(dirname "$0")/../lib.sh"
prog=$SECT4K_BUILD/tests/file-aio
[ -x "$prog" ] || skip_all "$prog is not built"
dir=$(mktemp -d "$SECT4K_BUILD/file-aio.XXXXXX")
timeout 300 "$prog" "$dir" direct
st=$?
[ $st = 124 ] && echo "Bail out! file-aio did not finish in 300 s"
rm -rf "$dir"
exit $st
