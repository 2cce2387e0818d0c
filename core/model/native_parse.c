/* SPDX-License-Identifier: MIT */
/*
 * `.metadata` (msgpack, format version 1) into a struct ckpt_meta, with
 * every check the format asks for: field types, dtypes, shapes, chunk
 * bounds and tiling, the chunk <-> record join, record lengths and paths.
 * All counts are checked against the bytes that remain before anything is
 * allocated, so memory follows the file's real size.
 */
#include "model/meta.h"

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bigbuf.h"
#include "common/errbuf.h"
#include "common/escape.h"
#include "common/grow.h"
#include "common/relpath.h"
#include "common/strides.h"
#include "common/mpcursor.h"
#include "model/tiling.h"
#include "model/transforms.h"

struct parser {
	struct ckpt_meta *m;
	bool partial;		/* one rank's part: chunks need not tile */
	const char *name;	/* file name for messages */
	char *err;
	size_t errlen;
	size_t cap_entries, cap_chunks, cap_dims, cap_comps, cap_strings;
	/* ckpt_meta_parse_spend(): the image before spent is given back
	 * (NULL: none is, or no more) */
	const uint8_t *spent;
};

/* Give back the image's pages a step at a time (a system call each). */
#define SPEND_STEP ((size_t)1 << 20)

/* The parse has read the image up to p, and holds no cursor before it
 * (ckpt_meta_parse_spend()): give back its pages before p. */
static void spend_to(struct parser *ps, const uint8_t *p)
{
	if (ps->spent && (size_t)(p - ps->spent) >= SPEND_STEP)
		ckpt_give_back(&ps->spent, p);
}

static int oom(struct parser *ps)
{
	return ckpt_errf(ps->err, ps->errlen, -ENOMEM,
			 "%s: out of memory", ps->name);
}

/* Copy s into the string pool, NUL-terminated; *at gets its offset. */
static int add_string(struct parser *ps, const char *s, size_t len,
		      uint32_t *at)
{
	struct ckpt_meta *m = ps->m;

	if (m->strings_len + len + 1 > UINT32_MAX)
		return ckpt_errf(ps->err, ps->errlen, -EFBIG,
				 "%s: too much string data", ps->name);
	if (ckpt_grow((void **)&m->strings, &ps->cap_strings,
		 m->strings_len + len + 1, 1))
		return oom(ps);
	memcpy(m->strings + m->strings_len, s, len);
	m->strings[m->strings_len + len] = '\0';
	*at = (uint32_t)m->strings_len;
	m->strings_len += len + 1;
	return 0;
}

static int type_error(struct parser *ps, const char *where, const char *field,
		      const char *want, const struct mp_cursor *c)
{
	return ckpt_errf(ps->err, ps->errlen, -EINVAL,
			 "%s: %s: field '%s': expected %s, got %s", ps->name,
			 where, field, want, mp_type_name(c));
}

static bool str_is(const char *s, uint32_t len, const char *lit)
{
	return strlen(lit) == len && memcmp(s, lit, len) == 0;
}

static int corrupt(struct parser *ps, const char *where)
{
	return ckpt_errf(ps->err, ps->errlen, -EBADMSG,
			 "%s: %s: truncated or malformed msgpack", ps->name,
			 where);
}

/* A map header at c, for the object named where. */
static int open_map(struct parser *ps, struct mp_cursor *c, const char *where,
		    uint32_t *n)
{
	int rc = mp_read_map(c, n);

	if (rc == -EPROTO)
		return ckpt_errf(ps->err, ps->errlen, -EINVAL,
				 "%s: %s: expected a map, got %s", ps->name,
				 where, mp_type_name(c));
	return rc ? corrupt(ps, where) : 0;
}

/* Read a uint array of exactly want items (want = CKPT_NONE: any count up
 * to CKPT_MAX_DIMS) into the dims pool; *at gets its start. */
static int read_dims(struct parser *ps, struct mp_cursor *c,
		     const char *where, const char *field, uint32_t want,
		     uint32_t *at, uint32_t *count)
{
	struct ckpt_meta *m = ps->m;
	uint32_t n, i;
	int rc;

	rc = mp_read_array(c, &n);
	if (rc == -EPROTO)
		return type_error(ps, where, field, "array of unsigned integers",
				  c);
	if (rc)
		return corrupt(ps, where);
	if (want == CKPT_NONE && n > CKPT_MAX_DIMS)
		return ckpt_errf(ps->err, ps->errlen, -EINVAL,
				 "%s: %s: field '%s' has %" PRIu32
				 " dims, at most %d are supported",
				 ps->name, where, field, n, CKPT_MAX_DIMS);
	if (want != CKPT_NONE && n != want)
		return ckpt_errf(ps->err, ps->errlen, -EINVAL,
				 "%s: %s: field '%s' has %" PRIu32
				 " dims, the tensor has %" PRIu32,
				 ps->name, where, field, n, want);
	if ((uint64_t)m->ndims + n > UINT32_MAX)
		return ckpt_errf(ps->err, ps->errlen, -EFBIG,
				 "%s: too many dims", ps->name);
	if (ckpt_grow((void **)&m->dims, &ps->cap_dims, m->ndims + n,
		 sizeof(*m->dims)))
		return oom(ps);
	for (i = 0; i < n; i++) {
		rc = mp_read_uint(c, &m->dims[m->ndims + i]);
		if (rc == -EPROTO || rc == -ERANGE)
			return type_error(ps, where, field,
					  "array of unsigned integers", c);
		if (rc)
			return corrupt(ps, where);
	}
	*at = m->ndims;
	m->ndims += n;
	if (count)
		*count = n;
	return 0;
}

/* "name[i]" into buf, returned: a chunk's or record's name in a message,
 * made only when one is written (the parse passes millions of them). */
static const char *fmt_index(char *buf, size_t len, const char *name,
			     uint32_t i)
{
	size_t at = 0;

	buf[0] = '\0';
	ckpt_msg_put(buf, len, &at, name, strlen(name));
	ckpt_msg_put(buf, len, &at, "[", 1);
	ckpt_msg_put_u64(buf, len, &at, i);
	ckpt_msg_put(buf, len, &at, "]", 1);
	return buf;
}

/* "chunks[ci]", for a message of parse_chunk(). */
#define CHUNK fmt_index(cw_buf, sizeof(cw_buf), "chunks", ci)

/* {"offsets": [...], "sizes": [...]} of entry e. */
static int parse_chunk(struct parser *ps, struct mp_cursor *c,
		       struct ckpt_entry *e, uint32_t ci, const char *where)
{
	struct ckpt_meta *m = ps->m;
	uint32_t n, i, len, off_at = CKPT_NONE, size_at = CKPT_NONE;
	struct ckpt_chunk *ch;
	const char *k;
	char cw_buf[64];
	int rc;

