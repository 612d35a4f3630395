/* The files API's filesystem layer: see files.h. */
#include "files/files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"

/* ---- identity ---- */

static int drop_groups(void)
{
	/* Only root can change them; an unprivileged runner runs tasks as
	 * itself, with these same groups. */
	if (geteuid() != 0)
		return 0;
	int n = getgroups(0, NULL);
	if (n < 0)
		return -errno;
	if (n > 0 && setgroups(0, NULL) < 0)
		return -errno;
	return 0;
}

int files_init(void)
{
	int rc = drop_groups();
	if (rc < 0)
		log_errno("cannot drop supplementary groups", -rc, NULL);
	return rc;
}

int files_enter(const struct files_ident *id)
{
	/* Checked every time (one syscall): files_init may not have run, and
	 * a stray group would widen every permission check. */
	int rc = drop_groups();
	if (rc < 0)
		return rc;
	setfsgid(id->gid);
	setfsuid(id->uid);
	/* setfsuid reports no errors: read the values back (-1 changes nothing). */
	if ((uid_t)setfsuid((uid_t)-1) != id->uid || (gid_t)setfsgid((gid_t)-1) != id->gid) {
		files_leave();
		return -EPERM;
	}
	return 0;
}

void files_leave(void)
{
	setfsuid(geteuid());
	setfsgid(getegid());
}

/* ---- paths ---- */

int files_clean_path(const char *in, size_t len, char *out, size_t outsz)
{
	if (!in || len == 0 || in[0] != '/' || memchr(in, 0, len))
		return -EINVAL;
	if (len >= PATH_MAX || outsz < 2)
		return -ENAMETOOLONG;
	size_t o = 0;
	out[o++] = '/';
	size_t i = 0;
	while (i < len) {
		while (i < len && in[i] == '/')
			i++;
		size_t s = i;
		while (i < len && in[i] != '/')
			i++;
		size_t n = i - s;
		if (n == 0 || (n == 1 && in[s] == '.'))
			continue;
		if (n == 2 && in[s] == '.' && in[s + 1] == '.') {
			/* Up one: back to the previous '/', never above the root. */
			while (o > 1 && out[o - 1] != '/')
				o--;
			if (o > 1)
				o--;
			continue;
		}
		if (o > 1)
			out[o++] = '/';
		if (o + n + 1 > outsz)
			return -ENAMETOOLONG;
		memcpy(out + o, in + s, n);
		o += n;
	}
	out[o] = 0;
	return 0;
}

int files_open_parent(const char *path, const char **base)
{
	const char *slash = strrchr(path, '/');
	if (!slash || !slash[1])
		return -EINVAL; /* "/" */
	*base = slash + 1;
	int fd;
	if (slash == path) {
		fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	} else {
		char dir[PATH_MAX];
		size_t n = (size_t)(slash - path);
		if (n >= sizeof(dir))
			return -ENAMETOOLONG;
		memcpy(dir, path, n);
		dir[n] = 0;
		fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	}
	return fd < 0 ? -errno : fd;
}

static int fd_path(int fd, char *out, size_t outsz)
{
	char link[32];
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, out, outsz - 1);
	if (n < 0)
		return -errno;
	if ((size_t)n >= outsz - 1)
		return -ENAMETOOLONG;
	out[n] = 0;
	return 0;
}

static bool beneath(const char *path, const char *root, size_t rl)
{
	while (rl > 1 && root[rl - 1] == '/')
		rl--;
	if (rl == 1 && root[0] == '/')
		return true;
	return !strncmp(path, root, rl) && (path[rl] == 0 || path[rl] == '/');
}

int files_check_writable(const struct files_ident *id, int dirfd)
{
	if (!id->write_roots)
		return 0;
	char real[PATH_MAX];
	/* The kernel's own name for the directory we hold: no lexical tricks. */
	if (fd_path(dirfd, real, sizeof(real)) < 0)
		return -FILES_EOUTSIDE; /* fail closed (no /proc) */
	if (beneath(real, "/dev/shm", 8))
		return 0; /* Landlock grants it to tasks too */
	for (const char *p = id->write_roots; *p;) {
		size_t n = strcspn(p, ":");
		if (n && n < PATH_MAX && p[0] == '/') {
			/* Landlock holds the root's inode: compare real paths. */
			char root[PATH_MAX], rroot[PATH_MAX];
			memcpy(root, p, n);
			root[n] = 0;
			const char *cmp = realpath(root, rroot) ? rroot : root;
			if (beneath(real, cmp, strlen(cmp)))
				return 0;
		}
		p += n;
		if (*p == ':')
			p++;
	}
	return -FILES_EOUTSIDE;
}

static int lookup_num(const char *s, uint32_t *out)
{
	if (!*s || strlen(s) > 10)
		return -ENOENT;
	uint64_t v = 0;
	for (const char *p = s; *p; p++) {
		if (*p < '0' || *p > '9')
			return -ENOENT;
		v = v * 10 + (uint64_t)(*p - '0');
	}
	if (v >= 0xffffffffULL)
		return -ENOENT;
	*out = (uint32_t)v;
	return 0;
}

