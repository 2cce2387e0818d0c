/* SPDX-License-Identifier: MIT */
/*
 * The read planner.  For view byte position p (element e = p / itemsize),
 * take e's coordinates g in the global tensor, find the chunk C holding g,
 * and extend the run along the innermost dim to the end of C or of the
 * box, whichever is first.  When the run starts a row and C spans the box
 * exactly in that dim, C's rows are adjacent in its storage, so the run
 * continues through the next-outer dim, and so on.
 *
 * A strided chunk (a tensor saved with non-row-major strides) gives runs
 * of the innermost dim when its stride is 1, else single elements.
 *
 * Example: shape [4,6] saved as two chunks [0,0]+[4,3] and [0,3]+[4,3]
 * (dim-1 shards), view rows 1-2 (box [1,0]+[2,6]): runs are row 1 cols 0-2
 * from chunk 0, row 1 cols 3-5 from chunk 1, then row 2 likewise: 4 runs
 * of 3 elements.  Saved as [0,0]+[2,6], [2,0]+[2,6] (dim-0 shards) the same
 * view is 2 runs of 6 elements.
 */
#include "plan/plan.h"

#include <errno.h>

void ckpt_planner_init(struct ckpt_planner *p, const struct ckpt_meta *m,
		       const struct ckpt_entry *e, const struct ckpt_box *box,
		       uint64_t off, uint64_t len)
{
	uint64_t size;

	p->m = m;
	p->e = e;
	p->box = box;
	p->hint = 0;
	p->boxes = false;
	if (e->kind == CKPT_KIND_BYTES)
		size = e->nbytes;
	else
		size = ckpt_box_numel(box) * ckpt_dtype_size(e->dtype);
	p->pos = off < size ? off : size;
	p->end = (len < size - p->pos) ? p->pos + len : size;
}

void ckpt_planner_want_boxes(struct ckpt_planner *p)
{
	p->boxes = true;
}

static int contains(const struct ckpt_meta *m, const struct ckpt_entry *e,
		    const struct ckpt_chunk *c, const uint64_t *g)
{
	const uint64_t *co = ckpt_chunk_offsets(m, c);
	const uint64_t *cs = ckpt_chunk_sizes(m, e, c);
	unsigned d;

	for (d = 0; d < e->ndim; d++) {
		if (g[d] < co[d] || g[d] - co[d] >= cs[d])
			return 0;
	}
	return 1;
}

/* The chunk (index within e) holding global coordinate g.  Chunks are
 * sorted by offsets and the holder's offsets are <= g in every dim, hence
 * lexicographically, so it is at or before the last chunk <= g. */
