/* Unified diffs of two texts (pure): the checkpoints' ?patch=1. Lines are
 * matched by a longest common subsequence over what lies between the
 * common head and tail, bounded (UDIFF_MAX_CELLS): beyond it that middle
 * is shown as removed then added, still a correct patch. */
#pragma once
#include <stdbool.h>
#include <stddef.h>

#define UDIFF_MAX_CELLS (4u * 1024 * 1024)
#define UDIFF_CONTEXT 3

/* True when data looks like text: no NUL byte in its first 8 KiB. */
bool udiff_is_text(const char *data, size_t len);
/* The patch from a to b ("--- a_name", "+++ b_name", hunks), malloc'd and
 * NUL-terminated, *out_len its length; NULL when out of memory. Identical
 * texts give an empty string. */
char *udiff(const char *a, size_t alen, const char *b, size_t blen, const char *a_name,
	    const char *b_name, size_t *out_len);
