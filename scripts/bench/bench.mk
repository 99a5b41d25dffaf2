# SPDX-License-Identifier: BSD-3-Clause
# make bench: sect4k beside nbdkit's own plugins (null, memory,
# memory+blocksize, file) in one run; writes the results table into
# BENCHMARKS.md and the queue-depth plot next to it.  Not part of check.
#   BENCH_QUICK=1   three repetitions, fewer requests
#   BENCH_REPS=N, BENCH_RUNTIME=SECONDS   override the defaults (11, 0.3)
.PHONY: bench
bench: $(PLUGIN)
	@scripts/bench/install-tools
	python3 scripts/bench/bench.py --plugin $(PLUGIN) --out BENCHMARKS.md \
	  --command 'make bench'

# make bench-engine: the engine's instructions per request, no nbdkit
# (callgrind, 60 runs: about a minute of CPU, 4 minutes wall at a load
# average of 8 on 2 cores).  Part of `make bench`.  Its program is built
# with the tests: tests/bench/engine.t runs every case once, without
# valgrind, so that it does not rot.
.PHONY: bench-engine
bench: bench-engine
test-progs: $(B)/bench-engine
bench-engine: $(B)/bench-engine
	@scripts/install-deps valgrind
	scripts/bench/engine-ir $(abspath $(B)/bench-engine)
$(B)/bench-engine: scripts/bench/engine.c $(ENGINE_LIB)
	$(CC) $(CFLAGS_ALL) -o $@ $< $(ENGINE_LIB) $(LDFLAGS_ALL) $(ENGINE_LIBS)

# make bench-rmw-latency: 512-byte writes with a 1 ms write latency, sect4k
# (plugin and server) against nbdkit's blocksize+delay filters (issue 12);
# writes its table into BENCHMARKS.md.  Part of `make bench`.
.PHONY: bench-rmw-latency
bench: bench-rmw-latency
bench-rmw-latency: $(PLUGIN) $(SERVER)
	@scripts/install-deps fio
	python3 scripts/bench/rmw-latency.py --plugin $(PLUGIN) --server $(SERVER) \
	  --out BENCHMARKS.md

# make bench-upstream: sect4k in front of an upstream behind 1 ms of
# latency against nbdkit's blocksize filter (issue 16); part of `make
# bench`.
.PHONY: bench-upstream
bench: bench-upstream
bench-upstream: $(SERVER) $(PLUGIN) $(FILTER)
	@scripts/install-deps fio
	scripts/bench/upstream.sh $(abspath $(SERVER)) $(abspath $(PLUGIN)) $(abspath $(FILTER))

# make bench-scsi: fio IOPS on a SCSI disk from sect4k-server --scsi
# against the kernel's nbd driver on the same export, in one guest boot
# under qemu TCG (issue 22): the ratio is the result, the numbers are
# not.  BENCH_SCSI_KERNEL=6.1 for the other kernel.  Not part of bench.
.PHONY: bench-scsi
bench-scsi: $(PLUGIN) $(SERVER)
	@scripts/install-deps && scripts/install-deps fio
	SECT4K_VM_SUITES=scsi_bench tests/kernel/vm-test $(or $(BENCH_SCSI_KERNEL),6.12)

# make bench-ublk: fio IOPS, 4 KiB random at QD 32, on one export served
# at once as a ublk device, a SCSI disk and the kernel's nbd driver, in
# one 6.12 guest (issue 35; 6.1 has no ublk_drv).  SECT4K_VM_SMP=2 for two
# guest CPUs (two ublk queues).  Not part of bench.
.PHONY: bench-ublk
bench-ublk: $(PLUGIN) $(SERVER)
	@scripts/install-deps && scripts/install-deps fio
	SECT4K_VM_SUITES=ublk_bench tests/kernel/vm-test 6.12
