/* Who is a task, seen from a door: see task_uids.h. */
#include "task/task_uids.h"

#include <stdio.h>
#include <unistd.h>

#include "core/ids.h"
#include "core/runner.h"

bool task_uids_include(const struct runner *r, uid_t uid)
{
	/* A runner that is not root runs tasks as itself: its own uid cannot
	 * tell them apart (reported; see task_uids_describe). Likewise root with
	 * --allow-root-tasks. */
	return uid != geteuid() && ids_uid_allowed(&r->cfg, uid);
}

void task_uids_describe(const struct runner *r, char *buf, size_t len)
{
	snprintf(buf, len, "every uid a task can run as (%u, %u-%u except %u%s)%s",
		 (unsigned)r->cfg.task_uid, (unsigned)r->cfg.task_id_lo,
		 (unsigned)r->cfg.task_id_hi, IDS_NOBODY, r->cfg.allow_root_tasks ? ", 0" : "",
		 ids_uid_allowed(&r->cfg, geteuid())
			 ? "; not the runner's own uid, which cannot be told apart"
			 : "");
}
