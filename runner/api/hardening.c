#include "api/hardening.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "api/api.h"
#include "core/ids.h"
#include "core/log.h"
#include "model/modelproxy.h"
#include "core/runner.h"

/* Root mode (the capabilities to change identity) or non-root mode, and
 * what the runner holds: what a deployment gave it, and what is missing. */
static json_t *cap_list(uint64_t mask)
{
	char buf[1024];
	json_t *a = json_array();
	caps_names(mask, false, buf, sizeof(buf));
	for (char *save = NULL, *t = strtok_r(buf, ", ", &save); t; t = strtok_r(NULL, ", ", &save))
		json_array_append_new(a, json_string(t));
	return a;
}

static json_t *identity_report(struct runner *r)
{
	const struct caps_state *c = &r->policy->caps;
	char miss[128], reason[512];
	caps_names(c->required & ~c->effective, false, miss, sizeof(miss));
	const char *mode = c->privileged ? (c->root ? "root" : "privileged") : "non-root";
	if (c->privileged)
		snprintf(
			reason, sizeof(reason),
			"the runner holds every capability it needs "
			"(CAP_SETUID, CAP_SETGID, CAP_SETPCAP, CAP_CHOWN, CAP_KILL%s): tasks run as "
			"their own uid/gid, their capabilities and bounding set emptied",
			c->required & CAPS_RESET ? "; for reset CAP_DAC_OVERRIDE, CAP_FOWNER, "
						   "CAP_FSETID"
						 : "");
	else
		snprintf(
			reason, sizeof(reason),
			"the runner runs as uid %u without %s: tasks run "
			"as the runner's own uid/gid (requests for another get 403); not in force: "
			"a task uid separate from the runner's, an emptied bounding set and locked "
			"securebits (CAP_SETPCAP)",
			(unsigned)geteuid(), miss);
	return json_pack("{s:s,s:s,s:i,s:i,s:i,s:i,s:{s:o,s:o,s:o,s:o}}", "mode", mode, "reason",
			 reason, "runner_uid", (int)geteuid(), "runner_gid", (int)getegid(),
			 "task_uid", (int)r->cfg.task_uid, "task_gid", (int)r->cfg.task_gid,
			 "runner_capabilities", "effective", cap_list(c->effective), "bounding",
			 cap_list(c->bounding), "required_for_root_mode", cap_list(c->required),
			 "missing_for_root_mode", cap_list(c->required & ~c->effective));
}

/* Why exec tasks have the network they have by default (vault mode
 * decides unless the operator did). */
static const char *exec_network_why(const struct runner *r)
{
	bool vault = r->cfg.gateway_url && !r->cfg.gateway_key;
	if (vault && !r->cfg.exec_network_set)
		return "vault mode: the gateway takes whoever reaches it as authenticated (a "
		       "sidecar adds the key), so exec tasks get no IP sockets and only chat "
		       "tasks reach models, through the governed proxy (--exec-network full "
		       "overrides)";
	if (vault && !r->cfg.exec_network_none)
		return "--exec-network full given in vault mode: exec tasks can reach the "
		       "authenticated gateway, ungoverned by the model proxy";
	if (r->cfg.exec_network_set)
		return "--exec-network given";
	return "default (a gateway key is held by the runner, or no gateway)";
}

static json_t *hardening_report(struct runner *r)
{
	json_t *o = confine_report(r->policy);
	if (!o)
		o = json_object();
	json_object_set_new(o, "init_mode",
			    json_string(r->init_mode == INIT_PID1 ? "pid1" : "subreaper"));
	json_object_set_new(o, "runner_dumpable", json_false());
	json_object_set_new(o, "confinement_enabled", json_boolean(r->policy->enabled));
	/* Both builds: libmicrohttpd's microhttpd_ws
	 * (docs/design/interactive.md#one-websocket-library-for-both-builds-libmicrohttpds-microhttpd_ws).
	 */
	json_object_set_new(o, "websocket", json_true());
	/* Probes answered without the token (tasks still cannot reach them);
	 * runtime init only where it is served, and said as it is
	 * (design/profiles.md#runtime-init-a-warm-box-bound-to-one-sandbox). */
	json_t *free_routes = http_public_routes(r);
	size_t i;
	json_t *v;
	json_array_foreach(free_routes, i, v) {
		if (strstr(json_string_value(v), "/internal/init")) {
			json_array_remove(free_routes, i);
			break;
		}
	}
	if (r->cfg.runtime_init)
		json_array_append_new(
			free_routes,
			json_string(r->cfg.token
					    ? "POST /internal/init (with the startup token)"
					    : "POST /internal/init (before the binding only)"));
	json_object_set_new(o, "token_free_routes", free_routes);
	json_object_set_new(o, "task_uid", json_integer(r->cfg.task_uid));
	json_object_set_new(o, "task_gid", json_integer(r->cfg.task_gid));
	json_object_set_new(o, "allow_root_tasks", json_boolean(r->cfg.allow_root_tasks));
	if (r->policy->caps.privileged) {
		json_object_set_new(o, "task_identities", ids_report(&r->cfg));
	} else {
		/* Non-root mode: the range is moot, no identity can be changed to. */
		char u[64], g[64];
		snprintf(u, sizeof(u), "%u only (non-root mode)", (unsigned)r->cfg.task_uid);
		snprintf(g, sizeof(g), "%u only (non-root mode)", (unsigned)r->cfg.task_gid);
		json_object_set_new(o, "task_identities",
				    json_pack("{s:s,s:s,s:b}", "uids", u, "gids", g, "root", 0));
	}
	json_object_set_new(o, "api_connections", http_access_report(r));
	json_object_set_new(o, "model_proxy_connections", modelproxy_report(r));
	const char *per_task = "request field \"network\": \"none\" or \"full\" (chat: full)";
	const char *none = "socket(AF_INET, AF_INET6) fails with EACCES (seccomp); AF_UNIX and "
			   "the rest as the policy says";
	json_object_set_new(o, "network",
			    json_pack("{s:s,s:s,s:s,s:s}", "exec_default",
				      r->cfg.exec_network_none ? "none" : "full",
				      "exec_default_why", exec_network_why(r), "per_task", per_task,
				      "none", none));
	json_object_set_new(o, "identity", identity_report(r));
	json_object_set_new(o, "state_dir",
			    r->state_in_memory
				    ? json_pack("{s:n,s:s,s:b,s:s}", "path", "not_used",
						r->state_dir, "in_memory", true, "why",
						r->state_dir_why)
				    : json_pack("{s:s,s:b,s:b}", "path", r->state_dir, "fallback",
						r->state_dir_fallback, "in_memory", false));
	json_object_set_new(
		o, "pty_terminals",
		json_string(
			geteuid() == 0
				? "the runner's (root), mode 0600: a session's shell has the open "
				  "terminal, no task can open another session's /dev/pts/N"
				: "the runner's uid, which tasks share (non-root mode): mode 0600 "
				  "keeps out other uids only, a task can open another session's "
				  "/dev/pts/N"));
	json_object_set_new(o, "tree_kill",
			    json_string(
				    r->policy->cgroup_mode == CGROUP_V2
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
