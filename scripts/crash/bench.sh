#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# make bench-crash: states checked per second by sect4k-crash for a 64 MiB
# 512e device, with a trivial checker (true, then nbdinfo, which connects
# and negotiates).  The log: 100 flush epochs of 4 unflushed 512-byte and
# 4 KiB writes at random places, written by tests/crash/wlogfmt.py.
set -e
crash=$1
here=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 - "$tmp/bench.log" "$here/tests/crash" <<'PY'
import random, sys
sys.path.insert(0, sys.argv[2])
import wlogfmt
size = 64 << 20
w = wlogfmt.LogWriter(sys.argv[1], size, 512, 4096)
rnd = random.Random(1)
for epoch in range(100):
    for i in range(4):
        n = rnd.choice((512, 4096))
        off = rnd.randrange(size // n) * n
        w.write(off, bytes([rnd.randrange(256)]) * n)
    w.flush()
w.close()
PY
for checker in true "nbdinfo --size \$SECT4K_URI"; do
  "$crash" "$tmp/bench.log" --geometry 512e --torn garbage --states 20 \
    -- sh -c "$checker >/dev/null" | head -1 |
  sed -n 's/.*: \([0-9]*\) crash points, \([0-9]*\) states in \([0-9.]*\)s.*/\1 \2 \3/p' |
  while read cps states secs; do
    echo "bench-crash: 64 MiB 512e, torn=garbage, checker sh -c '$checker': $states states ($cps crash points) in ${secs}s: $(echo "$states / $secs" | bc) states/s, $(echo "$states * 60 / $secs" | bc) per minute"
  done
done
