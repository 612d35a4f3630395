/* Tree walks: see walk.h. */
#include "files/walk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"

struct names {
	char *blk; /* [d_type][name]\0 ... */
	size_t len, cap;
	char **v;
	size_t n;
};

static void names_free(struct names *nm)
{
	free(nm->blk);
	free(nm->v);
	memset(nm, 0, sizeof(*nm));
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* All entries of directory dirfd (not . and ..), sorted by name when
 * asked. Reads through a fresh descriptor, so the caller's is untouched;
 * the directory's size bounds the memory (walk bounds cap it further). */
static int read_names(int dirfd, struct names *nm, bool sorted, size_t max)
{
	memset(nm, 0, sizeof(*nm));
	int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	DIR *d = fdopendir(fd);
	if (!d) {
		int e = errno;
		close(fd);
		return -e;
	}
	size_t count = 0;
	int rc = 0;
	for (;;) {
		errno = 0;
		struct dirent *de = readdir(d);
		if (!de) {
			rc = errno ? -errno : 0;
			break;
		}
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (++count > max) {
			rc = -FILES_ELIMIT;
			break;
		}
		size_t l = strlen(de->d_name) + 2;
		if (nm->len + l > nm->cap) {
			size_t nc = nm->cap ? nm->cap * 2 : 4096;
			while (nc < nm->len + l)
				nc *= 2;
			char *b = realloc(nm->blk, nc);
			if (!b) {
				rc = -ENOMEM;
				break;
			}
			nm->blk = b;
			nm->cap = nc;
		}
		nm->blk[nm->len] = (char)de->d_type;
		memcpy(nm->blk + nm->len + 1, de->d_name, l - 1);
		nm->len += l;
	}
	closedir(d);
	if (rc < 0) {
		names_free(nm);
		return rc;
	}
	nm->v = malloc((count ? count : 1) * sizeof(char *));
	if (!nm->v) {
		names_free(nm);
		return -ENOMEM;
	}
	for (size_t off = 0; off < nm->len;) {
		nm->v[nm->n++] = nm->blk + off + 1;
		off += strlen(nm->blk + off + 1) + 2;
	}
	if (sorted)
		qsort(nm->v, nm->n, sizeof(char *), cmp_name);
	return 0;
}

/* ---- list / search ---- */

static int walk_dir(struct files_walk *w, int dirfd, struct buf *path, size_t rel_off,
		    unsigned depth)
{
	struct names nm;
	int rc = read_names(dirfd, &nm, true, FILES_MAX_VISITED - w->visited);
	if (rc == -FILES_ELIMIT) {
		snprintf(w->limit_msg, sizeof(w->limit_msg),
			 "more than %d entries to look at", FILES_MAX_VISITED);
		return rc;
	}
	if (rc < 0)
		/* Below the root a directory that cannot be read (permissions,
		 * /proc oddities) is skipped, as a task's find would go on. */
		return depth > 0 && rc != -ENOMEM ? 0 : rc;
	size_t base_len = path->len;
	for (size_t i = 0; i < nm.n && rc == 0; i++) {
		const char *name = nm.v[i];
		w->visited++;
		if ((w->visited & 255) == 0 && monotonic_ms() > w->deadline_ms) {
			snprintf(w->limit_msg, sizeof(w->limit_msg), "took longer than %d ms",
				 FILES_MAX_WALK_MS);
			rc = -FILES_ELIMIT;
			break;
		}
		path->len = base_len;
		if ((base_len > 1 && buf_append(path, "/", 1) < 0) ||
		    buf_append(path, name, strlen(name)) < 0 || buf_append(path, "", 1) < 0) {
			rc = -ENOMEM;
			break;
		}
		path->len--; /* the NUL stays, uncounted */
		struct stat st;
		if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			if (errno == ENOMEM) {
				rc = -errno;
				break;
			}
			continue; /* removed meanwhile, or not stat-able: not listed */
		}
		bool is_dir = S_ISDIR(st.st_mode);
		bool take;
		if (!w->search) {
			take = true;
		} else if (is_dir) {
			take = false;
		} else if (!w->glob) {
			take = true;
		} else {
			enum files_glob_subject sub = files_glob_subject(w->glob);
			const char *s = sub == GLOB_ABS ? path->data
					: sub == GLOB_REL ? path->data + rel_off
							  : name;
			take = files_glob_match(w->glob, s, strlen(s));
		}
		if (take) {
			if (w->results >= FILES_MAX_RESULTS) {
				snprintf(w->limit_msg, sizeof(w->limit_msg), "more than %d results",
					 FILES_MAX_RESULTS);
				rc = -FILES_ELIMIT;
				break;
			}
			if (w->results++)
				buf_append(w->out, ",", 1);
			files_info_json(w->out, path->data, &st, &w->names);
		}
		if (is_dir && depth + 1 < w->max_depth) {
			int sub = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub < 0) {
				/* A directory the user may not read is skipped, like any
				 * directory a task could not look into. */
				if (errno == EMFILE || errno == ENFILE || errno == ENOMEM) {
					rc = -errno;
					break;
				}
				continue;
			}
			rc = walk_dir(w, sub, path, rel_off, depth + 1);
			close(sub);
		}
	}
	path->len = base_len;
	names_free(&nm);
	return rc;
}

int files_walk(struct files_walk *w, int dirfd, const char *root)
{
	if (w->max_depth == 0)
		return 0;
	if (w->max_depth > FILES_MAX_DEPTH)
		w->max_depth = FILES_MAX_DEPTH;
	struct buf path = {0};
	buf_append_str(&path, root);
	buf_append(&path, "", 1);
	path.len--;
	if (!path.data)
		return -ENOMEM;
	size_t rel_off = path.len > 1 ? path.len + 1 : 1;
	w->deadline_ms = monotonic_ms() + FILES_MAX_WALK_MS;
	int rc = walk_dir(w, dirfd, &path, rel_off, 0);
	buf_free(&path);
	return rc;
}

/* ---- rm -rf ---- */

static int rmrf_at(int dirfd, const char *name, unsigned depth)
{
	if (unlinkat(dirfd, name, 0) == 0)
		return 0;
	int e = errno;
	if (e == ENOENT)
		return 0;
	if (e != EISDIR && e != EPERM)
		return -e;
	struct stat st;
	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISDIR(st.st_mode))
		return -e;
	if (depth >= FILES_RMRF_MAX_DEPTH)
		return -FILES_ELIMIT;
	int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = 0;
	/* Entries created while we delete make rmdir fail: go round again. */
	for (int round = 0; round < 3; round++) {
		struct names nm;
		rc = read_names(fd, &nm, false, SIZE_MAX);
		if (rc < 0)
			break;
		for (size_t i = 0; i < nm.n && rc == 0; i++)
			rc = rmrf_at(fd, nm.v[i], depth + 1);
		names_free(&nm);
		if (rc < 0)
			break;
		if (unlinkat(dirfd, name, AT_REMOVEDIR) == 0 || errno == ENOENT) {
			rc = 0;
			break;
		}
		rc = -errno;
		if (errno != ENOTEMPTY && errno != EEXIST)
			break;
	}
	close(fd);
	return rc;
}

int files_rmrf(int dirfd, const char *name)
{
	return rmrf_at(dirfd, name, 0);
}