int files_lookup_user(const char *name, uid_t *out)
{
	struct passwd pw, *res = NULL;
	char buf[4096];
	if (getpwnam_r(name, &pw, buf, sizeof(buf), &res) == 0 && res) {
		*out = res->pw_uid;
		return 0;
	}
	uint32_t v;
	if (lookup_num(name, &v) < 0)
		return -ENOENT;
	*out = (uid_t)v;
	return 0;
}

int files_lookup_group(const char *name, gid_t *out)
{
	struct group gr, *res = NULL;
	char buf[4096];
	if (getgrnam_r(name, &gr, buf, sizeof(buf), &res) == 0 && res) {
		*out = res->gr_gid;
		return 0;
	}
	uint32_t v;
	if (lookup_num(name, &v) < 0)
		return -ENOENT;
	*out = (gid_t)v;
	return 0;
}

/* ---- FileInfo ---- */

static const char *id_name(struct files_names *nc, uint32_t id, bool group)
{
	for (unsigned i = 0; i < sizeof(nc->e) / sizeof(nc->e[0]); i++)
		if (nc->e[i].used && nc->e[i].id == id && nc->e[i].group == group)
			return nc->e[i].name;
	unsigned slot = nc->next++ % (sizeof(nc->e) / sizeof(nc->e[0]));
	char *name = nc->e[slot].name;
	size_t cap = sizeof(nc->e[slot].name);
	char buf[4096];
	const char *found = NULL;
	if (group) {
		struct group gr, *res = NULL;
		if (getgrgid_r((gid_t)id, &gr, buf, sizeof(buf), &res) == 0 && res)
			found = res->gr_name;
	} else {
		struct passwd pw, *res = NULL;
		if (getpwuid_r((uid_t)id, &pw, buf, sizeof(buf), &res) == 0 && res)
			found = res->pw_name;
	}
	/* Unknown ids (or absurdly long names) are written as numbers, as execd does. */
	if (found && strlen(found) < cap)
		snprintf(name, cap, "%s", found);
	else
		snprintf(name, cap, "%u", id);
	nc->e[slot].id = id;
	nc->e[slot].group = group;
	nc->e[slot].used = true;
	return name;
}

/* RFC 3339 with nanoseconds, trailing zeros trimmed (Go's RFC3339Nano). */
static void fmt_time(char *out, size_t outsz, const struct timespec *ts)
{
	struct tm tm;
	time_t s = ts->tv_sec;
	gmtime_r(&s, &tm);
	size_t n = strftime(out, outsz, "%Y-%m-%dT%H:%M:%S", &tm);
	if (ts->tv_nsec > 0 && ts->tv_nsec < 1000000000L) {
		char frac[12];
		snprintf(frac, sizeof(frac), ".%09ld", ts->tv_nsec);
		size_t fl = strlen(frac);
		while (fl > 1 && frac[fl - 1] == '0')
			fl--;
		frac[fl] = 0;
		n += (size_t)snprintf(out + n, outsz - n, "%s", frac);
	}
	snprintf(out + n, outsz - n, "Z");
}

static const char *type_name(mode_t m)
{
	if (S_ISLNK(m))
		return "symlink";
	if (S_ISDIR(m))
		return "directory";
	if (S_ISREG(m))
		return "file";
	return "other";
}

void files_info_json(struct buf *out, const char *path, const struct stat *st,
		     struct files_names *nc)
{
	char mt[48], ct[48];
	fmt_time(mt, sizeof(mt), &st->st_mtim);
	/* execd reports the inode change time as created_at. */
	fmt_time(ct, sizeof(ct), &st->st_ctim);
	buf_append_str(out, "{\"path\":");
	buf_append_json_str(out, path, strlen(path));
	buf_appendf(out, ",\"type\":\"%s\",\"size\":%lld,\"modified_at\":\"%s\",\"created_at\":\"%s\",",
		    type_name(st->st_mode), (long long)st->st_size, mt, ct);
	const char *owner = id_name(nc, st->st_uid, false);
	buf_append_str(out, "\"owner\":");
	buf_append_json_str(out, owner, strlen(owner));
	const char *group = id_name(nc, st->st_gid, true);
	buf_append_str(out, ",\"group\":");
	buf_append_json_str(out, group, strlen(group));
	/* The octal digits read as a decimal number: 0755 -> 755. */
	buf_appendf(out, ",\"mode\":%o}", (unsigned)(st->st_mode & 0777));
}

/* ---- glob ---- */

enum { T_LIT, T_ANY, T_CLASS, T_STAR, T_GSLASH, T_GEND, T_SGEND };

struct gtok {
	unsigned char kind;
	bool neg;         /* T_CLASS: [!...] */
	uint32_t c;       /* T_LIT */
	uint32_t r0, rn;  /* T_CLASS: ranges[r0 .. r0+rn) */
};

struct galt {
	struct gtok *t;
	size_t n;
	uint32_t *ranges; /* lo, hi pairs */
};

struct files_glob {
	struct galt alts[FILES_GLOB_ALTS];
	size_t nalts;
	enum files_glob_subject subject;
};

