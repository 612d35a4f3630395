# mk/bench.mk - `make bench`: the benchmarks of tests/bench (included by the Makefile).
#
#   make bench                     full run (about 8-10 minutes on 2 cores; 8 alone is 2 x 60 s)
#   make bench BENCH_QUICK=1       smoke run with small sizes (< 1 minute), for `make check`
#   make bench BENCH_RUNNER=/path/to/forceai-runner   measure another build (not rebuilt)
#   make bench BENCH_ONLY=4,7      only some benchmarks (numbers as in tests/bench/bench.py)
#   make bench BENCH_STRICT=1      also fail when a goal is missed (default: only on errors)
#
# Writes build/bench/results.json and build/bench/results.md (quick runs: build/bench/quick/)
# and prints the table. Exits non-zero when a benchmark could not run correctly.
# Sizes: BENCH_READY_RUNS BENCH_RTT_N BENCH_SANDBOX_N BENCH_ROUNDS BENCH_TPUT_MIB
# BENCH_TPUT_REPS BENCH_CONC_TASKS BENCH_CONC_KIB BENCH_LOAD_SECONDS BENCH_LOAD_CLIENTS
# BENCH_FILES_MIB BENCH_FILES_ROUNDS (empty = defaults of the mode).
# Every variable here is prefixed BENCH_.

BENCH_OUT      ?= build/bench
BENCH_RUNNER   ?= build/forceai-runner
BENCH_STATIC   ?= build/static/forceai-runner
BENCH_POLICY   ?= $(CURDIR)/seccomp/default.json
BENCH_CC       ?= $(CC)
BENCH_CFLAGS   ?= $(TOOL_FLAGS) -pthread
BENCH_PYTHON   ?= python3
BENCH_QUICK    ?=
BENCH_ONLY     ?=
BENCH_STRICT   ?=
BENCH_RUNNER_ARGS ?=
BENCH_READY_RUNS  ?=
BENCH_RTT_N       ?=
BENCH_SANDBOX_N   ?=
BENCH_ROUNDS      ?=
BENCH_TPUT_MIB    ?=
BENCH_TPUT_REPS   ?=
BENCH_CONC_TASKS  ?=
BENCH_CONC_KIB    ?=
BENCH_LOAD_SECONDS ?=
BENCH_LOAD_CLIENTS ?=
BENCH_FILES_MIB    ?=
BENCH_FILES_ROUNDS ?=

BENCH_TOOLS := $(BENCH_OUT)/ready $(BENCH_OUT)/rawspawn $(BENCH_OUT)/rtt $(BENCH_OUT)/relay \
	$(BENCH_OUT)/wsecho
# The dev build is (re)built by this Makefile; any other BENCH_RUNNER is taken as it is.
BENCH_BUILD := $(filter build/forceai-runner,$(BENCH_RUNNER))

BENCH_OPTS = --runner $(BENCH_RUNNER) --static $(BENCH_STATIC) --policy $(BENCH_POLICY) \
	--tools $(BENCH_OUT) --out $(BENCH_OUT)$(if $(BENCH_QUICK),/quick) \
	$(if $(BENCH_QUICK),--quick) $(if $(BENCH_STRICT),--strict) \
	$(if $(BENCH_ONLY),--only $(BENCH_ONLY)) \
	$(foreach a,$(BENCH_RUNNER_ARGS),--runner-arg=$(a)) \
	$(if $(BENCH_READY_RUNS),--ready-runs $(BENCH_READY_RUNS)) \
	$(if $(BENCH_RTT_N),--rtt-n $(BENCH_RTT_N)) \
	$(if $(BENCH_SANDBOX_N),--sandbox-n $(BENCH_SANDBOX_N)) \
	$(if $(BENCH_ROUNDS),--rounds $(BENCH_ROUNDS)) \
	$(if $(BENCH_TPUT_MIB),--tput-mib $(BENCH_TPUT_MIB)) \
	$(if $(BENCH_TPUT_REPS),--tput-reps $(BENCH_TPUT_REPS)) \
	$(if $(BENCH_CONC_TASKS),--conc-tasks $(BENCH_CONC_TASKS)) \
	$(if $(BENCH_CONC_KIB),--conc-kib $(BENCH_CONC_KIB)) \
	$(if $(BENCH_LOAD_SECONDS),--load-seconds $(BENCH_LOAD_SECONDS)) \
	$(if $(BENCH_LOAD_CLIENTS),--load-clients $(BENCH_LOAD_CLIENTS)) \
	$(if $(BENCH_FILES_MIB),--files-mib $(BENCH_FILES_MIB)) \
	$(if $(BENCH_FILES_ROUNDS),--files-rounds $(BENCH_FILES_ROUNDS))

$(BENCH_TOOLS): $(BENCH_OUT)/%: tests/bench/%.c tests/bench/bench.h
	@command -v $(firstword $(BENCH_CC)) >/dev/null 2>&1 || scripts/install-deps.sh build
	@mkdir -p $(@D)
	$(BENCH_CC) $(BENCH_CFLAGS) $< -o $@

.PHONY: bench
bench: $(BENCH_TOOLS) $(BENCH_BUILD)
	@scripts/install-deps.sh bench
	$(BENCH_PYTHON) tests/bench/bench.py $(BENCH_OPTS)
	$(BENCH_PYTHON) tests/bench/proxy_bench.py --runner $(BENCH_RUNNER) $(if $(BENCH_QUICK),--quick) \
	    --json $(BENCH_OUT)$(if $(BENCH_QUICK),/quick)/proxy.json
	$(BENCH_PYTHON) tests/bench/pty_bench.py --runner $(BENCH_RUNNER) $(if $(BENCH_QUICK),--quick) \
	    --json $(BENCH_OUT)$(if $(BENCH_QUICK),/quick)/pty.json
