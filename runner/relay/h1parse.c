#include "relay/h1parse.h"

#include <string.h>
#include <strings.h>

#include "core/base64.h"

static bool is_tchar(unsigned char c)
{
	if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
		return true;
	switch (c) {
	case '!':
	case '#':
	case '$':
	case '%':
	case '&':
	case '\'':
	case '*':
	case '+':
	case '-':
	case '.':
	case '^':
	case '_':
	case '`':
	case '|':
	case '~':
		return true;
	default:
		return false;
	}
}

/* Is the field called lit (n bytes, any case)? Lengths first: most names
 * differ there, and musl's strcasecmp calls tolower for every byte (it was
 * 3% of a proxied request's instructions). */
static bool name_is(const struct h1_field *f, const char *lit, size_t n)
{
	if (f->name_len != n)
		return false;
	for (size_t i = 0; i < n; i++) {
		unsigned char a = (unsigned char)f->name[i], b = (unsigned char)lit[i];
		if (a >= 'A' && a <= 'Z')
			a = (unsigned char)(a + 32);
		if (b >= 'A' && b <= 'Z')
			b = (unsigned char)(b + 32);
		if (a != b)
			return false;
	}
	return true;
}

/* A field value byte (RFC 9110 §5.5): visible, obs-text, SP or HTAB. */
static bool is_vbyte(unsigned char c)
{
	return c == '\t' || (c >= 0x20 && c != 0x7f);
}

/* The end of the line starting at s (the LF), the line's length without its
 * CR LF in *n; NULL when a CR appears anywhere but before the LF. */
static char *line_end(char *s, char *end, size_t *n)
{
	char *lf = memchr(s, '\n', (size_t)(end - s));
	if (!lf)
		return NULL;
	char *e = lf;
	if (e > s && e[-1] == '\r')
		e--;
	if (memchr(s, '\r', (size_t)(e - s)))
		return NULL;
	*n = (size_t)(e - s);
	return lf;
}

static enum h1_result parse_status_line(char *s, size_t n, struct h1_head *out)
{
	/* HTTP/1.x SP 3DIGIT [SP reason-phrase] */
	if (n < 12 || memcmp(s, "HTTP/1.", 7) || s[7] < '0' || s[7] > '9' || s[8] != ' ')
		return H1_BAD;
	out->minor = (unsigned)(s[7] - '0');
	if (s[9] < '1' || s[9] > '9' || s[10] < '0' || s[10] > '9' || s[11] < '0' || s[11] > '9')
		return H1_BAD;
	out->status = (unsigned)((s[9] - '0') * 100 + (s[10] - '0') * 10 + (s[11] - '0'));
	if (n > 12 && s[12] != ' ')
		return H1_BAD;
	for (size_t i = 13; i < n; i++)
		if (!is_vbyte((unsigned char)s[i]))
			return H1_BAD;
	return H1_OK;
}

static enum h1_result parse_field(char *s, size_t n, struct h1_head *out)
{
	if (s[0] == ' ' || s[0] == '\t')
		return H1_BAD; /* obs-fold: refused (RFC 9112 §5.2 allows that) */
	char *colon = memchr(s, ':', n);
	if (!colon || colon == s)
		return H1_BAD;
	for (char *p = s; p < colon; p++)
		if (!is_tchar((unsigned char)*p))
			return H1_BAD; /* includes white space before the colon */
	char *v = colon + 1, *ve = s + n;
	for (char *p = v; p < ve; p++)
		if (!is_vbyte((unsigned char)*p))
			return H1_BAD;
	while (v < ve && (*v == ' ' || *v == '\t'))
		v++;
	while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
		ve--;
	if (out->n_fields == H1_MAX_HEADERS)
		return H1_TOO_BIG;
	*colon = 0;
	*ve = 0; /* over trailing white space, the CR or the LF */
	out->fields[out->n_fields].name = s;
	out->fields[out->n_fields].value = v;
	out->fields[out->n_fields].name_len = (size_t)(colon - s);
	out->n_fields++;
	return H1_OK;
}

