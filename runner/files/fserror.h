/* What a -errno of the files layer means to a client: an execd error code (hence an HTTP
 * status) and a message naming the operation and the path. The one wording of file work done
 * as the task user, for the files API (api/files*.c) and the file tools (tools/). Pure. */
#pragma once
#include <stdbool.h>

#include "core/error.h"
#include "files/ident.h"

/* Sets e (which may be NULL) from rc (-errno, errno, or a FILES_E* of files/path.h) and
 * returns -1. id names the task user and the write roots. `upload` keeps the upload's own
 * wording (some errnos fall back to their strerror there). */
int files_error(struct error *e, int rc, const char *op, const char *path,
		const struct files_ident *id, bool upload);
