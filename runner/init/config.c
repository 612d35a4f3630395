/* Runtime init's request body and the lifecycle configuration (config.h):
 * pure, bounded, every problem a message naming the field. The TOML subset
 * is read into the same JSON shape the other transports use, so one
 * checker decides what a hook is. */
#include "init/config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

#define BAD "INVALID_REQUEST_BODY"

void lc_warn(struct lc_warnings *w, const char *fmt, ...)
{
	if (!w)
		return;
	if (w->n >= LC_MAX_WARNINGS) {
		snprintf(w->msg[LC_MAX_WARNINGS - 1], sizeof(w->msg[0]), "more warnings left out");
		return;
	}
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(w->msg[w->n++], sizeof(w->msg[0]), fmt, ap);
	va_end(ap);
}

static void hook_free(struct lc_hook *h)
{
	if (h->argv)
		for (char **a = h->argv; *a; a++)
			free(*a);
	free(h->argv);
	h->argv = NULL;
}

void lc_free(struct lc_config *c)
{
	if (!c)
		return;
	hook_free(&c->prestart);
	for (unsigned i = 0; i < c->n_periodic; i++)
		hook_free(&c->periodic[i]);
	memset(c, 0, sizeof(*c));
}

static bool has_nul(json_t *s)
{
	return strlen(json_string_value(s)) != json_string_length(s);
}

static int set_argv(struct lc_hook *h, json_t *cmd, const char *where, struct error *err)
{
	size_t n = json_is_array(cmd) ? json_array_size(cmd) : 1;
	if (json_is_string(cmd)) {
		if (!json_string_length(cmd) || has_nul(cmd))
			return error_set(err, 0, BAD,
					 "%s: command must be a non-empty string without NUL",
					 where);
	} else if (!json_is_array(cmd) || n == 0 || n > LC_MAX_ARGV) {
		return error_set(err, 0, BAD,
				 "%s: command must be a string or an array of 1..%d strings", where,
				 LC_MAX_ARGV);
	}
	size_t argc = json_is_string(cmd) ? 3 : n;
	h->argv = calloc(argc + 1, sizeof(char *));
	if (!h->argv)
		return error_set(err, ENOMEM, NULL, "%s", where);
	if (json_is_string(cmd)) {
		/* A string is a shell line, as Kubernetes' exec hooks are often written. */
		h->argv[0] = strdup("/bin/sh");
		h->argv[1] = strdup("-c");
		h->argv[2] = strdup(json_string_value(cmd));
		if (!h->argv[0] || !h->argv[1] || !h->argv[2])
			return error_set(err, ENOMEM, NULL, "%s", where);
		return 0;
	}
	for (size_t i = 0; i < n; i++) {
		json_t *a = json_array_get(cmd, i);
		if (!json_is_string(a) || has_nul(a) || (i == 0 && !json_string_length(a)))
			return error_set(err, 0, BAD,
					 "%s: command[%zu] must be a string without NUL (the first "
					 "non-empty)",
					 where, i);
		if (!(h->argv[i] = strdup(json_string_value(a))))
			return error_set(err, ENOMEM, NULL, "%s", where);
	}
	return 0;
}

static int get_seconds(json_t *o, const char *key, unsigned lo, unsigned hi, unsigned *out,
		       const char *where, struct error *err)
{
	json_t *v = json_object_get(o, key);
	if (!v)
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < (json_int_t)lo ||
	    json_integer_value(v) > (json_int_t)hi)
		return error_set(err, 0, BAD, "%s.%s must be an integer from %u to %u", where, key,
				 lo, hi);
	*out = (unsigned)json_integer_value(v);
	return 0;
}

static bool valid_hook_name(const char *s)
{
	size_t n = strlen(s);
	if (!n || n > 63)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9') || s[i] == '-' || s[i] == '_' || s[i] == '.'))
			return false;
	return true;
}

/* One hook object: {command | exec: {command}, timeoutSeconds, failurePolicy,
 * name, intervalSeconds}. */
