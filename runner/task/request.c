/* A task request: the body schemas, one table per route, one line per field
 * (see request.h), and the parsers that turn a checked body into a task_spec.
 * A field a route's parser reads is added here in the same change, or its
 * requests are refused as UNKNOWN_FIELD (native API). */
#include "task/request.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/cleanup.h"
#include "core/error.h"
#include "core/sha256.h"
#include "http/body.h"
#include "task/task.h"

/* ---- native API (strict) ---- */

static const struct body_field task_create_fields[] = {
	{"task", FIELD_STRING},
	{"capability", FIELD_STRING},
	{"timeout_ms", FIELD_INTEGER},
	{"cwd", FIELD_STRING},
	{"env", FIELD_OBJECT},
	{"network", FIELD_STRING},
	{"stdin", FIELD_BOOLEAN},
	{"tty", FIELD_ANY}, /* {"cols", "rows"} or true */
	{"model", FIELD_STRING},
	{"max_steps", FIELD_INTEGER},
	{"max_tokens", FIELD_INTEGER},
	{"max_model_requests", FIELD_INTEGER},
	{"engine", FIELD_STRING},
	{"conversation", FIELD_STRING},
	{"changes", FIELD_BOOLEAN},
	{"kill_tree_on_exit", FIELD_BOOLEAN},
	{NULL, 0},
};
const struct body_schema schema_task_create = {"POST /v1/tasks", true, task_create_fields};

static const struct body_field task_resize_fields[] = {
	{"cols", FIELD_INTEGER},
	{"rows", FIELD_INTEGER},
	{NULL, 0},
};
const struct body_schema schema_task_resize = {"POST /v1/tasks/{id}/resize", true,
					       task_resize_fields};

static const struct body_field task_signal_fields[] = {
	{"signal", FIELD_ANY}, /* the parser names the signals it takes */
	{NULL, 0},
};
const struct body_schema schema_task_signal = {"POST /v1/tasks/{id}/signal", true,
					       task_signal_fields};

/* ---- execd-compatible API (unknown fields accepted) ---- */

static const struct body_field command_fields[] = {
	{"command", FIELD_STRING},
	{"cwd", FIELD_STRING},
	{"background", FIELD_BOOLEAN},
	{"timeout", FIELD_INTEGER},
	{"uid", FIELD_INTEGER},
	{"gid", FIELD_INTEGER},
	{"envs", FIELD_OBJECT},
	{"network", FIELD_STRING},
	{"argv", FIELD_ANY},
	{"kill_tree_on_exit", FIELD_BOOLEAN},
	{NULL, 0},
};
static const struct body_schema schema_command = {"POST /command", false, command_fields};

/* execd's caller-bound creation (PR #1771) checks its body strictly: a field it does not know
 * would be a semantic the retry cannot vouch for. */
static const struct body_field command_operation_fields[] = {
	{"operation_id", FIELD_STRING},
	{"command", FIELD_STRING},
	{"cwd", FIELD_STRING},
	{"background", FIELD_BOOLEAN},
	{"timeout", FIELD_INTEGER},
	{"uid", FIELD_INTEGER},
	{"gid", FIELD_INTEGER},
	{"envs", FIELD_OBJECT},
	{"argv", FIELD_ANY},
	{"kill_tree_on_exit", FIELD_BOOLEAN},
	{NULL, 0},
};
const struct body_schema schema_command_operation = {"POST /command/operations", true,
						     command_operation_fields};

static const struct body_field session_fields[] = {
	{"cwd", FIELD_STRING},
	{NULL, 0},
};
static const struct body_schema schema_session = {"POST /session", false, session_fields};

static const struct body_field session_run_fields[] = {
	{"command", FIELD_STRING},
	{"cwd", FIELD_STRING},
	{"timeout", FIELD_INTEGER},
	{"network", FIELD_STRING},
	{"kill_tree_on_exit", FIELD_BOOLEAN},
	{NULL, 0},
};
static const struct body_schema schema_session_run = {"POST /session/{id}/run", false,
						      session_run_fields};

