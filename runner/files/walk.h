/* Tree walks of the files API: list (depth-limited) and search (glob, files
 * only), and rm -rf. fd-relative, never following symbolic links.
 * Functions return 0 on success and -errno on failure. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "text/glob.h"
#include "files/info.h"
#include "files/path.h"

/* Bounds (docs/design/wire.md#files-api): a request that would exceed them is refused
 * with 400 instead of blocking the single-threaded runner for long. */
#define FILES_MAX_RESULTS 10000  /* entries in one list/search response */
#define FILES_MAX_VISITED 200000 /* entries one list/search may look at */
#define FILES_MAX_WALK_MS 3000   /* work time of one list/search walk */
#define FILES_MAX_DEPTH 64       /* directory levels a list/search descends */
#define FILES_RMRF_MAX_DEPTH 256 /* directory levels a recursive delete descends */

/* List or search below a directory, in lexical order, parents before
 * children, resumable: each step works until a deadline (the loop runs it
 * in slices, sched.h). FileInfo objects are appended to out, comma-
 * separated. The bounds above apply; FILES_MAX_WALK_MS counts the time
 * spent in steps. */
struct files_wframe;
struct files_walk {
	/* set by the caller */
	unsigned max_depth;           /* 1 = immediate children */
	bool search;                  /* only non-directories, filtered by glob */
	const struct text_glob *glob; /* search: NULL = everything */
	struct buf *out;
	/* search: instead of a FileInfo in out, each file taken is handed to take (dirfd holds
	 * it under name; path is its full path): <0 stops the walk, 1 ends the step right after
	 * it (the caller has work to do on it first), 0 goes on. No result bound applies. */
	int (*take)(void *arg, int dirfd, const char *name, const char *path,
		    const struct stat *st);
	void *take_arg;
	/* results */
	size_t results, visited;
	uint64_t work_us;
	struct files_names names;
	char limit_msg[160]; /* which bound was hit (with -FILES_ELIMIT) */
	/* state */
	struct files_wframe *frames; /* one per directory level being walked */
	unsigned depth;
	struct buf path;
	size_t rel_off;
	bool paused;
};
/* Start at dirfd (taken: closed by the walk), which path names. */
int files_walk_start(struct files_walk *w, int dirfd, const char *path);
/* 1 = more to do, 0 = done, -FILES_ELIMIT (limit_msg) or -errno. */
int files_walk_step(struct files_walk *w, uint64_t deadline_ms);
void files_walk_free(struct files_walk *w);

/* rm -rf of name in dirfd without following links, resumable: start
 * removes what needs no walk (0: done); then each step works until a
 * deadline. 1 = more to do, 0 = done, -FILES_ELIMIT (deeper than
 * FILES_RMRF_MAX_DEPTH) or -errno. dirfd is borrowed. */
struct files_rmframe;
struct files_rmrf {
	int dirfd;
	struct files_rmframe *frames; /* one per directory level being emptied */
	unsigned depth;
};
int files_rmrf_start(struct files_rmrf *rm, int dirfd, const char *name);
int files_rmrf_step(struct files_rmrf *rm, uint64_t deadline_ms);
void files_rmrf_free(struct files_rmrf *rm);
/* The same in one go. 0 or -errno. */
int files_rmrf(int dirfd, const char *name);
