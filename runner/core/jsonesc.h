/* JSON string literals: escaped as Go's encoder does (controls, '"', '\\',
 * DEL), invalid UTF-8 bytes written as U+FFFD. */
#pragma once
#include <stddef.h>

#include "core/buf.h"

/* A JSON string literal (quotes included). */
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
