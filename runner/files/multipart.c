/* Incremental multipart/form-data parser: see multipart.h.
 *
 * The body is scanned for the delimiter "\r\n--BOUNDARY" as if a "\r\n"
 * came before its first byte (so a body starting with "--BOUNDARY" needs no
 * special case). A partial delimiter at the end of a chunk is carried over
 * as a count only: its bytes are the delimiter's own prefix. Because a
 * boundary never contains '\r', a delimiter can only start at a '\r', and
 * when a carried match fails no other delimiter can start inside the
 * carried bytes: they are data, and scanning resumes at the current byte. */
#include "files/multipart.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

static int fail(struct multipart *m, const char *why)
{
	if (!m->err[0])
		snprintf(m->err, sizeof(m->err), "%s", why);
	m->state = MP_ERROR;
	return -1;
}

static bool is_ws(char c)
{
	return c == ' ' || c == '\t';
}

static bool is_tspecial(char c)
{
	return strchr("()<>@,;:\\\"/[]?=", c) != NULL;
}

/* One "; key=value" parameter from *pp (value a token or a quoted string,
 * unescaped into val). Returns 1 with one parameter, 0 at the end, -1 on
 * bad syntax or a value that does not fit. */
static int next_param(const char **pp, const char *end, char *key, size_t keylen, char *val,
		      size_t vallen)
{
	const char *p = *pp;
	while (p < end && is_ws(*p))
		p++;
	if (p == end)
		return 0;
	if (*p != ';')
		return -1;
	p++;
	while (p < end && is_ws(*p))
		p++;
	if (p == end)
		return 0; /* a trailing ';' is tolerated */
	size_t kl = 0;
	while (p < end && *p != '=' && !is_ws(*p) && !is_tspecial(*p) && (unsigned char)*p > 32) {
		if (kl + 1 >= keylen)
			return -1;
		key[kl++] = *p++;
	}
	key[kl] = 0;
	while (p < end && is_ws(*p))
		p++;
	if (kl == 0 || p == end || *p != '=')
		return -1;
	p++;
	while (p < end && is_ws(*p))
		p++;
	size_t vl = 0;
	if (p < end && *p == '"') {
		p++;
		for (;;) {
			if (p == end)
				return -1; /* unterminated */
			char c = *p++;
			if (c == '"')
				break;
			if (c == '\\') {
				if (p == end)
					return -1;
				c = *p++;
			}
			if (vl + 1 >= vallen)
				return -1;
			val[vl++] = c;
		}
	} else {
		while (p < end && *p != ';' && !is_ws(*p)) {
			if (vl + 1 >= vallen || *p == '"')
				return -1;
			val[vl++] = *p++;
		}
		if (vl == 0)
			return -1;
	}
	val[vl] = 0;
	*pp = p;
	return 1;
}

int multipart_init(struct multipart *m, const char *content_type, const struct mp_callbacks *cb,
		   void *arg)
{
	memset(m, 0, sizeof(*m));
	m->cb = cb;
	m->arg = arg;
	m->state = MP_ERROR;
	if (!content_type)
		return fail(m, "missing Content-Type (want multipart/form-data)");
	const char *p = content_type, *end = content_type + strlen(content_type);
	while (p < end && is_ws(*p))
		p++;
	static const char want[] = "multipart/form-data";
	if ((size_t)(end - p) < sizeof(want) - 1 || strncasecmp(p, want, sizeof(want) - 1) != 0 ||
	    (p[sizeof(want) - 1] && p[sizeof(want) - 1] != ';' && !is_ws(p[sizeof(want) - 1]))) {
		m->state = MP_PREAMBLE;
		return fail(m, "Content-Type is not multipart/form-data");
	}
	p += sizeof(want) - 1;
	char key[32], val[MP_BOUNDARY_MAX + 2];
	bool have = false;
	int rc;
	m->state = MP_PREAMBLE;
	while ((rc = next_param(&p, end, key, sizeof(key), val, sizeof(val))) == 1) {
		if (strcasecmp(key, "boundary") != 0)
			continue;
		size_t bl = strlen(val);
		if (bl == 0 || bl > MP_BOUNDARY_MAX)
			return fail(m, "the multipart boundary must be 1 to 70 characters");
		for (size_t i = 0; i < bl; i++)
			if ((unsigned char)val[i] < 32 || (unsigned char)val[i] > 126)
				return fail(
					m,
					"the multipart boundary has a control or non-ASCII byte");
		memcpy(m->delim, "\r\n--", 4);
		memcpy(m->delim + 4, val, bl + 1);
		m->dlen = 4 + bl;
		have = true;
	}
	if (rc < 0)
		return fail(m, "malformed Content-Type parameters");
	if (!have)
		return fail(m, "Content-Type has no multipart boundary");
	m->match = 2; /* as if "\r\n" preceded the body */
	return 0;
}

