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
#include "core/util.h"
#include "files/path.h"

int files_chown(const struct files_ident *id, int dirfd, const char *base, uid_t uid, gid_t gid,
		bool as_root)
{
	if (uid == (uid_t)-1 && gid == (gid_t)-1)
		return 0;
	if (as_root)
		files_leave(); /* the runner's own identity, CAP_CHOWN back in effect */
	int rc = (base ? fchownat(dirfd, base, uid, gid, 0) : fchown(dirfd, uid, gid)) < 0 ? -errno
											   : 0;
	if (as_root) {
		int r2 = files_enter(id);
		if (r2 < 0 && rc == 0)
			rc = r2;
	}
	return rc;
}

int files_chown_new(const struct files_ident *id, const char *path, size_t first_new, uid_t uid,
		    gid_t gid, bool as_root)
{
	if (!first_new || (uid == (uid_t)-1 && gid == (gid_t)-1))
		return 0;
	char p[PATH_MAX];
	size_t len = strlen(path);
	if (len >= sizeof(p) || first_new > len)
		return -ENAMETOOLONG;
	memcpy(p, path, len + 1);
	if (as_root)
		files_leave();
	int rc = 0;
	/* Top down, each prefix ending at a component boundary. */
	for (size_t end = first_new; rc == 0 && end <= len; end++) {
		if (end < len && p[end] != '/')
			continue;
		char c = p[end];
		p[end] = 0;
		if (fchownat(AT_FDCWD, p, uid, gid, AT_SYMLINK_NOFOLLOW) < 0)
			rc = -errno;
		p[end] = c;
	}
	if (as_root) {
		int r2 = files_enter(id);
		if (r2 < 0 && rc == 0)
			rc = r2;
	}
	return rc;
}

