/* Unit tests of the model wire formats (runner/model/wire*.c), their usage
 * scanners (every split point of the body gives the same usage) and the
 * per-task budget (runner/model/budget.c). */
#include "model/budget.h"
#include "model/wire.h"

#include <stdlib.h>

#include "unit.h"

struct scanned {
	bool has;
	struct mu_usage u;
};

static struct scanned scan_pieces(const struct wire *w, const char *s, size_t n, size_t cut1,
				  size_t piece)
{
	struct wire_scan sc;
	wire_scan_init(&sc, w);
	/* The head up to cut1 in one piece, the rest in pieces of `piece`. */
	wire_scan_feed(&sc, s, cut1);
	for (size_t i = cut1; i < n; i += piece)
		wire_scan_feed(&sc, s + i, n - i < piece ? n - i : piece);
	wire_scan_eof(&sc);
	struct scanned r = {sc.has_usage, sc.usage};
	wire_scan_free(&sc);
	return r;
}

static bool same(const struct scanned *a, const struct scanned *b)
{
	return a->has == b->has && !memcmp(&a->u, &b->u, sizeof(a->u));
}

/* Every two-way split and every piece size gives the whole body's answer. */
static bool split_invariant(const struct wire *w, const char *s, struct scanned *whole)
{
	size_t n = strlen(s);
	*whole = scan_pieces(w, s, n, n, 1);
	for (size_t cut = 0; cut <= n; cut++) {
		struct scanned r = scan_pieces(w, s, n, cut, n ? n : 1);
		if (!CHECKF(same(&r, whole), "split at %zu changes the usage", cut))
			return false;
	}
	for (size_t piece = 1; piece <= 17; piece++) {
		struct scanned r = scan_pieces(w, s, n, 0, piece);
		if (!CHECKF(same(&r, whole), "pieces of %zu change the usage", piece))
			return false;
	}
	return true;
}

/* clang-format off */
static const char *anthropic_stream =
	"event: message_start\r\n"
	"data: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":21,"
	"\"cache_creation_input_tokens\":5,\"cache_read_input_tokens\":7,\"output_tokens\":1}}}\r\n\r\n"
	": ping\n\n"
	"event: content_block_delta\n"
	"data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\","
	"\"text\":\"usage\"}}\n\n"
	"event: message_delta\n"
	"data: {\"type\":\"message_delta\",\n"
	"data: \"usage\":{\"output_tokens\":9}}\n\n"
	"event: message_stop\n"
	"data: {\"type\":\"message_stop\"}";            /* no final blank line */

static const char *gemini_sse =
	"data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"a\"}]}}],\"usageMetadata\":"
	"{\"promptTokenCount\":8,\"candidatesTokenCount\":1,\"totalTokenCount\":9}}\r\n\r\n"
	"data: {\"candidates\":[],\"usageMetadata\":{\"promptTokenCount\":8,"
	"\"candidatesTokenCount\":4,\"thoughtsTokenCount\":3,\"cachedContentTokenCount\":2,"
	"\"totalTokenCount\":15}}\r\n\r\n";

static const char *gemini_array =
	"  [{\"usageMetadata\":{\"promptTokenCount\":10,\"totalTokenCount\":11,"
	"\"candidatesTokenCount\":1}},\r\n"
	"{\"usageMetadata\":{\"promptTokenCount\":10,\"candidatesTokenCount\":2,"
	"\"totalTokenCount\":12}}]";

static const char *openai_stream =
	"data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n"
	"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":4,"
	"\"total_tokens\":15,\"prompt_tokens_details\":{\"cached_tokens\":3}}}\n\n"
	"data: [DONE]\n\n";
/* clang-format on */

TEST(anthropic_stream_usage_every_split)
{
	struct scanned w;
	if (!split_invariant(&wire_anthropic, anthropic_stream, &w))
		return;
	CHECK(w.has);
	CHECK(w.u.prompt_tokens == 33);
	CHECK(w.u.completion_tokens == 9);
	CHECK(w.u.total_tokens == 42);
	CHECK(w.u.cache_read_tokens == 7);
	CHECK(w.u.cache_creation_tokens == 5);
}

