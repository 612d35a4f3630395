/* The forwarded heads' rules (runner/relay/hop.c): hop-by-hop fields, the
 * Connection list, the port proxy's request head, and the model proxy's
 * header filter (model/wire.c) built on the same rules. */
#include "relay/hop.h"

#include <stdlib.h>

#include "model/wire.h"
#include "unit.h"

#define S(s) (s), strlen(s)

TEST(hop_by_hop_fields)
{
	const char *hop[] = {"Connection", "keep-alive",        "PROXY-CONNECTION", "te",
			     "Trailer",    "transfer-encoding", "Upgrade"};
	for (size_t i = 0; i < sizeof(hop) / sizeof(hop[0]); i++)
		CHECKF(relay_hop_by_hop(S(hop[i])), "%s is not hop-by-hop", hop[i]);
	const char *end[] = {"Host", "Content-Type", "Connectio", "Connections", "T", "", "TEx"};
	for (size_t i = 0; i < sizeof(end) / sizeof(end[0]); i++)
		CHECKF(!relay_hop_by_hop(S(end[i])), "%s is hop-by-hop", end[i]);
	/* Not NUL-terminated: the length decides. */
	CHECK(relay_hop_by_hop("TEXT", 2));
}

TEST(connection_tokens)
{
	/* One splitting everywhere (h1_list_has_token): commas separate,
	 * blanks around a token are trimmed, a blank inside is part of it. */
	CHECK(relay_connection_names("close, X-Secret", S("x-secret")));
	CHECK(relay_connection_names(" X-A ,\tX-B\t", S("X-B")));
	CHECK(relay_connection_names("a,,b", S("b")));
	CHECK(!relay_connection_names("x-a x-b", S("x-b")));
	CHECK(!relay_connection_names("X-Secrets", S("X-Secret")));
	CHECK(!relay_connection_names(NULL, S("X-A")));
	CHECK(!relay_connection_names("", S("X-A")));
	struct buf b = {0};
	CHECK(relay_connection_join(&b, "keep-alive") == 0);
	CHECK(relay_connection_join(&b, "X-A") == 0);
	buf_append(&b, "", 1);
	CHECK_STR(b.data, "keep-alive,X-A");
	CHECK(relay_connection_names(b.data, S("x-a")));
	buf_free(&b);
}

TEST(response_fields)
{
	CHECK(relay_response_field_kept(S("Content-Type"), NULL, false));
	CHECK(!relay_response_field_kept(S("Content-Length"), NULL, false));
	CHECK(!relay_response_field_kept(S("Proxy-Authenticate"), NULL, false));
	CHECK(!relay_response_field_kept(S("Keep-Alive"), NULL, false));
	CHECK(!relay_response_field_kept(S("Upgrade"), NULL, false));
	CHECK(relay_response_field_kept(S("Upgrade"), NULL, true));
	CHECK(!relay_response_field_kept(S("X-Internal"), "close, x-internal", false));
	CHECK(relay_response_field_kept(S("X-Other"), "close, x-internal", false));
}

/* The head of method/target with fields ("Name", "value" pairs, NULL-ended). */
static char *head(const char *const *f, const char *cl, bool chunked, const char *upgrade,
		  const char *conn)
{
	struct buf out = {0};
	struct relay_head h;
	relay_head_start(&h, &out, "GET", "/a?b=1", conn);
	for (; *f; f += 2)
		relay_head_field(&h, f[0], strlen(f[0]), f[1], strlen(f[1]));
	if (relay_head_finish(&h, 8080, "10.0.0.7", cl, chunked, upgrade) < 0) {
		buf_free(&out);
		return NULL;
	}
	buf_append(&out, "", 1);
	return out.data;
}

TEST(request_head)
{
	const char *f[] = {"Host",
			   "app.local",
			   "Connection",
			   "keep-alive, X-Hop",
			   "X-Hop",
			   "1",
			   "X-Kept",
			   "yes",
			   "X-EXECD-ACCESS-TOKEN",
			   "secret",
			   "Proxy-Authorization",
			   "Basic eA==",
			   "X-Forwarded-For",
			   "1.2.3.4",
			   "x-forwarded-for",
			   "5.6.7.8",
			   "X-Forwarded-Host",
			   "evil",
			   "Content-Length",
			   "999",
			   "Expect",
			   "100-continue",
			   "TE",
			   "trailers",
			   NULL};
	char *h = head(f, "5", false, NULL, "keep-alive, X-Hop");
	if (!CHECK(h))
		return;
	CHECK_STR(h, "GET /a?b=1 HTTP/1.1\r\n"
		     "Host: app.local\r\n"
		     "X-Kept: yes\r\n"
		     "X-Forwarded-For: 1.2.3.4, 5.6.7.8, 10.0.0.7\r\n"
		     "X-Forwarded-Proto: http\r\n"
		     "Content-Length: 5\r\n"
		     "\r\n");
	free(h);

	/* No Host: the upstream's own; chunked; an upgrade. */
	const char *g[] = {"Upgrade", "websocket", "Sec-WebSocket-Key", "k", NULL};
	h = head(g, NULL, true, "websocket", "Upgrade");
	if (!CHECK(h))
		return;
	CHECK_STR(h, "GET /a?b=1 HTTP/1.1\r\n"
		     "Sec-WebSocket-Key: k\r\n"
		     "Host: 127.0.0.1:8080\r\n"
		     "X-Forwarded-For: 10.0.0.7\r\n"
		     "X-Forwarded-Proto: http\r\n"
		     "Transfer-Encoding: chunked\r\n"
		     "Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n");
	free(h);
}

/* The model proxy's filter drops what the port proxy's rules call
 * hop-by-hop, and its own list on top. */
TEST(model_proxy_uses_the_same_rules)
{
	const char *hop[] = {"Connection", "Keep-Alive",        "Proxy-Connection", "TE",
			     "Trailer",    "Transfer-Encoding", "Upgrade"};
	for (size_t i = 0; i < sizeof(hop) / sizeof(hop[0]); i++)
		CHECKF(!wire_header_forwarded(hop[i], NULL), "%s is forwarded", hop[i]);
	CHECK(!wire_header_forwarded("proxy-authenticate", NULL));
	CHECK(wire_header_forwarded("X-Custom", NULL));
	/* One rule for what every proxy drops: the model proxy too drops a
	 * field the Connection list names, and the framing and credentials
	 * relay_request_field_dropped names. */
	const char *both[] = {"Content-Length", "Expect", "Proxy-Authorization", "X-Named"};
	for (size_t i = 0; i < sizeof(both) / sizeof(both[0]); i++) {
		CHECKF(relay_request_field_dropped(S(both[i]), "close, x-named"), "%s kept",
		       both[i]);
		CHECKF(!wire_header_forwarded(both[i], "close, x-named"), "%s forwarded", both[i]);
	}
	CHECK(wire_header_forwarded("X-Named", "close"));
}
