#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Power cuts on zoned devices against an exact model (tests/unit/zonecut.c),
# then a few of its cut reports against docs/cut-report.schema.json.
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
top=$(cd "$(dirname "$0")/../.." && pwd)
ZONECUT_REPORTS=$dir "$SECT4K_BUILD/tests/unit-zonecut" >"$dir/tap"
sed '/^1\.\./d' "$dir/tap"
n=$(grep -c '^ok\|^not ok' "$dir/tap")
python3 - "$dir" "$top/docs/cut-report.schema.json" <<'PY'
import glob, json, sys
import jsonschema
schema = json.load(open(sys.argv[2]))
files = sorted(glob.glob(sys.argv[1] + "/*.json"))
bad = []
zones = 0
for f in files:
    rep = json.load(open(f))
    try:
        jsonschema.validate(rep, schema)
    except jsonschema.ValidationError as e:
        bad.append("%s: %s" % (f, e.message))
    zones += len(rep.get("zones", []))
for b in bad:
    print("# " + b)
ok = files and not bad and zones > 0
print("%s - %d cut reports of zoned devices match the schema (%d zone "
      "entries)" % ("ok" if ok else "not ok", len(files), zones))
PY
echo "1..$((n + 1))"
