/* File operations: see ops.h. */
#include "files/ops.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/log.h"
#include "core/randomid.h"
#include "core/fileio.h"
#include "files/path.h"

#ifndef SYS_fchmodat2
#define SYS_fchmodat2 452 /* Linux 6.6; the same on every architecture */
#endif

static bool same_file(const struct stat *a, const struct stat *b)
{
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/* ---- owner and mode ---- */

int files_chown_fd(const struct files_ident *id, int fd, uid_t uid, gid_t gid, bool as_root)
{
	if (uid == (uid_t)-1 && gid == (gid_t)-1)
		return 0;
	if (as_root)
		files_leave(); /* the runner's own identity, CAP_CHOWN back in effect */
	int rc = fchownat(fd, "", uid, gid, AT_EMPTY_PATH) < 0 ? -errno : 0;
	if (as_root) {
		int r2 = files_enter(id);
		if (r2 < 0 && rc == 0)
			rc = r2;
	}
	return rc;
}

int files_chmod_fd(int fd, int dirfd, const char *name, mode_t mode)
{
	if (syscall(SYS_fchmodat2, fd, "", mode, AT_EMPTY_PATH) == 0)
		return 0;
	if (errno != ENOSYS && errno != EINVAL && errno != EOPNOTSUPP)
		return -errno;
	/* No fchmodat2 (Linux < 6.6): fchmod needs a descriptor that is not
	 * O_PATH. Open the name once more, without following a link and
	 * without blocking, and make sure it is the same file. */
	struct stat want, got;
	if (fstat(fd, &want) < 0)
		return -errno;
	int flags = O_RDONLY | O_NONBLOCK | O_NOCTTY | (S_ISDIR(want.st_mode) ? O_DIRECTORY : 0);
	int rfd = files_open_last(dirfd, name, flags);
	if (rfd < 0)
		return rfd;
	int rc = 0;
	if (fstat(rfd, &got) < 0)
		rc = -errno;
	else if (!same_file(&want, &got))
		rc = -ESTALE;
	else if (fchmod(rfd, mode) < 0)
		rc = -errno;
	close(rfd);
	return rc;
}

/* ---- mkdir -p ---- */

void files_made_free(struct files_made *made)
{
	if (made->fd >= 0)
		close(made->fd);
	made->fd = -1;
	free(made->ids);
	made->ids = NULL;
	made->n = 0;
}

/* Record a directory made (fd: it, parent: the directory it is in). */
static int made_add(struct files_made *made, int parent, const struct stat *st, size_t first)
{
	if (made->n == 0) {
		made->fd = fcntl(parent, F_DUPFD_CLOEXEC, 0);
		if (made->fd < 0)
			return -errno;
		made->first = first;
	}
	struct stat *ids = realloc(made->ids, (made->n + 1) * sizeof(*ids));
	if (!ids)
		return -ENOMEM;
	made->ids = ids;
	made->ids[made->n++] = *st;
	return 0;
}

/* Make comp in fd, mode m exactly: made 0700 first, opened without
 * following a link, checked to be ours, then given its mode through that
 * descriptor (a name swapped meanwhile is never chmod'ed). */
static int make_dir(const struct files_ident *id, int fd, const char *comp, mode_t m,
		    struct stat *st)
{
	if (mkdirat(fd, comp, 0700) < 0)
		return -errno;
	int nfd = files_open_last(fd, comp, O_RDONLY | O_DIRECTORY);
	if (nfd < 0)
		return nfd;
	int rc = 0;
	if (fstat(nfd, st) < 0)
		rc = -errno;
	else if (st->st_uid != id->uid)
		rc = -ESTALE; /* not the one we made */
	else if (fchmod(nfd, m) < 0)
		rc = -errno;
	if (rc < 0) {
		close(nfd);
		return rc;
	}
	return nfd;
}

int files_mkdirs(const struct files_ident *id, const char *path, mode_t mode, bool *created,
		 struct files_made *made)
{
	*created = false;
	memset(made, 0, sizeof(*made));
	made->fd = -1;
	int fd = files_open(AT_FDCWD, "/", O_PATH | O_DIRECTORY, 0);
	if (fd < 0)
		return fd;
	const char *p = path;
	while (*p) {
		while (*p == '/')
			p++;
		if (!*p)
			break;
		size_t start = (size_t)(p - path), n = strcspn(p, "/");
		char comp[NAME_MAX + 1];
		if (n > NAME_MAX) {
			close(fd);
			files_made_free(made);
			return -ENAMETOOLONG;
		}
		memcpy(comp, p, n);
		comp[n] = 0;
		p += n;
		bool last = !*p || !p[strspn(p, "/")];
		/* Existing directories: ordinary links followed, as mkdir -p. */
		int nfd = files_open(fd, comp, O_PATH | O_DIRECTORY, 0);
		if (nfd == -ENOENT) {
			struct stat st;
			nfd = files_check_writable(id, fd);
			if (nfd == 0)
				nfd = make_dir(id, fd, comp, last ? mode : 0755, &st);
			if (nfd == -EEXIST) /* made meanwhile: it exists */
				nfd = files_open(fd, comp, O_PATH | O_DIRECTORY, 0);
			else if (nfd >= 0) {
				int rc = made_add(made, fd, &st, start);
				if (rc < 0) {
					close(nfd);
					nfd = rc;
				} else if (last) {
					*created = true;
				}
			}
		}
		close(fd);
		if (nfd < 0) {
			files_made_free(made);
			return nfd;
		}
		fd = nfd;
	}
	return fd;
}

int files_chown_made(const struct files_ident *id, const char *path, const struct files_made *made,
		     uid_t uid, gid_t gid, bool as_root)
{
	if (!made->n || (uid == (uid_t)-1 && gid == (gid_t)-1))
		return 0;
	int parent = made->fd, rc = 0;
	const char *p = path + made->first;
	/* Top down: each found again from the one before, never through a
	 * link, and checked to be the directory made. */
	for (size_t k = 0; k < made->n && rc == 0; k++) {
		while (*p == '/')
			p++;
		size_t n = strcspn(p, "/");
		char comp[NAME_MAX + 1];
		if (!n || n > NAME_MAX) {
			rc = -ENAMETOOLONG;
			break;
		}
		memcpy(comp, p, n);
		comp[n] = 0;
		p += n;
		int fd = files_open_last(parent, comp, O_PATH | O_DIRECTORY);
		struct stat st;
		if (fd < 0)
			rc = fd;
		else if (fstat(fd, &st) < 0)
			rc = -errno;
		else if (!same_file(&st, &made->ids[k]))
			rc = -ESTALE;
		else
			rc = files_chown_fd(id, fd, uid, gid, as_root);
		if (parent != made->fd)
			close(parent);
		parent = fd;
	}
	if (parent >= 0 && parent != made->fd)
		close(parent);
	return rc;
}

/* ---- rename ---- */

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE 1 /* ABI; musl 1.2.3 has no renameat2 wrapper */
#endif

int files_rename_noreplace(int sfd, const char *sname, int dfd, const char *dname)
{
	if (syscall(SYS_renameat2, sfd, sname, dfd, dname, RENAME_NOREPLACE) == 0)
		return 0;
	if (errno != EINVAL && errno != ENOSYS)
		return -errno;
	/* A filesystem without RENAME_NOREPLACE: check, then rename (the
	 * user could race itself here, nobody else). */
	struct stat st;
	if (fstatat(dfd, dname, &st, AT_SYMLINK_NOFOLLOW) == 0)
		return -EEXIST;
	if (errno != ENOENT)
		return -errno;
	return renameat(sfd, sname, dfd, dname) < 0 ? -errno : 0;
}

/* ---- temp files ---- */

int files_tmp_open(struct files_tmp *t, int dirfd)
{
	memset(t, 0, sizeof(*t));
	t->dirfd = dirfd;
	t->fd = openat(dirfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
	if (t->fd >= 0) {
		/* It can only be given a name through /proc (linkat with
		 * AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH): check /proc now. */
		char link[32];
		struct stat st;
		snprintf(link, sizeof(link), "/proc/self/fd/%d", t->fd);
		if (stat(link, &st) == 0)
			return 0;
		close(t->fd);
		t->fd = -1;
	} else if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL && errno != ENOENT) {
		return -errno;
	}
	/* No O_TMPFILE here: a hidden name, removed by discard. */
	for (int tries = 0; tries < 8; tries++) {
		char id[33];
		int rc = random_id(id);
		if (rc < 0)
			return rc;
		snprintf(t->name, sizeof(t->name), ".forceai-upload-%.16s.tmp", id);
		t->fd = openat(dirfd, t->name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
			       0600);
		if (t->fd >= 0) {
			t->named = true;
			return 0;
		}
		if (errno != EEXIST)
			return -errno;
	}
	return -EEXIST;
}

int files_tmp_commit(struct files_tmp *t, const char *base)
{
	int rc = 0;
	if (!t->named) {
		/* Link the anonymous file under a hidden name, then rename that
		 * over the target: replacing is atomic, linkat alone is not. */
		char link[32];
		snprintf(link, sizeof(link), "/proc/self/fd/%d", t->fd);
		for (int tries = 0; tries < 8; tries++) {
			char id[33];
			if ((rc = random_id(id)) < 0)
				break;
			snprintf(t->name, sizeof(t->name), ".forceai-upload-%.16s.tmp", id);
			if (linkat(AT_FDCWD, link, t->dirfd, t->name, AT_SYMLINK_FOLLOW) == 0) {
				t->named = true;
				rc = 0;
				break;
			}
			rc = -errno;
			if (errno != EEXIST)
				break;
		}
		if (!t->named) {
			files_tmp_discard(t);
			return rc ? rc : -EEXIST;
		}
	}
	if (renameat(t->dirfd, t->name, t->dirfd, base) < 0) {
		rc = -errno;
		files_tmp_discard(t);
		return rc;
	}
	t->named = false; /* it has its real name now; the caller closes it */
	return 0;
}

void files_tmp_discard(struct files_tmp *t)
{
	if (t->named && unlinkat(t->dirfd, t->name, 0) < 0 && errno != ENOENT)
		log_errno("cannot remove a temporary upload file", errno, t->name);
	t->named = false;
	if (t->fd >= 0)
		close(t->fd);
	t->fd = -1;
}

/* ---- replace ---- */

/* Readahead off while a file is scanned on the loop: read ahead over a
 * hole, the kernel zero-fills megabytes inside one pread (17 ms measured on
 * a sparse file); one chunk at a time, no read takes long. */
static void scan_advice(int fd, bool scanning)
{
	/* Advice only: a failure changes nothing that matters. */
	(void)posix_fadvise(fd, 0, 0, scanning ? POSIX_FADV_RANDOM : POSIX_FADV_NORMAL);
}

#define REPLACE_CHUNK (64 * 1024)

/* Output through a buffer: a match every few bytes must not cost a
 * write() each. */
static int out_put(struct files_replace *rp, const char *data, size_t len)
{
	if (rp->out_len + len > FILES_REPLACE_MAX)
		return -EFBIG;
	rp->out_len += len;
	while (len) {
		if (rp->obuf_len == REPLACE_CHUNK) {
			int rc = write_all(rp->out, rp->obuf, rp->obuf_len);
			if (rc < 0)
				return rc;
			rp->obuf_len = 0;
		}
		size_t n = REPLACE_CHUNK - rp->obuf_len < len ? REPLACE_CHUNK - rp->obuf_len : len;
		memcpy(rp->obuf + rp->obuf_len, data, n);
		rp->obuf_len += n;
		data += n;
		len -= n;
	}
	return 0;
}

static int out_flush(struct files_replace *rp)
{
	int rc = write_all(rp->out, rp->obuf, rp->obuf_len);
	rp->obuf_len = 0;
	return rc;
}

/* One chunk of the substitution: read from in (at rp->in_pos), pass what
 * is settled on. 1 = more, 0 = end of input (all written), -errno. */
static int subst_chunk(struct files_replace *rp, int in)
{
	size_t cap = REPLACE_CHUNK + rp->olen;
	char *b = rp->buf;
	ssize_t n = pread(in, b + rp->have, cap - rp->have, rp->in_pos);
	if (n < 0)
		return errno == EINTR ? 1 : -errno;
	if (n == 0)
		rp->eof = true;
	rp->in_pos += n;
	rp->have += (size_t)n;
	size_t pos = 0;
	int rc;
	for (;;) {
		char *hit = rp->have - pos >= rp->olen
				    ? memmem(b + pos, rp->have - pos, rp->old, rp->olen)
				    : NULL;
		if (!hit)
			break;
		size_t at = (size_t)(hit - b);
		if ((rc = out_put(rp, b + pos, at - pos)) < 0 ||
		    (rc = out_put(rp, rp->new_, rp->nlen)) < 0)
			return rc;
		pos = at + rp->olen;
		rp->count++;
	}
	/* Keep back what could be the start of a match cut by the chunk. */
	size_t keep = rp->eof ? 0 : rp->olen - 1;
	size_t upto = rp->have - pos > keep ? rp->have - keep : pos;
	if ((rc = out_put(rp, b + pos, upto - pos)) < 0)
		return rc;
	memmove(b, b + upto, rp->have - upto);
	rp->have -= upto;
	if (!rp->eof)
		return 1;
	return out_flush(rp);
}

static int subst_init(struct files_replace *rp, const char *old, size_t olen, const char *new_,
		      size_t nlen)
{
	if (olen == 0)
		return -EINVAL;
	rp->old = old;
	rp->olen = olen;
	rp->new_ = new_;
	rp->nlen = nlen;
	rp->buf = malloc(REPLACE_CHUNK + olen);
	rp->obuf = malloc(REPLACE_CHUNK);
	return rp->buf && rp->obuf ? 0 : -ENOMEM;
}

int files_replace_open(struct files_replace *rp, const struct files_ident *id, const char *path,
		       const char *old, size_t olen, const char *new_, size_t nlen)
{
	memset(rp, 0, sizeof(*rp));
	rp->dirfd = rp->fd = rp->out = rp->tmp.fd = -1;
	int rc = files_open_parent(path, &rp->base);
	if (rc < 0)
		return rc;
	rp->dirfd = rc;
	/* A link at the last component is never followed (the task may have
	 * planted it, or swap it in at any moment); anything but a regular
	 * file is refused before it is opened (a FIFO would block, a device
	 * would act), and once more through the descriptor, which is then the
	 * only way the file is read and written. */
	struct stat lst;
	if (fstatat(rp->dirfd, rp->base, &lst, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	if (S_ISLNK(lst.st_mode))
		return -ELOOP;
	if (S_ISDIR(lst.st_mode))
		return -EISDIR;
	if (!S_ISREG(lst.st_mode))
		return -EINVAL;
	bool writable = true;
	rc = files_open_last(rp->dirfd, rp->base, O_RDWR | O_NONBLOCK | O_NOCTTY);
	if (rc == -ETXTBSY) {
		/* A running executable: only the temp-and-rename way can work. */
		writable = false;
		rc = files_open_last(rp->dirfd, rp->base, O_RDONLY | O_NONBLOCK | O_NOCTTY);
	}
	if (rc < 0)
		return rc;
	rp->fd = rc;
	if (fstat(rp->fd, &rp->st) < 0)
		return -errno;
	if (!S_ISREG(rp->st.st_mode))
		return -EINVAL;
	if ((uint64_t)rp->st.st_size > FILES_REPLACE_MAX)
		return -EFBIG;
	/* Landlock's rule: writes stay beneath the write roots. */
	if ((rc = files_check_writable(id, rp->dirfd)) < 0)
		return rc;
	if ((rc = subst_init(rp, old, olen, new_, nlen)) < 0)
		return rc;
	scan_advice(rp->fd, true);
	/* Atomic rename only when it changes nothing but the content: our own,
	 * singly linked, a group we can keep. Else in place. */
	rp->use_tmp = rp->st.st_nlink == 1 && rp->st.st_uid == id->uid && rp->st.st_gid == id->gid;
	if (!writable && (!rp->use_tmp || !(rp->st.st_mode & S_IWUSR)))
		return -ETXTBSY;
	if (rp->use_tmp) {
		if ((rc = files_tmp_open(&rp->tmp, rp->dirfd)) < 0)
			return rc;
		rp->out = rp->tmp.fd;
	} else {
		rp->out = memfd_create("forceai-replace", MFD_CLOEXEC);
		if (rp->out < 0)
			return -errno;
	}
	rp->phase = REPLACE_SCAN;
	return 0;
}

/* The substitution is complete: put the result in place. */
static int replace_commit(struct files_replace *rp)
{
	if (rp->count == 0) {
		rp->phase = REPLACE_DONE; /* nothing to change: the file (and mtime) stay */
		return 0;
	}
	if (!rp->use_tmp) {
		rp->phase = REPLACE_BACK; /* rewritten in place, in slices */
		rp->back_pos = 0;
		return 1;
	}
	if (fchmod(rp->tmp.fd, rp->st.st_mode & 07777) < 0)
		return -errno;
	/* The name must still lead to the file read: a task may have swapped
	 * it meanwhile (there is no compare-and-rename; what is renamed over
	 * would at worst be the task's own entry in a directory it may write). */
	struct stat now;
	if (fstatat(rp->dirfd, rp->base, &now, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	if (!same_file(&now, &rp->st))
		return -ESTALE;
	int rc = files_tmp_commit(&rp->tmp, rp->base);
	rp->out = -1; /* the temp's descriptor is discarded with it */
	if (rc < 0)
		return rc;
	rp->phase = REPLACE_DONE;
	return 0;
}

/* One chunk of the in-place rewrite through the descriptor checked. */
static int write_back_chunk(struct files_replace *rp)
{
	char b[REPLACE_CHUNK];
	ssize_t n = pread(rp->out, b, sizeof(b), rp->back_pos);
	if (n < 0)
		return errno == EINTR ? 1 : -errno;
	if (n == 0) {
		if (ftruncate(rp->fd, (off_t)rp->out_len) < 0)
			return -errno;
		rp->phase = REPLACE_DONE;
		return 0;
	}
	int rc = pwrite_all(rp->fd, b, (size_t)n, rp->back_pos);
	if (rc < 0)
		return rc;
	rp->back_pos += n;
	return 1;
}

int files_replace_step(struct files_replace *rp, uint64_t deadline_ms)
{
	if (!rp->buf)
		return -EINVAL; /* not open */
	do {
		int rc;
		switch (rp->phase) {
		case REPLACE_SCAN:
			rc = subst_chunk(rp, rp->fd);
			if (rc == 0)
				rc = replace_commit(rp);
			break;
		case REPLACE_BACK:
			rc = write_back_chunk(rp);
			break;
		default:
			return 0;
		}
		if (rc <= 0)
			return rc;
	} while (monotonic_ms() < deadline_ms);
	return 1;
}

void files_replace_close(struct files_replace *rp)
{
	if (rp->tmp.fd >= 0 || rp->tmp.named)
		files_tmp_discard(&rp->tmp);
	else if (rp->out >= 0)
		close(rp->out);
	if (rp->fd >= 0)
		close(rp->fd);
	if (rp->dirfd >= 0)
		close(rp->dirfd);
	free(rp->buf);
	free(rp->obuf);
	memset(rp, 0, sizeof(*rp));
	rp->dirfd = rp->fd = rp->out = rp->tmp.fd = -1;
}

/* ---- line ranges ---- */

static int lines_scan(struct files_lines *l, int fd, char *buf, uint64_t deadline_ms);

void files_lines_init(struct files_lines *l, uint64_t first, uint64_t count)
{
	memset(l, 0, sizeof(*l));
	l->first = first;
	l->last = first + count; /* first line not wanted */
	l->line = 1;
	l->s = first <= 1 ? 0 : -1;
}

int files_lines_step(struct files_lines *l, int fd, uint64_t deadline_ms)
{
	char buf[REPLACE_CHUNK];
	scan_advice(fd, true);
	int rc = lines_scan(l, fd, buf, deadline_ms);
	if (rc <= 0)
		scan_advice(fd, false); /* the range goes out with readahead (sendfile) */
	return rc;
}

static int lines_scan(struct files_lines *l, int fd, char *buf, uint64_t deadline_ms)
{
	do {
		if ((uint64_t)l->pos >= FILES_LINES_SCAN_MAX)
			return -FILES_ELIMIT;
		ssize_t n = pread(fd, buf, REPLACE_CHUNK, l->pos);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0) {
			/* EOF before the last wanted line: up to the end (a final
			 * line without a newline counts). */
			l->start = l->s < 0 ? l->pos : l->s;
			l->len = l->s < 0 ? 0 : l->pos - l->s;
			return 0;
		}
		for (char *p = buf, *end = buf + n; p < end;) {
			char *nl = memchr(p, '\n', (size_t)(end - p));
			if (!nl)
				break;
			l->line++;
			off_t after = l->pos + (nl - buf) + 1;
			if (l->line == l->first)
				l->s = after;
			if (l->line == l->last) {
				l->start = l->s < 0 ? after : l->s;
				l->len = after - l->start;
				return 0;
			}
			p = nl + 1;
		}
		l->pos += n;
	} while (monotonic_ms() < deadline_ms);
	return 1;
}
