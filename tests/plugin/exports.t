#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""Named exports through nbdkit: see tests/exportscheck.py."""
import os
import socket
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import need_nbd, skip_all, Nbdkit  # noqa: E402
import shutil  # noqa: E402

need_nbd()
if not shutil.which("nbdinfo") or not shutil.which("nbdkit"):
    skip_all("nbdkit and nbdinfo are needed")


def raw(srv):
    s = socket.socket(socket.AF_UNIX)
    s.connect(srv.sock)
    s.settimeout(20)
    return s


import exportscheck  # noqa: E402
exportscheck.run(Nbdkit, raw, "nbdkit")
