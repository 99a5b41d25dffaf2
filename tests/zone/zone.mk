# SPDX-License-Identifier: BSD-3-Clause
# Zoned drive tests: tests/zone/*.c, each built to $(B)/tests/zone-NAME
# against the engine.
ZONE_TESTS := $(patsubst tests/zone/%.c,$(B)/tests/zone-%,$(wildcard tests/zone/*.c))
test-progs: $(ZONE_TESTS)
$(B)/tests/zone-%: tests/zone/%.c $(ENGINE_LIB) $(wildcard tests/*.h tests/zone/*.h) $(ENGINE_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Itests -Ilib -o $@ $< $(ENGINE_LIB) $(LDFLAGS_ALL) $(ENGINE_LIBS)
