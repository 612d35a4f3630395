/* UTF-8 as RFC 3629 has it: no overlong forms, no surrogates, nothing past
 * U+10FFFF. */
#pragma once
#include <stdbool.h>
#include <stddef.h>

bool utf8_valid(const unsigned char *s, size_t len);
/* Length of the valid UTF-8 sequence at s (1-4), or 0 if invalid. */
size_t utf8_seq_len(const unsigned char *s, size_t len);
/* Length (0-3) of a trailing incomplete but so-far valid UTF-8 sequence. */
size_t utf8_incomplete_tail(const unsigned char *s, size_t len);