enum h1_result h1_parse_response_head(char *buf, size_t len, size_t max, struct h1_head *out)
{
	size_t scan = len < max ? len : max;
	/* The end of the head: an empty line (CR LF or a bare LF). */
	size_t head_len = 0;
	for (const char *lf = memchr(buf, '\n', scan); lf;
	     lf = memchr(lf + 1, '\n', scan - (size_t)(lf + 1 - buf))) {
		size_t i = (size_t)(lf - buf);
		if (i + 1 < scan && buf[i + 1] == '\n') {
			head_len = i + 2;
			break;
		}
		if (i + 2 < scan && buf[i + 1] == '\r' && buf[i + 2] == '\n') {
			head_len = i + 3;
			break;
		}
	}
	if (!head_len) {
		/* A status line must come first: refuse garbage early. */
		if (scan >= 5 && memcmp(buf, "HTTP/", 5))
			return H1_BAD;
		return len >= max ? H1_TOO_BIG : H1_MORE;
	}
	/* The fields array is written as far as n_fields says (1.6 KiB not
	 * cleared for every response). */
	out->minor = out->status = 0;
	out->n_fields = 0;
	out->head_len = head_len;
	char *end = buf + head_len;
	size_t n;
	char *lf = line_end(buf, end, &n);
	if (!lf || parse_status_line(buf, n, out) != H1_OK)
		return H1_BAD;
	for (char *s = lf + 1; s < end;) {
		lf = line_end(s, end, &n);
		if (!lf)
			return H1_BAD;
		if (n == 0)
			break; /* the empty line */
		enum h1_result rc = parse_field(s, n, out);
		if (rc != H1_OK)
			return rc;
		s = lf + 1;
	}
	return H1_OK;
}

const char *h1_field(const struct h1_head *h, const char *name)
{
	size_t n = strlen(name);
	for (size_t i = 0; i < h->n_fields; i++)
		if (name_is(&h->fields[i], name, n))
			return h->fields[i].value;
	return NULL;
}

bool h1_list_has_token(const char *s, const char *token)
{
	return h1_list_has_token_n(s, token, strlen(token));
}

bool h1_list_has_token_n(const char *s, const char *token, size_t tlen)
{
	while (s && *s) {
		s += strspn(s, " \t,");
		size_t n = strcspn(s, ",");
		size_t m = n;
		while (m && (s[m - 1] == ' ' || s[m - 1] == '\t'))
			m--;
		if (m == tlen && !strncasecmp(s, token, tlen))
			return true;
		s += n;
	}
	return false;
}

bool h1_field_has_token(const struct h1_head *h, const char *name, const char *token)
{
	size_t n = strlen(name);
	for (size_t i = 0; i < h->n_fields; i++)
		if (name_is(&h->fields[i], name, n) && h1_list_has_token(h->fields[i].value, token))
			return true;
	return false;
}

/* The last coding of a Transfer-Encoding list. */
static bool last_coding_is_chunked(const char *v)
{
	const char *last = v;
	for (const char *p = v; *p; p++)
		if (*p == ',')
			last = p + 1;
	last += strspn(last, " \t");
	size_t n = strcspn(last, " \t;");
	return n == 7 && !strncasecmp(last, "chunked", 7) && !last[n + strspn(last + n, " \t")];
}

int h1_response_body(const struct h1_head *h, bool head_request, enum h1_body_kind *kind,
		     uint64_t *length)
{
	*length = 0;
	if (head_request || h->status < 200 || h->status == 204 || h->status == 304) {
		*kind = H1_BODY_NONE;
		return 0;
	}
	const char *te = NULL;
	bool have_cl = false;
	uint64_t cl = 0;
	for (size_t i = 0; i < h->n_fields; i++) {
		const char *v = h->fields[i].value;
		if (name_is(&h->fields[i], "Transfer-Encoding", 17)) {
			te = v; /* the last one decides (several are joined) */
		} else if (name_is(&h->fields[i], "Content-Length", 14)) {
			/* Digits only; repeated fields or lists must agree. */
			if (!*v)
				return -1;
			for (const char *p = v; *p;) {
				uint64_t x = 0;
				size_t nd = 0;
				for (; *p >= '0' && *p <= '9'; p++, nd++) {
					if (x > (UINT64_MAX - 9) / 10)
						return -1;
					x = x * 10 + (uint64_t)(*p - '0');
				}
				if (!nd || nd > 19)
					return -1;
				if (have_cl && x != cl)
					return -1;
				have_cl = true;
				cl = x;
				p += strspn(p, " \t");
				if (*p == ',')
					p += 1 + strspn(p + 1, " \t");
				else if (*p)
					return -1;
			}
		}
	}
	if (te) {
		/* Transfer-Encoding wins over Content-Length (RFC 9112 §6.3). */
		*kind = last_coding_is_chunked(te) ? H1_BODY_CHUNKED : H1_BODY_CLOSE;
		return 0;
	}
	if (have_cl) {
		*kind = H1_BODY_LENGTH;
		*length = cl;
		return 0;
	}
	*kind = H1_BODY_CLOSE;
	return 0;
}

