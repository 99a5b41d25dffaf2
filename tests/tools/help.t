#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Every tool (scripts/ and sect4k-server) answers --help with its usage on
# standard output, nothing on standard error, and exit status 0; and
# -h alike where the tool takes it: the first line is the usage or the
# tool's synopsis, not a program's it runs (nbdkit's, apt-get's).
# install-deps --help runs no apt-get (a stub here records any call).
# A tool added to scripts/ is found here by itself.
. "$(dirname "$0")/../lib.sh"
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${SECT4K_BUILD:-$top/build/default}
need_server
mkdir "$tmpdir/bin"
printf '#!/bin/sh\necho "$*" >> "%s/apt-called"\nexit 1\n' "$tmpdir" > "$tmpdir/bin/apt-get"
chmod +x "$tmpdir/bin/apt-get"
PATH=$tmpdir/bin:$PATH

tools="$server $build/sect4k-wlog-dump $top/scripts/install-deps"
for t in "$top"/scripts/sect4k-*; do
  [ -f "$t" ] && [ -x "$t" ] && tools="$tools $t"
done
for t in $tools; do
  name=$(basename "$t")
  for opt in --help -h; do
    # -h is not --help for sect4k-server (nbdkit's -h is --help, but
    # sect4k-server's options are long).
    [ "$name" = sect4k-server ] && [ "$opt" = -h ] && continue
    rm -f "$tmpdir/apt-called"
    timeout 30 "$t" "$opt" </dev/null >"$tmpdir/out" 2>"$tmpdir/err"
    rc=$?
    [ $rc = 0 ] && [ -s "$tmpdir/out" ] && [ ! -s "$tmpdir/err" ] &&
      head -n 1 "$tmpdir/out" | grep -Eqi "^(usage: *)?[^ ]*$name" &&
      [ ! -e "$tmpdir/apt-called" ]
    ok $? "$name $opt: exit $rc, $(wc -l <"$tmpdir/out") lines on stdout, $(wc -c <"$tmpdir/err") bytes on stderr$([ -e "$tmpdir/apt-called" ] && echo ", ran apt-get $(cat "$tmpdir/apt-called")")"
  done
done
done_testing
