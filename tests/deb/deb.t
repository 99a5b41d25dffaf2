#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# The Debian packages (issue 28): `make deb` builds them from a clean copy
# of the tree (into a temporary DEB_OUT, leaving the tree as it was),
# lintian finds no errors, each package holds what it should, and unpacked
# into a scratch root (dpkg-deb -x) they work: nbdkit loads the plugin and
# the filter by name, sect4k-server and the tools run.
#
# By name means from nbdkit's plugin and filter directories: this test
# does not install into the host (no dpkg -i); it runs nbdkit in a
# private mount namespace (unshare -m, or unshare -rm where it is not
# root) in which those directories are copies holding the scratch root's
# plugin and filter, and skips those checks where no namespace can be made.
. "$(dirname "$0")/../lib.sh"
top=$(cd "$(dirname "$0")/../.." && pwd)
[ -z "${SECT4K_SAN:-}" ] ||
  skip_all "the packages are built without sanitizers: plain make check runs this test"
need dpkg-buildpackage dh lintian dpkg-deb dpkg-parsechangelog git nbdkit nbdinfo pkg-config
git -C "$top" rev-parse --is-inside-work-tree >/dev/null 2>&1 ||
  skip_all "$top is not a git checkout (make deb copies the tracked files)"
plugindir=$(pkg-config --variable=plugindir nbdkit)
filterdir=$(pkg-config --variable=filterdir nbdkit)
[ -n "$plugindir" ] && [ -n "$filterdir" ] || skip_all "pkg-config finds no nbdkit plugindir (nbdkit-plugin-dev)"
version=$(sed -n 's/.*S4K_VERSION "\(.*\)"/\1/p' "$top/include/sect4k/sect4k.h")
arch=$(dpkg --print-architecture)

# ---- make deb --------------------------------------------------------------
out=$tmpdir/out
before=$(git -C "$top" status --porcelain --untracked-files=all)
start=$(date +%s)
env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s -C "$top" deb DEB_OUT="$out" \
  DEB_WORK="$tmpdir/work" > "$tmpdir/deb.log" 2>&1
rc=$?
took=$(($(date +%s) - start))
ok $rc "make deb DEB_OUT=... (took $took s)"
[ $rc = 0 ] || diag "$(tail -n 30 "$tmpdir/deb.log")"
after=$(git -C "$top" status --porcelain --untracked-files=all)
[ "$before" = "$after" ]
ok $? "the working tree is as it was (git status)"
pkgs="nbdkit-sect4k-plugin sect4k-server sect4k-tools"
missing=
for p in $pkgs; do
  [ -f "$out/${p}_${version}_$arch.deb" ] || missing="$missing $p"
done
[ -z "$missing" ] && [ -f "$out/sect4k_${version}_$arch.changes" ]
ok $? "the three packages at version $version (S4K_VERSION) and the .changes are in DEB_OUT${missing:+ (missing:$missing)}"
[ -z "$missing" ] || { done_testing; exit; }
deb () { echo "$out/${1}_${version}_$arch.deb"; }

# ---- lintian ---------------------------------------------------------------
start=$(date +%s)
# Exit status 1: an error tag (--fail-on's default); 2: lintian failed.
lintian --pedantic --display-info "$out/sect4k_${version}_$arch.changes" > "$tmpdir/lintian.log" 2>&1
rc=$?
diag "lintian --pedantic --display-info, $(($(date +%s) - start)) s, exit $rc:"
diag "$(grep -E '^[EWIPXO]:' "$tmpdir/lintian.log" | sort | uniq)"
[ $rc = 0 ] && ! grep -q '^E:' "$tmpdir/lintian.log"
ok $? "lintian: no errors"
[ $rc = 0 ] || diag "$(grep -v '^[EWIPXO]:' "$tmpdir/lintian.log" | tail -n 5)"