enum {
	CH_SIZE,    /* hex digits */
	CH_EXT,     /* chunk extensions up to the LF */
	CH_DATA,    /* data bytes */
	CH_DATA_CR, /* CR LF after the data */
	CH_DATA_LF,
	CH_TRAILER, /* trailer lines up to the empty line */
	CH_DONE,
};

void h1_chunked_init(struct h1_chunked *c)
{
	memset(c, 0, sizeof(*c));
	c->state = CH_SIZE;
}

/* One byte of a chunk's size line (hex digits, then white space or
 * ";ext" up to LF): 1 when taken, 0 when the same byte is to be read again
 * (the size has ended), -1 when invalid. */
static int size_line(struct h1_chunked *c, unsigned char ch)
{
	if (c->state == CH_SIZE) {
		int v = hex_value(ch);
		if (v < 0) {
			if (!c->digits)
				return -1;
			c->state = CH_EXT;
			return 0;
		}
		if (c->digits == 16)
			return -1; /* over 64 bits */
		c->left = (c->left << 4) | (uint64_t)v;
		c->digits++;
		c->line_len++;
		return 1;
	}
	if (++c->line_len > H1_CHUNK_LINE_MAX)
		return -1;
	if (ch == '\n') {
		c->digits = 0;
		c->line_len = 0;
		c->ext = false;
		c->state = c->left ? CH_DATA : CH_TRAILER;
	} else if (ch == ';') {
		c->ext = true;
	} else if (ch != '\r' && ch != ' ' && ch != '\t' && !(c->ext && is_vbyte(ch))) {
		return -1; /* only white space between the size and ';' */
	}
	return 1;
}

ssize_t h1_chunked_decode(struct h1_chunked *c, char *buf, size_t len, size_t *used)
{
	size_t i = 0, o = 0;
	while (i < len && c->state != CH_DONE) {
		unsigned char ch = (unsigned char)buf[i];
		switch (c->state) {
		case CH_SIZE:
		case CH_EXT: {
			int rc = size_line(c, ch);
			if (rc < 0)
				return -1;
			i += (size_t)rc;
			break;
		}
		case CH_DATA: {
			size_t n = len - i;
			if (n > c->left)
				n = (size_t)c->left;
			memmove(buf + o, buf + i, n);
			o += n;
			i += n;
			c->left -= n;
			if (!c->left)
				c->state = CH_DATA_CR;
			break;
		}
		case CH_DATA_CR:
			i++;
			if (ch == '\r')
				c->state = CH_DATA_LF;
			else if (ch == '\n')
				c->state = CH_SIZE;
			else
				return -1;
			break;
		case CH_DATA_LF:
			i++;
			if (ch != '\n')
				return -1;
			c->state = CH_SIZE;
			break;
		case CH_TRAILER:
			i++;
			if (++c->trailer > H1_TRAILER_MAX)
				return -1;
			if (ch == '\n') {
				if (c->line_len == 0)
					c->state = CH_DONE;
				c->line_len = 0;
			} else if (ch != '\r' || c->line_len) {
				/* A CR that starts a line is part of the final CR LF. */
				c->line_len++;
			}
			break;
		}
	}
	c->done = c->state == CH_DONE;
	*used = i;
	return (ssize_t)o;
}
