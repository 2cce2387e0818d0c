/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of strided gathers: the block planner (core/plan/gather.c)
 * and the tiled strided copy (core/common/strides.c), against a naive
 * element-by-element copy, for random shapes, element sizes, layouts
 * (permutations, gaps between rows, broadcast and overlapping strides),
 * destinations and staging budgets.  Each batch must fit its budget and
 * stage at most twice the elements it delivers.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/strides.h"
#include "plan/gather.h"
#include "testhelp.h"

/* Byte k of element e of the record: distinct for every element. */
static uint8_t rec_byte(uint64_t e, size_t k)
{
	return (uint8_t)((e * 2654435761u >> (8 * (k % 4))) + k * 31);
}

/* The naive copy: g's elements one by one from rec into dst. */
static void naive(const struct ckpt_gather *g, const uint8_t *rec,
		  uint8_t *dst, size_t isz)
{
	uint64_t idx[CKPT_MAX_DIMS] = { 0 }, n = 1, k, s, d;
	unsigned i;

	for (i = 0; i < g->ndim; i++)
		n *= g->size[i];
	for (k = 0; k < n; k++) {
		s = g->base;
		d = g->dbase;
		for (i = 0; i < g->ndim; i++) {
			s += idx[i] * g->stride[i];
			d += idx[i] * g->dstride[i];
		}
		memcpy(dst + d * isz, rec + s * isz, isz);
		for (i = g->ndim; i-- > 0;) {
			if (++idx[i] < g->size[i])
				break;
			idx[i] = 0;
		}
	}
}

struct sim {
	const uint8_t *rec;
	uint8_t *dst;
	uint8_t *stage;
	size_t isz;
	uint64_t budget;	/* bytes */
	uint64_t staged;	/* elements, all batches */
	uint64_t delivered;	/* elements, all batches */
	int bad;
};

static int sim_batch(void *ctx, const struct ckpt_gather_batch *b)
{
	struct sim *s = ctx;
	uint64_t at = 0, n = 1;
	uint32_t i;
	unsigned d;

	for (d = 0; d < b->copy.ndim; d++)
		n *= b->copy.size[d];
	if (b->stage * s->isz > s->budget && b->stage > 1)
		s->bad = 1;	/* over the budget */
	if (b->stage > 2 * n)
		s->bad = 1;	/* more than 2x what it delivers */
	if (b->next == 0 || b->next > CKPT_GATHER_MAX_EXT)
		s->bad = 1;
	for (i = 0; i < b->next; i++) {
		memcpy(s->stage + at * s->isz, s->rec + b->ext[i].at * s->isz,
		       b->ext[i].count * s->isz);
		at += b->ext[i].count;
	}
	if (at != b->stage)
		s->bad = 1;
	s->staged += b->stage;
	s->delivered += n;
	ckpt_strided_copy(s->dst + b->copy.dbase * s->isz, b->copy.dstride,
			  s->stage + b->copy.base * s->isz, b->copy.stride,
			  b->copy.size, b->copy.ndim, s->isz);
	return 0;
}

static uint64_t rnd(uint64_t n)
{
	return (uint64_t)rand() % n;
}

/* A random layout for size: a permutation of row-major strides, with
 * gaps, and now and then a broadcast (0) or overlapping stride. */
static void random_layout(struct ckpt_gather *g)
{
	unsigned perm[CKPT_MAX_DIMS], i, j, t;
	uint64_t st = 1 + (rnd(4) == 0 ? rnd(3) : 0);

	for (i = 0; i < g->ndim; i++)
		perm[i] = i;
	for (i = g->ndim; i > 1; i--) {
		j = (unsigned)rnd(i);
		t = perm[i - 1];
		perm[i - 1] = perm[j];
		perm[j] = t;
	}
	for (i = g->ndim; i-- > 0;) {	/* perm[ndim-1] is innermost */
		g->stride[perm[i]] = st;
		st *= g->size[perm[i]];
		if (rnd(3) == 0)
			st += rnd(5);	/* a gap after each row */
	}
	if (rnd(8) == 0)
		g->stride[rnd(g->ndim)] = 0;
	if (rnd(8) == 0)
		g->stride[rnd(g->ndim)] = 1;
}

static void one_trial(unsigned ndim, size_t isz, unsigned maxsz)
{
	struct ckpt_gather g = { .ndim = ndim };
	struct sim s = { .isz = isz };
	uint64_t span, need = 1, dn, k, dstr = 1;
	uint64_t pad[CKPT_MAX_DIMS];
	uint8_t *want;
	unsigned d;
	int rc;

	for (d = 0; d < ndim; d++) {
		g.size[d] = 1 + rnd(maxsz);
		need *= g.size[d];
	}
	random_layout(&g);
	g.base = rnd(7);
	/* The destination: row-major, sometimes inside a larger box. */
	for (d = ndim; d-- > 0;) {
		pad[d] = rnd(3) == 0 ? rnd(3) : 0;
		g.dstride[d] = dstr;
		dstr *= g.size[d] + pad[d];
	}
	dn = dstr;
	g.dbase = rnd(3);
	span = g.base + ckpt_gather_span(&g);
	s.rec = malloc(span * isz);
	s.dst = calloc(dn + g.dbase, isz);
	want = calloc(dn + g.dbase, isz);
	s.stage = malloc(2 * need * isz + isz);
	CHECK(s.rec && s.dst && want && s.stage);
	if (!s.rec || !s.dst || !want || !s.stage)
		goto out;
	for (k = 0; k < span * isz; k++)
		((uint8_t *)s.rec)[k] = rec_byte(k / isz, k % isz);
	s.budget = rnd(2) ? isz * (1 + rnd(2 * need)) : (uint64_t)8 << 20;
	{
		struct ckpt_gather_ext *ext = malloc(CKPT_GATHER_MAX_EXT *
						     sizeof(*ext));

		CHECK(ext != NULL);
		if (!ext)
			goto out;
		rc = ckpt_gather_plan(&g, isz, s.budget, ext, sim_batch, &s);
		free(ext);
	}
	naive(&g, s.rec, want, isz);
	CHECK(rc == 0);
	CHECK(!s.bad);
	CHECK(s.delivered == need);
	CHECK(s.staged <= 2 * need);
	if (memcmp(s.dst, want, (dn + g.dbase) * isz)) {
		CHECK(!"gathered bytes differ");
		fprintf(stderr, "  ndim %u isz %zu sizes", ndim, isz);
		for (d = 0; d < ndim; d++)
			fprintf(stderr, " %llu/%llu",
				(unsigned long long)g.size[d],
				(unsigned long long)g.stride[d]);
		fprintf(stderr, " budget %llu\n",
			(unsigned long long)s.budget);
	}
out:
	free((void *)s.rec);
	free(s.dst);
	free(s.stage);
	free(want);
}

