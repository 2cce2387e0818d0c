/* SPDX-License-Identifier: MIT */
/*
 * The parsed form (meta_parsed.h): a head, then the model's arrays as
 * they lie in memory, each padded to 8 bytes.  Taking one back checks
 * the head, the hash of the rest, and then every index, length and
 * string reference against the arrays' bounds, each chunk against its
 * tensor's shape and the tiling, as the parser leaves them: a form that
 * passes cannot make a read leave its arrays or its records.
 */
#include "model/meta_parsed.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <xxhash.h>

#include "common/errbuf.h"
#include "common/escape.h"
#include "common/relpath.h"
#include "common/strides.h"
#include "model/tiling.h"

#define MAGIC "CKPTPRS"		/* and a NUL: 8 bytes */
#define FORM_VERSION 1		/* bumped when what the arrays mean changes */

enum { A_ENTRIES, A_CHUNKS, A_DIMS, A_COMPS, A_FILES, A_ZRECS, A_GUARDS,
       A_LAZY, A_LOCATED, A_STRINGS, NARR };

struct head {
	char magic[8];
	uint64_t layout;	/* layout_id() of the build that wrote it */
	uint64_t tag;
	uint64_t body_hash;	/* XXH3 of every byte after the head */
	uint64_t version;	/* m->version */
	uint64_t count[NARR];	/* elements of each array */
	uint32_t nlazy;
	uint32_t pad;
};

_Static_assert(sizeof(struct head) <=
	       sizeof(((struct ckpt_parsed_iov *)0)->head) &&
	       sizeof(struct head) % 8 == 0, "the head fits, 8-aligned");
_Static_assert(1 + 2 * NARR <= CKPT_PARSED_IOV_MAX, "iovecs enough");

static const size_t elem_size[NARR] = {
	sizeof(struct ckpt_entry), sizeof(struct ckpt_chunk),
	sizeof(uint64_t), sizeof(struct ckpt_comp), sizeof(struct ckpt_file),
	sizeof(struct ckpt_zrec), sizeof(struct ckpt_guard),
	sizeof(struct ckpt_lazy), sizeof(uint8_t), sizeof(char),
};

/* What a form's bytes mean to this build: its version, and the size and
 * layout of each struct in it. */
static uint64_t layout_id(void)
{
	char s[512];
	int n;

	n = snprintf(s, sizeof(s),
		     "ckptfs parsed %d %s e%zu.%zu.%zu c%zu.%zu.%zu.%zu "
		     "m%zu f%zu z%zu.%zu g%zu.%zu l%zu.%zu",
		     FORM_VERSION, CKPT_LIB_VERSION,
		     sizeof(struct ckpt_entry),
		     offsetof(struct ckpt_entry, size_at),
		     offsetof(struct ckpt_entry, nbytes),
		     sizeof(struct ckpt_chunk),
		     offsetof(struct ckpt_chunk, foff),
		     offsetof(struct ckpt_chunk, xxh3),
		     offsetof(struct ckpt_chunk, has_crc32),
		     sizeof(struct ckpt_comp), sizeof(struct ckpt_file),
		     sizeof(struct ckpt_zrec),
		     offsetof(struct ckpt_zrec, transforms),
		     sizeof(struct ckpt_guard),
		     offsetof(struct ckpt_guard, chunk),
		     sizeof(struct ckpt_lazy),
		     offsetof(struct ckpt_lazy, guard_off));
	return XXH3_64bits(s, (size_t)n);
}

static const uint8_t zeros[8];

int ckpt_meta_parsed_pack(const struct ckpt_meta *m, uint64_t tag,
			  struct ckpt_parsed_iov *out)
{
	struct head h = { .tag = tag, .version = m->version,
			  .nlazy = m->nlazy };
	const void *base[NARR] = {
		m->entries, m->chunks, m->dims, m->comps, m->files, m->zrecs,
		m->guards, m->lazy, (const void *)m->located, m->strings,
	};
	XXH3_state_t *st;
	uint32_t i;
	int a;