static int parse_hook(json_t *o, bool periodic, struct lc_hook *h, const char *where,
		      struct lc_warnings *w, struct error *err)
{
	if (!json_is_object(o))
		return error_set(err, 0, BAD, "%s must be an object", where);
	h->timeout_s = LC_TIMEOUT_DEFAULT;
	h->abort_on_failure = !periodic;
	json_t *cmd = json_object_get(o, "command");
	json_t *exec = json_object_get(o, "exec");
	if (exec) {
		if (!json_is_object(exec) || cmd)
			return error_set(err, 0, BAD,
					 "%s: give either command or exec {command}, not both",
					 where);
		const char *k;
		json_t *v;
		json_object_foreach(exec, k, v) {
			if (strcmp(k, "command") != 0)
				return error_set(err, 0, BAD, "%s.exec: unknown field '%.64s'",
						 where, k);
		}
		cmd = json_object_get(exec, "command");
	}
	if (!cmd)
		return error_set(err, 0, BAD, "%s: command is required", where);
	if (set_argv(h, cmd, where, err) < 0)
		return -1;
	if (get_seconds(o, "timeoutSeconds", 1, LC_TIMEOUT_MAX, &h->timeout_s, where, err) < 0)
		return -1;
	json_t *fp = json_object_get(o, "failurePolicy");
	if (fp) {
		const char *s = json_string_value(fp);
		bool abort_p = s && !strcmp(s, "Abort"), cont = s && !strcmp(s, "Continue");
		if (!abort_p && !cont)
			return error_set(err, 0, BAD, "%s.failurePolicy must be Abort or Continue",
					 where);
		/* OSEP-0020 R5: periodic hooks are fixed Continue. */
		if (periodic && abort_p)
			return error_set(err, 0, BAD,
					 "%s.failurePolicy: a periodic hook is always Continue",
					 where);
		h->abort_on_failure = abort_p;
	}
	if (periodic) {
		json_t *name = json_object_get(o, "name");
		if (!json_is_string(name) || has_nul(name) ||
		    !valid_hook_name(json_string_value(name)))
			return error_set(err, 0, BAD,
					 "%s.name is required: 1..63 of [A-Za-z0-9._-]", where);
		snprintf(h->name, sizeof(h->name), "%s", json_string_value(name));
		if (!json_object_get(o, "intervalSeconds"))
			return error_set(err, 0, BAD, "%s.intervalSeconds is required", where);
		if (get_seconds(o, "intervalSeconds", 1, 86400, &h->interval_s, where, err) < 0)
			return -1;
	} else {
		snprintf(h->name, sizeof(h->name), "preStart");
	}
	static const char *const known[] = {"command",       "exec", "timeoutSeconds",
					    "failurePolicy", "name", "intervalSeconds"};
	const char *k;
	json_t *v;
	json_object_foreach(o, k, v) {
		bool ok = false;
		for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
			ok |= !strcmp(k, known[i]);
		if (!periodic && (!strcmp(k, "name") || !strcmp(k, "intervalSeconds")))
			ok = false;
		if (!ok)
			return error_set(err, 0, BAD, "%s: unknown field '%.64s'", where, k);
	}
	(void)w;
	return 0;
}

int lc_parse_json(json_t *obj, struct lc_config *out, struct lc_warnings *w, struct error *err)
{
	memset(out, 0, sizeof(*out));
	if (!json_is_object(obj))
		return error_set(err, 0, BAD, "lifecycle must be an object");
	const char *k;
	json_t *v;
	json_object_foreach(obj, k, v) {
		if (!strcmp(k, "preStart")) {
			if (json_is_null(v))
				continue;
			out->has_prestart = true;
			if (parse_hook(v, false, &out->prestart, "lifecycle.preStart", w, err) < 0)
				return -1;
		} else if (!strcmp(k, "periodic")) {
			if (json_is_null(v))
				continue;
			if (!json_is_array(v) || json_array_size(v) > LC_MAX_PERIODIC)
				return error_set(
					err, 0, BAD,
					"lifecycle.periodic must be an array of at most %d "
					"hooks",
					LC_MAX_PERIODIC);
			for (size_t i = 0; i < json_array_size(v); i++) {
				char where[48];
				snprintf(where, sizeof(where), "lifecycle.periodic[%zu]", i);
				struct lc_hook *h = &out->periodic[out->n_periodic++];
				if (parse_hook(json_array_get(v, i), true, h, where, w, err) < 0)
					return -1;
				for (unsigned j = 0; j + 1 < out->n_periodic; j++)
					if (!strcmp(out->periodic[j].name, h->name))
						return error_set(err, 0, BAD,
								 "%s.name '%s' is used twice",
								 where, h->name);
			}
		} else if (!strcmp(k, "prePause") || !strcmp(k, "postResume") ||
			   !strcmp(k, "preTerminate")) {
			/* OSEP-0020 defines them; execd runs only preStart and periodic. */
			lc_warn(w,
				"lifecycle.%s is not run by this runner (only preStart and periodic)",
				k);
		} else {
			return error_set(err, 0, BAD, "lifecycle: unknown field '%.64s'", k);
		}
	}
	return 0;
}

