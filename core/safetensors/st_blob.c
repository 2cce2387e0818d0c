/* SPDX-License-Identifier: MIT */
/* Parsing one safetensors blob: see st_blob.h. */
#include "safetensors/st_blob.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/errbuf.h"
#include "common/grow.h"
#include "common/json.h"
#include "io/store.h"

#define NAME_MAX_ST 4096

static const struct {
	const char *name;
	enum ckpt_dtype dt;
} dtypes[] = {
	{ "F64", CKPT_F64 }, { "F32", CKPT_F32 }, { "F16", CKPT_F16 },
	{ "BF16", CKPT_BF16 }, { "F8_E4M3", CKPT_F8E4M3 },
	{ "F8_E5M2", CKPT_F8E5M2 }, { "I64", CKPT_I64 }, { "I32", CKPT_I32 },
	{ "I16", CKPT_I16 }, { "I8", CKPT_I8 }, { "U8", CKPT_U8 },
	{ "BOOL", CKPT_BOOL },
};

struct blob {
	struct ckpt_st_set *set;
	uint32_t fi;
	const char *where;
	char *err;
	size_t errlen;
};

/* A field written twice in object o ("where: field 'F' appears twice"):
 * 0, -EINVAL or -ENOMEM. */
static int no_repeats(const struct ckpt_json_doc *doc,
		      const struct ckpt_json *o, const char *where,
		      const char *fqn, char *err, size_t errlen)
{
	const struct ckpt_json *dup;
	char name[128];
	int rc = ckpt_json_find_dup(doc, o, &dup);

	if (rc < 0)
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	if (!rc)
		return 0;
	if (ckpt_json_str(dup, name, sizeof(name)) < 0)
		snprintf(name, sizeof(name), "%.*s",
			 (int)(dup->len < 100 ? dup->len : 100), dup->s);
	/* The header's own "__metadata__" is named like a key but is none. */
	return ckpt_errf_key(err, errlen, -EINVAL,
			     fqn && strcmp(fqn, "__metadata__") ? fqn : NULL,
			     SIZE_MAX,
			     "%s: %s%s%sbyte %u: field '%s' appears twice",
			     where, fqn ? "key '" : "", fqn ? fqn : "",
			     fqn ? "': " : "", dup->at, name);
}

/* One tensor entry of the header; data_at is where the data starts in
 * the file. */