/* One UTF-8 sequence; an invalid byte counts as itself. */
static size_t utf8_dec(const unsigned char *s, size_t n, uint32_t *c)
{
	unsigned char b = s[0];
	size_t len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
	if (len <= 1 || len > n) {
		*c = b;
		return 1;
	}
	uint32_t v = b & (0x7f >> len);
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80) {
			*c = b;
			return 1;
		}
		v = (v << 6) | (s[i] & 0x3f);
	}
	*c = v;
	return len;
}

/* Index just past the ']' closing a class that starts at p[i] == '[', or 0. */
static size_t class_end(const char *p, size_t n, size_t i)
{
	i++;
	if (i < n && (p[i] == '!' || p[i] == '^'))
		i++;
	if (i >= n || p[i] == ']')
		return 0; /* empty or unterminated */
	for (; i < n; i++) {
		if (p[i] == '\\') {
			i++;
			continue;
		}
		if (p[i] == ']')
			return i + 1;
	}
	return 0;
}

struct expand {
	char **out;
	size_t n;
	int err; /* 1 bad pattern, 2 too many */
};

static void expand_add(struct expand *e, const char *s, size_t n)
{
	if (e->n >= FILES_GLOB_ALTS) {
		e->err = 2;
		return;
	}
	char *c = strndup(s, n);
	if (!c) {
		e->err = 2;
		return;
	}
	e->out[e->n++] = c;
}

/* Expand the first {a,b} group of s and recurse on each result. */
static void expand(struct expand *e, const char *s, size_t n, unsigned depth)
{
	if (e->err)
		return;
	if (depth > 32) {
		e->err = 2;
		return;
	}
	size_t i = 0;
	for (; i < n; i++) {
		if (s[i] == '\\') {
			i++;
			continue;
		}
		if (s[i] == '[') {
			size_t end = class_end(s, n, i);
			if (!end) {
				e->err = 1;
				return;
			}
			i = end - 1;
			continue;
		}
		if (s[i] == '{')
			break;
	}
	if (i >= n) {
		expand_add(e, s, n);
		return;
	}
	/* Find the matching '}' and the top-level commas. */
	size_t open = i, level = 0, close = 0;
	for (size_t j = open; j < n; j++) {
		if (s[j] == '\\') {
			j++;
			continue;
		}
		if (s[j] == '[') {
			size_t end = class_end(s, n, j);
			if (!end) {
				e->err = 1;
				return;
			}
			j = end - 1;
			continue;
		}
		if (s[j] == '{')
			level++;
		else if (s[j] == '}' && --level == 0) {
			close = j;
			break;
		}
	}
	if (!close) {
		e->err = 1;
		return;
	}
	size_t start = open + 1;
	level = 0;
	char *tmp = malloc(n);
	if (!tmp) {
		e->err = 2;
		return;
	}
	for (size_t j = open + 1; j <= close && !e->err; j++) {
		if (j < close && s[j] == '\\') {
			j++;
			continue;
		}
		if (j < close && s[j] == '[') {
			j = class_end(s, n, j) - 1;
			continue;
		}
		if (j < close && s[j] == '{')
			level++;
		else if (j < close && s[j] == '}')
			level--;
		if (j == close || (s[j] == ',' && level == 0)) {
			size_t k = 0;
			memcpy(tmp + k, s, open);
			k += open;
			memcpy(tmp + k, s + start, j - start);
			k += j - start;
			memcpy(tmp + k, s + close + 1, n - close - 1);
			k += n - close - 1;
			expand(e, tmp, k, depth + 1);
			start = j + 1;
		}
	}
	free(tmp);
}

static int tokenize(struct galt *a, const char *p, size_t n)
{
	a->t = calloc(n + 1, sizeof(*a->t));
	a->ranges = calloc(2 * n + 2, sizeof(*a->ranges));
	if (!a->t || !a->ranges)
		return -ENOMEM;
	size_t nr = 0;
	for (size_t i = 0; i < n;) {
		struct gtok *t = &a->t[a->n];
		memset(t, 0, sizeof(*t));
		if (p[i] == '*') {
			size_t j = i;
			while (j < n && p[j] == '*')
				j++;
			bool seg_start = i == 0 || p[i - 1] == '/';
			if (j - i >= 2 && seg_start && j == n) {
				/* A double star ending the pattern; after a slash it
				 * also matches the directory itself ("a" for a/ + it). */
				if (a->n && a->t[a->n - 1].kind == T_LIT && a->t[a->n - 1].c == '/') {
					a->t[a->n - 1].kind = T_SGEND;
					i = j;
					continue;
				}
				t->kind = T_GEND;
			} else if (j - i >= 2 && seg_start && p[j] == '/') {
				t->kind = T_GSLASH;
				j++; /* the '/' belongs to it: zero or more whole segments */
			} else {
				t->kind = T_STAR;
			}
			i = j;
			a->n++;
			continue;
		}
		if (p[i] == '?') {
			t->kind = T_ANY;
			i++;
			a->n++;
			continue;
		}
		if (p[i] == '[') {
			size_t end = class_end(p, n, i);
			if (!end)
				return -EINVAL;
			t->kind = T_CLASS;
			i++;
			if (p[i] == '!' || p[i] == '^') {
				t->neg = true;
				i++;
			}
			t->r0 = (uint32_t)nr;
			while (i < end - 1) {
				uint32_t lo, hi;
				if (p[i] == '\\')
					i++;
				i += utf8_dec((const unsigned char *)p + i, end - 1 - i, &lo);
				hi = lo;
				if (i + 1 < end - 1 && p[i] == '-') {
					i++;
					if (p[i] == '\\')
						i++;
					if (i >= end - 1)
						return -EINVAL;
					i += utf8_dec((const unsigned char *)p + i, end - 1 - i, &hi);
				}
				a->ranges[nr++] = lo;
				a->ranges[nr++] = hi;
				t->rn++;
			}
			i = end;
			a->n++;
			continue;
		}
		if (p[i] == '\\') {
			if (++i >= n)
				return -EINVAL; /* trailing backslash */
		}
		t->kind = T_LIT;
		i += utf8_dec((const unsigned char *)p + i, n - i, &t->c);
		a->n++;
	}
	return 0;
}

