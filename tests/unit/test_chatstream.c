/* Unit tests of the Chat Completions stream parser (runner/chatstream.c). */
#include "model/chatstream.h"

#include <stdlib.h>

#include "unit.h"

static char deltas[4096];
static size_t ndeltas;

static void on_text(void *arg, const char *t, size_t n)
{
	(void)arg;
	if (ndeltas + n < sizeof(deltas)) {
		memcpy(deltas + ndeltas, t, n);
		ndeltas += n;
		deltas[ndeltas] = 0;
	}
	ndeltas += 0;
}

/* Feed s in pieces of `piece` bytes (every split point is exercised). */
static enum cs_result run(struct chatstream *cs, long status, const char *s, size_t piece)
{
	chatstream_init(cs, on_text, NULL);
	ndeltas = 0;
	deltas[0] = 0;
	chatstream_status(cs, status);
	size_t n = strlen(s);
	for (size_t i = 0; i < n; i += piece)
		chatstream_feed(cs, s + i, n - i < piece ? n - i : piece);
	return chatstream_eof(cs);
}

#define CHUNK(x) "data: " x "\n\n"

/* A data table: one event per line (clang-format would cascade the juxtaposed macros). */
/* clang-format off */
static const char *tool_stream =
	": keep-alive\n\n"
	CHUNK("{\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hi \"}}]}")
	CHUNK("{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"there\"}}]}")
	CHUNK("{\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"c2\",\"type\":\"function\",\"function\":{\"name\":\"bash\",\"arguments\":\"\"}}]}}]}")
	CHUNK("{\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c1\",\"function\":{\"name\":\"ba\",\"arguments\":\"{\\\"comm\"}}]}}]}")
	CHUNK("{\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"name\":\"sh\",\"arguments\":\"and\\\": \\\"ls\\\"}\"}}]}}]}")
	CHUNK("{\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"function\":{\"arguments\":\"{}\"}}]}}]}")
	CHUNK("{\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}")
	CHUNK("{\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3,\"total_tokens\":10}}")
	CHUNK("[DONE]");
/* clang-format on */

TEST(tool_calls_every_split)
{
	for (size_t piece = 1; piece <= strlen(tool_stream); piece++) {
		struct chatstream cs;
		enum cs_result r = run(&cs, 200, tool_stream, piece);
		CHECK(r == CS_OK);
		if (r != CS_OK) {
			unit_diag("piece %zu: %s", piece, cs.message);
			chatstream_free(&cs);
			return;
		}
		CHECK_STR(deltas, "Hi there");
		CHECK(cs.n_tools == 2);
		CHECK_STR(cs.tools[0].id.data, "c1");
		CHECK_STR(cs.tools[0].name.data, "bash");
		CHECK_STR(cs.tools[0].args.data, "{\"command\": \"ls\"}");
		CHECK_STR(cs.tools[1].id.data, "c2");
		CHECK_STR(cs.tools[1].args.data, "{}");
		CHECK(cs.has_usage && cs.usage.total_tokens == 10 && cs.usage.prompt_tokens == 7);
		CHECK_STR(cs.finish_reason, "tool_calls");
		chatstream_free(&cs);
	}
}

TEST(crlf_and_cr)
{
	struct chatstream cs;
	const char *s =
		"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":{\"prompt_tokens\":1,"
		"\"completion_tokens\":1}}\r\n\r\ndata: [DONE]\r\r";
	for (size_t piece = 1; piece < 8; piece++) {
		CHECK(run(&cs, 200, s, piece) == CS_OK);
		CHECK_STR(deltas, "a");
		CHECK(cs.usage.total_tokens == 2); /* summed when absent */
		chatstream_free(&cs);
	}
}

TEST(errors)
{
	struct chatstream cs;
	CHECK(run(&cs, 200, CHUNK("{\"choices\":[{\"delta\":{\"content\":\"x\"}}]}"), 5) ==
	      CS_ERR_MALFORMED);
	CHECK(strstr(cs.message, "[DONE]") != NULL);
	chatstream_free(&cs);

	CHECK(run(&cs, 200, "", 1) == CS_ERR_MALFORMED);
	chatstream_free(&cs);

	CHECK(run(&cs, 200,
		  CHUNK("{\"choices\":[{\"delta\":{\"content\":\"x\"}}]}")
			  CHUNK("{\"error\":{\"message\":\"boom\",\"type\":\"server_error\"}}")
				  CHUNK("[DONE]"),
		  3) == CS_ERR_STREAM);
	CHECK_STR(cs.message, "boom");
	chatstream_free(&cs);

	CHECK(run(&cs, 200, CHUNK("{\"error\":\"plain string error\"}"), 100) == CS_ERR_STREAM);
	CHECK_STR(cs.message, "plain string error");
	chatstream_free(&cs);

	CHECK(run(&cs, 200,
		  CHUNK("{\"error\":{\"message\":\"ExceededTokenBudget: x\",\"type\":\"auth_error\"}}"),
		  100) == CS_ERR_BUDGET);
	chatstream_free(&cs);

	CHECK(run(&cs, 200, CHUNK("{nope") CHUNK("[DONE]"), 4) == CS_ERR_MALFORMED);
	chatstream_free(&cs);

	CHECK(run(&cs, 200, CHUNK("{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":99}]}}]}"),
		  9) == CS_ERR_MALFORMED);
	chatstream_free(&cs);

	/* a gap in tool call indexes */
	CHECK(run(&cs, 200,
		  CHUNK("{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":1,\"function\":{\"name\":\"bash\"}}]}}]}")
			  CHUNK("[DONE]"),
		  9) == CS_ERR_MALFORMED);
	chatstream_free(&cs);
}