static json_t *hook_json(const struct lc_hook *h, bool periodic)
{
	json_t *argv = json_array();
	for (char **a = h->argv; argv && a && *a; a++)
		json_array_append_new(argv, json_string(*a));
	json_t *o = json_pack("{s:o,s:i,s:s}", "command", argv, "timeoutSeconds",
			      (json_int_t)h->timeout_s, "failurePolicy",
			      h->abort_on_failure ? "Abort" : "Continue");
	if (o && periodic) {
		json_object_set_new(o, "name", json_string(h->name));
		json_object_set_new(o, "intervalSeconds", json_integer(h->interval_s));
	}
	return o;
}

json_t *lc_to_json(const struct lc_config *c)
{
	json_t *o = json_object();
	if (!o)
		return NULL;
	if (c->has_prestart)
		json_object_set_new(o, "preStart", hook_json(&c->prestart, false));
	json_t *p = json_array();
	for (unsigned i = 0; p && i < c->n_periodic; i++)
		json_array_append_new(p, hook_json(&c->periodic[i], true));
	json_object_set_new(o, "periodic", p ? p : json_null());
	return o;
}

int lc_parse_toml(const char *text, size_t len, struct lc_config *out, struct lc_warnings *w,
		  struct error *err)
{
	memset(out, 0, sizeof(*out));
	json_t *j = toml_to_json(text, len, err);
	if (!j)
		return -1;
	int rc = lc_parse_json(j, out, w, err);
	json_decref(j);
	return rc;
}

/* ---- POST /internal/init --------------------------------------------- */

int rt_parse_token_hash(const char *s, unsigned char out[32])
{
	if (!s || strncmp(s, "sha256:", 7) != 0 || strlen(s) != 7 + 64)
		return -1;
	s += 7;
	for (int i = 0; i < 32; i++) {
		unsigned v = 0;
		for (int j = 0; j < 2; j++) {
			char c = s[2 * i + j];
			unsigned d = c >= '0' && c <= '9'   ? (unsigned)(c - '0')
				     : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
				     : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10)
							    : 16;
			if (d == 16)
				return -1;
			v = v * 16 + d;
		}
		out[i] = (unsigned char)v;
	}
	return 0;
}

static bool valid_env_name(const char *s)
{
	if (!((s[0] >= 'A' && s[0] <= 'Z') || (s[0] >= 'a' && s[0] <= 'z') || s[0] == '_'))
		return false;
	size_t n = 1;
	for (; s[n]; n++)
		if (!((s[n] >= 'A' && s[n] <= 'Z') || (s[n] >= 'a' && s[n] <= 'z') ||
		      (s[n] >= '0' && s[n] <= '9') || s[n] == '_'))
			return false;
	return n <= 256;
}

static bool valid_sandbox_id(const char *s, size_t n)
{
	if (!n || n > 128 || strlen(s) != n)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9') || s[i] == '-' || s[i] == '_' || s[i] == '.' ||
		      s[i] == ':'))
			return false;
	return true;
}

