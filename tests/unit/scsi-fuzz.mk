# SPDX-License-Identifier: BSD-3-Clause
# The SCSI command layer's fuzz target (tests/unit/scsi-fuzz.c).
#   make fuzz-scsi       libFuzzer (clang) for FUZZ_TIME seconds (60)
#   make fuzz-ci         runs it for FUZZ_CI_SCSI_TIME seconds (half of
#                        FUZZ_CI_TIME, see server/server.mk) before the
#                        NBD fuzzer
# The unit-test rule builds the same file without libFuzzer as
# $(B)/tests/unit-scsi-fuzz, which tests/unit/scsi-fuzz.t runs on the
# corpus tests/unit/scsi-corpus (seeds: tests/unit/scsi-fuzz-seeds.py).

SCSI_FUZZ_BIN := $(FUZZ_DIR)/fuzz-scsi
SCSI_CORPUS := tests/unit/scsi-corpus
.PHONY: fuzz-scsi fuzz-ci-scsi

$(SCSI_FUZZ_BIN): tests/unit/scsi-fuzz.c $(ENGINE_SRCS) $(ENGINE_HDRS)
	@mkdir -p $(dir $@)
	clang -std=gnu11 -O1 -g -Iinclude -Ilib -Wall -Wextra -Werror -DS4K_LIBFUZZER \
	  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	  $(URING_CFLAGS) $(LIBNBD_CFLAGS) -o $@ tests/unit/scsi-fuzz.c $(ENGINE_SRCS) \
	  -pthread $(ENGINE_LIBS)
$(SCSI_FUZZ_BIN): | fuzz-deps

fuzz-scsi: $(SCSI_FUZZ_BIN)
	@mkdir -p $(FUZZ_DIR)/scsi-corpus $(FUZZ_DIR)/scsi-crashes
	$(SCSI_FUZZ_BIN) -max_total_time=$(FUZZ_TIME) -timeout=10 -rss_limit_mb=2048 \
	  -max_len=65536 -artifact_prefix=$(FUZZ_DIR)/scsi-crashes/ \
	  $(FUZZ_DIR)/scsi-corpus $(SCSI_CORPUS)
	@echo "fuzz-scsi: new crashes (if any) are in $(FUZZ_DIR)/scsi-crashes; copy them to $(SCSI_CORPUS)/ once fixed"

fuzz-ci-scsi: $(SCSI_FUZZ_BIN)
	FUZZ_CI_DIR=build/fuzz/ci-scsi FUZZ_CORPUS=$(SCSI_CORPUS) FUZZ_DICT= \
	FUZZ_REPLAY="build/default/tests/unit-scsi-fuzz crash   # or $(SCSI_FUZZ_BIN) crash" \
	  server/fuzz-ci.sh $(SCSI_FUZZ_BIN) $(FUZZ_CI_SCSI_TIME)
fuzz-ci: fuzz-ci-scsi