	for (i = 0; m->lazy && i < m->nchunks; i++) {
		uint8_t l = __atomic_load_n((const uint8_t *)&m->located[i],
					    __ATOMIC_ACQUIRE);

		if ((l != CKPT_LOC_DONE && l != CKPT_LOC_PENDING) ||
		    m->lazy[i].guard_len)
			return -EINVAL;	/* located in, or being */
	}
	memcpy(h.magic, MAGIC, sizeof(h.magic));
	h.layout = layout_id();
	h.count[A_ENTRIES] = m->nentries;
	h.count[A_CHUNKS] = m->nchunks;
	h.count[A_DIMS] = m->ndims;
	h.count[A_COMPS] = m->ncomps;
	h.count[A_FILES] = m->nfiles;
	h.count[A_ZRECS] = m->nzrecs;
	h.count[A_GUARDS] = m->nguards;
	h.count[A_LAZY] = h.count[A_LOCATED] = m->lazy ? m->nchunks : 0;
	h.count[A_STRINGS] = m->strings_len;
	st = XXH3_createState();
	if (!st)
		return -ENOMEM;
	XXH3_64bits_reset(st);
	out->n = 1;
	out->len = sizeof(h);
	for (a = 0; a < NARR; a++) {
		size_t bytes = (size_t)h.count[a] * elem_size[a];
		size_t pad = (8 - bytes % 8) % 8;

		if (!bytes)
			continue;
		out->iov[out->n].iov_base = (void *)base[a];
		out->iov[out->n++].iov_len = bytes;
		XXH3_64bits_update(st, base[a], bytes);
		if (pad) {
			out->iov[out->n].iov_base = (void *)zeros;
			out->iov[out->n++].iov_len = pad;
			XXH3_64bits_update(st, zeros, pad);
		}
		out->len += bytes + pad;
	}
	h.body_hash = XXH3_64bits_digest(st);
	XXH3_freeState(st);
	memcpy(out->head, &h, sizeof(h));
	out->iov[0].iov_base = out->head;
	out->iov[0].iov_len = sizeof(h);
	return 0;
}

void ckpt_meta_parsed_restamp(uint8_t *buf, size_t len, uint64_t tag)
{
	struct head h;

	if (len < sizeof(h))
		return;
	memcpy(&h, buf, sizeof(h));
	memcpy(h.magic, MAGIC, sizeof(h.magic));
	h.layout = layout_id();
	h.tag = tag;
	h.body_hash = XXH3_64bits(buf + sizeof(h), len - sizeof(h));
	memcpy(buf, &h, sizeof(h));
}

struct loader {
	struct ckpt_meta *m;
	const char *name;
	char *err;
	size_t errlen;
	bool ascii;		/* every string is ASCII: valid UTF-8 */
};

/* Whether s[0..n) is ASCII, a word at a time. */
static bool is_ascii(const char *s, size_t n)
{
	uint64_t w, any = 0;
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		memcpy(&w, s + i, 8);
		any |= w;
	}
	for (; i < n; i++)
		any |= (uint8_t)s[i];
	return !(any & 0x8080808080808080ull);
}

/* Set bit i of b: whether it was set already. */
static bool bit_set(uint8_t *b, uint64_t i)
{
	uint8_t mask = (uint8_t)(1u << (i % 8));
	bool was = b[i / 8] & mask;

	b[i / 8] |= mask;
	return was;
}

/* Set bits [at, at + n) of b: whether any was set already. */
static bool range_set(uint8_t *b, uint64_t at, uint64_t n)
{
	bool any = false;

	while (n--)
		any |= bit_set(b, at++);
	return any;
}

__attribute__((format(printf, 2, 3)))
static int corrupt(struct loader *ld, const char *fmt, ...)
{
	char what[160];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	return ckpt_errf(ld->err, ld->errlen, -EINVAL,
			 "%s: parsed form is corrupt: %s", ld->name, what);
}

/* A string of len bytes at off, NUL-terminated, inside the strings. */
static bool has_string(const struct ckpt_meta *m, uint64_t off, uint64_t len)
{
	return off + len < m->strings_len && m->strings[off + len] == '\0';
}

