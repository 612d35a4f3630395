/* The TOML subset of execd's lifecycle.toml, read into JSON (toml.c): pure, bounded. */
#pragma once
#include <jansson.h>
#include <stddef.h>

struct error;
/* text as a JSON object (new ref), or NULL with err set (INVALID_REQUEST_BODY, naming the
 * line). */
json_t *toml_to_json(const char *text, size_t len, struct error *err);
