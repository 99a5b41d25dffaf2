# make bench: sect4k beside nbdkit's own plugins (null, memory,
# memory+blocksize, file) in one run; writes the results table into
# BENCHMARKS.md and the queue-depth plot next to it.  Not part of check.
#   BENCH_QUICK=1   one repetition, short runs (about 3 minutes)
#   BENCH_REPS=N, BENCH_RUNTIME=SECONDS   override the defaults (5, 1)
.PHONY: bench
bench: $(PLUGIN)
	@scripts/bench/install-tools
	python3 scripts/bench/bench.py --plugin $(PLUGIN) --out BENCHMARKS.md \
	  --command 'make bench'
