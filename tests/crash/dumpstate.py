#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""A checker for oracle.t: writes each logical sector's bytes (or E for
one that fails with EIO) of $SECT4K_URI to DIR/$SECT4K_STATE."""
import os
import sys
import nbd

h = nbd.NBD()
h.connect_uri(os.environ["SECT4K_URI"])
L = h.get_block_size(nbd.SIZE_MINIMUM)
out = []
for lba in range(h.get_size() // L):
    try:
        out.append(h.pread(L, lba * L).hex())
    except nbd.Error:
        out.append("E")
open(os.path.join(sys.argv[1], os.environ["SECT4K_STATE"]), "w").write(
    "\n".join(out))