TEST(anthropic_whole_message_and_count_tokens)
{
	struct scanned w;
	const char *msg = "{\"type\":\"message\",\"content\":[],\"usage\":{\"input_tokens\":3,"
			  "\"output_tokens\":2}}";
	if (!split_invariant(&wire_anthropic, msg, &w))
		return;
	CHECK(w.has && w.u.total_tokens == 5 && w.u.prompt_tokens == 3);
	/* count_tokens' answer is no usage; neither is a message_delta alone
	 * in a plain document, nor negative or absurd counts. */
	split_invariant(&wire_anthropic, "{\"input_tokens\":17}", &w);
	CHECK(!w.has);
	split_invariant(
		&wire_anthropic,
		"data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":-4,"
		"\"output_tokens\":1099511627777}}}\n\n",
		&w);
	CHECK(!w.has);
}

TEST(gemini_sse_and_array_every_split)
{
	struct scanned w;
	if (!split_invariant(&wire_gemini, gemini_sse, &w))
		return;
	CHECK(w.has);
	CHECK(w.u.prompt_tokens == 8);
	CHECK(w.u.completion_tokens == 7); /* candidates + thoughts */
	CHECK(w.u.total_tokens == 15);
	CHECK(w.u.cache_read_tokens == 2);
	if (!split_invariant(&wire_gemini, gemini_array, &w))
		return;
	CHECK(w.has && w.u.total_tokens == 12 && w.u.completion_tokens == 2);
}

TEST(openai_stream_every_split)
{
	struct scanned w;
	if (!split_invariant(&wire_openai, openai_stream, &w))
		return;
	CHECK(w.has && w.u.total_tokens == 15 && w.u.cache_read_tokens == 3);
	/* A Responses API event carries it under "response". */
	split_invariant(&wire_openai,
			"event: response.completed\ndata: {\"type\":\"response.completed\","
			"\"response\":{\"usage\":{\"input_tokens\":6,\"output_tokens\":2}}}\n\n",
			&w);
	CHECK(w.has && w.u.total_tokens == 8);
	/* An embeddings answer: one JSON document, after blanks. */
	split_invariant(
		&wire_openai,
		"  {\"object\":\"list\",\"usage\":{\"prompt_tokens\":3,\"total_tokens\":3}}", &w);
	CHECK(w.has && w.u.prompt_tokens == 3 && w.u.total_tokens == 3);
}

TEST(oversized_event_is_skipped_not_misread)
{
	/* An event past MU_MAX_EVENT is skipped whole: its usage is not taken,
	 * and the framing resumes at the next event. */
	size_t big = MU_MAX_EVENT + 10;
	char *s = malloc(big + 400);
	if (!CHECK(s))
		return;
	size_t o = (size_t)sprintf(s, "data: {\"usage\":{\"total_tokens\":999},\"x\":\"");
	memset(s + o, 'a', big);
	o += big;
	o += (size_t)sprintf(s + o, "\"}\n\ndata: {\"usage\":{\"prompt_tokens\":2,\"completion_"
				    "tokens\":1}}\n\n");
	struct scanned a = scan_pieces(&wire_openai, s, o, 0, 4096);
	struct scanned b = scan_pieces(&wire_openai, s, o, o, 1);
	CHECK(same(&a, &b));
	CHECK(a.has && a.u.total_tokens == 3);
	free(s);
}

