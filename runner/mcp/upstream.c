/* Stdio MCP servers behind /mcp: see upstream.h. */
#include "mcp/upstream.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/cleanup.h"
#include "core/error.h"
#include "core/log.h"
#include "core/runner.h"
#include "core/buf.h"
#include "core/signame.h"
#include "core/fileio.h"
#include "core/list.h"
#include "mcp/trustedpath.h"
#include "task/env.h"
#include "task/pty.h"
#include "task/task.h"

#define MCP_SERVERS_MAX (1u << 20) /* bytes of --mcp-servers */

enum srv_state { SRV_IDLE, SRV_STARTING, SRV_READY, SRV_FAILED };
static const char *const STATE_NAME[] = {"idle", "starting", "ready", "failed"};

struct mcp_up_call {
	struct mcp_server *srv;
	uint64_t id;     /* the request id on the server's stdio (0: not sent yet) */
	json_t *request; /* the tools/call params to send once the server is ready */
	mcp_up_done_fn done;
	void *arg;
	struct mcp_up_call *next, *prev;
};

struct mcp_server {
	struct mcp_upstream *set;
	char name[33];
	char *command; /* argv quoted for bash -c, as configured (the report) */
	char *program; /* the configured command: resolved at each start */
	char *args;    /* the arguments, quoted for bash -c ("" without) */
	json_t *args_list;
	json_t *env;
	enum srv_state state;
	struct task *t;
	struct task_reader rd;
	bool rd_attached;
	struct buf line;
	uint64_t next_id, init_id, list_id;
	bool list_pending; /* a tools/list is out: a list_changed meanwhile asks again after it */
	bool list_again;
	json_t *tools;
	struct mcp_up_call *calls; /* waiting to be sent, or for their answer */
	unsigned starts, exits;
	char last_error[256];
	struct loop_timer timer; /* the handshake's deadline */
	bool timer_open;
};

struct mcp_upstream {
	struct runner *r;
	struct mcp_server *v;
	size_t n;
	struct mcp_up_waiter *waiters;
	void (*changed)(struct runner *r);
};

/* ---- configuration ---- */

/* One more word of a command line. */
static int quote_arg(struct buf *b, const char *s)
{
	if (b->len)
		buf_append_lit(b, " ");
	return buf_append_sh_quoted(b, s);
}

static bool valid_name(const char *n)
{
	size_t len = strlen(n);
	if (!len || len > 32 || strstr(n, "__"))
		return false;
	for (const char *p = n; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '_' || *p == '-'))
			return false;
	return true;
}

/* One server of the file: its command line checked and quoted, its env
 * checked. -1 with err set. */
static int server_load(struct mcp_server *s, const char *path, const char *name, json_t *def,
		       struct error *err)
{
	json_t *cmd = json_object_get(def, "command"), *args = json_object_get(def, "args");
	json_t *env = json_object_get(def, "env");
	if (!valid_name(name))
		return error_set(err, 0, "INVALID_CONFIG",
				 "--mcp-servers %s: server name '%.64s' must be 1-32 of "
				 "[A-Za-z0-9_-] without \"__\"",
				 path, name);
	if (!json_is_string(cmd) || !json_string_length(cmd) || (args && !json_is_array(args)) ||
	    (env && !json_is_object(env)))
		return error_set(err, 0, "INVALID_CONFIG",
				 "--mcp-servers %s: server '%s' needs a string \"command\", "
				 "an array \"args\" and an object \"env\"",
				 path, name);
	struct error e2;
	if (env && env_validate(env, &e2) < 0)
		return error_set(err, 0, "INVALID_CONFIG", "--mcp-servers %s: server '%s': %s",
				 path, name, e2.msg);
	struct buf b = {0};
	quote_arg(&b, json_string_value(cmd));
	size_t i;
	json_t *a;
	json_array_foreach(args, i, a) {
		if (!json_is_string(a)) {
			buf_free(&b);
			return error_set(err, 0, "INVALID_CONFIG",
					 "--mcp-servers %s: server '%s': args must be strings",
					 path, name);
		}
		quote_arg(&b, json_string_value(a));
	}
	/* exec: the server is the task's process itself, not a child of a shell. */
	struct buf c = {0}, q = {0};
	buf_append_str(&c, "exec ");
	buf_append(&c, b.data, b.len);
	buf_append(&c, "", 1);
	buf_free(&b);
	json_array_foreach(args, i, a)
		quote_arg(&q, json_string_value(a));
	buf_append(&q, "", 1);
	s->command = c.data;
	s->args = q.data;
	s->program = strdup(json_string_value(cmd));
	s->args_list = args ? json_incref(args) : json_array();
	if (!s->command || !s->args || !s->program || !s->args_list)
		return error_set(err, ENOMEM, NULL, "--mcp-servers");
	snprintf(s->name, sizeof(s->name), "%s", name);
	s->env = env ? json_deep_copy(env) : NULL;
	return 0;
}