/* Random gathers of 1-5 dims (sizes up to 8; 1-2 dims up to 64),
 * element sizes 1, 2, 3, 4, 8, 16. */
static void test_random_gathers(void)
{
	static const size_t iszs[] = { 1, 2, 3, 4, 8, 16 };
	unsigned t;

	srand(12345);
	for (t = 0; t < 1500; t++) {
		if (t % 8 == 0)
			one_trial(1 + (unsigned)rnd(2), iszs[rnd(6)], 64);
		else
			one_trial(1 + (unsigned)rnd(5), iszs[rnd(6)], 8);
	}
}

/* Transposes big enough for the register-blocked kernels and their
 * ragged edges, each element size, through the planner with the
 * engine's budget and a small one. */
static void test_transposes(void)
{
	static const size_t iszs[] = { 1, 2, 4, 8, 16 };
	static const uint64_t dims[][2] = {
		{ 64, 64 }, { 67, 129 }, { 1, 300 }, { 300, 1 }, { 33, 7 },
		{ 256, 96 }, { 1000, 3 },
	};
	unsigned i, k;

	for (i = 0; i < sizeof(dims) / sizeof(dims[0]); i++) {
		for (k = 0; k < sizeof(iszs) / sizeof(iszs[0]); k++) {
			struct ckpt_gather g = { .ndim = 2 };
			struct sim s = { .isz = iszs[k] };
			struct ckpt_gather_ext *ext;
			uint64_t n = dims[i][0] * dims[i][1], b;
			uint8_t *want;

			g.size[0] = dims[i][0];
			g.size[1] = dims[i][1];
			g.stride[0] = 1;
			g.stride[1] = dims[i][0];
			g.dstride[0] = dims[i][1];
			g.dstride[1] = 1;
			for (b = 0; b < 2; b++) {
				uint64_t x;

				s.rec = malloc(n * s.isz);
				s.dst = calloc(n, s.isz);
				s.stage = malloc(2 * n * s.isz);
				want = calloc(n, s.isz);
				ext = malloc(CKPT_GATHER_MAX_EXT * sizeof(*ext));
				CHECK(s.rec && s.dst && s.stage && want && ext);
				if (!s.rec || !s.dst || !s.stage || !want ||
				    !ext)
					return;
				for (x = 0; x < n * s.isz; x++)
					((uint8_t *)s.rec)[x] =
						rec_byte(x / s.isz, x % s.isz);
				s.budget = b ? s.isz * dims[i][0] * 3 :
					       (uint64_t)8 << 20;
				s.staged = s.delivered = 0;
				CHECK(ckpt_gather_plan(&g, s.isz, s.budget, ext,
						       sim_batch, &s) == 0);
				naive(&g, s.rec, want, s.isz);
				CHECK(!s.bad && s.delivered == n);
				CHECK(s.staged == n);	/* nothing read twice */
				CHECK(memcmp(s.dst, want, n * s.isz) == 0);
				free((void *)s.rec);
				free(s.dst);
				free(s.stage);
				free(want);
				free(ext);
			}
		}
	}
}

/* Rows 0-127 of a transposed 2048 x 2048 (the planner's example): one
 * read per column, side by side; rows 0-1023: one read of the record. */
static int count_batch(void *ctx, const struct ckpt_gather_batch *b)
{
	uint64_t *c = ctx;

	c[0]++;
	c[1] += b->next;
	c[2] += b->stage;
	return 0;
}

static void test_read_counts(void)
{
	struct ckpt_gather g = { .ndim = 2, .size = { 128, 2048 },
				 .stride = { 1, 2048 },
				 .dstride = { 2048, 1 } };
	struct ckpt_gather_ext *ext = malloc(CKPT_GATHER_MAX_EXT *
					     sizeof(*ext));
	uint64_t c[3] = { 0 };

	CHECK(ext != NULL);
	if (!ext)
		return;
	CHECK(ckpt_gather_plan(&g, 4, 8 << 20, ext, count_batch, c) == 0);
	CHECK(c[0] == 2 && c[1] == 2048 && c[2] == 128 * 2048);
	memset(c, 0, sizeof(c));
	g.size[0] = 1024;
	CHECK(ckpt_gather_plan(&g, 4, 16 << 20, ext, count_batch, c) == 0);
	CHECK(c[0] == 1 && c[1] == 1 && c[2] <= 2 * 1024 * 2048);
	free(ext);
}

int main(void)
{
	TEST(test_random_gathers);
	TEST(test_transposes);
	TEST(test_read_counts);
	return TEST_REPORT();
}
