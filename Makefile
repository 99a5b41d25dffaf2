# SPDX-License-Identifier: BSD-3-Clause
# sect4k: block devices with any sector geometry.
#   make            build ./sect4k.so (the nbdkit plugin) and its man page
#   make check      install missing Debian packages, build, run every test
#   make check-asan the whole suite with ASan+UBSan
#   make check-tsan the concurrency tests with TSan
#   make run        serve a 512e 10G device on nbd://localhost
#                   (EXPORTS=512n,512e,512e-xp,4kn: one export per preset)
#   make install    install everything (DESTDIR=, PREFIX=, default /usr/local):
#                   the plugin and filter into nbdkit's directories, sect4k-server,
#                   the tools, man pages and JSON schemas; make uninstall removes them
#   make deb        the Debian packages (scripts/deb.mk), into DEB_OUT=

PKG_CONFIG ?= pkg-config
CC ?= cc
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
MANDIR ?= $(PREFIX)/share/man
DATADIR ?= $(PREFIX)/share/sect4k
PLUGINDIR ?= $(shell $(PKG_CONFIG) --variable=plugindir nbdkit 2>/dev/null)

# SAN= (none), asan or tsan: each build lives in its own directory.
SAN ?=
B := build/$(if $(SAN),$(SAN),default)
SAN_FLAGS_asan := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
SAN_FLAGS_tsan := -fsanitize=thread -fno-omit-frame-pointer
SAN_FLAGS := $(SAN_FLAGS_$(SAN))

OPT ?= -O2 -g
CFLAGS_ALL := -std=gnu11 $(OPT) -Wall -Wextra -Werror -fPIC -pthread \
              -Iinclude $(SAN_FLAGS) $(CPPFLAGS) $(CFLAGS)
LDFLAGS_ALL := -pthread $(SAN_FLAGS) $(LDFLAGS)
# The nbdkit modules: the engine archive's symbols are not exported, so the
# plugin and the filter loaded together each call their own engine, and
# calls into it are direct, not through the PLT.
SO_LDFLAGS = -shared -Wl,--exclude-libs,ALL $(LDFLAGS_ALL)

NBDKIT_CFLAGS = $(shell $(PKG_CONFIG) --cflags nbdkit 2>/dev/null)
LIBNBD_CFLAGS = $(shell $(PKG_CONFIG) --cflags libnbd 2>/dev/null)
LIBNBD_LIBS = $(shell $(PKG_CONFIG) --libs libnbd 2>/dev/null)
URING_CFLAGS = $(shell $(PKG_CONFIG) --cflags liburing 2>/dev/null)
URING_LIBS = $(shell $(PKG_CONFIG) --libs liburing 2>/dev/null)
# What a program linking the engine needs (the upstream store is libnbd).
ENGINE_LIBS = $(URING_LIBS) $(LIBNBD_LIBS)

ENGINE_SRCS := $(sort $(wildcard lib/*.c lib/*/*.c))
ENGINE_HDRS := $(wildcard include/sect4k/*.h lib/*.h lib/*/*.h)
ENGINE_OBJS := $(ENGINE_SRCS:%.c=$(B)/%.o)
ENGINE_LIB := $(B)/libsect4k.a
# What is built, named here: the fragments' rules (bench.mk before
# server.mk) name them as prerequisites, which make expands as it reads.
PLUGIN := $(if $(SAN),$(B)/sect4k.so,sect4k.so)
FILTER := $(if $(SAN),$(B)/sect4k-filter.so,sect4k-filter.so)
SERVER := $(if $(SAN),$(B)/sect4k-server,sect4k-server)
MANPAGE := nbdkit-sect4k-plugin.1