int mcp_upstream_load(struct runner *r, const char *path, struct error *err)
{
	/* At start, before the loop and the signals: a FIFO or a device there
	 * (left by a task of an earlier boot, on a volume) must not hold PID 1
	 * in open() or read(). The operator's links are followed. */
	char *data;
	size_t len;
	struct stat st;
	int rd = read_regular(AT_FDCWD, path, 0, MCP_SERVERS_MAX, &data, &len, &st);
	if (rd < 0)
		return error_set(err, 0, "INVALID_CONFIG", "--mcp-servers %s: %s", path,
				 open_regular_strerror(rd, &st));
	json_error_t jerr;
	json_t *root = json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr);
	free(data);
	if (!root)
		return error_set(err, 0, "INVALID_CONFIG", "--mcp-servers %s: %s (line %d)", path,
				 jerr.text, jerr.line);
	json_t *servers = json_object_get(root, "mcpServers");
	int rc = 0;
	if (!json_is_object(servers)) {
		rc = error_set(err, 0, "INVALID_CONFIG",
			       "--mcp-servers %s: expected {\"mcpServers\": {name: {command, args, "
			       "env}}}",
			       path);
		goto out;
	}
	if (json_object_size(servers) > MCP_UPSTREAM_MAX) {
		rc = error_set(err, 0, "INVALID_CONFIG", "--mcp-servers %s: more than %d servers",
			       path, MCP_UPSTREAM_MAX);
		goto out;
	}
	struct mcp_upstream *u = calloc(1, sizeof(*u));
	if (!u || !(u->v = calloc(json_object_size(servers) + 1, sizeof(*u->v)))) {
		free(u);
		rc = error_set(err, ENOMEM, NULL, "--mcp-servers");
		goto out;
	}
	u->r = r;
	r->mcp_upstream = u;
	const char *name;
	json_t *def;
	json_object_foreach(servers, name, def) {
		struct mcp_server *s = &u->v[u->n];
		s->set = u;
		s->timer.w.fd = -1;
		if ((rc = server_load(s, path, name, def, err)) < 0)
			goto out;
		u->n++;
	}
out:
	json_decref(root);
	return rc;
}

void mcp_upstream_on_change(struct runner *r, void (*fn)(struct runner *r))
{
	if (r->mcp_upstream)
		r->mcp_upstream->changed = fn;
}

/* ---- the server's life ---- */

static void settle(struct mcp_upstream *u)
{
	for (size_t i = 0; i < u->n; i++)
		if (u->v[i].state == SRV_STARTING)
			return;
	while (u->waiters) {
		struct mcp_up_waiter *w = u->waiters;
		LIST_UNLINK(u->waiters, w);
		w->linked = false;
		w->ready(w);
	}
}

static void call_unlink(struct mcp_up_call *c)
{
	struct mcp_server *s = c->srv;
	LIST_UNLINK(s->calls, c);
}

static void call_end(struct mcp_up_call *c, json_t *result, const char *error)
{
	call_unlink(c);
	mcp_up_done_fn done = c->done;
	void *arg = c->arg;
	json_decref(c->request);
	free(c);
	done(arg, result, error);
}

