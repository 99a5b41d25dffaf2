# SPDX-License-Identifier: BSD-3-Clause
# Shared by tests/plugin/torn-concurrent.t and tests/server/torn-concurrent.t
# (issue 21): tests/plugin/torn.c against one front end, memory and file
# stores, strict=true and false.  Each read's logical sectors must be all
# zero or one whole write's: no mix of two writes, or of a write and
# zeroes.  200,000 reads a case on the memory store (lock-free reads, the
# ones that tore), 50,000 on the file store (reads under sector locks,
# slower): 500,000 a front end, a million over both; a tenth of that
# under a sanitizer, several times slower.
# usage: torn_cases START-FUNCTION, which serves its arguments (keys).
client=$SECT4K_BUILD/tests/client-torn
[ -x "$client" ] || skip_all "$client is not built"
scale=1
[ -n "${SECT4K_SAN:-}" ] && scale=10

torn_cases () {
  local start=$1 store strict name reads
  for store in memory file; do
    if [ $store = memory ]; then reads=$((200000 / scale)); else reads=$((50000 / scale)); fi
    for strict in true false; do
      name=torn-$store-$strict
      local keys="size=16M model=512e-xp strict=$strict"
      [ $store = file ] && keys="$keys file=$tmpdir/$name.img"
      $start "$name" $keys || exit 1
      # 8 physical sectors from the first boundary (3584): 64 shared LBAs.
      timeout 120 "$client" "$uri" 512 4096 3584 8 $reads 8 16 | sed "s/^/# /"
      st=${PIPESTATUS[0]}
      [ "$st" != 124 ] || diag "the client hung (killed after 120 s)"
      ok $st "512e-xp, $store store, strict=$strict: 8 connections x QD16, $reads reads, no torn logical sector"
      stop; sst=$?
      [ "$sst" = 0 ] || [ "$sst" = 143 ]
      ok $? "exited cleanly ($sst)"
      [ "$sst" = 0 ] || [ "$sst" = 143 ] || diag "$(tail -30 "$tmpdir/$name.log")"
    done
  done
}
