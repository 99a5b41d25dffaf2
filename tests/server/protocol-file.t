#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# protocol.t against the file store (file=): reads, writes and flushes go
# through the event loop's ring.
SECT4K_STORE=file exec "$(dirname "$0")/protocol.t"
