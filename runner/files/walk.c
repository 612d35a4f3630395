/* Tree walks: see walk.h. */
#include "files/walk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "files/path.h"

static uint64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* ---- directory reading, in steps ---- */

/* The entries of one directory (not . and ..): read, then sorted, each
 * phase resumable so that a directory of 200,000 entries is read and
 * sorted in slices too. */
struct names {
	DIR *dir;  /* while reading */
	char *blk; /* name\0name\0... */
	size_t len, cap;
	char **v, **tmp; /* v: the names; tmp: the merge sort's other half */
	size_t n;
	/* bottom-up merge sort: pass `width`, merging [lo, mid) and [mid, hi)
	 * from `src` into `dst` at i, j -> k */
	size_t width, lo, mid, hi, i, j, k;
	bool merging, sorted;
};

static void names_free(struct names *nm)
{
	if (nm->dir)
		closedir(nm->dir);
	free(nm->blk);
	free(nm->v);
	free(nm->tmp);
	memset(nm, 0, sizeof(*nm));
}

/* Start reading dirfd through a fresh descriptor (the caller's is
 * untouched). */
static int names_open(struct names *nm, int dirfd)
{
	memset(nm, 0, sizeof(*nm));
	int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	nm->dir = fdopendir(fd);
	if (!nm->dir) {
		int e = errno;
		close(fd);
		return -e;
	}
	return 0;
}

/* Read on until the end (0), the deadline (1), more than max entries
 * (-FILES_ELIMIT) or an error. */
static int names_read(struct names *nm, size_t max, uint64_t deadline_us)
{
	for (unsigned k = 0;; k++) {
		if ((k & 63) == 63 && now_us() >= deadline_us)
			return 1;
		errno = 0;
		struct dirent *de = readdir(nm->dir);
		if (!de) {
			if (errno)
				return -errno;
			break;
		}
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (++nm->n > max)
			return -FILES_ELIMIT;
		size_t l = strlen(de->d_name) + 1;
		if (nm->len + l > nm->cap) {
			size_t nc = nm->cap ? nm->cap * 2 : 4096;
			while (nc < nm->len + l)
				nc *= 2;
			char *b = realloc(nm->blk, nc);
			if (!b)
				return -ENOMEM;
			nm->blk = b;
			nm->cap = nc;
		}
		memcpy(nm->blk + nm->len, de->d_name, l);
		nm->len += l;
	}
	closedir(nm->dir);
	nm->dir = NULL;
	nm->v = malloc((nm->n ? nm->n : 1) * sizeof(char *));
	if (!nm->v)
		return -ENOMEM;
	size_t i = 0;
	for (size_t off = 0; off < nm->len; off += strlen(nm->blk + off) + 1)
		nm->v[i++] = nm->blk + off;
	nm->width = 1;
	return 0;
}

/* Sort on (bottom-up merge sort: every step is bounded work) until sorted
 * (0) or the deadline (1). */
static int names_sort(struct names *nm, uint64_t deadline_us)
{
	if (nm->n < 2 || nm->sorted) {
		nm->sorted = true;
		return 0;
	}
	if (!nm->tmp && !(nm->tmp = malloc(nm->n * sizeof(char *))))
		return -ENOMEM;
	char **src = nm->v, **dst = nm->tmp;
	for (unsigned work = 0;; work++) {
		if ((work & 1023) == 1023 && now_us() >= deadline_us)
			return 1;
		if (!nm->merging) {
			if (nm->lo >= nm->n) {
				/* A pass is over: the sorted runs are in dst now. */
				nm->v = dst;
				nm->tmp = src;
				src = nm->v;
				dst = nm->tmp;
				nm->width *= 2;
				nm->lo = 0;
				if (nm->width >= nm->n) {
					nm->sorted = true;
					return 0;
				}
			}
			nm->mid = nm->lo + nm->width < nm->n ? nm->lo + nm->width : nm->n;
			nm->hi = nm->lo + 2 * nm->width < nm->n ? nm->lo + 2 * nm->width : nm->n;
			nm->i = nm->lo;
			nm->j = nm->mid;
			nm->k = nm->lo;
			nm->merging = true;
		}
		if (nm->k < nm->hi) {
			if (nm->j >= nm->hi ||
			    (nm->i < nm->mid && strcmp(src[nm->i], src[nm->j]) <= 0))
				dst[nm->k++] = src[nm->i++];
			else
				dst[nm->k++] = src[nm->j++];
			continue;
		}
		nm->merging = false;
		nm->lo = nm->hi;
	}
}

/* ---- list / search ---- */

struct files_wframe {
	int fd;
	struct names nm;
	enum { WF_READ, WF_SORT, WF_EMIT } phase;
	size_t next;     /* the entry to look at next */
	size_t path_len; /* w->path up to this directory */
};

static void walk_limit(struct files_walk *w, const char *fmt, long v)
{
	snprintf(w->limit_msg, sizeof(w->limit_msg), fmt, v);
}

