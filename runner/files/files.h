/* The files API's filesystem layer (docs/design.md §3.4): every operation runs with
 * the task user's rights. The runner is single-threaded, so switching the
 * thread's filesystem uid/gid (setfsuid/setfsgid) around each operation is
 * exact: while the fsuid is not 0 the kernel also drops CAP_DAC_OVERRIDE,
 * CAP_CHOWN, CAP_FOWNER and the other filesystem capabilities from the
 * effective set, so the kernel checks the task user's permissions and
 * nothing more. Walks are fd-relative and never follow symbolic links.
 * Functions return 0 (or a count/fd) on success and -errno on failure. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "core/util.h"

/* Bounds (docs/design.md §3.4): a request that would exceed them is refused
 * with 400 instead of blocking the single-threaded runner for long. */
#define FILES_MAX_RESULTS 10000          /* entries in one list/search response */
#define FILES_MAX_VISITED 200000         /* entries one list/search may look at */
#define FILES_MAX_WALK_MS 3000           /* wall time of one list/search walk */
#define FILES_MAX_DEPTH 64               /* directory levels a list/search descends */
#define FILES_RMRF_MAX_DEPTH 256         /* directory levels a recursive delete descends */
#define FILES_REPLACE_MAX (64ULL << 20)  /* file size /files/replace rewrites */
#define FILES_GLOB_MAX 512               /* pattern bytes */
#define FILES_GLOB_ALTS 64               /* patterns after {a,b} expansion */

/* Errors beyond errno. */
#define FILES_EOUTSIDE 4096 /* not beneath a writable root (Landlock mirror) */
#define FILES_ELIMIT 4097   /* a walk bound was hit */

struct files_ident {
	uid_t uid;
	gid_t gid;
	/* Colon-separated directories writes must stay beneath (the Landlock
	 * roots tasks get); NULL = anywhere the user may write. */
	const char *write_roots;
};

/* Drop the runner's supplementary groups (they would count in the task
 * user's permission checks); called once at start. 0 or -errno. */
int files_init(void);
/* Act as the task user (fsuid/fsgid) until files_leave. 0 or -errno. */
int files_enter(const struct files_ident *id);
void files_leave(void);

/* A client path: absolute, no NUL byte (len is its real length), then
 * cleaned lexically like Go's filepath.Clean ("//a/./b/../c/" -> "/a/c").
 * 0, -EINVAL (empty, relative, NUL) or -ENAMETOOLONG. */
int files_clean_path(const char *in, size_t len, char *out, size_t outsz);
/* Open the parent directory of a clean path (O_PATH, following links) and
 * point *base at the last component. "/" has no parent: -EINVAL. */
int files_open_parent(const char *path, const char **base);
/* 0 when dirfd is beneath one of id->write_roots, else -FILES_EOUTSIDE. */
int files_check_writable(const struct files_ident *id, int dirfd);

/* User and group names, numeric strings accepted. 0 or -ENOENT. */
int files_lookup_user(const char *name, uid_t *out);
int files_lookup_group(const char *name, gid_t *out);

/* id -> name cache for one response (listing thousands of entries must not
 * read /etc/passwd thousands of times). */
struct files_names {
	unsigned next;
	struct {
		uint32_t id;
		bool used, group;
		char name[64];
	} e[16];
};
/* Append one FileInfo object exactly as execd writes it:
 * {"path","type","size","modified_at","created_at","owner","group","mode"}
 * (RFC 3339 UTC times; mode: permission bits as octal digits, 755). */
void files_info_json(struct buf *out, const char *path, const struct stat *st,
		     struct files_names *nc);

/* Glob patterns: * ? [a-z] [!x] {a,b} \x, and ** as a whole path segment
 * (zero or more directories). */
struct files_glob;
int files_glob_compile(struct files_glob **out, const char *pattern, char *err, size_t errlen);
bool files_glob_match(const struct files_glob *g, const char *name, size_t len);
/* How search applies it: "abs" (pattern starts with '/': the absolute
 * path), "rel" (has a '/': the path below the search root), else the
 * entry's name (execd's behaviour). */
enum files_glob_subject { GLOB_NAME, GLOB_REL, GLOB_ABS };
enum files_glob_subject files_glob_subject(const struct files_glob *g);
void files_glob_free(struct files_glob *g);

/* List (depth-limited) or search (glob, files only) below a directory, in
 * lexical order, parents before children, never following links. FileInfo
 * objects are appended to out, comma-separated. */
struct files_walk {
	unsigned max_depth;            /* 1 = immediate children */
	bool search;                   /* only non-directories, filtered by glob */
	const struct files_glob *glob; /* search: NULL = everything */
	struct buf *out;
	size_t results, visited;
	uint64_t deadline_ms; /* monotonic */
	struct files_names names;
	char limit_msg[160]; /* which bound was hit (with -FILES_ELIMIT) */
};
int files_walk(struct files_walk *w, int dirfd, const char *path);

/* rm -rf of name in dirfd without following links. 0 or -errno. */
int files_rmrf(int dirfd, const char *name);

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
