#include "files/multipart.h"

#include <stdlib.h>

#include "unit.h"

/* What the parser reported, flattened into one string:
 * "<name|filename|ctype>[data]" per part, so splits can be compared. */
struct rec {
	char out[8192];
	size_t len;
	int begins, ends;
	int stop_at_begin; /* >0: part_begin returns 7 for this part number */
};

static void put(struct rec *r, const char *s, size_t n)
{
	if (r->len + n < sizeof(r->out)) {
		memcpy(r->out + r->len, s, n);
		r->len += n;
		r->out[r->len] = 0;
	}
}

static int on_begin(void *arg, const struct mp_part *p)
{
	struct rec *r = arg;
	char h[2048];
	r->begins++;
	if (r->stop_at_begin == r->begins)
		return 7;
	int n = snprintf(h, sizeof(h), "<%s|%s%s|%s>[", p->name, p->has_filename ? "f:" : "",
			 p->filename, p->content_type);
	put(r, h, (size_t)n);
	return 0;
}

static int on_data(void *arg, const char *d, size_t n)
{
	put(arg, d, n);
	return 0;
}

static int on_end(void *arg)
{
	struct rec *r = arg;
	r->ends++;
	put(r, "]", 1);
	return 0;
}

static const struct mp_callbacks cbs = {on_begin, on_data, on_end};

/* Parse body in pieces cut at a and b; returns 0 when every feed and the
 * finish succeeded. */
static int parse3(const char *ctype, const char *body, size_t len, size_t a, size_t b,
		  struct rec *r)
{
	static struct multipart m;
	memset(r, 0, sizeof(*r));
	if (multipart_init(&m, ctype, &cbs, r) < 0)
		return -1;
	if (multipart_feed(&m, body, a) || multipart_feed(&m, body + a, b - a) ||
	    multipart_feed(&m, body + b, len - b))
		return -1;
	return multipart_finish(&m);
}

/* Every pair of cut points gives the same parts as one single feed. */
static void check_splits(const char *ctype, const char *body, size_t len, const char *want)
{
	struct rec r;
	int bad = 0;
	for (size_t a = 0; a <= len; a++)
		for (size_t b = a; b <= len; b++)
			if (parse3(ctype, body, len, a, b, &r) != 0 || r.len != strlen(want) ||
			    memcmp(r.out, want, r.len) != 0) {
				if (!bad++)
					unit_diag("split %zu/%zu: got %s want %s", a, b, r.out,
						  want);
			}
	CHECK(bad == 0);
}

static void check_fails(const char *ctype, const char *body, const char *why_part)
{
	static struct multipart m;
	struct rec r = {0};
	int rc = multipart_init(&m, ctype, &cbs, &r);
	if (rc == 0)
		rc = multipart_feed(&m, body, strlen(body));
	if (rc == 0)
		rc = multipart_finish(&m);
	CHECK(rc == -1);
	if (rc == -1 && why_part && !strstr(m.err, why_part))
		unit_diag("error '%s' lacks '%s'", m.err, why_part);
	CHECK(rc != -1 || !why_part || strstr(m.err, why_part));
}

#define CT "multipart/form-data; boundary=XyZ"

/* The SDK's shape: metadata (with filename) then file. */
static const char *sdk =
	"--XyZ\r\n"
	"Content-Disposition: form-data; name=\"metadata\"; filename=\"metadata\"\r\n"
	"Content-Type: application/json\r\n\r\n"
	"{\"path\":\"/w/a.txt\"}\r\n"
	"--XyZ\r\n"
	"Content-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\n"
	"Content-Type: application/octet-stream\r\n\r\n"
	"line1\r\nline2\r\n"
	"\r\n--XyZ--\r\n";

TEST(sdk_upload_any_split)
{
	check_splits(CT, sdk, strlen(sdk),
		     "<metadata|f:metadata|application/json>[{\"path\":\"/w/a.txt\"}]"
		     "<file|f:a.txt|application/octet-stream>[line1\r\nline2\r\n]");
}

TEST(delimiter_lookalikes_are_data)
{
	/* Data that looks like the start of a delimiter, cut anywhere, is
	 * data: "\r\n--Xy" then not "Z", lone CRs, "\r\r\n". */
	const char *lookalike = "--XyZ\r\n"
				"Content-Disposition: form-data; name=\"file\"\r\n\r\n"
				"a\r\n--Xy\rb\r\r\n-\r\n-X\r\n--XyY\r\n"
				"\r\n--XyZ--";
	check_splits(CT, lookalike, strlen(lookalike),
		     "<file||>[a\r\n--Xy\rb\r\r\n-\r\n-X\r\n--XyY\r\n]");
}

TEST(preamble_quoting_padding_epilogue)
{
	/* Preamble, quoted boundary, padding after a delimiter, epilogue,
	 * no headers besides Content-Disposition, an empty part, escapes. */
	const char *varied =
		"this is the preamble\r\n--a:b c\r\n"
		"content-disposition: form-data; name=meta; filename=\"x\\\"y\"\r\n\r\n"
		"{}\r\n--a:b c \t\r\n"
		"Content-Disposition: form-data; name=\"file\"; filename=\"\"\r\n\r\n"
		"\r\n--a:b c--\r\nepilogue --a:b c\r\n";
	check_splits("Multipart/Form-Data ; boundary=\"a:b c\"", varied, strlen(varied),
		     "<meta|f:x\"y|>[{}]<file|f:|>[]");
}

