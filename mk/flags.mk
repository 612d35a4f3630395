# mk/flags.mk: every compiler flag of every build, in one place (included first by the Makefile).
#
# The common flags hold for all C code of the project; each build adds its own on top:
#   dev      build/forceai-runner          release flags, optimisation from CFLAGS (-O2 -g)
#   asan     build/asan/forceai-runner     -O1 with ASan + UBSan (also the unit tests' sanitizer build)
#   static   build/static/forceai-runner   release flags with musl-gcc (mk/static.mk adds its paths)
#   fuzz     build/fuzz/fuzz_*             clang, -O1 with ASan + UBSan + libFuzzer (mk/fuzz.mk)
#   unit     build/tests/*/test_*          the test sources; they link the pure library (mk/tests.mk)
#   tool     small helper programs (tests/bench, the security probe)
#
# CFLAGS (default -O2 -g) is the dev build's optimisation and debug level: `make CFLAGS=-O0`
# works, and drops _FORTIFY_SOURCE (which needs an optimising build).

PKGS   := libmicrohttpd jansson libseccomp libcap-ng libcurl
# WebSocket framing: libmicrohttpd's microhttpd_ws, which Debian does not ship built: made from
# Debian's libmicrohttpd source by scripts/build-mhd-ws.sh (the static build: build-static-deps.sh).
MHD_WS_DIR := build/deps/mhd-ws
MHD_WS_LIB := $(MHD_WS_DIR)/lib/libmicrohttpd_ws.a
LDLIBS := -lmicrohttpd $(MHD_WS_LIB) -ljansson -lseccomp -lcap-ng -lcurl

CFLAGS ?= -O2 -g

STD_FLAGS    := -std=gnu11 -D_GNU_SOURCE
WARN         := -Wall -Wextra -Werror
PKG_CFLAGS   := $(shell pkg-config --cflags $(PKGS) 2>/dev/null) -isystem $(MHD_WS_DIR)/include
# Optional parts (none today: both builds have every feature).
FEATURE_FLAGS :=
COMMON_FLAGS := $(STD_FLAGS) $(WARN) -Irunner

# Release hardening. -U first: some toolchains predefine another level. musl has no fortified
# functions, so in the static build it is a no-op kept for symmetry.
FORTIFY_FLAGS := -U_FORTIFY_SOURCE -D_FORTIFY_SOURCE=2
HARDEN_FLAGS  := $(FORTIFY_FLAGS) -fstack-protector-strong
# Only when CFLAGS optimises (glibc warns otherwise, and -Werror makes that fatal).
dev_harden     = $(if $(filter -O1 -O2 -O3 -Os -Og -Ofast,$(CFLAGS)),$(HARDEN_FLAGS),\
		 $(filter-out $(FORTIFY_FLAGS),$(HARDEN_FLAGS)))

SAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined

DEV_CFLAGS    = $(COMMON_FLAGS) $(FEATURE_FLAGS) $(PKG_CFLAGS) $(dev_harden) $(CFLAGS)
ASAN_CFLAGS   = $(COMMON_FLAGS) $(FEATURE_FLAGS) $(PKG_CFLAGS) -O1 -g $(SAN_FLAGS)
STATIC_FLAGS  = $(COMMON_FLAGS) -O2 -g $(HARDEN_FLAGS) -static -ffunction-sections -fdata-sections
FUZZ_FLAGS    = $(COMMON_FLAGS) $(FEATURE_FLAGS) $(PKG_CFLAGS) -O1 -g $(SAN_FLAGS)
UNIT_FLAGS    = $(COMMON_FLAGS) $(FEATURE_FLAGS) $(PKG_CFLAGS) -O1 -g
TOOL_FLAGS    = $(STD_FLAGS) $(WARN) -O2 -g
