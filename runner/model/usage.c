/* Usage accounting and body framing: see usage.h. */
#include "model/usage.h"

#include <ctype.h>
#include <string.h>

void mu_usage_add(struct mu_usage *sum, const struct mu_usage *u)
{
	sum->prompt_tokens += u->prompt_tokens;
	sum->completion_tokens += u->completion_tokens;
	sum->total_tokens += u->total_tokens;
	sum->cache_read_tokens += u->cache_read_tokens;
	sum->cache_creation_tokens += u->cache_creation_tokens;
}

json_t *mu_usage_json(const struct mu_usage *u)
{
	return json_pack("{s:I,s:I,s:I,s:I,s:I}", "prompt_tokens", (json_int_t)u->prompt_tokens,
			 "completion_tokens", (json_int_t)u->completion_tokens, "total_tokens",
			 (json_int_t)u->total_tokens, "cache_read_tokens",
			 (json_int_t)u->cache_read_tokens, "cache_creation_tokens",
			 (json_int_t)u->cache_creation_tokens);
}

json_t *mu_tokens_json(int64_t prompt, int64_t completion, int64_t total)
{
	return json_pack("{s:I,s:I,s:I}", "prompt_tokens", (json_int_t)prompt, "completion_tokens",
			 (json_int_t)completion, "total_tokens", (json_int_t)total);
}

bool mu_count(json_t *obj, const char *key, int64_t *out)
{
	json_t *v = json_object_get(obj, key);
	/* A count past 2^40 is no count a model reports: a hostile gateway
	 * must not overflow the sums. */
	if (!json_is_integer(v) || json_integer_value(v) < 0 ||
	    json_integer_value(v) > ((json_int_t)1 << 40))
		return false;
	*out = json_integer_value(v);
	return true;
}

void mu_frame_init(struct mu_frame *f, void (*take)(void *, const char *, json_t *), void *arg,
		   const char *needle)
{
	memset(f, 0, sizeof(*f));
	f->take = take;
	f->arg = arg;
	f->needle = needle;
}

void mu_frame_free(struct mu_frame *f)
{
	buf_free(&f->line);
	buf_free(&f->data);
	buf_free(&f->doc);
}

void mu_sse_field(const char *l, size_t n, size_t *flen, const char **v, size_t *vlen)
{
	const char *colon = memchr(l, ':', n);
	*flen = colon ? (size_t)(colon - l) : n;
	*v = colon ? colon + 1 : l + n;
	*vlen = (size_t)(l + n - *v);
	if (*vlen && **v == ' ') {
		(*v)++;
		(*vlen)--;
	}
}

static void parse(struct mu_frame *f, const char *event, const char *d, size_t n)
{
	if (f->needle && !memmem(d, n, f->needle, strlen(f->needle)))
		return;
	json_t *j = json_loadb(d, n, 0, NULL);
	if (j && (json_is_object(j) || json_is_array(j)))
		f->take(f->arg, event, j);
	json_decref(j);
}

static void dispatch(struct mu_frame *f)
{
	if (f->have_data && f->data.len <= MU_MAX_EVENT)
		parse(f, f->event, f->data.data ? f->data.data : "", f->data.len);
	else if (f->have_data)
		f->skipped++;
	f->have_data = false;
	f->data.len = 0;
	f->event[0] = 0;
}

static void on_line(struct mu_frame *f, const char *l, size_t n)
{
	if (n == 0) {
		dispatch(f);
		return;
	}
	if (l[0] == ':')
		return;
	size_t flen, vlen;
	const char *v;
	mu_sse_field(l, n, &flen, &v, &vlen);
	if (flen == 5 && !memcmp(l, "event", 5)) {
		size_t k = vlen < sizeof(f->event) - 1 ? vlen : sizeof(f->event) - 1;
		memcpy(f->event, v, k);
		f->event[k] = 0;
		return;
	}
	if (flen != 4 || memcmp(l, "data", 4))
		return;
	/* Past the limit the event is only counted, never grown further. */
	if (f->data.len <= MU_MAX_EVENT) {
		if (f->have_data)
			buf_append(&f->data, "\n", 1);
		if (f->data.len + vlen > MU_MAX_EVENT)
			f->data.len = MU_MAX_EVENT + 1;
		else if (vlen)
			buf_append(&f->data, v, vlen);
	}
	f->have_data = true;
}

static void end_line(struct mu_frame *f)
{
	if (f->line_over) {
		/* A line cut by the limit: its event cannot be read. */
		f->have_data = true;
		f->data.len = MU_MAX_EVENT + 1;
	} else {
		on_line(f, f->line.data ? f->line.data : "", f->line.len);
	}
	f->line.len = 0;
	f->line_over = false;
}

static void feed_sse(struct mu_frame *f, const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char c = p[i];
		if (f->after_cr) {
			f->after_cr = false;
			if (c == '\n')
				continue;
		}
		if (c == '\n' || c == '\r') {
			end_line(f);
			f->after_cr = c == '\r';
			continue;
		}
		size_t j = i;
		while (j < n && p[j] != '\n' && p[j] != '\r')
			j++;
		if (!f->line_over && f->line.len + (j - i) > MU_MAX_EVENT) {
			f->line_over = true;
			buf_free(&f->line);
		}
		if (!f->line_over && buf_append(&f->line, p + i, j - i) < 0) {
			f->line_over = true;
			buf_free(&f->line);
		}
		i = j - 1;
	}
}

void mu_frame_feed(struct mu_frame *f, const char *p, size_t n)
{
	size_t i = 0;
	if (!f->decided) {
		while (i < n && isspace((unsigned char)p[i]))
			i++;
		if (i == n)
			return;
		f->decided = true;
		f->sse = p[i] != '{' && p[i] != '[';
	}
	if (f->sse) {
		feed_sse(f, p + i, n - i);
		return;
	}
	if (f->doc_over)
		return;
	if (f->doc.len + (n - i) > MU_MAX_DOC || buf_append(&f->doc, p + i, n - i) < 0) {
		f->doc_over = true;
		f->skipped++;
		buf_free(&f->doc);
	}
}

void mu_frame_eof(struct mu_frame *f)
{
	if (f->sse) {
		if (f->line.len || f->line_over)
			end_line(f);
		dispatch(f);
	} else if (!f->doc_over && f->doc.len) {
		json_t *j = json_loadb(f->doc.data, f->doc.len, 0, NULL);
		if (j && (json_is_object(j) || json_is_array(j)))
			f->take(f->arg, NULL, j);
		json_decref(j);
	}
	f->line.len = f->data.len = f->doc.len = 0;
	f->have_data = false;
}