static int one_tensor(struct blob *b, const struct ckpt_json_doc *doc,
		      const struct ckpt_json *v, const char *fqn,
		      uint64_t data_at, uint64_t data_len)
{
	const struct ckpt_json *dt = ckpt_json_get(doc, v, "dtype");
	const struct ckpt_json *sh = ckpt_json_get(doc, v, "shape");
	const struct ckpt_json *of = ckpt_json_get(doc, v, "data_offsets");
	const struct ckpt_json *lo, *hi;
	struct ckpt_st_set *set = b->set;
	struct ckpt_st_tensor *t;
	char name[32];
	uint64_t numel = 1, bytes;
	uint32_t d;
	size_t k;
	int rc;

	rc = no_repeats(doc, v, b->where, fqn, b->err, b->errlen);
	if (rc)
		return rc;
	if (!dt || ckpt_json_str(dt, name, sizeof(name)) < 0 || !sh ||
	    sh->type != CKPT_JSON_ARR || !of || of->type != CKPT_JSON_ARR)
		return ckpt_errf_key(b->err, b->errlen, -EINVAL, fqn, SIZE_MAX,
				     "%s: key '%s': needs dtype, shape and data_offsets",
				     b->where, fqn);
	for (k = 0; k < sizeof(dtypes) / sizeof(dtypes[0]); k++)
		if (!strcmp(name, dtypes[k].name))
			break;
	if (k == sizeof(dtypes) / sizeof(dtypes[0]))
		return ckpt_errf_key(b->err, b->errlen, -EINVAL, fqn, SIZE_MAX,
				     "%s: key '%s': dtype '%s' is not supported",
				     b->where, fqn, name);
	if (sh->n > CKPT_MAX_DIMS)
		return ckpt_errf_key(b->err, b->errlen, -EINVAL, fqn, SIZE_MAX,
				     "%s: key '%s': %u dims, more than %d",
				     b->where, fqn, sh->n, CKPT_MAX_DIMS);
	if (ckpt_grow((void **)&set->t, &set->cap, set->nt + 1,
		      sizeof(*set->t)))
		return ckpt_errf(b->err, b->errlen, -ENOMEM, "out of memory");
	t = &set->t[set->nt];
	memset(t, 0, sizeof(*t));
	t->file = b->fi;
	t->dtype = (uint8_t)dtypes[k].dt;
	t->ndim = (uint8_t)sh->n;
	for (d = 0; d < sh->n; d++) {
		const struct ckpt_json *x = ckpt_json_at(doc, sh, d);

		if (x->type != CKPT_JSON_INT ||
		    __builtin_mul_overflow(numel, x->v, &numel))
			return ckpt_errf_key(b->err, b->errlen, -EINVAL,
					     fqn, SIZE_MAX,
					     "%s: key '%s': shape is not a list of sizes that fit 64 bits",
					     b->where, fqn);
		t->shape[d] = x->v;
	}
	lo = ckpt_json_at(doc, of, 0);
	hi = ckpt_json_at(doc, of, 1);
	if (of->n != 2 || lo->type != CKPT_JSON_INT ||
	    hi->type != CKPT_JSON_INT || lo->v > hi->v || hi->v > data_len)
		return ckpt_errf_key(b->err, b->errlen, -EINVAL, fqn, SIZE_MAX,
				     "%s: key '%s': data_offsets must be [begin, end] with begin <= end <= %" PRIu64 " (the data's length)",
				     b->where, fqn, data_len);
	if (__builtin_mul_overflow(numel, ckpt_dtype_size(dtypes[k].dt),
				   &bytes) || bytes != hi->v - lo->v)
		return ckpt_errf_key(b->err, b->errlen, -EINVAL, fqn, SIZE_MAX,
				     "%s: key '%s': data_offsets span %" PRIu64 " bytes, but %s x %u dims needs another size",
				     b->where, fqn, hi->v - lo->v, name, sh->n);
	t->foff = data_at + lo->v;
	t->len = bytes;
	t->fqn = strdup(fqn);
	if (!t->fqn)
		return ckpt_errf(b->err, b->errlen, -ENOMEM, "out of memory");
	set->nt++;
	return 0;
}

static int cmp_fqn(const void *a, const void *b)
{
	return strcmp(((const struct ckpt_st_tensor *)a)->fqn,
		      ((const struct ckpt_st_tensor *)b)->fqn);
}

static int cmp_foff(const void *a, const void *b)
{
	const struct ckpt_st_tensor *x = *(struct ckpt_st_tensor *const *)a;
	const struct ckpt_st_tensor *y = *(struct ckpt_st_tensor *const *)b;

	return x->foff < y->foff ? -1 : x->foff > y->foff;
}