/* Is this byte of a struct read from the form a bool (0 or 1)? */
static bool is_bool(const void *p)
{
	return *(const unsigned char *)p <= 1;
}

/* Chunk ci of entry e, as the parser leaves it: inside the shape, its
 * record's bytes as long as its elements need, its indices in bounds. */
static int check_chunk(struct loader *ld, const struct ckpt_entry *e,
		       uint32_t ci)
{
	const struct ckpt_meta *m = ld->m;
	const struct ckpt_chunk *c = &m->chunks[ci];
	uint64_t end, want = ckpt_dtype_size(e->dtype), span, bytes;
	uint8_t loc = m->lazy ? m->located[ci] : CKPT_LOC_DONE;
	const uint64_t *off, *sz;
	unsigned d;

	if ((uint64_t)c->dims_at + 2u * e->ndim > m->ndims ||
	    !is_bool(&c->has_xxh3) || !is_bool(&c->has_crc32))
		return corrupt(ld, "chunk %" PRIu32 ": dims or flags", ci);
	/* Located or to be, nothing between; only a locate fills a lazy
	 * record's guard. */
	if ((loc != CKPT_LOC_DONE && loc != CKPT_LOC_PENDING) ||
	    (m->lazy && (m->lazy[ci].guard_len || m->lazy[ci].guard_off ||
			 m->lazy[ci].guard_xxh3)))
		return corrupt(ld, "chunk %" PRIu32 ": located state", ci);
	off = ckpt_chunk_offsets(m, c);
	sz = ckpt_chunk_sizes(m, e, c);
	for (d = 0; d < e->ndim; d++) {
		if (__builtin_add_overflow(off[d], sz[d], &end) ||
		    end > ckpt_entry_shape(m, e)[d] ||
		    __builtin_mul_overflow(want, sz[d], &want))
			return corrupt(ld, "chunk %" PRIu32
				       " lies outside its shape", ci);
	}
	if (e->kind == CKPT_KIND_BYTES)
		want = e->nbytes;
	if (__builtin_add_overflow(c->foff, c->len, &end) || end > INT64_MAX)
		return corrupt(ld, "chunk %" PRIu32 ": record overflows", ci);
	if (c->file == CKPT_NONE)
		return corrupt(ld, "chunk %" PRIu32 " has no record", ci);
	if (ckpt_is_zrec(c->file)) {
		uint32_t z = c->file & ~CKPT_ZREC;

		/* a bytes record's is raw: only a tensor's is an archive */
		if (z >= m->nzrecs || m->zrecs[z].chunk != ci ||
		    loc != CKPT_LOC_DONE || c->foff || c->len != want ||
		    c->strides_at != CKPT_NONE ||
		    (m->zrecs[z].payload != CKPT_PAYLOAD_RAW &&
		     e->kind != CKPT_KIND_TENSOR))
			return corrupt(ld, "chunk %" PRIu32
				       ": record with transforms", ci);
		return 0;
	}
	if (c->file >= m->nfiles)
		return corrupt(ld, "chunk %" PRIu32 ": file index", ci);
	if (loc == CKPT_LOC_PENDING) {
		const struct ckpt_lazy *l = &m->lazy[ci];

		/* its strides' own dims: check_dims() */
		if (e->kind != CKPT_KIND_TENSOR ||
		    c->strides_at != CKPT_NONE ||
		    __builtin_add_overflow(l->boff, l->blen, &end) ||
		    end > INT64_MAX ||
		    (l->strides_at != CKPT_NONE &&
		     (uint64_t)l->strides_at + e->ndim > m->ndims))
			return corrupt(ld, "chunk %" PRIu32
				       ": record located lazily", ci);
		return 0;	/* foff, len, strides: placeholders */
	}
	if (c->strides_at == CKPT_NONE)
		return c->len == want ? 0 :
		       corrupt(ld, "chunk %" PRIu32 ": record length", ci);
	if ((uint64_t)c->strides_at + e->ndim > m->ndims ||
	    e->kind != CKPT_KIND_TENSOR ||
	    ckpt_strided_span(sz, m->dims + c->strides_at, e->ndim, &span) ||
	    __builtin_mul_overflow(span, ckpt_dtype_size(e->dtype), &bytes) ||
	    bytes > c->len)
		return corrupt(ld, "chunk %" PRIu32 ": strides", ci);
	return 0;
}

