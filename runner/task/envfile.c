#include "task/envfile.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"

static bool name_start(char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}

static bool name_char(char c)
{
	return name_start(c) || (c >= '0' && c <= '9');
}

static bool blank(char c)
{
	return c == ' ' || c == '\t' || c == '\r';
}

/* Skip to the start of the next line (past a line the parser gave up on). */
static size_t next_line(const char *s, size_t len, size_t i)
{
	while (i < len && s[i] != '\n')
		i++;
	return i < len ? i + 1 : i;
}

/* Names a program acts on when it merely starts, by loading or running
 * code the variable names: the dynamic loader and libc, shells' startup
 * files and options, interpreters' module paths and options, and tools
 * that load plugins or run commands from their configuration. PATH and
 * HOME stay: execd's own images set PATH through this file, and a task
 * can write its home's files directly anyway (docs/design/wire.md#opensandbox-execd-12). */
static const char *const refused_exact[] = {
	/* libc */
	"GCONV_PATH", "GLIBC_TUNABLES", "LOCPATH", "NLSPATH", "HOSTALIASES",
	/* shells: a startup file, options (xtrace with PS4), prompts */
	"BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "PROMPT_COMMAND",
	/* Node, Ruby, Java, Tcl */
	"NODE_OPTIONS", "NODE_PATH", "NODE_REPL_EXTERNAL_MODULE", "RUBYOPT", "RUBYLIB", "GEM_PATH",
	"GEM_HOME", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "CLASSPATH",
	"TCLLIBPATH",
	/* OpenSSL loads engines and providers named by its configuration */
	"OPENSSL_CONF", "OPENSSL_ENGINES", "OPENSSL_MODULES",
	/* git runs commands named by its configuration and these */
	"GIT_EXEC_PATH", "GIT_SSH", "GIT_SSH_COMMAND", "GIT_ASKPASS", "GIT_TEMPLATE_DIR",
	"GIT_EXTERNAL_DIFF", "GIT_PROXY_COMMAND", "GIT_PAGER", "GIT_EDITOR", NULL};

/* LD_ (the loader: LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT...), PYTHON
 * (PYTHONPATH, PYTHONSTARTUP, PYTHONHOME, PYTHONWARNINGS imports its
 * category's module...), PERL (PERL5LIB, PERL5OPT, PERL5DB), LUA_
 * (LUA_INIT runs code), GIT_CONFIG (GIT_CONFIG_COUNT/KEY/VALUE,
 * _PARAMETERS, _GLOBAL: core.fsmonitor, core.pager run commands),
 * BASH_FUNC_ (exported functions). */
static const char *const refused_prefix[] = {"LD_",        "PYTHON",     "PERL", "LUA_",
					     "GIT_CONFIG", "BASH_FUNC_", NULL};

/* PYTHON* variables that only switch something off or pick an encoding. */
static const char *const python_harmless[] = {"PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE",
					      "PYTHONIOENCODING", "PYTHONUTF8",
					      "PYTHONHASHSEED",   "PYTHONNOUSERSITE",
					      "PYTHONSAFEPATH",   NULL};

static bool in_list(const char *const *list, const char *name)
{
	for (; *list; list++)
		if (!strcmp(*list, name))
			return true;
	return false;
}

bool envfile_name_refused(const char *name)
{
	if (in_list(refused_exact, name))
		return true;
	for (const char *const *p = refused_prefix; *p; p++)
		if (!strncmp(name, *p, strlen(*p)))
			return strncmp(name, "PYTHON", 6) || !in_list(python_harmless, name);
	return false;
}

static void report(struct envfile_result *res, unsigned line, const char *msg)
{
	res->errors++;
	if (res->errors == 1) {
		res->first_error_line = line;
		snprintf(res->first_error, sizeof(res->first_error), "%s", msg);
	}
}

/* Where the parser is: the text, the offset, the line (for reports). */
struct cursor {
	const char *s;
	size_t len, i;
	unsigned line;
};

static void skip_blanks(struct cursor *c)
{
	while (c->i < c->len && blank(c->s[c->i]))
		c->i++;
}

/* The name of NAME=value (after an optional `export `), up to and past
 * the '='; its length, or 0 when the line is reported (and skipped). */
static size_t read_name(struct cursor *c, unsigned start_line, struct envfile_result *res,
			size_t *n0)
{
	const char *s = c->s;
	if (c->len - c->i > 7 && !memcmp(s + c->i, "export", 6) && blank(s[c->i + 6])) {
		c->i += 7;
		skip_blanks(c);
	}
	*n0 = c->i;
	if (c->i >= c->len || !name_start(s[c->i])) {
		report(res, start_line, "not NAME=value");
		return 0;
	}
	while (c->i < c->len && name_char(s[c->i]))
		c->i++;
	size_t nlen = c->i - *n0;
	if (c->i >= c->len || s[c->i] != '=' || nlen > 256) {
		report(res, start_line, nlen > 256 ? "name longer than 256 bytes" : "no '='");
		return 0;
	}
	c->i++;
	return nlen;
}

/* '...' (literal): 1, 0 when unterminated, -1 out of memory. */
static int read_single_quoted(struct cursor *c, struct buf *val)
{
	size_t e = c->i + 1;
	while (e < c->len && c->s[e] != '\'')
		e++;
	if (e >= c->len)
		return 0;
	for (size_t k = c->i + 1; k < e; k++)
		c->line += c->s[k] == '\n';
	if (buf_append(val, c->s + c->i + 1, e - c->i - 1) < 0)
		return -1;
	c->i = e + 1;
	return 1;
}

