# make bench: sect4k beside nbdkit's own plugins (null, memory,
# memory+blocksize, file) in one run; writes the results table into
# BENCHMARKS.md and the queue-depth plot next to it.  Not part of check.
#   BENCH_QUICK=1   three repetitions, fewer requests (about 3 minutes)
#   BENCH_REPS=N, BENCH_RUNTIME=SECONDS   override the defaults (11, 0.3)
.PHONY: bench
bench: $(PLUGIN)
	@scripts/bench/install-tools
	python3 scripts/bench/bench.py --plugin $(PLUGIN) --out BENCHMARKS.md \
	  --command 'make bench'

# make bench-engine: the engine's instructions per request, no nbdkit
# (callgrind; about 30 s).  Part of `make bench`.
.PHONY: bench-engine
bench: bench-engine
bench-engine: $(B)/bench-engine
	@scripts/install-deps valgrind
	scripts/bench/engine-ir $(abspath $(B)/bench-engine)
$(B)/bench-engine: scripts/bench/engine.c $(ENGINE_LIB)
	$(CC) $(CFLAGS_ALL) -o $@ $< $(ENGINE_LIB) $(LDFLAGS_ALL) $(URING_LIBS)
