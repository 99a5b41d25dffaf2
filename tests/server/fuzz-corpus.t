#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# The fuzz regression corpus (tests/server/corpus: seeds and inputs that
# once broke something) replayed through the fuzz target built with the
# normal compiler (and the sanitizers under make check-asan).  `make fuzz`
# runs libFuzzer itself.
. "$(dirname "$0")/../lib.sh"
replay=${SECT4K_FUZZ_REPLAY:-$SECT4K_BUILD/server/fuzz-replay}
[ -x "$replay" ] || skip_all "$replay is not built"
corpus=$(dirname "$0")/corpus
n=0
for f in "$corpus"/*; do
  [ -f "$f" ] || continue
  n=$((n + 1))
  out=$("$replay" "$f" 2>&1)
  ok $? "$(basename "$f")"
  [ -z "$out" ] || diag "$out"
done
[ $n -gt 10 ]
ok $? "the corpus has inputs ($n)"
done_testing