	rc = mp_read_map(c, &n);
	if (rc == -EPROTO)
		return type_error(ps, where, CHUNK, "map", c);
	if (rc)
		return corrupt(ps, where);
	for (i = 0; i < n; i++) {
		if (mp_read_str(c, &k, &len))
			return type_error(ps, where, CHUNK, "string keys",
					  c);
		if (str_is(k, len, "offsets") || str_is(k, len, "sizes")) {
			bool is_off = k[0] == 'o';
			uint32_t *slot = is_off ? &off_at : &size_at;
			const char *f = is_off ? "offsets" : "sizes";
			struct mp_cursor at_dims = *c;
			char fw[80];
			size_t at = 0;

			if (*slot != CKPT_NONE)
				return ckpt_errf(ps->err, ps->errlen, -EINVAL,
						 "%s: %s: %s: field '%s' given twice",
						 ps->name, where, CHUNK,
						 is_off ? "offsets" : "sizes");
			rc = read_dims(ps, c, where, f, e->ndim, slot, NULL);
			if (rc && rc != -ENOMEM) {
				/* Read again for the message, with the
				 * field's whole name: it fails the same. */
				const char *cw = CHUNK;

				fw[0] = '\0';
				ckpt_msg_put(fw, sizeof(fw), &at, cw, strlen(cw));
				ckpt_msg_put(fw, sizeof(fw), &at, ".", 1);
				ckpt_msg_put(fw, sizeof(fw), &at, f, strlen(f));
				*c = at_dims;
				rc = read_dims(ps, c, where, fw, e->ndim, slot,
					       NULL);
			}
			if (rc)
				return rc;
		} else if (mp_skip(c)) {
			return corrupt(ps, where);
		}
	}
	if (off_at == CKPT_NONE || size_at == CKPT_NONE)
		return ckpt_errf(ps->err, ps->errlen, -EINVAL,
				 "%s: %s: %s: missing field '%s'", ps->name,
				 where, CHUNK,
				 off_at == CKPT_NONE ? "offsets" : "sizes");
	/* Keep offsets and sizes adjacent in the pool. */
	if (size_at != off_at + e->ndim) {
		if (ckpt_grow((void **)&m->dims, &ps->cap_dims,
			 (size_t)m->ndims + 2 * e->ndim, sizeof(*m->dims)))
			return oom(ps);
		memcpy(m->dims + m->ndims, m->dims + off_at,
		       e->ndim * sizeof(*m->dims));
		memcpy(m->dims + m->ndims + e->ndim, m->dims + size_at,
		       e->ndim * sizeof(*m->dims));
		off_at = m->ndims;
		m->ndims += 2 * e->ndim;
	}
	if (ckpt_grow((void **)&m->chunks, &ps->cap_chunks, (size_t)m->nchunks + 1,
		 sizeof(*m->chunks)))
		return oom(ps);
	ch = &m->chunks[m->nchunks++];
	memset(ch, 0, sizeof(*ch));
	ch->dims_at = off_at;
	ch->file = CKPT_NONE;
	ch->strides_at = CKPT_NONE;
	return 0;
}

#undef CHUNK

/* A tensor entry's shape and chunks must agree: bounds, sizes, overflow. */
static int check_tensor_geometry(struct parser *ps, struct ckpt_entry *e,
				 const char *fqn)
{
	struct ckpt_meta *m = ps->m;
	const uint64_t *shape = ckpt_entry_shape(m, e);
	uint64_t numel = 1, end;
	char a[256], b[256];
	uint32_t i, d;

	for (d = 0; d < e->ndim; d++) {
		if (__builtin_mul_overflow(numel, shape[d], &numel))
			return ckpt_errf_key(ps->err, ps->errlen, -EOVERFLOW,
					     fqn, SIZE_MAX,
					     "%s: key '%s': shape %s: element count overflows",
					     ps->name, fqn,
					     ckpt_fmt_dims(a, sizeof(a), shape,
							   e->ndim));
	}
	e->numel = numel;
	if (__builtin_mul_overflow(numel, ckpt_dtype_size(e->dtype),
				   &e->nbytes) || e->nbytes > INT64_MAX)
		return ckpt_errf_key(ps->err, ps->errlen, -EOVERFLOW,
				     fqn, SIZE_MAX,
				     "%s: key '%s': shape %s: byte size overflows",
				     ps->name, fqn,
				     ckpt_fmt_dims(a, sizeof(a), shape, e->ndim));
	for (i = 0; i < e->nchunks; i++) {
		const struct ckpt_chunk *c = &m->chunks[e->chunk_first + i];
		const uint64_t *off = ckpt_chunk_offsets(m, c);
		const uint64_t *sz = ckpt_chunk_sizes(m, e, c);

		for (d = 0; d < e->ndim; d++) {
			if (__builtin_add_overflow(off[d], sz[d], &end) ||
			    end > shape[d])
				return ckpt_errf_key(ps->err, ps->errlen, -EINVAL,
						     fqn, SIZE_MAX,
						     "%s: key '%s': chunk %s+%s lies outside the shape %s",
						     ps->name, fqn,
						     ckpt_fmt_dims(a, sizeof(a), off, e->ndim),
						     ckpt_fmt_dims(b, sizeof(b), sz, e->ndim),
						     ckpt_fmt_dims(a + 128, sizeof(a) - 128,
								   shape, e->ndim));
		}
	}
	return 0;
}

/* The "chunks" array of tensor entry e, whose dims are known. */
static int parse_chunks(struct parser *ps, struct mp_cursor *c,
			struct ckpt_entry *e, const char *where)
{
	uint32_t nch, j;
	int rc;

	rc = mp_read_array(c, &nch);
	if (rc == -EPROTO)
		return type_error(ps, where, "chunks", "array", c);
	if (rc)
		return corrupt(ps, where);
	for (j = 0; j < nch; j++) {
		rc = parse_chunk(ps, c, e, j, where);
		if (rc)
			return rc;
	}
	e->nchunks = nch;
	return 0;
}

/* One "FQN: ENTRY" of state_dict_metadata. */
static int parse_entry(struct parser *ps, struct mp_cursor *c,
		       struct ckpt_entry *e)
{
	struct ckpt_meta *m = ps->m;
	const char *fqn = m->strings + e->fqn;
	const char *k, *s;
	uint32_t n, i, len, slen, nch;
	bool have_type = false, have_dtype = false, have_size = false;
	bool have_chunks = false, chunks_done = false;
	struct mp_cursor chunks_at = { 0 };
	char where[96 + 64];
	int rc;

	e->chunk_first = m->nchunks;
	snprintf(where, sizeof(where), "key '%.96s'", fqn);
	rc = open_map(ps, c, where, &n);
	if (rc)
		return rc;
	for (i = 0; i < n; i++) {
		if (mp_read_str(c, &k, &len))
			return type_error(ps, where, "(key)", "string", c);
		if (str_is(k, len, "type")) {
			if (have_type)
				return ckpt_errf(ps->err, ps->errlen, -EINVAL,
						 "%s: %s: field 'type' given twice",
						 ps->name, where);
			if (mp_read_str(c, &s, &slen))
				return type_error(ps, where, "type", "string", c);
			if (str_is(s, slen, "tensor"))
				e->kind = CKPT_KIND_TENSOR;
			else if (str_is(s, slen, "bytes"))
				e->kind = CKPT_KIND_BYTES;
			else
				return ckpt_errf(ps->err, ps->errlen, -EINVAL,
						 "%s: %s: unknown type '%.*s' (want tensor or bytes)",
						 ps->name, where, (int)(slen > 64 ? 64 : slen), s);
			have_type = true;
		} else if (str_is(k, len, "dtype")) {
			enum ckpt_dtype dt;

			if (mp_read_str(c, &s, &slen))
				return type_error(ps, where, "dtype", "string", c);
			if (ckpt_dtype_from_name(s, slen, &dt))
				return ckpt_errf(ps->err, ps->errlen, -EINVAL,
						 "%s: %s: unknown dtype '%.*s'",
						 ps->name, where, (int)(slen > 64 ? 64 : slen), s);
			e->dtype = (uint8_t)dt;
			have_dtype = true;
		} else if (str_is(k, len, "size")) {
			rc = read_dims(ps, c, where, "size", CKPT_NONE,
				       &e->size_at, &nch);
			if (rc)
				return rc;
			e->ndim = (uint8_t)nch;
			have_size = true;
		} else if (str_is(k, len, "chunks")) {
			/* Chunks need the dims: parsed now when "size" came
			 * first (the usual order), else after the loop. */
			if (have_chunks)
				return ckpt_errf(ps->err, ps->errlen, -EINVAL,
						 "%s: %s: field 'chunks' given twice",
						 ps->name, where);
			chunks_at = *c;
			have_chunks = true;
			if (have_size && have_type &&
			    e->kind == CKPT_KIND_TENSOR) {
				rc = parse_chunks(ps, c, e, where);
				if (rc)
					return rc;
				chunks_done = true;
			} else if (mp_skip(c)) {
				return corrupt(ps, where);
			}
		} else if (str_is(k, len, "requires_grad")) {
			if (mp_read_bool(c, &e->requires_grad))
				return type_error(ps, where, "requires_grad",
						  "bool", c);
		} else if (mp_skip(c)) {
			return corrupt(ps, where);
		}
	}
	if (!have_type)
		return ckpt_errf(ps->err, ps->errlen, -EINVAL,
				 "%s: %s: missing field 'type'", ps->name, where);
	if (e->kind == CKPT_KIND_BYTES) {
		/* One pseudo-chunk carries the record. */
		if (ckpt_grow((void **)&m->chunks, &ps->cap_chunks,
			 (size_t)m->nchunks + 1, sizeof(*m->chunks)))
			return oom(ps);
		memset(&m->chunks[m->nchunks], 0, sizeof(*m->chunks));
		m->chunks[m->nchunks].file = CKPT_NONE;
		m->chunks[m->nchunks].strides_at = CKPT_NONE;
		m->chunks[m->nchunks].dims_at = 0;
		m->nchunks++;
		e->nchunks = 1;
		e->ndim = 0;
		return 0;
	}
	if (!have_dtype || !have_size || !have_chunks)
		return ckpt_errf(ps->err, ps->errlen, -EINVAL,
				 "%s: %s: missing field '%s'", ps->name, where,
				 !have_dtype ? "dtype" : !have_size ? "size" : "chunks");
	if (!chunks_done) {
		rc = parse_chunks(ps, &chunks_at, e, where);
		if (rc)
			return rc;
	}
	return check_tensor_geometry(ps, e, fqn);
}

