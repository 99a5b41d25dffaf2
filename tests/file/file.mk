# SPDX-License-Identifier: BSD-3-Clause
# File store tests: tests/file/*.c, each built to $(B)/tests/file-NAME
# against the engine (and the store's private header in lib/).
FILE_TESTS := $(patsubst tests/file/%.c,$(B)/tests/file-%,$(wildcard tests/file/*.c))
test-progs: $(FILE_TESTS)
$(B)/tests/file-%: tests/file/%.c $(ENGINE_LIB) $(wildcard tests/*.h) $(ENGINE_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Itests -Ilib -o $@ $< $(ENGINE_LIB) $(LDFLAGS_ALL) $(ENGINE_LIBS)
# A preload shim that takes fallocate away (tests/file/nofalloc.t).
test-progs: $(B)/tests/file-nofalloc.so
$(B)/tests/file-nofalloc.so: tests/file/preload/nofalloc.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -shared -o $@ $<
