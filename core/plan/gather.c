/* SPDX-License-Identifier: MIT */
/*
 * Gather planning (see gather.h).  Example: a transposed float32 record
 * of a [2048, 2048] tensor (strides [1, 2048]), rows 0-127 of the view
 * asked for (1 MiB): read whole, their span is the record (16 MiB, 16x).
 * Split along dim 1 (stride 2048): a group of g columns spans
 * (g-1)*2048 + 128 elements for g*128 needed, within 2x only for g = 1,
 * so each column's 128 elements (512 bytes, contiguous in the record) is
 * one read, 2048 of them side by side in the stage (1 MiB), and one
 * tiled copy puts stage[j][i] at dst[i][j].  Rows 0-1023 asked for:
 * groups of 2048 columns span 2x their need, so one read of the record.
 */
#include "plan/gather.h"

struct batcher {
	uint64_t budget;	/* elements */
	int (*fn)(void *ctx, const struct ckpt_gather_batch *b);
	void *ctx;
	struct ckpt_gather_ext *ext;	/* CKPT_GATHER_MAX_EXT */
};

uint64_t ckpt_gather_span(const struct ckpt_gather *g)
{
	uint64_t span = 1;
	unsigned d;

	for (d = 0; d < g->ndim; d++) {
		if (g->size[d] == 0)
			return 0;
		span += (g->size[d] - 1) * g->stride[d];
	}
	return span;
}

static uint64_t numel(const struct ckpt_gather *g)
{
	uint64_t n = 1;
	unsigned d;

	for (d = 0; d < g->ndim; d++)
		n *= g->size[d];
	return n;
}

static int fits(const struct batcher *b, uint64_t span, uint64_t need)
{
	return span <= 2 * need && span <= b->budget;
}

/* The whole of g, read as one span. */
static int one_read(struct batcher *b, const struct ckpt_gather *g,
		    uint64_t span)
{
	struct ckpt_gather_batch bt = { .ext = b->ext, .next = 1,
					.stage = span, .copy = *g };

	b->ext[0].at = g->base;
	b->ext[0].count = span;
	bt.copy.base = 0;
	return b->fn(b->ctx, &bt);
}

static int plan(struct batcher *b, const struct ckpt_gather *g)
{
	uint64_t span = ckpt_gather_span(g), need = numel(g);
	uint64_t span_r, need_r, sd, n, k, q, c;
	struct ckpt_gather r;
	unsigned d, dd;
	int rc;

	if (fits(b, span, need))
		return one_read(b, g, span);
	/* Split along the dim of largest stride (not of size 1: then the
	 * whole box would have fit, being a single element at most). */
	dd = g->ndim;
	for (d = 0; d < g->ndim; d++)
		if (g->size[d] > 1 && (dd == g->ndim ||
				       g->stride[d] > g->stride[dd]))
			dd = d;
	r = *g;
	r.size[dd] = 1;
	span_r = ckpt_gather_span(&r);
	need_r = need / g->size[dd];
	sd = g->stride[dd];
	n = g->size[dd];
	if (!fits(b, span_r, need_r)) {
		for (k = 0; k < n; k++) {	/* each slice, recursively */
			r.base = g->base + k * sd;
			r.dbase = g->dbase + k * g->dstride[dd];
			rc = plan(b, &r);
			if (rc)
				return rc;
		}
		return 0;
	}
	/* q: most slices one read can span within 2x and the budget. */
	q = n;
	if (sd > 2 * need_r && (sd - span_r) / (sd - 2 * need_r) < q)
		q = (sd - span_r) / (sd - 2 * need_r);
	if (sd && 1 + (b->budget - span_r) / sd < q)
		q = 1 + (b->budget - span_r) / sd;
	if (q >= 2) {
		for (k = 0; k < n; k += q) {	/* groups, one read each */
			r = *g;
			r.size[dd] = n - k < q ? n - k : q;
			r.base = g->base + k * sd;
			r.dbase = g->dbase + k * g->dstride[dd];
			rc = one_read(b, &r, ckpt_gather_span(&r));
			if (rc)
				return rc;
		}
		return 0;
	}
	/* Slices read one by one, side by side in the stage. */
	q = b->budget / span_r;
	if (q > CKPT_GATHER_MAX_EXT)
		q = CKPT_GATHER_MAX_EXT;
	for (k = 0; k < n; k += q) {
		struct ckpt_gather_batch bt = { .ext = b->ext, .copy = *g };

		bt.next = (uint32_t)(n - k < q ? n - k : q);
		for (c = 0; c < bt.next; c++) {
			b->ext[c].at = g->base + (k + c) * sd;
			b->ext[c].count = span_r;
		}
		bt.stage = bt.next * span_r;
		bt.copy.size[dd] = bt.next;
		bt.copy.stride[dd] = span_r;
		bt.copy.base = 0;
		bt.copy.dbase = g->dbase + k * g->dstride[dd];
		rc = b->fn(b->ctx, &bt);
		if (rc)
			return rc;
	}
	return 0;
}

int ckpt_gather_plan(const struct ckpt_gather *g, size_t isz,
		     uint64_t budget, struct ckpt_gather_ext *ext,
		     int (*fn)(void *ctx, const struct ckpt_gather_batch *b),
		     void *ctx)
{
	struct batcher b = { .budget = budget / isz, .fn = fn,
			     .ctx = ctx, .ext = ext };

	if (ckpt_gather_span(g) == 0)
		return 0;
	if (!b.budget)
		b.budget = 1;
	return plan(&b, g);
}
