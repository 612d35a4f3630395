/* A request body as JSON: see body.h. */
#include "http/body.h"

#include <string.h>

#include "core/cleanup.h"
#include "core/error.h"

#define BAD "INVALID_REQUEST_BODY"

json_t *http_parse_json(const char *data, size_t len, const struct http_json_opts *o,
			struct error *err)
{
	const char *want = o->array ? "the request body must be a JSON array"
				    : "the request body must be a JSON object";
	if (len == 0) {
		if (o->allow_empty)
			return o->array ? json_array() : json_object();
		error_set(err, 0, BAD, "%s", want);
		return NULL;
	}
	json_error_t jerr;
	/* Depth is bounded by jansson (JSON_PARSER_MAX_DEPTH); NUL bytes in
	 * strings are refused unless asked for, which we never do. */
	cleanup_json json_t *j = json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!j) {
		error_set(err, 0, BAD, "%sinvalid JSON at line %d column %d: %s",
			  o->syntax_prefix ? o->syntax_prefix : "", jerr.line, jerr.column,
			  jerr.text);
		return NULL;
	}
	if (o->array ? !json_is_array(j) : !json_is_object(j)) {
		error_set(err, 0, BAD, "%s", want);
		return NULL;
	}
	return take_ptr(j);
}

json_t *http_parse_json_object(const char *data, size_t len, bool allow_empty, struct error *err)
{
	return http_parse_json(data, len, &(struct http_json_opts){.allow_empty = allow_empty},
			       err);
}

/* The field, or NULL when it is missing or null. */
static json_t *field(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);
	return v && !json_is_null(v) ? v : NULL;
}

int body_str(json_t *o, const char *key, bool required, const char **out, struct error *err)
{
	json_t *v = field(o, key);
	*out = NULL;
	if (!v)
		return required ? error_set(err, 0, BAD, "field '%s' is required", key) : 0;
	if (!json_is_string(v))
		return error_set(err, 0, BAD, "field '%s' must be a string", key);
	if (strlen(json_string_value(v)) != json_string_length(v))
		return error_set(err, 0, BAD, "field '%s' contains a NUL byte", key);
	*out = json_string_value(v);
	return 0;
}

int body_uint(json_t *o, const char *key, uint64_t max, bool *has, uint64_t *out, struct error *err)
{
	json_t *v = field(o, key);
	*has = false;
	if (!v)
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < 0 ||
	    (uint64_t)json_integer_value(v) > max)
		return error_set(err, 0, BAD, "field '%s' must be an integer between 0 and %llu",
				 key, (unsigned long long)max);
	*has = true;
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

int body_bool(json_t *o, const char *key, bool *has, bool *out, struct error *err)
{
	json_t *v = field(o, key);
	*has = false;
	if (!v)
		return 0;
	if (!json_is_boolean(v))
		return error_set(err, 0, BAD, "field '%s' must be a boolean", key);
	*has = true;
	*out = json_is_true(v);
	return 0;
}