/* Entry i and its chunks, which must start at *next (chunk ranges follow
 * entry order); *next moves past them. */
static int check_entry(struct loader *ld, uint32_t i, uint64_t *next,
		       uint64_t *pending)
{
	const struct ckpt_meta *m = ld->m;
	const struct ckpt_entry *e = &m->entries[i];
	uint64_t numel = 1, nbytes;
	uint32_t j;
	unsigned d;
	int rc;

	if (!has_string(m, e->fqn, e->fqn_len) ||
	    memchr(m->strings + e->fqn, '\0', e->fqn_len) ||
	    !(ld->ascii ||
	      ckpt_utf8_is_valid(m->strings + e->fqn, e->fqn_len)) ||
	    !is_bool(&e->requires_grad) ||
	    (e->kind != CKPT_KIND_TENSOR && e->kind != CKPT_KIND_BYTES) ||
	    e->ndim > CKPT_MAX_DIMS ||
	    (uint64_t)e->size_at + e->ndim > m->ndims ||
	    e->chunk_first != *next ||
	    (uint64_t)e->chunk_first + e->nchunks > m->nchunks ||
	    (e->ncomps && (uint64_t)e->comp_first + e->ncomps > m->ncomps))
		return corrupt(ld, "entry %" PRIu32, i);
	*next += e->nchunks;
	if (e->kind == CKPT_KIND_BYTES) {
		if (e->ndim || e->nchunks != 1 || e->nbytes > INT64_MAX)
			return corrupt(ld, "bytes entry %" PRIu32, i);
	} else {
		for (d = 0; d < e->ndim; d++)
			if (__builtin_mul_overflow(numel,
						   ckpt_entry_shape(m, e)[d],
						   &numel))
				return corrupt(ld, "entry %" PRIu32 ": shape", i);
		if (!ckpt_dtype_size(e->dtype) || numel != e->numel ||
		    __builtin_mul_overflow(numel, ckpt_dtype_size(e->dtype),
					   &nbytes) ||
		    nbytes != e->nbytes || nbytes > INT64_MAX)
			return corrupt(ld, "entry %" PRIu32 ": size", i);
	}
	for (j = 0; j < e->nchunks; j++) {
		uint32_t ci = e->chunk_first + j;

		rc = check_chunk(ld, e, ci);
		if (rc)
			return rc;
		if (m->lazy && m->located[ci] == CKPT_LOC_PENDING)
			(*pending)++;
		if (j && ckpt_dims_cmp(ckpt_chunk_offsets(m, &m->chunks[ci - 1]),
				       ckpt_chunk_offsets(m, &m->chunks[ci]),
				       e->ndim) >= 0)
			return corrupt(ld, "entry %" PRIu32
				       ": chunks out of order", i);
	}
	if (e->kind != CKPT_KIND_TENSOR)
		return 0;
	return ckpt_tiling_check(m, e, ld->name, ld->err, ld->errlen);
}

static int oom(struct loader *ld)
{
	return ckpt_errf(ld->err, ld->errlen, -ENOMEM, "%s: out of memory",
			 ld->name);
}

/* The dims a locate writes (a pending record's strides) are that
 * record's own: no shape, offsets, sizes or strides, nor another pending
 * record's, lie there (the parser reserves them apart). */
