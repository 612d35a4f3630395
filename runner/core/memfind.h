/* The first of either byte (a line's end: '\n' or '\r'), 16 bytes at a time (SSE2): musl's
 * memchr, in the static build, goes a word at a time and was the runner's top function on execd
 * streams (the line splitter). */
#pragma once
#include <stddef.h>

const char *mem_find2(const char *s, char a, char b, size_t n);
