/* Random ids (tasks, sessions, tokens) and comparing a secret in constant
 * time. */
#pragma once
#include <stdbool.h>

/* 32 lowercase hex chars + NUL from getrandom(). 0 or -errno. */
int random_id(char out[33]);
/* Constant-time comparison of two strings (length leaks only). */
bool secret_equal(const char *a, const char *b);
/* s has random_id's form: 32 lowercase hex chars. */
bool is_hex_id(const char *s);