static int check_dims(struct loader *ld)
{
	const struct ckpt_meta *m = ld->m;
	uint8_t *b = calloc((size_t)m->ndims / 8 + 1, 1);
	uint32_t i, j;
	int rc = 0;

	if (!b)
		return oom(ld);
	for (i = 0; i < m->nentries; i++) {
		const struct ckpt_entry *e = &m->entries[i];

		range_set(b, e->size_at, e->ndim);
		for (j = 0; j < e->nchunks; j++) {
			const struct ckpt_chunk *c = &m->chunks[e->chunk_first + j];

			range_set(b, c->dims_at, 2u * e->ndim);
			if (c->strides_at != CKPT_NONE)
				range_set(b, c->strides_at, e->ndim);
		}
	}
	for (i = 0; m->lazy && !rc && i < m->nentries; i++) {
		const struct ckpt_entry *e = &m->entries[i];

		for (j = 0; !rc && j < e->nchunks; j++) {
			uint32_t ci = e->chunk_first + j;
			uint32_t at = m->lazy[ci].strides_at;

			if (m->located[ci] == CKPT_LOC_PENDING &&
			    at != CKPT_NONE && range_set(b, at, e->ndim))
				rc = corrupt(ld, "chunk %" PRIu32
					     ": its strides' dims are another's",
					     ci);
		}
	}
	free(b);
	return rc;
}

/* Each data file named once, as long as its records need. */
static int check_files(struct loader *ld)
{
	const struct ckpt_meta *m = ld->m;
	uint64_t *need = calloc((size_t)m->nfiles + 1, sizeof(*need));
	struct ckpt_strtab paths;
	uint32_t i, f;
	int rc = 0;

	if (!need)
		return oom(ld);
	for (i = 0; i < m->nchunks; i++) {
		const struct ckpt_chunk *c = &m->chunks[i];
		uint64_t end = c->foff + c->len;	/* checked */

		if (ckpt_is_zrec(c->file)) {
			const struct ckpt_zrec *z = ckpt_chunk_zrec(m, c);

			f = z->file;
			end = z->off + z->len;
		} else {
			f = c->file;
			if (m->lazy && m->located[i] == CKPT_LOC_PENDING &&
			    m->lazy[i].boff + m->lazy[i].blen > end)
				end = m->lazy[i].boff + m->lazy[i].blen;
		}
		if (end > need[f])
			need[f] = end;
	}
	for (i = 0; !rc && i < m->nfiles; i++)
		if (m->files[i].need < need[i])
			rc = corrupt(ld, "data file %" PRIu32
				     ": shorter than its records", i);
	free(need);
	if (rc)
		return rc;
	if (ckpt_strtab_init(&paths, m->nfiles, ckpt_meta_path_key, m))
		return oom(ld);
	for (i = 0; !rc && i < m->nfiles; i++)
		if (ckpt_strtab_insert(&paths, i) != UINT32_MAX)
			rc = corrupt(ld, "data file %" PRIu32 ": named twice",
				     i);
	ckpt_strtab_destroy(&paths);
	return rc;
}

