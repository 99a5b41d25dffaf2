#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Reads never return a torn logical sector, through nbdkit (see
# tests/torn.sh and tests/plugin/torn.c; issue 21).
. "$(dirname "$0")/../lib.sh"
need nbdkit
. "$(dirname "$0")/../torn.sh"
start () { name=$1; shift; start_nbdkit "$name" "$SECT4K_PLUGIN" "$@"; }
stop () { stop_nbdkit; }
torn_cases start
done_testing
