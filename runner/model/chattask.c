/* The chat capability's entry in the capability table: see chattask.h. */
#include "model/chattask.h"

#include "model/modelproxy.h"

const struct task_capability model_cap_chat = {
	.name = "chat",
	.needs_gateway = true,
	.net_required = "a chat task needs the network: its model proxy is on 127.0.0.1",
	.changes = TASK_CHANGES_NO,
	.start = modelproxy_start_task,
};