/* Everything else the arrays refer to. */
static int check_rest(struct loader *ld)
{
	const struct ckpt_meta *m = ld->m;
	uint8_t *seen;		/* a bit per chunk: has a guard */
	uint64_t end;
	uint32_t i;
	unsigned t;
	int rc;

	if (m->strings_len && m->strings[m->strings_len - 1] != '\0')
		return corrupt(ld, "strings end without a NUL");
	for (i = 0; i < m->ncomps; i++)
		if (!has_string(m, m->comps[i].str, m->comps[i].len) ||
		    !(ld->ascii ||
		      ckpt_utf8_is_valid(m->strings + m->comps[i].str,
					 m->comps[i].len)))
			return corrupt(ld, "path component %" PRIu32, i);
	for (i = 0; i < m->nfiles; i++) {
		const struct ckpt_file *f = &m->files[i];

		if (f->path >= m->strings_len ||
		    !ckpt_relpath_is_safe(m->strings + f->path,
					  (uint32_t)strlen(m->strings +
							   f->path)) ||
		    f->need_entry >= m->nentries || f->need > INT64_MAX)
			return corrupt(ld, "data file %" PRIu32, i);
	}
	for (i = 0; i < m->nzrecs; i++) {
		const struct ckpt_zrec *z = &m->zrecs[i];

		if (z->file >= m->nfiles || z->chunk >= m->nchunks ||
		    m->chunks[z->chunk].file != (CKPT_ZREC | i) ||
		    z->payload > CKPT_PAYLOAD_TORCH_SAVE ||
		    !z->ntransforms || z->ntransforms > CKPT_MAX_TRANSFORMS ||
		    __builtin_add_overflow(z->off, z->len, &end) ||
		    end > INT64_MAX)
			return corrupt(ld, "record with transforms %" PRIu32, i);
		for (t = 0; t < z->ntransforms; t++)
			if (z->transforms[t] != CKPT_XFORM_ZSTD)
				return corrupt(ld, "record with transforms %"
					       PRIu32, i);
	}
	/* A guard: the zip local header before a located plain record's
	 * bytes, one per record at most, naming its record's key. */
	seen = calloc((size_t)m->nchunks / 8 + 1, 1);
	if (!seen)
		return oom(ld);
	for (i = 0; i < m->nguards; i++) {
		const struct ckpt_guard *g = &m->guards[i];
		const struct ckpt_chunk *c;

		if (g->chunk >= m->nchunks)
			return corrupt(ld, "guard %" PRIu32, i);
		c = &m->chunks[g->chunk];
		if (c->file >= m->nfiles ||
		    (m->lazy && m->located[g->chunk] != CKPT_LOC_DONE) ||
		    g->entry >= m->nentries ||
		    ckpt_meta_chunk_entry(m, g->chunk) !=
		    &m->entries[g->entry] || !g->len || g->len > CKPT_GUARD_MAX ||
		    __builtin_add_overflow(g->off, (uint64_t)g->len, &end) ||
		    end > c->foff || bit_set(seen, g->chunk)) {
			free(seen);
			return corrupt(ld, "guard %" PRIu32, i);
		}
	}
	free(seen);
	rc = check_dims(ld);
	return rc ? rc : check_files(ld);
}

/* The FQN index, the lazy records' locks: what the parser makes beside
 * the arrays. */
static int finish(struct loader *ld)
{
	struct ckpt_meta *m = ld->m;
	uint32_t i;

	if (ckpt_strtab_init(&m->by_fqn, m->nentries, ckpt_meta_fqn_key, m))
		return oom(ld);
	for (i = 0; i < m->nentries; i++)
		if (ckpt_strtab_insert(&m->by_fqn, i) != UINT32_MAX)
			return corrupt(ld, "entry %" PRIu32
				       ": a key named twice", i);
	if (!m->lazy)
		return 0;
	m->locate_err = calloc(m->nchunks, sizeof(*m->locate_err));
	if (!m->locate_err) {
		m->lazy = NULL;		/* no locks to destroy */
		return oom(ld);
	}
	pthread_mutex_init(&m->locate_lock, NULL);
	pthread_cond_init(&m->located_cv, NULL);
	pthread_rwlock_init(&m->fetched_lock, NULL);
	ckpt_meta_fork_hook(m);
	return 0;
}

/* Point m's arrays into the body at p (len bytes) as h lays them out. */
static int place(struct loader *ld, const struct head *h, uint8_t *p,
		 size_t len)
{
	struct ckpt_meta *m = ld->m;
	void *at[NARR];
	size_t used = 0;
	int a;

	for (a = 0; a < NARR; a++) {
		uint64_t bytes, padded;

		if (__builtin_mul_overflow(h->count[a], elem_size[a], &bytes) ||
		    __builtin_add_overflow(bytes, (8 - bytes % 8) % 8,
					   &padded) ||
		    padded > len - used)
			return corrupt(ld, "array %d runs past the end", a);
		at[a] = p + used;
		used += padded;
	}
	if (used != len)
		return corrupt(ld, "%zu bytes after the arrays",
			       len - used);
	for (a = 0; a < A_STRINGS; a++)
		if (a != A_LAZY && a != A_LOCATED && h->count[a] > UINT32_MAX)
			return corrupt(ld, "array %d too long", a);
	if (h->count[A_STRINGS] > UINT32_MAX ||
	    h->count[A_LAZY] != h->count[A_LOCATED] ||
	    (h->count[A_LAZY] && h->count[A_LAZY] != h->count[A_CHUNKS]))
		return corrupt(ld, "lazy records");
	m->version = h->version;
	m->entries = at[A_ENTRIES];
	m->nentries = (uint32_t)h->count[A_ENTRIES];
	m->chunks = at[A_CHUNKS];
	m->nchunks = (uint32_t)h->count[A_CHUNKS];
	m->dims = at[A_DIMS];
	m->ndims = (uint32_t)h->count[A_DIMS];
	m->comps = at[A_COMPS];
	m->ncomps = (uint32_t)h->count[A_COMPS];
	m->files = at[A_FILES];
	m->nfiles = (uint32_t)h->count[A_FILES];
	m->zrecs = at[A_ZRECS];
	m->nzrecs = (uint32_t)h->count[A_ZRECS];
	m->guards = at[A_GUARDS];
	m->nguards = (uint32_t)h->count[A_GUARDS];
	m->strings = at[A_STRINGS];
	m->strings_len = (size_t)h->count[A_STRINGS];
	if (h->count[A_LAZY]) {
		m->lazy = at[A_LAZY];
		m->located = at[A_LOCATED];
	}
	return 0;
}

