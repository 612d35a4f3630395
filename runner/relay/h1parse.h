/* HTTP/1.x response parsing for the port proxy (api/proxy.c): the response
 * head of an upstream (status line and header fields) and the chunked
 * transfer coding. Pure functions over caller buffers, bounded, no I/O, so
 * that a hostile upstream (a task's server) can only get a "bad" answer. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define H1_MAX_HEADERS 100

struct h1_field {
	const char *name;  /* NUL-terminated, inside the parsed buffer */
	const char *value; /* NUL-terminated, optional white space trimmed */
	size_t name_len;   /* name's length: lookups compare it first */
};

struct h1_head {
	unsigned minor;  /* HTTP/1.minor */
	unsigned status; /* 100..999 */
	size_t head_len; /* bytes of the head, final empty line included */
	size_t n_fields;
	struct h1_field fields[H1_MAX_HEADERS]; /* only the first n_fields are set */
};

enum h1_result {
	H1_OK = 1,
	H1_MORE = 0,     /* incomplete: read more */
	H1_BAD = -1,     /* not a valid HTTP/1.x response head */
	H1_TOO_BIG = -2, /* over max bytes or H1_MAX_HEADERS fields */
};

/* Parse the response head at the start of buf[0..len). The head may take at
 * most max bytes. On H1_OK the head's bytes are rewritten in place (field
 * names and values NUL-terminated) and out points into buf; the body
 * starts at buf + out->head_len. */
enum h1_result h1_parse_response_head(char *buf, size_t len, size_t max, struct h1_head *out);

/* The value of the first field called name (case-insensitive), or NULL. */
const char *h1_field(const struct h1_head *h, const char *name);
/* Does a comma-separated field (all fields of that name) list token? */
bool h1_field_has_token(const struct h1_head *h, const char *name, const char *token);
/* Does the comma-separated list s contain token (case-insensitive)? */
bool h1_list_has_token(const char *s, const char *token);
/* ... token of tlen bytes (not NUL-terminated). The one splitting of a
 * Connection list: every hop-by-hop rule uses it (relay/hop.c). */
bool h1_list_has_token_n(const char *s, const char *token, size_t tlen);

enum h1_body_kind {
	H1_BODY_NONE,    /* no body (HEAD, 1xx, 204, 304) */
	H1_BODY_LENGTH,  /* Content-Length bytes */
	H1_BODY_CHUNKED, /* chunked transfer coding */
	H1_BODY_CLOSE,   /* until the connection closes */
};

/* How the body of a response is delimited (RFC 9112 §6.3). -1 when it
 * cannot be told safely (an invalid or conflicting Content-Length). */
int h1_response_body(const struct h1_head *h, bool head_request, enum h1_body_kind *kind,
		     uint64_t *length);

/* The chunked transfer coding, decoded in place. */
struct h1_chunked {
	int state;
	uint64_t left;   /* data bytes left in the current chunk */
	unsigned digits; /* hex digits of the size line so far */
	size_t line_len; /* bytes of the current size or trailer line */
	size_t trailer;  /* trailer bytes so far */
	bool ext;        /* inside chunk extensions */
	bool done;       /* the last chunk and the trailer section are in */
};

#define H1_CHUNK_LINE_MAX 4096 /* chunk-size line with extensions */
#define H1_TRAILER_MAX 16384   /* trailer section; the trailers are dropped */

void h1_chunked_init(struct h1_chunked *c);
/* Decode buf[0..len) in place: the data bytes are moved to the front of buf
 * and counted in the return value; -1 on a framing error. Sets *used to the
 * input bytes consumed (less than len only once c->done). */
ssize_t h1_chunked_decode(struct h1_chunked *c, char *buf, size_t len, size_t *used);