int files_glob_compile(struct files_glob **out, const char *pattern, char *err, size_t errlen)
{
	*out = NULL;
	size_t n = strlen(pattern);
	if (n > FILES_GLOB_MAX) {
		snprintf(err, errlen, "pattern longer than %d bytes", FILES_GLOB_MAX);
		return -EINVAL;
	}
	struct files_glob *g = calloc(1, sizeof(*g));
	char *alts[FILES_GLOB_ALTS];
	struct expand e = {.out = alts};
	if (!g)
		return -ENOMEM;
	expand(&e, pattern, n, 0);
	int rc = 0;
	if (e.err) {
		snprintf(err, errlen, e.err == 1 ? "malformed pattern (unclosed [ or {)"
						 : "pattern expands to more than %d alternatives",
			 FILES_GLOB_ALTS);
		rc = -EINVAL;
	}
	g->subject = pattern[0] == '/' ? GLOB_ABS : GLOB_NAME;
	for (size_t i = 0; i < e.n; i++) {
		if (!rc && strchr(alts[i], '/') && g->subject == GLOB_NAME)
			g->subject = GLOB_REL;
		if (!rc) {
			rc = tokenize(&g->alts[g->nalts++], alts[i], strlen(alts[i]));
			if (rc < 0)
				snprintf(err, errlen, "malformed pattern");
		}
		free(alts[i]);
	}
	if (rc < 0) {
		files_glob_free(g);
		return rc;
	}
	*out = g;
	return 0;
}

enum files_glob_subject files_glob_subject(const struct files_glob *g)
{
	return g->subject;
}

void files_glob_free(struct files_glob *g)
{
	if (!g)
		return;
	for (size_t i = 0; i < g->nalts; i++) {
		free(g->alts[i].t);
		free(g->alts[i].ranges);
	}
	free(g);
}

static bool tok_match(const struct galt *a, const struct gtok *t, uint32_t c)
{
	if (t->kind == T_LIT)
		return t->c == c;
	if (c == '/')
		return false; /* ? and classes stay inside one segment */
	if (t->kind == T_ANY)
		return true;
	bool in = false;
	for (uint32_t k = 0; k < t->rn && !in; k++)
		in = c >= a->ranges[2 * (t->r0 + k)] && c <= a->ranges[2 * (t->r0 + k) + 1];
	return in != t->neg;
}

/* Backtracking with two resume points (the last star, and the last
 * double star followed by a slash), as doublestar does: polynomial, never
 * exponential. */
static bool match_alt(const struct galt *a, const unsigned char *s, size_t n)
{
	size_t ti = 0, si = 0;
	size_t st_t = 0, st_s = 0, gs_t = 0, gs_s = 0;
	bool star = false, gstar = false;
	for (;;) {
		if (ti < a->n) {
			const struct gtok *t = &a->t[ti];
			if (t->kind == T_STAR) {
				star = true;
				st_t = ++ti;
				st_s = si;
				continue;
			}
			if (t->kind == T_GSLASH) {
				gstar = true;
				star = false;
				gs_t = ++ti;
				gs_s = si;
				continue;
			}
			if (t->kind == T_GEND)
				return true;
			if (t->kind == T_SGEND) {
				if (si == n || s[si] == '/')
					return true;
			} else if (si < n) {
				uint32_t c;
				size_t cl = utf8_dec(s + si, n - si, &c);
				if (tok_match(a, t, c)) {
					ti++;
					si += cl;
					continue;
				}
			}
		} else if (si == n) {
			return true;
		}
		if (star && st_s < n && s[st_s] != '/') {
			uint32_t c;
			st_s += utf8_dec(s + st_s, n - st_s, &c);
			ti = st_t;
			si = st_s;
			continue;
		}
		if (gstar) {
			const unsigned char *sl = gs_s < n ? memchr(s + gs_s, '/', n - gs_s) : NULL;
			if (sl) {
				gs_s = (size_t)(sl - s) + 1;
				ti = gs_t;
				si = gs_s;
				star = false;
				continue;
			}
		}
		return false;
	}
}

bool files_glob_match(const struct files_glob *g, const char *name, size_t len)
{
	for (size_t i = 0; i < g->nalts; i++)
		if (match_alt(&g->alts[i], (const unsigned char *)name, len))
			return true;
	return false;
}

