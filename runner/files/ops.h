/* File operations of the files API: mkdir -p, owner and mode changes,
 * rename, temporary files renamed into place, replace, line ranges. They
 * run as the task user (ident.h), act on descriptors they checked (never a
 * second open by name: a task may swap any name at any time), and return 0
 * (or an fd) on success and -errno on failure. The long ones (replace, line
 * ranges) are resumable: a step works until a deadline and says whether
 * there is more, so the loop runs them in slices (sched.h). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "files/ident.h"

#define FILES_REPLACE_MAX (64ULL << 20)   /* file (and result) size replace rewrites */
#define FILES_LINES_SCAN_MAX (1ULL << 30) /* bytes a line-range download scans */

/* mkdir -p of a clean path. Missing directories are created 0755, the last
 * one `mode` (exactly, whatever the umask). Returns a descriptor of the
 * final directory (or -errno); *created tells whether the last component
 * was made; `made` records the directories made (for files_chown_made;
 * release it with files_made_free). */
struct files_made {
	int fd;       /* the last directory that existed before (-1: none made) */
	size_t first; /* offset in path of the first component made */
	size_t n;     /* directories made, top down */
	struct stat *ids;
};
int files_mkdirs(const struct files_ident *id, const char *path, mode_t mode, bool *created,
		 struct files_made *made);
/* chown of the directories files_mkdirs made, each found again from the
 * one before without following a link and checked to be the directory
 * made (-ESTALE when a task swapped it). Done after the contents are in
 * place, since a directory given away may no longer be writable. */
int files_chown_made(const struct files_ident *id, const char *path, const struct files_made *made,
		     uid_t uid, gid_t gid, bool as_root);
void files_made_free(struct files_made *made);

/* chown of what fd refers to (an O_PATH descriptor will do); as root (the
 * runner's own identity, CAP_CHOWN) when as_root. */
int files_chown_fd(const struct files_ident *id, int fd, uid_t uid, gid_t gid, bool as_root);
/* chmod of what fd refers to (O_PATH: fchmodat2 with AT_EMPTY_PATH; where
 * the kernel lacks it, name in dirfd is opened once more without following
 * a link and must be the same file). */
int files_chmod_fd(int fd, int dirfd, const char *name, mode_t mode);

/* rename that never replaces an existing destination (-EEXIST). */
int files_rename_noreplace(int sfd, const char *sname, int dfd, const char *dname);

/* A file written in its target directory and renamed into place only when
 * complete: O_TMPFILE when the filesystem has it (nothing is left behind
 * even if the runner dies), else a hidden named temp removed on discard. */
struct files_tmp {
	int fd;
	int dirfd; /* borrowed */
	bool named;
	char name[48];
};
int files_tmp_open(struct files_tmp *t, int dirfd);
/* Give it its final name (atomically replacing what was there). The file
 * stays open in t->fd (for an owner change); files_tmp_discard closes it. */
int files_tmp_commit(struct files_tmp *t, const char *base);
void files_tmp_discard(struct files_tmp *t);

/* Replace each `old` by `new_` in one file (leftmost, non-overlapping, like
 * Go's strings.ReplaceAll; memory bounded whatever the size), resumable. open checks the file (a
 * regular file not reached through a link at its last component, writable, beneath the write roots,
 * at most FILES_REPLACE_MAX) and holds it open; step streams it through the substitution and writes
 * the result: atomically (temp file + rename, after checking the name still leads to the file) when
 * the user owns a singly-linked file, else in place through the descriptor checked (owner, links
 * and inode stay). Untouched when there is no match. */
struct files_replace {
	int dirfd, fd, out;
	const char *base;
	struct stat st;
	bool use_tmp;
	struct files_tmp tmp;
	const char *old, *new_;
	size_t olen, nlen;
	char *buf, *obuf;
	size_t have, obuf_len;
	bool eof;
	off_t in_pos, back_pos;
	uint64_t out_len, count;
	enum { REPLACE_SCAN, REPLACE_BACK, REPLACE_DONE } phase;
};
/* 0, -ELOOP (a link), -EINVAL (not a regular file), -EFBIG, -errno. */
int files_replace_open(struct files_replace *rp, const struct files_ident *id, const char *path,
		       const char *old, size_t olen, const char *new_, size_t nlen);
/* 1 = more to do, 0 = done (rp->count), or -errno. */
int files_replace_step(struct files_replace *rp, uint64_t deadline_ms);
void files_replace_close(struct files_replace *rp);

/* The byte range of lines [first, first+count) (1-based) of a file,
 * resumable: at most FILES_LINES_SCAN_MAX bytes are read (then
 * -FILES_ELIMIT). */
struct files_lines {
	uint64_t first, last, line;
	off_t pos, s;
	off_t start, len; /* the result */
};
void files_lines_init(struct files_lines *l, uint64_t first, uint64_t count);
/* 1 = more to do, 0 = done (start, len), or -errno. */
int files_lines_step(struct files_lines *l, int fd, uint64_t deadline_ms);
