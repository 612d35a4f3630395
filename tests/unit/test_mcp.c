/* mcp/proto.c: JSON-RPC/MCP message parsing, version negotiation, the Origin allowlist and
 * the Accept header, without I/O. */
#include "mcp/proto.h"

#include <string.h>

#include "unit.h"

static int parse(const char *s, struct mcp_msg *m, int *code)
{
	char msg[256];
	*code = 0;
	return mcp_parse(s, strlen(s), m, code, msg, sizeof(msg));
}

TEST(requests_notifications_responses)
{
	struct mcp_msg m;
	int code;
	CHECK(parse("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"name\":"
		    "\"grep\",\"arguments\":{\"path\":\"/\"},\"_meta\":{\"progressToken\":\"p1\"}}}",
		    &m, &code) == 0);
	CHECK(m.kind == MCP_REQUEST);
	CHECK(json_integer_value(m.id) == 7);
	CHECK_STR(m.method, "tools/call");
	CHECK_STR(m.tool, "grep");
	CHECK(json_is_object(m.arguments));
	CHECK_STR(json_string_value(m.progress_token), "p1");
	mcp_msg_free(&m);
	CHECK(parse("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{"
		    "\"requestId\":\"r9\"}}",
		    &m, &code) == 0);
	CHECK(m.kind == MCP_NOTIFICATION && !m.id);
	CHECK_STR(json_string_value(m.cancel_id), "r9");
	mcp_msg_free(&m);
	CHECK(parse("{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"result\":{}}", &m, &code) == 0);
	CHECK(m.kind == MCP_RESPONSE);
	mcp_msg_free(&m);
	CHECK(parse("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"
		    "\"protocolVersion\":\"2025-06-18\"}}",
		    &m, &code) == 0);
	CHECK_STR(m.protocol_version, "2025-06-18");
	mcp_msg_free(&m);
	CHECK(parse("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":{\"_meta\":"
		    "{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\"}}}",
		    &m, &code) == 0);
	CHECK_STR(m.meta_version, "2026-07-28");
	mcp_msg_free(&m);
}

TEST(malformed)
{
	static const struct {
		const char *in;
		int code;
		bool has_id;
	} cases[] = {
		{"", MCP_PARSE_ERROR, false},
		{"{", MCP_PARSE_ERROR, false},
		{"{\"jsonrpc\":\"2.0\",\"id\":1,\"id\":2,\"method\":\"x\"}", MCP_PARSE_ERROR,
		 false},
		{"[]", MCP_INVALID_REQUEST, false},
		{"3", MCP_INVALID_REQUEST, false},
		{"{\"id\":1,\"method\":\"ping\"}", MCP_INVALID_REQUEST, true},
		{"{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"ping\"}", MCP_INVALID_REQUEST,
		 false},
		{"{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"ping\"}", MCP_INVALID_REQUEST,
		 false},
		{"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\"}", MCP_INVALID_REQUEST, true},
		{"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\\u0000b\"}", MCP_PARSE_ERROR, false},
		{"{\"jsonrpc\":\"2.0\",\"id\":1}", MCP_INVALID_REQUEST, true},
		{"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":3}",
		 MCP_INVALID_PARAMS, true},
		{"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":1}}",
		 MCP_INVALID_PARAMS, true},
		{"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"x\","
		 "\"arguments\":[]}}",
		 MCP_INVALID_PARAMS, true},
		{"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"params\":{\"_meta\":1}}",
		 MCP_INVALID_PARAMS, true},
		{"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"
		 "\"protocolVersion\":5}}",
		 MCP_INVALID_PARAMS, true},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct mcp_msg m;
		int code;
		CHECKF(parse(cases[i].in, &m, &code) == -1, "accepted: %s", cases[i].in);
		CHECKF(code == cases[i].code, "%s: code %d", cases[i].in, code);
		CHECKF((m.id != NULL) == cases[i].has_id, "%s: id", cases[i].in);
		mcp_msg_free(&m);
	}
}

/* /mcp answers a failed parse 400 unless it is a request with bad params (its error
 * response): the kind must be known when the params are what failed. */
TEST(kind_known_when_params_fail)
{
	struct mcp_msg m;
	int code;
	CHECK(parse("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/x\",\"params\":[1]}", &m,
		    &code) == -1);
	CHECK(code == MCP_INVALID_PARAMS && m.kind == MCP_NOTIFICATION && !m.id);
	mcp_msg_free(&m);
	CHECK(parse("{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"x\",\"params\":[1]}", &m, &code) ==
	      -1);
	CHECK(code == MCP_INVALID_PARAMS && m.kind == MCP_REQUEST && m.id);
	mcp_msg_free(&m);
}

TEST(versions)
{
	CHECK_STR(mcp_negotiate("2025-06-18"), "2025-06-18");
	CHECK_STR(mcp_negotiate("2025-03-26"), "2025-03-26");
	CHECK_STR(mcp_negotiate("2026-07-28"), MCP_LATEST_VERSION);
	CHECK_STR(mcp_negotiate("garbage"), MCP_LATEST_VERSION);
	CHECK_STR(mcp_negotiate(NULL), MCP_LATEST_VERSION);
	CHECK(mcp_version_known("2025-11-25"));
	CHECK(!mcp_version_known("2026-07-28"));
	CHECK(!mcp_version_known("2025-11-2"));
}

TEST(origins)
{
	CHECK(mcp_origin_allowed(NULL, NULL));
	CHECK(mcp_origin_allowed("http://localhost", NULL));
	CHECK(mcp_origin_allowed("http://localhost:3000", ""));
	CHECK(mcp_origin_allowed("https://127.0.0.1:8443", NULL));
	CHECK(mcp_origin_allowed("http://[::1]:80", NULL));
	CHECK(!mcp_origin_allowed("http://localhost.evil.com", NULL));
	CHECK(!mcp_origin_allowed("http://localhost:3000x", NULL));
	CHECK(!mcp_origin_allowed("http://localhost:", NULL));
	CHECK(!mcp_origin_allowed("http://evil.example.com", NULL));
	CHECK(!mcp_origin_allowed("null", NULL));
	CHECK(!mcp_origin_allowed("file://localhost", NULL));
	CHECK(mcp_origin_allowed("https://ide.example.com",
				 "https://a.b, https://ide.example.com"));
	CHECK(!mcp_origin_allowed("https://ide.example.co", "https://ide.example.com"));
	CHECK(!mcp_origin_allowed("http://localhost", "https://ide.example.com"));
	CHECK(mcp_origin_allowed("https://anything", "*"));
}

TEST(accept)
{
	bool j, s;
	mcp_accept("application/json, text/event-stream", &j, &s);
	CHECK(j && s);
	mcp_accept("text/event-stream", &j, &s);
	CHECK(!j && s);
	mcp_accept("application/json", &j, &s);
	CHECK(j && !s);
	mcp_accept(NULL, &j, &s);
	CHECK(j && s);
	mcp_accept("image/png", &j, &s);
	CHECK(!j && !s);
	mcp_accept("*/*", &j, &s);
	CHECK(j && s);
}
