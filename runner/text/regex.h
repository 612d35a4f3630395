/* The regular expressions of grep (grep.h): POSIX extended syntax, matched line by line in
 * time linear in the line, in bounded memory, and resumable inside a line, so the loop's
 * slices and the search's budget hold whatever the pattern and the line.
 *
 * Syntax: as regcomp(REG_EXTENDED | REG_NOSUB | REG_NEWLINE) in the C locale (bytes, not
 * characters): literals, `.`, bracket expressions (ranges, `^`, [:class:], [.c.], [=c=]),
 * `^` `$`, `* + ? {m} {m,} {m,n} {,n}`, `|`, groups; the GNU escapes \w \W \s \S \b \B \< \>
 * \` \' and musl's \d \D \t \n \r \f \e; any other escaped byte is itself. Back-references are
 * refused. Matching is a Thompson automaton run as a lazily built, bounded DFA (no
 * backtracking): each byte costs one table look-up, or once per new state O(program). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TEXT_REGEX_INSTS_MAX 4096 /* instructions of a compiled pattern, repetitions expanded */
#define TEXT_REGEX_DUP_MAX 255    /* m and n of {m,n} (musl's RE_DUP_MAX) */
#define TEXT_REGEX_DEPTH_MAX 100  /* groups and repetitions nested in each other */

struct text_regex;

/* Compile pattern (len bytes, no NUL). 0, or -EINVAL with the reason in err, or -ENOMEM. */
int text_regex_compile(struct text_regex **out, const char *pattern, size_t len, char *err,
		       size_t errlen);
void text_regex_free(struct text_regex *re);
/* Instructions of the compiled program (at most TEXT_REGEX_INSTS_MAX): the tests' bound. */
size_t text_regex_size(const struct text_regex *re);

/* Where a search of one line stands; zero it before a line's first call. */
struct text_regex_cursor {
	size_t pos;
	int32_t state;
	bool started;
};

enum { TEXT_REGEX_NOMATCH = 0, TEXT_REGEX_MATCH = 1, TEXT_REGEX_MORE = 2 };
/* Does the pattern match somewhere in line s (n bytes; '\n' is never inside)? Works on from
 * *cur until the line's end or until *work units are spent (a unit is about a byte's look-up;
 * building a new state costs the states it visits): MORE then, to be called again with the
 * same cursor and line. *work is decreased by what was spent; a byte never costs more than
 * 3 * text_regex_size + 2 units. One line at a time: a search may empty the DFA cache, which
 * invalidates any other line's cursor. */
int text_regex_search(struct text_regex *re, const char *s, size_t n, struct text_regex_cursor *cur,
		      size_t *work);
