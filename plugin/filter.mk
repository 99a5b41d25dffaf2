# SPDX-License-Identifier: BSD-3-Clause
# nbdkit-sect4k-filter: the engine over any nbdkit plugin.
#   make             also builds ./sect4k-filter.so and its man page
FILTER_MAN := nbdkit-sect4k-filter.1
programs: $(FILTER) $(FILTER_MAN)

$(FILTER): $(B)/plugin/sect4k-filter.o $(B)/plugin/glue.o $(ENGINE_LIB)
	$(CC) $(SO_LDFLAGS) -o $@ $(filter %.o,$^) $(ENGINE_LIB) $(ENGINE_LIBS)
$(B)/plugin/sect4k-filter.o $(B)/plugin/sect4k.o $(B)/plugin/glue.o: plugin/glue.h

$(FILTER_MAN): plugin/nbdkit-sect4k-filter.pod
	pod2man --section=1 --center=sect4k --release=sect4k-$(shell sed -n 's/.*S4K_VERSION "\(.*\)"/\1/p' include/sect4k/sect4k.h) --name=nbdkit-sect4k-filter $< > $@

FILTERDIR ?= $(shell $(PKG_CONFIG) --variable=filterdir nbdkit 2>/dev/null)
export SECT4K_FILTER := $(abspath $(FILTER))

install: install-filter
.PHONY: install-filter
install-filter: $(FILTER) $(FILTER_MAN)
	@test -n "$(FILTERDIR)" || { echo "make install: pkg-config cannot find nbdkit's filterdir"; exit 1; }
	install -D -m 0755 $(FILTER) $(DESTDIR)$(FILTERDIR)/nbdkit-sect4k-filter.so
	install -D -m 0644 $(FILTER_MAN) $(DESTDIR)$(MANDIR)/man1/$(FILTER_MAN)
uninstall: uninstall-filter
.PHONY: uninstall-filter
uninstall-filter:
	@test -n "$(FILTERDIR)" || { echo "make uninstall: pkg-config cannot find nbdkit's filterdir"; exit 1; }
	rm -f $(DESTDIR)$(FILTERDIR)/nbdkit-sect4k-filter.so $(DESTDIR)$(MANDIR)/man1/$(FILTER_MAN)
clean: clean-filter
.PHONY: clean-filter
clean-filter:
	rm -f sect4k-filter.so $(FILTER_MAN)
