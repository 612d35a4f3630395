/* IPC objects left by tenants: see ipcclean.h. */
#include "task/ipcclean.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "core/error.h"

#define MQUEUE_MAGIC 0x19800202

static bool wanted(const uid_t *uids, unsigned n, bool all, long uid)
{
	if (uid < 0)
		return false;
	if (all)
		return uid != 0 && (uid_t)uid != geteuid();
	for (unsigned i = 0; i < n; i++)
		if (uids[i] == (uid_t)uid)
			return true;
	return false;
}

enum kind { SHM, SEM, MSG };

static int rmid(enum kind k, int id)
{
	if (k == SHM)
		return shmctl(id, IPC_RMID, NULL);
	if (k == SEM)
		return semctl(id, 0, IPC_RMID);
	return msgctl(id, IPC_RMID, NULL);
}

/* /proc/sysvipc/<kind>: a header line, then one object per line; the
 * columns of the id, owner and creator differ per kind. */
static int clean_kind(enum kind k, const uid_t *uids, unsigned n, bool all, unsigned *count,
		      struct error *e)
{
	static const char *const file[] = {"/proc/sysvipc/shm", "/proc/sysvipc/sem",
					   "/proc/sysvipc/msg"};
	static const int col_uid[] = {7, 4, 7}, col_cuid[] = {9, 6, 9};
	FILE *f = fopen(file[k], "re");
	if (!f) {
		if (errno == ENOENT)
			return 0; /* no SysV IPC in this kernel */
		return error_set(e, errno, NULL, "cannot read %s", file[k]);
	}
	char line[512];
	bool header = true;
	int rc = 0;
	while (fgets(line, sizeof(line), f)) {
		if (header) {
			header = false;
			continue;
		}
		long v[12] = {0};
		int got = 0;
		char *p = line;
		while (got < 12) {
			char *end;
			v[got] = strtol(p, &end, 10);
			if (end == p)
				break;
			got++;
			p = end;
		}
		if (got <= col_cuid[k])
			continue;
		if (!wanted(uids, n, all, v[col_uid[k]]) && !wanted(uids, n, all, v[col_cuid[k]]))
			continue;
		int id = (int)v[1];
		int r = rmid(k, id);
		/* Root may not remove another uid's object without CAP_SYS_ADMIN,
		 * but its owner may: be the owner for the call (CAP_SETUID is
		 * enough, and root keeps it; docs/design/privilege.md#what-a-root-runner-needs). */
		if (r < 0 && errno == EPERM && geteuid() == 0 && v[col_uid[k]] > 0) {
			if (setresuid((uid_t)-1, (uid_t)v[col_uid[k]], (uid_t)-1) < 0) {
				rc = error_set(e, errno, NULL,
					       "cannot become uid %ld to remove SysV "
					       "IPC object %d",
					       v[col_uid[k]], id);
				break;
			}
			r = rmid(k, id);
			int saved = errno;
			if (setresuid((uid_t)-1, 0, (uid_t)-1) < 0) {
				rc = error_set(e, errno, NULL, "cannot return to euid 0");
				break;
			}
			errno = saved;
		}
		if (r < 0 && errno != EINVAL && errno != EIDRM) {
			rc = error_set(e, errno, NULL, "cannot remove SysV IPC object %d (%s)", id,
				       file[k]);
			break;
		}
		if (r == 0)
			(*count)++;
	}
	fclose(f);
	return rc;
}

static int clean_mqueue(const uid_t *uids, unsigned n, bool all, struct ipc_stats *st,
			struct error *e)
{
	int fd = open("/dev/mqueue", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return 0;
	struct statfs sf;
	if (fstatfs(fd, &sf) < 0 || sf.f_type != MQUEUE_MAGIC) {
		close(fd);
		return 0;
	}
	st->mqueue_checked = true;
	char buf[8192];
	int rc = 0;
	for (;;) {
		long nr = syscall(SYS_getdents64, fd, buf, sizeof(buf));
		if (nr < 0) {
			rc = error_set(e, errno, NULL, "cannot list /dev/mqueue");
			break;
		}
		if (nr == 0)
			break;
		for (long off = 0; off < nr;) {
			struct {
				unsigned long long ino;
				long long off;
				unsigned short reclen;
				unsigned char type;
				char name[];
			} *d = (void *)(buf + off);
			off += d->reclen;
			if (d->name[0] == '.')
				continue;
			struct stat sb;
			if (fstatat(fd, d->name, &sb, AT_SYMLINK_NOFOLLOW) < 0 ||
			    !wanted(uids, n, all, (long)sb.st_uid))
				continue;
			if (unlinkat(fd, d->name, 0) == 0)
				st->mqueue++;
			else if (errno != ENOENT)
				rc = error_set(e, errno, NULL, "cannot remove the POSIX queue /%s",
					       d->name);
		}
	}
	close(fd);
	return rc;
}

int ipc_clean(const uid_t *uids, unsigned n, bool all_uids, struct ipc_stats *st, struct error *e)
{
	memset(st, 0, sizeof(*st));
	if (clean_kind(SHM, uids, n, all_uids, &st->shm, e) < 0 ||
	    clean_kind(SEM, uids, n, all_uids, &st->sem, e) < 0 ||
	    clean_kind(MSG, uids, n, all_uids, &st->msg, e) < 0)
		return -1;
	return clean_mqueue(uids, n, all_uids, st, e);
}
