#!/bin/sh
# Linux 6.12 (bookworm backports) under qemu: see vm-test.
exec "$(dirname "$0")/vm-test" 6.12