bool ckpt_meta_parsed_fits(const uint8_t *buf, size_t len, uint64_t tag)
{
	struct head h;

	if (len < sizeof(h) || memcmp(buf, MAGIC, sizeof(h.magic)))
		return false;
	memcpy(&h, buf, sizeof(h));
	return h.layout == layout_id() && h.tag == tag;
}

int ckpt_meta_parsed_load(uint8_t *buf, size_t len, uint64_t tag,
			  const char *name, struct ckpt_meta **out, char *err,
			  size_t errlen)
{
	struct loader ld = { .name = name, .err = err, .errlen = errlen };
	uint64_t next = 0, pending = 0;
	struct head h;
	uint32_t i;
	int rc;

	*out = NULL;
	if (len < sizeof(h) || memcmp(buf, MAGIC, sizeof(h.magic))) {
		rc = ckpt_errf(err, errlen, -EBADMSG,
			       "%s: not a parsed form (%s)", name,
			       len < sizeof(h) ? "too short" : "no magic");
		goto out_buf;
	}
	memcpy(&h, buf, sizeof(h));
	if (h.layout != layout_id() || h.tag != tag) {
		rc = ckpt_errf(err, errlen, -ESTALE,
			       "%s: made by another build, or from another image",
			       name);
		goto out_buf;
	}
	if (XXH3_64bits(buf + sizeof(h), len - sizeof(h)) != h.body_hash) {
		rc = ckpt_errf(err, errlen, -EBADMSG,
			       "%s: parsed form is corrupt: its bytes do not hash to its stamp",
			       name);
		goto out_buf;
	}
	ld.m = calloc(1, sizeof(*ld.m));
	if (!ld.m) {
		rc = ckpt_errf(err, errlen, -ENOMEM, "%s: out of memory", name);
		goto out_buf;
	}
	ld.m->blob = buf;
	ld.m->blob_len = len;
	rc = place(&ld, &h, buf + sizeof(h), len - sizeof(h));
	ld.ascii = !rc && is_ascii(ld.m->strings, ld.m->strings_len);
	for (i = 0; !rc && i < ld.m->nentries; i++)
		rc = check_entry(&ld, i, &next, &pending);
	if (!rc && (next != ld.m->nchunks || pending != h.nlazy))
		rc = corrupt(&ld, "chunks no entry holds");
	if (!rc)
		rc = check_rest(&ld);
	if (!rc) {
		ld.m->nlazy = h.nlazy;
		rc = finish(&ld);
	}
	if (rc) {
		if (!ld.m->locate_err)
			ld.m->lazy = NULL;	/* finish() made no locks */
		ckpt_meta_free_parsed(ld.m);
		return rc;
	}
	ckpt_meta_set_origin(ld.m, CKPT_ORIGIN_NATIVE, 0);
	*out = ld.m;
	return 0;
out_buf:
	munmap(buf, len);
	return rc;
}
