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
 * can write its home's files directly anyway (docs/design.md §3.5). */
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

int envfile_parse(const char *s, size_t len, json_t *out, struct envfile_result *res)
{
	memset(res, 0, sizeof(*res));
	struct buf val = {0};
	unsigned line = 1;
	size_t i = 0;
	int rc = 0;
	while (i < len) {
		unsigned start_line = line;
		size_t line_start = i;
		while (i < len && blank(s[i]))
			i++;
		if (i >= len)
			break;
		if (s[i] == '\n') {
			i++;
			line++;
			continue;
		}
		if (s[i] == '#') {
			i = next_line(s, len, i);
			line++;
			continue;
		}
		if (len - i > 7 && !memcmp(s + i, "export", 6) && blank(s[i + 6])) {
			i += 7;
			while (i < len && blank(s[i]))
				i++;
		}
		size_t n0 = i;
		if (i >= len || !name_start(s[i])) {
			report(res, start_line, "not NAME=value");
			i = next_line(s, len, i);
			line++;
			continue;
		}
		while (i < len && name_char(s[i]))
			i++;
		size_t nlen = i - n0;
		if (i >= len || s[i] != '=' || nlen > 256) {
			report(res, start_line,
			       nlen > 256 ? "name longer than 256 bytes" : "no '='");
			i = next_line(s, len, i);
			line++;
			continue;
		}
		i++;
		buf_reset(&val);
		bool bad = false;
		/* A value: unquoted text (a backslash quotes the next character),
		 * '...' (literal) and "..." (\\ \" \$ \` escapes), concatenated,
		 * as a POSIX shell reads an assignment; ends at an unquoted blank,
		 * newline or #. */
		while (i < len && !bad) {
			char c = s[i];
			if (c == '\n' || blank(c) || c == '#')
				break;
			if (c == '\'') {
				size_t e = i + 1;
				while (e < len && s[e] != '\'')
					e++;
				if (e >= len) {
					bad = true;
					break;
				}
				for (size_t k = i + 1; k < e; k++)
					line += s[k] == '\n';
				if (buf_append(&val, s + i + 1, e - i - 1) < 0)
					goto oom;
				i = e + 1;
			} else if (c == '"') {
				i++;
				while (i < len && s[i] != '"') {
					char d = s[i];
					if (d == '\\' && i + 1 < len &&
					    strchr("\\\"$`\n", s[i + 1])) {
						d = s[++i];
						if (d == '\n') { /* a line continuation */
							line++;
							i++;
							continue;
						}
					}
					line += d == '\n';
					if (buf_append(&val, &d, 1) < 0)
						goto oom;
					i++;
				}
				if (i >= len) {
					bad = true;
					break;
				}
				i++;
			} else if (c == '\\') {
				if (i + 1 >= len) {
					bad = true;
					break;
				}
				if (s[i + 1] == '\n') {
					line++;
				} else if (buf_append(&val, s + i + 1, 1) < 0) {
					goto oom;
				}
				i += 2;
			} else {
				if (buf_append(&val, &c, 1) < 0)
					goto oom;
				i++;
			}
		}
		if (!bad) {
			/* Only a comment or blanks may follow the value. */
			while (i < len && blank(s[i]))
				i++;
			if (i < len && s[i] != '\n' && s[i] != '#')
				bad = true;
		}
		if (bad) {
			/* Only this line is lost: an unterminated quote does not
			 * swallow the lines after it. */
			report(res, start_line, "unterminated quote or text after the value");
			i = next_line(s, len, line_start);
			line = start_line + 1;
			continue;
		}
		char name[257];
		memcpy(name, s + n0, nlen);
		name[nlen] = 0;
		if (memchr(val.data ? val.data : "", 0, val.len)) {
			report(res, start_line, "value contains a NUL byte");
		} else if (envfile_name_refused(name)) {
			if (!res->refused++)
				snprintf(res->first_refused, sizeof(res->first_refused), "%.63s",
					 name);
		} else if (nlen + 1 + val.len > ENVFILE_MAX_ENTRY) {
			res->too_long++;
		} else if (json_object_size(out) >= ENVFILE_MAX_VARS &&
			   !json_object_get(out, name)) {
			res->over++;
		} else {
			json_t *v = json_stringn(val.data ? val.data : "", val.len);
			if (!v) {
				report(res, start_line, "value is not valid UTF-8");
			} else if (json_object_set_new(out, name, v) < 0) {
				goto oom;
			} else {
				res->vars++;
			}
		}
		i = next_line(s, len, i);
		line++;
	}
	buf_free(&val);
	return rc;
oom:
	buf_free(&val);
	return -1;
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
