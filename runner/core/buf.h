/* Growable byte buffers: appended to at the end, consumed from the front
 * (off), the consumed prefix reused before growing. */
#pragma once
#include <stddef.h>
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
