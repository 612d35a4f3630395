/* Runtime init (execd's POST /internal/init for warm pools) and lifecycle
 * hooks (OSEP-0020: preStart and periodic):
 * docs/design/profiles.md#runtime-init-a-warm-box-bound-to-one-sandbox,
 * design/profiles.md#lifecycle-hooks-osep-0020-prestart-and-periodic. The parsing is config.c
 * (pure); this file holds the binding and the gate in front of the API; hooks.c runs the hooks. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "audit/trail.h"
#include "core/cleanup.h"
#include "core/error.h"
#include "core/log.h"
#include "core/runner.h"
#include "init/internal.h"

/* ---- start-up: the configuration from the environment or a file ---- */

static int read_small_file(const char *path, char **out, size_t *len, struct error *e)
{
	/* Links are followed: start-up checked the path, every link and directory on the way
	 * out of the tasks' reach (core/trustfile.h), and a Kubernetes ConfigMap's file is a
	 * link into its ..data directory. */
	cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return error_set(e, errno, NULL, "lifecycle config %s", path);
	struct stat st;
	if (fstat(fd, &st) < 0)
		return error_set(e, errno, NULL, "lifecycle config %s", path);
	if (!S_ISREG(st.st_mode) || st.st_size > 256 * 1024)
		return error_set(e, 0, NULL,
				 "lifecycle config %s: not a regular file of at most 256 KiB",
				 path);
	char *buf = malloc((size_t)st.st_size + 1);
	if (!buf)
		return error_set(e, ENOMEM, NULL, "lifecycle config");
	size_t n = 0;
	while (n < (size_t)st.st_size) {
		ssize_t got = read(fd, buf + n, (size_t)st.st_size - n);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			int en = errno;
			free(buf);
			return error_set(e, en, NULL, "lifecycle config %s", path);
		}
		if (got == 0)
			break;
		n += (size_t)got;
	}
	buf[n] = 0;
	*out = buf;
	*len = n;
	return 0;
}

const char *runtime_init_config_file(char *buf, size_t len)
{
	const char *js = getenv("OPEN_SANDBOX_LIFECYCLE");
	if (!js || !*js)
		js = getenv("OPENSANDBOX_LIFECYCLE");
	if (js && *js)
		return NULL;
	const char *path = getenv("EXECD_LIFECYCLE_CONFIG");
	if (path && *path)
		return path; /* must exist: its reader says so */
	const char *home = getenv("HOME");
	if (snprintf(buf, len, "%s/.execd/lifecycle.toml", home && *home ? home : "/root") >=
	    (int)len)
		return NULL;
	return access(buf, F_OK) == 0 ? buf : NULL;
}

/* execd's order: the transport variable (OPEN_SANDBOX_LIFECYCLE, JSON),
 * else EXECD_LIFECYCLE_CONFIG exactly (a file that must exist), else
 * $HOME/.execd/lifecycle.toml if present. A configuration that is there
 * but wrong stops the runner: a box must not start without its hooks. */
static int load_startup_config(struct runner *r, struct error *e)
{
	struct runtime_init *rt = rt_of(r);
	struct lc_warnings w = {0};
	const char *var = "OPEN_SANDBOX_LIFECYCLE";
	char *js = getenv(var);
	if (!js || !*js) {
		var = "OPENSANDBOX_LIFECYCLE";
		js = getenv(var);
	}
	int rc = 0;
	const char *from = NULL;
	if (js && *js) {
		json_error_t jerr;
		cleanup_json json_t *j = json_loads(js, JSON_REJECT_DUPLICATES, &jerr);
		if (!j)
			return error_set(e, 0, NULL, "%s is not JSON: %s", var, jerr.text);
		rc = lc_parse_json(j, &rt->cfg, &w, e);
		from = var;
	} else {
		char def[PATH_MAX];
		const char *path = runtime_init_config_file(def, sizeof(def));
		if (!path)
			return 0;
		cleanup_free char *text = NULL;
		size_t len = 0;
		if (read_small_file(path, &text, &len, e) < 0)
			return -1;
		rc = lc_parse_toml(text, len, &rt->cfg, &w, e);
		from = path;
	}
	if (rc < 0) {
		lc_free(&rt->cfg);
		return error_wrap(e, "lifecycle hooks from %s", from);
	}
	for (unsigned i = 0; i < w.n; i++)
		log_warn("lifecycle: ignored", "{s:s,s:s}", "from", from, "warning", w.msg[i]);
	rt->startup = lc_to_json(&rt->cfg);
	log_info("lifecycle hooks configured", "{s:s,s:b,s:i}", "from", from, "preStart",
		 rt->cfg.has_prestart, "periodic", (int)rt->cfg.n_periodic);
	return 0;
}

