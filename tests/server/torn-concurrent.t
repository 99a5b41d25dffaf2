#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Reads never return a torn logical sector, through sect4k-server, whose
# reads of the memory store go out by reference (see tests/torn.sh and
# tests/plugin/torn.c; issue 21).
. "$(dirname "$0")/../lib.sh"
need_server
. "$(dirname "$0")/../torn.sh"
stop () { stop_server; }
torn_cases start_server
done_testing
