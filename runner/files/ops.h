/* File operations of the files API: mkdir -p, chown, rename, temporary
 * files renamed into place, replace, line ranges. They run as the task user
 * (ident.h) and return 0 (or an fd) on success and -errno on failure. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "files/ident.h"

#define FILES_REPLACE_MAX (64ULL << 20) /* file size /files/replace rewrites */

/* mkdir -p of a clean path. Missing directories are created 0755, the last
 * one `mode`. Returns an O_PATH fd of the final directory (or -errno);
 * *created tells whether the last component was made, *first_new the length
 * of the prefix of path naming the first directory made (0: none). */
int files_mkdirs(const struct files_ident *id, const char *path, mode_t mode, bool *created,
		 size_t *first_new);
/* chown (not following a last link) of the directories files_mkdirs made:
 * each prefix of path from first_new on. Done after the contents are in
 * place, since a directory given away may no longer be writable. */
int files_chown_new(const struct files_ident *id, const char *path, size_t first_new, uid_t uid,
		    gid_t gid, bool as_root);
/* chown of base in dirfd (following links), or of dirfd itself when base
 * is NULL; as root when as_root. */
int files_chown(const struct files_ident *id, int dirfd, const char *base, uid_t uid, gid_t gid,
		bool as_root);

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
/* Give it its final name (atomically replacing what was there), close it. */
int files_tmp_commit(struct files_tmp *t, const char *base);
void files_tmp_discard(struct files_tmp *t);

/* Copy in to out replacing each `old` by `new_` (leftmost, non-overlapping,
 * like Go's strings.ReplaceAll); memory is bounded whatever the size. */
int files_replace_stream(int in, int out, const char *old, size_t olen, const char *new_,
			 size_t nlen, uint64_t *count);
/* Replace in a file: atomically (temp + rename) when the user owns a
 * singly-linked regular file, else rewritten in place so owner, links and
 * inode stay. Untouched when there is no match. */
int files_replace(const struct files_ident *id, const char *path, const char *old, size_t olen,
		  const char *new_, size_t nlen, uint64_t *count);

/* Byte range of lines [first, first+count) (1-based) of a file. */
int files_line_range(int fd, uint64_t first, uint64_t count, off_t *start, off_t *len);

/* write() all of it, retrying on EINTR and short writes. */
int files_write_all(int fd, const char *data, size_t len);
