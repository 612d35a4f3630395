/* Client paths of the files API: lexical cleaning (pure) and resolution.
 * Every path is resolved with openat2(RESOLVE_NO_MAGICLINKS): a /proc
 * magic link (/proc/self/fd/N, /proc/PID/cwd, ...) planted by a task or
 * asked for is never followed by the runner, which would otherwise reach
 * its own descriptors. Ordinary symbolic links in the directories of a path
 * are followed, as a task's open() would; the last component of anything
 * written is never followed (files_open_last). Functions return 0 (or an
 * fd) on success and -errno on failure. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "files/ident.h"

/* Errors beyond errno. */
#define FILES_EOUTSIDE 4096 /* not beneath a writable root (Landlock mirror) */
#define FILES_ELIMIT 4097   /* a bound was hit (walks, line scans) */

/* A client path: absolute, no NUL byte (len is its real length), then
 * cleaned lexically like Go's filepath.Clean ("//a/./b/../c/" -> "/a/c").
 * 0, -EINVAL (empty, relative, NUL) or -ENAMETOOLONG. */
int files_clean_path(const char *in, size_t len, char *out, size_t outsz);
/* openat2(dirfd, path, flags | O_CLOEXEC) with `resolve` (RESOLVE_*) and
 * always RESOLVE_NO_MAGICLINKS. */
int files_open(int dirfd, const char *path, int flags, uint64_t resolve);
/* The same rules without openat2 (files_open falls back to it on ENOSYS):
 * one component at a time, each opened O_PATH|O_NOFOLLOW, links read and
 * followed here; a procfs link that reads as an absolute path or
 * "type:[...]" is a magic link. */
int files_open_compat(int dirfd, const char *path, int flags, uint64_t resolve);
/* One path component in dirfd, never following a link there (O_NOFOLLOW,
 * RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH); with O_PATH a link itself is
 * opened, else it is -ELOOP. */
int files_open_last(int dirfd, const char *name, int flags);
/* Open the parent directory of a clean path (O_PATH; ordinary links
 * followed, magic ones not) and point *base at the last component. "/" has
 * no parent: -EINVAL. */
int files_open_parent(const char *path, const char **base);
/* 1 when fd is on procfs, 0 when not, or -errno. The files API serves no
 * content from /proc: resolved by the runner, /proc/self is the runner. */
int files_on_procfs(int fd);
/* 0 when the directory dirfd is one of id->write_roots (or /dev/shm, as
 * Landlock grants it) or beneath one, else -FILES_EOUTSIDE. Decided by
 * walking "..": from the directory held, not from a name. */
int files_check_writable(const struct files_ident *id, int dirfd);
/* The root of a walk or search: resolved without magic links; a link there is not followed.
 * *st describes it; *fd is a directory descriptor, or -1 when it is no directory. 0 or -errno. */
struct stat;
int files_open_root(const char *path, struct stat *st, int *fd);
