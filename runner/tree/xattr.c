/* Extended attributes and ACLs as one blob per entry: see xattr.h. */
#include "tree/xattr.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>
#include <unistd.h>

#define XATTR_LIST_MAX_BYTES 65536
#define XATTR_VALUE_MAX 65536
bool xattr_ours(const char *name)
{
	return !strncmp(name, "user.", 5) || !strncmp(name, "trusted.", 8) ||
	       !strcmp(name, "system.posix_acl_access") ||
	       !strcmp(name, "system.posix_acl_default");
}

/* The names on fd, NUL-separated, into a malloc'd buffer. -errno. */
static ssize_t xattr_names(int fd, char **out)
{
	*out = NULL;
	ssize_t n = flistxattr(fd, NULL, 0);
	if (n < 0)
		return errno == ENOTSUP ? 0 : -errno;
	if (n == 0)
		return 0;
	if (n > XATTR_LIST_MAX_BYTES)
		return -E2BIG;
	char *b = malloc((size_t)n + 1);
	if (!b)
		return -ENOMEM;
	n = flistxattr(fd, b, (size_t)n);
	if (n < 0) {
		int err = errno;
		free(b);
		return -err;
	}
	b[n] = 0;
	*out = b;
	return n;
}

/* One value; -errno (ENODATA when absent). */
static ssize_t xattr_value(int fd, const char *name, char *buf, size_t cap)
{
	ssize_t v = fgetxattr(fd, name, buf, cap);
	return v < 0 ? -errno : v;
}

int xattrs_take(int fd, char **out, size_t *out_len)
{
	*out = NULL;
	*out_len = 0;
	char *names;
	ssize_t n = xattr_names(fd, &names);
	if (n <= 0)
		return (int)n;
	size_t cap = 4096, len = 0;
	char *blob = malloc(cap), *val = malloc(XATTR_VALUE_MAX);
	int rc = blob && val ? 0 : -ENOMEM;
	for (char *nm = names; rc == 0 && nm < names + n; nm += strlen(nm) + 1) {
		if (!xattr_ours(nm))
			continue;
		ssize_t v = xattr_value(fd, nm, val, XATTR_VALUE_MAX);
		if (v == -ENODATA)
			continue;
		if (v < 0) {
			rc = (int)v;
			break;
		}
		uint16_t nl = (uint16_t)strlen(nm);
		uint32_t vl = (uint32_t)v;
		size_t need = len + 2 + nl + 4 + vl;
		if (need > cap) {
			while (cap < need)
				cap *= 2;
			char *nb = realloc(blob, cap);
			if (!nb) {
				rc = -ENOMEM;
				break;
			}
			blob = nb;
		}
		memcpy(blob + len, &nl, 2);
		memcpy(blob + len + 2, nm, nl);
		memcpy(blob + len + 2 + nl, &vl, 4);
		memcpy(blob + len + 6 + nl, val, vl);
		len = need;
	}
	if (rc == 0 && len) {
		*out = blob;
		*out_len = len;
		blob = NULL;
	}
	free(names);
	free(blob);
	free(val);
	return rc;
}

/* Walks an entry's blob: the next attribute, or false at its end. */
bool xattr_blob_next(const char *blob, size_t len, size_t *pos, char *name, size_t namecap,
		     const char **value, uint32_t *vlen)
{
	if (*pos + 2 > len)
		return false;
	uint16_t nl;
	memcpy(&nl, blob + *pos, 2);
	if (*pos + 6 + nl > len || nl >= namecap)
		return false;
	memcpy(name, blob + *pos + 2, nl);
	name[nl] = 0;
	memcpy(vlen, blob + *pos + 2 + nl, 4);
	if (*pos + 6 + nl + *vlen > len)
		return false;
	*value = blob + *pos + 6 + nl;
	*pos += 6 + nl + *vlen;
	return true;
}

/* Make fd's attributes exactly entry e's: a tenant's added ones removed,
 * changed or removed ones set again. Returns how many were changed, or
 * -errno. `tolerant`: a non-root runner's EPERM on what it does not own
 * (no task of its uid could have changed that either) is not an error. */
int xattrs_restore(int fd, const char *blob, size_t blen, bool tolerant)
{
	char *names;
	ssize_t n = xattr_names(fd, &names);
	if (n < 0)
		return (int)n;
	int changed = 0, rc = 0;
	char name[XATTR_NAME_BYTES], *val = malloc(XATTR_VALUE_MAX);
	if (!val) {
		free(names);
		return -ENOMEM;
	}
	/* Added by a tenant: removed. */
	for (char *nm = names; n > 0 && nm < names + n && rc == 0; nm += strlen(nm) + 1) {
		if (!xattr_ours(nm))
			continue;
		bool kept = false;
		size_t pos = 0;
		const char *v;
		uint32_t vl;
		while (!kept && xattr_blob_next(blob, blen, &pos, name, sizeof(name), &v, &vl))
			kept = !strcmp(name, nm);
		if (kept)
			continue;
		if (fremovexattr(fd, nm) == 0)
			changed++;
		else if (errno != ENODATA && !(tolerant && (errno == EPERM || errno == EACCES)))
			rc = -errno;
	}
	/* The snapshot's: set where missing or different. */
	size_t pos = 0;
	const char *v;
	uint32_t vl;
	while (rc == 0 && xattr_blob_next(blob, blen, &pos, name, sizeof(name), &v, &vl)) {
		ssize_t cur = xattr_value(fd, name, val, XATTR_VALUE_MAX);
		if (cur == (ssize_t)vl && !memcmp(val, v, vl))
			continue;
		if (fsetxattr(fd, name, v, vl, 0) == 0)
			changed++;
		else if (!(tolerant && (errno == EPERM || errno == EACCES)))
			rc = -errno;
	}
	free(val);
	free(names);
	return rc < 0 ? rc : changed;
}
