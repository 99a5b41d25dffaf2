#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# The file store under the engine against a model (see tests/file/store.c),
# in a directory on the build's file system (tmpfs may refuse O_DIRECT).
. "$(dirname "$0")/../lib.sh"
prog=$SECT4K_BUILD/tests/file-store
[ -x "$prog" ] || skip_all "$prog is not built"
dir=$(mktemp -d "$SECT4K_BUILD/file-store.XXXXXX")
"$prog" "$dir"
st=$?
rm -rf "$dir"
exit $st
