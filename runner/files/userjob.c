/* File work as the task user, in slices: see userjob.h. */
#include "files/userjob.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/runner.h"
#include "files/fserror.h"
#include "files/path.h"

void files_task_ident(const struct runner *r, struct files_ident *id)
{
	id->uid = r->cfg.task_uid;
	id->gid = r->cfg.task_gid;
	/* Tasks may only write beneath the Landlock roots: neither may the API
	 * on their behalf (reads are allowed everywhere, as for tasks). */
	id->write_roots = r->task_write_roots;
}

static int sched_step(struct files_job *sj, uint64_t deadline_ms)
{
	return files_userjob_slice((struct files_userjob *)sj, deadline_ms);
}

static void sched_done(struct files_job *sj)
{
	struct files_userjob *j = (struct files_userjob *)sj;
	if (j->done)
		j->done(j);
}

void files_userjob_init(struct files_userjob *j, struct runner *r, files_userjob_step_fn step,
			files_userjob_fn done, files_userjob_fn release)
{
	j->sj.step = sched_step;
	j->sj.done = sched_done;
	j->r = r;
	files_task_ident(r, &j->id);
	j->step = step;
	j->done = done;
	j->release = release;
}

int files_userjob_slice(struct files_userjob *j, uint64_t deadline_ms)
{
	int rc = files_enter(&j->id);
	if (rc < 0) {
		files_error(&j->err, rc, "act as the task user", "", &j->id, false);
	} else {
		rc = j->step(j, deadline_ms);
		files_leave();
	}
	if (rc < 0)
		j->failed = true;
	return rc < 0 ? 0 : rc;
}

int files_userjob_schedule(struct files_userjob *j)
{
	return files_sched_add(j->r->files_sched, &j->r->loop, &j->sj);
}

void files_userjob_release(struct files_userjob *j)
{
	files_sched_remove(j->r->files_sched, &j->sj);
	if (!j->release)
		return;
	/* Descriptors are closed and temporaries removed as the task user. */
	bool entered = files_enter(&j->id) == 0;
	j->release(j);
	if (entered)
		files_leave();
}

int files_user_realpath(const struct files_ident *id, const char *path, char *out, size_t outsz)
{
	int rc = files_enter(id);
	if (rc < 0)
		return rc;
	int fd = files_open(AT_FDCWD, path, O_PATH | O_DIRECTORY, 0);
	files_leave();
	if (fd < 0)
		return fd;
	char link[40];
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, out, outsz);
	int err = errno;
	close(fd);
	if (n < 0)
		return -err;
	if ((size_t)n >= outsz)
		return -ENAMETOOLONG;
	out[n] = 0;
	/* Removed meanwhile ("... (deleted)"), or not a path of this mount namespace. */
	if (out[0] != '/' || (n > 10 && !strcmp(out + n - 10, " (deleted)")))
		return -ENOENT;
	return 0;
}

bool files_user_reaches_parent(const struct files_ident *id, const char *path, int pfd)
{
	if (files_enter(id) < 0)
		return false;
	const char *base;
	int fd = files_open_parent(path, &base);
	files_leave();
	if (fd < 0)
		return false;
	struct stat a, b;
	bool same = fstat(fd, &a) == 0 && fstat(pfd, &b) == 0 && a.st_dev == b.st_dev &&
		    a.st_ino == b.st_ino;
	close(fd);
	return same;
}