# ---- what each package holds -----------------------------------------------
list () { dpkg-deb -c "$(deb "$1")" | awk '{ print $6 }' | sed 's|^\./|/|'; }
holds () {   # holds PACKAGE PATH...: every PATH is in PACKAGE
  pkg=$1; shift
  l=$(list "$pkg") miss=
  for f in "$@"; do printf '%s\n' "$l" | grep -qxF "$f" || miss="$miss $f"; done
  [ -z "$miss" ] || diag "$pkg lacks:$miss"
  [ -z "$miss" ]
}
holds nbdkit-sect4k-plugin "$plugindir/nbdkit-sect4k-plugin.so" "$filterdir/nbdkit-sect4k-filter.so" \
  /usr/share/man/man1/nbdkit-sect4k-plugin.1.gz /usr/share/man/man1/nbdkit-sect4k-filter.1.gz
ok $? "nbdkit-sect4k-plugin: the plugin and the filter in nbdkit's directories, their man pages"
holds sect4k-server /usr/bin/sect4k-server /usr/share/man/man1/sect4k-server.1.gz
ok $? "sect4k-server: the server and its man page"
tools="sect4k-attach sect4k-ctl sect4k-crash sect4k-qemu-args sect4k-stats sect4k-wlog-dump"
set --
for t in $tools; do set -- "$@" "/usr/bin/$t" "/usr/share/man/man1/$t.1.gz"; done
holds sect4k-tools "$@" /usr/share/sect4k/stats.schema.json /usr/share/sect4k/crash-report.schema.json \
  /usr/share/sect4k/cut-report.schema.json
ok $? "sect4k-tools: $tools, their man pages, the JSON schemas"
# Every program on the PATH has its man page in the same package.
nomans=
for p in $pkgs; do
  for b in $(list "$p" | sed -n 's|^/usr/bin/\(.\)|\1|p'); do
    list "$p" | grep -qxF "/usr/share/man/man1/$b.1.gz" || nomans="$nomans $p:$b"
  done
done
[ -z "$nomans" ]
ok $? "every /usr/bin program has a man page${nomans:+ (not:$nomans)}"
dups=$(for p in $pkgs; do list "$p" | grep -v '/$'; done | sort | uniq -d)
[ -z "$dups" ]
ok $? "no file is in two packages${dups:+: $dups}"
field () { dpkg-deb -f "$(deb "$1")" "$2"; }
field nbdkit-sect4k-plugin Depends | grep -q 'nbdkit (>= '
ok $? "the plugin depends on nbdkit: $(field nbdkit-sect4k-plugin Depends)"
pulls=
for p in $pkgs; do
  field "$p" Depends | grep -q qemu && pulls="$pulls $p:Depends"
  field "$p" Recommends | grep -q qemu && pulls="$pulls $p:Recommends"
done
[ -z "$pulls" ]
ok $? "no package depends on or recommends qemu${pulls:+ ($pulls)}"

# ---- unpacked into a scratch root ------------------------------------------
root=$tmpdir/root
for p in $pkgs; do dpkg-deb -x "$(deb "$p")" "$root" || break; done
ok $? "dpkg-deb -x into a scratch root"
v=$("$root/usr/bin/sect4k-server" --version 2>&1)
[ "$v" = "sect4k-server $version" ]
ok $? "sect4k-server --version from the scratch root: $v"
plugin=$root$plugindir/nbdkit-sect4k-plugin.so
v=$(nbdkit --dump-plugin "$plugin" 2>&1)
printf '%s\n' "$v" | grep -qx 'name=sect4k' && printf '%s\n' "$v" | grep -qx "version=$version"
ok $? "nbdkit --dump-plugin on the packaged plugin: name=sect4k, version=$version"

# by_name CMD...: CMD in a private mount namespace whose nbdkit plugin and
# filter directories hold the scratch root's plugin and filter (and
# nbdkit's memory plugin, for the filter).
mkdir -p "$tmpdir/pd" "$tmpdir/fd"
cp "$plugin" "$tmpdir/pd/" && cp "$root$filterdir/nbdkit-sect4k-filter.so" "$tmpdir/fd/" &&
  cp "$plugindir/nbdkit-memory-plugin.so" "$tmpdir/pd/"
