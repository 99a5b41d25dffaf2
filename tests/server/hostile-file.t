#!/bin/sh
# hostile.t against the file store (file=): write payloads go into request
# slots, up to 16 requests in flight per connection.
SECT4K_STORE=file exec "$(dirname "$0")/hostile.t"
