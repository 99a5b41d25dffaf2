# SPDX-License-Identifier: BSD-3-Clause
# Upstream store and filter test clients: tests/upstream/*.c, each built to
# $(B)/tests/upstream-NAME (libnbd clients, like tests/plugin/).
UPSTREAM_TESTS := $(patsubst tests/upstream/%.c,$(B)/tests/upstream-%,$(wildcard tests/upstream/*.c))
test-progs: $(UPSTREAM_TESTS)
$(B)/tests/upstream-%: tests/upstream/%.c $(wildcard tests/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(LIBNBD_CFLAGS) -Itests -o $@ $< $(LDFLAGS_ALL) $(LIBNBD_LIBS)