/* Tensors of one blob must not share bytes, nor names. */
static int check_overlaps(struct blob *b, size_t from)
{
	struct ckpt_st_set *set = b->set;
	size_t n = set->nt - from, i;
	struct ckpt_st_tensor **v;
	int rc = 0;

	for (i = from + 1; i < set->nt; i++)
		if (!strcmp(set->t[i - 1].fqn, set->t[i].fqn))
			return ckpt_errf_key(b->err, b->errlen, -EINVAL,
					     set->t[i].fqn, SIZE_MAX,
					     "%s: key '%s' appears twice",
					     b->where, set->t[i].fqn);
	if (n < 2)
		return 0;
	v = malloc(n * sizeof(*v));
	if (!v)
		return ckpt_errf(b->err, b->errlen, -ENOMEM, "out of memory");
	for (i = 0; i < n; i++)
		v[i] = &set->t[from + i];
	qsort(v, n, sizeof(*v), cmp_foff);
	for (i = 1; i < n && !rc; i++) {
		if (v[i - 1]->len && v[i]->len &&
		    v[i - 1]->foff + v[i - 1]->len > v[i]->foff)
			rc = ckpt_errf_key(b->err, b->errlen, -EINVAL,
					   v[i - 1]->fqn, SIZE_MAX,
					   "%s: keys '%s' and '%s': their data_offsets overlap",
					   b->where, v[i - 1]->fqn, v[i]->fqn);
	}
	free(v);
	return rc;
}

const struct ckpt_st_tensor *ckpt_st_find(const struct ckpt_st_set *set,
					  size_t from, size_t to,
					  const char *fqn, size_t len)
{
	while (from < to) {
		size_t mid = from + (to - from) / 2;
		const char *s = set->t[mid].fqn;
		int c = strncmp(s, fqn, len);

		if (c == 0 && s[len] != '\0')
			c = 1;
		if (c == 0)
			return &set->t[mid];
		if (c < 0)
			from = mid + 1;
		else
			to = mid;
	}
	return NULL;
}

/* __metadata__'s DCP_SHARDING_INFO, a JSON document in a JSON string:
 * saved_offsets for every tensor of the blob (set->t[from, nt), sorted). */
static int sharding_info(struct blob *b, const struct ckpt_json *s,
			 size_t from)
{
	struct ckpt_st_set *set = b->set;
	struct ckpt_json_doc doc = { 0 };
	const struct ckpt_json *root;
	char *text, fqn[NAME_MAX_ST], where[4400];
	uint32_t k, c, d;
	long len;
	size_t i;
	int rc;

	assert(s->type == CKPT_JSON_STR);	/* check_metadata() */
	text = malloc((size_t)s->len + 1);
	if (!text)
		return ckpt_errf(b->err, b->errlen, -ENOMEM, "out of memory");
	len = ckpt_json_str(s, text, (size_t)s->len + 1);
	snprintf(where, sizeof(where), "%s: __metadata__.DCP_SHARDING_INFO",
		 b->where);
	if (len < 0) {
		rc = ckpt_errf(b->err, b->errlen, -EINVAL,
			       "%s: holds \\u0000", where);
		goto out_text;
	}
	rc = ckpt_json_parse(text, (size_t)len, where, &doc, b->err,
			     b->errlen);
	if (rc)
		goto out_text;
	root = &doc.nodes[0];
	if (root->type != CKPT_JSON_OBJ) {
		rc = ckpt_errf(b->err, b->errlen, -EINVAL,
			       "%s: not a JSON object", where);
		goto out_doc;
	}
	rc = no_repeats(&doc, root, where, NULL, b->err, b->errlen);
	if (rc)
		goto out_doc;
	for (k = 0, c = root->first; k + 1 < root->n; k += 2) {
		const struct ckpt_json *kn = &doc.nodes[c];
		const struct ckpt_json *v = &doc.nodes[kn->next];
		const struct ckpt_json *so;
		struct ckpt_st_tensor *t;

		c = v->next;
		if (ckpt_json_str(kn, fqn, sizeof(fqn)) <= 0) {
			rc = ckpt_errf(b->err, b->errlen, -EINVAL,
				       "%s: byte %u: a key that is empty, too long or holds NUL",
				       where, kn->at);
			goto out_doc;
		}
		t = (struct ckpt_st_tensor *)ckpt_st_find(set, from, set->nt,
							  fqn, strlen(fqn));
		if (!t) {
			rc = ckpt_errf_key(b->err, b->errlen, -EINVAL,
					   fqn, SIZE_MAX,
					   "%s: key '%s' is not a tensor of the file",
					   where, fqn);
			goto out_doc;
		}
		rc = no_repeats(&doc, v, where, fqn, b->err, b->errlen);
		if (rc)
			goto out_doc;
		so = v->type == CKPT_JSON_OBJ ?
		     ckpt_json_get(&doc, v, "saved_offsets") : NULL;
		if (!so || so->type != CKPT_JSON_ARR || so->n != t->ndim) {
			rc = ckpt_errf_key(b->err, b->errlen, -EINVAL,
					   fqn, SIZE_MAX,
					   "%s: key '%s': saved_offsets must be a list of %u offsets",
					   where, fqn, t->ndim);
			goto out_doc;
		}
		for (d = 0; d < so->n; d++) {
			const struct ckpt_json *x = ckpt_json_at(&doc, so, d);
			uint64_t end;

			if (x->type != CKPT_JSON_INT ||
			    __builtin_add_overflow(x->v, t->shape[d], &end)) {
				rc = ckpt_errf_key(b->err, b->errlen, -EINVAL,
						   fqn, SIZE_MAX,
						   "%s: key '%s': saved_offsets[%u] is not an offset whose end fits 64 bits",
						   where, fqn, d);
				goto out_doc;
			}
			t->saved[d] = x->v;
		}
		t->has_saved = true;
	}
	for (i = from; i < set->nt; i++) {
		if (!set->t[i].has_saved) {
			rc = ckpt_errf_key(b->err, b->errlen, -EINVAL,
					   set->t[i].fqn, SIZE_MAX,
					   "%s: has no saved_offsets for key '%s'",
					   where, set->t[i].fqn);
			goto out_doc;
		}
	}
	set->sharded = true;
out_doc:
	ckpt_json_free(&doc);
out_text:
	free(text);
	return rc;
}

