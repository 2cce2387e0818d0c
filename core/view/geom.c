/* SPDX-License-Identifier: MIT */
/* Key files' geometry per rank, computed once: see geom.h. */
#include "view/geom.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/errbuf.h"
#include "common/grow.h"
#include "view/convert.h"
#include "view/npy.h"

/* Growing pools while building. */
struct pools {
	size_t cap_dims, n_dims;
	size_t cap_chunks, n_chunks;
	size_t cap_npy, n_npy;
};

/* The box entry e shows to slot's rank (layout applied). */
static void slot_box(const struct ckpt_view *v, uint32_t slot,
		     const struct ckpt_entry *e, struct ckpt_box *box)
{
	const struct ckpt_layout *l = v->layout;
	uint32_t bi = CKPT_NONE;

	if (l && l->entry_box)
		bi = l->entry_box[e - v->meta->entries];
	if (bi != CKPT_NONE)
		ckpt_reshard_box_in(v->meta, e, l->boxes[bi].off,
				    l->boxes[bi].size, v->world,
				    v->slot_rank[slot], box);
	else
		ckpt_reshard_box(v->meta, e, v->world, v->slot_rank[slot], box);
}

/* Does chunk c of e hold any element of the (non-empty) box? */
static bool touches(const struct ckpt_meta *m, const struct ckpt_entry *e,
		    const struct ckpt_chunk *c, const struct ckpt_box *box)
{
	const uint64_t *co = ckpt_chunk_offsets(m, c);
	const uint64_t *cs = ckpt_chunk_sizes(m, e, c);
	unsigned d;

	for (d = 0; d < e->ndim; d++) {
		if (cs[d] == 0 || co[d] >= box->off[d] + box->size[d] ||
		    box->off[d] >= co[d] + cs[d])
			return false;
	}
	return true;
}

static int one(struct ckpt_view *v, struct pools *p, uint32_t slot,
	       uint32_t file, struct ckpt_geom *g)
{
	const struct ckpt_meta *m = v->meta;
	const struct ckpt_entry *e =
		&m->entries[v->nodes[v->file_node[file]].entry];
	char head[CKPT_NPY_MAX_HEADER];
	struct ckpt_box box;
	uint64_t numel;
	uint32_t k;
	size_t h;

	memset(g, 0, sizeof(*g));
	g->box_at = CKPT_NONE;
	g->chunk_at = (uint32_t)p->n_chunks;
	if (e->kind == CKPT_KIND_BYTES) {
		g->dtype = CKPT_DTYPE_COUNT;
		g->data_size = g->size = e->nbytes;
		if (e->nchunks) {
			if (ckpt_grow((void **)&v->gchunks, &p->cap_chunks,
				 p->n_chunks + 1, sizeof(uint32_t)))
				return -ENOMEM;
			v->gchunks[p->n_chunks++] = e->chunk_first;
			g->nchunks = 1;
		}
		return 0;
	}
	slot_box(v, slot, e, &box);
	numel = ckpt_box_numel(&box);
	g->ndim = (uint8_t)box.ndim;
	g->dtype = (uint8_t)ckpt_convert_view_dtype((enum ckpt_dtype)e->dtype,
						    v->dtype);
	if (__builtin_mul_overflow(numel, ckpt_dtype_size(g->dtype),
				   &g->data_size))
		return -EOVERFLOW;
	if (ckpt_grow((void **)&v->gdims, &p->cap_dims, p->n_dims + 2 * box.ndim,
		 sizeof(uint64_t)) || p->n_dims + 2 * box.ndim > UINT32_MAX)
		return -ENOMEM;
	g->box_at = (uint32_t)p->n_dims;
	if (box.ndim) {		/* 0-d tensors have no dims (gdims may be NULL) */
		memcpy(v->gdims + p->n_dims, box.off,
		       box.ndim * sizeof(uint64_t));
		memcpy(v->gdims + p->n_dims + box.ndim, box.size,
		       box.ndim * sizeof(uint64_t));
	}
	p->n_dims += 2 * box.ndim;
	for (k = 0; numel && k < e->nchunks; k++) {
		uint32_t ci = e->chunk_first + k;

		if (!touches(m, e, &m->chunks[ci], &box))
			continue;
		if (ckpt_grow((void **)&v->gchunks, &p->cap_chunks,
			 p->n_chunks + 1, sizeof(uint32_t)) ||
		    p->n_chunks + 1 > UINT32_MAX)
			return -ENOMEM;
		v->gchunks[p->n_chunks++] = ci;
		g->nchunks++;
	}
	g->size = g->data_size;
	if (v->npy) {
		h = ckpt_npy_header(g->dtype, box.size, box.ndim, head,
				    sizeof(head));
		if (!h)
			return -EOVERFLOW;
		if (ckpt_grow((void **)&v->npy_heads, &p->cap_npy, p->n_npy + h, 1) ||
		    p->n_npy + h > UINT32_MAX)
			return -ENOMEM;
		g->npy_at = (uint32_t)p->n_npy;
		g->npy_len = (uint16_t)h;
		memcpy(v->npy_heads + p->n_npy, head, h);
		p->n_npy += h;
		g->size += h;
	}
	return 0;
}

int ckpt_geom_build(struct ckpt_view *v, char *err, size_t errlen)
{
	struct pools p = { 0 };
	size_t n;
	uint32_t s, f;
	int rc;

	if (__builtin_mul_overflow((size_t)v->nslots, (size_t)v->nfiles, &n))
		return ckpt_errf(err, errlen, -ENOMEM, "view too large");
	v->geom = malloc((n ? n : 1) * sizeof(*v->geom));
	if (!v->geom)
		return ckpt_errf(err, errlen, -ENOMEM,
				 "out of memory building the view");
	v->total_bytes = 0;
	for (s = 0; s < v->nslots; s++) {
		for (f = 0; f < v->nfiles; f++) {
			struct ckpt_geom *g = &v->geom[(size_t)s * v->nfiles + f];

			const char *fqn = ckpt_entry_fqn(v->meta,
				&v->meta->entries[v->nodes[v->file_node[f]].entry]);

			rc = one(v, &p, s, f, g);
			if (rc == -EOVERFLOW ||
			    (!rc && __builtin_add_overflow(v->total_bytes,
							  g->size,
							  &v->total_bytes)))
				return ckpt_errf_key(err, errlen, -EOVERFLOW,
						     fqn, SIZE_MAX,
						     "%s: key '%s': view size overflows",
						     v->meta->meta_path ? v->meta->meta_path : ".metadata",
						     fqn);
			if (rc)
				return ckpt_errf(err, errlen, rc,
						 "out of memory building the view");
		}
	}
	return 0;
}

void ckpt_geom_destroy(struct ckpt_view *v)
{
	free(v->geom);
	free(v->gdims);
	free(v->gchunks);
	free(v->npy_heads);
	v->geom = NULL;
	v->gdims = NULL;
	v->gchunks = NULL;
	v->npy_heads = NULL;
}

void ckpt_geom_box(const struct ckpt_view *v, const struct ckpt_geom *g,
		   struct ckpt_box *box)
{
	box->ndim = g->ndim;
	if (g->box_at == CKPT_NONE || g->ndim == 0) {
		box->ndim = 0;
		return;
	}
	memcpy(box->off, v->gdims + g->box_at, g->ndim * sizeof(uint64_t));
	memcpy(box->size, v->gdims + g->box_at + g->ndim,
	       g->ndim * sizeof(uint64_t));
}
