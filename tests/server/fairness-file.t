#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# fairness.t against the file store (file=): the reads go through the
# request slots and the event loop's ring.
SECT4K_STORE=file exec "$(dirname "$0")/fairness.t"
