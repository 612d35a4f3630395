/* fuzz_mcp: the JSON-RPC/MCP message parser of /mcp (runner/mcp/proto.c), and the Origin and
 * Accept checks, on arbitrary bytes. Checked: a message that parses has the fields its kind
 * promises (a request an id and a method; tools/call a name); an error has a JSON-RPC code
 * of the five and a message; the response builders always give an object. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mcp/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct mcp_msg m;
	int code = 0;
	char msg[256];
	msg[0] = 0;
	int rc = mcp_parse((const char *)data, size, &m, &code, msg, sizeof(msg));
	if (rc == 0) {
		if (m.kind == MCP_REQUEST && (!m.id || !m.method))
			abort();
		if (m.kind == MCP_NOTIFICATION && (m.id || !m.method))
			abort();
		if (m.method && !strcmp(m.method, "tools/call") && !m.tool)
			abort();
		json_t *r = mcp_result(m.id, NULL);
		if (!json_is_object(r))
			abort();
		json_decref(r);
	} else {
		if (code != MCP_PARSE_ERROR && code != MCP_INVALID_REQUEST &&
		    code != MCP_INVALID_PARAMS)
			abort();
		if (!msg[0])
			abort();
		json_t *e = mcp_error(m.id, code, msg);
		if (!json_is_object(e))
			abort();
		json_decref(e);
	}
	mcp_msg_free(&m);
	/* The header checks take C strings. */
	char *s = malloc(size + 1);
	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = 0;
	bool j, e;
	mcp_accept(s, &j, &e);
	(void)mcp_origin_allowed(s, NULL);
	(void)mcp_origin_allowed(s, s);
	(void)mcp_negotiate(s);
	free(s);
	return 0;
}
