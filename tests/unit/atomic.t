#!/bin/sh
exec "$SECT4K_BUILD/tests/unit-atomic"
