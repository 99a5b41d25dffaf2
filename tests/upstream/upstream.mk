# SPDX-License-Identifier: BSD-3-Clause
# Upstream store and filter test clients: tests/upstream/*.c, each built to
# $(B)/tests/upstream-NAME (libnbd clients, like tests/plugin/); those
# named store-*.c drive the engine's upstream store itself, and link it.
UPSTREAM_STORE_SRCS := $(wildcard tests/upstream/store-*.c)
UPSTREAM_TESTS := $(patsubst tests/upstream/%.c,$(B)/tests/upstream-%,$(filter-out $(UPSTREAM_STORE_SRCS),$(wildcard tests/upstream/*.c)))
UPSTREAM_STORE_TESTS := $(patsubst tests/upstream/%.c,$(B)/tests/upstream-%,$(UPSTREAM_STORE_SRCS))
test-progs: $(UPSTREAM_TESTS) $(UPSTREAM_STORE_TESTS)
$(UPSTREAM_TESTS): $(B)/tests/upstream-%: tests/upstream/%.c $(wildcard tests/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(LIBNBD_CFLAGS) -Itests -o $@ $< $(LDFLAGS_ALL) $(LIBNBD_LIBS)
$(UPSTREAM_STORE_TESTS): $(B)/tests/upstream-%: tests/upstream/%.c $(ENGINE_LIB) $(wildcard tests/*.h) $(ENGINE_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(LIBNBD_CFLAGS) -Itests -Ilib -o $@ $< $(ENGINE_LIB) $(LDFLAGS_ALL) $(ENGINE_LIBS)
