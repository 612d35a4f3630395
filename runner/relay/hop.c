/* The rules of a forwarded head: see hop.h. */
#include "relay/hop.h"

#include <string.h>
#include <strings.h>

#include "relay/h1parse.h"

/* A field name list, matched length first: small requests carry a dozen
 * fields each and strcasecmp against every name was the runner's top libc
 * function on them. */
struct field_name {
	const char *name;
	size_t len;
};
/* clang-format off */
#define FIELD(s) {(s), sizeof(s) - 1}
/* clang-format on */
#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

static bool field_is(const char *name, size_t len, const char *want, size_t want_len)
{
	return len == want_len && !strncasecmp(name, want, len);
}

static bool in_list(const struct field_name *list, size_t n, const char *name, size_t len)
{
	for (size_t i = 0; i < n; i++)
		if (field_is(name, len, list[i].name, list[i].len))
			return true;
	return false;
}

/* RFC 9110 §7.6.1, and Proxy-Connection, which old clients still send. */
static const struct field_name hop_fields[] = {
	FIELD("Connection"), FIELD("Keep-Alive"),        FIELD("Proxy-Connection"), FIELD("TE"),
	FIELD("Trailer"),    FIELD("Transfer-Encoding"), FIELD("Upgrade"),
};

bool relay_hop_by_hop(const char *name, size_t len)
{
	return in_list(hop_fields, N_OF(hop_fields), name, len);
}

bool relay_connection_names(const char *connection, const char *name, size_t len)
{
	return connection && h1_list_has_token_n(connection, name, len);
}

bool relay_request_field_dropped(const char *name, size_t len, const char *connection)
{
	static const struct field_name drop[] = {FIELD("Content-Length"), FIELD("Expect"),
						 FIELD("Proxy-Authorization")};
	return relay_hop_by_hop(name, len) || in_list(drop, N_OF(drop), name, len) ||
	       relay_connection_names(connection, name, len);
}

int relay_connection_join(struct buf *b, const char *value)
{
	if (buf_avail(b) && buf_append_lit(b, ",") < 0)
		return -1;
	return buf_append_str(b, value);
}

bool relay_response_field_kept(const char *name, size_t len, const char *conn, bool upgrade)
{
	if (upgrade && field_is(name, len, "Upgrade", 7))
		return true;
	/* Besides the hop-by-hop ones, the framing libmicrohttpd redoes. */
	static const struct field_name drop[] = {FIELD("Content-Length"),
						 FIELD("Proxy-Authenticate")};
	if (relay_hop_by_hop(name, len) || in_list(drop, N_OF(drop), name, len))
		return false;
	return !relay_connection_names(conn, name, len);
}

void relay_head_start(struct relay_head *h, struct buf *out, const char *method, const char *target,
		      const char *connection)
{
	memset(h, 0, sizeof(*h));
	h->out = out;
	h->connection = connection;
	if (buf_append_str(out, method) < 0 || buf_append_lit(out, " ") < 0 ||
	    buf_append_str(out, target) < 0 || buf_append_lit(out, " HTTP/1.1\r\n") < 0)
		h->failed = true;
}

void relay_head_field(struct relay_head *h, const char *name, size_t name_len, const char *value,
		      size_t value_len)
{
	/* Besides what every proxy drops: the runner's own token, and the
	 * forwarding fields it sets itself. */
	static const struct field_name drop[] = {FIELD("X-EXECD-ACCESS-TOKEN"),
						 FIELD("X-Forwarded-Proto"),
						 FIELD("X-Forwarded-Host")};
	if (!value)
		value = "", value_len = 0;
	if (field_is(name, name_len, "X-Forwarded-For", 15)) {
		if ((buf_avail(&h->xff) && buf_append_lit(&h->xff, ", ") < 0) ||
		    buf_append(&h->xff, value, value_len) < 0)
			h->failed = true;
		return;
	}
	if (relay_request_field_dropped(name, name_len, h->connection) ||
	    in_list(drop, N_OF(drop), name, name_len))
		return;
	if (field_is(name, name_len, "Host", 4))
		h->host = true;
	/* Plain appends: printf for every field was a tenth of the runner's
	 * user time on small requests. */
	if (buf_append(h->out, name, name_len) < 0 || buf_append_lit(h->out, ": ") < 0 ||
	    buf_append(h->out, value, value_len) < 0 || buf_append_lit(h->out, "\r\n") < 0)
		h->failed = true;
}

int relay_head_finish(struct relay_head *h, unsigned port, const char *peer_ip,
		      const char *content_length, bool chunked, const char *upgrade)
{
	struct buf *out = h->out;
	int rc = 0;
	if (!h->host)
		rc |= buf_appendf(out, "Host: 127.0.0.1:%u\r\n", port);
	rc |= buf_append_lit(out, "X-Forwarded-For: ");
	if (buf_avail(&h->xff)) {
		rc |= buf_append(out, h->xff.data, buf_avail(&h->xff));
		rc |= buf_append_lit(out, ", ");
	}
	rc |= buf_append_str(out, peer_ip);
	rc |= buf_append_lit(out, "\r\nX-Forwarded-Proto: http\r\n");
	if (content_length) {
		rc |= buf_append_lit(out, "Content-Length: ");
		rc |= buf_append_str(out, content_length);
		rc |= buf_append_lit(out, "\r\n");
	} else if (chunked) {
		rc |= buf_append_lit(out, "Transfer-Encoding: chunked\r\n");
	}
	/* Anything else is kept alive (HTTP/1.1's default) for the pool. */
	if (upgrade)
		rc |= buf_appendf(out, "Connection: Upgrade\r\nUpgrade: %s\r\n\r\n", upgrade);
	else
		rc |= buf_append_lit(out, "\r\n");
	buf_free(&h->xff);
	return rc < 0 || h->failed || !out->data ? -1 : 0;
}