/* Parse the collected header block of a part into m->part. */
static int parse_headers(struct multipart *m)
{
	struct mp_part *pt = &m->part;
	memset(pt, 0, sizeof(*pt));
	if (memchr(m->hdr, 0, m->hlen))
		return fail(m, "NUL byte in part headers");
	bool have_cd = false;
	const char *p = m->hdr, *end = m->hdr + m->hlen - 2; /* drop the blank line's CRLF */
	while (p < end) {
		const char *eol = memmem(p, (size_t)(end - p), "\r\n", 2);
		if (!eol)
			return fail(m, "malformed part header line");
		if (is_ws(*p))
			return fail(m, "folded part headers are not supported");
		const char *colon = memchr(p, ':', (size_t)(eol - p));
		if (!colon || colon == p)
			return fail(m, "malformed part header line");
		size_t nl = (size_t)(colon - p);
		const char *v = colon + 1, *ve = eol;
		while (v < ve && is_ws(*v))
			v++;
		while (ve > v && is_ws(ve[-1]))
			ve--;
		if (nl == 19 && !strncasecmp(p, "Content-Disposition", nl)) {
			if (have_cd)
				return fail(m, "duplicate Content-Disposition");
			have_cd = true;
			const char *t = v;
			while (t < ve && *t != ';' && !is_ws(*t))
				t++;
			if (t - v != 9 || strncasecmp(v, "form-data", 9) != 0)
				return fail(m, "part Content-Disposition is not form-data");
			char key[32], val[MP_FILENAME_MAX];
			bool have_name = false;
			int rc;
			while ((rc = next_param(&t, ve, key, sizeof(key), val, sizeof(val))) == 1) {
				if (!strcasecmp(key, "name")) {
					if (strlen(val) >= sizeof(pt->name))
						return fail(m, "part name too long");
					memcpy(pt->name, val, strlen(val) + 1);
					have_name = true;
				} else if (!strcasecmp(key, "filename")) {
					memcpy(pt->filename, val, strlen(val) + 1);
					pt->has_filename = true;
				}
			}
			if (rc < 0)
				return fail(m, "malformed Content-Disposition parameters");
			if (!have_name)
				return fail(m, "part has no name");
		} else if (nl == 12 && !strncasecmp(p, "Content-Type", nl)) {
			size_t vl = (size_t)(ve - v);
			if (vl >= sizeof(pt->content_type))
				return fail(m, "part Content-Type too long");
			memcpy(pt->content_type, v, vl);
			pt->content_type[vl] = 0;
		}
		p = eol + 2;
	}
	if (!have_cd)
		return fail(m, "part without Content-Disposition");
	return 0;
}

static int emit(struct multipart *m, const char *data, size_t len)
{
	if (!len || m->state != MP_BODY)
		return 0;
	int rc = m->cb->part_data ? m->cb->part_data(m->arg, data, len) : 0;
	if (rc)
		m->state = MP_ERROR;
	return rc;
}

/* Scan for the delimiter, passing data on (in the body) or dropping it (in
 * the preamble), in as few callbacks as possible: one run of data per
 * chunk, cut only where a delimiter or a carried match interrupts it.
 * Returns 1 when a delimiter was consumed, 0 when the input ran out, or a
 * callback's value. */
