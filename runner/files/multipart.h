/* An incremental multipart/form-data parser (RFC 7578 / RFC 2046 §5.1):
 * fed the request body chunk by chunk, it calls back for each part. Its
 * memory is one fixed struct: nothing is allocated, nothing grows with the
 * body, so a part of any size streams straight through. Pure (no I/O, no
 * globals) so it can be fuzzed on its own. */
#pragma once
#include <stdbool.h>
#include <stddef.h>

#define MP_BOUNDARY_MAX 70   /* RFC 2046 */
#define MP_HEADERS_MAX 8192  /* all header lines of one part */
#define MP_NAME_MAX 256      /* form field name, NUL included */
#define MP_FILENAME_MAX 1024 /* filename parameter, NUL included */
#define MP_CTYPE_MAX 256     /* part Content-Type, NUL included */

struct mp_part {
	char name[MP_NAME_MAX];
	char filename[MP_FILENAME_MAX];
	bool has_filename;
	char content_type[MP_CTYPE_MAX]; /* "" when absent */
};

/* Each returns 0 to go on; anything else stops the parser, and
 * multipart_feed returns that value. */
struct mp_callbacks {
	int (*part_begin)(void *arg, const struct mp_part *part);
	int (*part_data)(void *arg, const char *data, size_t len);
	int (*part_end)(void *arg);
};

enum mp_state { MP_PREAMBLE, MP_AFTER_DELIM, MP_HEADERS, MP_BODY, MP_EPILOGUE, MP_ERROR };

struct multipart {
	const struct mp_callbacks *cb;
	void *arg;
	enum mp_state state;
	char delim[4 + MP_BOUNDARY_MAX + 1]; /* "\r\n--" + boundary */
	size_t dlen;
	size_t match;    /* delimiter bytes matched so far (may span chunks) */
	unsigned after;  /* position inside the line after a delimiter */
	unsigned nparts; /* parts begun */
	char hdr[MP_HEADERS_MAX];
	size_t hlen;
	struct mp_part part;
	char err[160]; /* why, after a -1 */
};

/* content_type: the request's Content-Type value (must be multipart/form-data
 * with a boundary). 0, or -1 with m->err set. */
int multipart_init(struct multipart *m, const char *content_type, const struct mp_callbacks *cb,
		   void *arg);
/* 0; -1 on malformed input (m->err); or a callback's non-zero value. After
 * a non-zero return every further call returns -1. */
int multipart_feed(struct multipart *m, const char *data, size_t len);
/* At the end of the body: 0 when the closing delimiter was seen, else -1
 * (m->err). */
int multipart_finish(struct multipart *m);
