/* Content search (GET /files/grep and the grep tool): a POSIX extended regular expression
 * over the lines of every regular file below a directory (or of one file), optionally only
 * files whose name matches a glob (glob.h), in the walk's lexical order, never following a
 * symbolic link. Resumable like the walks (walk.h): each step works until a deadline and
 * the loop runs it in slices. Binary files (a NUL byte) and files over FILES_GREP_FILE_MAX
 * are skipped and counted. Hits are appended to out as JSON objects {"path","line","text"},
 * comma-separated; a hit's text is cut at FILES_GREP_LINE_MAX bytes. Reaching max_results,
 * or a bound of the walk or of the scan, ends the search early with `truncated` and a
 * reason in limit_msg: partial results, not an error. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "text/regex.h"
#include "files/walk.h"

#define FILES_GREP_FILE_MAX (8ULL << 20) /* bytes of one file searched */
#define FILES_GREP_LINE_MAX 512          /* bytes of a hit's line reported */
#define FILES_GREP_MAX_MS 10000          /* work time of one search (walk and scans) */
#define FILES_GREP_PATTERN_MAX 1024      /* pattern bytes */
#define FILES_GREP_DEFAULT_RESULTS 200

struct files_grep {
	/* set by the caller before start */
	size_t max_results;           /* 0: FILES_GREP_DEFAULT_RESULTS; at most FILES_MAX_RESULTS */
	const struct text_glob *glob; /* NULL: every file */
	struct buf *out;
	/* results */
	size_t results, files, skipped_binary, skipped_large;
	bool truncated;
	char limit_msg[160];
	/* state */
	struct text_regex *re;
	struct text_regex_cursor cur; /* within the line at pos, when in_line */
	bool in_line;
	size_t line_len; /* of the line at pos, when in_line */
	struct files_walk w;
	bool walking;
	uint64_t work_us;
	char *data; /* the file being scanned, NUL-terminated */
	size_t len, pos;
	uint64_t line;
	char *path;
	int single_fd; /* the root is a file: it alone is searched */
};

/* Compile pattern (POSIX ERE, text/regex.h; back-references are refused: they make matching
 * exponential; so is a pattern over TEXT_REGEX_INSTS_MAX once its repetitions are expanded).
 * 0, or -EINVAL with a reason in err, or -ENOMEM. Call files_grep_free in every case. */
int files_grep_init(struct files_grep *g, const char *pattern, char *err, size_t errlen);
/* Start at fd (taken), which path names: a directory (searched below) or a regular file. */
int files_grep_start(struct files_grep *g, int fd, const char *path, bool is_dir);
/* 1 = more to do, 0 = done, or -errno. */
int files_grep_step(struct files_grep *g, uint64_t deadline_ms);
void files_grep_free(struct files_grep *g);