/* __metadata__ is an object of strings (safetensors' own readers refuse
 * anything else), each name once. */
static int check_metadata(struct blob *b, const struct ckpt_json_doc *doc,
			  const struct ckpt_json *meta)
{
	static const char *const types[] = {
		[CKPT_JSON_NULL] = "null", [CKPT_JSON_BOOL] = "a boolean",
		[CKPT_JSON_INT] = "a number", [CKPT_JSON_NEG] = "a number",
		[CKPT_JSON_STR] = "a string", [CKPT_JSON_ARR] = "an array",
		[CKPT_JSON_OBJ] = "an object",
	};
	char name[128];
	uint32_t k, c;

	if (meta->type != CKPT_JSON_OBJ)
		return ckpt_errf(b->err, b->errlen, -EINVAL,
				 "%s: key '__metadata__': must be an object of strings, not %s",
				 b->where, types[meta->type]);
	for (k = 0, c = meta->first; k + 1 < meta->n; k += 2) {
		const struct ckpt_json *kn = &doc->nodes[c];
		const struct ckpt_json *v = &doc->nodes[kn->next];

		c = v->next;
		if (v->type == CKPT_JSON_STR)
			continue;
		if (ckpt_json_str(kn, name, sizeof(name)) < 0)
			snprintf(name, sizeof(name), "%.*s",
				 (int)(kn->len < 100 ? kn->len : 100), kn->s);
		if (!strcmp(name, "DCP_SHARDING_INFO"))
			return ckpt_errf(b->err, b->errlen, -EINVAL,
					 "%s: __metadata__.DCP_SHARDING_INFO is not a string",
					 b->where);
		return ckpt_errf(b->err, b->errlen, -EINVAL,
				 "%s: key '__metadata__': byte %u: '%s' is %s; __metadata__ must be an object of strings",
				 b->where, v->at, name, types[v->type]);
	}
	return no_repeats(doc, meta, b->where, "__metadata__", b->err,
			  b->errlen);
}

