/* The files layer's errors in words: see fserror.h. */
#include "files/fserror.h"

#include <errno.h>
#include <string.h>

#include "files/path.h"
#include "files/walk.h"

int files_error(struct error *e, int rc, const char *op, const char *path,
		const struct files_ident *id, bool upload)
{
	int err = rc < 0 ? -rc : rc;
	int r;
	switch (err) {
	case ENOENT:
		r = error_set(e, 0, "FILE_NOT_FOUND", "%s %.1024s: file not found", op, path);
		break;
	case EACCES:
	case EPERM:
	case EROFS:
		/* "not permitted": the file tools' wording, which a client test reads. */
		r = error_set(e, 0, "PERMISSION_DENIED",
			      "%s %.1024s: not permitted (%s, acting as the task user, uid %u)", op,
			      path, strerror(err), (unsigned)id->uid);
		break;
	case FILES_EOUTSIDE:
		r = error_set(e, 0, "PERMISSION_DENIED",
			      "%s %.1024s: outside the directories tasks may write (%.300s)", op,
			      path, id->write_roots ? id->write_roots : "");
		break;
	case EISDIR:
		r = error_set(e, 0, "INVALID_FILE", "%s %.1024s: is a directory", op, path);
		break;
	case ENOTDIR:
		r = error_set(e, 0, "INVALID_FILE",
			      upload ? "%s %.1024s: a parent is not a directory"
				     : "%s %.1024s: not a directory",
			      op, path);
		break;
	case EEXIST:
	case ENOTEMPTY:
		if (upload)
			goto other;
		r = error_set(e, 0, "FILE_EXISTS", "%s %.1024s: already exists", op, path);
		break;
	case ENAMETOOLONG:
	case ELOOP:
	case EINVAL:
	case EXDEV:
	case EBUSY:
		if (upload)
			goto other;
		r = error_set(e, 0, "INVALID_REQUEST_BODY", "%s %.1024s: %s", op, path,
			      strerror(err));
		break;
	case EFBIG:
		if (upload)
			goto storage;
		r = error_set(e, 0, "FILE_TOO_LARGE", "%s %.1024s: file too large", op, path);
		break;
	case ENOSPC:
	case EDQUOT:
	storage:
		r = error_set(e, 0, "INSUFFICIENT_STORAGE", "%s %.1024s: %s", op, path,
			      strerror(err));
		break;
	case ESTALE:
		r = error_set(e, 0, "CONFLICT",
			      "%s %.1024s: changed while it was being worked on; try again", op,
			      path);
		break;
	case ETXTBSY:
		r = error_set(e, 0, "CONFLICT", "%s %.1024s: %s", op, path, strerror(err));
		break;
	case FILES_ELIMIT:
		if (upload)
			goto other;
		r = error_set(e, 0, "INVALID_REQUEST_BODY",
			      "%s %.1024s: directory tree deeper than %d levels", op, path,
			      FILES_RMRF_MAX_DEPTH);
		break;
	default:
	other:
		r = error_set(e, 0, "RUNTIME_ERROR", "%s %.1024s: %s", op, path, strerror(err));
		break;
	}
	if (e)
		e->errnum = err < 4096 ? err : 0;
	return r;
}