static int string_map(json_t *o, const char *where, unsigned max, bool env_names, struct error *err)
{
	if (!json_is_object(o) || json_object_size(o) > max)
		return error_set(err, 0, BAD, "%s must be an object of at most %u strings", where,
				 max);
	size_t bytes = 0;
	const char *k;
	json_t *v;
	json_object_foreach(o, k, v) {
		if (env_names ? !valid_env_name(k) : (!*k || strlen(k) > 256))
			return error_set(err, 0, BAD, "%s: bad name '%.64s'%s", where, k,
					 env_names ? " (want [A-Za-z_][A-Za-z0-9_]*)" : "");
		if (!json_is_string(v) || has_nul(v))
			return error_set(err, 0, BAD, "%s.%.64s must be a string without NUL",
					 where, k);
		bytes += strlen(k) + json_string_length(v) + 2;
	}
	if (bytes > RT_MAX_ENV_BYTES)
		return error_set(err, 0, BAD, "%s is over %d bytes", where, RT_MAX_ENV_BYTES);
	return 0;
}

int rt_parse_init(json_t *body, struct rt_init_req *out, struct error *err)
{
	memset(out, 0, sizeof(*out));
	if (!json_is_object(body))
		return error_set(err, 0, BAD, "the body must be a JSON object");
	json_t *id = json_object_get(body, "sandboxId");
	if (!json_is_string(id) || !valid_sandbox_id(json_string_value(id), json_string_length(id)))
		return error_set(err, 0, BAD, "sandboxId is required: 1..128 of [A-Za-z0-9._:-]");
	out->sandbox_id = json_string_value(id);
	json_t *gen = json_object_get(body, "generation");
	if (!json_is_integer(gen) || json_integer_value(gen) < 0)
		return error_set(err, 0, BAD, "generation is required: an integer >= 0");
	out->generation = (uint64_t)json_integer_value(gen);
	json_t *ep = json_object_get(body, "entrypointPolicy");
	if (ep && !json_is_null(ep)) {
		const char *s = json_string_value(ep);
		if (s && !strcmp(s, "keep"))
			out->entrypoint_policy = RT_EP_KEEP;
		else if (s && !strcmp(s, "restart"))
			out->entrypoint_policy = RT_EP_RESTART;
		else
			return error_set(err, 0, BAD, "entrypointPolicy must be keep or restart");
	}
	json_t *th = json_object_get(body, "accessTokenHash");
	if (th && !json_is_null(th)) {
		if (rt_parse_token_hash(json_string_value(th), out->token_hash) < 0)
			return error_set(err, 0, BAD,
					 "accessTokenHash must be \"sha256:\" and 64 hex digits");
		out->has_token_hash = true;
	}
	json_t *envs = json_object_get(body, "envs");
	if (envs && !json_is_null(envs)) {
		if (string_map(envs, "envs", RT_MAX_ENVS, true, err) < 0)
			return -1;
		out->envs = envs;
	}
	json_t *lc = json_object_get(body, "lifecycle");
	if (lc && !json_is_null(lc)) {
		out->has_lifecycle = true;
		if (lc_parse_json(lc, &out->lifecycle, &out->warnings, err) < 0)
			return -1;
	}
	json_t *tel = json_object_get(body, "telemetry");
	if (tel && !json_is_null(tel)) {
		if (!json_is_object(tel))
			return error_set(err, 0, BAD, "telemetry must be an object");
		const char *k;
		json_t *v;
		json_object_foreach(tel, k, v) {
			if (!strcmp(k, "attributes")) {
				if (string_map(v, "telemetry.attributes", RT_MAX_ATTRS, false,
					       err) < 0)
					return -1;
				out->attributes = v;
			} else {
				lc_warn(&out->warnings, "telemetry.%.64s is ignored", k);
			}
		}
	}
	static const char *const known[] = {"sandboxId",       "generation", "entrypointPolicy",
					    "accessTokenHash", "envs",       "lifecycle",
					    "telemetry"};
	const char *k;
	json_t *v;
	json_object_foreach(body, k, v) {
		bool ok = false;
		for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
			ok |= !strcmp(k, known[i]);
		if (!ok)
			lc_warn(&out->warnings, "field %.64s is ignored", k);
	}
	return 0;
}

void rt_init_req_free(struct rt_init_req *req)
{
	if (req)
		lc_free(&req->lifecycle);
}
