/* The unit-test harness: registration table, case selection, TAP output (see unit.h). */
#include "unit.h"

#include <fnmatch.h>
#include <stdarg.h>
#include <stdlib.h>

#define UNIT_MAX_CASES 256
/* Diagnostics kept per case: a check failing in a loop must not flood the output. */
#define UNIT_MAX_DIAGS 20

struct unit_case {
	const char *name;
	unit_fn fn;
	const char *file;
	int line;
	bool selected;
};

/* The harness's state: one program, one table filled by constructors before main. */
static struct {
	struct unit_case cases[UNIT_MAX_CASES];
	int n;
	/* the case running now */
	int checks, failed, ndiag, dropped;
	char *diag[UNIT_MAX_DIAGS];
	char *skip;
	int total_checks, total_failed_checks;
} unit;

void unit_register(const char *name, unit_fn fn, const char *file, int line)
{
	if (unit.n == UNIT_MAX_CASES) {
		fprintf(stderr, "unit: more than %d cases\n", UNIT_MAX_CASES);
		abort();
	}
	unit.cases[unit.n++] =
		(struct unit_case){.name = name, .fn = fn, .file = file, .line = line};
}

static char *vformat(const char *fmt, va_list ap)
{
	char *s;
	if (vasprintf(&s, fmt, ap) < 0) {
		perror("unit: vasprintf");
		abort();
	}
	return s;
}

static void vdiag(const char *fmt, va_list ap)
{
	if (unit.ndiag == UNIT_MAX_DIAGS) {
		unit.dropped++;
		return;
	}
	unit.diag[unit.ndiag++] = vformat(fmt, ap);
}

void unit_diag(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vdiag(fmt, ap);
	va_end(ap);
}

void unit_skip(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	free(unit.skip);
	unit.skip = vformat(fmt, ap);
	va_end(ap);
}

static const char *base(const char *path)
{
	const char *s = strrchr(path, '/');
	return s ? s + 1 : path;
}

bool unit_check(bool ok, const char *file, int line, const char *fmt, ...)
{
	unit.checks++;
	if (ok)
		return true;
	unit.failed++;
	char *msg;
	va_list ap;
	va_start(ap, fmt);
	msg = vformat(fmt, ap);
	va_end(ap);
	unit_diag("%s:%d: %s", base(file), line, msg);
	free(msg);
	return false;
}

/* s as a C string literal, at most 200 bytes of it. */
static char *quote(const char *s)
{
	if (!s)
		return strdup("NULL");
	size_t n = strlen(s), max = n > 200 ? 200 : n;
	char *q = malloc(max * 4 + 8), *p = q;
	if (!q)
		abort();
	*p++ = '"';
	for (size_t i = 0; i < max; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '"' || c == '\\')
			p += sprintf(p, "\\%c", c);
		else if (c == '\n')
			p += sprintf(p, "\\n");
		else if (c == '\r')
			p += sprintf(p, "\\r");
		else if (c < 0x20 || c == 0x7f)
			p += sprintf(p, "\\x%02x", c);
		else
			*p++ = (char)c;
	}
	*p++ = '"';
	if (max < n)
		p += sprintf(p, "...");
	*p = 0;
	return q;
}

bool unit_check_str(const char *got, const char *want, const char *got_expr, const char *want_expr,
		    const char *file, int line)
{
	bool ok = got && want && strcmp(got, want) == 0;
	if (ok)
		return unit_check(true, file, line, "%s", "");
	char *g = quote(got), *w = quote(want);
	unit_check(false, file, line, "CHECK_STR failed: %s == %s: got %s, want %s", got_expr,
		   want_expr, g, w);
	free(g);
	free(w);
	return false;
}

/* Whether name matches one of the comma- or space-separated patterns in list. */
static bool select_by(const char *list, const char *name)
{
	char *copy = strdup(list), *save = NULL;
	bool hit = false;
	for (char *p = strtok_r(copy, ", ", &save); p; p = strtok_r(NULL, ", ", &save))
		hit |= fnmatch(p, name, 0) == 0;
	free(copy);
	return hit;
}

