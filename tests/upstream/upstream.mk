# Upstream store and filter test clients: tests/upstream/*.c, each built to
# $(B)/tests/upstream-NAME (libnbd clients, like tests/plugin/).
UPSTREAM_TESTS := $(patsubst tests/upstream/%.c,$(B)/tests/upstream-%,$(wildcard tests/upstream/*.c))
test-progs: $(UPSTREAM_TESTS)
$(B)/tests/upstream-%: tests/upstream/%.c $(wildcard tests/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(LIBNBD_CFLAGS) -Itests -o $@ $< $(LDFLAGS_ALL) $(LIBNBD_LIBS)

# make bench-upstream: sect4k in front of an upstream behind 1 ms of
# latency against nbdkit's blocksize filter; part of `make bench`.
.PHONY: bench-upstream
bench: bench-upstream
bench-upstream: $(SERVER) $(PLUGIN) $(FILTER)
	@scripts/install-deps fio
	scripts/bench/upstream.sh $(abspath $(SERVER)) $(abspath $(PLUGIN)) $(abspath $(FILTER))
