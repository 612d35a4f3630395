# mk/lint.mk — `make lint`: checks of the tree that run no test (included by the Makefile).
#
#   make lint            the checks below in turn; prints "lint: N passed, N failed"
#   make modgraph        the module graph of the dev build's objects (scripts/modgraph.py): fails
#                        on a dependency cycle, when a pure module (PURE_SRCS) uses another one,
#                        or when a module uses (by symbol) or a file of runner/ #includes (headers
#                        including headers too) a folder that is not below its own in LAYERS
#   make rooms           scripts/rooms.py: a file of runner/api/ schedules nothing on the loop
#                        (loop_timer_*, loop_watch_*, loop_defer) and keeps no file-scope state
#                        that is not const (api/ is routes, an engine lives below it); no file of
#                        runner/ is over 800 lines, no function over 80; a project header is
#                        never included with angle brackets
#   make format-check    fails when clang-format (the committed .clang-format) would change a
#                        file of runner/ or tests/*/ (the verdict of --dry-run --Werror), and
#                        says how many lines; FORMAT_DIFF=1 shows the changes
#   make format          rewrites those files with clang-format
#   make design-refs     scripts/design_refs.py --check: every reference to the design
#                        (design/<concern>.md#<anchor>) names a file and heading that exist, and
#                        no reference by the old section numbers is left (DESIGN_REFS_SCAN:
#                        where; empty: the whole tree)
#   make modgraph-selftest, make fuzzrun-selftest, make rooms-selftest, design-refs-selftest
#                        the self-tests of scripts/modgraph.py, of tests/fuzz/run.sh's report
#                        of a finding, of scripts/rooms.py and scripts/design_refs.py (tests/lint/)
#
# Needs python3, nm (binutils) and clang-format 14, Debian 12's (scripts/install-deps.sh lint).

LINT_PYTHON  ?= python3
CLANG_FORMAT ?= clang-format
FORMAT_FILES  = $(sort $(wildcard runner/*.[ch] runner/*/*.[ch] tests/*/*.[ch]))
LINT_CHECKS  := modgraph-selftest fuzzrun-selftest rooms-selftest design-refs-selftest modgraph \
                rooms format-check design-refs
# Where design-refs looks; empty: the whole tree (the script's own list).
DESIGN_REFS_SCAN ?=

# The folders of runner/, lowest first; the folders of one step sit side by side and use none of
# each other. A folder uses only its own and lower ones (runner/main.c is above them all). A new
# file needs nothing here; a new folder must be placed, or `make modgraph` names it.
#   core                     loop, config, errors, logs, the runner's state (runner.h)
#   audit text               the audit trail: its chain, bounds per source, sinks (file, OTLP)
#                            and --verify-audit; text matching (pure): grep's regular
#                            expressions, the glob patterns of searches, unified diffs
#   confine files http       confinement; the filesystem layer; the HTTP server
#   task tree                the task engine; the file-tree engine (capture, compare, restore of
#                            the writable roots: the reset's snapshot and checkpoints)
#   checkpoint pty watch     one step: workspace checkpoints (their list, bounds, worker and a
#     metrics init           task's changes, on tree/; the routes and the MCP tools are thin
#                            faces); execd's PTY sessions (the table, each one's shell, a task,
#                            and its WebSocket clients; the routes: api/pty.c); the directory
#                            watch engine (inotify; api/watch.c, envd's watchers); the metrics'
#                            figures and their OTLP exporter (on core/ only); runtime init
#                            (POST /internal/init, the gate, /ready) and lifecycle hooks, run as
#                            tasks (what it calls above itself, through struct init_hooks)
#   relay code profile       the proxies' machinery; code contexts; runtime
#                            profiles and the reset (what a reset ends above profile/, it
#                            reaches through struct profile_hooks)
#   tools                    the tools of /mcp and of the built-in agent
#   model mcp                model calls, the model proxy, agent engines; MCP: its messages,
#                            the stdio servers behind /mcp, the box's MCP server (sessions,
#                            tool calls on tools/; the route: api/mcp.c)
#   api shim                 the routes; the task shim (a program of its own)
#   envd                     E2B's envd face: a codec over the routes' files prologue and the
#                            engine below (docs/design/envd.md)
LAYERS := core < audit text < confine files http < task tree < checkpoint pty watch metrics init < relay code profile < tools < model mcp < api shim < envd

.PHONY: lint modgraph modgraph-selftest fuzzrun-selftest rooms rooms-selftest format format-check \
	design-refs design-refs-selftest

# Every check runs even when an earlier one fails.
lint:
	@scripts/install-deps.sh lint
	@pass=0 fail=0 failed=; \
	for c in $(LINT_CHECKS); do \
		echo "--- $$c"; \
		if $(MAKE) --no-print-directory $$c; then pass=$$((pass + 1)); \
		else fail=$$((fail + 1)); failed="$$failed $$c"; fi; \
	done; \
	if [ -n "$$failed" ]; then echo "lint: failed:$$failed"; fi; \
	echo "lint: $$pass passed, $$fail failed"; \
	[ $$fail -eq 0 ]

modgraph-selftest:
	@tests/lint/test_modgraph.sh

fuzzrun-selftest:
	@tests/lint/test_fuzz_run.sh

rooms-selftest:
	@tests/lint/test_rooms.sh

design-refs-selftest:
	@tests/lint/test_design_refs.sh

design-refs:
	@$(LINT_PYTHON) scripts/design_refs.py --check $(DESIGN_REFS_SCAN)

rooms:
	@$(LINT_PYTHON) scripts/rooms.py --sources runner

modgraph: $(OBJS)
	@$(LINT_PYTHON) scripts/modgraph.py --root build/obj --order "$(LAYERS)" --sources runner \
		--pure "$(patsubst runner/%.c,%,$(filter $(RUNNER_SRCS),$(PURE_SRCS)))" $(OBJS)

format-check:
	@CLANG_FORMAT="$(CLANG_FORMAT)" scripts/format-check.sh $(FORMAT_FILES)

format:
	$(CLANG_FORMAT) -i $(FORMAT_FILES)