# Test programs: tests/unit/*.c and tests/plugin/*.c, each built to $(B)/tests/NAME.
UNIT_TESTS := $(patsubst tests/unit/%.c,$(B)/tests/unit-%,$(wildcard tests/unit/*.c))
CLIENT_TESTS := $(patsubst tests/plugin/%.c,$(B)/tests/client-%,$(wildcard tests/plugin/*.c))
TEST_PROGS := $(UNIT_TESTS) $(CLIENT_TESTS)

.DELETE_ON_ERROR:
.PHONY: all check check-asan check-tsan deps run install uninstall clean test-progs programs
all: programs test-progs
# What `make install` installs (the fragments add theirs), without the tests.
programs: $(PLUGIN) $(MANPAGE)

$(B)/%.o: %.c $(ENGINE_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(NBDKIT_CFLAGS) $(URING_CFLAGS) $(LIBNBD_CFLAGS) -c $< -o $@

# The engine's areas (lib/store, lib/fault, ...) include each other's
# headers as "area/name.h"; only the engine and its tests see lib/.
$(ENGINE_OBJS): CFLAGS_ALL += -Ilib

$(ENGINE_LIB): $(ENGINE_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(PLUGIN): $(B)/plugin/sect4k.o $(B)/plugin/glue.o $(ENGINE_LIB)
	$(CC) $(SO_LDFLAGS) -o $@ $(filter %.o,$^) $(ENGINE_LIB) $(ENGINE_LIBS)

$(MANPAGE): plugin/nbdkit-sect4k-plugin.pod
	pod2man --section=1 --center=sect4k --release=sect4k-$(shell sed -n 's/.*S4K_VERSION "\(.*\)"/\1/p' include/sect4k/sect4k.h) --name=nbdkit-sect4k-plugin $< > $@

test-progs: $(TEST_PROGS)
$(B)/tests/unit-%: tests/unit/%.c $(ENGINE_LIB) $(wildcard tests/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Itests -Ilib -o $@ $< $(ENGINE_LIB) $(LDFLAGS_ALL) $(ENGINE_LIBS)
$(B)/tests/client-%: tests/plugin/%.c $(wildcard tests/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(LIBNBD_CFLAGS) -Itests -o $@ $< $(LDFLAGS_ALL) $(LIBNBD_LIBS)

deps:
	@scripts/install-deps

# Every *.t under tests/ runs under prove; they find the build through
# these variables.
export SECT4K_BUILD := $(abspath $(B))
export SECT4K_PLUGIN := $(abspath $(PLUGIN))
export SECT4K_SAN := $(SAN)
TESTS ?= $(sort $(wildcard tests/*.t tests/*/*.t))
# --timer: each file's time in the log, to see where a CI run's minutes go.
PROVE ?= prove --timer
# The build in parallel (CI's minutes; the tests stay one at a time:
# several time what they measure).
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
check: deps
	$(MAKE) -j$(JOBS) all
	$(PROVE) --exec '' $(TESTS)

check-asan:
	$(MAKE) SAN=asan OPT='-O1 -g' check
check-tsan:
	$(MAKE) SAN=tsan OPT='-O1 -g' TESTS='$(sort $(wildcard tests/*/*concurren*.t tests/*/*torture*.t))' check

run: $(PLUGIN)
	@EXPORTS='$(EXPORTS)' scripts/sect4k-run $(RUN_ARGS)

# The plugin goes where nbdkit looks for it (`nbdkit sect4k` loads
# PLUGINDIR/nbdkit-sect4k-plugin.so), whatever PREFIX is; the fragments
# add the filter, the server and the tools (install-*, uninstall-*).  The
# Debian packages (debian/rules) install through this recipe too.
install: $(PLUGIN) $(MANPAGE)
	@test -n "$(PLUGINDIR)" || { echo "make install: pkg-config cannot find nbdkit's plugindir (install nbdkit-plugin-dev)"; exit 1; }
	install -D -m 0755 $(PLUGIN) $(DESTDIR)$(PLUGINDIR)/nbdkit-sect4k-plugin.so
	install -D -m 0644 $(MANPAGE) $(DESTDIR)$(MANDIR)/man1/$(MANPAGE)
uninstall:
	@test -n "$(PLUGINDIR)" || { echo "make uninstall: pkg-config cannot find nbdkit's plugindir (install nbdkit-plugin-dev)"; exit 1; }
	rm -f $(DESTDIR)$(PLUGINDIR)/nbdkit-sect4k-plugin.so $(DESTDIR)$(MANDIR)/man1/$(MANPAGE)

clean:
	rm -rf build sect4k.so $(MANPAGE) sect4k-server sect4k-server.1 sect4k-crash.1

# Further areas (server/, benchmarks, kernel tests) add their own targets.
-include $(sort $(wildcard */*.mk */*/*.mk))