TEST(status_classes)
{
	struct chatstream cs;
	CHECK(run(&cs, 400,
		  "{\"error\":{\"message\":\"Budget has been exceeded! Current cost: 2\",\"type\":\"budget_exceeded\",\"code\":\"400\"}}",
		  7) == CS_ERR_BUDGET);
	chatstream_free(&cs);
	CHECK(run(&cs, 429, "{\"error\":{\"message\":\"Max budget limit reached.\"}}", 7) ==
	      CS_ERR_BUDGET);
	chatstream_free(&cs);
	CHECK(run(&cs, 429, "{\"error\":{\"message\":\"Rate limit\"}}", 7) == CS_ERR_RATE_LIMITED);
	chatstream_free(&cs);
	CHECK(run(&cs, 401, "{\"error\":{\"message\":\"bad key\",\"code\":\"invalid_api_key\"}}",
		  3) == CS_ERR_UNAUTHORIZED);
	CHECK_STR(cs.message, "bad key");
	chatstream_free(&cs);
	CHECK(run(&cs, 403, "Forbidden\r\nby policy", 3) == CS_ERR_FORBIDDEN);
	CHECK_STR(cs.message, "Forbidden  by policy");
	chatstream_free(&cs);
	CHECK(run(&cs, 404,
		  "{\"error\":{\"message\":\"The model `x` does not exist\",\"code\":\"model_not_found\"}}",
		  3) == CS_ERR_MODEL);
	chatstream_free(&cs);
	CHECK(run(&cs, 400, "{\"error\":{\"message\":\"Invalid model name passed in model=x\"}}",
		  3) == CS_ERR_MODEL);
	chatstream_free(&cs);
	CHECK(run(&cs, 502, "<html>bad gateway</html>", 3) == CS_ERR_SERVER);
	chatstream_free(&cs);
	CHECK(run(&cs, 500, "", 3) == CS_ERR_SERVER);
	chatstream_free(&cs);
	CHECK(run(&cs, 400, "{\"detail\":\"bad things\"}", 3) == CS_ERR_BAD_REQUEST);
	CHECK_STR(cs.message, "bad things");
	chatstream_free(&cs);
}

TEST(retry_policy)
{
	CHECK(chatstream_retry_ms(CS_ERR_RATE_LIMITED, 1, "2") == 2000);
	CHECK(chatstream_retry_ms(CS_ERR_RATE_LIMITED, 1, "0.5") == 500);
	CHECK(chatstream_retry_ms(CS_ERR_RATE_LIMITED, 1, "99999") == 1000); /* absurd: backoff */
	CHECK(chatstream_retry_ms(CS_ERR_RATE_LIMITED, 1, "Wed, 21 Oct 2015 07:28:00 GMT") == 1000);
	CHECK(chatstream_retry_ms(CS_ERR_RATE_LIMITED, 3, NULL) == 4000);
	CHECK(chatstream_retry_ms(CS_ERR_RATE_LIMITED, 6, NULL) == -1);
	CHECK(chatstream_retry_ms(CS_ERR_SERVER, 2, NULL) == 1000);
	CHECK(chatstream_retry_ms(CS_ERR_SERVER, 3, NULL) == -1);
	CHECK(chatstream_retry_ms(CS_ERR_BUDGET, 1, "1") == -1);
	CHECK(chatstream_retry_ms(CS_ERR_UNAUTHORIZED, 1, NULL) == -1);
}