static const struct body_field pty_create_fields[] = {
	{"cwd", FIELD_STRING},
	{"command", FIELD_STRING},
	{NULL, 0},
};
const struct body_schema schema_pty_create = {"POST /pty", false, pty_create_fields};

/* The same things under the two APIs' names: {native, execd}. */
static const char *const vocabulary[][2] = {
	{"task", "command"},
	{"timeout_ms", "timeout"},
	{"env", "envs"},
};

static const struct body_field *find_field(const struct body_schema *s, const char *name)
{
	for (const struct body_field *f = s->fields; f->name; f++)
		if (!strcmp(f->name, name))
			return f;
	return NULL;
}

/* The route's fields, for messages: "task, capability, ...". */
static void field_list(const struct body_schema *s, char *out, size_t size)
{
	size_t n = 0;
	out[0] = 0;
	for (const struct body_field *f = s->fields; f->name && n < size; f++)
		n += (size_t)snprintf(out + n, size - n, "%s%s", n ? ", " : "", f->name);
}

/* A field this route does not have: 0 when it is accepted anyway. */
static int unknown_field(const struct body_schema *s, const char *key, struct error *err)
{
	char list[512];
	field_list(s, list, sizeof(list));
	for (size_t i = 0; i < sizeof(vocabulary) / sizeof(vocabulary[0]); i++) {
		/* The other API's name: strict routes use [0], execd's use [1]. */
		const char *theirs = vocabulary[i][s->strict ? 1 : 0];
		const char *ours = vocabulary[i][s->strict ? 0 : 1];
		if (strcmp(key, theirs))
			continue;
		if (find_field(s, ours))
			return error_set(err, 0, "UNKNOWN_FIELD",
					 "unknown field '%s': %s calls it '%s' ('%s' is the %s "
					 "API's name)",
					 key, s->route, ours, key, s->strict ? "execd" : "native");
		return error_set(err, 0, "UNKNOWN_FIELD",
				 "unknown field '%s' ('%s' is the %s API's name); %s takes: %s",
				 key, key, s->strict ? "execd" : "native", s->route, list);
	}
	if (!s->strict)
		return 0; /* forward compatibility with execd's clients */
	return error_set(err, 0, "UNKNOWN_FIELD", "unknown field '%.64s'; %s takes: %s", key,
			 s->route, list);
}

static bool type_ok(enum field_type t, json_t *v)
{
	switch (t) {
	case FIELD_STRING:
		return json_is_string(v);
	case FIELD_INTEGER:
		return json_is_integer(v);
	case FIELD_BOOLEAN:
		return json_is_boolean(v);
	case FIELD_OBJECT:
		return json_is_object(v);
	case FIELD_ANY:
		return true;
	}
	return false;
}

static const char *const type_names[] = {
	[FIELD_STRING] = "a string",  [FIELD_INTEGER] = "an integer", [FIELD_BOOLEAN] = "a boolean",
	[FIELD_OBJECT] = "an object", [FIELD_ANY] = "any value",
};

int schema_check(const struct body_schema *s, json_t *body, struct error *err)
{
	const char *key;
	json_t *v;
	json_object_foreach(body, key, v) {
		const struct body_field *f = find_field(s, key);
		if (!f) {
			if (unknown_field(s, key, err) < 0)
				return -1;
			continue;
		}
		if (!json_is_null(v) && !type_ok(f->type, v))
			return error_set(err, 0, "INVALID_REQUEST_BODY", "field '%s' must be %s",
					 key, type_names[f->type]);
	}
	return 0;
}

/* ---- client-chosen request ids (Idempotency-Key, operation_id) ---- */

int request_check_key(const char *key, const char *what, struct error *err)
{
	size_t n = strlen(key);
	bool ok = n >= 1 && n <= REQUEST_KEY_MAX;
	for (size_t i = 0; ok && i < n; i++)
		ok = key[i] > 0x20 && key[i] < 0x7f;
	if (!ok)
		return error_set(err, 0, "INVALID_REQUEST_BODY",
				 "%s must be 1 to %d visible ASCII characters", what,
				 REQUEST_KEY_MAX);
	return 0;
}

