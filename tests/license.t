#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""The license (issue 32 item 8): LICENSE is BSD-3-Clause, every tracked
source file names it in an SPDX line near its top, Debian's licensecheck
reads BSD-3-Clause off each of them, and debian/copyright says the same
in DEP-5 form."""
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tap  # noqa: E402
if os.environ.get("SECT4K_SAN"):
    tap.skip_all("the license lines are checked in the plain build only (no C runs here)")

ROOT = os.path.dirname(HERE)
TAG = "SPDX-License-Identifier: BSD-3-Clause"
ls = subprocess.run(["git", "-C", ROOT, "ls-files"], capture_output=True,
                    text=True)
if ls.returncode:
    tap.skip_all("not a git checkout: the tracked files are not known")
# Data (corpora, schemas, pictures) and docs carry no line of their own:
# LICENSE and debian/copyright's "Files: *" cover them.
EXEMPT = re.compile(r"^(debian/|tests/server/corpus/|tests/unit/scsi-corpus/)"
                    r"|\.(md|json|png|gitignore|install)$|(^|/)\.gitignore$"
                    r"|^LICENSE$")
sources = [f for f in ls.stdout.split()
           if not EXEMPT.search(f) and os.path.isfile(os.path.join(ROOT, f))]

with open(os.path.join(ROOT, "LICENSE")) as f:
    text = f.read()
tap.ok(text.startswith("BSD 3-Clause License") and
       "Neither the name of the copyright holder" in text,
       "LICENSE holds the BSD 3-Clause text")

missing = []
for f in sources:
    with open(os.path.join(ROOT, f), "rb") as fh:
        head = fh.read(1024).decode("utf-8", "replace").splitlines()[:5]
    if not any(TAG in line for line in head):
        missing.append(f)
tap.ok(sources and not missing,
       "%d tracked source files carry '%s' in their first lines%s"
       % (len(sources), TAG, (": missing in " + ", ".join(missing[:20]))
          if missing else ""))

if not shutil.which("licensecheck"):
    tap.skip("licensecheck reads BSD 3-Clause off every source file",
             "licensecheck is not installed (apt-get install licensecheck)")
else:
    p = subprocess.run(["licensecheck", "--check", ".", "LICENSE"] + sources,
                       cwd=ROOT, capture_output=True, text=True)
    other = [l for l in p.stdout.splitlines()
             if not l.endswith("BSD 3-Clause License")]
    tap.ok(p.returncode == 0 and len(p.stdout.splitlines()) == len(sources) + 1
           and not other,
           "licensecheck reads BSD 3-Clause off LICENSE and %d files%s"
           % (len(sources), (": " + "; ".join(other[:10])) if other else ""))

with open(os.path.join(ROOT, "debian", "copyright")) as f:
    cp = f.read()
paras = [p for p in cp.split("\n\n") if p.strip()]
files_star = [p for p in paras if p.startswith("Files: *")]
standalone = [p for p in paras if p.startswith("License: BSD-3-Clause\n")]
tap.ok(cp.startswith("Format: https://www.debian.org/doc/packaging-manuals/"
                     "copyright-format/1.0/")
       and files_star and "License: BSD-3-Clause" in files_star[0]
       and standalone and "Neither the name of the copyright holder"
       in standalone[0] and "not-yet-chosen" not in cp,
       "debian/copyright: DEP-5, Files: * under BSD-3-Clause, the text in "
       "full")
tap.done_testing()
