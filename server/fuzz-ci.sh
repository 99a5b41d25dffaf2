#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# CI's fuzzing campaign (`make fuzz-ci`, run by .ci/run): libFuzzer on the
# protocol parser for SECONDS, starting from the regression corpus.  A
# crash, leak, timeout or broken bound fails it; each input libFuzzer saved
# is printed as a path and as base64 (a CI machine is thrown away), with
# how to replay it.  New interesting inputs stay in build/fuzz/ci/corpus:
# minimise them into tests/server/corpus by hand (see server/README.md).
# Usage: server/fuzz-ci.sh FUZZ-BINARY SECONDS
# The SCSI fuzzer (tests/unit/scsi-fuzz.mk) runs it too, with FUZZ_CORPUS,
# FUZZ_DICT (empty: none), FUZZ_CI_DIR and FUZZ_REPLAY naming its own.
set -u
bin=$1 seconds=$2
dir=${FUZZ_CI_DIR:-build/fuzz/ci}
corpus=${FUZZ_CORPUS:-tests/server/corpus}
dict=${FUZZ_DICT-server/fuzz.dict}
replay=${FUZZ_REPLAY:-build/default/server/fuzz-replay crash   # or build/fuzz/fuzz-server crash (make fuzz builds it)}
rm -rf "$dir"
mkdir -p "$dir/corpus" "$dir/crashes"
log=$dir/fuzz.log
echo "fuzz-ci: $bin for ${seconds}s from $corpus (log: $log)"
# A wide -timeout: a loaded CI machine must not make a slow input a hang.
"$bin" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=2048 \
  -max_len=131072 -print_final_stats=1 -artifact_prefix="$dir/crashes/" \
  ${dict:+-dict="$dict"} "$dir/corpus" "$corpus" >"$log" 2>&1
st=$?
grep -m1 'INFO: Seed:' "$log"
grep -E '^stat::(number_of_executed_units|average_exec_per_sec|new_units_added)' "$log"
# Slow units are saved too, but are no failure.
found=$(find "$dir/crashes" -type f ! -name 'slow-unit-*' | sort)
if [ "$st" = 0 ] && [ -z "$found" ]; then
  echo "fuzz-ci: no crash in ${seconds}s"
  exit 0
fi
echo "fuzz-ci: FAILED (libFuzzer exit $st); the end of its log:"
tail -n 120 "$log"
for f in $found; do
  echo "fuzz-ci: input saved as $f ($(stat -c %s "$f") bytes); to replay it, paste:"
  echo "base64 -d > crash <<'B64'"
  base64 -w 76 "$f"
  echo "B64"
  echo "$replay"
done
exit 1
