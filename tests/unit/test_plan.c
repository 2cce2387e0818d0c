/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the read planner (core/plan.c): runs gathered from an
 * in-memory data file must equal a naive element-by-element resharding,
 * for several tilings, worlds, ranks and unaligned byte ranges; and run
 * counts must be what the geometry implies (no per-element runs).
 */
#include <stdlib.h>

#include "model/meta.h"
#include "plan/plan.h"
#include "plan/reshard.h"
#include "metabuild.h"
#include "testhelp.h"

struct fixture {
	struct ckpt_meta *m;
	uint8_t *file;		/* the "data" file's bytes */
	size_t file_len;
};

/* Element value = its global linear index, as uint32. */
static int setup(struct fixture *f, const uint64_t *shape, unsigned ndim,
		 const struct mb_chunk *ch, unsigned nch)
{
	msgpack_sbuffer sb;
	char err[256];
	uint64_t total = 0, off = 0;
	unsigned i, d;

	msgpack_sbuffer_init(&sb);
	mb_tensor_meta(&sb, shape, ndim, ch, nch, "int32", 4);
	if (ckpt_meta_parse((const uint8_t *)sb.data, sb.size, "t.meta",
			    &f->m, err, sizeof(err))) {
		fprintf(stderr, "  parse: %s\n", err);
		msgpack_sbuffer_destroy(&sb);
		return -1;
	}
	msgpack_sbuffer_destroy(&sb);
	for (i = 0; i < nch; i++) {
		uint64_t n = 1;

		for (d = 0; d < ndim; d++)
			n *= ch[i].size[d];
		total += n;
	}
	f->file_len = total * 4;
	f->file = malloc(f->file_len ? f->file_len : 1);
	/* Write each chunk (in the given order) in C order. */
	for (i = 0; i < nch; i++) {
		uint64_t n = 1, k, idx[4] = { 0 }, g;

		for (d = 0; d < ndim; d++)
			n *= ch[i].size[d];
		for (k = 0; k < n; k++) {
			uint64_t rem = k;
			uint32_t v;

			for (d = ndim; d-- > 0;) {
				idx[d] = rem % ch[i].size[d];
				rem /= ch[i].size[d];
			}
			g = 0;
			for (d = 0; d < ndim; d++)
				g = g * shape[d] + ch[i].off[d] + idx[d];
			v = (uint32_t)g;
			memcpy(f->file + off, &v, 4);
			off += 4;
		}
	}
	return 0;
}

static void teardown(struct fixture *f)
{
	ckpt_meta_free(f->m);
	free(f->file);
}

/* The view's bytes computed element by element. */
static uint8_t *naive_view(const struct ckpt_box *b, const uint64_t *shape,
			   size_t *len)
{
	uint64_t n = ckpt_box_numel(b), k;
	uint8_t *out = malloc(n * 4 + 1);
	unsigned d;

	for (k = 0; k < n; k++) {
		uint64_t rem = k, g = 0, c[CKPT_MAX_DIMS];
		uint32_t v;

		for (d = b->ndim; d-- > 0;) {
			c[d] = rem % b->size[d];
			rem /= b->size[d];
		}
		for (d = 0; d < b->ndim; d++)
			g = g * shape[d] + b->off[d] + c[d];
		v = (uint32_t)g;
		memcpy(out + k * 4, &v, 4);
	}
	*len = n * 4;
	return out;
}

/* Gather [off, off+len) through the planner; returns runs used. */
static long gather(struct fixture *f, const struct ckpt_box *b, uint64_t off,
		   uint64_t len, uint8_t *out, uint64_t *got)
{
	const struct ckpt_entry *e = &f->m->entries[0];
	struct ckpt_planner p;
	struct ckpt_run r;
	long runs = 0;
	int rc;

	*got = 0;
	ckpt_planner_init(&p, f->m, e, b, off, len);
	while ((rc = ckpt_planner_next(&p, &r)) > 0) {
		CHECK(r.foff + r.len <= f->file_len);
		if (r.foff + r.len > f->file_len)
			return -1;
		memcpy(out + *got, f->file + r.foff, r.len);
		*got += r.len;
		runs++;
	}
	CHECK(rc == 0);
	return runs;
}