static void stop(struct mcp_server *s, const char *why, bool kill);

/* Every write to the server's stdin, the runner's own (answers to its requests, tools/list,
 * cancels) as much as the client's calls, obeys one high mark: a server that has not taken
 * what was queued before (over the input's own mark plus one message of the largest size a
 * client may send, so that calls in parallel are not taken for a stall) by the time the next
 * message is due does not read its stdin, and is stopped as stalled
 * (design/mcp-tools.md#the-images-own-mcp-servers). The queue so holds at most the mark plus one
 * message. */
static bool stalled(struct mcp_server *s)
{
	uint64_t mark = TASK_INPUT_HIGH + s->set->r->cfg.mcp_max_body;
	if (!s->t || task_input_queued(s->t) <= mark)
		return false;
	char why[160];
	snprintf(why, sizeof(why),
		 "stalled: it does not read its stdin (over %llu KiB of messages waiting); "
		 "killed, it starts again on next use",
		 (unsigned long long)(mark / 1024));
	stop(s, why, true);
	return true;
}

/* 0, or -1 when the message could not be queued (the server may have been stopped: s->t is
 * then NULL and the caller returns). */
static int write_msg(struct mcp_server *s, json_t *msg)
{
	if (!s->t || stalled(s))
		return -1;
	char *text = json_dumps(msg, JSON_COMPACT);
	struct error err;
	int rc = 0;
	if (!text || task_input_write(s->t, text, strlen(text), &err) < 0 ||
	    task_input_write(s->t, "\n", 1, &err) < 0) {
		log_warn("cannot write to an MCP server", "{s:s}", "server", s->name);
		rc = -1;
	}
	free(text);
	return rc;
}

/* The request's id, or 0 when it was not sent. */
static uint64_t send_request(struct mcp_server *s, const char *method, json_t *params)
{
	uint64_t id = ++s->next_id;
	json_t *m = json_pack("{s:s,s:I,s:s,s:o}", "jsonrpc", "2.0", "id", (json_int_t)id, "method",
			      method, "params", params ? json_incref(params) : json_object());
	int rc = write_msg(s, m);
	json_decref(m);
	return rc < 0 ? 0 : id;
}

/* One tools/list out at a time: a server that says list_changed in a loop gets one request,
 * and one more after its answer, not one each. */
static void send_list(struct mcp_server *s)
{
	if (s->list_pending) {
		s->list_again = true;
		return;
	}
	s->list_again = false;
	s->list_id = send_request(s, "tools/list", NULL);
	s->list_pending = s->list_id != 0;
}

static void stop(struct mcp_server *s, const char *why, bool kill)
{
	bool was_ready = s->state == SRV_READY;
	if (s->timer_open) {
		loop_timer_close(&s->set->r->loop, &s->timer);
		s->timer_open = false;
	}
	if (s->rd_attached) {
		task_reader_detach(&s->rd);
		s->rd_attached = false;
	}
	if (s->t && kill && !s->t->finished)
		task_kill(s->t, TS_CANCELLED);
	s->t = NULL;
	s->list_pending = s->list_again = false;
	buf_free(&s->line);
	json_decref(s->tools);
	s->tools = NULL;
	s->state = SRV_FAILED;
	snprintf(s->last_error, sizeof(s->last_error), "%s", why);
	log_warn("mcp server stopped", "{s:s,s:s}", "server", s->name, "reason", why);
	while (s->calls)
		call_end(s->calls, NULL, why);
	if (was_ready && s->set->changed)
		s->set->changed(s->set->r);
	settle(s->set);
}

/* The call is sent, or the server was found stalled: then c ended (and is freed) with it. */
static void send_call(struct mcp_server *s, struct mcp_up_call *c)
{
	json_t *req = c->request;
	c->request = NULL;
	uint64_t id = send_request(s, "tools/call", req);
	json_decref(req);
	if (s->t)
		c->id = id;
}

