/* Minimal unit-test helpers: each CHECK counts; the program prints
 * "N passed, N failed" and exits non-zero on any failure. */
#pragma once
#include <stdio.h>
#include <string.h>

static int unit_passed, unit_failed;

#define CHECK(cond)                                                                  \
	do {                                                                         \
		if (cond) {                                                          \
			unit_passed++;                                               \
		} else {                                                             \
			unit_failed++;                                               \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, \
				#cond);                                              \
		}                                                                    \
	} while (0)

#define CHECK_STR(a, b) CHECK(strcmp((a), (b)) == 0)

static inline int unit_done(void)
{
	printf("%d passed, %d failed\n", unit_passed, unit_failed);
	return unit_failed ? 1 : 0;
}
