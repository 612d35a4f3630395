# mk/shim.mk: the task shim (runner/shim/main.c) as a small static program,
# embedded in the runner by runner/task/shim_blob.c (.incbin) and exec'd
# from a memfd for every task (runner/task/spawn.h). Included by the
# Makefile before mk/static.mk.
#
# It is built from the runner's own sources for the child side of
# confinement (confine_exec and what it calls): function sections and
# --gc-sections keep only that, so the parent-side code in the same files
# (and the libraries it calls) stays out. musl makes it small and quick to
# exec (about 0.2 ms against 0.5 ms for a static glibc program); without
# musl-gcc, the system compiler builds it against static glibc.

SHIM_SRCS := runner/shim/main.c runner/task/spawn.c runner/task/shim_policy.c \
	     runner/task/proctree.c runner/confine/confine.c runner/confine/caps.c \
	     runner/confine/landlock.c runner/confine/seccomp.c runner/confine/netdeny.c \
	     runner/confine/ptracedeny.c runner/confine/seccomp_notify.c \
	     runner/core/signals.c runner/core/procfs.c runner/core/closefds.c
SHIM_HDRS := $(wildcard runner/*/*.h)
SHIM_MUSL := $(shell command -v musl-gcc 2>/dev/null)
SHIM_CC   ?= $(if $(SHIM_MUSL),musl-gcc,$(CC))
# musl-gcc sees only musl's headers: the kernel's and the libraries' (only
# declared, never linked) come after them.
SHIM_MULTIARCH := $(shell $(CC) -dumpmachine 2>/dev/null)
SHIM_INC  := $(if $(SHIM_MUSL),-idirafter /usr/include -idirafter /usr/include/$(SHIM_MULTIARCH))
SHIM_FLAGS = -std=gnu11 -D_GNU_SOURCE $(WARN) -Os -ffunction-sections -fdata-sections \
	     -fno-asynchronous-unwind-tables -Irunner -static -Wl,--gc-sections -s

build/shim/forceai-shim: $(SHIM_SRCS) $(SHIM_HDRS) mk/shim.mk
	@mkdir -p $(@D)
	$(SHIM_CC) $(SHIM_FLAGS) $(SHIM_INC) $(SHIM_SRCS) -o $@

# The embedding objects of the dev, ASan and fuzz builds.
build/obj/task/shim_blob.o build/asan/obj/task/shim_blob.o: build/shim/forceai-shim

# The code contexts' Python driver, embedded the same way (runner/code/driver_blob.c).
build/obj/code/driver_blob.o build/asan/obj/code/driver_blob.o build/fuzz/obj/code/driver_blob.o: runner/code/driver.py \
	runner/code/driver.js runner/code/driver.sh
