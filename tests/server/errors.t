#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""sect4k-server answers with the NBD spec's error codes, as the plugin
does (see tests/errcodes.py and tests/plugin/errors.t)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import done_testing, need_nbd  # noqa: E402
import errcodes  # noqa: E402
import srvlib  # noqa: E402

nbd = need_nbd()
srvlib.need_server()
errcodes.check(nbd, srvlib.Server, "server")
done_testing()
