/* FileInfo: see info.h. */
#include "files/info.h"
#include "core/jsonesc.h"

#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

const char *files_id_name(struct files_names *nc, uint32_t id, bool group)
{
	for (unsigned i = 0; i < sizeof(nc->e) / sizeof(nc->e[0]); i++)
		if (nc->e[i].used && nc->e[i].id == id && nc->e[i].group == group)
			return nc->e[i].name[0] ? nc->e[i].name : NULL;
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
	/* An absurdly long name counts as none (an empty name is the "none" kept). */
	if (found && strlen(found) < cap)
		snprintf(name, cap, "%s", found);
	else
		name[0] = 0;
	nc->e[slot].id = id;
	nc->e[slot].group = group;
	nc->e[slot].used = true;
	return name[0] ? name : NULL;
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
	buf_appendf(out,
		    ",\"type\":\"%s\",\"size\":%lld,\"modified_at\":\"%s\",\"created_at\":\"%s\",",
		    type_name(st->st_mode), (long long)st->st_size, mt, ct);
	/* Unknown ids are written as numbers, as execd does. */
	char num[2][16];
	const char *owner = files_id_name(nc, st->st_uid, false);
	const char *group = files_id_name(nc, st->st_gid, true);
	if (!owner)
		snprintf(num[0], sizeof(num[0]), "%u", (unsigned)st->st_uid), owner = num[0];
	if (!group)
		snprintf(num[1], sizeof(num[1]), "%u", (unsigned)st->st_gid), group = num[1];
	buf_append_str(out, "\"owner\":");
	buf_append_json_str(out, owner, strlen(owner));
	buf_append_str(out, ",\"group\":");
	buf_append_json_str(out, group, strlen(group));
	/* The octal digits read as a decimal number: 0755 -> 755. */
	buf_appendf(out, ",\"mode\":%o}", (unsigned)(st->st_mode & 0777));
}
