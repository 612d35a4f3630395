/* OpenSandbox execd's runtime init and lifecycle hooks, the parsing half (pure: no I/O, no
 * runner state; unit-tested in tests/unit/test_lifecycle.c, fuzzed by
 * tests/fuzz/fuzz_lifecycle.c): the body of POST /internal/init, checked whole before anything
 * is applied so that a bad body never uses the init slot, and a lifecycle configuration as JSON
 * or as execd's lifecycle.toml (the fields: docs/design/profiles.md). */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct error;

#define LC_MAX_PERIODIC 16
#define LC_MAX_ARGV 64
#define LC_MAX_WARNINGS 8
#define LC_TIMEOUT_DEFAULT 60 /* seconds, OSEP-0020 R5 */
#define LC_TIMEOUT_MAX 300    /* the server's range is 1..300 s */

struct lc_hook {
	char name[64]; /* periodic: its name; preStart: "preStart" */
	char **argv;   /* NULL-terminated, owned; a string command is sh -c */
	unsigned timeout_s;
	unsigned interval_s;   /* periodic only */
	bool abort_on_failure; /* preStart: failurePolicy Abort (the default) */
};

struct lc_warnings {
	unsigned n;
	char msg[LC_MAX_WARNINGS][160];
};

struct lc_config {
	bool has_prestart;
	struct lc_hook prestart;
	unsigned n_periodic;
	struct lc_hook periodic[LC_MAX_PERIODIC];
};

/* A warning (what was ignored), printf-style; past LC_MAX_WARNINGS the
 * last one says so. */
void lc_warn(struct lc_warnings *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* 0, or -1 with err set (INVALID_REQUEST_BODY naming the field). out is
 * zeroed first and must be freed with lc_free either way. */
int lc_parse_json(json_t *obj, struct lc_config *out, struct lc_warnings *w, struct error *err);
int lc_parse_toml(const char *text, size_t len, struct lc_config *out, struct lc_warnings *w,
		  struct error *err);
void lc_free(struct lc_config *c);
/* The configuration as JSON (for GET /ready and the status file); new ref. */
json_t *lc_to_json(const struct lc_config *c);

enum rt_entrypoint_policy { RT_EP_KEEP, RT_EP_RESTART };

#define RT_MAX_ENVS 256
#define RT_MAX_ENV_BYTES (64 * 1024)
#define RT_MAX_ATTRS 64

struct rt_init_req {
	const char *sandbox_id; /* points into the body */
	uint64_t generation;
	enum rt_entrypoint_policy entrypoint_policy;
	bool has_token_hash;
	unsigned char token_hash[32];
	json_t *envs; /* borrowed: an object of strings, or NULL */
	bool has_lifecycle;
	struct lc_config lifecycle;
	json_t *attributes; /* borrowed: an object of strings, or NULL */
	struct lc_warnings warnings;
};

/* The whole body checked: 0, or -1 with err set (INVALID_REQUEST_BODY).
 * out must be freed with rt_init_req_free either way. */
int rt_parse_init(json_t *body, struct rt_init_req *out, struct error *err);
void rt_init_req_free(struct rt_init_req *req);
/* "sha256:<64 hex>" to 32 bytes: 0 or -1. */
int rt_parse_token_hash(const char *s, unsigned char out[32]);

/* toml.c: the TOML subset of lifecycle.toml as a JSON object (new ref), or NULL with err set
 * (INVALID_REQUEST_BODY, naming the line). */
json_t *toml_to_json(const char *text, size_t len, struct error *err);
