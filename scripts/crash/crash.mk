# sect4k-crash (issue 23): the crash states of a write log, each checked.
#   make                 also builds $(B)/sect4k-crash and sect4k-crash.1
#                        (scripts/sect4k-crash runs the build's binary)
#   make bench-crash     states checked per second (scripts/crash/bench.sh)

CRASH := $(B)/sect4k-crash
CRASH_MAN := sect4k-crash.1
programs: $(CRASH) $(CRASH_MAN)

$(CRASH): scripts/crash/crash.c $(ENGINE_LIB) $(wildcard include/sect4k/*.h) server/nbd.h
	$(CC) $(CFLAGS_ALL) -o $@ $< $(ENGINE_LIB) $(LDFLAGS_ALL) $(ENGINE_LIBS)

$(CRASH_MAN): scripts/crash/sect4k-crash.pod
	pod2man --section=1 --center=sect4k --release=sect4k-$(shell sed -n 's/.*S4K_VERSION "\(.*\)"/\1/p' include/sect4k/sect4k.h) --name=sect4k-crash $< > $@

export SECT4K_CRASH := $(abspath $(CRASH))

# make bench-crash: states checked per second, 64 MiB device, a trivial
# checker (about 30 s).  Not part of check.
.PHONY: bench-crash
bench-crash: $(CRASH)
	scripts/crash/bench.sh $(abspath $(CRASH))