/* ---- directory reading ---- */

struct names {
	char *blk; /* [d_type][name]\0 ... */
	size_t len, cap;
	char **v;
	size_t n;
};

static void names_free(struct names *nm)
{
	free(nm->blk);
	free(nm->v);
	memset(nm, 0, sizeof(*nm));
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* All entries of directory dirfd (not . and ..), sorted by name when
 * asked. Reads through a fresh descriptor, so the caller's is untouched;
 * the directory's size bounds the memory (walk bounds cap it further). */
static int read_names(int dirfd, struct names *nm, bool sorted, size_t max)
{
	memset(nm, 0, sizeof(*nm));
	int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	DIR *d = fdopendir(fd);
	if (!d) {
		int e = errno;
		close(fd);
		return -e;
	}
	size_t count = 0;
	int rc = 0;
	for (;;) {
		errno = 0;
		struct dirent *de = readdir(d);
		if (!de) {
			rc = errno ? -errno : 0;
			break;
		}
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (++count > max) {
			rc = -FILES_ELIMIT;
			break;
		}
		size_t l = strlen(de->d_name) + 2;
		if (nm->len + l > nm->cap) {
			size_t nc = nm->cap ? nm->cap * 2 : 4096;
			while (nc < nm->len + l)
				nc *= 2;
			char *b = realloc(nm->blk, nc);
			if (!b) {
				rc = -ENOMEM;
				break;
			}
			nm->blk = b;
			nm->cap = nc;
		}
		nm->blk[nm->len] = (char)de->d_type;
		memcpy(nm->blk + nm->len + 1, de->d_name, l - 1);
		nm->len += l;
	}
	closedir(d);
	if (rc < 0) {
		names_free(nm);
		return rc;
	}
	nm->v = malloc((count ? count : 1) * sizeof(char *));
	if (!nm->v) {
		names_free(nm);
		return -ENOMEM;
	}
	for (size_t off = 0; off < nm->len;) {
		nm->v[nm->n++] = nm->blk + off + 1;
		off += strlen(nm->blk + off + 1) + 2;
	}
	if (sorted)
		qsort(nm->v, nm->n, sizeof(char *), cmp_name);
	return 0;
}

/* ---- list / search ---- */

static int walk_dir(struct files_walk *w, int dirfd, struct buf *path, size_t rel_off,
		    unsigned depth)
{
	struct names nm;
	int rc = read_names(dirfd, &nm, true, FILES_MAX_VISITED - w->visited);
	if (rc == -FILES_ELIMIT) {
		snprintf(w->limit_msg, sizeof(w->limit_msg),
			 "more than %d entries to look at", FILES_MAX_VISITED);
		return rc;
	}
	if (rc < 0)
		/* Below the root a directory that cannot be read (permissions,
		 * /proc oddities) is skipped, as a task's find would go on. */
		return depth > 0 && rc != -ENOMEM ? 0 : rc;
	size_t base_len = path->len;
	for (size_t i = 0; i < nm.n && rc == 0; i++) {
		const char *name = nm.v[i];
		w->visited++;
		if ((w->visited & 255) == 0 && monotonic_ms() > w->deadline_ms) {
			snprintf(w->limit_msg, sizeof(w->limit_msg), "took longer than %d ms",
				 FILES_MAX_WALK_MS);
			rc = -FILES_ELIMIT;
			break;
		}
		path->len = base_len;
		if ((base_len > 1 && buf_append(path, "/", 1) < 0) ||
		    buf_append(path, name, strlen(name)) < 0 || buf_append(path, "", 1) < 0) {
			rc = -ENOMEM;
			break;
		}
		path->len--; /* the NUL stays, uncounted */
		struct stat st;
		if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			if (errno == ENOMEM) {
				rc = -errno;
				break;
			}
			continue; /* removed meanwhile, or not stat-able: not listed */
		}
		bool is_dir = S_ISDIR(st.st_mode);
		bool take;
		if (!w->search) {
			take = true;
		} else if (is_dir) {
			take = false;
		} else if (!w->glob) {
			take = true;
		} else {
			enum files_glob_subject sub = files_glob_subject(w->glob);
			const char *s = sub == GLOB_ABS ? path->data
					: sub == GLOB_REL ? path->data + rel_off
							  : name;
			take = files_glob_match(w->glob, s, strlen(s));
		}
		if (take) {
			if (w->results >= FILES_MAX_RESULTS) {
				snprintf(w->limit_msg, sizeof(w->limit_msg), "more than %d results",
					 FILES_MAX_RESULTS);
				rc = -FILES_ELIMIT;
				break;
			}
			if (w->results++)
				buf_append(w->out, ",", 1);
			files_info_json(w->out, path->data, &st, &w->names);
		}
		if (is_dir && depth + 1 < w->max_depth) {
			int sub = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub < 0) {
				/* A directory the user may not read is skipped, like any
				 * directory a task could not look into. */
				if (errno == EMFILE || errno == ENFILE || errno == ENOMEM) {
					rc = -errno;
					break;
				}
				continue;
			}
			rc = walk_dir(w, sub, path, rel_off, depth + 1);
			close(sub);
		}
	}
	path->len = base_len;
	names_free(&nm);
	return rc;
}