TEST(routes)
{
	struct wire_route rt;
	enum wire_match m;
	const struct wire *w = wire_find("/v1/messages", &rt, &m);
	CHECK(w == &wire_anthropic && m == WIRE_ROUTE && rt.post && !rt.get && rt.metered);
	CHECK_STR(rt.path, "/messages");
	w = wire_find("/v1/messages/count_tokens", &rt, &m);
	CHECK(w == &wire_anthropic && m == WIRE_ROUTE && !rt.metered);
	w = wire_find("/v1/messages/batches", &rt, &m);
	CHECK(w == &wire_anthropic && m == WIRE_UNKNOWN);
	w = wire_find("/v1/messagesx", &rt, &m);
	CHECK(w == &wire_openai && m == WIRE_UNKNOWN);
	w = wire_find("/v1beta/models/gemini-2.5-flash:streamGenerateContent", &rt, &m);
	CHECK(w == &wire_gemini && m == WIRE_ROUTE && rt.base == WIRE_BASE_ROOT && rt.metered);
	CHECK_STR(rt.path, "/v1beta/models/gemini-2.5-flash:streamGenerateContent");
	w = wire_find("/v1beta/models/m:countTokens", &rt, &m);
	CHECK(w == &wire_gemini && m == WIRE_ROUTE && !rt.metered);
	w = wire_find("/v1beta/models/../x:generateContent", &rt, &m);
	CHECK(w == &wire_gemini && m == WIRE_UNKNOWN);
	w = wire_find("/v1beta/models/.x:generateContent", &rt, &m);
	CHECK(m == WIRE_UNKNOWN);
	w = wire_find("/v1beta/models/m:deleteEverything", &rt, &m);
	CHECK(m == WIRE_UNKNOWN);
	w = wire_find("/v1/models/gemini-test:streamGenerateContent", &rt, &m);
	CHECK(w == &wire_gemini && m == WIRE_ROUTE && rt.base == WIRE_BASE_ROOT);
	CHECK_STR(rt.path, "/v1beta/models/gemini-test:streamGenerateContent");
	w = wire_find("/v1/models/gpt-4o", &rt, &m);
	CHECK(w == &wire_openai && m == WIRE_UNKNOWN);
	w = wire_find("/v1/chat/completions", &rt, &m);
	CHECK(w == &wire_openai && m == WIRE_ROUTE && rt.base == WIRE_BASE_V1);
	CHECK_STR(rt.path, "/chat/completions");
	w = wire_find("/admin", &rt, &m);
	CHECK(!w && m == WIRE_NO);
}

TEST(headers_forwarded)
{
	CHECK(wire_header_forwarded("anthropic-version", NULL));
	CHECK(wire_header_forwarded("anthropic-beta", NULL));
	CHECK(wire_header_forwarded("User-Agent", NULL));
	CHECK(wire_header_forwarded("x-goog-api-client", NULL));
	const char *never[] = {"Authorization",
			       "X-Api-Key",
			       "x-goog-api-key",
			       "Connection",
			       "Transfer-Encoding",
			       "Host",
			       "Content-Length",
			       "Accept-Encoding",
			       "Proxy-Authorization",
			       "Upgrade",
			       "TE",
			       "Keep-Alive"};
	for (size_t i = 0; i < sizeof(never) / sizeof(never[0]); i++)
		CHECKF(!wire_header_forwarded(never[i], NULL), "%s is forwarded", never[i]);
}

TEST(error_shapes)
{
	json_t *j = wire_anthropic.error(429, "budget_exceeded", "spent");
	CHECK_STR(json_string_value(json_object_get(j, "type")), "error");
	CHECK_STR(json_string_value(json_object_get(json_object_get(j, "error"), "type")),
		  "budget_exceeded");
	json_decref(j);
	j = wire_anthropic.error(401, "invalid_api_key", "no");
	CHECK_STR(json_string_value(json_object_get(json_object_get(j, "error"), "type")),
		  "authentication_error");
	json_decref(j);
	j = wire_gemini.error(429, "budget_exceeded", "spent");
	json_t *e = json_object_get(j, "error");
	CHECK(json_integer_value(json_object_get(e, "code")) == 429);
	CHECK_STR(json_string_value(json_object_get(e, "status")), "RESOURCE_EXHAUSTED");
	CHECK_STR(json_string_value(
			  json_object_get(json_array_get(json_object_get(e, "details"), 0),
					  "reason")),
		  "budget_exceeded");
	json_decref(j);
	j = wire_openai.error(429, "budget_exceeded", "spent");
	e = json_object_get(j, "error");
	CHECK_STR(json_string_value(json_object_get(e, "type")), "budget_exceeded");
	CHECK_STR(json_string_value(json_object_get(e, "code")), "budget_exceeded");
	json_decref(j);
}

