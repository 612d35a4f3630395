/* The runner's access token on a request (docs/design/relay.md#no-door-hands-the-runners-token-on):
 * whether a presented token is the runner's, and whether a field a door forwards carries it, so
 * that no door hands it to whoever is behind it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/base64.h"
#include "core/runner.h"
#include "core/sha256.h"
#include "core/randomid.h"
#include "http/http.h"

/* A runtime init's token hash (core/runner.h): the presented token's
 * SHA-256 against it, every byte compared whatever differs. */
static bool hash_equal(const char *got, const unsigned char want[32])
{
	unsigned char h[32];
	struct sha256 c;
	sha256_init(&c);
	sha256_update(&c, got, strlen(got));
	sha256_final(&c, h);
	unsigned char diff = 0;
	for (int i = 0; i < 32; i++)
		diff |= (unsigned char)(h[i] ^ want[i]);
	return diff == 0;
}

bool http_token_ok(struct runner *r, const char *got)
{
	if (r->auth_hash_set)
		return hash_equal(got, r->auth_hash);
	return secret_equal(got, r->cfg.token);
}

/* %XX (and '+' as a space, as forms write it) decoded into out; its length. */
static size_t pct_decode(const char *v, size_t n, char *out)
{
	size_t o = 0;
	for (size_t i = 0; i < n; i++) {
		int hi, lo;
		if (v[i] == '%' && i + 2 < n && (hi = hex_value((unsigned char)v[i + 1])) >= 0 &&
		    (lo = hex_value((unsigned char)v[i + 2])) >= 0) {
			out[o++] = (char)(hi << 4 | lo);
			i += 2;
		} else {
			out[o++] = v[i] == '+' ? ' ' : v[i];
		}
	}
	return o;
}

/* One run of base64 (standard or URL-safe alphabet) decoded into out; its length. */
static size_t b64_decode(const char *v, size_t n, char *out)
{
	size_t o = 0;
	uint32_t acc = 0;
	int bits = 0;
	for (size_t i = 0; i < n; i++) {
		acc = acc << 6 | (uint32_t)base64_value((unsigned char)v[i]);
		if ((bits += 6) >= 8) {
			bits -= 8;
			out[o++] = (char)(acc >> bits);
		}
	}
	return o;
}

static bool has(const char *hay, size_t n, const char *tok, size_t tn)
{
	return tn && memmem(hay, n, tok, tn);
}

/* The token as written, %-encoded, or inside any run of base64 (Basic
 * credentials, a cookie's encoded value): decoded from each run's start, a
 * token anywhere inside the encoded text is found whatever its offset. */
static bool value_has(const char *v, size_t n, const char *tok, size_t tn, char *scratch)
{
	if (has(v, n, tok, tn) || has(scratch, pct_decode(v, n, scratch), tok, tn))
		return true;
	for (size_t i = 0; i < n;) {
		size_t run = 0;
		while (i + run < n && base64_value((unsigned char)v[i + run]) >= 0)
			run++;
		if (run * 3 / 4 >= tn && has(scratch, b64_decode(v + i, run, scratch), tok, tn))
			return true;
		i += run ? run : 1;
	}
	return false;
}

/* The fields the runner reads its token from, whatever they hold. */
static bool token_field_name(const char *name, size_t len)
{
	return (len == 20 && !strncasecmp(name, "X-EXECD-ACCESS-TOKEN", len)) ||
	       (len == 14 && !strncasecmp(name, "X-Access-Token", len));
}

bool http_field_carries_token(const struct http_req *req, const char *name, size_t name_len,
			      const char *value, size_t value_len)
{
	if (token_field_name(name, name_len))
		return true;
	/* What authenticated this request is the token in clear, even when the
	 * runner keeps only its hash (runtime init). */
	const char *toks[2] = {req->auth_token, req->r->cfg.token};
	if (!value || (!(toks[0] && *toks[0]) && !(toks[1] && *toks[1])))
		return false;
	char *scratch = malloc(value_len + 1);
	if (!scratch)
		return true; /* fail closed: the field is dropped */
	bool found = false;
	for (int i = 0; i < 2 && !found; i++)
		if (toks[i] && (i == 0 || !toks[0] || strcmp(toks[0], toks[1])))
			found = value_has(value, value_len, toks[i], strlen(toks[i]), scratch);
	free(scratch);
	return found;
}