/* The answer to tools/list: the server is ready; its first time, the calls
 * that waited for it are sent. */
static void on_tools_list(struct mcp_server *s, json_t *result)
{
	json_t *tools = json_object_get(result, "tools");
	if (!json_is_array(tools)) {
		stop(s, "tools/list failed", true);
		return;
	}
	json_decref(s->tools);
	s->tools = json_incref(tools);
	bool first = s->state == SRV_STARTING;
	s->state = SRV_READY;
	s->last_error[0] = 0;
	if (s->timer_open) {
		loop_timer_close(&s->set->r->loop, &s->timer);
		s->timer_open = false;
	}
	log_info("mcp server ready", "{s:s,s:i}", "server", s->name, "tools",
		 (int)json_array_size(tools));
	if (first)
		for (struct mcp_up_call *c = s->calls, *next; c; c = next) {
			next = c->next;
			if (c->request)
				send_call(s, c);
			if (!s->t)
				return; /* stalled: stopped, its calls ended */
		}
	if (s->list_again)
		send_list(s);
	if (!s->t)
		return;
	if (s->set->changed)
		s->set->changed(s->set->r);
	settle(s->set);
}

static void on_message(struct mcp_server *s, json_t *m)
{
	json_t *id = json_object_get(m, "id");
	const char *method = json_string_value(json_object_get(m, "method"));
	if (method) {
		if (!strcmp(method, "notifications/tools/list_changed") && s->state == SRV_READY)
			send_list(s);
		else if (id) {
			/* A request of the server's (sampling, roots...): not offered here. */
			json_t *e = json_pack("{s:s,s:O,s:{s:i,s:s}}", "jsonrpc", "2.0", "id", id,
					      "error", "code", -32601, "message",
					      "not supported by this client");
			write_msg(s, e);
			json_decref(e);
		}
		return;
	}
	if (!json_is_integer(id))
		return;
	uint64_t n = (uint64_t)json_integer_value(id);
	json_t *result = json_object_get(m, "result");
	json_t *error = json_object_get(m, "error");
	if (n == s->init_id && s->state == SRV_STARTING) {
		if (!json_is_object(result)) {
			stop(s, "initialize failed", true);
			return;
		}
		json_t *note = json_pack("{s:s,s:s}", "jsonrpc", "2.0", "method",
					 "notifications/initialized");
		int rc = write_msg(s, note);
		json_decref(note);
		if (rc == 0)
			send_list(s);
		return;
	}
	if (n == s->list_id && s->list_pending) {
		s->list_pending = false;
		on_tools_list(s, result);
		return;
	}
	for (struct mcp_up_call *c = s->calls; c; c = c->next) {
		if (c->id != n)
			continue;
		if (json_is_object(result)) {
			call_end(c, result, NULL);
		} else {
			const char *msg = json_string_value(json_object_get(error, "message"));
			char m2[300];
			snprintf(m2, sizeof(m2), "server %s: %s", s->name,
				 msg ? msg : "error without a message");
			call_end(c, NULL, m2);
		}
		return;
	}
}

