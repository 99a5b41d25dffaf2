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
