/* Small helpers: growable buffers, JSON string escaping, UTF-8, base64,
 * random ids. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <stdint.h>

struct buf {
	char *data;
	size_t len, cap, off; /* off: consumed prefix */
};

int buf_reserve(struct buf *b, size_t extra);
int buf_append(struct buf *b, const void *data, size_t len);
int buf_appendf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int buf_append_str(struct buf *b, const char *s);
/* s as one sh word: 'it'\''s'. */
int buf_append_sh_quoted(struct buf *b, const char *s);
/* A JSON string literal (quotes included). Invalid UTF-8 bytes become
 * U+FFFD, as Go's encoder does. */
int buf_append_json_str(struct buf *b, const char *s, size_t len);
/* Worst case of a JSON string literal of len bytes: \u00XX per byte, quotes. */
#define JSON_STR_MAX(len) ((len)*6 + 2)
/* The same literal written at o, which has room for JSON_STR_MAX(len);
 * returns the end. For callers that reserve once for a whole event. */
char *json_escape_to(char *o, const char *s, size_t len);
/* A piece of a literal (no quotes): as much of s as fits in room, never a
 * character cut; *used gets the input consumed, *invalid (unless NULL) the
 * bytes of it that were not UTF-8 (each written as U+FFFD). Returns the
 * bytes written. At least 6 bytes of room always take at least one
 * character. */
size_t json_escape_part(char *o, size_t room, const char *s, size_t len, size_t *used,
			size_t *invalid);
/* Base64 of s at o ((len + 2) / 3 * 4 bytes, padded). Returns that. */
size_t base64_encode_to(char *o, const unsigned char *s, size_t len);
/* The same when s is valid UTF-8 (0); 1 and nothing appended when it is
 * not (one pass instead of utf8_valid and then the escaper). */
int buf_append_json_utf8(struct buf *b, const char *s, size_t len);
int buf_append_base64(struct buf *b, const unsigned char *s, size_t len);
/* Decimal digits of v. */
int buf_append_u64(struct buf *b, uint64_t v);
/* buf_append of a string literal (its length known at compile time). */
#define buf_append_lit(b, lit) buf_append((b), "" lit, sizeof(lit) - 1)
void buf_reset(struct buf *b);
void buf_free(struct buf *b);
static inline size_t buf_avail(const struct buf *b)
{
	return b->len - b->off;
}
/* Scoped: `cleanup_buf struct buf b = {0};` is freed when it goes out of
 * scope (see core/cleanup.h). */
static inline void buf_freep(struct buf *b)
{
	buf_free(b);
}
#define cleanup_buf __attribute__((cleanup(buf_freep)))
/* Copy up to max unread bytes into dst; the count. */
size_t buf_take(struct buf *b, char *dst, size_t max);

/* memchr, 16 bytes at a time (SSE2): musl's, in the static build, goes a
 * word at a time and was the runner's top function on execd streams (the
 * line splitter). */
const char *mem_find(const char *s, char c, size_t n);
/* The first of either byte (a line's end: '\n' or '\r'), one pass. */
const char *mem_find2(const char *s, char a, char b, size_t n);
bool utf8_valid(const unsigned char *s, size_t len);
struct sockaddr;
/* A client's numeric address, as inet_ntop writes it (IPv4 without printf:
 * this runs for every API request). False, and out "?", for another family
 * or a buffer too small (len >= INET6_ADDRSTRLEN always fits). */
bool sockaddr_text(const struct sockaddr *sa, char *out, size_t len);
/* Length (0-3) of a trailing incomplete but so-far valid UTF-8 sequence. */
size_t utf8_incomplete_tail(const unsigned char *s, size_t len);

/* 32 lowercase hex chars + NUL from getrandom(). 0 or -errno. */
int random_id(char out[33]);
/* Constant-time comparison of two strings (length leaks only). */
bool secret_equal(const char *a, const char *b);
bool is_hex_id(const char *s);
/* "SIGTERM" etc.; "SIG?" for unknown numbers. */
const char *signal_name(int sig);

/* Writes all n bytes (short writes continued, EINTR retried): 0, or
 * -errno. Async-signal-safe: a forked worker may use it. pwrite_all the
 * same at offset off. */
int write_all(int fd, const void *p, size_t n);
int pwrite_all(int fd, const void *p, size_t n, off_t off);

/* ---- files a task may have swapped ----
 * The runner reads some files as root from places a task can write (an npm
 * prefix on PATH, a home directory, an operator's path under a writable
 * root). Opened by name, such a path may have become a FIFO (open() waits
 * for a writer: PID 1 stuck for good), a terminal (PID 1 would take it as
 * its controlling tty), a device, a symlink or a huge file between any
 * check and the open. These open it O_RDONLY|O_NONBLOCK|O_NOCTTY|O_CLOEXEC
 * (a FIFO then opens at once, with no writer), check the descriptor with
 * fstat and keep only a regular file of at most max bytes (O_NONBLOCK is
 * then cleared: it means nothing for one). See docs/design.md §14.9. */
struct stat;
enum {
	/* Refuse a symlink in the last component (-ELOOP). */
	RF_NOFOLLOW = 1,
	/* Refuse a symlink in any component (openat2 RESOLVE_NO_SYMLINKS; where
	 * openat2 is missing, the last component only, as RF_NOFOLLOW). For a
	 * path already resolved with realpath(): a link there is a swap. */
	RF_NO_SYMLINKS = 2,
};
/* The descriptor (st filled when not NULL), or -errno: -ELOOP a symlink,
 * -EFTYPE_NOT_REGULAR not a regular file (st then says what it is), -EFBIG
 * over max, or the open's own error. */
#define EFTYPE_NOT_REGULAR 4200
int open_regular(int dirfd, const char *path, int rf_flags, size_t max, struct stat *st);
/* The whole file, NUL-terminated (malloc'd), by open_regular's rules (st
 * as there); a file that grows past max while read is -EFBIG too. 0 or
 * -errno. */
int read_regular(int dirfd, const char *path, int rf_flags, size_t max, char **data, size_t *len,
		 struct stat *st);
/* Text for open_regular's and read_regular's errors ("a FIFO, not a
 * regular file"); st (may be NULL) names the type. */
const char *open_regular_strerror(int rc, const struct stat *st);

/* ms since the epoch as RFC 3339 UTC with milliseconds
 * (2026-01-02T03:04:05.678Z); len >= 32. */
void iso_time_ms(char *out, size_t len, uint64_t ms);
