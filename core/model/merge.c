/* SPDX-License-Identifier: MIT */
/*
 * Merging rank-local metadata (see ckpt_meta_merge() in meta.h): the
 * parts of a checkpoint whose ranks each wrote their own metadata become
 * one native image, written with msgpack-c's packer, which the native
 * parser then validates like any checkpoint.
 */
#include "model/meta.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/errbuf.h"
#include "common/grow.h"
#include "common/mpout.h"
#include "model/transforms.h"

static void str(struct ckpt_mpout *o, const char *s, size_t len)
{
	msgpack_pack_str_with_body(&o->pk, s, len);
}

/* A chunk of part p. */
struct pick {
	const struct ckpt_meta *m;
	const struct ckpt_entry *e;
	const struct ckpt_chunk *c;
};

static bool same_box(const struct pick *a, const struct pick *b)
{
	unsigned n = a->e->ndim;

	return n == b->e->ndim &&
	       !memcmp(ckpt_chunk_offsets(a->m, a->c),
		       ckpt_chunk_offsets(b->m, b->c), n * sizeof(uint64_t)) &&
	       !memcmp(ckpt_chunk_sizes(a->m, a->e, a->c),
		       ckpt_chunk_sizes(b->m, b->e, b->c), n * sizeof(uint64_t));
}

/* The first part (< upto) that has key fqn, or -1. */
static long first_with(struct ckpt_meta *const *parts, size_t upto,
		       const char *fqn, size_t len)
{
	size_t i;

	for (i = 0; i < upto; i++)
		if (ckpt_meta_find(parts[i], fqn, len))
			return (long)i;
	return -1;
}

static int agree(struct ckpt_meta *const *parts, const char *const *names,
		 size_t a, size_t b, const struct ckpt_entry *ea,
		 const struct ckpt_entry *eb, char *err, size_t errlen)
{
	const char *fqn = ckpt_entry_fqn(parts[a], ea);
	char x[256], y[256];

	if (ea->kind != eb->kind || (ea->kind == CKPT_KIND_TENSOR &&
				     (ea->dtype != eb->dtype ||
				      ea->ndim != eb->ndim ||
				      memcmp(ckpt_entry_shape(parts[a], ea),
					     ckpt_entry_shape(parts[b], eb),
					     ea->ndim * sizeof(uint64_t)))))
		return ckpt_errf(err, errlen, -EINVAL,
				 "%s: key '%s' is %s %s%s, but %s says %s %s%s",
				 names[b], fqn,
				 eb->kind == CKPT_KIND_BYTES ? "bytes" :
				 ckpt_dtype_name((enum ckpt_dtype)eb->dtype),
				 eb->kind == CKPT_KIND_BYTES ? "" : "of shape ",
				 eb->kind == CKPT_KIND_BYTES ? "" :
				 ckpt_fmt_dims(y, sizeof(y), ckpt_entry_shape(parts[b], eb), eb->ndim),
				 names[a],
				 ea->kind == CKPT_KIND_BYTES ? "bytes" :
				 ckpt_dtype_name((enum ckpt_dtype)ea->dtype),
				 ea->kind == CKPT_KIND_BYTES ? "" : "of shape ",
				 ea->kind == CKPT_KIND_BYTES ? "" :
				 ckpt_fmt_dims(x, sizeof(x), ckpt_entry_shape(parts[a], ea), ea->ndim));
	return 0;
}

