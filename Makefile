# forceai-runner — see README.md. Quick start: `make run`, `make check`.

CC       ?= cc

include mk/flags.mk

# runner/shim/ is a program of its own (the task shim), embedded by
# runner/task/shim_blob.c: see mk/shim.mk.
RUNNER_SRCS := $(sort $(filter-out runner/shim/%,$(wildcard runner/*.c runner/*/*.c)))
OBJS        := $(patsubst runner/%.c,build/obj/%.o,$(RUNNER_SRCS))
ASAN_OBJS   := $(patsubst runner/%.c,build/asan/obj/%.o,$(RUNNER_SRCS))

# The pure modules: no event loop, no runner state. They are built once (the runner's own objects
# of each build) into a static library that unit tests and fuzz targets link, instead of hand-kept
# source lists. `make lint` checks that they use nothing outside this set.
PURE_SRCS := runner/core/buf.c runner/core/memfind.c runner/core/utf8.c runner/core/jsonesc.c \
	     runner/core/base64.c runner/core/randomid.c runner/core/signame.c runner/core/fileio.c \
	     runner/core/error.c runner/core/log.c runner/core/statedir.c \
	     runner/core/procfs.c runner/core/closefds.c \
	     runner/task/linesplit.c runner/task/spool.c runner/task/envfile.c \
	     runner/http/h1parse.c runner/http/sse.c runner/http/body.c runner/relay/hop.c \
	     runner/relay/splice.c \
	     runner/model/chatstream.c runner/confine/seccomp.c runner/confine/seccomp_cache.c \
	     runner/confine/seccomp_notify.c \
	     runner/model/engine_events.c runner/model/engine_codex.c runner/model/engine_claude.c \
	     runner/model/engine_parse.c \
	     runner/model/usage.c runner/model/budget.c runner/model/wire.c \
	     runner/model/wire_openai.c runner/model/wire_anthropic.c runner/model/wire_gemini.c \
	     runner/core/sha256.c runner/core/inflate.c runner/audit/chain.c runner/audit/sources.c \
	     runner/http/peer.c runner/mcp/proto.c \
	     runner/profile/initcfg.c runner/profile/reset_snapshot.c runner/envd/connect.c \
	     $(filter-out runner/files/sched.c runner/files/userjob.c,$(wildcard runner/files/*.c)) \
	     $(wildcard runner/tree/*.c)
pure_objs = $(patsubst runner/%.c,$(1)/%.o,$(filter $(RUNNER_SRCS),$(PURE_SRCS)))

.PHONY: all deps check check-fast run run-local bench fuzz soak clean unit test-bins
all: build/forceai-runner

deps:
	@scripts/install-deps.sh build

# A newcomer's `make`: the Debian packages first (installed as root, else the one apt-get line is
# printed), then the WebSocket library from Debian's libmicrohttpd source. Order-only for the
# objects: a compiler error about a missing header never comes first.
build/.build-deps: scripts/install-deps.sh
	@mkdir -p $(@D)
	@scripts/install-deps.sh build
	@touch $@
$(MHD_WS_LIB): scripts/build-mhd-ws.sh | build/.build-deps
	@scripts/build-mhd-ws.sh $(MHD_WS_DIR)

build/obj/%.o: runner/%.c mk/flags.mk | $(MHD_WS_LIB)
	@mkdir -p $(@D)
	$(CC) $(DEV_CFLAGS) -MMD -MP -c $< -o $@

build/forceai-runner: $(OBJS) $(MHD_WS_LIB)
	$(CC) $(CFLAGS) $(OBJS) -o $@ $(LDLIBS)

build/asan/obj/%.o: runner/%.c mk/flags.mk | $(MHD_WS_LIB)
	@mkdir -p $(@D)
	$(CC) $(ASAN_CFLAGS) -MMD -MP -c $< -o $@

build/asan/forceai-runner: $(ASAN_OBJS) $(MHD_WS_LIB)
	$(CC) -g $(SAN_FLAGS) $(ASAN_OBJS) -o $@ $(LDLIBS)

build/obj build/asan/obj:
	@mkdir -p $@

-include $(wildcard build/obj/*.d build/obj/*/*.d build/asan/obj/*.d build/asan/obj/*/*.d)

include mk/shim.mk
include mk/static.mk
include mk/image.mk
.SECONDEXPANSION:
include mk/tests.mk
include mk/fuzz.mk
include mk/bench.mk
include mk/lint.mk

clean:
	rm -rf build/obj build/asan build/forceai-runner build/libpure.a build/tests build/shim \
		build/fuzz/obj build/fuzz/libpure.a build/fuzz/fuzz_*

# `make run`: the real thing — the image built from the Containerfile, run
# with podman (or docker), endpoint + token + a curl printed.
run:
	@$(IMAGE_DEPS) run
	@$(MAKE) --no-print-directory run-container

# The dev build as PID 1 of a fresh PID namespace, in the foreground.
run-local: all
	@scripts/run-local.sh
