# mk/fuzz.mk — libFuzzer targets (tests/fuzz/, clang + ASan + UBSan), and the
# fault/load suite at full size (included by the Makefile).
#
#   make fuzz         each target for FUZZ_TIME seconds (default 300)
#   make fuzz-smoke   each target for FUZZ_SMOKE_TIME seconds (default 12,
#                     FUZZ_JOBS at once, default one a core; part of
#                     `make check`); fails on any crash, leak, timeout or
#                     out-of-memory
#   make fuzz-build   just the binaries (build/fuzz/fuzz_<target>)
#   make soak         tests/fault at full size (SOAK=1)
#
# FUZZ_TARGETS=http,... picks targets; FUZZ_ARGS adds libFuzzer flags.
# New inputs go to build/fuzz/corpus/<target> (not the committed seeds in
# tests/fuzz/corpus/<target>); crashes to build/fuzz/artifacts/.

FUZZ_CC         ?= clang
FUZZ_TIME       ?= 300
FUZZ_SMOKE_TIME ?= 12
FUZZ_TIMEOUT    ?= 10
FUZZ_RSS_MB     ?= 2048
FUZZ_ARGS       ?=
FUZZ_DIR        := build/fuzz
FUZZ_ALL        := http json_bodies linesplit envfile seccomp $(if $(wildcard runner/files/multipart.c),multipart) chatstream ws \
		   h1parse relayhead wire engines mcp regex lifecycle udiff auditchain connect inflate
FUZZ_TARGETS    ?= $(FUZZ_ALL)
# Flags: FUZZ_FLAGS of mk/flags.mk; runner objects also get coverage instrumentation.
FUZZ_OBJ_CFLAGS = $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link
FUZZ_CFLAGS     = $(FUZZ_FLAGS)
# The WebSocket library is compiled here from the same configured Debian source as the dev
# build's archive (scripts/build-mhd-ws.sh), with the fuzzer's coverage and sanitizers, so the
# framing itself is what is fuzzed (docs/design/interactive.md#one-websocket-library-for-both-builds-libmicrohttpds-microhttpd_ws). Its encoder stores a frame's 16- and
# 64-bit lengths through casts at odd offsets (mhd_websocket.c), which UBSan's alignment check
# reports on the first frame over 64 KiB; x86-64 and arm64 do such stores in hardware, so that one
# check is off for the library's two files (ours keep it).
FUZZ_MHD_WS_SRC  = $(MHD_WS_DIR)/tree/src/microhttpd_ws
FUZZ_MHD_WS_OBJS := $(FUZZ_DIR)/obj/mhd_ws/mhd_websocket.o $(FUZZ_DIR)/obj/mhd_ws/sha1.o
FUZZ_LIBS       = $(FUZZ_MHD_WS_OBJS) $(filter-out $(MHD_WS_LIB),$(LDLIBS))

$(FUZZ_DIR)/obj/mhd_ws/%.o: $(MHD_WS_LIB)
	@mkdir -p $(@D)
	$(FUZZ_CC) -O1 -g $(SAN_FLAGS) -fno-sanitize=alignment -fsanitize=fuzzer-no-link -DHAVE_CONFIG_H -DBUILDING_MHD_LIB=1 \
		-I$(MHD_WS_DIR)/tree -I$(MHD_WS_DIR)/tree/src/include -I$(MHD_WS_DIR)/tree/src/microhttpd \
		-c $(FUZZ_MHD_WS_SRC)/$*.c -o $@

# http, json_bodies and ws drive the whole server: every runner object but main.o (libFuzzer has
# main()); the others link the pure library (PURE_SRCS in the Makefile).
FUZZ_WHOLE       := http json_bodies ws
FUZZ_RUNNER_OBJS := $(patsubst runner/%.c,$(FUZZ_DIR)/obj/%.o,$(filter-out runner/main.c,$(RUNNER_SRCS)))
FUZZ_PURE        := $(FUZZ_DIR)/libpure.a
fuzz_links        = $(if $(filter $(1),$(FUZZ_WHOLE)),$(FUZZ_RUNNER_OBJS) tests/fuzz/fuzz_hooks.c,$(FUZZ_PURE))
# The whole-server targets also check libmicrohttpd's suspend/resume contract and every
# close() (fuzz_hooks.c).
FUZZ_LD_MHD_CHECK     := -Wl,--wrap=MHD_suspend_connection -Wl,--wrap=MHD_resume_connection \
			 -Wl,--wrap=close
FUZZ_LD_http          := -Wl,--wrap=spawn_task -Wl,--wrap=random_id $(FUZZ_LD_MHD_CHECK)
FUZZ_LD_json_bodies   := -Wl,--wrap=spawn_task $(FUZZ_LD_MHD_CHECK)
FUZZ_LD_ws            := -Wl,--wrap=spawn_task $(FUZZ_LD_MHD_CHECK)

$(FUZZ_DIR)/obj/%.o: runner/%.c mk/flags.mk | $(MHD_WS_LIB)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_OBJ_CFLAGS) -MMD -MP -c $< -o $@

$(FUZZ_PURE): $(call pure_objs,$(FUZZ_DIR)/obj)
	@rm -f $@
	$(AR) rcs $@ $^

$(FUZZ_DIR)/fuzz_%: tests/fuzz/fuzz_%.c $$(call fuzz_links,$$*) $(FUZZ_MHD_WS_OBJS) | $(FUZZ_DIR)/obj
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer $< $(call fuzz_links,$*) $(FUZZ_LD_$*) -o $@ \
		$(FUZZ_LIBS)

$(FUZZ_DIR)/obj:
	@mkdir -p $@

.PRECIOUS: $(FUZZ_DIR)/obj/%.o
.SECONDARY: $(FUZZ_MHD_WS_OBJS)

-include $(wildcard $(FUZZ_DIR)/obj/*.d $(FUZZ_DIR)/obj/*/*.d)

FUZZ_BINS = $(patsubst %,$(FUZZ_DIR)/fuzz_%,$(FUZZ_TARGETS))

.PHONY: fuzz fuzz-smoke fuzz-build soak
fuzz-build: $(FUZZ_BINS)

fuzz: fuzz-build
	@FUZZ_TIMEOUT=$(FUZZ_TIMEOUT) FUZZ_RSS_MB=$(FUZZ_RSS_MB) FUZZ_ARGS="$(FUZZ_ARGS)" \
		tests/fuzz/run.sh $(FUZZ_TIME) $(FUZZ_TARGETS)

fuzz-smoke: fuzz-build
	@FUZZ_TIMEOUT=$(FUZZ_TIMEOUT) FUZZ_RSS_MB=$(FUZZ_RSS_MB) FUZZ_ARGS="$(FUZZ_ARGS)" \
		tests/fuzz/run.sh $(FUZZ_SMOKE_TIME) $(FUZZ_TARGETS)

soak: all
	SOAK=1 python3 tests/run.py fault

# The runner embeds the task shim (mk/shim.mk).
$(FUZZ_DIR)/obj/task/shim_blob.o: build/shim/forceai-shim
