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
#include "common/strtab.h"
#include "model/transforms.h"

static void str(struct ckpt_mpout *o, const char *s, size_t len)
{
	ckpt_mp_str_with_body(o, s, len);
}

/* A chunk of part p; order: where it was gathered, which settles ties. */
struct pick {
	const struct ckpt_meta *m;
	const struct ckpt_entry *e;
	const struct ckpt_chunk *c;
	size_t order;
	uint32_t guard;		/* m->guards index, or UINT32_MAX */
};

/* Picks by box (offsets, then sizes), then by order: identical boxes end
 * up next to each other, the first part's first. */
static int cmp_pick(const void *a, const void *b)
{
	const struct pick *x = a, *y = b;
	unsigned n = x->e->ndim, i;
	int d = 0;

	for (i = 0; i < n && !d; i++) {
		uint64_t p = ckpt_chunk_offsets(x->m, x->c)[i];
		uint64_t q = ckpt_chunk_offsets(y->m, y->c)[i];

		d = p < q ? -1 : p > q;
	}
	for (i = 0; i < n && !d; i++) {
		uint64_t p = ckpt_chunk_sizes(x->m, x->e, x->c)[i];
		uint64_t q = ckpt_chunk_sizes(y->m, y->e, y->c)[i];

		d = p < q ? -1 : p > q;
	}
	if (!d)
		d = x->order < y->order ? -1 : x->order > y->order;
	return d;
}

static bool same_box(const struct pick *a, const struct pick *b)
{
	unsigned n = a->e->ndim;

	return n == b->e->ndim &&
	       !memcmp(ckpt_chunk_offsets(a->m, a->c),
		       ckpt_chunk_offsets(b->m, b->c), n * sizeof(uint64_t)) &&
	       !memcmp(ckpt_chunk_sizes(a->m, a->e, a->c),
		       ckpt_chunk_sizes(b->m, b->e, b->c), n * sizeof(uint64_t));
}

/* A key: its first part and entry there. */
struct key {
	size_t part;
	const struct ckpt_entry *e;
};

/* Every key's appearances, in part order. */
struct seen {
	uint32_t key;
	uint32_t part;
	const struct ckpt_entry *e;
};

struct keytab {
	struct ckpt_meta *const *parts;
	const struct key *keys;
};