static void on_wake(struct task_reader *rd)
{
	struct mcp_server *s = (struct mcp_server *)((char *)rd - offsetof(struct mcp_server, rd));
	static char rbuf[SPOOL_MAX_REC];
	struct spool_rec rec;
	int rc;
	while ((rc = task_reader_next(rd, &rec, rbuf)) == 1) {
		if (rec.type != SPOOL_STDOUT)
			continue; /* stderr is the server's log */
		const char *p = rbuf, *end = rbuf + rec.len;
		while (p < end) {
			const char *nl = memchr(p, '\n', (size_t)(end - p));
			size_t k = nl ? (size_t)(nl - p) : (size_t)(end - p);
			if (s->line.len + k > MCP_UPSTREAM_LINE_MAX) {
				stop(s, "flooded its stdout (a line over 4 MiB)", true);
				return;
			}
			buf_append(&s->line, p, k);
			p += k + (nl ? 1 : 0);
			if (!nl)
				break;
			json_t *m = s->line.len ? json_loadb(s->line.data, s->line.len, 0, NULL)
						: NULL;
			buf_reset(&s->line);
			if (m) {
				on_message(s, m);
				json_decref(m);
			}
			if (!s->rd_attached)
				return; /* stopped meanwhile */
		}
	}
	if (rc < 0)
		log_errno("reading an MCP server's output failed", -rc, s->name);
	if (task_reader_at_end(rd)) {
		char why[200];
		s->exits++;
		enum task_status st = s->t->status;
		if (s->t->term_signal && st != TS_CANCELLED && st != TS_KILLED && st != TS_TIMEOUT)
			/* Not the runner's doing: a task of the server's uid can
			 * signal it. The next start is in the same fixed world
			 * (start), so this costs the calls in flight, nothing more. */
			snprintf(why, sizeof(why),
				 "killed by %s, not by the runner (a task of its uid can); started "
				 "again on next use",
				 signal_name(s->t->term_signal));
		else
			snprintf(why, sizeof(why), "exited (status %s, exit code %d)",
				 task_status_name(st), s->t->exit_code);
		stop(s, why, false);
	}
}

static void on_timer(struct loop *loop, struct loop_timer *t)
{
	(void)loop;
	struct mcp_server *s = t->arg;
	if (s->state == SRV_STARTING)
		stop(s, "did not answer initialize and tools/list within 30 s", true);
}

/* ---- a world no task can change (mcp/trustedpath.h) ---- */

/* The server's HOME: nothing there, and no task can make it (only root
 * can create in "/"): no ~/.bashrc, ~/.npmrc, ~/.local site-packages,
 * ~/.node_modules, ~/.gitconfig of a task's making is read. A server
 * that needs a home of its own gets one from its "env" in the file. */
#define SERVER_HOME "/nonexistent"

/* A file the server is given that a task can change (its script, a
 * config) is the operator's choice and not refused (a database a server
 * serves is written by tasks by design); said in the log. */
static void warn_writable_args(struct mcp_server *s, const struct pcheck *tmpl)
{
	size_t i;
	json_t *a;
	json_array_foreach(s->args_list, i, a) {
		const char *p = json_string_value(a);
		struct stat st;
		struct pcheck c = *tmpl;
		if (p && p[0] == '/' && stat(p, &st) == 0 && S_ISREG(st.st_mode) &&
		    !path_trusted(p, &c) && !c.unreachable)
			log_warn("mcp server: an argument names a file tasks can change",
				 "{s:s,s:s}", "server", s->name, "reason", c.why);
	}
}

