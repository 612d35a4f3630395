# mk/static.mk: the fully static musl build of forceai-runner.
#
# Included by the top-level Makefile (run from the repository root). Targets:
#   static          build/static/forceai-runner (stripped) and build/static/forceai-runner.debug
#   static-deps     (re)run scripts/build-static-deps.sh: builds the static libraries from Debian's
#                   source packages into build/static/deps; cached, so a no-op when up to date
#                   except for libraries whose Debian version changed (security updates)
#   static-verify   assert the binary is fully static (no PT_INTERP, no dynamic section) and
#                   at most STATIC_MAX_SIZE bytes (2 MiB); STATIC_VERIFY_BIN=... checks another file
#   static-clean    remove the runner's static objects and binaries (keeps the deps)
#   static-distclean  remove build/static entirely (deps included)
#
# Every variable here is prefixed STATIC_, except RUNNER_SRCS (?=, shared with the main build).
# The compiler flags are STATIC_FLAGS of mk/flags.mk.

STATIC_MK          := $(lastword $(MAKEFILE_LIST))
# Including this file must not change the including Makefile's default goal.
STATIC_SAVED_GOAL  := $(.DEFAULT_GOAL)

RUNNER_SRCS ?= $(wildcard runner/*.c runner/*/*.c)
STATIC_OUT         ?= build/static
STATIC_DEPS_DIR    := $(STATIC_OUT)/deps
STATIC_DEPS_STAMP  := $(STATIC_OUT)/deps.stamp
STATIC_KINC        := $(STATIC_OUT)/kernel-include
STATIC_OBJDIR      := $(STATIC_OUT)/obj
STATIC_BIN         := $(STATIC_OUT)/forceai-runner
STATIC_DEBUG_BIN   := $(STATIC_BIN).debug
STATIC_DEPS_SCRIPT ?= scripts/build-static-deps.sh
STATIC_JOBS        ?= 2
STATIC_MAX_SIZE    ?= 2097152
STATIC_VERIFY_BIN  ?= $(STATIC_BIN)

STATIC_CC       ?= musl-gcc
STATIC_STRIP    ?= strip
STATIC_READELF  ?= readelf
STATIC_CFLAGS   = $(STATIC_FLAGS)
STATIC_CPPFLAGS := -isystem $(STATIC_DEPS_DIR)/include -isystem $(STATIC_KINC)
STATIC_LDFLAGS  := -static -L$(STATIC_DEPS_DIR)/lib -Wl,--gc-sections
# Dependents before what they use: curl needs mbedTLS (ssl -> x509 -> crypto).
STATIC_LDLIBS   := -lmicrohttpd -lmicrohttpd_ws -lcurl -lmbedtls -lmbedx509 -lmbedcrypto \
                   -ljansson -lseccomp -lcap-ng
STATIC_EXTRA_CFLAGS  ?=
STATIC_EXTRA_LDFLAGS ?=
STATIC_OBJS := $(patsubst runner/%.c,$(STATIC_OBJDIR)/%.o,$(RUNNER_SRCS))

# The deps script must not see the outer make's flags or command-line variables.
STATIC_RUN_SCRIPT = env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u MAKEOVERRIDES \
                    STATIC_OUT="$(STATIC_OUT)" STATIC_JOBS="$(STATIC_JOBS)" \
                    bash $(STATIC_DEPS_SCRIPT)

.PHONY: static static-deps static-verify static-clean static-distclean

static: $(STATIC_BIN)

static-deps:
	@$(STATIC_RUN_SCRIPT)

$(STATIC_DEPS_STAMP): $(STATIC_DEPS_SCRIPT)
	@$(STATIC_RUN_SCRIPT)

$(STATIC_OBJDIR)/%.o: runner/%.c $(STATIC_DEPS_STAMP) $(STATIC_MK) mk/flags.mk
	@mkdir -p $(@D)
	$(STATIC_CC) $(STATIC_CFLAGS) $(STATIC_EXTRA_CFLAGS) $(STATIC_CPPFLAGS) -MMD -MP -c $< -o $@

$(STATIC_OBJDIR):
	@mkdir -p $@

# The task shim, built with the same musl toolchain and headers (mk/shim.mk).
STATIC_SHIM := $(STATIC_OUT)/shim/forceai-shim
$(STATIC_SHIM): $(SHIM_SRCS) $(SHIM_HDRS) $(STATIC_DEPS_STAMP) $(STATIC_MK)
	@mkdir -p $(@D)
	$(STATIC_CC) $(SHIM_FLAGS) $(STATIC_CPPFLAGS) $(SHIM_SRCS) -o $@
$(STATIC_OBJDIR)/task/shim_blob.o: $(STATIC_SHIM)
$(STATIC_OBJDIR)/task/shim_blob.o: STATIC_EXTRA_CFLAGS += -DSHIM_BIN='"$(STATIC_SHIM)"'

$(STATIC_DEBUG_BIN): $(STATIC_OBJS) $(STATIC_DEPS_STAMP)
	@test -n "$(STATIC_OBJS)" || { echo "static: no sources (RUNNER_SRCS is empty)" >&2; exit 1; }
	$(STATIC_CC) $(STATIC_CFLAGS) $(STATIC_EXTRA_CFLAGS) $(STATIC_OBJS) -o $@ \
	    $(STATIC_LDFLAGS) $(STATIC_EXTRA_LDFLAGS) $(STATIC_LDLIBS)

$(STATIC_BIN): $(STATIC_DEBUG_BIN)
	$(STATIC_STRIP) --strip-all -o $@ $<
	@echo "static: $@ $$(stat -c %s $@) bytes"

static-verify: $(if $(filter $(STATIC_BIN),$(STATIC_VERIFY_BIN)),$(STATIC_BIN))
	@f="$(STATIC_VERIFY_BIN)"; max=$(STATIC_MAX_SIZE); \
	test -f "$$f" || { echo "static-verify: $$f: no such file" >&2; exit 1; }; \
	$(STATIC_READELF) -hW "$$f" >/dev/null || { echo "static-verify: $$f: not ELF" >&2; exit 1; }; \
	if $(STATIC_READELF) -lW "$$f" | grep -qE '^[[:space:]]*INTERP[[:space:]]'; then \
	    echo "static-verify: FAIL: $$f has a PT_INTERP (dynamically linked)" >&2; exit 1; fi; \
	if $(STATIC_READELF) -lW "$$f" | grep -qE '^[[:space:]]*DYNAMIC[[:space:]]'; then \
	    echo "static-verify: FAIL: $$f has a PT_DYNAMIC segment" >&2; exit 1; fi; \
	if ! $(STATIC_READELF) -d "$$f" | grep -q 'no dynamic section'; then \
	    echo "static-verify: FAIL: $$f has a dynamic section" >&2; exit 1; fi; \
	size=$$(stat -c %s "$$f"); \
	echo "static-verify: $$f: $$size bytes ($$(awk "BEGIN{printf \"%.2f\", $$size/1048576}") MiB, limit $$max), no PT_INTERP, no dynamic section"; \
	if [ "$$size" -gt "$$max" ]; then \
	    echo "static-verify: FAIL: $$f is larger than $$max bytes" >&2; exit 1; fi

static-clean:
	rm -rf $(STATIC_OBJDIR) $(STATIC_BIN) $(STATIC_DEBUG_BIN)

static-distclean:
	rm -rf $(STATIC_OUT)

-include $(wildcard $(STATIC_OBJDIR)/*.d $(STATIC_OBJDIR)/*/*.d)

.DEFAULT_GOAL := $(STATIC_SAVED_GOAL)