static void check_all(const uint64_t *shape, unsigned ndim,
		       const struct mb_chunk *ch, unsigned nch)
{
	static const uint32_t worlds[] = { 1, 2, 3, 4, 7, 16 };
	struct fixture f;
	unsigned wi;

	if (setup(&f, shape, ndim, ch, nch)) {
		CHECK(0);
		return;
	}
	for (wi = 0; wi < sizeof(worlds) / sizeof(worlds[0]); wi++) {
		uint32_t w = worlds[wi], r;

		for (r = 0; r < w; r++) {
			struct ckpt_box b;
			size_t vlen;
			uint8_t *want, *got;
			uint64_t n, a, l;

			ckpt_reshard_box(f.m, &f.m->entries[0], w, r, &b);
			want = naive_view(&b, shape, &vlen);
			got = malloc(vlen + 64);
			/* Whole file, then unaligned sub-ranges. */
			CHECK(gather(&f, &b, 0, vlen + 100, got, &n) >= 0);
			CHECK(n == vlen && memcmp(got, want, vlen) == 0);
			for (a = 0; a < vlen; a += 7) {
				l = (a * 13) % (vlen - a + 3);
				gather(&f, &b, a, l, got, &n);
				CHECK(n == (l < vlen - a ? l : vlen - a));
				CHECK(memcmp(got, want + a, n) == 0);
			}
			gather(&f, &b, vlen, 10, got, &n);
			CHECK(n == 0);
			free(want);
			free(got);
		}
	}
	teardown(&f);
}

static void test_dim0_uneven(void)
{
	uint64_t shape[2] = { 10, 3 };
	struct mb_chunk ch[3] = {
		{ { 4, 0 }, { 5, 3 } }, { { 0, 0 }, { 4, 3 } },
		{ { 9, 0 }, { 1, 3 } },
	};

	check_all(shape, 2, ch, 3);
}

static void test_dim1(void)
{
	uint64_t shape[2] = { 6, 11 };
	struct mb_chunk ch[4] = {
		{ { 0, 0 }, { 6, 3 } }, { { 0, 3 }, { 6, 3 } },
		{ { 0, 6 }, { 6, 3 } }, { { 0, 9 }, { 6, 2 } },
	};

	check_all(shape, 2, ch, 4);
}

static void test_grid_and_brick(void)
{
	uint64_t shape[2] = { 5, 7 };
	struct mb_chunk grid[4] = {
		{ { 0, 0 }, { 2, 4 } }, { { 0, 4 }, { 2, 3 } },
		{ { 2, 0 }, { 3, 4 } }, { { 2, 4 }, { 3, 3 } },
	};
	struct mb_chunk brick[5] = {	/* bands split differently */
		{ { 0, 0 }, { 2, 1 } }, { { 0, 1 }, { 2, 6 } },
		{ { 2, 0 }, { 3, 5 } }, { { 2, 5 }, { 1, 2 } },
		{ { 3, 5 }, { 2, 2 } },
	};

	check_all(shape, 2, grid, 4);
	check_all(shape, 2, brick, 5);
}

static void test_3d_dim2(void)
{
	uint64_t shape[3] = { 4, 3, 5 };
	struct mb_chunk ch[2] = {
		{ { 0, 0, 0 }, { 4, 3, 2 } }, { { 0, 0, 2 }, { 4, 3, 3 } },
	};

	check_all(shape, 3, ch, 2);
}

static void test_run_counts(void)
{
	uint64_t shape[2] = { 8, 6 };
	struct mb_chunk rows[2] = { { { 0, 0 }, { 4, 6 } },
				    { { 4, 0 }, { 4, 6 } } };
	struct mb_chunk cols[2] = { { { 0, 0 }, { 8, 3 } },
				    { { 0, 3 }, { 8, 3 } } };
	struct fixture f;
	struct ckpt_box b;
	uint8_t buf[8 * 6 * 4];
	uint64_t n;

	/* Dim-0 saved, W=2: rank 1's rows 4-7 are one chunk: one run. */
	if (setup(&f, shape, 2, rows, 2) == 0) {
		ckpt_reshard_box(f.m, &f.m->entries[0], 2, 1, &b);
		CHECK(gather(&f, &b, 0, sizeof(buf), buf, &n) == 1);
		/* W=4, rank 1: rows 2-3, inside chunk 0. */
		ckpt_reshard_box(f.m, &f.m->entries[0], 4, 1, &b);
		CHECK(gather(&f, &b, 0, sizeof(buf), buf, &n) == 1);
		/* W=1: two chunks, two runs. */
		ckpt_reshard_box(f.m, &f.m->entries[0], 1, 0, &b);
		CHECK(gather(&f, &b, 0, sizeof(buf), buf, &n) == 2);
		teardown(&f);
	}
	/* Dim-1 saved, W=4, rank 1 (rows 2-3): two runs per row. */
	if (setup(&f, shape, 2, cols, 2) == 0) {
		ckpt_reshard_box(f.m, &f.m->entries[0], 4, 1, &b);
		CHECK(gather(&f, &b, 0, sizeof(buf), buf, &n) == 4);
		teardown(&f);
	}
}

int main(void)
{
	TEST(test_dim0_uneven);
	TEST(test_dim1);
	TEST(test_grid_and_brick);
	TEST(test_3d_dim2);
	TEST(test_run_counts);
	return TEST_REPORT();
}
