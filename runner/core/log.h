/* Logs: one JSON object per line on stderr. Never pass secrets. */
#pragma once
#include <stddef.h>
#include <stdint.h>

/* fmt is a jansson json_pack() format for extra fields, e.g. "{s:s,s:i}",
 * or NULL for none. */
void log_json(const char *level, const char *msg, const char *fmt, ...);
#define log_info(msg, ...) log_json("info", msg, __VA_ARGS__)
#define log_warn(msg, ...) log_json("warn", msg, __VA_ARGS__)
#define log_error(msg, ...) log_json("error", msg, __VA_ARGS__)
/* The sandbox a runtime init bound the box to (init/runtime.c): every
 * line after it carries sandboxId and generation. NULL: none. */
void log_set_context(const char *sandbox_id, uint64_t generation);
/* An error from a system call: adds "errno" and "error" (strerror). */
void log_errno(const char *msg, int err, const char *what);

uint64_t now_ms(void);       /* wall clock, ms since the epoch */
uint64_t monotonic_ms(void); /* CLOCK_MONOTONIC */
uint64_t monotonic_us(void);
/* ms since the epoch as RFC 3339 UTC with milliseconds
 * (2026-01-02T03:04:05.678Z); len >= 32. */
void iso_time_ms(char *out, size_t len, uint64_t ms);
