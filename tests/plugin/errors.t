#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""The plugin under nbdkit answers with the NBD spec's error codes (see
tests/errcodes.py; tests/server/errors.t checks sect4k-server the same
way)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tap import done_testing, Nbdkit, need_nbd  # noqa: E402
import errcodes  # noqa: E402

errcodes.check(need_nbd(), Nbdkit, "plugin")
done_testing()