by_name () {
  $ns sh -c 'mount --bind "$1" "$2" && mount --bind "$3" "$4" && shift 4 && exec "$@"' - \
    "$tmpdir/pd" "$plugindir" "$tmpdir/fd" "$filterdir" "$@"
}
ns=
for try in "unshare -m" "unshare -rm"; do
  if [ -z "$ns" ] && command -v unshare >/dev/null &&
     $try sh -c 'mount --bind "$1" "$2"' - "$tmpdir/pd" "$plugindir" 2>/dev/null; then
    ns=$try
  fi
done
if [ -n "$ns" ]; then
  diag "by name: nbdkit in a private mount namespace ($ns) with the packaged plugin and filter in $plugindir and $filterdir; nothing is installed on this host"
  s=$(by_name nbdkit -U - sect4k 1M --run 'nbdinfo --size "$uri"' 2>&1)
  [ "$s" = 1048576 ]
  ok $? "nbdkit -U - sect4k 1M --run 'nbdinfo --size \$uri' finds the plugin by name: $s"
  j=$(by_name nbdkit -U - sect4k 1M model=512e-xp --run 'nbdinfo --json "$uri"' 2>&1)
  printf '%s\n' "$j" | grep -q '"block_size_preferred": 4096' &&
    printf '%s\n' "$j" | grep -q 'alignment offset 3584'
  rc=$?
  ok $rc "nbdkit -U - sect4k 1M model=512e-xp: preferred block size 4096, alignment offset 3584"
  [ $rc = 0 ] || diag "$j"
  j=$(by_name nbdkit -U - --filter=sect4k memory 1M physical=4096 --run 'nbdinfo --json "$uri"' 2>&1)
  printf '%s\n' "$j" | grep -q '"block_size_preferred": 4096'
  rc=$?
  ok $rc "nbdkit -U - --filter=sect4k memory 1M physical=4096: preferred block size 4096"
  [ $rc = 0 ] || diag "$j"
else
  ok 0 "# SKIP by name: no private mount namespace here (unshare -m needs root, unshare -rm user namespaces)"
fi

# The tools, from the scratch root, against the packaged plugin.
bin=$root/usr/bin
nbdkit -U "$tmpdir/s.sock" -P "$tmpdir/nbdkit.pid" "$plugin" 1M model=512e \
  statsfile="$tmpdir/st.json" control="$tmpdir/ctl.sock"
wait_pid=$(cat "$tmpdir/nbdkit.pid" 2>/dev/null)
nbdkit_pids="$nbdkit_pids $wait_pid"
a=$("$bin/sect4k-qemu-args" "nbd+unix:///?socket=$tmpdir/s.sock" 2>&1)
printf '%s\n' "$a" | grep -q 'logical_block_size=512,physical_block_size=4096'
ok $? "sect4k-qemu-args: $a"
c=$("$bin/sect4k-ctl" "$tmpdir/ctl.sock" status 2>&1)
ok $? "sect4k-ctl PATH status: $(printf '%s' "$c" | head -n 1)"
kill "$wait_pid"
for _ in $(seq 100); do kill -0 "$wait_pid" 2>/dev/null || break; sleep 0.05; done
st=$("$bin/sect4k-stats" "$tmpdir/st.json" 2>&1)
ok $? "sect4k-stats on the plugin's statsfile: $(printf '%s' "$st" | head -n 1)"
"$bin/sect4k-attach" --help | grep -q 'sect4k-attach --scsi URI'
ok $? "sect4k-attach --help"
"$bin/sect4k-crash" --help 2>&1 | grep -q 'Usage: sect4k-crash'
ok $? "sect4k-crash --help (the program itself, not the in-tree wrapper)"
"$bin/sect4k-wlog-dump" "$tmpdir/no-such-log" 2>"$tmpdir/wlog.err"
[ $? = 1 ] && grep -q 'sect4k-wlog-dump: ' "$tmpdir/wlog.err"
ok $? "sect4k-wlog-dump on a missing log: exit 1 and $(cat "$tmpdir/wlog.err")"
done_testing
