#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Debian 12's Linux 6.1 under qemu: see vm-test.
exec "$(dirname "$0")/vm-test" 6.1
