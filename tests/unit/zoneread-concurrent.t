#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
exec "$SECT4K_BUILD/tests/unit-zoneread-concurrent"
