/* Client paths of the files API: lexical cleaning (pure) and where a path
 * leads (the parent directory, whether it is beneath the write roots).
 * Functions return 0 (or an fd) on success and -errno on failure. */
#pragma once
#include <stddef.h>

#include "files/ident.h"

/* Errors beyond errno. */
#define FILES_EOUTSIDE 4096 /* not beneath a writable root (Landlock mirror) */

/* A client path: absolute, no NUL byte (len is its real length), then
 * cleaned lexically like Go's filepath.Clean ("//a/./b/../c/" -> "/a/c").
 * 0, -EINVAL (empty, relative, NUL) or -ENAMETOOLONG. */
int files_clean_path(const char *in, size_t len, char *out, size_t outsz);
/* Open the parent directory of a clean path (O_PATH, following links) and
 * point *base at the last component. "/" has no parent: -EINVAL. */
int files_open_parent(const char *path, const char **base);
/* 0 when dirfd is beneath one of id->write_roots, else -FILES_EOUTSIDE. */
int files_check_writable(const struct files_ident *id, int dirfd);
