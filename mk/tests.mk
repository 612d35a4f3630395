# mk/tests.mk — the pure library, unit tests and the `check` driver (included by the Makefile).
#
#   make unit                      build every tests/unit/test_*.c twice (ASan+UBSan, plain for
#                                  valgrind) and run them (tests/unit/run.sh)
#   make unit UNIT=files,util      only those test programs
#   make unit UNIT_FILTER=glob_*   only the named cases (names or fnmatch patterns, comma-separated)
#   build/tests/asan/test_files --list   the cases of one program; give names to run only those

# One archive per build: dev objects (valgrind runs), ASan objects, fuzz objects (mk/fuzz.mk).
# Removed first: `ar r` would keep members whose source is gone.
build/libpure.a: $(call pure_objs,build/obj)
build/asan/libpure.a: $(call pure_objs,build/asan/obj)
build/libpure.a build/asan/libpure.a:
	@rm -f $@
	$(AR) rcs $@ $^

comma      := ,
UNIT_ALL   := $(patsubst tests/unit/test_%.c,%,$(wildcard tests/unit/test_*.c))
UNIT       ?= $(UNIT_ALL)
UNIT_TESTS := $(subst $(comma), ,$(UNIT))
UNIT_LIBS  := -ljansson -lseccomp
UNIT_HARNESS := tests/unit/unit.c tests/unit/unit.h

build/tests/asan/test_%: tests/unit/test_%.c $(UNIT_HARNESS) build/asan/libpure.a | build/tests/asan
	$(CC) $(UNIT_FLAGS) $(SAN_FLAGS) $< tests/unit/unit.c build/asan/libpure.a -o $@ $(UNIT_LIBS)

build/tests/plain/test_%: tests/unit/test_%.c $(UNIT_HARNESS) build/libpure.a | build/tests/plain
	$(CC) $(UNIT_FLAGS) $< tests/unit/unit.c build/libpure.a -o $@ $(UNIT_LIBS)

build/tests/asan build/tests/plain:
	@mkdir -p $@

build/tests/probe: tests/security/probe.c mk/flags.mk | build/tests/plain
	$(CC) $(TOOL_FLAGS) $< -o $@

UNIT_BINS := $(foreach t,$(UNIT_TESTS),build/tests/asan/test_$(t) build/tests/plain/test_$(t))

test-bins: all build/asan/forceai-runner static $(UNIT_BINS) build/tests/probe

unit: $(UNIT_BINS)
	@UNIT_FILTER='$(UNIT_FILTER)' tests/unit/run.sh $(UNIT_TESTS)

check:
	@scripts/install-deps.sh check
	@$(MAKE) --no-print-directory test-bins
	@tests/check.sh

check-fast: test-bins
	@CHECK_FAST=1 tests/check.sh