TEST(budget_admits_until_spent)
{
	struct budget b = {.max_tokens = 50, .max_requests = 3};
	char why[256];
	struct mu_usage u = {.prompt_tokens = 30, .completion_tokens = 12, .total_tokens = 42};
	CHECK(budget_admit(&b, 0, why, sizeof(why)) == BUDGET_ADMIT);
	budget_charge(&b, &u);
	CHECK(!budget_spent(&b));
	CHECK(budget_admit(&b, 0, why, sizeof(why)) == BUDGET_ADMIT);
	budget_charge(&b, &u); /* 84: the call in flight crossed the line */
	CHECK(budget_spent(&b));
	CHECK(budget_admit(&b, 0, why, sizeof(why)) == BUDGET_SPENT);
	CHECK(strstr(why, "max_tokens 50") != NULL);
	json_t *j = budget_json(&b);
	CHECK(json_integer_value(json_object_get(j, "overshoot_tokens")) == 34);
	CHECK(json_integer_value(json_object_get(j, "refused")) == 1);
	CHECK(json_is_true(json_object_get(j, "exhausted")));
	json_decref(j);
	struct budget r = {.max_requests = 1};
	CHECK(budget_admit(&r, 0, why, sizeof(why)) == BUDGET_ADMIT);
	CHECK(budget_admit(&r, 0, why, sizeof(why)) == BUDGET_SPENT);
	CHECK(strstr(why, "max_model_requests 1") != NULL);
	struct budget none = {0};
	for (int i = 0; i < 1000; i++)
		budget_admit(&none, 100, why, sizeof(why));
	CHECK(!budget_spent(&none) && none.requests == 1000 && !budget_json(&none));
}

/* Calls in flight hold what they may cost: a second call cannot start on
 * the remainder the first may spend; it is told to retry (held, not
 * spent), and once the first settles the budget decides again. */
TEST(budget_holds_calls_in_flight)
{
	struct budget b = {.max_tokens = 100};
	char why[256];
	CHECK(budget_admit(&b, 50 + BUDGET_OUT_HOLD, why, sizeof(why)) == BUDGET_ADMIT);
	CHECK(b.reserved == 50 + BUDGET_OUT_HOLD);
	for (int i = 0; i < 16; i++)
		CHECK(budget_admit(&b, 50 + BUDGET_OUT_HOLD, why, sizeof(why)) == BUDGET_HELD);
	CHECK(strstr(why, "held") != NULL && b.held_back == 16 && b.refused == 0);
	CHECK(b.requests == 1 && !budget_spent(&b));
	/* A call that is not metered (a model list) holds nothing and passes. */
	CHECK(budget_admit(&b, 0, why, sizeof(why)) == BUDGET_ADMIT);
	budget_hold_more(&b, 10);
	struct mu_usage u = {.prompt_tokens = 10, .completion_tokens = 290, .total_tokens = 300};
	budget_settle(&b, 60 + BUDGET_OUT_HOLD, &u);
	CHECK(b.reserved == 0 && b.used.total_tokens == 300);
	CHECK(budget_admit(&b, 50 + BUDGET_OUT_HOLD, why, sizeof(why)) == BUDGET_SPENT);
	json_t *j = budget_json(&b);
	CHECK(json_integer_value(json_object_get(j, "held_back")) == 16);
	json_decref(j);
	/* Settling releases at most what is held. */
	budget_settle(&b, 1000, NULL);
	CHECK(b.reserved == 0);
	/* Room for two holds: the third waits. */
	struct budget big = {.max_tokens = 3 * BUDGET_OUT_HOLD};
	CHECK(budget_admit(&big, 2 * BUDGET_OUT_HOLD, why, sizeof(why)) == BUDGET_ADMIT);
	CHECK(budget_admit(&big, 2 * BUDGET_OUT_HOLD, why, sizeof(why)) == BUDGET_ADMIT);
	CHECK(budget_admit(&big, 1, why, sizeof(why)) == BUDGET_HELD);
}