/* Every pattern of list must match some case: a misspelt name is an error, not "0 run". */
static int check_patterns(const char *list)
{
	char *copy = strdup(list), *save = NULL;
	int bad = 0;
	for (char *p = strtok_r(copy, ", ", &save); p; p = strtok_r(NULL, ", ", &save)) {
		bool any = false;
		for (int i = 0; i < unit.n && !any; i++)
			any = fnmatch(p, unit.cases[i].name, 0) == 0;
		if (!any) {
			fprintf(stderr, "unit: no case matches \"%s\" (--list shows them)\n", p);
			bad++;
		}
	}
	free(copy);
	return bad;
}

static int by_position(const void *a, const void *b)
{
	const struct unit_case *x = a, *y = b;
	int c = strcmp(x->file, y->file);
	return c ? c : x->line - y->line;
}

/* Runs one case; returns 1 when it failed. */
static int run_case(int num, const struct unit_case *c)
{
	unit.checks = unit.failed = unit.ndiag = unit.dropped = 0;
	c->fn();
	bool failed = unit.failed > 0 || (unit.checks == 0 && !unit.skip);
	if (unit.checks == 0 && !unit.skip)
		unit_diag("%s:%d: the case checked nothing", base(c->file), c->line);
	printf("%s %d - %s", failed ? "not ok" : "ok", num, c->name);
	if (unit.skip && !failed)
		printf(" # SKIP %s", unit.skip);
	printf("\n");
	for (int i = 0; i < unit.ndiag; i++) {
		/* one "# " per line: a multi-line message stays a TAP comment */
		for (char *l = unit.diag[i], *nl; l; l = nl ? nl + 1 : NULL) {
			nl = strchr(l, '\n');
			printf("# %.*s\n", nl ? (int)(nl - l) : (int)strlen(l), l);
		}
		free(unit.diag[i]);
	}
	if (unit.dropped)
		printf("# ... and %d more\n", unit.dropped);
	fflush(stdout);
	unit.total_checks += unit.checks;
	unit.total_failed_checks += unit.failed;
	return failed;
}

int main(int argc, char **argv)
{
	qsort(unit.cases, (size_t)unit.n, sizeof(unit.cases[0]), by_position);
	const char *filter = getenv("UNIT_FILTER");
	if (filter && !filter[strspn(filter, ", ")])
		filter = NULL;
	char *args = NULL;
	size_t args_len = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--list")) {
			for (int j = 0; j < unit.n; j++)
				printf("%s\n", unit.cases[j].name);
			return 0;
		}
		if (argv[i][0] == '-') {
			fprintf(stderr,
				"usage: %s [--list] [case-or-pattern ...]  (or UNIT_FILTER=...)\n",
				argv[0]);
			return 2;
		}
		args = realloc(args, args_len + strlen(argv[i]) + 2);
		if (!args)
			abort();
		sprintf(args + args_len, "%s%s", args_len ? "," : "", argv[i]);
		args_len = strlen(args);
	}
	/* Names on the command line must all exist; UNIT_FILTER spans several programs, so a
	 * program may have none of its cases (tests/unit/run.sh fails when no program has any). */
	if (args && check_patterns(args)) {
		free(args);
		return 2;
	}
	int n = 0;
	for (int i = 0; i < unit.n; i++) {
		struct unit_case *c = &unit.cases[i];
		c->selected = (!filter || select_by(filter, c->name)) &&
			      (!args || select_by(args, c->name));
		n += c->selected;
	}
	free(args);
	printf("1..%d%s\n", n, n ? "" : " # SKIP no case matches UNIT_FILTER");
	fflush(stdout);
	int num = 0, failed = 0, skipped = 0;
	for (int i = 0; i < unit.n; i++) {
		if (!unit.cases[i].selected)
			continue;
		int f = run_case(++num, &unit.cases[i]);
		failed += f;
		if (unit.skip) {
			skipped += !f;
			free(unit.skip);
			unit.skip = NULL;
		}
	}
	printf("%d passed, %d failed (%d skipped; %d checks, %d failed)\n", n - failed - skipped,
	       failed, skipped, unit.total_checks, unit.total_failed_checks);
	return failed ? 1 : 0;
}