static uint32_t find_chunk(struct ckpt_planner *p, const uint64_t *g)
{
	const struct ckpt_meta *m = p->m;
	const struct ckpt_entry *e = p->e;
	const struct ckpt_chunk *ch = m->chunks + e->chunk_first;
	uint32_t lo = 0, hi = e->nchunks, i;
	unsigned d;

	if (p->hint < e->nchunks && contains(m, e, &ch[p->hint], g))
		return p->hint;
	if (p->hint + 1 < e->nchunks && contains(m, e, &ch[p->hint + 1], g))
		return p->hint + 1;
	while (lo < hi) {	/* first chunk > g */
		uint32_t mid = lo + (hi - lo) / 2;
		const uint64_t *co = ckpt_chunk_offsets(m, &ch[mid]);
		int cmp = 0;

		for (d = 0; d < e->ndim && !cmp; d++)
			cmp = co[d] < g[d] ? -1 : co[d] > g[d] ? 1 : 0;
		if (cmp <= 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (i = lo; i-- > 0;) {
		if (contains(m, e, &ch[i], g))
			return i;
	}
	return CKPT_NONE;
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/* Chunk c spans the box's whole extent in dim d, and g starts it. */
static bool full_dim(const struct ckpt_box *b, const uint64_t *co,
		     const uint64_t *cs, const uint64_t *g, unsigned d)
{
	return g[d] == b->off[d] && co[d] <= b->off[d] &&
	       co[d] + cs[d] >= b->off[d] + b->size[d];
}

/*
 * The longest stretch of whole view elements from g (rem of them left)
 * that lies in strided chunk c, as a box of c: dims d > dd whole (the
 * box's extent), dim dd from g[dd] for k elements, dims before dd just
 * g.  dd is the outermost dim the stretch can vary in; if less than one
 * step of it is left, the next dim in.  Example: box [0,0]+[4,6] inside
 * c, g = [1,2], rem = 15: row 1 cols 2-5 (dd = 1, k = 4), then from
 * [2,0] with rem 11: rows 2 (dd = 0, k = 1, 6 elements), then [3,0]+5.
 */
static uint64_t strided_box(struct ckpt_planner *p, const struct ckpt_chunk *c,
			    const uint64_t *co, const uint64_t *cs,
			    const uint64_t *g, uint64_t rem)
{
	const struct ckpt_entry *e = p->e;
	const struct ckpt_box *b = p->box;
	const uint64_t *st = ckpt_chunk_strides(p->m, c);
	struct ckpt_gather *gt = &p->gather;
	uint64_t inner = 1, k, dst = 1;
	unsigned n = e->ndim, dd = n - 1, d;

	while (dd > 0 && full_dim(b, co, cs, g, dd)) {
		inner *= b->size[dd];
		dd--;
	}
	for (;;) {
		k = min_u64(min_u64(co[dd] + cs[dd], b->off[dd] + b->size[dd]) -
			    g[dd], rem / inner);
		if (k)
			break;
		dd++;
		inner /= b->size[dd];
	}
	gt->ndim = n;
	gt->base = 0;
	gt->dbase = 0;
	for (d = n; d-- > 0;) {
		gt->size[d] = d < dd ? 1 : d == dd ? k : b->size[d];
		gt->stride[d] = st[d];
		gt->dstride[d] = dst;
		dst *= gt->size[d];
		gt->base += (g[d] - co[d]) * st[d];
	}
	return k * inner;
}

int ckpt_planner_next(struct ckpt_planner *p, struct ckpt_run *run)
{
	const struct ckpt_meta *m = p->m;
	const struct ckpt_entry *e = p->e;
	const struct ckpt_box *b = p->box;
	uint64_t g[CKPT_MAX_DIMS], el, skip, isz, L, mult, lin, stride, bytes;
	const struct ckpt_chunk *c;
	const uint64_t *co, *cs;
	uint32_t k;
	int d;

	if (p->pos >= p->end)
		return 0;
	if (e->kind == CKPT_KIND_BYTES) {
		c = &m->chunks[e->chunk_first];
		run->chunk = e->chunk_first;
		run->file = c->file;
		run->foff = c->foff + p->pos;
		run->len = p->end - p->pos;
		run->gather = false;
		p->pos = p->end;
		return 1;
	}
	isz = ckpt_dtype_size(e->dtype);
	el = p->pos / isz;
	skip = p->pos % isz;
	for (d = (int)e->ndim - 1; d >= 0; d--) {
		g[d] = b->off[d] + el % b->size[d];
		el /= b->size[d];
	}
	k = find_chunk(p, g);
	if (k == CKPT_NONE)
		return -EIO;
	p->hint = k;
	/* Its readers located it first (ckpt_meta_locate()); a pending
	 * record's position is a placeholder, never bytes to serve. */
	if (!ckpt_chunk_is_located(m, e->chunk_first + k))
		return -EIO;
	c = &m->chunks[e->chunk_first + k];
	co = ckpt_chunk_offsets(m, c);
	cs = ckpt_chunk_sizes(m, e, c);

	if (c->strides_at != CKPT_NONE) {
		/* A strided (non-row-major) chunk: only a stretch of the
		 * innermost dim with stride 1 is contiguous. */
		const uint64_t *st = ckpt_chunk_strides(m, c);

		if (p->boxes && !skip && p->end - p->pos >= isz) {
			L = strided_box(p, c, co, cs, g,
					(p->end - p->pos) / isz);
			run->chunk = e->chunk_first + k;
			run->file = c->file;
			run->foff = c->foff;
			run->len = L * isz;
			run->gather = true;
			p->pos += run->len;
			return 1;
		}
		d = (int)e->ndim - 1;
		L = st[d] == 1 ? min_u64(co[d] + cs[d],
					 b->off[d] + b->size[d]) - g[d] : 1;
		lin = 0;
		for (d = 0; d < (int)e->ndim; d++)
			lin += (g[d] - co[d]) * st[d];
		goto emit;
	}
	L = 1;
	mult = 1;
	for (d = (int)e->ndim - 1; d >= 0; d--) {
		L = (min_u64(co[d] + cs[d], b->off[d] + b->size[d]) - g[d]) *
		    mult;
		if (d == 0 || g[d] != b->off[d] || co[d] != b->off[d] ||
		    cs[d] != b->size[d])
			break;
		mult *= b->size[d];
	}
	lin = 0;
	stride = 1;
	for (d = (int)e->ndim - 1; d >= 0; d--) {
		lin += (g[d] - co[d]) * stride;
		stride *= cs[d];
	}
emit:
	bytes = min_u64(L * isz - skip, p->end - p->pos);
	run->chunk = e->chunk_first + k;
	run->file = c->file;
	run->gather = false;
	run->foff = c->foff + lin * isz + skip;
	run->len = bytes;
	p->pos += bytes;
	return 1;
}