/* A call whose answer did not report all it used: what it reported, plus
 * the answer bytes after its last report as output; nothing reported: its
 * input from the request's bytes too. */
TEST(budget_estimates_unreported_usage)
{
	struct mu_usage u;
	budget_estimate(&u, NULL, 401, 1000);
	CHECK(u.prompt_tokens == 101 && u.completion_tokens == 250 && u.total_tokens == 351);
	struct mu_usage rep = {.prompt_tokens = 21,
			       .completion_tokens = 1,
			       .total_tokens = 22,
			       .cache_read_tokens = 5};
	budget_estimate(&u, &rep, 1u << 20, 40);
	CHECK(u.prompt_tokens == 21 && u.completion_tokens == 11 && u.total_tokens == 32);
	CHECK(u.cache_read_tokens == 5);
	/* The gateway's larger total is kept, as for a reported usage. */
	rep.total_tokens = 100;
	budget_estimate(&u, &rep, 0, 4);
	CHECK(u.completion_tokens == 2 && u.total_tokens == 101);
	budget_estimate(&u, NULL, 0, 0);
	CHECK(u.total_tokens == 0);
	CHECK(budget_tokens_of(0) == 0 && budget_tokens_of(1) == 1 && budget_tokens_of(8) == 2);
}

static void model_of(const struct wire *w, const char *body, char *out, size_t outlen)
{
	struct wire_scan sc;
	wire_scan_init(&sc, w);
	wire_scan_feed(&sc, body, strlen(body));
	wire_scan_eof(&sc);
	snprintf(out, outlen, "%s", sc.model);
	wire_scan_free(&sc);
}

/* The audit trail's model: the first one the gateway's answer names, in
 * each format's place; nothing printable or too long is kept. */
TEST(model_named_by_the_answer)
{
	char m[160];
	model_of(&wire_anthropic, anthropic_stream, m, sizeof(m));
	CHECK(!strcmp(m, "")); /* this message_start names none */
	model_of(&wire_anthropic,
		 "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":"
		 "\"claude-x\",\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n",
		 m, sizeof(m));
	CHECK(!strcmp(m, "claude-x"));
	model_of(&wire_openai,
		 "data: {\"model\":\"gpt-a\",\"choices\":[],\"usage\":{\"prompt_tokens\":1,"
		 "\"completion_tokens\":1,\"total_tokens\":2}}\n\ndata: {\"model\":\"gpt-b\","
		 "\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1,\"total_tokens\":2}}\n\n"
		 "data: [DONE]\n\n",
		 m, sizeof(m));
	CHECK(!strcmp(m, "gpt-a"));
	model_of(&wire_gemini,
		 "data: {\"modelVersion\":\"gemini-z\",\"usageMetadata\":{\"promptTokenCount\":1,"
		 "\"candidatesTokenCount\":1,\"totalTokenCount\":2}}\n\n",
		 m, sizeof(m));
	CHECK(!strcmp(m, "gemini-z"));
	model_of(&wire_openai,
		 "data: {\"model\":\"bad\\nname\",\"usage\":{\"prompt_tokens\":1,"
		 "\"completion_tokens\":1,\"total_tokens\":2}}\n\n",
		 m, sizeof(m));
	CHECK(!strcmp(m, ""));
}
