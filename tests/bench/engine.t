#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# make bench-engine's cases, each run once with a few requests and no
# valgrind (scripts/bench/engine-ir --smoke), so that the benchmark the
# docs' instruction counts come from keeps working; and its bad input.
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib.sh"
ir=$here/../../scripts/bench/engine-ir
bin=${SECT4K_BUILD:-$here/../../build/default}/bench-engine
[ -x "$bin" ] || { echo "Bail out! no $bin (make all builds it)"; exit 1; }
env $(sanitizer_env) "$ir" --smoke "$bin" >"$tmpdir/out" 2>&1
ok $? "every case of make bench-engine runs"
diag "$(cat "$tmpdir/out")"
# The smoke run must be able to fail: a binary that fails every case.
"$ir" --smoke false >"$tmpdir/out" 2>&1
[ $? != 0 ] && grep -q 'write4k (none) failed' "$tmpdir/out"
ok $? "a failing case fails the smoke run"
"$bin" 10 write8k >/dev/null 2>"$tmpdir/err"
[ $? = 2 ] && grep -q '^bench-engine: write8k: unknown request kind$' "$tmpdir/err"
ok $? "an unknown request kind is refused"
"$bin" 10 write4k size=3584K >/dev/null 2>"$tmpdir/err"
[ $? = 2 ] && grep -q '^bench-engine: size=3670016: not a multiple of 1 MiB$' "$tmpdir/err"
ok $? "size= that is not whole MiBs is refused"
"$bin" 10 write4k nokey >/dev/null 2>"$tmpdir/err"
[ $? = 1 ] && [ "$(cat "$tmpdir/err")" = "bench-engine: nokey: not KEY=VALUE" ]
ok $? "an argument that is not KEY=VALUE is refused with one line"
done_testing