static void record(struct ckpt_mpout *o, const struct pick *p)
{
	const struct ckpt_meta *m = p->m;
	const struct ckpt_chunk *c = p->c;
	const struct ckpt_zrec *z = ckpt_chunk_zrec(m, c);
	const struct ckpt_file *f = &m->files[z ? z->file : c->file];
	unsigned n = 5 + (c->strides_at != CKPT_NONE) + c->has_crc32 +
		     c->has_xxh3 + (z ? 3 : 0);
	unsigned t;

	msgpack_pack_map(&o->pk, n);
	ckpt_pack_cstr(&o->pk, "fqn");
	str(o, ckpt_entry_fqn(m, p->e), p->e->fqn_len);
	ckpt_pack_cstr(&o->pk, "offsets");
	if (p->e->kind == CKPT_KIND_BYTES)
		msgpack_pack_nil(&o->pk);
	else
		ckpt_pack_dims(&o->pk, ckpt_chunk_offsets(m, c), p->e->ndim);
	ckpt_pack_cstr(&o->pk, "relative_path");
	ckpt_pack_cstr(&o->pk, m->strings + f->path);
	ckpt_pack_cstr(&o->pk, "offset");
	msgpack_pack_uint64(&o->pk, z ? z->off : c->foff);
	ckpt_pack_cstr(&o->pk, "length");
	msgpack_pack_uint64(&o->pk, z ? z->len : c->len);
	if (z) {
		ckpt_pack_cstr(&o->pk, "transforms");
		msgpack_pack_array(&o->pk, z->ntransforms);
		for (t = 0; t < z->ntransforms; t++)
			ckpt_pack_cstr(&o->pk,
				       ckpt_transform_name(z->transforms[t]));
		ckpt_pack_cstr(&o->pk, "payload");
		ckpt_pack_cstr(&o->pk, ckpt_payload_name(z->payload));
		ckpt_pack_cstr(&o->pk, "size");
		msgpack_pack_uint64(&o->pk, c->len);
	}
	if (c->strides_at != CKPT_NONE) {
		ckpt_pack_cstr(&o->pk, "strides");
		ckpt_pack_dims(&o->pk, ckpt_chunk_strides(m, c), p->e->ndim);
	}
	if (c->has_crc32) {
		ckpt_pack_cstr(&o->pk, "crc32");
		msgpack_pack_uint32(&o->pk, c->crc32);
	}
	if (c->has_xxh3) {
		ckpt_pack_cstr(&o->pk, "xxh3");
		msgpack_pack_uint64(&o->pk, c->xxh3);
	}
}