static void key_of(const void *ctx, uint32_t idx, uint64_t *seed,
		   const char **s, size_t *len)
{
	const struct keytab *t = ctx;
	const struct key *k = &t->keys[idx];

	*seed = 0;
	*s = ckpt_entry_fqn(t->parts[k->part], k->e);
	*len = k->e->fqn_len;
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
		return ckpt_errf_key(err, errlen, -EINVAL, fqn, SIZE_MAX,
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
	uint32_t ci = (uint32_t)(c - m->chunks);
	bool pending = !z && m->located && !ckpt_chunk_is_located(m, ci);
	bool guarded = !z && !pending && p->guard != UINT32_MAX;
	unsigned n = 5 + (c->strides_at != CKPT_NONE) + c->has_crc32 +
		     c->has_xxh3 + (z ? 3 : 0) + pending + guarded;
	unsigned t;

	ckpt_mp_map(o, n);
	ckpt_pack_cstr(o, "fqn");
	str(o, ckpt_entry_fqn(m, p->e), p->e->fqn_len);
	ckpt_pack_cstr(o, "offsets");
	if (p->e->kind == CKPT_KIND_BYTES)
		ckpt_mp_nil(o);
	else
		ckpt_pack_dims(o, ckpt_chunk_offsets(m, c), p->e->ndim);
	ckpt_pack_cstr(o, "relative_path");
	ckpt_pack_cstr(o, m->strings + f->path);
	ckpt_pack_cstr(o, "offset");
	ckpt_mp_uint64(o, z ? z->off : c->foff);
	ckpt_pack_cstr(o, "length");
	ckpt_mp_uint64(o, z ? z->len : c->len);
	if (z) {
		ckpt_pack_cstr(o, "transforms");
		ckpt_mp_array(o, z->ntransforms);
		for (t = 0; t < z->ntransforms; t++)
			ckpt_pack_cstr(o,
				       ckpt_transform_name(z->transforms[t]));
		ckpt_pack_cstr(o, "payload");
		ckpt_pack_cstr(o, ckpt_payload_name(z->payload));
		ckpt_pack_cstr(o, "size");
		ckpt_mp_uint64(o, c->len);
	}
	if (c->strides_at != CKPT_NONE) {
		ckpt_pack_cstr(o, "strides");
		ckpt_pack_dims(o, ckpt_chunk_strides(m, c), p->e->ndim);
	}
	if (c->has_crc32) {
		ckpt_pack_cstr(o, "crc32");
		ckpt_mp_uint32(o, c->crc32);
	}
	if (c->has_xxh3) {
		ckpt_pack_cstr(o, "xxh3");
		ckpt_mp_uint64(o, c->xxh3);
	}
	if (guarded) {	/* a part's index checked the header: kept */
		const struct ckpt_guard *g = &m->guards[p->guard];

		ckpt_pack_cstr(o, "zip_header");
		ckpt_mp_array(o, 3);
		ckpt_mp_uint64(o, g->off);
		ckpt_mp_uint64(o, g->len);
		ckpt_mp_uint64(o, g->xxh3);
	}
	if (pending) {	/* a part opened lazily: located when read */
		ckpt_pack_cstr(o, "archive");
		ckpt_mp_array(o, 2);
		ckpt_mp_uint64(o, m->lazy[ci].boff);
		ckpt_mp_uint64(o, m->lazy[ci].blen);
	}
}

int ckpt_meta_merge(struct ckpt_meta *const *parts, const char *const *names,
		    size_t n, uint8_t **img, size_t *len, char *err,
		    size_t errlen)
{
	struct ckpt_mpout o;
	struct ckpt_strtab tab = { 0 };
	struct pick *picks = NULL;
	size_t npicks = 0, cap = 0, nkeys = 0, nseen = 0, npd = 0, i, j, k;
	struct key *keys = NULL;
	struct seen *seen = NULL;
	size_t *at = NULL, *by_key = NULL;
	uint32_t **gmap = NULL;	/* per part: chunk -> its guard */
	struct keytab kt = { parts, NULL };
	bool packing = false;
	int rc = 0;

	*img = NULL;
	*len = 0;
	for (i = 0; i < n; i++)
		nseen += parts[i]->nentries;
	if (nseen >= UINT32_MAX || n >= UINT32_MAX)
		return ckpt_errf(err, errlen, -E2BIG,
				 "%s: too many keys across the rank-local parts",
				 n ? names[0] : "");
	gmap = calloc(n ? n : 1, sizeof(*gmap));
	if (!gmap)
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	for (i = 0; i < n; i++) {
		const struct ckpt_meta *pm = parts[i];
		uint32_t g;

		if (!pm->nguards)
			continue;
		gmap[i] = malloc(pm->nchunks * sizeof(**gmap));
		if (!gmap[i]) {
			rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
			goto out_free;
		}
		memset(gmap[i], 0xff, pm->nchunks * sizeof(**gmap));
		for (g = 0; g < pm->nguards; g++)
			if (pm->guards[g].chunk < pm->nchunks)
				gmap[i][pm->guards[g].chunk] = g;
	}
	keys = malloc((nseen ? nseen : 1) * sizeof(*keys));
	seen = malloc((nseen ? nseen : 1) * sizeof(*seen));
	at = calloc(nseen + 1, sizeof(*at));
	by_key = malloc((nseen ? nseen : 1) * sizeof(*by_key));
	kt.keys = keys;
	if (!keys || !seen || !at || !by_key ||
	    ckpt_strtab_init(&tab, nseen, key_of, &kt)) {
		rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
		goto out_free;
	}
	/* Keys in order of first appearance, found through one FQN table;
	 * shapes must agree with the first part that has the key. */
	nseen = 0;
	for (i = 0; i < n; i++) {
		for (j = 0; j < parts[i]->nentries; j++) {
			const struct ckpt_entry *e = &parts[i]->entries[j];
			uint32_t f;

			keys[nkeys] = (struct key){ i, e };
			f = ckpt_strtab_insert(&tab, (uint32_t)nkeys);
			if (f == UINT32_MAX) {
				f = (uint32_t)nkeys++;
				if (e->ncomps)
					npd++;
			} else {
				rc = agree(parts, names, keys[f].part, i,
					   keys[f].e, e, err, errlen);
				if (rc)
					goto out_free;
			}
			seen[nseen++] = (struct seen){ f, (uint32_t)i, e };
			at[f + 1]++;
		}
	}
	/* Each key's appearances together, still in part order. */
	for (k = 0; k < nkeys; k++)
		at[k + 1] += at[k];
	for (j = 0; j < nseen; j++)
		by_key[at[seen[j].key]++] = j;
	for (k = nkeys; k > 0; k--)
		at[k] = at[k - 1];
	at[0] = 0;
	ckpt_mpout_init(&o);
	packing = true;
	ckpt_mp_map(&o, npd ? 5 : 4);
	ckpt_pack_cstr(&o, "format");
	ckpt_pack_cstr(&o, CKPT_FORMAT_NAME);
	ckpt_pack_cstr(&o, "version");
	ckpt_mp_uint64(&o, CKPT_FORMAT_VERSION);
	ckpt_pack_cstr(&o, "state_dict_metadata");
	ckpt_mp_map(&o, nkeys);
	for (k = 0; k < nkeys; k++) {
		const struct ckpt_meta *m0 = parts[keys[k].part];
		const struct ckpt_entry *e0 = keys[k].e;
		const char *fqn = ckpt_entry_fqn(m0, e0);
		size_t first = npicks, q, kept;

		/* Gather the chunks of every part, then sort them by box
		 * and keep the first of each run of identical boxes. */
		for (q = at[k]; q < at[k + 1]; q++) {
			const struct seen *sn = &seen[by_key[q]];
			const struct ckpt_meta *pm = parts[sn->part];

			for (j = 0; j < sn->e->nchunks; j++) {
				if (ckpt_grow((void **)&picks, &cap, npicks + 1,
					      sizeof(*picks))) {
					rc = ckpt_errf(err, errlen, -ENOMEM,
						       "out of memory");
					goto out_buf;
				}
				picks[npicks] = (struct pick){
					pm, sn->e,
					&pm->chunks[sn->e->chunk_first + j],
					npicks, gmap[sn->part] ?
					gmap[sn->part][sn->e->chunk_first + j] :
					UINT32_MAX };
				npicks++;
			}
		}
		qsort(picks + first, npicks - first, sizeof(*picks), cmp_pick);
		for (q = first, kept = first; q < npicks; q++)
			if (q == first || !same_box(&picks[kept - 1], &picks[q]))
				picks[kept++] = picks[q];
		npicks = kept;
		str(&o, fqn, e0->fqn_len);
		if (e0->kind == CKPT_KIND_BYTES) {
			ckpt_mp_map(&o, 1);
			ckpt_pack_cstr(&o, "type");
			ckpt_pack_cstr(&o, "bytes");
			npicks = first + (npicks > first);	/* one record */
			continue;
		}
		ckpt_mp_map(&o, 5);
		ckpt_pack_cstr(&o, "type");
		ckpt_pack_cstr(&o, "tensor");
		ckpt_pack_cstr(&o, "dtype");
		ckpt_pack_cstr(&o, ckpt_dtype_name((enum ckpt_dtype)e0->dtype));
		ckpt_pack_cstr(&o, "requires_grad");
		ckpt_pack_bool(&o, e0->requires_grad);
		ckpt_pack_cstr(&o, "size");
		ckpt_pack_dims(&o, ckpt_entry_shape(m0, e0), e0->ndim);
		ckpt_pack_cstr(&o, "chunks");
		ckpt_mp_array(&o, npicks - first);
		for (j = first; j < npicks; j++) {
			ckpt_mp_map(&o, 2);
			ckpt_pack_cstr(&o, "offsets");
			ckpt_pack_dims(&o, ckpt_chunk_offsets(picks[j].m, picks[j].c), e0->ndim);
			ckpt_pack_cstr(&o, "sizes");
			ckpt_pack_dims(&o, ckpt_chunk_sizes(picks[j].m, picks[j].e, picks[j].c),
			     e0->ndim);
		}
	}
	if (npd) {
		ckpt_pack_cstr(&o, "planner_data");
		ckpt_mp_map(&o, npd);
		for (k = 0; k < nkeys; k++) {
			const struct ckpt_meta *m0 = parts[keys[k].part];
			const struct ckpt_entry *e0 = keys[k].e;

			if (!e0->ncomps)
				continue;
			str(&o, ckpt_entry_fqn(m0, e0), e0->fqn_len);
			ckpt_mp_array(&o, e0->ncomps);
			for (j = 0; j < e0->ncomps; j++) {
				const struct ckpt_comp *c =
					&m0->comps[e0->comp_first + j];

				str(&o, m0->strings + c->str, c->len);
			}
		}
	}
	ckpt_pack_cstr(&o, "storage_data");
	ckpt_mp_array(&o, npicks);
	for (j = 0; j < npicks; j++)
		record(&o, &picks[j]);
	if (ckpt_mpout_finish(&o, img, len))
		rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
out_buf:
	if (packing)
		ckpt_mpout_destroy(&o);
out_free:
	for (i = 0; gmap && i < n; i++)
		free(gmap[i]);
	free(gmap);
	ckpt_strtab_destroy(&tab);
	free(picks);
	free(keys);
	free(seen);
	free(at);
	free(by_key);
	return rc;
}
