#include "api/hardening.h"

#include "api/api.h"
#include "core/ids.h"
#include "core/log.h"
#include "model/modelproxy.h"
#include "core/runner.h"

json_t *hardening_report(struct runner *r)
{
	json_t *o = confine_report(&r->policy);
	if (!o)
		o = json_object();
	json_object_set_new(o, "init_mode",
			    json_string(r->init_mode == INIT_PID1 ? "pid1" : "subreaper"));
	json_object_set_new(o, "runner_dumpable", json_false());
	json_object_set_new(o, "confinement_enabled", json_boolean(r->policy.enabled));
#ifdef HAVE_WSLAY
	json_object_set_new(o, "websocket", json_true());
#else
	/* Built without wslay: /pty/{id}/ws answers 501 (see http/ws_unavailable.c). */
	json_object_set_new(o, "websocket", json_false());
#endif
	json_object_set_new(o, "task_uid", json_integer(r->cfg.task_uid));
	json_object_set_new(o, "task_gid", json_integer(r->cfg.task_gid));
	json_object_set_new(o, "allow_root_tasks", json_boolean(r->cfg.allow_root_tasks));
	json_object_set_new(o, "task_identities", ids_report(&r->cfg));
	json_object_set_new(o, "api_connections", http_access_report(r));
	json_object_set_new(o, "model_proxy_connections", modelproxy_report(r));
	const char *per_task = "request field \"network\": \"none\" or \"full\" (chat: full)";
	const char *none = "socket(AF_INET, AF_INET6) fails with EACCES (seccomp); AF_UNIX and "
			   "the rest as the policy says";
	json_object_set_new(o, "network",
			    json_pack("{s:s,s:s,s:s}", "exec_default",
				      r->cfg.exec_network_none ? "none" : "full", "per_task",
				      per_task, "none", none));
	json_object_set_new(o, "tree_kill",
			    json_string(r->policy.cgroup_mode == CGROUP_V2
						? "cgroup.kill"
						: "per-task subreaper shim (no delegated cgroup v2)"));
	return o;
}

void hardening_log(struct runner *r)
{
	json_t *rep = hardening_report(r);
	log_info("hardening", "{s:o}", "report", rep);
}

enum MHD_Result api_hardening(struct http_req *req)
{
	return http_json(req, 200, hardening_report(req->r));
}
