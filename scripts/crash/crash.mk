# SPDX-License-Identifier: BSD-3-Clause
# sect4k-crash (issue 23): the crash states of a write log, each checked.
#   make                 also builds $(B)/sect4k-crash and sect4k-crash.1
#                        (scripts/sect4k-crash runs the build's binary)
#   make bench-crash     states checked per second (scripts/crash/bench.sh)

CRASH := $(B)/sect4k-crash
CRASH_MAN := sect4k-crash.1
programs: $(CRASH) $(CRASH_MAN)

# The files and what each holds: scripts/crash/crash.h.
CRASH_SRCS := $(wildcard scripts/crash/*.c)
CRASH_OBJS := $(CRASH_SRCS:%.c=$(B)/%.o)
$(CRASH_OBJS): scripts/crash/crash.h server/nbd.h

$(CRASH): $(CRASH_OBJS) $(ENGINE_LIB)
	$(CC) $(CFLAGS_ALL) -o $@ $(CRASH_OBJS) $(ENGINE_LIB) $(LDFLAGS_ALL) $(ENGINE_LIBS)

$(CRASH_MAN): scripts/crash/sect4k-crash.pod
	pod2man --section=1 --center=sect4k --release=sect4k-$(shell sed -n 's/.*S4K_VERSION "\(.*\)"/\1/p' include/sect4k/sect4k.h) --name=sect4k-crash $< > $@

export SECT4K_CRASH := $(abspath $(CRASH))

# make bench-crash: states checked per second, 64 MiB device, a trivial
# checker (4002 checker runs: 4.5 minutes at a load average of 10 on 2
# cores).  Not part of check.
.PHONY: bench-crash
bench-crash: $(CRASH)
	scripts/crash/bench.sh $(abspath $(CRASH))
