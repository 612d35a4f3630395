/* Identities of the files API: see ident.h. */
#include "files/ident.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdint.h>
#include <string.h>
#include <sys/fsuid.h>
#include <unistd.h>

#include "core/log.h"

static int drop_groups(void)
{
	/* Only root can change them; an unprivileged runner runs tasks as
	 * itself, with these same groups. */
	if (geteuid() != 0)
		return 0;
	int n = getgroups(0, NULL);
	if (n < 0)
		return -errno;
	if (n > 0 && setgroups(0, NULL) < 0)
		return -errno;
	return 0;
}

int files_init(void)
{
	int rc = drop_groups();
	if (rc < 0)
		log_errno("cannot drop supplementary groups", -rc, NULL);
	return rc;
}

int files_enter(const struct files_ident *id)
{
	/* Checked every time (one syscall): files_init may not have run, and
	 * a stray group would widen every permission check. */
	int rc = drop_groups();
	if (rc < 0)
		return rc;
	setfsgid(id->gid);
	setfsuid(id->uid);
	/* setfsuid reports no errors: read the values back (-1 changes nothing). */
	if ((uid_t)setfsuid((uid_t)-1) != id->uid || (gid_t)setfsgid((gid_t)-1) != id->gid) {
		files_leave();
		return -EPERM;
	}
	return 0;
}

void files_leave(void)
{
	setfsuid(geteuid());
	setfsgid(getegid());
}

static int lookup_num(const char *s, uint32_t *out)
{
	if (!*s || strlen(s) > 10)
		return -ENOENT;
	uint64_t v = 0;
	for (const char *p = s; *p; p++) {
		if (*p < '0' || *p > '9')
			return -ENOENT;
		v = v * 10 + (uint64_t)(*p - '0');
	}
	if (v >= 0xffffffffULL)
		return -ENOENT;
	*out = (uint32_t)v;
	return 0;
}

int files_lookup_user(const char *name, uid_t *out)
{
	struct passwd pw, *res = NULL;
	char buf[4096];
	if (getpwnam_r(name, &pw, buf, sizeof(buf), &res) == 0 && res) {
		*out = res->pw_uid;
		return 0;
	}
	uint32_t v;
	if (lookup_num(name, &v) < 0)
		return -ENOENT;
	*out = (uid_t)v;
	return 0;
}

int files_lookup_group(const char *name, gid_t *out)
{
	struct group gr, *res = NULL;
	char buf[4096];
	if (getgrnam_r(name, &gr, buf, sizeof(buf), &res) == 0 && res) {
		*out = res->gr_gid;
		return 0;
	}
	uint32_t v;
	if (lookup_num(name, &v) < 0)
		return -ENOENT;
	*out = (gid_t)v;
	return 0;
}
