/* Base64 (RFC 4648, the standard alphabet, padded), and hex digits. */
#pragma once
#include <stddef.h>

#include "core/buf.h"

/* Base64 of s at o ((len + 2) / 3 * 4 bytes, padded). Returns that. */
size_t base64_encode_to(char *o, const unsigned char *s, size_t len);
int buf_append_base64(struct buf *b, const unsigned char *s, size_t len);
/* A character's value in the standard or the URL-safe alphabet (both at once: a decoder
 * takes either), -1 for any other. */
int base64_value(unsigned char c);
/* A hex digit's value (either case), -1 for any other character. */
int hex_value(unsigned char c);
