# SPDX-License-Identifier: BSD-3-Clause
# The named-export refusals both front ends share (issue 13): each bad
# combination is one line naming the export, the key and the rule.
# Sourced by tests/plugin/params.t and tests/server/params.t, which define
# bad MESSAGE ARGS... and $tmpdir.
touch "$tmpdir/one.img"
bad "export=a: duplicate export name" size=1M export=a export=a
bad "export=512n: duplicate export name" size=1M exports=512n,4kn export=512n
bad "export=a: exports=512n cannot vary per export" size=1M export=a exports=512n
bad "export=b: file=$tmpdir/one.img is also export a's" size=1M export=a file="$tmpdir/one.img" export=b file="$tmpdir/one.img"
bad "export=b: statsfile=$tmpdir/s.json is also export a's" size=1M export=a statsfile="$tmpdir/s.json" export=b statsfile="$tmpdir/s.json"
bad "exports=512n,4kn: logical= among the defaults" size=1M exports=512n,4kn logical=4096
bad "exports=512n,4kn: model= among the defaults" size=1M model=512e exports=512n,4kn
bad "exports=512n,9kn: model=9kn: unknown model" size=1M exports=512n,9kn
bad "exports=512n,,4kn: an empty name" size=1M exports=512n,,4kn
bad "export=: the name is empty" size=1M export=
bad "export=a/b: names are printable" size=1M export=a/b
bad "export=a: logical=1000" size=1M export=a logical=1000
bad "export=b: size: required" export=a size=1M export=b
bad "export=b: alignment-offset=100" size=1M export=a export=b physical=4096 alignment-offset=100
# One upstream export is one device (issue 29): the same URI, a default
# upstream= every preset inherits, or another spelling of it (TLS or
# not, a socket path through "./", a %-escaped name, localhost and its
# address with the default port).  Refused before connecting, so no
# upstream runs here.
up="nbd+unix:///?socket=$tmpdir/one.img"
bad "export=b: upstream=$up is also export a's" export=a upstream="$up" export=b upstream="$up"
bad "export=4kn: upstream=$up is also export 512n's" upstream="$up" exports=512n,4kn
bad "export=b: upstream=nbds+unix:///d?socket=$tmpdir/./one.img&tls-verify-peer=false is also export a's" \
  export=a upstream="nbd+unix:///d?socket=$tmpdir/one.img" \
  export=b upstream="nbds+unix:///d?socket=$tmpdir/./one.img&tls-verify-peer=false"
bad "export=b: upstream=nbd+unix:///a%62?socket=$tmpdir/one.img is also export a's" \
  export=a upstream="nbd+unix:///ab?socket=$tmpdir/one.img" \
  export=b upstream="nbd+unix:///a%62?socket=$tmpdir/one.img"
bad "export=b: upstream=nbd://127.0.0.1:10809/x is also export a's" \
  export=a upstream="nbd://localhost/x" export=b upstream="nbd://127.0.0.1:10809/x"
# NBD has no zone commands (issue 33): a zoned export is refused on NBD,
# named.
bad "export=z: zoned=host-aware: NBD has no zone commands (a client would see a plain disk): serve a zoned drive with" \
  size=64M export=a export=z zoned=host-aware zone-size=4M