int request_hash(json_t *body, const char *skip, unsigned char out[32])
{
	cleanup_json json_t *copy = json_copy(body); /* shallow: the skipped key only */
	if (!copy)
		return -ENOMEM;
	if (skip)
		json_object_del(copy, skip);
	/* Sorted keys: the same request sent with its fields in another order is the same. */
	cleanup_free char *canon = json_dumps(copy, JSON_COMPACT | JSON_SORT_KEYS);
	if (!canon)
		return -ENOMEM;
	struct sha256 c;
	sha256_init(&c);
	sha256_update(&c, canon, strlen(canon));
	sha256_final(&c, out);
	return 0;
}

/* ---- task_spec from a body: execd's command and session, the native task's io ---- */

/* cmd_key NULL: the command comes another way (argv). */
int request_read_spec(json_t *body, const char *cmd_key, struct task_spec *spec, struct error *err)
{
	memset(spec, 0, sizeof(*spec));
	spec->state_in_fd = spec->state_out_fd = -1;
	spec->command = "";
	if (cmd_key && body_str(body, cmd_key, true, &spec->command, err) < 0)
		return -1;
	if (cmd_key && !*spec->command)
		return error_set(err, 0, "INVALID_REQUEST_BODY", "field '%s' must not be empty",
				 cmd_key);
	if (body_str(body, "cwd", false, &spec->cwd, err) < 0)
		return -1;
	if (spec->cwd && !*spec->cwd)
		spec->cwd = NULL;
	const char *net;
	if (body_str(body, "network", false, &net, err) < 0)
		return -1;
	if (net && !strcmp(net, "none"))
		spec->network = TASK_NET_NONE;
	else if (net && !strcmp(net, "full"))
		spec->network = TASK_NET_FULL;
	else if (net)
		return error_set(err, 0, "INVALID_REQUEST_BODY",
				 "field 'network' must be \"none\" or \"full\"");
	/* The same field on every route that starts a command
	 * (docs/design/tasks.md#left-behind-processes-kept-supervised). */
	bool has_kill;
	if (body_bool(body, "kill_tree_on_exit", &has_kill, &spec->kill_tree_on_exit, err) < 0)
		return -1;
	return 0;
}

/* execd 1.2: argv, an array of literal arguments run with no shell. */
static int get_argv(json_t *body, json_t **out, struct error *err)
{
	json_t *a = json_object_get(body, "argv");
	*out = NULL;
	if (!a || json_is_null(a))
		return 0;
	if (!json_is_array(a) || !json_array_size(a))
		return error_set(err, 0, "INVALID_REQUEST_BODY",
				 "field 'argv' must be a non-empty array of strings");
	if (json_array_size(a) > 65536)
		return error_set(err, 0, "INVALID_REQUEST_BODY",
				 "field 'argv' has more than 65536 arguments");
	size_t i;
	json_t *v;
	json_array_foreach(a, i, v) {
		if (!json_is_string(v))
			return error_set(err, 0, "INVALID_REQUEST_BODY",
					 "argv[%zu] must be a string", i);
		if (strlen(json_string_value(v)) != json_string_length(v))
			return error_set(err, 0, "INVALID_REQUEST_BODY",
					 "argv[%zu] contains a NUL byte", i);
	}
	if (!json_string_length(json_array_get(a, 0)))
		return error_set(err, 0, "INVALID_REQUEST_BODY", "argv[0] must not be empty");
	*out = a;
	return 0;
}

