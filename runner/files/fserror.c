/* The files layer's errors in words: see fserror.h. */
#include "files/fserror.h"

#include <errno.h>
#include <string.h>

#include "files/path.h"
#include "files/walk.h"

/* The errors answered with a code and a text of their own (NULL: strerror's). */
static const struct {
	int err;
	bool upload_other; /* an upload answers it RUNTIME_ERROR instead */
	const char *code, *text;
} plain[] = {
	{ENOENT, false, "FILE_NOT_FOUND", "file not found"},
	{EISDIR, false, "INVALID_FILE", "is a directory"},
	{EEXIST, true, "FILE_EXISTS", "already exists"},
	{ENOTEMPTY, true, "FILE_EXISTS", "already exists"},
	{ENAMETOOLONG, true, "INVALID_REQUEST_BODY", NULL},
	{ELOOP, true, "INVALID_REQUEST_BODY", NULL},
	{EINVAL, true, "INVALID_REQUEST_BODY", NULL},
	{EXDEV, true, "INVALID_REQUEST_BODY", NULL},
	{EBUSY, true, "INVALID_REQUEST_BODY", NULL},
	{ENOSPC, false, "INSUFFICIENT_STORAGE", NULL},
	{EDQUOT, false, "INSUFFICIENT_STORAGE", NULL},
	{ESTALE, false, "CONFLICT", "changed while it was being worked on; try again"},
	{ETXTBSY, false, "CONFLICT", NULL},
};

/* The errors whose words need more than a text: -1 with e set, or 0 (not one of them). */
static int special(struct error *e, int err, const char *op, const char *path,
		   const struct files_ident *id, bool upload)
{
	switch (err) {
	case EACCES:
	case EPERM:
	case EROFS:
		/* "not permitted": the file tools' wording, which a client test reads. */
		return error_set(e, 0, "PERMISSION_DENIED",
				 "%s %.1024s: not permitted (%s, acting as the task user, uid %u)",
				 op, path, strerror(err), (unsigned)id->uid);
	case FILES_EOUTSIDE:
		return error_set(e, 0, "PERMISSION_DENIED",
				 "%s %.1024s: outside the directories tasks may write (%.300s)", op,
				 path, id->write_roots ? id->write_roots : "");
	case ENOTDIR:
		return error_set(e, 0, "INVALID_FILE",
				 upload ? "%s %.1024s: a parent is not a directory"
					: "%s %.1024s: not a directory",
				 op, path);
	case EFBIG:
		if (upload)
			return error_set(e, 0, "INSUFFICIENT_STORAGE", "%s %.1024s: %s", op, path,
					 strerror(err));
		return error_set(e, 0, "FILE_TOO_LARGE", "%s %.1024s: file too large", op, path);
	case FILES_ELIMIT:
		if (upload)
			return 0;
		return error_set(e, 0, "INVALID_REQUEST_BODY",
				 "%s %.1024s: directory tree deeper than %d levels", op, path,
				 FILES_RMRF_MAX_DEPTH);
	}
	return 0;
}

int files_error(struct error *e, int rc, const char *op, const char *path,
		const struct files_ident *id, bool upload)
{
	int err = rc < 0 ? -rc : rc;
	int r = special(e, err, op, path, id, upload);
	for (size_t i = 0; !r && i < sizeof(plain) / sizeof(plain[0]); i++)
		if (plain[i].err == err && !(upload && plain[i].upload_other))
			r = error_set(e, 0, plain[i].code, "%s %.1024s: %s", op, path,
				      plain[i].text ? plain[i].text : strerror(err));
	if (!r)
		r = error_set(e, 0, "RUNTIME_ERROR", "%s %.1024s: %s", op, path, strerror(err));
	if (e)
		e->errnum = err < 4096 ? err : 0;
	return r;
}