int runtime_init_init(struct runner *r, const struct init_hooks *hooks, struct error *e)
{
	struct runtime_init *rt = calloc(1, sizeof(*rt));
	if (!rt)
		return error_set(e, ENOMEM, NULL, "runtime init");
	if (hooks)
		rt->hooks = *hooks;
	r->runtime_init = rt;
	return load_startup_config(r, e);
}

/* After the API is up: without --runtime-init the hooks start now (execd
 * serves HTTP before preStart); with it they wait for the binding. */
void runtime_init_start(struct runner *r)
{
	struct runtime_init *rt = rt_of(r);
	if (!rt)
		return;
	if (r->cfg.runtime_init) {
		log_info("runtime init: waiting for POST /internal/init", NULL);
		return;
	}
	hooks_start(r);
}

bool runtime_init_main_may_start(struct runner *r)
{
	struct runtime_init *rt = rt_of(r);
	if (!rt)
		return true;
	return rt->prestart != PS_RUNNING && rt->prestart != PS_FAILED;
}

void runtime_init_free(struct runner *r)
{
	struct runtime_init *rt = rt_of(r);
	if (!rt)
		return;
	/* At exit the tasks are gone already (tasks_free_all ran): only the
	 * timers are left to close. */
	for (unsigned i = 0; i < LC_MAX_PERIODIC; i++)
		if (rt->per[i].timer_ok)
			loop_timer_close(&r->loop, &rt->per[i].timer);
	lc_free(&rt->cfg);
	json_decref(rt->startup);
	json_decref(rt->attributes);
	json_decref(r->sandbox_env);
	r->sandbox_env = NULL;
	free(rt);
	r->runtime_init = NULL;
}

/* ---- the gate ---- */

bool runtime_init_blocks(struct runner *r, const char *method, const char *path, struct error *e)
{
	struct runtime_init *rt = rt_of(r);
	if (!rt)
		return false;
	static const char *const open_routes[][2] = {
		{"GET", "/ping"},    {"GET", "/ready"},     {"*", "/internal/init"},
		{"GET", "/metrics"}, {"POST", "/v1/reset"}, {"GET", "/v1/hardening"},
	};
	for (size_t i = 0; i < sizeof(open_routes) / sizeof(open_routes[0]); i++)
		if ((!strcmp(open_routes[i][0], "*") || !strcmp(method, open_routes[i][0])) &&
		    !strcmp(path, open_routes[i][1]))
			return false;
	return runtime_init_admit(r, false, e) < 0;
}

int runtime_init_admit(struct runner *r, bool hook, struct error *e)
{
	struct runtime_init *rt = rt_of(r);
	if (!rt || hook)
		return 0;
	if (r->cfg.runtime_init && !rt->initialized)
		return error_set(e, 0, "NOT_INITIALIZED",
				 "this box waits for its runtime init (POST /internal/init): no "
				 "task runs before it");
	if (rt->prestart == PS_RUNNING)
		return error_set(e, 0, "STARTING",
				 "the preStart lifecycle hook is running: no task runs before it "
				 "ends");
	if (rt->prestart == PS_FAILED)
		return error_set(e, 0, "PRESTART_FAILED",
				 "the preStart lifecycle hook failed (failurePolicy Abort): %s",
				 rt->prestart_msg);
	return 0;
}

/* ---- what GET /ready, /metrics and a reset show ---- */