int request_parse_command(json_t *body, struct task_spec *spec, struct error *err)
{
	bool has;
	uint64_t v;
	if (schema_check(&schema_command, body, err) < 0)
		return -1;
	json_t *argv;
	if (get_argv(body, &argv, err) < 0)
		return -1;
	json_t *cmd = json_object_get(body, "command");
	bool has_cmd = cmd && !json_is_null(cmd);
	if (argv && has_cmd)
		return error_set(err, 0, "INVALID_REQUEST_BODY",
				 "give exactly one of 'command' and 'argv', not both");
	if (!argv && !has_cmd)
		return error_set(err, 0, "INVALID_REQUEST_BODY",
				 "one of 'command' (a shell command line) and 'argv' (an array) is "
				 "required");
	if (request_read_spec(body, argv ? NULL : "command", spec, err) < 0)
		return -1;
	spec->argv = argv;
	spec->api = TASK_API_EXECD;
	bool bg = false;
	if (body_bool(body, "background", &has, &bg, err) < 0)
		return -1;
	spec->background = bg;
	if (body_uint(body, "timeout", 7ULL * 24 * 3600 * 1000, &has, &v, err) < 0)
		return -1;
	spec->timeout_ms = has ? v : 0;
	if (body_uint(body, "uid", 0xfffffffe, &has, &v, err) < 0)
		return -1;
	spec->has_uid = has;
	spec->uid = (uid_t)v;
	if (body_uint(body, "gid", 0xfffffffe, &has, &v, err) < 0)
		return -1;
	spec->has_gid = has;
	spec->gid = (gid_t)v;
	spec->env = json_object_get(body, "envs");
	return 0;
}

int request_parse_session_create(json_t *body, const char **cwd, struct error *err)
{
	*cwd = NULL;
	if (schema_check(&schema_session, body, err) < 0)
		return -1;
	if (body_str(body, "cwd", false, cwd, err) < 0)
		return -1;
	if (*cwd && **cwd && (*cwd)[0] != '/')
		return error_set(err, 0, "INVALID_REQUEST_BODY", "cwd must be an absolute path");
	if (*cwd && !**cwd)
		*cwd = NULL;
	return 0;
}

int request_parse_session_run(json_t *body, struct task_spec *spec, struct error *err)
{
	bool has;
	uint64_t v;
	if (schema_check(&schema_session_run, body, err) < 0)
		return -1;
	if (request_read_spec(body, "command", spec, err) < 0)
		return -1;
	if (body_uint(body, "timeout", 7ULL * 24 * 3600 * 1000, &has, &v, err) < 0)
		return -1;
	spec->timeout_ms = has ? v : 0;
	return 0;
}

/* ---- POST /v1/tasks: "stdin" and "tty" ---- */

int request_parse_task_io(json_t *body, struct task_spec *spec, struct error *err)
{
	bool has, in;
	if (body_bool(body, "stdin", &has, &in, err) < 0)
		return -1;
	if (has)
		spec->keep_stdin = in;
	json_t *tty = json_object_get(body, "tty");
	if (tty && !json_is_null(tty) && !json_is_false(tty)) {
		if (!json_is_object(tty) && !json_is_true(tty))
			return error_set(err, 0, "INVALID_REQUEST_BODY",
					 "field 'tty' must be an object {\"cols\", \"rows\"}");
		spec->tty = true;
		static const char *const keys[] = {"cols", "rows"};
		for (int i = 0; i < 2 && json_is_object(tty); i++) {
			json_t *v = json_object_get(tty, keys[i]);
			if (!v || json_is_null(v))
				continue;
			if (!json_is_integer(v) || json_integer_value(v) < 1 ||
			    json_integer_value(v) > 65535)
				return error_set(err, 0, "INVALID_REQUEST_BODY",
						 "tty.%s must be an integer from 1 to 65535",
						 keys[i]);
			unsigned short n = (unsigned short)json_integer_value(v);
			*(i == 0 ? &spec->cols : &spec->rows) = n;
		}
		spec->keep_stdin = true; /* the terminal is the input */
	}
	if ((spec->keep_stdin || spec->tty) && spec->cap && spec->cap->no_input)
		return error_set(err, 0, "INVALID_REQUEST_BODY",
				 "an agent task takes no stdin and no terminal");
	return 0;
}
