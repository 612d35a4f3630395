/* Task identities: see ids.h. */
#include "core/ids.h"

#include <stdio.h>

#include "core/config.h"

static bool in_range(const struct runner_config *cfg, unsigned id, unsigned lo)
{
	return id >= lo && id <= cfg->task_id_hi && id != IDS_NOBODY;
}

bool ids_uid_allowed(const struct runner_config *cfg, uid_t uid)
{
	if (uid == cfg->task_uid)
		return true;
	if (uid == 0)
		return cfg->allow_root_tasks;
	return in_range(cfg, uid, cfg->task_id_lo);
}

/* The lowest gid of the range: never a system group. */
static unsigned gid_lo(const struct runner_config *cfg)
{
	return cfg->task_id_lo > IDS_SYSTEM_GID_MAX ? cfg->task_id_lo : IDS_SYSTEM_GID_MAX + 1;
}

bool ids_gid_allowed(const struct runner_config *cfg, gid_t gid)
{
	if (gid == cfg->task_gid)
		return true;
	if (gid == 0)
		return cfg->allow_root_tasks;
	return in_range(cfg, gid, gid_lo(cfg));
}

json_t *ids_report(const struct runner_config *cfg)
{
	unsigned glo = gid_lo(cfg);
	char uids[128], gids[128];
	snprintf(uids, sizeof(uids), "%u, and %u-%u except %u", (unsigned)cfg->task_uid,
		 (unsigned)cfg->task_id_lo, (unsigned)cfg->task_id_hi, IDS_NOBODY);
	if (glo <= cfg->task_id_hi)
		snprintf(gids, sizeof(gids), "%u, and %u-%u except %u", (unsigned)cfg->task_gid,
			 glo, (unsigned)cfg->task_id_hi, IDS_NOBODY);
	else
		snprintf(gids, sizeof(gids), "%u only", (unsigned)cfg->task_gid);
	return json_pack("{s:s,s:s,s:b,s:s}", "uids", uids, "gids", gids, "root",
			 cfg->allow_root_tasks, "system_groups",
			 "never (gid 1-999), unless the task user's own");
}
