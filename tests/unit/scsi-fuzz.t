#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The SCSI fuzz corpus (tests/unit/scsi-corpus: seeds and inputs that once
# broke something) replayed through the fuzz target built without
# libFuzzer; it aborts on a broken invariant.  `make fuzz-scsi` fuzzes.
. "$(dirname "$0")/../lib.sh"
replay=$SECT4K_BUILD/tests/unit-scsi-fuzz
[ -x "$replay" ] || skip_all "$replay is not built"
corpus=$(dirname "$0")/scsi-corpus
n=0 failed=0
for f in "$corpus"/*; do
  [ -f "$f" ] || continue
  n=$((n + 1))
  if ! out=$("$replay" "$f" 2>&1); then
    failed=$((failed + 1))
    diag "$(basename "$f"): $out"
  fi
done
[ $failed -eq 0 ]
ok $? "every input of the corpus keeps the invariants ($failed of $n failed)"
[ $n -gt 50 ]
ok $? "the corpus has inputs ($n)"
done_testing
