#include "task/envfile.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "core/util.h"

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
		if (memchr(val.data ? val.data : "", 0, val.len)) {
			report(res, start_line, "value contains a NUL byte");
		} else {
			char name[257];
			memcpy(name, s + n0, nlen);
			name[nlen] = 0;
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