int files_mkdirs(const struct files_ident *id, const char *path, mode_t mode, bool *created,
		 size_t *first_new)
{
	*created = false;
	*first_new = 0;
	int fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	const char *p = path;
	while (*p) {
		while (*p == '/')
			p++;
		if (!*p)
			break;
		size_t n = strcspn(p, "/");
		char comp[NAME_MAX + 1];
		if (n > NAME_MAX) {
			close(fd);
			return -ENAMETOOLONG;
		}
		memcpy(comp, p, n);
		comp[n] = 0;
		p += n;
		bool last = !*p || !p[strspn(p, "/")];
		int rc = 0;
		int nfd = openat(fd, comp, O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (nfd < 0 && errno == ENOENT) {
			mode_t m = last ? mode : 0755;
			rc = files_check_writable(id, fd);
			if (rc == 0 && mkdirat(fd, comp, m) < 0 && errno != EEXIST) {
				rc = -errno;
			} else if (rc == 0) {
				/* Exact mode whatever the umask. */
				if (fchmodat(fd, comp, m, 0) < 0)
					rc = -errno;
				if (!*first_new)
					*first_new = (size_t)(p - path);
				if (last)
					*created = true;
			}
			if (rc == 0) {
				nfd = openat(fd, comp, O_PATH | O_DIRECTORY | O_CLOEXEC);
				if (nfd < 0)
					rc = -errno;
			}
		} else if (nfd < 0) {
			rc = -errno;
		}
		close(fd);
		if (rc < 0) {
			if (nfd >= 0)
				close(nfd);
			return rc;
		}
		fd = nfd;
	}
	return fd;
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
	t->named = false; /* it has its real name now */
	if (close(t->fd) < 0)
		rc = -errno;
	t->fd = -1;
	return rc;
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

int files_write_all(int fd, const char *data, size_t len)
{
	while (len) {
		ssize_t n = write(fd, data, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		data += n;
		len -= (size_t)n;
	}
	return 0;
}

#define REPLACE_CHUNK (64 * 1024)

int files_replace_stream(int in, int out, const char *old, size_t olen, const char *new_,
			 size_t nlen, uint64_t *count)
{
	*count = 0;
	if (olen == 0)
		return -EINVAL;
	size_t cap = REPLACE_CHUNK + olen;
	char *b = malloc(cap);
	if (!b)
		return -ENOMEM;
	size_t have = 0;
	bool eof = false;
	int rc = 0;
	while (!eof) {
		ssize_t n = read(in, b + have, cap - have);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			rc = -errno;
			break;
		}
		if (n == 0)
			eof = true;
		have += (size_t)n;
		size_t pos = 0;
		for (;;) {
			char *hit = have - pos >= olen ? memmem(b + pos, have - pos, old, olen) : NULL;
			if (!hit)
				break;
			size_t at = (size_t)(hit - b);
			if ((rc = files_write_all(out, b + pos, at - pos)) < 0 ||
			    (rc = files_write_all(out, new_, nlen)) < 0)
				break;
			pos = at + olen;
			(*count)++;
		}
		if (rc < 0)
			break;
		/* Keep back what could be the start of a match cut by the chunk. */
		size_t keep = eof ? 0 : olen - 1;
		size_t upto = have - pos > keep ? have - keep : pos;
		if ((rc = files_write_all(out, b + pos, upto - pos)) < 0)
			break;
		memmove(b, b + upto, have - upto);
		have -= upto;
	}
	free(b);
	return rc;
}

static int copy_fd(int in, int out)
{
	char buf[REPLACE_CHUNK];
	for (;;) {
		ssize_t n = read(in, buf, sizeof(buf));
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return 0;
		int rc = files_write_all(out, buf, (size_t)n);
		if (rc < 0)
			return rc;
	}
}

int files_replace(const struct files_ident *id, const char *path, const char *old, size_t olen,
		  const char *new_, size_t nlen, uint64_t *count)
{
	*count = 0;
	const char *base;
	int dirfd = files_open_parent(path, &base);
	if (dirfd < 0)
		return dirfd;
	int rc = 0, in = -1, out = -1;
	struct files_tmp tmp = {.fd = -1};
	bool use_tmp = false;
	struct stat st, lst;
	in = openat(dirfd, base, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (in < 0) {
		rc = -errno;
		goto out;
	}
	if (fstat(in, &st) < 0) {
		rc = -errno;
		goto out;
	}
	if (S_ISDIR(st.st_mode)) {
		rc = -EISDIR;
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = -EINVAL;
		goto out;
	}
	if ((uint64_t)st.st_size > FILES_REPLACE_MAX) {
		rc = -EFBIG;
		goto out;
	}
	/* Writing needs write permission on the file, whichever way we go. */
	if (faccessat(dirfd, base, W_OK, 0) < 0) {
		rc = -errno;
		goto out;
	}
	/* Landlock judges the file where it really is (a link may lead out). */
	if ((rc = files_check_writable(id, in)) < 0)
		goto out;
	/* Atomic rename only when it changes nothing but the content: our own,
	 * singly linked, not a symlink, a group we can keep. Else in place. */
	use_tmp = fstatat(dirfd, base, &lst, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(lst.st_mode) &&
		  lst.st_ino == st.st_ino && st.st_nlink == 1 && st.st_uid == id->uid &&
		  st.st_gid == id->gid;
	if (use_tmp) {
		if ((rc = files_tmp_open(&tmp, dirfd)) < 0)
			goto out;
		out = tmp.fd;
	} else {
		out = memfd_create("forceai-replace", MFD_CLOEXEC);
		if (out < 0) {
			rc = -errno;
			goto out;
		}
	}
	if ((rc = files_replace_stream(in, out, old, olen, new_, nlen, count)) < 0)
		goto out;
	if (*count == 0)
		goto out; /* nothing to change: leave the file (and its mtime) alone */
	if (use_tmp) {
		if (fchmod(tmp.fd, st.st_mode & 07777) < 0) {
			rc = -errno;
			goto out;
		}
		rc = files_tmp_commit(&tmp, base);
		out = -1;
		goto out;
	}
	int wfd = openat(dirfd, base, O_WRONLY | O_CLOEXEC);
	if (wfd < 0) {
		rc = -errno;
		goto out;
	}
	off_t len = lseek(out, 0, SEEK_CUR);
	if (len < 0 || lseek(out, 0, SEEK_SET) < 0)
		rc = -errno;
	if (rc == 0)
		rc = copy_fd(out, wfd);
	if (rc == 0 && ftruncate(wfd, len) < 0)
		rc = -errno;
	if (close(wfd) < 0 && rc == 0)
		rc = -errno;
out:
	if (use_tmp && tmp.fd >= 0)
		files_tmp_discard(&tmp);
	else if (!use_tmp && out >= 0)
		close(out);
	if (in >= 0)
		close(in);
	close(dirfd);
	return rc;
}

/* ---- line ranges ---- */

int files_line_range(int fd, uint64_t first, uint64_t count, off_t *start, off_t *len)
{
	char buf[REPLACE_CHUNK];
	uint64_t line = 1;
	off_t pos = 0, s = -1;
	*start = 0;
	*len = 0;
	if (first <= 1)
		s = 0;
	uint64_t last = first + count; /* first line not wanted */
	for (;;) {
		ssize_t n = pread(fd, buf, sizeof(buf), pos);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			break;
		for (char *p = buf, *end = buf + n; p < end;) {
			char *nl = memchr(p, '\n', (size_t)(end - p));
			if (!nl)
				break;
			line++;
			off_t after = pos + (nl - buf) + 1;
			if (line == first)
				s = after;
			if (line == last) {
				*start = s < 0 ? after : s;
				*len = after - *start;
				return 0;
			}
			p = nl + 1;
		}
		pos += n;
	}
	/* EOF before the last wanted line: up to the end (a final line without
	 * a newline counts). */
	if (s < 0) {
		*start = pos;
		*len = 0;
	} else {
		*start = s;
		*len = pos - s;
	}
	return 0;
}
