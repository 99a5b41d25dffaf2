#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# hostile.t against the file store (file=): write payloads go into request
# slots, up to 16 requests in flight per connection.
SECT4K_STORE=file exec "$(dirname "$0")/hostile.t"
