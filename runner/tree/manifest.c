/* A manifest's file in the store dir (tree.h): the full form (a header, the entries, the string
 * pool) read back through a private mapping (no copy), and the delta form: a manifest written as
 * the entries kept, removed, replaced and added against a full file (its base), with only the
 * new entries' strings. Writing a large manifest again is most of a checkpoint's cost when
 * little changed (docs/design/checkpoints.md#change-tracking-the-manifest-as-a-delta). */
#include "tree/tree.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/error.h"
#include "core/fileio.h"

#define MAGIC "FCKPT002"
#define DMAGIC "FCKDLT01"
#define FULL_HDR 24u     /* magic, entries, pool bytes */
#define DELTA_DIVISOR 8u /* a delta is written when under 1/8 of the full file */
#define GONE (UINT32_MAX - 1)

enum { OP_KEEP, OP_DEL, OP_REPL, OP_INS };
/* count consecutive base entries kept or removed, or new entries replacing or added. */
struct op {
	uint32_t kind, count;
};

struct dhdr {
	char magic[8];
	uint64_t n, pool_len; /* the manifest's */
	uint64_t base_n, base_pool;
	uint64_t n_ops, n_lit, tail_len;
	char base[48]; /* the base's file name */
};

static int write_file(int dir_fd, const char *name, const struct iovec *v, int n)
{
	char tmp[96];
	snprintf(tmp, sizeof(tmp), ".%s.tmp", name);
	int fd = openat(dir_fd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	int rc = 0;
	for (int i = 0; rc == 0 && i < n; i++)
		if (v[i].iov_len)
			rc = write_all(fd, v[i].iov_base, v[i].iov_len);
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	if (rc == 0 && renameat(dir_fd, tmp, dir_fd, name) < 0)
		rc = -errno;
	if (rc < 0)
		unlinkat(dir_fd, tmp, 0);
	return rc;
}

/* ---- reading ---- */

/* A full file (fd, size bytes) as m, in a private mapping of it. */
static int load_full(int fd, size_t size, struct tree_manifest *m)
{
	if (size < FULL_HDR)
		return -EINVAL;
	char *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	uint64_t hdr[3];
	memcpy(hdr, p, sizeof(hdr));
	if (memcmp(p, MAGIC, 8) || hdr[1] > TREE_MAX_ENTRIES || hdr[2] > UINT32_MAX ||
	    (hdr[1] && !hdr[2]) || FULL_HDR + hdr[1] * sizeof(struct tree_ent) + hdr[2] != size ||
	    (hdr[2] && p[size - 1])) {
		munmap(p, size);
		return -EINVAL;
	}
	m->file_map = p;
	m->file_len = size;
	m->n = m->cap = hdr[1];
	m->ent = (struct tree_ent *)(p + FULL_HDR);
	m->pool.buf = p + FULL_HDR + m->n * sizeof(*m->ent);
	m->pool.len = m->pool.cap = hdr[2];
	return 0;
}

static int load_any(int dir_fd, const char *name, bool full_only, struct tree_manifest *m);

static bool str_ok(uint32_t off, uint32_t len, size_t pool_len)
{
	return (uint64_t)off + len < pool_len;
}

/* The delta's operations on base b into m (its entries and pool allocated). */
static int apply(const struct tree_manifest *b, const struct op *ops, size_t n_ops,
		 const struct tree_ent *lit, size_t n_lit, struct tree_manifest *m, uint32_t *map)
{
	size_t k = 0, o = 0, l = 0;
	for (size_t i = 0; i < n_ops; i++) {
		uint32_t kind = ops[i].kind;
		bool from_b = kind != OP_INS, to_m = kind != OP_DEL, is_lit = kind >= OP_REPL;
		if (kind > OP_INS)
			return -EINVAL;
		for (uint32_t j = 0; j < ops[i].count; j++) {
			if ((from_b && k >= b->n) || (to_m && o >= m->n) || (is_lit && l >= n_lit))
				return -EINVAL;
			if (!to_m) {
				map[k++] = GONE;
				continue;
			}
			struct tree_ent e = is_lit ? lit[l++] : b->ent[k];
			if (!is_lit && e.parent != TREE_NONE)
				e.parent = e.parent < k ? map[e.parent] : GONE;
			if (e.parent != TREE_NONE && e.parent >= o)
				return -EINVAL;
			if (is_lit && (!str_ok(e.path_off, e.path_len, m->pool.len) ||
				       !str_ok(e.target_off, e.target_len, m->pool.len) ||
				       !str_ok(e.xattr_off, e.xattr_len, m->pool.len)))
				return -EINVAL;
			if (from_b)
				map[k++] = (uint32_t)o;
			m->ent[o++] = e;
		}
	}
	return k == b->n && o == m->n && l == n_lit ? 0 : -EINVAL;
}

/* A delta file (p, size bytes): its base read, the operations applied. */
static int load_delta(int dir_fd, const char *p, size_t size, struct tree_manifest *m)
{
	struct dhdr h;
	if (size < sizeof(h))
		return -EINVAL;
	memcpy(&h, p, sizeof(h));
	if (memcmp(h.magic, DMAGIC, 8) || h.base[sizeof(h.base) - 1] || h.n > TREE_MAX_ENTRIES ||
	    h.n_lit > h.n || h.base_n > TREE_MAX_ENTRIES || h.n_ops > h.n + h.base_n ||
	    h.base_pool > UINT32_MAX || h.tail_len > UINT32_MAX ||
	    h.base_pool + h.tail_len > UINT32_MAX ||
	    sizeof(h) + h.n_ops * sizeof(struct op) + h.n_lit * sizeof(struct tree_ent) +
			    h.tail_len !=
		    size ||
	    h.pool_len != h.base_pool + h.tail_len)
		return -EINVAL;
	struct tree_manifest b = {0};
	int rc = load_any(dir_fd, h.base, true, &b);
	if (rc < 0)
		return rc;
	uint32_t *map = malloc((b.n ? b.n : 1) * sizeof(*map));
	m->n = m->cap = h.n;
	m->pool.len = m->pool.cap = h.pool_len;
	m->ent = malloc((h.n ? h.n : 1) * sizeof(*m->ent));
	m->pool.buf = malloc(h.pool_len + 1);
	if (!map || !m->ent || !m->pool.buf)
		rc = -ENOMEM;
	else if (b.n != h.base_n || b.pool.len != h.base_pool)
		rc = -EINVAL;
	if (rc == 0) {
		const struct op *ops = (const struct op *)(p + sizeof(h));
		const struct tree_ent *lit = (const struct tree_ent *)(ops + h.n_ops);
		memcpy(m->pool.buf, b.pool.buf, h.base_pool);
		memcpy(m->pool.buf + h.base_pool, lit + h.n_lit, h.tail_len);
		m->pool.buf[h.pool_len] = 0;
		rc = apply(&b, ops, h.n_ops, lit, h.n_lit, m, map);
	}
	free(map);
	tree_manifest_free(&b);
	if (rc == 0)
		memcpy(m->base, h.base, sizeof(m->base));
	return rc;
}

static int load_any(int dir_fd, const char *name, bool full_only, struct tree_manifest *m)
{
	memset(m, 0, sizeof(*m));
	int fd = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	struct stat st;
	char magic[8];
	int rc = fstat(fd, &st) < 0 ? -errno : 0;
	if (rc == 0 && (st.st_size < 8 || pread(fd, magic, 8, 0) != 8))
		rc = -EINVAL;
	if (rc == 0 && !memcmp(magic, MAGIC, 8)) {
		rc = load_full(fd, (size_t)st.st_size, m);
		if (rc == 0)
			snprintf(m->base, sizeof(m->base), "%s", name);
	} else if (rc == 0 && !full_only && !memcmp(magic, DMAGIC, 8)) {
		char *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		rc = p == MAP_FAILED ? -errno : load_delta(dir_fd, p, (size_t)st.st_size, m);
		if (p != MAP_FAILED)
			munmap(p, (size_t)st.st_size);
	} else if (rc == 0) {
		rc = -EINVAL;
	}
	close(fd);
	if (rc < 0)
		tree_manifest_free(m);
	return rc;
}

int tree_manifest_load(int dir_fd, const char *name, struct tree_manifest *m, struct error *e)
{
	int rc = load_any(dir_fd, name, false, m);
	return rc < 0 ? error_set(e, -rc, NULL, "checkpoint: cannot read its manifest") : 0;
}

/* ---- writing ---- */

struct dbuild {
	struct op *ops;
	size_t n_ops, cap_ops;
	struct tree_ent *lit;
	size_t n_lit, cap_lit;
	struct tree_pool tail;
	uint64_t base_pool;
};

static int op_add(struct dbuild *d, uint32_t kind)
{
	if (d->n_ops && d->ops[d->n_ops - 1].kind == kind) {
		d->ops[d->n_ops - 1].count++;
		return 0;
	}
	if (tree_grow(&d->ops, &d->cap_ops, d->n_ops, sizeof(*d->ops)) < 0)
		return -ENOMEM;
	d->ops[d->n_ops++] = (struct op){kind, 1};
	return 0;
}

/* A string of m into the delta's tail: *off its offset in the manifest read back. */
static int str_add(struct dbuild *d, const struct tree_manifest *m, uint32_t *off, uint32_t len,
		   bool always)
{
	uint32_t t;
	if (!len && !always) {
		*off = 0;
		return 0;
	}
	if (tree_pool_add(&d->tail, m->pool.buf + *off, len, &t) < 0 ||
	    d->base_pool + t > UINT32_MAX)
		return -ENOMEM;
	*off = (uint32_t)(d->base_pool + t);
	return 0;
}

static int lit_add(struct dbuild *d, const struct tree_manifest *m, const struct tree_ent *e)
{
	if (tree_grow(&d->lit, &d->cap_lit, d->n_lit, sizeof(*d->lit)) < 0)
		return -ENOMEM;
	struct tree_ent x = *e;
	if (str_add(d, m, &x.path_off, x.path_len, true) < 0 ||
	    str_add(d, m, &x.target_off, x.target_len, false) < 0 ||
	    str_add(d, m, &x.xattr_off, x.xattr_len, false) < 0)
		return -ENOMEM;
	d->lit[d->n_lit++] = x;
	return 0;
}

/* a (of ma) is b (of mb) under the parent index given, but for where its strings are. */
static bool same_ent(const struct tree_manifest *ma, const struct tree_ent *a,
		     const struct tree_manifest *mb, const struct tree_ent *b, uint32_t parent)
{
	if (a->parent != parent || a->target_len != b->target_len || a->xattr_len != b->xattr_len)
		return false;
	struct tree_ent x = *a, y = *b;
	x.parent = y.parent = x.path_off = y.path_off = 0;
	x.target_off = y.target_off = x.xattr_off = y.xattr_off = 0;
	return !memcmp(&x, &y, sizeof(x)) &&
	       !memcmp(ma->pool.buf + a->target_off, mb->pool.buf + b->target_off, a->target_len) &&
	       !memcmp(ma->pool.buf + a->xattr_off, mb->pool.buf + b->xattr_off, a->xattr_len);
}

/* m against b, both in tree order: 0, 1 when the delta would not be worth it, or -errno. */
static int diff_against(const struct tree_manifest *m, const struct tree_manifest *b, uint32_t *map,
			struct dbuild *d, uint64_t budget)
{
	size_t i = 0, k = 0;
	int rc = 0;
	while (rc == 0 && (i < m->n || k < b->n)) {
		int c = i == m->n ? 1
			: k == b->n
				? -1
				: tree_pathcmp(tree_path(m, &m->ent[i]), tree_path(b, &b->ent[k]));
		if (c > 0) {
			map[k++] = GONE;
			rc = op_add(d, OP_DEL);
		} else if (c < 0) {
			rc = op_add(d, OP_INS);
			if (rc == 0)
				rc = lit_add(d, m, &m->ent[i]);
			i++;
		} else {
			uint32_t bp = b->ent[k].parent;
			uint32_t pp = bp == TREE_NONE ? TREE_NONE : bp < k ? map[bp] : GONE;
			bool keep = same_ent(m, &m->ent[i], b, &b->ent[k], pp);
			rc = op_add(d, keep ? OP_KEEP : OP_REPL);
			if (rc == 0 && !keep)
				rc = lit_add(d, m, &m->ent[i]);
			map[k++] = (uint32_t)i++;
		}
		if (rc == 0 && (d->n_ops * sizeof(struct op) + d->n_lit * sizeof(struct tree_ent) +
				d->tail.len) > budget)
			rc = 1;
	}
	return rc;
}

/* m as a delta against the full file base: 0, 1 when not worth it (or base unusable), or
 * -errno. */
static int save_delta(int dir_fd, const char *name, const struct tree_manifest *m, const char *base,
		      uint64_t full, uint64_t *bytes)
{
	struct dhdr h = {0};
	memcpy(h.magic, DMAGIC, 8);
	if (strlen(base) >= sizeof(h.base))
		return 1;
	struct tree_manifest b;
	if (load_any(dir_fd, base, true, &b) < 0)
		return 1;
	struct dbuild d = {.base_pool = b.pool.len};
	uint32_t *map = malloc((b.n ? b.n : 1) * sizeof(*map));
	int rc = map ? diff_against(m, &b, map, &d, full / DELTA_DIVISOR) : -ENOMEM;
	free(map);
	if (rc == 0) {
		snprintf(h.base, sizeof(h.base), "%s", base);
		h.n = m->n;
		h.base_n = b.n;
		h.base_pool = b.pool.len;
		h.tail_len = d.tail.len;
		h.pool_len = h.base_pool + h.tail_len;
		h.n_ops = d.n_ops;
		h.n_lit = d.n_lit;
		struct iovec v[] = {{&h, sizeof(h)},
				    {d.ops, d.n_ops * sizeof(*d.ops)},
				    {d.lit, d.n_lit * sizeof(*d.lit)},
				    {d.tail.buf, d.tail.len}};
		rc = write_file(dir_fd, name, v, 4);
		*bytes = sizeof(h) + v[1].iov_len + v[2].iov_len + v[3].iov_len;
	}
	tree_manifest_free(&b);
	free(d.ops);
	free(d.lit);
	tree_pool_free(&d.tail);
	return rc;
}

int tree_manifest_save(int dir_fd, const char *name, const struct tree_manifest *m,
		       const char *base, uint64_t *bytes, bool *delta, struct error *e)
{
	uint64_t full = FULL_HDR + m->n * sizeof(*m->ent) + m->pool.len;
	*delta = false;
	*bytes = full;
	int rc = base ? save_delta(dir_fd, name, m, base, full, bytes) : 1;
	if (rc == 0)
		*delta = true;
	if (rc > 0) {
		uint64_t hdr[3] = {0, m->n, m->pool.len};
		memcpy(&hdr[0], MAGIC, 8);
		struct iovec v[] = {{hdr, sizeof(hdr)},
				    {m->ent, m->n * sizeof(*m->ent)},
				    {m->pool.buf, m->pool.len}};
		*bytes = full;
		rc = write_file(dir_fd, name, v, 3);
	}
	return rc < 0 ? error_set(e, -rc, NULL, "checkpoint: cannot write its manifest") : 0;
}