/*
 * Keys become file names, xattrs, JSON (view.json, view.safetensors) and
 * Python str: each must be valid UTF-8.  The message shows the string
 * with its bad bytes as \xNN; when it is a key (is_key), the last error's
 * key is its raw bytes.
 */
static int check_utf8(struct parser *ps, const char *what, const char *s,
		      uint32_t len, bool is_key)
{
	size_t bad = ckpt_utf8_valid_prefix(s, len);
	char shown[160];

	if (bad == len)
		return 0;
	return ckpt_errf_key(ps->err, ps->errlen, -EINVAL,
			     is_key ? s : NULL, len,
			     "%s: %s '%s' is not valid UTF-8 (byte %zu)",
			     ps->name, what,
			     ckpt_escape_msg(s, len, false, shown,
					     sizeof(shown)),
			     bad);
}

static int parse_state_dict_metadata(struct parser *ps, struct mp_cursor *c)
{
	struct ckpt_meta *m = ps->m;
	uint32_t n, i, len, dup;
	const char *k;
	int rc;

	rc = mp_read_map(c, &n);
	if (rc == -EPROTO)
		return type_error(ps, "top level", "state_dict_metadata",
				  "map", c);
	if (rc)
		return corrupt(ps, "state_dict_metadata");
	m->entries = calloc(n ? n : 1, sizeof(*m->entries));
	if (!m->entries)
		return oom(ps);
	/* The strings are not written yet: the table's key function reads
	 * them through m, which stays valid while the pool grows. */
	if (ckpt_strtab_init(&m->by_fqn, n, ckpt_meta_fqn_key, m))
		return oom(ps);
	for (i = 0; i < n; i++) {
		struct ckpt_entry *e = &m->entries[i];

		spend_to(ps, c->p);
		rc = mp_read_str(c, &k, &len);
		if (rc == -EPROTO)
			return ckpt_errf(ps->err, ps->errlen, -EINVAL,
					 "%s: state_dict_metadata: key %" PRIu32
					 " is a %s, not a string",
					 ps->name, i, mp_type_name(c));
		if (rc)
			return corrupt(ps, "state_dict_metadata");
		if (memchr(k, '\0', len))
			return ckpt_errf(ps->err, ps->errlen, -EINVAL,
					 "%s: state_dict_metadata: key %" PRIu32
					 " contains a NUL byte", ps->name, i);
		rc = check_utf8(ps, "state_dict_metadata: key", k, len, true);
		if (rc)
			return rc;
		rc = add_string(ps, k, len, &e->fqn);
		if (rc)
			return rc;
		e->fqn_len = len;
		m->nentries = i + 1;
		dup = ckpt_strtab_insert(&m->by_fqn, i);
		if (dup != UINT32_MAX)
			return ckpt_errf_key(ps->err, ps->errlen, -EINVAL,
					     m->strings + e->fqn, SIZE_MAX,
					     "%s: key '%s' appears twice in state_dict_metadata",
					     ps->name, m->strings + e->fqn);
		rc = parse_entry(ps, c, e);
		if (rc) {
			/* Its messages name the key (as "key 'K'"). */
			ckpt_last_error_keyn(k, len);
			return rc;
		}
	}
	return 0;
}

struct sort_ctx {
	const struct ckpt_meta *m;
	unsigned ndim;
};

/* Lexicographic order of chunk offsets. */
static int cmp_chunk_r(const void *a, const void *b, void *ctx)
{
	const struct sort_ctx *sc = ctx;

	return ckpt_dims_cmp(ckpt_chunk_offsets(sc->m, a),
			     ckpt_chunk_offsets(sc->m, b), sc->ndim);
}

