/* The table of wire formats and what they share: see wire.h. */
#include "model/wire.h"

#include <string.h>
#include <strings.h>

#include "relay/hop.h"

static const struct wire *const formats[] = {&wire_openai, &wire_anthropic, &wire_gemini};

const struct wire *wire_find(const char *path, struct wire_route *rt, enum wire_match *m)
{
	const struct wire *unknown = NULL;
	for (size_t i = 0; i < sizeof(formats) / sizeof(formats[0]); i++) {
		memset(rt, 0, sizeof(*rt));
		enum wire_match r = formats[i]->route(path, rt);
		if (r == WIRE_ROUTE) {
			*m = r;
			return formats[i];
		}
		if (r == WIRE_UNKNOWN && !unknown)
			unknown = formats[i];
	}
	memset(rt, 0, sizeof(*rt));
	*m = unknown ? WIRE_UNKNOWN : WIRE_NO;
	return unknown;
}

bool wire_header_forwarded(const char *name, const char *connection)
{
	/* Besides the port proxy's rules (relay/hop.c): the headers the
	 * transport sets from the request itself, and every place a token
	 * can be in: the task's token never leaves the box, and the real key
	 * is the runner's to add. Accept-Encoding goes too: usage is read
	 * from the body, so it must come unencoded. */
	static const char *const dropped[] = {"proxy-authenticate",
					      "host",
					      "authorization",
					      "x-api-key",
					      "x-goog-api-key",
					      "api-key",
					      "accept-encoding",
					      "content-type",
					      "accept",
					      "cookie",
					      "forwarded",
					      "x-forwarded-for",
					      "x-real-ip",
					      "x-litellm-api-key",
					      NULL};
	if (relay_request_field_dropped(name, strlen(name), connection))
		return false;
	for (const char *const *d = dropped; *d; d++)
		if (!strcasecmp(name, *d))
			return false;
	return true;
}

static void take(void *arg, const char *event, json_t *j)
{
	struct wire_scan *s = arg;
	bool had = s->has_usage;
	struct mu_usage before = s->usage;
	s->w->take(s, event, j);
	/* The proxy estimates what an answer cut short used after its last
	 * report (budget_estimate): it needs to know where that was. */
	if (s->has_usage && (!had || memcmp(&before, &s->usage, sizeof(before))))
		s->reports++;
}

void wire_scan_init(struct wire_scan *s, const struct wire *w)
{
	memset(s, 0, sizeof(*s));
	s->w = w;
	mu_frame_init(&s->frame, take, s, w->usage_needle);
}

void wire_scan_feed(struct wire_scan *s, const char *p, size_t n)
{
	mu_frame_feed(&s->frame, p, n);
}

void wire_scan_eof(struct wire_scan *s)
{
	mu_frame_eof(&s->frame);
}

void wire_scan_free(struct wire_scan *s)
{
	mu_frame_free(&s->frame);
}
