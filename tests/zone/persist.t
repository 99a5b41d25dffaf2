#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The source tree: the test runs scripts/sect4k-ctl too.
exec "$SECT4K_BUILD/tests/zone-persist" "$(cd "$(dirname "$0")/../.." && pwd)"
