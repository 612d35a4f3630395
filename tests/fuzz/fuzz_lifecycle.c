/* fuzz_lifecycle: runtime init's body and the lifecycle configuration
 * (runner/init/config.c, runner/init/toml.c): the TOML subset of execd's lifecycle.toml and
 * the JSON of OPEN_SANDBOX_LIFECYCLE and of POST /internal/init.
 *
 * Input: byte 0 picks the parser (%3: 0 TOML, 1 lifecycle JSON, 2 the init
 * body), the rest is the text. Checked beyond the sanitizers: an accepted
 * configuration has hooks with a non-empty argv[0], at most LC_MAX_ARGV words
 * each without NUL, timeouts in 1..300 s, periodic hooks named, with an
 * interval and distinct names; its JSON form parses again to the same JSON;
 * a refusal has a code and a message; parsing twice gives the same verdict. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "init/config.h"

static void check_hook(const struct lc_hook *h, int periodic)
{
	if (!h->argv || !h->argv[0] || !h->argv[0][0])
		abort();
	size_t n = 0;
	for (; h->argv[n]; n++)
		;
	if (n > LC_MAX_ARGV)
		abort();
	if (h->timeout_s < 1 || h->timeout_s > LC_TIMEOUT_MAX)
		abort();
	if (periodic && (!h->name[0] || h->interval_s < 1 || h->abort_on_failure))
		abort();
}

static void check_config(const struct lc_config *c)
{
	if (c->has_prestart)
		check_hook(&c->prestart, 0);
	if (c->n_periodic > LC_MAX_PERIODIC)
		abort();
	for (unsigned i = 0; i < c->n_periodic; i++) {
		check_hook(&c->periodic[i], 1);
		for (unsigned j = 0; j < i; j++)
			if (!strcmp(c->periodic[i].name, c->periodic[j].name))
				abort();
	}
	/* The JSON form is a valid configuration of the same hooks. */
	json_t *a = lc_to_json(c);
	struct lc_config c2;
	struct lc_warnings w = {0};
	struct error e;
	if (!a || lc_parse_json(a, &c2, &w, &e) < 0)
		abort();
	json_t *b = lc_to_json(&c2);
	if (!b || !json_equal(a, b))
		abort();
	json_decref(a);
	json_decref(b);
	lc_free(&c2);
}

static int run_once(int mode, const char *text, size_t len, char *msg, size_t msgsz)
{
	struct error e;
	error_clear(&e);
	struct lc_warnings w = {0};
	int rc;
	if (mode == 0) {
		struct lc_config c;
		rc = lc_parse_toml(text, len, &c, &w, &e);
		if (rc == 0)
			check_config(&c);
		lc_free(&c);
	} else {
		json_error_t jerr;
		json_t *j = json_loadb(text, len, 0, &jerr);
		if (!j) {
			msg[0] = 0;
			return 2;
		}
		if (mode == 1) {
			struct lc_config c;
			rc = lc_parse_json(j, &c, &w, &e);
			if (rc == 0)
				check_config(&c);
			lc_free(&c);
		} else {
			struct rt_init_req q;
			rc = rt_parse_init(j, &q, &e);
			if (rc == 0) {
				if (!q.sandbox_id || !*q.sandbox_id)
					abort();
				if (q.has_lifecycle)
					check_config(&q.lifecycle);
			}
			rt_init_req_free(&q);
		}
		json_decref(j);
	}
	if (w.n > LC_MAX_WARNINGS)
		abort();
	if (rc < 0 && (!e.msg[0] || !e.code))
		abort();
	snprintf(msg, msgsz, "%s", rc < 0 ? e.msg : "");
	return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	int mode = data[0] % 3;
	const char *text = (const char *)data + 1;
	size_t len = size - 1;
	char m1[ERROR_MSG_MAX], m2[ERROR_MSG_MAX];
	int a = run_once(mode, text, len, m1, sizeof(m1));
	int b = run_once(mode, text, len, m2, sizeof(m2));
	if (a != b || strcmp(m1, m2) != 0)
		abort();
	return 0;
}
