#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""Named exports through sect4k-server: see tests/exportscheck.py."""
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from srvlib import need_server, skip_all, Server  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import need_nbd  # noqa: E402

need_server()
need_nbd()
if not shutil.which("nbdinfo"):
    skip_all("nbdinfo is not installed")

import exportscheck  # noqa: E402
exportscheck.run(Server, lambda srv: srv.connect_raw(), "sect4k-server")