/* "..." (\\ \" \$ \` escapes, a line continuation): as read_single_quoted. */
static int read_double_quoted(struct cursor *c, struct buf *val)
{
	const char *s = c->s;
	for (c->i++; c->i < c->len && s[c->i] != '"'; c->i++) {
		char d = s[c->i];
		if (d == '\\' && c->i + 1 < c->len && strchr("\\\"$`\n", s[c->i + 1])) {
			d = s[++c->i];
			if (d == '\n') { /* a line continuation */
				c->line++;
				continue;
			}
		}
		c->line += d == '\n';
		if (buf_append(val, &d, 1) < 0)
			return -1;
	}
	if (c->i >= c->len)
		return 0;
	c->i++;
	return 1;
}

/* A value: unquoted text (a backslash quotes the next character), '...'
 * and "...", concatenated, as a POSIX shell reads an assignment; ends at an
 * unquoted blank, newline or #, and only a comment or blanks may follow.
 * 1, 0 when bad, -1 out of memory. */
static int read_value(struct cursor *c, struct buf *val)
{
	const char *s = c->s;
	int ok = 1;
	while (c->i < c->len && ok == 1) {
		char ch = s[c->i];
		if (ch == '\n' || blank(ch) || ch == '#')
			break;
		if (ch == '\'') {
			ok = read_single_quoted(c, val);
		} else if (ch == '"') {
			ok = read_double_quoted(c, val);
		} else if (ch == '\\') {
			if (c->i + 1 >= c->len)
				return 0;
			if (s[c->i + 1] == '\n')
				c->line++;
			else if (buf_append(val, s + c->i + 1, 1) < 0)
				return -1;
			c->i += 2;
		} else {
			if (buf_append(val, &ch, 1) < 0)
				return -1;
			c->i++;
		}
	}
	if (ok != 1)
		return ok;
	skip_blanks(c);
	return c->i < c->len && s[c->i] != '\n' && s[c->i] != '#' ? 0 : 1;
}

/* One NAME=value read whole: kept, or counted as refused, too long, over
 * the limit or bad. 0, or -1 out of memory. */
static int store(json_t *out, const char *name, size_t nlen, const struct buf *val, unsigned line,
		 struct envfile_result *res)
{
	if (memchr(val->data ? val->data : "", 0, val->len)) {
		report(res, line, "value contains a NUL byte");
	} else if (envfile_name_refused(name)) {
		if (!res->refused++)
			snprintf(res->first_refused, sizeof(res->first_refused), "%.63s", name);
	} else if (nlen + 1 + val->len > ENVFILE_MAX_ENTRY) {
		res->too_long++;
	} else if (json_object_size(out) >= ENVFILE_MAX_VARS && !json_object_get(out, name)) {
		res->over++;
	} else {
		json_t *v = json_stringn(val->data ? val->data : "", val->len);
		if (!v)
			report(res, line, "value is not valid UTF-8");
		else if (json_object_set_new(out, name, v) < 0)
			return -1;
		else
			res->vars++;
	}
	return 0;
}

/* One line (or more, with quotes and continuations) from c->i, which is
 * not blank: c is left at the start of the next. 0, or -1 out of memory. */
static int parse_entry(struct cursor *c, struct buf *val, json_t *out, struct envfile_result *res)
{
	unsigned start_line = c->line;
	size_t line_start = c->i, n0 = 0;
	size_t nlen = c->s[c->i] == '#' ? 0 : read_name(c, start_line, res, &n0);
	int ok = 0;
	if (nlen) {
		buf_reset(val);
		ok = read_value(c, val);
		if (ok < 0)
			return -1;
		if (!ok) {
			/* Only this line is lost: an unterminated quote does not
			 * swallow the lines after it. */
			report(res, start_line, "unterminated quote or text after the value");
			c->i = line_start;
			c->line = start_line;
		}
	}
	if (ok) {
		char name[257];
		memcpy(name, c->s + n0, nlen);
		name[nlen] = 0;
		if (store(out, name, nlen, val, start_line, res) < 0)
			return -1;
	}
	c->i = next_line(c->s, c->len, c->i);
	c->line++;
	return 0;
}

int envfile_parse(const char *s, size_t len, json_t *out, struct envfile_result *res)
{
	memset(res, 0, sizeof(*res));
	struct buf val = {0};
	struct cursor c = {.s = s, .len = len, .i = 0, .line = 1};
	int rc = 0;
	while (rc == 0 && c.i < len) {
		skip_blanks(&c);
		if (c.i >= len)
			break;
		if (s[c.i] == '\n') {
			c.i++;
			c.line++;
			continue;
		}
		rc = parse_entry(&c, &val, out, res);
	}
	buf_free(&val);
	return rc;
}

char **envfile_envp(json_t *const *layers, size_t n)
{
	/* One object holds the result (a hash: a later layer's name replaces
	 * an earlier one in O(1)); then one string per name. */
	json_t *all = json_object();
	if (!all)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		if (layers[i] && json_is_object(layers[i]) &&
		    json_object_update(all, layers[i]) < 0) {
			json_decref(all);
			return NULL;
		}
	}
	size_t count = json_object_size(all), k = 0;
	char **env = calloc(count + 1, sizeof(*env));
	const char *name;
	json_t *v;
	if (env) {
		json_object_foreach(all, name, v) {
			const char *val = json_is_string(v) ? json_string_value(v) : "";
			size_t nl = strlen(name), vl = strlen(val);
			if (!(env[k] = malloc(nl + vl + 2)))
				break;
			memcpy(env[k], name, nl);
			env[k][nl] = '=';
			memcpy(env[k] + nl + 1, val, vl + 1);
			k++;
		}
		if (k < count) {
			for (size_t i = 0; i < k; i++)
				free(env[i]);
			free(env);
			env = NULL;
		}
	}
	json_decref(all);
	return env;
}
