#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Linux 6.12 (bookworm backports) under qemu: see vm-test.
exec "$(dirname "$0")/vm-test" 6.12
