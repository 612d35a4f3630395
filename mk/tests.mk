# mk/tests.mk — unit tests and the `check` driver (included by the Makefile).

UNIT_TESTS        := linesplit util spool seccomp multipart files chatstream peer snapshot statedir
UNIT_SRCS_linesplit := runner/task/linesplit.c runner/core/util.c
UNIT_SRCS_util      := runner/core/util.c
UNIT_SRCS_spool     := runner/task/spool.c runner/core/log.c
UNIT_SRCS_seccomp   := runner/confine/seccomp.c runner/core/error.c
UNIT_SRCS_multipart := runner/files/multipart.c
UNIT_SRCS_files     := runner/files/files.c runner/core/log.c runner/core/util.c
UNIT_SRCS_chatstream := runner/model/chatstream.c runner/core/util.c
UNIT_SRCS_peer      := runner/http/peer.c
UNIT_SRCS_snapshot  := runner/files/snapshot.c runner/core/error.c
UNIT_SRCS_statedir  := runner/core/statedir.c runner/core/log.c runner/core/error.c
UNIT_LIBS   := -ljansson -lseccomp

build/tests/asan/test_%: tests/unit/test_%.c tests/unit/unit.h $$(UNIT_SRCS_$$*) | build/tests/asan
	$(CC) $(UNIT_FLAGS) $(SAN_FLAGS) $< $(UNIT_SRCS_$*) -o $@ $(UNIT_LIBS)

build/tests/plain/test_%: tests/unit/test_%.c tests/unit/unit.h $$(UNIT_SRCS_$$*) | build/tests/plain
	$(CC) $(UNIT_FLAGS) $< $(UNIT_SRCS_$*) -o $@ $(UNIT_LIBS)

build/tests/asan build/tests/plain:
	@mkdir -p $@

build/tests/probe: tests/security/probe.c mk/flags.mk | build/tests/plain
	$(CC) $(TOOL_FLAGS) $< -o $@

UNIT_BINS := $(foreach t,$(UNIT_TESTS),build/tests/asan/test_$(t) build/tests/plain/test_$(t))

test-bins: all build/asan/forceai-runner static $(UNIT_BINS) build/tests/probe

unit: $(UNIT_BINS)
	@tests/unit/run.sh

check:
	@scripts/install-deps.sh check
	@$(MAKE) --no-print-directory test-bins
	@tests/check.sh

check-fast: test-bins
	@CHECK_FAST=1 tests/check.sh