static int start(struct mcp_server *s)
{
	struct runner *r = s->set->r;
	if (s->state == SRV_STARTING || s->state == SRV_READY)
		return 0;
	struct error err;
	s->starts++;
	/* A world no task can change: the program and the directories of
	 * its PATH root's and out of the tasks' reach, a HOME and cwd no
	 * task can write, no user site-packages. A task that kills the server
	 * (it can: same uid) gets it back exactly as it was. */
	const struct pcheck tmpl = {
		.task_gid = r->cfg.task_gid,
		.roots = !r->cfg.allow_root_tasks ? NULL
			 : r->cfg.landlock_roots  ? r->cfg.landlock_roots
						  : "/workspace:/tmp:/var/tmp:/home",
	};
	cleanup_free char *path = trusted_path(s->name, &tmpl);
	cleanup_free char *exe = path ? resolve_program(s->program, path, &tmpl, &err) : NULL;
	if (!path || !exe) {
		s->state = SRV_FAILED;
		snprintf(s->last_error, sizeof(s->last_error), "cannot start: %.200s",
			 path ? err.msg : "out of memory");
		log_warn("mcp server not started", "{s:s,s:s}", "server", s->name, "reason",
			 s->last_error);
		return -1;
	}
	warn_writable_args(s, &tmpl);
	cleanup_free char *command = NULL;
	cleanup_json json_t *env = json_pack("{s:s,s:s,s:s}", "PATH", path, "HOME", SERVER_HOME,
					     "PYTHONNOUSERSITE", "1");
	struct buf c = {0};
	buf_append_str(&c, "exec ");
	quote_arg(&c, exe);
	if (*s->args) {
		buf_append_lit(&c, " ");
		buf_append_str(&c, s->args);
	}
	if (buf_append(&c, "", 1) < 0 || !env || (s->env && json_object_update(env, s->env) < 0)) {
		buf_free(&c);
		s->state = SRV_FAILED;
		snprintf(s->last_error, sizeof(s->last_error), "cannot start: out of memory");
		return -1;
	}
	command = c.data;
	struct task_spec spec = {.api = TASK_API_TOOL,
				 .command = command,
				 .cwd = "/",
				 .env = env,
				 .cap = &task_cap_exec,
				 .keep_stdin = true,
				 .state_in_fd = -1,
				 .state_out_fd = -1};
	s->t = task_start(r, &spec, &err);
	if (!s->t) {
		s->state = SRV_FAILED;
		snprintf(s->last_error, sizeof(s->last_error), "cannot start: %.200s", err.msg);
		return -1;
	}
	s->state = SRV_STARTING;
	memset(&s->rd, 0, sizeof(s->rd));
	s->rd.wake = on_wake;
	task_reader_attach(s->t, &s->rd, true);
	s->rd_attached = true;
	if (loop_timer_init(&r->loop, &s->timer, on_timer, s) == 0) {
		s->timer_open = true;
		loop_timer_start(&r->loop, &s->timer, MCP_UPSTREAM_START_MS, 0);
	}
	json_t *params =
		json_pack("{s:s,s:{},s:{s:s,s:s}}", "protocolVersion", "2025-06-18", "capabilities",
			  "clientInfo", "name", "forceai-runner", "version", "1");
	s->init_id = send_request(s, "initialize", params);
	json_decref(params);
	log_info("mcp server starting", "{s:s,s:s,s:s}", "server", s->name, "task", s->t->id,
		 "program", exe);
	return 0;
}

/* ---- the API ---- */

static struct mcp_server *find(struct runner *r, const char *name, size_t len)
{
	struct mcp_upstream *u = r->mcp_upstream;
	for (size_t i = 0; u && i < u->n; i++)
		if (strlen(u->v[i].name) == len && !memcmp(u->v[i].name, name, len))
			return &u->v[i];
	return NULL;
}

bool mcp_upstream_has(struct runner *r, const char *name)
{
	const char *sep = strstr(name, "__");
	return sep && sep[2] && find(r, name, (size_t)(sep - name));
}

struct mcp_up_call *mcp_upstream_call(struct runner *r, const char *name, json_t *arguments,
				      mcp_up_done_fn done, void *arg, char *msg, size_t msglen)
{
	const char *sep = strstr(name, "__");
	struct mcp_server *s = sep ? find(r, name, (size_t)(sep - name)) : NULL;
	if (!s || !sep[2]) {
		snprintf(msg, msglen, "Unknown tool");
		return NULL;
	}
	if (stalled(s)) {
		snprintf(msg, msglen, "server %s: %s", s->name, s->last_error);
		return NULL;
	}
	struct mcp_up_call *c = calloc(1, sizeof(*c));
	if (!c) {
		snprintf(msg, msglen, "out of memory");
		return NULL;
	}
	c->srv = s;
	c->done = done;
	c->arg = arg;
	c->request = json_pack("{s:s,s:o}", "name", sep + 2, "arguments",
			       arguments ? json_incref(arguments) : json_object());
	if (s->state != SRV_READY && start(s) < 0) {
		snprintf(msg, msglen, "server %s: %s", s->name, s->last_error);
		json_decref(c->request);
		free(c);
		return NULL;
	}
	LIST_PUSH(s->calls, c);
	if (s->state == SRV_READY)
		send_call(s, c);
	return c;
}