static int scan(struct multipart *m, const char **pp, const char *end)
{
	const char *start = *pp, *p = start, *run = start;
	const char *mstart = NULL; /* where the current match began; NULL: in an earlier chunk */
	int rc;
	while (p < end) {
		if (m->match) {
			size_t need = m->dlen - m->match, avail = (size_t)(end - p);
			size_t n = avail < need ? avail : need;
			if (!memcmp(p, m->delim + m->match, n)) {
				m->match += n;
				p += n;
				if (m->match == m->dlen) {
					m->match = 0;
					if ((rc = emit(m, run,
						       (size_t)((mstart ? mstart : start) - run))))
						return rc;
					*pp = p;
					return 1;
				}
				continue; /* input ended inside a possible delimiter */
			}
			/* Not a delimiter. Begun in this chunk, its bytes simply stay
			 * in the run; carried from an earlier one, they come first. */
			if (!mstart && (rc = emit(m, m->delim, m->match)))
				return rc;
			m->match = 0;
			mstart = NULL;
			continue;
		}
		const char *cr = memchr(p, '\r', (size_t)(end - p));
		if (!cr) {
			p = end;
			break;
		}
		mstart = cr;
		m->match = 1;
		p = cr + 1;
	}
	/* Hold back a possible delimiter start; the rest of the run is data. */
	const char *upto = m->match ? (mstart ? mstart : start) : end;
	if ((rc = emit(m, run, (size_t)(upto - run))))
		return rc;
	*pp = end;
	return 0;
}

int multipart_feed(struct multipart *m, const char *data, size_t len)
{
	const char *p = data, *end = data + len;
	int rc;
	while (p < end) {
		switch (m->state) {
		case MP_ERROR:
			return -1;
		case MP_EPILOGUE:
			return 0; /* anything after the close delimiter is ignored */
		case MP_PREAMBLE:
		case MP_BODY:
			rc = scan(m, &p, end);
			if (rc == 0)
				break;
			if (rc != 1)
				return rc;
			if (m->state == MP_BODY && m->cb->part_end &&
			    (rc = m->cb->part_end(m->arg))) {
				m->state = MP_ERROR;
				return rc;
			}
			m->state = MP_AFTER_DELIM;
			m->after = 0;
			break;
		case MP_AFTER_DELIM: {
			char c = *p++;
			if (m->after == 0 && c == '-') {
				m->after = 1;
			} else if (m->after == 1) {
				if (c != '-')
					return fail(m, "malformed multipart delimiter line");
				m->state = MP_EPILOGUE;
			} else if ((m->after == 0 || m->after == 3) && is_ws(c)) {
				m->after = 3; /* transport padding */
			} else if ((m->after == 0 || m->after == 3) && c == '\r') {
				m->after = 2;
			} else if (m->after == 2 && c == '\n') {
				m->state = MP_HEADERS;
				m->hlen = 0;
			} else {
				return fail(m, "malformed multipart delimiter line");
			}
			break;
		}
		case MP_HEADERS: {
			/* Headers are small: byte by byte until the blank line. */
			while (p < end) {
				if (m->hlen == sizeof(m->hdr))
					return fail(m, "part headers too large");
				m->hdr[m->hlen++] = *p++;
				if ((m->hlen == 2 && !memcmp(m->hdr, "\r\n", 2)) ||
				    (m->hlen >= 4 &&
				     !memcmp(m->hdr + m->hlen - 4, "\r\n\r\n", 4))) {
					if (parse_headers(m) < 0)
						return -1;
					m->nparts++;
					m->state = MP_BODY;
					if (m->cb->part_begin &&
					    (rc = m->cb->part_begin(m->arg, &m->part))) {
						m->state = MP_ERROR;
						return rc;
					}
					break;
				}
			}
			break;
		}
		}
	}
	return m->state == MP_ERROR ? -1 : 0;
}

int multipart_finish(struct multipart *m)
{
	if (m->state == MP_EPILOGUE)
		return 0;
	if (m->state == MP_ERROR)
		return -1;
	return fail(m, m->state == MP_PREAMBLE && m->nparts == 0
			       ? "no multipart delimiter in the body"
			       : "multipart body truncated (no closing delimiter)");
}