json_t *runtime_init_ready(struct runner *r, unsigned *status)
{
	struct runtime_init *rt = rt_of(r);
	struct error e;
	*status = 200;
	json_t *o = json_pack("{s:b,s:s}", "initialized",
			      !rt || !r->cfg.runtime_init || rt->initialized, "status", "ready");
	/* The protocol is named only where it is on (docs/api.md, GET /ready): a
	 * box without --runtime-init speaks none. */
	if (o && r->cfg.runtime_init)
		json_object_set_new(o, "runtimeInitProtocol",
				    json_integer(RTINIT_PROTOCOL_VERSION));
	if (!o || !rt)
		return o;
	if (runtime_init_admit(r, false, &e) < 0) {
		*status = 503;
		json_object_set_new(o, "status",
				    json_string(rt->prestart == PS_RUNNING  ? "starting"
						: rt->prestart == PS_FAILED ? "failed"
									    : "not_initialized"));
		json_object_set_new(o, "code", json_string(e.code));
		json_object_set_new(o, "message", json_string(e.msg));
	}
	if (rt->initialized) {
		json_object_set_new(o, "sandboxId", json_string(rt->sandbox_id));
		json_object_set_new(o, "generation", json_integer((json_int_t)rt->generation));
	}
	if (rt->cfg.has_prestart || rt->cfg.n_periodic) {
		json_t *hooks = json_object();
		if (rt->cfg.has_prestart)
			json_object_set_new(hooks, "preStart", hook_status(&rt->pre));
		json_t *p = json_array();
		for (unsigned i = 0; p && i < rt->cfg.n_periodic; i++)
			json_array_append_new(p, hook_status(&rt->per[i]));
		json_object_set_new(hooks, "periodic", p);
		json_object_set_new(o, "lifecycle", hooks);
	}
	return o;
}

void runtime_init_add_binding(struct runner *r, json_t *o)
{
	struct runtime_init *rt = rt_of(r);
	if (!rt || !rt->initialized || !o)
		return;
	json_object_set_new(o, "sandbox_id", json_string(rt->sandbox_id));
	json_object_set_new(o, "generation", json_integer((json_int_t)rt->generation));
	if (rt->attributes)
		json_object_set(o, "attributes", rt->attributes);
}

void runtime_init_reset_begin(struct runner *r)
{
	hooks_stop(r);
}

/* The audit trail's resource of a bound box
 * (docs/design/profiles.md#runtime-init-a-warm-box-bound-to-one-sandbox, design/audit.md):
 * sandbox.id, sandbox.generation, and telemetry.attributes' string values
 * (which cannot replace the first two). */
static json_t *audit_attrs(const struct runtime_init *rt)
{
	char gen[24];
	snprintf(gen, sizeof(gen), "%llu", (unsigned long long)rt->generation);
	json_t *o = json_object();
	const char *k;
	json_t *v;
	if (rt->attributes)
		json_object_foreach(rt->attributes, k, v) {
			if (json_is_string(v))
				json_object_set(o, k, v);
		}
	json_object_set_new(o, "sandbox.id", json_string(rt->sandbox_id));
	json_object_set_new(o, "sandbox.generation", json_string(gen));
	return o;
}

/* A reset box is a fresh one: with --runtime-init it waits for a new init
 * (the generation must grow); without, its own hooks start again. */
json_t *runtime_init_reset_done(struct runner *r)
{
	struct runtime_init *rt = rt_of(r);
	if (!rt)
		return NULL;
	bool was = rt->initialized;
	if (r->cfg.runtime_init) {
		rt->initialized = false;
		rt->sandbox_id[0] = 0;
		json_decref(rt->attributes);
		rt->attributes = NULL;
		audit_set_resource(r, NULL); /* the next tenant's chain names no box */
		json_decref(r->sandbox_env);
		r->sandbox_env = NULL;
		r->auth_hash_set = false;
		memset(r->auth_hash, 0, sizeof(r->auth_hash));
		/* The next tenant gets the box's own hooks, not this one's. */
		lc_free(&rt->cfg);
		struct error e;
		if (rt->startup && lc_parse_json(rt->startup, &rt->cfg, NULL, &e) < 0) {
			log_error("lifecycle: the box's own hooks could not be restored", "{s:s}",
				  "error", e.msg);
			lc_free(&rt->cfg);
		}
		rt->prestart = PS_NONE;
		log_set_context(NULL, 0);
		/* The previous tenant's result must not read as this box's. */
		report_startup(r, "not_initialized", "reset: waiting for POST /internal/init");
		return json_pack("{s:b,s:b}", "unbound", was, "initialized", 0);
	}
	hooks_start(r);
	return NULL;
}

