# SPDX-License-Identifier: BSD-3-Clause
# Kernel tests only: make check-kernel (the same .t files also run in make check).
.PHONY: check-kernel
check-kernel: deps
	$(MAKE) $(PLUGIN)
	$(PROVE) --exec '' $(sort $(wildcard tests/kernel/*.t))