int files_walk(struct files_walk *w, int dirfd, const char *root)
{
	if (w->max_depth == 0)
		return 0;
	if (w->max_depth > FILES_MAX_DEPTH)
		w->max_depth = FILES_MAX_DEPTH;
	struct buf path = {0};
	buf_append_str(&path, root);
	buf_append(&path, "", 1);
	path.len--;
	if (!path.data)
		return -ENOMEM;
	size_t rel_off = path.len > 1 ? path.len + 1 : 1;
	w->deadline_ms = monotonic_ms() + FILES_MAX_WALK_MS;
	int rc = walk_dir(w, dirfd, &path, rel_off, 0);
	buf_free(&path);
	return rc;
}

/* ---- rm -rf ---- */

static int rmrf_at(int dirfd, const char *name, unsigned depth)
{
	if (unlinkat(dirfd, name, 0) == 0)
		return 0;
	int e = errno;
	if (e == ENOENT)
		return 0;
	if (e != EISDIR && e != EPERM)
		return -e;
	struct stat st;
	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISDIR(st.st_mode))
		return -e;
	if (depth >= FILES_RMRF_MAX_DEPTH)
		return -FILES_ELIMIT;
	int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = 0;
	/* Entries created while we delete make rmdir fail: go round again. */
	for (int round = 0; round < 3; round++) {
		struct names nm;
		rc = read_names(fd, &nm, false, SIZE_MAX);
		if (rc < 0)
			break;
		for (size_t i = 0; i < nm.n && rc == 0; i++)
			rc = rmrf_at(fd, nm.v[i], depth + 1);
		names_free(&nm);
		if (rc < 0)
			break;
		if (unlinkat(dirfd, name, AT_REMOVEDIR) == 0 || errno == ENOENT) {
			rc = 0;
			break;
		}
		rc = -errno;
		if (errno != ENOTEMPTY && errno != EEXIST)
			break;
	}
	close(fd);
	return rc;
}

int files_rmrf(int dirfd, const char *name)
{
	return rmrf_at(dirfd, name, 0);
}

/* ---- mkdir -p, chown ---- */

int files_chown(const struct files_ident *id, int dirfd, const char *base, uid_t uid, gid_t gid,
		bool as_root)
{
	if (uid == (uid_t)-1 && gid == (gid_t)-1)
		return 0;
	if (as_root)
		files_leave(); /* the runner's own identity, CAP_CHOWN back in effect */
	int rc = (base ? fchownat(dirfd, base, uid, gid, 0) : fchown(dirfd, uid, gid)) < 0 ? -errno
											   : 0;
	if (as_root) {
		int r2 = files_enter(id);
		if (r2 < 0 && rc == 0)
			rc = r2;
	}
	return rc;
}

int files_chown_new(const struct files_ident *id, const char *path, size_t first_new, uid_t uid,
		    gid_t gid, bool as_root)
{
	if (!first_new || (uid == (uid_t)-1 && gid == (gid_t)-1))
		return 0;
	char p[PATH_MAX];
	size_t len = strlen(path);
	if (len >= sizeof(p) || first_new > len)
		return -ENAMETOOLONG;
	memcpy(p, path, len + 1);
	if (as_root)
		files_leave();
	int rc = 0;
	/* Top down, each prefix ending at a component boundary. */
	for (size_t end = first_new; rc == 0 && end <= len; end++) {
		if (end < len && p[end] != '/')
			continue;
		char c = p[end];
		p[end] = 0;
		if (fchownat(AT_FDCWD, p, uid, gid, AT_SYMLINK_NOFOLLOW) < 0)
			rc = -errno;
		p[end] = c;
	}
	if (as_root) {
		int r2 = files_enter(id);
		if (r2 < 0 && rc == 0)
			rc = r2;
	}
	return rc;
}

