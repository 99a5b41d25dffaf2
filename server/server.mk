# SPDX-License-Identifier: BSD-3-Clause
# sect4k-server: standalone NBD server on the engine (io_uring).
#   make                 also builds ./sect4k-server and sect4k-server.1
#   make fuzz            libFuzzer (clang) on the handshake/request parser
#                        for FUZZ_TIME seconds (default 60)
#   make fuzz-ci         CI's campaign (.ci/run): FUZZ_CI_TIME seconds (60;
#                        half of it the SCSI fuzzer's) from the corpus
#                        alone; fails on a crash and prints the input
#                        (base64) for replay
#   make bench-server    server vs nbdkit + plugin (fio, callgrind); part
#                        of `make bench`

SERVER_MAN := sect4k-server.1
# One connection's protocol, without sockets: what the fuzzer links too.
CONN_SRCS := server/request.c server/handshake.c server/reply.c server/sched.c
CONN_OBJS := $(CONN_SRCS:%.c=$(B)/%.o)
SERVER_SRCS := server/main.c server/captive.c server/loop.c $(CONN_SRCS) \
  server/configfs.c server/tcmu.c server/ublk.c server/tls.c
GNUTLS_LIBS = $(shell $(PKG_CONFIG) --libs gnutls 2>/dev/null)
SERVER_OBJS := $(SERVER_SRCS:%.c=$(B)/%.o)
SERVER_HDRS := $(wildcard server/*.h)
# Replays the fuzz regression corpus in `make check` (no clang needed).
FUZZ_REPLAY := $(B)/server/fuzz-replay

.PHONY: fuzz fuzz-ci bench bench-server install-server uninstall-server
programs: $(SERVER) $(SERVER_MAN)
all: $(FUZZ_REPLAY)

$(SERVER_OBJS) $(B)/server/fuzz.o: $(SERVER_HDRS)

$(SERVER): $(SERVER_OBJS) $(ENGINE_LIB)
	$(CC) $(LDFLAGS_ALL) -o $@ $(SERVER_OBJS) $(ENGINE_LIB) $(ENGINE_LIBS) $(GNUTLS_LIBS)

$(FUZZ_REPLAY): server/fuzz.c $(CONN_OBJS) $(ENGINE_LIB) $(SERVER_HDRS)
	$(CC) $(CFLAGS_ALL) $(URING_CFLAGS) -DFUZZ_REPLAY_MAIN -o $@ server/fuzz.c \
	  $(CONN_OBJS) $(ENGINE_LIB) $(LDFLAGS_ALL) $(ENGINE_LIBS)

$(SERVER_MAN): server/sect4k-server.pod
	pod2man --section=1 --center=sect4k --release=sect4k-$(shell sed -n 's/.*S4K_VERSION "\(.*\)"/\1/p' include/sect4k/sect4k.h) --name=sect4k-server $< > $@

export SECT4K_SERVER := $(abspath $(SERVER))
export SECT4K_FUZZ_REPLAY := $(abspath $(FUZZ_REPLAY))

# libFuzzer build: its own directory, clang, ASan+UBSan.
FUZZ_TIME ?= 60
FUZZ_DIR := build/fuzz
FUZZ_BIN := $(FUZZ_DIR)/fuzz-server
$(FUZZ_BIN): server/fuzz.c $(CONN_SRCS) $(SERVER_HDRS) $(ENGINE_SRCS) $(ENGINE_HDRS)
	@mkdir -p $(dir $@)
	clang -std=gnu11 -O1 -g -Iinclude -Ilib -Wall -Wextra -Werror \
	  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	  $(URING_CFLAGS) -o $@ server/fuzz.c $(CONN_SRCS) $(ENGINE_SRCS) \
	  -pthread $(ENGINE_LIBS)
$(FUZZ_BIN): | fuzz-deps
.PHONY: fuzz-deps
fuzz-deps:
	@scripts/install-deps clang
fuzz: $(FUZZ_BIN)
	@mkdir -p $(FUZZ_DIR)/corpus $(FUZZ_DIR)/crashes
	$(FUZZ_BIN) -max_total_time=$(FUZZ_TIME) -timeout=10 -rss_limit_mb=2048 \
	  -max_len=131072 \
	  -artifact_prefix=$(FUZZ_DIR)/crashes/ -dict=server/fuzz.dict \
	  $(FUZZ_DIR)/corpus tests/server/corpus
	@echo "fuzz: new crashes (if any) are in $(FUZZ_DIR)/crashes; copy them to tests/server/corpus/ once fixed"
FUZZ_CI_TIME ?= 60
# The minute is shared with the SCSI fuzzer (tests/unit/scsi-fuzz.mk, a
# prerequisite of fuzz-ci): half each.
FUZZ_CI_SCSI_TIME = $(shell expr $(FUZZ_CI_TIME) / 2)
FUZZ_CI_NBD_TIME = $(shell expr $(FUZZ_CI_TIME) - $(FUZZ_CI_SCSI_TIME))
fuzz-ci: $(FUZZ_BIN)
	server/fuzz-ci.sh $(FUZZ_BIN) $(FUZZ_CI_NBD_TIME)

bench: bench-server
bench-server: $(SERVER) $(PLUGIN)
	@scripts/install-deps fio valgrind
	server/bench.sh $(abspath $(SERVER)) $(abspath $(PLUGIN))

install: install-server
install-server: $(SERVER) $(SERVER_MAN)
	install -D -m 0755 $(SERVER) $(DESTDIR)$(BINDIR)/sect4k-server
	install -D -m 0644 $(SERVER_MAN) $(DESTDIR)$(MANDIR)/man1/$(SERVER_MAN)
uninstall: uninstall-server
uninstall-server:
	rm -f $(DESTDIR)$(BINDIR)/sect4k-server $(DESTDIR)$(MANDIR)/man1/$(SERVER_MAN)
