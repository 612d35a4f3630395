#include "task/taskuser.h"

#include "core/runner.h"

void task_user_ident(const struct runner *r, struct files_ident *id)
{
	id->uid = r->cfg.task_uid;
	id->gid = r->cfg.task_gid;
	id->write_roots = r->policy.enabled && r->policy.landlock.abi > 0 ? r->policy.landlock.roots
									  : NULL;
}
