#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Every bad parameter stops nbdkit with exit 1 and one line naming the key,
# the value and the rule; --help, --dump-plugin and the magic key work.
. "$(dirname "$0")/../lib.sh"
need nbdkit

# bad EXPECTED-SUBSTRING KEY=VALUE...
bad () {
  want=$1; shift
  out=$(nbdkit_san --exit-with-parent -U - "$SECT4K_PLUGIN" "$@" --run true 2>&1)
  st=$?
  lines=$(printf '%s\n' "$out" | grep -c 'error')
  printf '%s' "$out" | grep -qF -- "$want"
  found=$?
  [ "$st" = 1 ] && [ "$found" = 0 ] && [ "$lines" = 1 ]
  ok $? "refused ($*): exit $st, message names '$want'"
  [ "$st" = 1 ] && [ "$found" = 0 ] || diag "$out"
}
bad "logical=1000" size=1G logical=1000
bad "physical=3000" size=1G physical=3000
bad "physical=512" size=1G logical=4096 physical=512
bad "logical=256" size=1G logical=256
bad "logical=131072" size=1G logical=128K
bad "physical=67108864" size=1G physical=64M
bad "alignment-offset=100" size=1G physical=4096 alignment-offset=100
bad "alignment-offset=4096" size=1G physical=4096 alignment-offset=4096
bad "size=0" size=0
bad "size=1000" size=1000
bad "size=1049088" size=1049088 model=4kn
bad "lowest-aligned=7" size=1G physical=4096 alignment-offset=3584 lowest-aligned=7
bad "foo=bar" size=1G foo=bar
bad "model=520e" size=1G model=520e
bad "size=12X" size=12X
bad "logical=abc" size=1G logical=abc
bad "strict=maybe" size=1G strict=maybe
bad "max-request=1000" size=1G max-request=1000
bad "size: required" logical=512
# The fault keys (issue 11).
bad "write-cache=perhaps" size=1G write-cache=perhaps
bad "write-cache-size=1048576: needs write-cache=true" size=1G write-cache-size=1M
bad "write-cache-size=100: must be at least physical=4096" size=1G model=512e write-cache=true write-cache-size=100
bad "power-cut-after=0" size=1G power-cut-after=0
bad "torn=half" size=1G torn=half
bad "torn=: needs power-cut-after= or control=" size=1G torn=none
bad "seed=x" size=1G seed=x
bad "cut-report=: the path is empty" size=1G cut-report=
bad "bad-sectors=5-2" size=1M bad-sectors=5-2
bad "LBA 2048 is beyond the last LBA 2047" size=1M bad-sectors=7,2048
bad "control=/nonexistent/ctl" size=1M control=/nonexistent/ctl
# Zoned drives (issue 33): the keys, and NBD, which has no zone commands.
bad "zoned=host-managed: NBD has no zone commands (a client would see a plain disk): serve a zoned drive with sect4k-server --scsi or --ublk" \
  size=64M zoned=host-managed zone-size=4M
bad "zone-size=4M: needs zoned=host-managed or zoned=host-aware" size=64M zone-size=4M
bad "zoned=smr: must be host-managed, host-aware or none" size=64M zoned=smr
bad "zoned= and file=/dev/null: not a regular file (the zone state is kept beside the file, in FILE.sect4k-zones)" \
  size=64M zoned=host-managed zone-size=4M file=/dev/null
bad "zone-reformat=true: needs zoned=host-managed or zoned=host-aware" size=64M zone-reformat=true
# The filter too (over nbdkit's memory plugin).
filter=${SECT4K_FILTER:-$(dirname "$SECT4K_PLUGIN")/sect4k-filter.so}
out=$(nbdkit_san --exit-with-parent -U - --filter="$filter" memory 64M \
      zoned=host-managed zone-size=4M --run true 2>&1)
st=$?
printf '%s' "$out" | grep -qF "zoned=host-managed: NBD has no zone commands (a client would see a plain disk): serve a zoned drive with sect4k-server --scsi or --ublk"
ok $(( st != 1 || $? )) "the filter refuses zoned= naming sect4k-server --scsi"
[ "$st" = 1 ] || diag "$out"

. "$(dirname "$0")/../exports-refusals.sh"

help=$(nbdkit_san "$SECT4K_PLUGIN" --help 2>&1)
for key in size= logical= physical= alignment-offset= lowest-aligned= model= export= exports= \
           max-request= strict= file= direct= io= write-cache= write-cache-size= \
           power-cut-after= torn= seed= cut-report= bad-sectors= control= \
           zoned= zone-size= zone-conventional= zone-max-open= zone-max-active=; do
  printf '%s' "$help" | grep -q -- "^$key"
  ok $? "--help lists $key"
done
printf '%s' "$help" | grep -q "default 512"
ok $? "--help gives defaults"

dump=$(nbdkit_san "$SECT4K_PLUGIN" --dump-plugin 2>&1)
printf '%s' "$dump" | grep -q '^sect4k_version=[0-9]' &&
  printf '%s' "$dump" | grep -q '^thread_model=parallel' &&
  printf '%s' "$dump" | grep -q '^sect4k_physical_max=33554432' &&
  printf '%s' "$dump" | grep -q '^sect4k_upstream_partial_writes=yes'
ok $? "--dump-plugin shows version, thread model, limits and capabilities"

# The magic key: 'nbdkit sect4k.so 1G' means size=1G.
need nbdinfo
out=$(nbdkit_san -U - "$SECT4K_PLUGIN" 1G model=4kn --run 'nbdinfo --size "$uri"' 2>&1)
[ "$out" = 1073741824 ]
ok $? "magic key: size given bare ($out)"

# make install puts the plugin where nbdkit finds plugins by name.
if [ -z "${SECT4K_SAN:-}" ]; then
  dest=$tmpdir/root
  make -s -C "$(dirname "$0")/../.." install DESTDIR="$dest" PREFIX=/usr >/dev/null 2>&1
  dir=$(pkg-config --variable=plugindir nbdkit)
  [ -x "$dest$dir/nbdkit-sect4k-plugin.so" ] &&
    [ -f "$dest/usr/share/man/man1/nbdkit-sect4k-plugin.1" ] &&
    nbdkit_san "$dest$dir/nbdkit-sect4k-plugin.so" --version >/dev/null 2>&1
  ok $? "make install DESTDIR=... installs plugin and man page"
  [ "$dir" = "$(nbdkit --dump-config | sed -n 's/^plugindir=//p')" ]
  ok $? "the install directory is the one nbdkit searches ('nbdkit sect4k' works)"
fi
done_testing
