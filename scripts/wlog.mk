# SPDX-License-Identifier: BSD-3-Clause
# sect4k-wlog-dump: the entries of a write log (write-log=, dm-log-writes),
# read with the engine's reader (lib/wlog.c); tests use it.
WLOG_DUMP := $(B)/sect4k-wlog-dump
programs: $(WLOG_DUMP)
$(WLOG_DUMP): scripts/sect4k-wlog-dump.c $(ENGINE_LIB) $(wildcard include/sect4k/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -o $@ $< $(ENGINE_LIB) $(LDFLAGS_ALL) $(ENGINE_LIBS)
