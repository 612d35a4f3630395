/* The extended attributes and ACLs a tenant may set, as one blob per entry: what the
 * file-tree engine (tree.h) keeps of a directory or file and puts back.
 * Functions return 0 (or a count) or -errno. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Extended attributes and ACLs: user.*, trusted.*, system.posix_acl_*.
 * A blob is, for each attribute, a 2-byte name length, the name, a 4-byte
 * value length, the value (host order). */
#define XATTR_NAME_BYTES 256 /* the kernel's XATTR_NAME_MAX + 1 */
bool xattr_ours(const char *name);
/* fd's attributes as a malloc'd blob (*blob NULL and *len 0 when none). */
int xattrs_take(int fd, char **blob, size_t *len);
bool xattr_blob_next(const char *blob, size_t len, size_t *pos, char *name, size_t namecap,
		     const char **value, uint32_t *vlen);
/* Make fd's attributes exactly the blob's; returns how many were changed.
 * `tolerant`: EPERM/EACCES on what the runner does not own is no error. */
int xattrs_restore(int fd, const char *blob, size_t blen, bool tolerant);
