/* Glob patterns of /files/search, a pure function set (no I/O): * ? [a-z]
 * [!x] {a,b} \x, and ** as a whole path segment (zero or more directories),
 * with doublestar's semantics. Matching backtracks over at most two resume
 * points: polynomial, never exponential. */
#pragma once
#include <stdbool.h>
#include <stddef.h>

#define TEXT_GLOB_MAX 512 /* pattern bytes */
#define TEXT_GLOB_ALTS 64 /* patterns after {a,b} expansion */

struct text_glob;
/* 0, or -EINVAL (with a reason in err) or -ENOMEM. */
int text_glob_compile(struct text_glob **out, const char *pattern, char *err, size_t errlen);
bool text_glob_match(const struct text_glob *g, const char *name, size_t len);
/* How search applies it: "abs" (pattern starts with '/': the absolute
 * path), "rel" (has a '/': the path below the search root), else the
 * entry's name (execd's behaviour). */
enum text_glob_subject { GLOB_NAME, GLOB_REL, GLOB_ABS };
enum text_glob_subject text_glob_subject(const struct text_glob *g);
void text_glob_free(struct text_glob *g);
