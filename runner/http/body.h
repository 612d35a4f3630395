/* A request body as JSON: the one reader (a JSON object, or an array where a route takes
 * one) and the one set of typed getters, each error INVALID_REQUEST_BODY in the words of the
 * routes' schemas (task/request.h): "field 'K' must be a string". Pure: no request, no I/O, so
 * the fuzz targets and unit tests call what the handlers call. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct error;

/* How a route reads its body. */
struct http_json_opts {
	bool array;       /* a JSON array, else a JSON object */
	bool allow_empty; /* an empty body is {} (or []) */
	/* Put before a syntax error's "invalid JSON at line L column C: why", for the routes of
	 * an API with words of its own (execd's files routes: "error parsing request, "); NULL:
	 * nothing. The reader itself has no API's policy. */
	const char *syntax_prefix;
};
/* data as o says (duplicate keys refused), or NULL with err set (INVALID_REQUEST_BODY). */
json_t *http_parse_json(const char *data, size_t len, const struct http_json_opts *o,
			struct error *err);
/* data as a JSON object (duplicate keys refused), or NULL with err set
 * (INVALID_REQUEST_BODY). allow_empty: an empty body is {}. */
json_t *http_parse_json_object(const char *data, size_t len, bool allow_empty, struct error *err);

/* Typed fields of a JSON object. A field missing or JSON null is absent: 0 with *out NULL or
 * *has false. Otherwise a field of the wrong type or range is -1 with err set naming it. */
/* A string without NUL bytes; required: absent is an error too. */
int body_str(json_t *o, const char *key, bool required, const char **out, struct error *err);
/* An integer from 0 to max. */
int body_uint(json_t *o, const char *key, uint64_t max, bool *has, uint64_t *out,
	      struct error *err);
/* A boolean. */
int body_bool(json_t *o, const char *key, bool *has, bool *out, struct error *err);