void mcp_upstream_cancel(struct mcp_up_call *c)
{
	struct mcp_server *s = c->srv;
	uint64_t id = c->id;
	/* Gone before the write: a server found stalled by it ends its other calls, not this. */
	call_unlink(c);
	json_decref(c->request);
	free(c);
	if (id && s->t) {
		json_t *note = json_pack("{s:s,s:s,s:{s:I,s:s}}", "jsonrpc", "2.0", "method",
					 "notifications/cancelled", "params", "requestId",
					 (json_int_t)id, "reason", "the client cancelled");
		write_msg(s, note);
		json_decref(note);
	}
}

bool mcp_upstream_start_all(struct runner *r)
{
	struct mcp_upstream *u = r->mcp_upstream;
	bool starting = false;
	for (size_t i = 0; u && i < u->n; i++) {
		if (u->v[i].state == SRV_IDLE)
			(void)start(&u->v[i]); /* a failure shows in the report */
		starting |= u->v[i].state == SRV_STARTING;
	}
	return starting;
}

void mcp_upstream_wait(struct runner *r, struct mcp_up_waiter *w)
{
	struct mcp_upstream *u = r->mcp_upstream;
	if (!u || w->linked)
		return;
	LIST_PUSH(u->waiters, w);
	w->linked = true;
}

void mcp_upstream_unwait(struct runner *r, struct mcp_up_waiter *w)
{
	struct mcp_upstream *u = r->mcp_upstream;
	if (!u || !w->linked)
		return;
	LIST_UNLINK(u->waiters, w);
	w->linked = false;
}

json_t *mcp_upstream_tools(struct runner *r)
{
	struct mcp_upstream *u = r->mcp_upstream;
	json_t *out = json_array();
	for (size_t i = 0; u && i < u->n; i++) {
		struct mcp_server *s = &u->v[i];
		if (s->state != SRV_READY)
			continue;
		size_t k;
		json_t *t;
		json_array_foreach(s->tools, k, t) {
			const char *name = json_string_value(json_object_get(t, "name"));
			if (!name || !json_is_object(t))
				continue;
			json_t *c = json_deep_copy(t);
			json_object_set_new(c, "name", json_sprintf("%s__%s", s->name, name));
			json_array_append_new(out, c);
		}
	}
	return out;
}

json_t *mcp_upstream_report(struct runner *r)
{
	struct mcp_upstream *u = r->mcp_upstream;
	json_t *out = json_array();
	for (size_t i = 0; u && i < u->n; i++) {
		struct mcp_server *s = &u->v[i];
		json_t *names = json_array();
		size_t k;
		json_t *t;
		json_array_foreach(s->tools, k, t) {
			json_t *n = json_object_get(t, "name");
			if (json_is_string(n))
				json_array_append_new(names, json_sprintf("%s__%s", s->name,
									  json_string_value(n)));
		}
		json_t *o = json_pack("{s:s,s:s,s:s,s:o,s:i,s:i}", "name", s->name, "command",
				      s->command + 5, "state", STATE_NAME[s->state], "tools", names,
				      "starts", (int)s->starts, "exits", (int)s->exits);
		if (s->last_error[0])
			json_object_set_new(o, "last_error", json_string(s->last_error));
		if (s->t)
			json_object_set_new(o, "task", json_string(s->t->id));
		json_array_append_new(out, o);
	}
	return out;
}

void mcp_upstream_free(struct runner *r)
{
	struct mcp_upstream *u = r->mcp_upstream;
	if (!u)
		return;
	u->changed = NULL;
	for (size_t i = 0; i < u->n; i++) {
		struct mcp_server *s = &u->v[i];
		if (s->state == SRV_STARTING || s->state == SRV_READY)
			stop(s, "the runner is stopping", true);
		free(s->command);
		free(s->program);
		free(s->args);
		json_decref(s->args_list);
		json_decref(s->env);
	}
	free(u->v);
	free(u);
	r->mcp_upstream = NULL;
}