int files_walk_start(struct files_walk *w, int dirfd, const char *root)
{
	if (w->max_depth > FILES_MAX_DEPTH)
		w->max_depth = FILES_MAX_DEPTH;
	w->frames = calloc(FILES_MAX_DEPTH, sizeof(*w->frames));
	if (!w->frames) {
		close(dirfd);
		return -ENOMEM;
	}
	buf_append_str(&w->path, root);
	buf_append(&w->path, "", 1);
	if (!w->path.data) {
		close(dirfd);
		return -ENOMEM;
	}
	w->path.len--;
	w->rel_off = w->path.len > 1 ? w->path.len + 1 : 1;
	if (w->max_depth == 0) {
		close(dirfd);
		return 0;
	}
	w->frames[0] = (struct files_wframe){.fd = dirfd, .path_len = w->path.len};
	w->depth = 1;
	return 0;
}

static void frame_pop(struct files_walk *w)
{
	struct files_wframe *f = &w->frames[--w->depth];
	names_free(&f->nm);
	close(f->fd);
	w->path.len = f->path_len;
	if (w->path.data)
		w->path.data[w->path.len] = 0;
}

/* Look at the next entry of the top frame: 0 = go on, <0 = stop. */
static int walk_entry(struct files_walk *w, struct files_wframe *f)
{
	const char *name = f->nm.v[f->next++];
	unsigned level = w->depth - 1;
	w->visited++;
	w->path.len = f->path_len;
	if ((f->path_len > 1 && buf_append(&w->path, "/", 1) < 0) ||
	    buf_append(&w->path, name, strlen(name)) < 0 || buf_append(&w->path, "", 1) < 0)
		return -ENOMEM;
	w->path.len--; /* the NUL stays, uncounted */
	struct stat st;
	if (fstatat(f->fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOMEM ? -ENOMEM : 0; /* gone meanwhile, or not stat-able */
	bool is_dir = S_ISDIR(st.st_mode);
	bool take;
	if (!w->search) {
		take = true;
	} else if (is_dir) {
		take = false;
	} else if (!w->glob) {
		take = true;
	} else {
		enum text_glob_subject sub = text_glob_subject(w->glob);
		const char *s = sub == GLOB_ABS   ? w->path.data
				: sub == GLOB_REL ? w->path.data + w->rel_off
						  : name;
		take = text_glob_match(w->glob, s, strlen(s));
	}
	if (take && w->take) {
		int t = w->take(w->take_arg, f->fd, name, w->path.data, &st);
		if (t < 0)
			return t;
		w->paused = t > 0;
	} else if (take) {
		if (w->results >= FILES_MAX_RESULTS) {
			walk_limit(w, "more than %ld results", FILES_MAX_RESULTS);
			return -FILES_ELIMIT;
		}
		if (w->results++)
			buf_append(w->out, ",", 1);
		files_info_json(w->out, w->path.data, &st, &w->names);
	}
	if (is_dir && level + 1 < w->max_depth) {
		int sub = openat(f->fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (sub < 0) {
			/* A directory the user may not read is skipped, like any
			 * directory a task could not look into. */
			if (errno == EMFILE || errno == ENFILE || errno == ENOMEM)
				return -errno;
			return 0;
		}
		/* Parents before children: the child is walked next. */
		w->frames[w->depth++] = (struct files_wframe){.fd = sub, .path_len = w->path.len};
	}
	return 0;
}

int files_walk_step(struct files_walk *w, uint64_t deadline_ms)
{
	const uint64_t limit = (uint64_t)FILES_MAX_WALK_MS * 1000u;
	uint64_t start = now_us(), deadline = deadline_ms * 1000u;
	/* The work-time bound counts the slices, not the time in between. */
	if (w->work_us >= limit) {
		walk_limit(w, "took longer than %ld ms", FILES_MAX_WALK_MS);
		return -FILES_ELIMIT;
	}
	if (start + (limit - w->work_us) < deadline)
		deadline = start + (limit - w->work_us);
	int rc = 0;
	for (unsigned k = 0; w->depth > 0; k++) {
		if ((k & 15) == 15 && now_us() >= deadline) {
			rc = 1;
			break;
		}
		struct files_wframe *f = &w->frames[w->depth - 1];
		unsigned level = w->depth - 1;
		if (f->phase == WF_READ) {
			if (!f->nm.dir && !f->nm.v) {
				rc = names_open(&f->nm, f->fd);
				if (rc < 0) {
					/* Below the root a directory that cannot be read
					 * (permissions, /proc oddities) is skipped, as a
					 * task's find would go on. */
					if (level == 0 || rc == -ENOMEM)
						break;
					frame_pop(w);
					rc = 0;
					continue;
				}
			}
			size_t seen = w->visited < FILES_MAX_VISITED ? w->visited
								     : FILES_MAX_VISITED;
			rc = names_read(&f->nm, FILES_MAX_VISITED - seen, deadline);
			if (rc == -FILES_ELIMIT) {
				walk_limit(w, "more than %ld entries to look at",
					   FILES_MAX_VISITED);
				break;
			}
			if (rc < 0 && level > 0 && rc != -ENOMEM) {
				frame_pop(w);
				rc = 0;
				continue;
			}
			if (rc != 0)
				break; /* the deadline (1), or an error */
			f->phase = WF_SORT;
		}
		if (f->phase == WF_SORT) {
			rc = names_sort(&f->nm, deadline);
			if (rc != 0)
				break;
			f->phase = WF_EMIT;
		}
		if (f->next >= f->nm.n) {
			frame_pop(w);
			continue;
		}
		if ((rc = walk_entry(w, f)) < 0)
			break;
		if (w->paused) {
			w->paused = false;
			rc = 1;
			break;
		}
	}
	w->work_us += now_us() - start;
	if (rc == 1 && w->work_us >= limit) {
		walk_limit(w, "took longer than %ld ms", FILES_MAX_WALK_MS);
		rc = -FILES_ELIMIT;
	}
	return rc;
}

void files_walk_free(struct files_walk *w)
{
	while (w->frames && w->depth > 0)
		frame_pop(w);
	free(w->frames);
	w->frames = NULL;
	buf_free(&w->path);
}

/* ---- rm -rf, in steps ---- */

struct files_rmframe {
	int fd;
	struct names nm;
	size_t next;
	unsigned round;          /* entries made while we delete: read again */
	char name[NAME_MAX + 1]; /* in the directory below it */
};

static int rm_push(struct files_rmrf *rm, int parent, const char *name)
{
	if (rm->depth >= FILES_RMRF_MAX_DEPTH)
		return -FILES_ELIMIT;
	if (strlen(name) > NAME_MAX)
		return -ENAMETOOLONG;
	int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	struct files_rmframe *f = &rm->frames[rm->depth++];
	memset(f, 0, sizeof(*f));
	f->fd = fd;
	strcpy(f->name, name);
	return 0;
}

static void rm_pop(struct files_rmrf *rm)
{
	struct files_rmframe *f = &rm->frames[--rm->depth];
	names_free(&f->nm);
	close(f->fd);
}

/* name in dirfd: gone (0, also when it was not there), a directory to
 * empty first (1), or -errno. */
static int rm_entry(int dirfd, const char *name)
{
	if (unlinkat(dirfd, name, 0) == 0 || errno == ENOENT)
		return 0;
	int e = errno;
	if (e != EISDIR && e != EPERM)
		return -e;
	struct stat st;
	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;
	return S_ISDIR(st.st_mode) ? 1 : -e;
}

int files_rmrf_start(struct files_rmrf *rm, int dirfd, const char *name)
{
	memset(rm, 0, sizeof(*rm));
	rm->dirfd = dirfd;
	int rc = rm_entry(dirfd, name);
	if (rc <= 0)
		return rc; /* done already (or failed) */
	rm->frames = calloc(FILES_RMRF_MAX_DEPTH, sizeof(*rm->frames));
	if (!rm->frames)
		return -ENOMEM;
	rc = rm_push(rm, dirfd, name);
	return rc < 0 ? rc : 1;
}

int files_rmrf_step(struct files_rmrf *rm, uint64_t deadline_ms)
{
	uint64_t deadline = deadline_ms * 1000u;
	for (unsigned k = 0; rm->depth > 0; k++) {
		if ((k & 15) == 15 && now_us() >= deadline)
			return 1;
		struct files_rmframe *f = &rm->frames[rm->depth - 1];
		int rc;
		if (!f->nm.v) {
			if (!f->nm.dir && (rc = names_open(&f->nm, f->fd)) < 0)
				return rc;
			rc = names_read(&f->nm, SIZE_MAX, deadline);
			if (rc != 0)
				return rc; /* the deadline (1), or an error */
		}
		if (f->next < f->nm.n) {
			const char *name = f->nm.v[f->next++];
			rc = rm_entry(f->fd, name);
			if (rc > 0)
				rc = rm_push(rm, f->fd, name);
			if (rc < 0)
				return rc;
			continue;
		}
		/* Emptied: remove it from the directory it is in. */
		int parent = rm->depth > 1 ? rm->frames[rm->depth - 2].fd : rm->dirfd;
		names_free(&f->nm);
		f->next = 0;
		if (unlinkat(parent, f->name, AT_REMOVEDIR) == 0 || errno == ENOENT) {
			rm_pop(rm);
			continue;
		}
		if ((errno != ENOTEMPTY && errno != EEXIST) || ++f->round >= 3)
			return -errno;
	}
	return 0;
}

void files_rmrf_free(struct files_rmrf *rm)
{
	while (rm->frames && rm->depth > 0)
		rm_pop(rm);
	free(rm->frames);
	rm->frames = NULL;
}

int files_rmrf(int dirfd, const char *name)
{
	struct files_rmrf rm;
	int rc = files_rmrf_start(&rm, dirfd, name);
	while (rc > 0)
		rc = files_rmrf_step(&rm, UINT64_MAX / 1000u);
	files_rmrf_free(&rm);
	return rc;
}
