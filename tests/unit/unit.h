/* A tiny unit-test harness with TAP output (harness in unit.c).
 *
 *   TEST(name) { CHECK(x == 1); CHECK_STR(s, "a"); CHECKF(ok, "what %d", n); }
 *
 * Each TEST is a named case, run in the order of the file. The program runs every case, or only
 * those named (or matched by fnmatch patterns) on the command line (each must match a case) and
 * in UNIT_FILTER (comma- or space-separated; may match none of this program's cases); --list
 * prints the names. Output is TAP:
 *
 *   1..3
 *   ok 1 - name
 *   not ok 2 - other
 *   # test_x.c:12: CHECK failed: n == 2
 *   ok 3 - third # SKIP why
 *   2 passed, 1 failed (1 skipped, 40 checks)
 *
 * and the exit status is non-zero when a case failed. A case that checks nothing fails (a test
 * must be able to fail), unless it called SKIP with the reason. */
#pragma once
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

typedef void (*unit_fn)(void);

void unit_register(const char *name, unit_fn fn, const char *file, int line);
bool unit_check(bool ok, const char *file, int line, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
bool unit_check_str(const char *got, const char *want, const char *got_expr, const char *want_expr,
		    const char *file, int line);
/* A "# " diagnostic line of the current case, shown with its result. */
void unit_diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void unit_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define TEST(name)                                                                                 \
	static void unit_test_##name(void);                                                        \
	__attribute__((constructor)) static void unit_register_##name(void)                        \
	{                                                                                          \
		unit_register(#name, unit_test_##name, __FILE__, __LINE__);                        \
	}                                                                                          \
	static void unit_test_##name(void)

/* Each returns whether the check held, so a case can stop: if (!CHECK(p)) return; */
#define CHECK(cond) unit_check(!!(cond), __FILE__, __LINE__, "CHECK failed: %s", #cond)
#define CHECKF(cond, ...) unit_check(!!(cond), __FILE__, __LINE__, __VA_ARGS__)
#define CHECK_STR(a, b) unit_check_str((a), (b), #a, #b, __FILE__, __LINE__)

/* Ends the current case as skipped (TAP "# SKIP"): only for what this machine cannot test. */
#define SKIP(...)                                                                                  \
	do {                                                                                       \
		unit_skip(__VA_ARGS__);                                                            \
		return;                                                                            \
	} while (0)
