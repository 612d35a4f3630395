/* Identities of the files API: every operation runs with the task user's
 * rights. The runner is single-threaded, so switching the thread's
 * filesystem uid/gid (setfsuid/setfsgid) around each operation is exact:
 * while the fsuid is not 0 the kernel also drops CAP_DAC_OVERRIDE,
 * CAP_CHOWN, CAP_FOWNER and the other filesystem capabilities from the
 * effective set, so the kernel checks the task user's permissions and
 * nothing more. Functions return 0 on success and -errno on failure. */
#pragma once
#include <sys/types.h>

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

/* User and group names, numeric strings accepted. 0 or -ENOENT. */
int files_lookup_user(const char *name, uid_t *out);
int files_lookup_group(const char *name, gid_t *out);
