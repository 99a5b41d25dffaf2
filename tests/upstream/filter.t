#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# nbdkit-sect4k-filter over nbdkit's memory and file plugins: the
# geometry reaches the client, the contended-RMW torture passes with
# exact verification (with partial writes over memory, whole-sector RMW
# with upstream-partial-writes=false over file), the statistics count
# the RMWs, and the checks (the plugin's minimum block size) refuse in
# one line.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/up.sh"
need nbdkit nbdinfo python3
filter=${SECT4K_FILTER:-$(dirname "$0")/../../sect4k-filter.so}
[ -f "$filter" ] || skip_all "$filter is not built"
client=$SECT4K_BUILD/tests/client-torture
[ -x "$client" ] || skip_all "$client is not built"
rounds=20
[ "${SECT4K_SAN:-}" = tsan ] && rounds=3

for plugin in memory file; do
  case $plugin in
    memory) args="memory size=64M" ;;
    file) truncate -s 64M "$tmpdir/disk.img"
          args="file $tmpdir/disk.img upstream-partial-writes=false" ;;
  esac
  start_nbdkit f-$plugin --filter="$filter" $args model=512e-xp \
    statsfile="$tmpdir/$plugin.json" || exit 1
  nbdinfo "$uri" >"$tmpdir/info" 2>&1
  grep -q "block_size_minimum: 512" "$tmpdir/info" &&
    grep -q "block_size_preferred: 4096" "$tmpdir/info" &&
    grep -q "alignment offset 3584 (lowest aligned LBA 7)" "$tmpdir/info" &&
    grep -q "export-size: 67108864" "$tmpdir/info"
  ok $? "over $plugin: 512e-xp geometry, the plugin's size"
  [ $? = 0 ] || diag "$(cat "$tmpdir/info")"
  timeout 300 "$client" "$uri" 512 4096 3584 256 $rounds 16 | sed "s/^/# /"
  ok ${PIPESTATUS[0]} "over $plugin: 512e-xp torture"
  stop_nbdkit; st=$?
  [ "$st" = 0 ] || [ "$st" = 143 ]
  ok $? "over $plugin: nbdkit exited cleanly ($st)"
  python3 - "$tmpdir/$plugin.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
w = d["ops"]["write"]
sys.exit(0 if w["rmw_sectors"] > 0 and w["requests"] > 0 else 1)
PY
  ok $? "over $plugin: the statistics count the RMWs"
done

# The plugin's own geometry must fit.
rm -f "$tmpdir/r.sock"
timeout 20 env $(sanitizer_env) nbdkit -f -U "$tmpdir/r.sock" --filter="$filter" \
  --filter=blocksize-policy memory 64M blocksize-minimum=8192 \
  blocksize-preferred=8192 physical=4096 >"$tmpdir/r.log" 2>&1 &
rpid=$!
nbdkit_pids="$nbdkit_pids $rpid"
for _ in $(seq 100); do [ -S "$tmpdir/r.sock" ] && break; sleep 0.05; done
nbdinfo "nbd+unix:///?socket=$tmpdir/r.sock" >/dev/null 2>&1
[ $? != 0 ] && grep -q "minimum block size 8192 does not divide physical=4096" "$tmpdir/r.log"
ok $? "a plugin whose minimum block size does not divide physical is refused"
diag "$(grep -m1 "minimum block size" "$tmpdir/r.log")"
kill $rpid 2>/dev/null; wait $rpid 2>/dev/null

# The filter serves one device: export= and exports= are refused in one
# line, and its --help does not offer them.
for key in export=a exports=512n; do
  out=$(timeout 20 env $(sanitizer_env) nbdkit --filter="$filter" memory 1M \
    "$key" --run true 2>&1)
  [ $? != 0 ] && grep -q "${key%%=*}=: the sect4k filter serves one device" <<<"$out"
  ok $? "$key is refused in one line"
done
help=$(env $(sanitizer_env) nbdkit --filter="$filter" memory --help 2>&1)
grep -q '^physical=' <<<"$help" && ! grep -q '^export' <<<"$help"
ok $? "the filter's --help offers physical= but not export= or exports="
done_testing