/* Binary search an entry's sorted chunks for these offsets. */
static struct ckpt_chunk *find_chunk(struct ckpt_meta *m,
				     const struct ckpt_entry *e,
				     const uint64_t *off)
{
	uint32_t lo = 0, hi = e->nchunks;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		struct ckpt_chunk *c = &m->chunks[e->chunk_first + mid];
		int cmp = ckpt_dims_cmp(ckpt_chunk_offsets(m, c), off,
					e->ndim);

		if (cmp == 0)
			return c;
		if (cmp < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* Sort each tensor's chunks by offsets, refuse two at the same offsets,
 * and check that they tile the tensor. */
static int order_and_tile(struct parser *ps)
{
	struct ckpt_meta *m = ps->m;
	struct sort_ctx sc = { m, 0 };
	char a[256];
	uint32_t i, j;
	int rc;

	for (i = 0; i < m->nentries; i++) {
		struct ckpt_entry *e = &m->entries[i];
		struct ckpt_chunk *c = m->chunks + e->chunk_first;

		if (e->kind != CKPT_KIND_TENSOR)
			continue;
		sc.ndim = e->ndim;
		qsort_r(c, e->nchunks, sizeof(*c), cmp_chunk_r, &sc);
		for (j = 1; j < e->nchunks; j++) {
			if (cmp_chunk_r(&c[j - 1], &c[j], &sc) == 0)
				return ckpt_errf_key(ps->err, ps->errlen, -EINVAL,
						     ckpt_entry_fqn(m, e), SIZE_MAX,
						     "%s: key '%s': two chunks at offsets %s",
						     ps->name, ckpt_entry_fqn(m, e),
						     ckpt_fmt_dims(a, sizeof(a),
								   ckpt_chunk_offsets(m, &c[j]),
								   e->ndim));
		}
		if (ps->partial)
			continue;
		rc = ckpt_tiling_check(m, e, ps->name, ps->err, ps->errlen);
		if (rc)
			return rc;
	}
	return 0;
}

struct record {
	const char *fqn, *path;
	uint32_t fqn_len, path_len;
	struct mp_cursor offsets;	/* where the offsets value starts */
	struct mp_cursor strides;	/* where the strides value starts */
	bool has_offsets, has_offset, has_length, has_strides;
	uint64_t offset, length, xxh3, crc32;
	bool has_xxh3, has_crc32;
	uint8_t transforms[CKPT_MAX_TRANSFORMS];
	uint8_t ntransforms;
	struct mp_cursor transforms_at;	/* parsed once the key is known */
	bool has_transforms;
	int payload;		/* -1: not given */
	uint64_t size;		/* the decoded size (bytes records) */
	bool has_size;
	uint64_t guard[3];	/* zip_header: offset, length, xxh3 */
	bool has_guard;
	uint64_t archive[2];	/* archive: offset, length (lazy) */
	bool has_archive;
};

/* "transforms": an array of descriptor strings, parsed by their grammar;
 * where names the record's key. */
static int read_transforms(struct parser *ps, struct mp_cursor *c,
			   const char *where, struct record *r)
{
	enum ckpt_transform t;
	const char *d;
	uint32_t n, i, dl;
	char why[256];
	int rc;

	if (mp_read_array(c, &n))
		return type_error(ps, where, "transforms", "array of strings", c);
	if (n == 0 || n > CKPT_MAX_TRANSFORMS)
		return ckpt_errf(ps->err, ps->errlen, -EINVAL,
				 "%s: %s: %" PRIu32 " transforms (want 1 to %d)",
				 ps->name, where, n, CKPT_MAX_TRANSFORMS);
	for (i = 0; i < n; i++) {
		if (mp_read_str(c, &d, &dl))
			return type_error(ps, where, "transforms",
					  "array of strings", c);
		rc = ckpt_transform_parse(d, dl, &t, why, sizeof(why));
		if (rc)
			return ckpt_errf(ps->err, ps->errlen, -EINVAL,
					 "%s: %s: %s", ps->name, where, why);
		r->transforms[i] = (uint8_t)t;
	}
	r->ntransforms = (uint8_t)n;
	return 0;
}

/* "storage_data[ri]", for a message of read_record() or record_chunk(). */
#define REC fmt_index(where_buf, sizeof(where_buf), "storage_data", ri)

static int read_record(struct parser *ps, struct mp_cursor *c, uint32_t ri,
		       struct record *r)
{
	struct mp_cursor at_map;
	const char *k;
	uint32_t n, i, len;
	char where_buf[64];

	memset(r, 0, sizeof(*r));
	r->payload = -1;
	at_map = *c;
	if (mp_read_map(c, &n)) {
		*c = at_map;	/* read again, for the message */
		return open_map(ps, c, REC, &n);
	}
	for (i = 0; i < n; i++) {
		if (mp_read_str(c, &k, &len))
			return type_error(ps, REC, "(key)", "string", c);
		if (str_is(k, len, "fqn")) {
			if (mp_read_str(c, &r->fqn, &r->fqn_len))
				return type_error(ps, REC, "fqn", "string", c);
		} else if (str_is(k, len, "relative_path")) {
			if (mp_read_str(c, &r->path, &r->path_len))
				return type_error(ps, REC, "relative_path",
						  "string", c);
		} else if (str_is(k, len, "offsets")) {
			r->offsets = *c;
			r->has_offsets = !mp_take_nil(c);
			if (r->has_offsets && mp_skip(c))
				return corrupt(ps, REC);
		} else if (str_is(k, len, "strides")) {
			r->strides = *c;
			r->has_strides = true;
			if (mp_skip(c))
				return corrupt(ps, REC);
		} else if (str_is(k, len, "crc32")) {
			if (mp_read_uint(c, &r->crc32) || r->crc32 > UINT32_MAX)
				return type_error(ps, REC, "crc32",
						  "unsigned 32-bit integer", c);
			r->has_crc32 = true;
		} else if (str_is(k, len, "transforms")) {
			r->transforms_at = *c;
			r->has_transforms = true;
			if (mp_skip(c))
				return corrupt(ps, REC);
		} else if (str_is(k, len, "payload")) {
			const char *p;
			uint32_t pl;

			if (mp_read_str(c, &p, &pl))
				return type_error(ps, REC, "payload", "string", c);
			r->payload = ckpt_payload_parse(p, pl);
			if (r->payload < 0)
				return ckpt_errf(ps->err, ps->errlen, -EINVAL,
						 "%s: %s: payload '%.*s' is not raw or torch.save",
						 ps->name, REC,
						 (int)(pl > 40 ? 40 : pl), p);
		} else if (str_is(k, len, "size")) {
			if (mp_read_uint(c, &r->size))
				return type_error(ps, REC, "size",
						  "unsigned integer", c);
			r->has_size = true;
		} else if (str_is(k, len, "zip_header")) {
			uint32_t gn, gi;

			if (mp_read_array(c, &gn) || gn != 3)
				return type_error(ps, REC, "zip_header",
						  "[offset, length, xxh3]", c);
			for (gi = 0; gi < 3; gi++)
				if (mp_read_uint(c, &r->guard[gi]))
					return type_error(ps, REC,
							  "zip_header",
							  "[offset, length, xxh3]",
							  c);
			r->has_guard = true;
		} else if (str_is(k, len, "archive")) {
			uint32_t an, ai;

			if (mp_read_array(c, &an) || an != 2)
				return type_error(ps, REC, "archive",
						  "[offset, length]", c);
			for (ai = 0; ai < 2; ai++)
				if (mp_read_uint(c, &r->archive[ai]))
					return type_error(ps, REC, "archive",
							  "[offset, length]",
							  c);
			r->has_archive = true;
		} else if (str_is(k, len, "index")) {
			uint64_t ignored;

			if (!mp_take_nil(c) && mp_read_uint(c, &ignored))
				return type_error(ps, REC, "index",
						  "unsigned integer or nil", c);
		} else if (str_is(k, len, "offset") ||
			   str_is(k, len, "length") ||
			   str_is(k, len, "xxh3")) {
			uint64_t *v = k[0] == 'o' ? &r->offset :
				      k[0] == 'l' ? &r->length : &r->xxh3;
			const char *f = k[0] == 'o' ? "offset" :
					k[0] == 'l' ? "length" : "xxh3";

			if (mp_read_uint(c, v))
				return type_error(ps, REC, f,
						  "unsigned integer", c);
			if (k[0] == 'o')
				r->has_offset = true;
			else if (k[0] == 'l')
				r->has_length = true;
			else
				r->has_xxh3 = true;
		} else if (mp_skip(c)) {
			return corrupt(ps, REC);
		}
	}
	if (!r->fqn || !r->path || !r->has_offset || !r->has_length)
		return ckpt_errf(ps->err, ps->errlen, -EINVAL,
				 "%s: %s: missing field '%s'", ps->name, REC,
				 !r->fqn ? "fqn" : !r->path ? "relative_path" :
				 !r->has_offset ? "offset" : "length");
	if (!r->has_transforms && (r->payload >= 0 || r->has_size))
		return ckpt_errf(ps->err, ps->errlen, -EINVAL,
				 "%s: %s: '%s' is only for a record with transforms",
				 ps->name, REC,
				 r->payload >= 0 ? "payload" : "size");
	if (r->has_transforms && r->has_strides)
		return ckpt_errf(ps->err, ps->errlen, -EINVAL,
				 "%s: %s: a record with transforms has no strides (its payload gives them)",
				 ps->name, REC);
	return 0;
}

/* The chunk a record belongs to, with its error when there is none. */
static int record_chunk(struct parser *ps, struct record *r, uint32_t ri,
			struct ckpt_entry **pe, struct ckpt_chunk **pc)
{
	struct ckpt_meta *m = ps->m;
	uint64_t off[CKPT_MAX_DIMS];
	struct ckpt_entry *e;
	struct ckpt_chunk *c;
	char where_buf[64], a[256];
	uint32_t n, d, idx;
	int rc;

	/* Records of one key usually follow each other, or (torch's
	 * storage_data: each saving rank's records in key order) the next
	 * key's follows. */
	if (*pe && (*pe)->fqn_len == r->fqn_len &&
	    memcmp(m->strings + (*pe)->fqn, r->fqn, r->fqn_len) == 0)
		idx = (uint32_t)(*pe - m->entries);
	else if (*pe && *pe + 1 < m->entries + m->nentries &&
		 (*pe)[1].fqn_len == r->fqn_len &&
		 memcmp(m->strings + (*pe)[1].fqn, r->fqn, r->fqn_len) == 0)
		idx = (uint32_t)(*pe + 1 - m->entries);
	else
		idx = ckpt_strtab_find(&m->by_fqn, 0, r->fqn, r->fqn_len);
	if (idx == UINT32_MAX)
		return ckpt_errf_key(ps->err, ps->errlen, -EINVAL,
				     r->fqn, r->fqn_len,
				     "%s: %s: record for unknown key '%.*s'",
				     ps->name, REC,
				     (int)(r->fqn_len > 96 ? 96 : r->fqn_len), r->fqn);
	e = &m->entries[idx];
	if (e->kind == CKPT_KIND_BYTES) {
		if (r->has_offsets)
			return ckpt_errf_key(ps->err, ps->errlen, -EINVAL,
					     ckpt_entry_fqn(m, e), SIZE_MAX,
					     "%s: key '%s': bytes record has offsets (want nil)",
					     ps->name, ckpt_entry_fqn(m, e));
		c = &m->chunks[e->chunk_first];
	} else {
		if (!r->has_offsets)
			return ckpt_errf_key(ps->err, ps->errlen, -EINVAL,
					     ckpt_entry_fqn(m, e), SIZE_MAX,
					     "%s: key '%s': %s: tensor record has no offsets",
					     ps->name, ckpt_entry_fqn(m, e), REC);
		rc = mp_read_array(&r->offsets, &n);
		if (rc == -EPROTO)
			return type_error(ps, REC, "offsets", "array or nil",
					  &r->offsets);
		if (rc)
			return corrupt(ps, REC);
		if (n != e->ndim)
			return ckpt_errf_key(ps->err, ps->errlen, -EINVAL,
					     ckpt_entry_fqn(m, e), SIZE_MAX,
					     "%s: key '%s': %s: offsets have %" PRIu32
					     " dims, the tensor has %u",
					     ps->name, ckpt_entry_fqn(m, e), REC, n,
					     e->ndim);
		for (d = 0; d < n; d++) {
			if (mp_read_uint(&r->offsets, &off[d]))
				return type_error(ps, REC, "offsets",
						  "array of unsigned integers",
						  &r->offsets);
		}
		c = find_chunk(m, e, off);
		if (!c)
			return ckpt_errf_key(ps->err, ps->errlen, -EINVAL,
					     ckpt_entry_fqn(m, e), SIZE_MAX,
					     "%s: key '%s': record at offsets %s matches no chunk",
					     ps->name, ckpt_entry_fqn(m, e),
					     ckpt_fmt_dims(a, sizeof(a), off, n));
	}
	*pe = e;
	*pc = c;
	return 0;
}

#undef REC

static uint64_t chunk_bytes(const struct ckpt_meta *m,
			    const struct ckpt_entry *e,
			    const struct ckpt_chunk *c)
{
	const uint64_t *sz = ckpt_chunk_sizes(m, e, c);
	uint64_t n = ckpt_dtype_size(e->dtype);
	unsigned d;

	/* Cannot overflow: the chunk lies inside the shape, whose byte size
	 * was checked. */
	for (d = 0; d < e->ndim; d++)
		n *= sz[d];
	return n;
}

/* A record with "strides": the chunk's element (l0, l1, ...) is at byte
 * offset + sum(l[d] * strides[d]) * itemsize.  Every addressed element
 * must lie inside the record.  Row-major strides are kept as row-major. */
static int record_strides(struct parser *ps, struct record *r,
			  const struct ckpt_entry *e, struct ckpt_chunk *ch)
{
	struct ckpt_meta *m = ps->m;
	const uint64_t *sz;
	uint64_t span, bytes;
	uint32_t at;
	char where[64];
	int rc;

	snprintf(where, sizeof(where), "record of '%s'", ckpt_entry_fqn(m, e));
	rc = read_dims(ps, &r->strides, where, "strides", e->ndim, &at, NULL);
	if (rc)
		return rc;
	sz = ckpt_chunk_sizes(m, e, ch);	/* after read_dims: the pool moves */
	if (ckpt_strided_span(sz, m->dims + at, e->ndim, &span) ||
	    __builtin_mul_overflow(span, (uint64_t)ckpt_dtype_size(e->dtype),
				   &bytes) || bytes > r->length)
		return ckpt_errf_key(ps->err, ps->errlen, -EINVAL,
				     ckpt_entry_fqn(m, e), SIZE_MAX,
				     "%s: key '%s': record's strides address bytes past its length %" PRIu64,
				     ps->name, ckpt_entry_fqn(m, e), r->length);
	if (!ckpt_strides_row_major(sz, m->dims + at, e->ndim))
		ch->strides_at = at;
	return 0;
}

/* A record with transforms: its decoded size.  A bytes record gives it
 * ("size"); a raw tensor record's is the chunk's bytes ("size", if given,
 * must agree); a torch.save archive holds the chunk somewhere inside. */
static int check_transformed(struct parser *ps, const struct record *r,
			     struct ckpt_entry *e, const struct ckpt_chunk *ch,
			     uint64_t *decoded)
{
	struct ckpt_meta *m = ps->m;
	const char *fqn = ckpt_entry_fqn(m, e);

	if (e->kind == CKPT_KIND_BYTES) {
		if (r->payload == CKPT_PAYLOAD_TORCH_SAVE || !r->has_size)
			return ckpt_errf_key(ps->err, ps->errlen, -EINVAL,
					     fqn, SIZE_MAX,
					     "%s: key '%s': a bytes record with transforms needs 'size' and a raw payload",
					     ps->name, fqn);
		if (r->size > INT64_MAX)
			return ckpt_errf_key(ps->err, ps->errlen, -EOVERFLOW,
					     fqn, SIZE_MAX,
					     "%s: key '%s': size %" PRIu64 " is too large",
					     ps->name, fqn, r->size);
		e->nbytes = *decoded = r->size;
		return 0;
	}
	*decoded = chunk_bytes(m, e, ch);
	if (r->has_size && r->size != *decoded)
		return ckpt_errf_key(ps->err, ps->errlen, -EINVAL,
				     fqn, SIZE_MAX,
				     "%s: key '%s': record's size %" PRIu64 " is not the chunk's %" PRIu64 " bytes",
				     ps->name, fqn, r->size, *decoded);
	return 0;
}

/* Register ch's record as stored with transforms: the chunk now reads
 * [0, decoded) of the decoded record. */
static int add_zrec(struct parser *ps, const struct record *r, uint32_t fi,
		    struct ckpt_chunk *ch, uint64_t decoded, size_t *cap)
{
	struct ckpt_meta *m = ps->m;
	struct ckpt_zrec *z;

	if (m->nzrecs >= CKPT_ZREC - 1)
		return ckpt_errf(ps->err, ps->errlen, -E2BIG,
				 "%s: too many records with transforms",
				 ps->name);
	if (ckpt_grow((void **)&m->zrecs, cap, (size_t)m->nzrecs + 1,
		      sizeof(*m->zrecs)))
		return oom(ps);
	z = &m->zrecs[m->nzrecs];
	memset(z, 0, sizeof(*z));
	z->file = fi;
	z->chunk = (uint32_t)(ch - m->chunks);
	z->off = r->offset;
	z->len = r->length;
	z->payload = (uint8_t)(r->payload < 0 ? CKPT_PAYLOAD_RAW : r->payload);
	z->ntransforms = r->ntransforms;
	memcpy(z->transforms, r->transforms, r->ntransforms);
	ch->file = CKPT_ZREC | m->nzrecs++;
	ch->foff = 0;
	ch->len = decoded;
	return 0;
}

/*
 * r's archive: chunk ch is located lazily, inside the torch.save archive
 * [archive[0], +archive[1]) of its file, which must hold the chunk's
 * bytes; *end is the archive's end.  A tensor record without transforms,
 * strides or zip_header (those come from the archive itself).
 */
static int add_lazy(struct parser *ps, const struct record *r,
		    const struct ckpt_entry *e, struct ckpt_chunk *ch,
		    uint64_t *end)
{
	struct ckpt_meta *m = ps->m;
	const char *key = ckpt_entry_fqn(m, e);
	uint32_t ci = (uint32_t)(ch - m->chunks), at = CKPT_NONE;

	if (e->kind != CKPT_KIND_TENSOR || r->ntransforms || r->has_strides ||
	    r->has_guard || r->has_xxh3 || r->has_crc32 ||
	    __builtin_add_overflow(r->archive[0], r->archive[1], end) ||
	    *end > INT64_MAX || r->archive[1] < r->length)
		return ckpt_errf_key(ps->err, ps->errlen, -EINVAL, key,
				     SIZE_MAX,
				     "%s: key '%s': archive [%" PRIu64 ", %" PRIu64 "] is not a torch.save archive that can hold the record's %" PRIu64 " bytes (only a tensor record without transforms, strides, zip_header or checksums has one)",
				     ps->name, key, r->archive[0],
				     r->archive[1], r->length);
	if (!m->lazy) {
		size_t n = m->nchunks ? m->nchunks : 1;
		struct ckpt_lazy *lazy = calloc(n, sizeof(*lazy));
		_Atomic uint8_t *located = calloc(n, sizeof(*located));
		char **why = calloc(n, sizeof(*why));

		if (!lazy || !located || !why) {
			free(lazy);
			free((void *)located);
			free(why);
			return oom(ps);
		}
		/* all three, and the lock, or none (ckpt_meta_free_parsed) */
		pthread_mutex_init(&m->locate_lock, NULL);
		pthread_cond_init(&m->located_cv, NULL);
		pthread_rwlock_init(&m->fetched_lock, NULL);
		m->lazy = lazy;
		m->located = located;
		m->locate_err = why;
		ckpt_meta_fork_hook(m);
	}
	if (e->ndim) {
		if ((uint64_t)m->ndims + e->ndim > UINT32_MAX)
			return oom(ps);
		if (ckpt_grow((void **)&m->dims, &ps->cap_dims,
			      (size_t)m->ndims + e->ndim, sizeof(*m->dims)))
			return oom(ps);
		memset(m->dims + m->ndims, 0, e->ndim * sizeof(*m->dims));
		at = m->ndims;
		m->ndims += e->ndim;
	}
	m->lazy[ci].boff = r->archive[0];
	m->lazy[ci].blen = r->archive[1];
	m->lazy[ci].strides_at = at;
	m->located[ci] = CKPT_LOC_PENDING;
	m->nlazy++;
	return 0;
}

/* Whether file fi's path (NUL-terminated in m's strings) is exactly the
 * len bytes at path: a path with a NUL inside never is. */
static bool same_path(const struct ckpt_meta *m, uint32_t fi,
		      const char *path, size_t len)
{
	const char *f = m->strings + m->files[fi].path;

	return strnlen(f, len + 1) == len && memcmp(f, path, len) == 0;
}

/* r's zip_header as a guard of chunk ch: bytes before the record's own,
 * of a zip local header's length, in a record without transforms. */
static int add_guard(struct parser *ps, const struct record *r,
		     const struct ckpt_entry *e, const struct ckpt_chunk *ch,
		     size_t *cap)
{
	struct ckpt_meta *m = ps->m;
	const char *key = ckpt_entry_fqn(m, e);
	size_t ei = (size_t)(e - m->entries);
	uint32_t ci = (uint32_t)(ch - m->chunks);
	uint64_t end;
	if (r->ntransforms || r->guard[1] == 0 ||
	    r->guard[1] > CKPT_GUARD_MAX ||
	    __builtin_add_overflow(r->guard[0], r->guard[1], &end) ||
	    end > ch->foff)
		return ckpt_errf_key(ps->err, ps->errlen, -EINVAL, key,
				     SIZE_MAX,
				     "%s: key '%s': zip_header [%" PRIu64 ", %" PRIu64 "] is not a zip local header before the record at %" PRIu64 "%s",
				     ps->name, key, r->guard[0], r->guard[1],
				     ch->foff, r->ntransforms ?
				     " (a record with transforms has none)" : "");
	if (ckpt_grow((void **)&m->guards, cap, (size_t)m->nguards + 1,
		      sizeof(*m->guards)))
		return oom(ps);
	m->guards[m->nguards].off = r->guard[0];
	m->guards[m->nguards].len = (uint32_t)r->guard[1];
	m->guards[m->nguards].xxh3 = r->guard[2];
	m->guards[m->nguards].chunk = ci;
	m->guards[m->nguards].entry = (uint32_t)(ei);
	m->nguards++;
	return 0;
}

static int parse_storage_data(struct parser *ps, struct mp_cursor *c)
{
	struct ckpt_meta *m = ps->m;
	struct ckpt_strtab files;
	struct ckpt_entry *e = NULL;
	size_t cap_files = 0, cap_zrecs = 0, cap_guards = 0;
	uint32_t n, i, fi = CKPT_NONE;
	struct record r;
	char a[256], b[256];
	int rc;

	rc = mp_read_array(c, &n);
	if (rc == -EPROTO)
		return type_error(ps, "top level", "storage_data", "array", c);
	if (rc)
		return corrupt(ps, "storage_data");
	if (ckpt_strtab_init(&files, n, ckpt_meta_path_key, m))
		return oom(ps);
	for (i = 0; i < n; i++) {
		struct ckpt_chunk *ch = NULL;
		uint64_t end, want, decoded = 0;

		spend_to(ps, c->p);
		rc = read_record(ps, c, i, &r);
		if (rc)
			goto out_files;
		rc = record_chunk(ps, &r, i, &e, &ch);
		if (rc)
			goto out_files;
		if (r.has_transforms) {
			char kw[160];

			snprintf(kw, sizeof(kw), "key '%.100s'",
				 ckpt_entry_fqn(m, e));
			rc = read_transforms(ps, &r.transforms_at, kw, &r);
			if (rc) {
				ckpt_last_error_key(ckpt_entry_fqn(m, e));
				goto out_files;
			}
		}
		if (ch->file != CKPT_NONE) {
			rc = ckpt_errf_key(ps->err, ps->errlen, -EINVAL,
					   ckpt_entry_fqn(m, e), SIZE_MAX,
					   "%s: key '%s': chunk at %s has two storage records",
					   ps->name, ckpt_entry_fqn(m, e),
					   ckpt_fmt_dims(a, sizeof(a),
							 ckpt_chunk_offsets(m, ch),
							 e->ndim));
			goto out_files;
		}
		if (r.ntransforms) {
			rc = check_transformed(ps, &r, e, ch, &decoded);
			if (rc)
				goto out_files;
		} else if (e->kind == CKPT_KIND_TENSOR && r.has_strides) {
			rc = record_strides(ps, &r, e, ch);
			if (rc) {
				/* Its messages name the key ("record of 'K'"). */
				ckpt_last_error_key(ckpt_entry_fqn(m, e));
				goto out_files;
			}
		} else if (e->kind == CKPT_KIND_TENSOR) {
			want = chunk_bytes(m, e, ch);
			if (r.length != want) {
				rc = ckpt_errf_key(ps->err, ps->errlen, -EINVAL,
						   ckpt_entry_fqn(m, e), SIZE_MAX,
						   "%s: key '%s': record of chunk %s+%s has length %" PRIu64
						   ", the chunk needs %" PRIu64 " bytes",
						   ps->name, ckpt_entry_fqn(m, e),
						   ckpt_fmt_dims(a, sizeof(a),
								 ckpt_chunk_offsets(m, ch), e->ndim),
						   ckpt_fmt_dims(b, sizeof(b),
								 ckpt_chunk_sizes(m, e, ch), e->ndim),
						   r.length, want);
				goto out_files;
			}
		} else {
			e->nbytes = r.length;
		}
		if (__builtin_add_overflow(r.offset, r.length, &end) ||
		    end > INT64_MAX) {
			rc = ckpt_errf_key(ps->err, ps->errlen, -EOVERFLOW,
					   ckpt_entry_fqn(m, e), SIZE_MAX,
					   "%s: key '%s': record offset %" PRIu64
					   " + length %" PRIu64 " overflows",
					   ps->name, ckpt_entry_fqn(m, e), r.offset,
					   r.length);
			goto out_files;
		}
		/* Intern the path; records of one file often follow each
		 * other.  Only a safe path is interned, so one found needs
		 * no check. */
		if (fi == CKPT_NONE || !same_path(m, fi, r.path, r.path_len))
			fi = ckpt_strtab_find(&files, 0, r.path, r.path_len);
		if (fi == UINT32_MAX &&
		    !ckpt_relpath_is_safe(r.path, r.path_len)) {
			rc = ckpt_errf_key(ps->err, ps->errlen, -EINVAL,
					   ckpt_entry_fqn(m, e), SIZE_MAX,
					   "%s: key '%s': relative_path '%.*s' must be relative, inside the checkpoint, without '..' or NUL",
					   ps->name, ckpt_entry_fqn(m, e),
					   (int)strnlen(r.path, r.path_len > 200 ? 200 : r.path_len),
					   r.path);
			goto out_files;
		}
		if (fi == UINT32_MAX) {
			if (ckpt_grow((void **)&m->files, &cap_files,
				 (size_t)m->nfiles + 1, sizeof(*m->files))) {
				rc = oom(ps);
				goto out_files;
			}
			rc = add_string(ps, r.path, r.path_len,
					&m->files[m->nfiles].path);
			if (rc)
				goto out_files;
			m->files[m->nfiles].need = 0;
			m->files[m->nfiles].need_entry = 0;
			fi = m->nfiles++;
			ckpt_strtab_insert(&files, fi);
		}
		if (r.has_archive) {
			uint64_t aend = 0;

			rc = add_lazy(ps, &r, e, ch, &aend);
			if (rc) {
				ckpt_last_error_key(ckpt_entry_fqn(m, e));
				goto out_files;
			}
			if (aend > end)
				end = aend;
		}
		if (end >= m->files[fi].need) {
			m->files[fi].need = end;
			m->files[fi].need_entry = (uint32_t)(e - m->entries);
		}
		ch->file = fi;
		ch->foff = r.offset;
		ch->len = r.length;
		if (r.ntransforms) {
			rc = add_zrec(ps, &r, fi, ch, decoded, &cap_zrecs);
			if (rc)
				goto out_files;
		}
		if (r.has_guard) {
			rc = add_guard(ps, &r, e, ch, &cap_guards);
			if (rc)
				goto out_files;
		}
		ch->xxh3 = r.xxh3;
		ch->has_xxh3 = r.has_xxh3;
		ch->crc32 = (uint32_t)r.crc32;
		ch->has_crc32 = r.has_crc32;
	}
	rc = 0;
out_files:
	ckpt_strtab_destroy(&files);
	return rc;
}

static int check_all_recorded(struct parser *ps)
{
	struct ckpt_meta *m = ps->m;
	uint32_t i, j;
	char a[256], b[256];

	for (i = 0; i < m->nentries; i++) {
		const struct ckpt_entry *e = &m->entries[i];

		for (j = 0; j < e->nchunks; j++) {
			const struct ckpt_chunk *c =
				&m->chunks[e->chunk_first + j];

			if (c->file != CKPT_NONE)
				continue;
			if (e->kind == CKPT_KIND_BYTES)
				return ckpt_errf_key(ps->err, ps->errlen, -EINVAL,
						     ckpt_entry_fqn(m, e), SIZE_MAX,
						     "%s: key '%s': bytes entry has no storage record",
						     ps->name, ckpt_entry_fqn(m, e));
			return ckpt_errf_key(ps->err, ps->errlen, -EINVAL,
					     ckpt_entry_fqn(m, e), SIZE_MAX,
					     "%s: key '%s': chunk at %s size %s has no storage record",
					     ps->name, ckpt_entry_fqn(m, e),
					     ckpt_fmt_dims(a, sizeof(a),
							   ckpt_chunk_offsets(m, c), e->ndim),
					     ckpt_fmt_dims(b, sizeof(b),
							   ckpt_chunk_sizes(m, e, c), e->ndim));
		}
	}
	return 0;
}

static int parse_planner_data(struct parser *ps, struct mp_cursor *c)
{
	struct ckpt_meta *m = ps->m;
	uint32_t n, i, len, np, j, idx;
	const char *k;
	int rc;

	if (mp_take_nil(c))
		return 0;
	rc = mp_read_map(c, &n);
	if (rc == -EPROTO)
		return type_error(ps, "top level", "planner_data", "map", c);
	if (rc)
		return corrupt(ps, "planner_data");
	for (i = 0; i < n; i++) {
		struct ckpt_entry *e = NULL;

		spend_to(ps, c->p);
		if (mp_read_str(c, &k, &len))
			return ckpt_errf(ps->err, ps->errlen, -EINVAL,
					 "%s: planner_data: key %" PRIu32
					 " is a %s, not a string",
					 ps->name, i, mp_type_name(c));
		idx = ckpt_strtab_find(&m->by_fqn, 0, k, len);
		if (idx == UINT32_MAX) {
			/* A path for a key that is not saved: nothing to show. */
			if (mp_skip(c))
				return corrupt(ps, "planner_data");
			continue;
		}
		e = &m->entries[idx];
		if (e->ncomps)
			return ckpt_errf_key(ps->err, ps->errlen, -EINVAL,
					     ckpt_entry_fqn(m, e), SIZE_MAX,
					     "%s: planner_data: key '%s' appears twice",
					     ps->name, ckpt_entry_fqn(m, e));
		rc = mp_read_array(c, &np);
		if (rc == -EPROTO)
			return ckpt_errf_key(ps->err, ps->errlen, -EINVAL,
					     ckpt_entry_fqn(m, e), SIZE_MAX,
					     "%s: planner_data: key '%s': expected an array of strings and integers, got %s",
					     ps->name, ckpt_entry_fqn(m, e),
					     mp_type_name(c));
		if (rc)
			return corrupt(ps, "planner_data");
		if (np == 0)
			return ckpt_errf_key(ps->err, ps->errlen, -EINVAL,
					     ckpt_entry_fqn(m, e), SIZE_MAX,
					     "%s: planner_data: key '%s': empty path",
					     ps->name, ckpt_entry_fqn(m, e));
		if (ckpt_grow((void **)&m->comps, &ps->cap_comps,
			 (size_t)m->ncomps + np, sizeof(*m->comps)))
			return oom(ps);
		e->comp_first = m->ncomps;
		for (j = 0; j < np; j++) {
			struct ckpt_comp *cp = &m->comps[m->ncomps + j];
			char num[24];
			const char *s;
			uint32_t sl;

			if (mp_is_int(c)) {
				int64_t v;

				if (mp_read_int(c, &v)) {
					uint64_t u;

					if (mp_read_uint(c, &u))
						return corrupt(ps, "planner_data");
					sl = (uint32_t)snprintf(num, sizeof(num),
								"%" PRIu64, u);
				} else {
					sl = (uint32_t)snprintf(num, sizeof(num),
								"%" PRId64, v);
				}
				s = num;
			} else if (mp_read_str(c, &s, &sl)) {
				return ckpt_errf_key(ps->err, ps->errlen, -EINVAL,
						     ckpt_entry_fqn(m, e), SIZE_MAX,
						     "%s: planner_data: key '%s': component %" PRIu32
						     " is a %s, not a string or integer",
						     ps->name, ckpt_entry_fqn(m, e),
						     j, mp_type_name(c));
			}
			rc = check_utf8(ps, "planner_data: path component", s,
					sl, false);
			if (!rc)
				rc = add_string(ps, s, sl, &cp->str);
			if (rc)
				return rc;
			cp->len = sl;
		}
		m->ncomps += np;
		e->ncomps = np;
	}
	return 0;
}

/* The three big sections, parsed as soon as what they depend on is known
 * (the header first, then state_dict_metadata), so a file written in the
 * usual order is read in one pass. */
struct sections {
	struct mp_cursor at[3];
	bool seen[3], done[3];
};

enum { SEC_SDM, SEC_SD, SEC_PD };

static const char *const section_names[] = {
	[SEC_SDM] = "state_dict_metadata",
	[SEC_SD] = "storage_data",
	[SEC_PD] = "planner_data",
};

static int parse_section(struct parser *ps, int which, struct mp_cursor *c)
{
	int rc;

	switch (which) {
	case SEC_SDM:
		rc = parse_state_dict_metadata(ps, c);
		return rc ? rc : order_and_tile(ps);
	case SEC_SD:
		return parse_storage_data(ps, c);
	default:
		return parse_planner_data(ps, c);
	}
}

static bool can_parse(const struct sections *s, int which, bool header_ok)
{
	return header_ok && (which == SEC_SDM || s->done[SEC_SDM]);
}

/* Parse every section seen earlier whose dependencies are now met. */
static int parse_pending(struct parser *ps, struct sections *s, bool header_ok)
{
	int which, rc;

	for (which = SEC_SDM; which <= SEC_PD; which++) {
		if (!s->seen[which] || s->done[which] ||
		    !can_parse(s, which, header_ok))
			continue;
		rc = parse_section(ps, which, &s->at[which]);
		if (rc)
			return rc;
		s->done[which] = true;
	}
	return 0;
}

static int parse(const uint8_t *buf, size_t len, const char *name,
		 bool partial, bool spend, struct ckpt_meta **out, char *err,
		 size_t errlen);

int ckpt_meta_parse(const uint8_t *buf, size_t len, const char *name,
		    struct ckpt_meta **out, char *err, size_t errlen)
{
	return parse(buf, len, name, false, false, out, err, errlen);
}

int ckpt_meta_parse_spend(uint8_t *buf, size_t len, const char *name,
			  struct ckpt_meta **out, char *err, size_t errlen)
{
	return parse(buf, len, name, false, true, out, err, errlen);
}

int ckpt_meta_parse_part(const uint8_t *buf, size_t len, const char *name,
			 struct ckpt_meta **out, char *err, size_t errlen)
{
	return parse(buf, len, name, true, false, out, err, errlen);
}

static int parse(const uint8_t *buf, size_t len, const char *name,
		 bool partial, bool spend, struct ckpt_meta **out, char *err,
		 size_t errlen)
{
	struct mp_cursor c = { buf, buf + len };
	bool have_format = false, have_version = false, header_ok;
	struct sections sec = { 0 };
	struct parser ps = { 0 };
	struct ckpt_meta *m;
	const char *k, *s;
	uint32_t n, i, kl, sl;
	int rc, which;

	*out = NULL;
	m = calloc(1, sizeof(*m));
	if (!m)
		return ckpt_errf(err, errlen, -ENOMEM, "%s: out of memory", name);
	ps.m = m;
	ps.partial = partial;
	ps.spent = spend ? buf : NULL;
	ps.name = name;
	ps.err = err;
	ps.errlen = errlen;
	/* Never NULL, so dims_at/size_at 0 of a 0-d tensor or a bytes entry,
	 * and the chunk range of a tensor with no chunks, are valid (empty)
	 * positions. */
	if (ckpt_grow((void **)&m->dims, &ps.cap_dims, 16, sizeof(*m->dims)) ||
	    ckpt_grow((void **)&m->chunks, &ps.cap_chunks, 16, sizeof(*m->chunks))) {
		rc = oom(&ps);
		goto out_free;
	}

	if (len >= 2 && buf[0] == 0x80 && buf[1] >= 2 && buf[1] <= 5) {
		rc = ckpt_errf(err, errlen, -EINVAL,
			       "%s: this is a Python pickle (PyTorch's own .metadata), not ckptfs's msgpack format '" CKPT_FORMAT_NAME "'",
			       name);
		goto out_free;
	}
	rc = mp_read_map(&c, &n);
	if (rc) {
		rc = ckpt_errf(err, errlen, -EINVAL,
			       "%s: not a ckptfs metadata file: expected a msgpack map, got %s",
			       name, len ? mp_type_name(&c) : "an empty file");
		goto out_free;
	}
	for (i = 0; i < n; i++) {
		if (mp_read_str(&c, &k, &kl)) {
			rc = ckpt_errf(err, errlen, -EINVAL,
				       "%s: top level: key %" PRIu32
				       " is a %s, not a string",
				       name, i, mp_type_name(&c));
			goto out_free;
		}
		if (str_is(k, kl, "format")) {
			rc = mp_read_str(&c, &s, &sl);
			if (rc) {
				rc = type_error(&ps, "top level", "format",
						"string", &c);
				goto out_free;
			}
			if (!str_is(s, sl, CKPT_FORMAT_NAME)) {
				rc = ckpt_errf(err, errlen, -EINVAL,
					       "%s: format is '%.*s', not '" CKPT_FORMAT_NAME "'",
					       name, (int)(sl > 64 ? 64 : sl), s);
				goto out_free;
			}
			have_format = true;
			continue;
		}
		if (str_is(k, kl, "version")) {
			if (mp_read_uint(&c, &m->version)) {
				rc = type_error(&ps, "top level", "version",
						"unsigned integer", &c);
				goto out_free;
			}
			if (m->version != CKPT_FORMAT_VERSION) {
				rc = ckpt_errf(err, errlen, -ENOTSUP,
					       "%s: format version %" PRIu64
					       " is not supported (this ckptfs reads version %d)",
					       name, m->version, CKPT_FORMAT_VERSION);
				goto out_free;
			}
			have_version = true;
			continue;
		}
		header_ok = have_format && have_version;
		for (which = SEC_SDM; which <= SEC_PD; which++) {
			if (str_is(k, kl, section_names[which]))
				break;
		}
		if (which <= SEC_PD) {
			if (sec.seen[which]) {
				rc = ckpt_errf(err, errlen, -EINVAL,
					       "%s: top-level key '%s' appears twice",
					       name, section_names[which]);
				goto out_free;
			}
			sec.seen[which] = true;
			sec.at[which] = c;
			if (can_parse(&sec, which, header_ok)) {
				rc = parse_section(&ps, which, &c);
				if (rc)
					goto out_free;
				sec.done[which] = true;
				rc = parse_pending(&ps, &sec, header_ok);
				if (rc)
					goto out_free;
				continue;
			}
		}
		if (which <= SEC_PD)
			ps.spent = NULL;	/* read later: kept from here */
		if (mp_skip(&c)) {
			rc = ckpt_errf(err, errlen, -EBADMSG,
				       "%s: top-level field '%.*s': truncated or malformed msgpack (a length or count runs past the end)",
				       name, (int)(kl > 64 ? 64 : kl), k);
			goto out_free;
		}
	}
	if (c.p != c.end) {
		rc = ckpt_errf(err, errlen, -EINVAL,
			       "%s: %zu bytes of trailing data after the metadata map",
			       name, mp_left(&c));
		goto out_free;
	}
	if (!have_format || !have_version || !sec.seen[SEC_SDM] ||
	    !sec.seen[SEC_SD]) {
		rc = ckpt_errf(err, errlen, -EINVAL,
			       "%s: missing required field '%s'", name,
			       !have_format ? "format" : !have_version ? "version" :
			       !sec.seen[SEC_SDM] ? "state_dict_metadata" : "storage_data");
		goto out_free;
	}
	rc = parse_pending(&ps, &sec, true);
	if (rc)
		goto out_free;
	rc = check_all_recorded(&ps);
	if (rc)
		goto out_free;
	ckpt_meta_set_origin(m, CKPT_ORIGIN_NATIVE, 0);
	*out = m;
	return 0;
out_free:
	ckpt_meta_free_parsed(m);
	return rc;
}