int ckpt_meta_merge(struct ckpt_meta *const *parts, const char *const *names,
		    size_t n, uint8_t **img, size_t *len, char *err,
		    size_t errlen)
{
	struct ckpt_mpout o;
	struct pick *picks = NULL;
	size_t npicks = 0, cap = 0, nkeys = 0, npd = 0, i, j, k;
	const struct ckpt_entry **keys = NULL;	/* first part's entry */
	size_t *key_part = NULL;
	int rc = 0;

	*img = NULL;
	*len = 0;
	for (i = 0; i < n; i++)
		nkeys += parts[i]->nentries;
	keys = malloc((nkeys ? nkeys : 1) * sizeof(*keys));
	key_part = malloc((nkeys ? nkeys : 1) * sizeof(*key_part));
	if (!keys || !key_part) {
		rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
		goto out_free;
	}
	/* Keys in order of first appearance; shapes must agree. */
	nkeys = 0;
	for (i = 0; i < n; i++) {
		for (j = 0; j < parts[i]->nentries; j++) {
			const struct ckpt_entry *e = &parts[i]->entries[j];
			const char *fqn = ckpt_entry_fqn(parts[i], e);
			long f = first_with(parts, i, fqn, e->fqn_len);

			if (f >= 0) {
				rc = agree(parts, names, (size_t)f, i,
					   ckpt_meta_find(parts[f], fqn, e->fqn_len),
					   e, err, errlen);
				if (rc)
					goto out_free;
				continue;
			}
			keys[nkeys] = e;
			key_part[nkeys++] = i;
			if (e->ncomps)
				npd++;
		}
	}
	ckpt_mpout_init(&o);
	msgpack_pack_map(&o.pk, npd ? 5 : 4);
	ckpt_pack_cstr(&o.pk, "format");
	ckpt_pack_cstr(&o.pk, CKPT_FORMAT_NAME);
	ckpt_pack_cstr(&o.pk, "version");
	msgpack_pack_uint64(&o.pk, CKPT_FORMAT_VERSION);
	ckpt_pack_cstr(&o.pk, "state_dict_metadata");
	msgpack_pack_map(&o.pk, nkeys);
	for (k = 0; k < nkeys; k++) {
		const struct ckpt_meta *m0 = parts[key_part[k]];
		const struct ckpt_entry *e0 = keys[k];
		const char *fqn = ckpt_entry_fqn(m0, e0);
		size_t first = npicks;

		/* Gather the chunks of every part, identical boxes once. */
		for (i = key_part[k]; i < n; i++) {
			const struct ckpt_entry *e =
				ckpt_meta_find(parts[i], fqn, e0->fqn_len);

			for (j = 0; e && j < e->nchunks; j++) {
				struct pick p = { parts[i], e,
						  &parts[i]->chunks[e->chunk_first + j] };
				size_t q;

				for (q = first; q < npicks; q++)
					if (same_box(&picks[q], &p))
						break;
				if (q < npicks)
					continue;
				if (ckpt_grow((void **)&picks, &cap, npicks + 1,
					      sizeof(*picks))) {
					rc = ckpt_errf(err, errlen, -ENOMEM,
						       "out of memory");
					goto out_buf;
				}
				picks[npicks++] = p;
			}
		}
		str(&o, fqn, e0->fqn_len);
		if (e0->kind == CKPT_KIND_BYTES) {
			msgpack_pack_map(&o.pk, 1);
			ckpt_pack_cstr(&o.pk, "type");
			ckpt_pack_cstr(&o.pk, "bytes");
			npicks = first + (npicks > first);	/* one record */
			continue;
		}
		msgpack_pack_map(&o.pk, 5);
		ckpt_pack_cstr(&o.pk, "type");
		ckpt_pack_cstr(&o.pk, "tensor");
		ckpt_pack_cstr(&o.pk, "dtype");
		ckpt_pack_cstr(&o.pk, ckpt_dtype_name((enum ckpt_dtype)e0->dtype));
		ckpt_pack_cstr(&o.pk, "requires_grad");
		ckpt_pack_bool(&o.pk, e0->requires_grad);
		ckpt_pack_cstr(&o.pk, "size");
		ckpt_pack_dims(&o.pk, ckpt_entry_shape(m0, e0), e0->ndim);
		ckpt_pack_cstr(&o.pk, "chunks");
		msgpack_pack_array(&o.pk, npicks - first);
		for (j = first; j < npicks; j++) {
			msgpack_pack_map(&o.pk, 2);
			ckpt_pack_cstr(&o.pk, "offsets");
			ckpt_pack_dims(&o.pk, ckpt_chunk_offsets(picks[j].m, picks[j].c), e0->ndim);
			ckpt_pack_cstr(&o.pk, "sizes");
			ckpt_pack_dims(&o.pk, ckpt_chunk_sizes(picks[j].m, picks[j].e, picks[j].c),
			     e0->ndim);
		}
	}
	if (npd) {
		ckpt_pack_cstr(&o.pk, "planner_data");
		msgpack_pack_map(&o.pk, npd);
		for (k = 0; k < nkeys; k++) {
			const struct ckpt_meta *m0 = parts[key_part[k]];
			const struct ckpt_entry *e0 = keys[k];

			if (!e0->ncomps)
				continue;
			str(&o, ckpt_entry_fqn(m0, e0), e0->fqn_len);
			msgpack_pack_array(&o.pk, e0->ncomps);
			for (j = 0; j < e0->ncomps; j++) {
				const struct ckpt_comp *c =
					&m0->comps[e0->comp_first + j];

				str(&o, m0->strings + c->str, c->len);
			}
		}
	}
	ckpt_pack_cstr(&o.pk, "storage_data");
	msgpack_pack_array(&o.pk, npicks);
	for (j = 0; j < npicks; j++)
		record(&o, &picks[j]);
	if (ckpt_mpout_finish(&o, img, len))
		rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
out_buf:
	ckpt_mpout_destroy(&o);
out_free:
	free(picks);
	free(keys);
	free(key_part);
	return rc;
}
