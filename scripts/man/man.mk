# SPDX-License-Identifier: BSD-3-Clause
# The tools on the PATH after `make install` (and in the sect4k-tools
# package): the scripts under their own names, the C tools sect4k-crash and
# sect4k-wlog-dump (installed as the programs themselves; scripts/sect4k-crash
# only finds the build's binary for in-tree use), their man pages and the
# JSON schemas.  Included after scripts/wlog.mk and scripts/crash/crash.mk
# (the Makefile includes */*.mk, then */*/*.mk, each sorted), whose
# $(WLOG_DUMP) and $(CRASH) it names as prerequisites.
#   make                 also builds build/man/*.1 from scripts/man/*.pod
TOOL_SCRIPTS := sect4k-attach sect4k-ctl sect4k-qemu-args sect4k-stats
TOOL_MANS := $(patsubst scripts/man/%.pod,build/man/%.1,$(wildcard scripts/man/*.pod))
SCHEMAS := $(wildcard docs/*.schema.json)
programs: $(TOOL_MANS)

build/man/%.1: scripts/man/%.pod include/sect4k/sect4k.h
	@mkdir -p $(dir $@)
	pod2man --section=1 --center=sect4k --release=sect4k-$(shell sed -n 's/.*S4K_VERSION "\(.*\)"/\1/p' include/sect4k/sect4k.h) --name=$* $< > $@

install: install-tools
.PHONY: install-tools uninstall-tools
install-tools: $(CRASH) $(CRASH_MAN) $(WLOG_DUMP) $(TOOL_MANS)
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(DATADIR)
	install -m 0755 $(addprefix scripts/,$(TOOL_SCRIPTS)) $(DESTDIR)$(BINDIR)/
	install -m 0755 $(CRASH) $(DESTDIR)$(BINDIR)/sect4k-crash
	install -m 0755 $(WLOG_DUMP) $(DESTDIR)$(BINDIR)/sect4k-wlog-dump
	install -m 0644 $(CRASH_MAN) $(TOOL_MANS) $(DESTDIR)$(MANDIR)/man1/
	install -m 0644 $(SCHEMAS) $(DESTDIR)$(DATADIR)/
uninstall: uninstall-tools
uninstall-tools:
	rm -f $(addprefix $(DESTDIR)$(BINDIR)/,$(TOOL_SCRIPTS) sect4k-crash sect4k-wlog-dump)
	rm -f $(addprefix $(DESTDIR)$(MANDIR)/man1/,$(CRASH_MAN) $(notdir $(TOOL_MANS)))
	rm -f $(addprefix $(DESTDIR)$(DATADIR)/,$(notdir $(SCHEMAS)))
	-rmdir $(DESTDIR)$(DATADIR) 2>/dev/null