int ckpt_st_read_blob(struct ckpt_store *s, uint32_t id, uint64_t base,
		      uint64_t end, uint32_t fi, const char *where,
		      struct ckpt_st_set *set, char *err, size_t errlen)
{
	struct blob b = { set, fi, where, err, errlen };
	char fqn[NAME_MAX_ST];
	struct ckpt_json_doc doc = { 0 };
	const struct ckpt_json *root, *meta = NULL, *shi;
	uint8_t le[8];
	uint64_t hlen = 0, size = end - base, data_len;
	size_t first = set->nt;
	char *head = NULL;
	uint32_t k, c;
	int rc, i;

	if (base > end || size < 8 || ckpt_store_pread(s, id, le, 8, base))
		return ckpt_errf(err, errlen, -EINVAL,
				 "%s: shorter than a safetensors header", where);
	for (i = 7; i >= 0; i--)
		hlen = hlen << 8 | le[i];
	if (hlen > CKPT_ST_HEADER_MAX || hlen > size - 8)
		return ckpt_errf(err, errlen, -EINVAL,
				 "%s: header length %" PRIu64 " runs past the end (%" PRIu64 " bytes) or the %" PRIu64 "-byte cap",
				 where, hlen, size, CKPT_ST_HEADER_MAX);
	head = malloc(hlen ? hlen : 1);
	if (!head)
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	if (ckpt_store_pread(s, id, head, hlen, base + 8)) {
		rc = ckpt_errf(err, errlen, -EIO, "%s: cannot read its header",
			       where);
		goto out_head;
	}
	rc = ckpt_json_parse(head, hlen, where, &doc, err, errlen);
	if (rc)
		goto out_head;
	root = &doc.nodes[0];
	if (root->type != CKPT_JSON_OBJ) {
		rc = ckpt_errf(err, errlen, -EINVAL,
			       "%s: header is not a JSON object", where);
		goto out_doc;
	}
	data_len = size - 8 - hlen;
	for (k = 0, c = root->first; k + 1 < root->n; k += 2) {
		const struct ckpt_json *kn = &doc.nodes[c];
		const struct ckpt_json *v = &doc.nodes[kn->next];

		c = v->next;	/* walk the siblings: O(n), not O(n^2) */

		if (ckpt_json_str(kn, fqn, sizeof(fqn)) <= 0) {
			rc = ckpt_errf(err, errlen, -EINVAL,
				       "%s: byte %u: a key that is empty, too long or holds NUL",
				       where, kn->at);
			goto out_doc;
		}
		if (!strcmp(fqn, "__metadata__")) {
			if (meta) {
				rc = ckpt_errf(err, errlen, -EINVAL,
					       "%s: byte %u: key '__metadata__' appears twice",
					       where, kn->at);
				goto out_doc;
			}
			meta = v;
			rc = check_metadata(&b, &doc, v);
			if (rc)
				goto out_doc;
			continue;
		}
		if (v->type != CKPT_JSON_OBJ) {
			rc = ckpt_errf_key(err, errlen, -EINVAL, fqn, SIZE_MAX,
					   "%s: key '%s': not an object", where, fqn);
			goto out_doc;
		}
		rc = one_tensor(&b, &doc, v, fqn, base + 8 + hlen, data_len);
		if (rc)
			goto out_doc;
	}
	qsort(set->t + first, set->nt - first, sizeof(*set->t), cmp_fqn);
	rc = check_overlaps(&b, first);
	if (rc)
		goto out_doc;
	if (meta && (shi = ckpt_json_get(&doc, meta, "DCP_SHARDING_INFO")))
		rc = sharding_info(&b, shi, first);
out_doc:
	ckpt_json_free(&doc);
out_head:
	free(head);
	return rc;
}

void ckpt_st_set_free(struct ckpt_st_set *set)
{
	size_t i;

	for (i = 0; i < set->nt; i++)
		free(set->t[i].fqn);
	free(set->t);
	memset(set, 0, sizeof(*set));
}