TEST(binary_data_untouched)
{
	/* Binary data with NULs and CRs of every kind passes untouched. */
	char bin[600];
	size_t bl = 0;
	const char *h = "--XyZ\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\n";
	memcpy(bin, h, strlen(h));
	bl = strlen(h);
	size_t data_at = bl;
	for (int i = 0; i < 256; i++)
		bin[bl++] = (char)(i % 3 == 0 ? '\r' : i);
	size_t data_len = bl - data_at;
	memcpy(bin + bl, "\r\n--XyZ--", 9);
	bl += 9;
	{
		struct rec r;
		int ok = 1;
		for (size_t a = 0; a <= bl; a += 7) {
			if (parse3(CT, bin, bl, a, a + (bl - a) / 2, &r) != 0)
				ok = 0;
			const char *open = strchr(r.out, '[');
			if (!open || r.len != (size_t)(open - r.out) + 1 + data_len + 1 ||
			    memcmp(open + 1, bin + data_at, data_len) != 0)
				ok = 0;
		}
		CHECK(ok);
	}
}

/* Zero parts is a valid (if useless) body. */
TEST(zero_parts)
{
	check_splits(CT, "--XyZ--\r\n", 9, "");
}

TEST(malformed_inputs_refused)
{
	check_fails(NULL, "", "Content-Type");
	check_fails("application/json", "", "not multipart");
	check_fails("multipart/form-data", "", "no multipart boundary");
	check_fails("multipart/form-data; boundary=", "", "Content-Type");
	check_fails("multipart/form-data; boundary=\"unterminated", "", "Content-Type");
	check_fails("multipart/form-data; boundary="
		    "01234567890123456789012345678901234567890123456789012345678901234567890",
		    "", "1 to 70");
	check_fails(CT, "", "no multipart delimiter");
	check_fails(CT, "no delimiter here at all", "no multipart delimiter");
	check_fails(CT, "--XyZ\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\nabc",
		    "truncated");
	check_fails(CT, "--XyZ\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\nabc\r\n--XyZ",
		    "truncated");
	check_fails(CT, "--XyZ\r\nNoColonHere\r\n\r\nx\r\n--XyZ--", "header line");
	check_fails(CT, "--XyZ\r\nContent-Type: text/plain\r\n\r\nx\r\n--XyZ--",
		    "Content-Disposition");
	check_fails(CT, "--XyZ\r\nContent-Disposition: attachment; name=f\r\n\r\nx\r\n--XyZ--",
		    "form-data");
	check_fails(CT, "--XyZ\r\nContent-Disposition: form-data; filename=f\r\n\r\nx\r\n--XyZ--",
		    "no name");
	check_fails(CT, "--XyZ\r\nContent-Disposition: form-data; name=\"f\r\n\r\nx\r\n--XyZ--",
		    "Content-Disposition");
	check_fails(CT, "--XyZ\r\n Content-Disposition: form-data; name=f\r\n\r\nx\r\n--XyZ--",
		    "folded");
	check_fails(CT, "--XyZ junk\r\n", "delimiter line");
	check_fails(CT, "--XyZ-x", "delimiter line");
	check_fails(CT, "--XyZ\rx", "delimiter line");
}

TEST(headers_too_large)
{
	/* Headers beyond the fixed buffer are refused, not grown. */
	static char big[MP_HEADERS_MAX + 200];
	strcpy(big, "--XyZ\r\nX-Pad: ");
	size_t n = strlen(big);
	memset(big + n, 'a', MP_HEADERS_MAX);
	strcpy(big + n + MP_HEADERS_MAX, "\r\n\r\n");
	check_fails(CT, big, "too large");
}

TEST(callback_refusal_stops)
{
	/* A callback's refusal stops everything and is passed back. */
	static struct multipart m;
	struct rec r = {.stop_at_begin = 2};
	CHECK(multipart_init(&m, CT, &cbs, &r) == 0);
	CHECK(multipart_feed(&m, sdk, strlen(sdk)) == 7);
	CHECK(multipart_feed(&m, "more", 4) == -1);
	CHECK(multipart_finish(&m) == -1);
	CHECK(r.begins == 2 && r.ends == 1);
}

TEST(random_bytes_never_crash)
{
	/* Any bytes at all never crash or overrun (a tiny inline fuzz). */
	static struct multipart m;
	unsigned seed = 12345;
	char buf[256];
	int crashes = 0;
	for (int round = 0; round < 20000; round++) {
		struct rec r = {0};
		size_t n = 0;
		const char *alpha = "\r\n-XyZ:;=\" ";
		size_t l = (seed = seed * 1103515245 + 12345) % sizeof(buf);
		memcpy(buf, sdk, l < strlen(sdk) ? l : strlen(sdk));
		for (n = 0; n < l; n++)
			if (((seed = seed * 1103515245 + 12345) >> 16) % 4 == 0)
				buf[n] = alpha[(seed >> 8) % strlen(alpha)];
		if (multipart_init(&m, CT, &cbs, &r) == 0) {
			size_t cut = l ? (seed >> 4) % l : 0;
			multipart_feed(&m, buf, cut);
			multipart_feed(&m, buf + cut, l - cut);
			multipart_finish(&m);
		}
		crashes += r.ends > r.begins;
	}
	CHECK(crashes == 0);
}