/* ---- POST /internal/init ---- */

bool runtime_init_bound(struct runner *r, struct error *e)
{
	struct runtime_init *rt = rt_of(r);
	if (!rt || !rt->initialized)
		return false;
	error_set(e, 0, "ALREADY_INITIALIZED",
		  "this box is already bound to sandbox %s (generation %llu): runtime init is "
		  "one-shot",
		  rt->sandbox_id, (unsigned long long)rt->generation);
	return true;
}

json_t *runtime_init_apply(struct runner *r, json_t *body, unsigned *status, struct error *e)
{
	struct runtime_init *rt = rt_of(r);
	if (runtime_init_bound(r, e)) {
		*status = 409;
		return NULL;
	}
	struct rt_init_req req;
	if (rt_parse_init(body, &req, e) < 0) {
		rt_init_req_free(&req);
		*status = 400;
		return NULL;
	}
	if (rt->have_generation && req.generation <= rt->generation) {
		*status = 409;
		error_set(e, 0, "STALE_GENERATION",
			  "generation %llu is not newer than this box's last binding (%llu)",
			  (unsigned long long)req.generation, (unsigned long long)rt->generation);
		rt_init_req_free(&req);
		return NULL;
	}
	json_t *sandbox_env = req.envs ? json_deep_copy(req.envs) : json_object();
	json_t *warn = json_array();
	if (!sandbox_env || !warn) {
		json_decref(sandbox_env);
		json_decref(warn);
		rt_init_req_free(&req);
		*status = 500;
		error_set(e, ENOMEM, NULL, "runtime init");
		return NULL;
	}
	/* Checked: from here on it is applied, and the slot is used. */
	rt->initialized = true;
	snprintf(rt->sandbox_id, sizeof(rt->sandbox_id), "%s", req.sandbox_id);
	rt->generation = req.generation;
	rt->have_generation = true;
	/* Replace semantics: the tasks' sandbox-level variables are exactly these. */
	json_decref(r->sandbox_env);
	r->sandbox_env = sandbox_env;
	if (req.has_token_hash) {
		memcpy(r->auth_hash, req.token_hash, sizeof(r->auth_hash));
		r->auth_hash_set = true;
	} else if (!r->cfg.token) {
		lc_warn(&req.warnings, "no accessTokenHash and no startup token: every request is "
				       "accepted without a token");
	}
	json_decref(rt->attributes);
	rt->attributes = req.attributes ? json_deep_copy(req.attributes) : NULL;
	audit_set_resource(r, audit_attrs(rt));
	if (req.entrypoint_policy == RT_EP_RESTART &&
	    !(rt->hooks.restart_main && rt->hooks.restart_main(r, sandbox_env)))
		lc_warn(&req.warnings, "entrypointPolicy restart: there is no running entrypoint "
				       "(-- CMD) to restart");
	if (req.has_lifecycle) {
		hooks_stop(r);
		lc_free(&rt->cfg);
		rt->cfg = req.lifecycle; /* moved */
		memset(&req.lifecycle, 0, sizeof(req.lifecycle));
	}
	for (unsigned i = 0; i < req.warnings.n; i++)
		json_array_append_new(warn, json_string(req.warnings.msg[i]));
	log_set_context(rt->sandbox_id, rt->generation);
	log_info("runtime init applied", "{s:s,s:I,s:i,s:b,s:s,s:i,s:O?}", "sandboxId",
		 rt->sandbox_id, "generation", (json_int_t)rt->generation, "envs",
		 (int)json_object_size(sandbox_env), "token_hash", req.has_token_hash,
		 "entrypointPolicy", req.entrypoint_policy == RT_EP_RESTART ? "restart" : "keep",
		 "warnings", (int)json_array_size(warn), "attributes", rt->attributes);
	rt_init_req_free(&req);
	hooks_start(r);
	*status = 200;
	return json_pack("{s:s,s:s,s:I,s:o}", "status", "initialized", "sandboxId", rt->sandbox_id,
			 "generation", (json_int_t)rt->generation, "warning", warn);
}