int files_mkdirs(const struct files_ident *id, const char *path, mode_t mode, bool *created,
		 size_t *first_new)
{
	*created = false;
	*first_new = 0;
	int fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	const char *p = path;
	while (*p) {
		while (*p == '/')
			p++;
		if (!*p)
			break;
		size_t n = strcspn(p, "/");
		char comp[NAME_MAX + 1];
		if (n > NAME_MAX) {
			close(fd);
			return -ENAMETOOLONG;
		}
		memcpy(comp, p, n);
		comp[n] = 0;
		p += n;
		bool last = !*p || !p[strspn(p, "/")];
		int rc = 0;
		int nfd = openat(fd, comp, O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (nfd < 0 && errno == ENOENT) {
			mode_t m = last ? mode : 0755;
			rc = files_check_writable(id, fd);
			if (rc == 0 && mkdirat(fd, comp, m) < 0 && errno != EEXIST) {
				rc = -errno;
			} else if (rc == 0) {
				/* Exact mode whatever the umask. */
				if (fchmodat(fd, comp, m, 0) < 0)
					rc = -errno;
				if (!*first_new)
					*first_new = (size_t)(p - path);
				if (last)
					*created = true;
			}
			if (rc == 0) {
				nfd = openat(fd, comp, O_PATH | O_DIRECTORY | O_CLOEXEC);
				if (nfd < 0)
					rc = -errno;
			}
		} else if (nfd < 0) {
			rc = -errno;
		}
		close(fd);
		if (rc < 0) {
			if (nfd >= 0)
				close(nfd);
			return rc;
		}
		fd = nfd;
	}
	return fd;
}

/* ---- rename ---- */

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE 1 /* ABI; musl 1.2.3 has no renameat2 wrapper */
#endif

int files_rename_noreplace(int sfd, const char *sname, int dfd, const char *dname)
{
	if (syscall(SYS_renameat2, sfd, sname, dfd, dname, RENAME_NOREPLACE) == 0)
		return 0;
	if (errno != EINVAL && errno != ENOSYS)
		return -errno;
	/* A filesystem without RENAME_NOREPLACE: check, then rename (the
	 * user could race itself here, nobody else). */
	struct stat st;
	if (fstatat(dfd, dname, &st, AT_SYMLINK_NOFOLLOW) == 0)
		return -EEXIST;
	if (errno != ENOENT)
		return -errno;
	return renameat(sfd, sname, dfd, dname) < 0 ? -errno : 0;
}

/* ---- temp files ---- */

int files_tmp_open(struct files_tmp *t, int dirfd)
{
	memset(t, 0, sizeof(*t));
	t->dirfd = dirfd;
	t->fd = openat(dirfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
	if (t->fd >= 0) {
		/* It can only be given a name through /proc (linkat with
		 * AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH): check /proc now. */
		char link[32];
		struct stat st;
		snprintf(link, sizeof(link), "/proc/self/fd/%d", t->fd);
		if (stat(link, &st) == 0)
			return 0;
		close(t->fd);
		t->fd = -1;
	} else if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL && errno != ENOENT) {
		return -errno;
	}
	/* No O_TMPFILE here: a hidden name, removed by discard. */
	for (int tries = 0; tries < 8; tries++) {
		char id[33];
		int rc = random_id(id);
		if (rc < 0)
			return rc;
		snprintf(t->name, sizeof(t->name), ".forceai-upload-%.16s.tmp", id);
		t->fd = openat(dirfd, t->name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
			       0600);
		if (t->fd >= 0) {
			t->named = true;
			return 0;
		}
		if (errno != EEXIST)
			return -errno;
	}
	return -EEXIST;
}

int files_tmp_commit(struct files_tmp *t, const char *base)
{
	int rc = 0;
	if (!t->named) {
		/* Link the anonymous file under a hidden name, then rename that
		 * over the target: replacing is atomic, linkat alone is not. */
		char link[32];
		snprintf(link, sizeof(link), "/proc/self/fd/%d", t->fd);
		for (int tries = 0; tries < 8; tries++) {
			char id[33];
			if ((rc = random_id(id)) < 0)
				break;
			snprintf(t->name, sizeof(t->name), ".forceai-upload-%.16s.tmp", id);
			if (linkat(AT_FDCWD, link, t->dirfd, t->name, AT_SYMLINK_FOLLOW) == 0) {
				t->named = true;
				rc = 0;
				break;
			}
			rc = -errno;
			if (errno != EEXIST)
				break;
		}
		if (!t->named) {
			files_tmp_discard(t);
			return rc ? rc : -EEXIST;
		}
	}
	if (renameat(t->dirfd, t->name, t->dirfd, base) < 0) {
		rc = -errno;
		files_tmp_discard(t);
		return rc;
	}
	t->named = false; /* it has its real name now */
	if (close(t->fd) < 0)
		rc = -errno;
	t->fd = -1;
	return rc;
}

void files_tmp_discard(struct files_tmp *t)
{
	if (t->named && unlinkat(t->dirfd, t->name, 0) < 0 && errno != ENOENT)
		log_errno("cannot remove a temporary upload file", errno, t->name);
	t->named = false;
	if (t->fd >= 0)
		close(t->fd);
	t->fd = -1;
}

/* ---- replace ---- */

int files_write_all(int fd, const char *data, size_t len)
{
	while (len) {
		ssize_t n = write(fd, data, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		data += n;
		len -= (size_t)n;
	}
	return 0;
}

#define REPLACE_CHUNK (64 * 1024)

int files_replace_stream(int in, int out, const char *old, size_t olen, const char *new_,
			 size_t nlen, uint64_t *count)
{
	*count = 0;
	if (olen == 0)
		return -EINVAL;
	size_t cap = REPLACE_CHUNK + olen;
	char *b = malloc(cap);
	if (!b)
		return -ENOMEM;
	size_t have = 0;
	bool eof = false;
	int rc = 0;
	while (!eof) {
		ssize_t n = read(in, b + have, cap - have);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			rc = -errno;
			break;
		}
		if (n == 0)
			eof = true;
		have += (size_t)n;
		size_t pos = 0;
		for (;;) {
			char *hit = have - pos >= olen ? memmem(b + pos, have - pos, old, olen) : NULL;
			if (!hit)
				break;
			size_t at = (size_t)(hit - b);
			if ((rc = files_write_all(out, b + pos, at - pos)) < 0 ||
			    (rc = files_write_all(out, new_, nlen)) < 0)
				break;
			pos = at + olen;
			(*count)++;
		}
		if (rc < 0)
			break;
		/* Keep back what could be the start of a match cut by the chunk. */
		size_t keep = eof ? 0 : olen - 1;
		size_t upto = have - pos > keep ? have - keep : pos;
		if ((rc = files_write_all(out, b + pos, upto - pos)) < 0)
			break;
		memmove(b, b + upto, have - upto);
		have -= upto;
	}
	free(b);
	return rc;
}

static int copy_fd(int in, int out)
{
	char buf[REPLACE_CHUNK];
	for (;;) {
		ssize_t n = read(in, buf, sizeof(buf));
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return 0;
		int rc = files_write_all(out, buf, (size_t)n);
		if (rc < 0)
			return rc;
	}
}

int files_replace(const struct files_ident *id, const char *path, const char *old, size_t olen,
		  const char *new_, size_t nlen, uint64_t *count)
{
	*count = 0;
	const char *base;
	int dirfd = files_open_parent(path, &base);
	if (dirfd < 0)
		return dirfd;
	int rc = 0, in = -1, out = -1;
	struct files_tmp tmp = {.fd = -1};
	bool use_tmp = false;
	struct stat st, lst;
	in = openat(dirfd, base, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (in < 0) {
		rc = -errno;
		goto out;
	}
	if (fstat(in, &st) < 0) {
		rc = -errno;
		goto out;
	}
	if (S_ISDIR(st.st_mode)) {
		rc = -EISDIR;
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = -EINVAL;
		goto out;
	}
	if ((uint64_t)st.st_size > FILES_REPLACE_MAX) {
		rc = -EFBIG;
		goto out;
	}
	/* Writing needs write permission on the file, whichever way we go. */
	if (faccessat(dirfd, base, W_OK, 0) < 0) {
		rc = -errno;
		goto out;
	}
	/* Landlock judges the file where it really is (a link may lead out). */
	if ((rc = files_check_writable(id, in)) < 0)
		goto out;
	/* Atomic rename only when it changes nothing but the content: our own,
	 * singly linked, not a symlink, a group we can keep. Else in place. */
	use_tmp = fstatat(dirfd, base, &lst, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(lst.st_mode) &&
		  lst.st_ino == st.st_ino && st.st_nlink == 1 && st.st_uid == id->uid &&
		  st.st_gid == id->gid;
	if (use_tmp) {
		if ((rc = files_tmp_open(&tmp, dirfd)) < 0)
			goto out;
		out = tmp.fd;
	} else {
		out = memfd_create("forceai-replace", MFD_CLOEXEC);
		if (out < 0) {
			rc = -errno;
			goto out;
		}
	}
	if ((rc = files_replace_stream(in, out, old, olen, new_, nlen, count)) < 0)
		goto out;
	if (*count == 0)
		goto out; /* nothing to change: leave the file (and its mtime) alone */
	if (use_tmp) {
		if (fchmod(tmp.fd, st.st_mode & 07777) < 0) {
			rc = -errno;
			goto out;
		}
		rc = files_tmp_commit(&tmp, base);
		out = -1;
		goto out;
	}
	int wfd = openat(dirfd, base, O_WRONLY | O_CLOEXEC);
	if (wfd < 0) {
		rc = -errno;
		goto out;
	}
	off_t len = lseek(out, 0, SEEK_CUR);
	if (len < 0 || lseek(out, 0, SEEK_SET) < 0)
		rc = -errno;
	if (rc == 0)
		rc = copy_fd(out, wfd);
	if (rc == 0 && ftruncate(wfd, len) < 0)
		rc = -errno;
	if (close(wfd) < 0 && rc == 0)
		rc = -errno;
out:
	if (use_tmp && tmp.fd >= 0)
		files_tmp_discard(&tmp);
	else if (!use_tmp && out >= 0)
		close(out);
	if (in >= 0)
		close(in);
	close(dirfd);
	return rc;
}

/* ---- line ranges ---- */

int files_line_range(int fd, uint64_t first, uint64_t count, off_t *start, off_t *len)
{
	char buf[REPLACE_CHUNK];
	uint64_t line = 1;
	off_t pos = 0, s = -1;
	*start = 0;
	*len = 0;
	if (first <= 1)
		s = 0;
	uint64_t last = first + count; /* first line not wanted */
	for (;;) {
		ssize_t n = pread(fd, buf, sizeof(buf), pos);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			break;
		for (char *p = buf, *end = buf + n; p < end;) {
			char *nl = memchr(p, '\n', (size_t)(end - p));
			if (!nl)
				break;
			line++;
			off_t after = pos + (nl - buf) + 1;
			if (line == first)
				s = after;
			if (line == last) {
				*start = s < 0 ? after : s;
				*len = after - *start;
				return 0;
			}
			p = nl + 1;
		}
		pos += n;
	}
	/* EOF before the last wanted line: up to the end (a final line without
	 * a newline counts). */
	if (s < 0) {
		*start = pos;
		*len = 0;
	} else {
		*start = s;
		*len = pos - s;
	}
	return 0;
}
