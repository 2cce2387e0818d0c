/* SPDX-License-Identifier: MIT */
/* Unit tests of the resharding rule (core/reshard.c), without a mount. */
#include <errno.h>
#include <stdlib.h>

#include "model/meta.h"
#include "plan/reshard.h"
#include "common/strides.h"
#include "metabuild.h"
#include "testhelp.h"

/* Parse a one-tensor meta of this shape saved whole. */
static struct ckpt_meta *whole(const uint64_t *shape, unsigned ndim)
{
	struct mb_chunk ch = { { 0 }, { 0 } };
	struct ckpt_meta *m = NULL;
	msgpack_sbuffer sb;
	char err[256];
	unsigned d;

	for (d = 0; d < ndim; d++)
		ch.size[d] = shape[d];
	msgpack_sbuffer_init(&sb);
	mb_tensor_meta(&sb, shape, ndim, &ch, 1, "float32", 4);
	if (ckpt_meta_parse((const uint8_t *)sb.data, sb.size, "t.meta", &m,
			    err, sizeof(err)))
		fprintf(stderr, "  parse: %s\n", err);
	msgpack_sbuffer_destroy(&sb);
	return m;
}

/* Bytes of rank's view of the (float32) tensor of m. */
static uint64_t view_bytes(const struct ckpt_meta *m, uint32_t world,
			   uint32_t rank)
{
	struct ckpt_box b;

	ckpt_reshard_box(m, &m->entries[0], world, rank, &b);
	return ckpt_box_numel(&b) * 4;
}

/* Rows each rank of world sees for a tensor [d0, 2]. */
static void rows_of(uint64_t d0, uint32_t world, uint64_t *rows)
{
	uint64_t shape[2] = { d0, 2 };
	struct ckpt_meta *m = whole(shape, 2);
	struct ckpt_box b;
	uint32_t r;

	CHECK(m != NULL);
	if (!m)
		return;
	for (r = 0; r < world; r++) {
		ckpt_reshard_box(m, &m->entries[0], world, r, &b);
		rows[r] = b.size[0];
		CHECK(b.size[1] == 2 && b.off[1] == 0);
	}
	ckpt_meta_free(m);
}

static void test_rows_per_rank(void)
{
	uint64_t rows[16];

	rows_of(10, 4, rows);	/* cs = 3: 3,3,3,1 */
	CHECK(rows[0] == 3 && rows[1] == 3 && rows[2] == 3 && rows[3] == 1);
	rows_of(5, 4, rows);	/* cs = 2: 2,2,1,0 */
	CHECK(rows[0] == 2 && rows[1] == 2 && rows[2] == 1 && rows[3] == 0);
	rows_of(3, 8, rows);	/* d0 < W: 1,1,1,0,0,0,0,0 */
	CHECK(rows[0] == 1 && rows[2] == 1 && rows[3] == 0 && rows[7] == 0);
	rows_of(6, 4, rows);	/* cs = 2: 2,2,2,0 (torch.chunk gives 3 parts) */
	CHECK(rows[0] == 2 && rows[2] == 2 && rows[3] == 0);
	rows_of(7, 1, rows);
	CHECK(rows[0] == 7);
}

static void test_offsets(void)
{
	uint64_t shape[1] = { 10 };
	struct ckpt_meta *m = whole(shape, 1);
	struct ckpt_box b;

	CHECK(m != NULL);
	if (!m)
		return;
	ckpt_reshard_box(m, &m->entries[0], 4, 3, &b);
	CHECK(b.off[0] == 9 && b.size[0] == 1);
	ckpt_reshard_box(m, &m->entries[0], 4, 1, &b);
	CHECK(b.off[0] == 3 && b.size[0] == 3);
	CHECK(view_bytes(m, 4, 1) == 12);
	ckpt_meta_free(m);
}

static void test_one_element_whole(void)
{
	uint64_t s0[1] = { 0 }, s1[1] = { 1 }, s11[3] = { 1, 1, 1 };
	struct ckpt_meta *m;
	struct ckpt_box b;

	m = whole(s0, 0);	/* 0-d */
	CHECK(m != NULL);
	if (m) {
		CHECK(view_bytes(m, 8, 7) == 4);
		ckpt_meta_free(m);
	}
	m = whole(s1, 1);
	CHECK(m != NULL);
	if (m) {
		ckpt_reshard_box(m, &m->entries[0], 8, 5, &b);
		CHECK(b.off[0] == 0 && b.size[0] == 1);
		ckpt_meta_free(m);
	}
	m = whole(s11, 3);
	CHECK(m != NULL);
	if (m) {
		CHECK(view_bytes(m, 3, 2) == 4);
		ckpt_meta_free(m);
	}
}

static void test_empty(void)
{
	uint64_t a[2] = { 0, 4 }, b[2] = { 5, 0 };
	struct ckpt_meta *m;

	m = whole(a, 2);
	CHECK(m != NULL);
	if (m) {
		CHECK(view_bytes(m, 2, 0) == 0);
		CHECK(view_bytes(m, 2, 1) == 0);
		ckpt_meta_free(m);
	}
	m = whole(b, 2);
	CHECK(m != NULL);
	if (m) {
		CHECK(view_bytes(m, 2, 0) == 0);
		ckpt_meta_free(m);
	}
}

static void test_huge_world(void)
{
	uint64_t s[1] = { 3 };
	struct ckpt_meta *m = whole(s, 1);
	struct ckpt_box b;

	CHECK(m != NULL);
	if (!m)
		return;
	ckpt_reshard_box(m, &m->entries[0], UINT32_MAX, UINT32_MAX - 1, &b);
	CHECK(b.size[0] == 0);
	ckpt_reshard_box(m, &m->entries[0], UINT32_MAX, 2, &b);
	CHECK(b.off[0] == 2 && b.size[0] == 1);
	ckpt_meta_free(m);
}

/* Strided layouts (torch tensors saved non-contiguous). */
static void test_strides(void)
{
	const uint64_t sz[2] = { 9, 7 }, t[2] = { 1, 9 }, c[2] = { 7, 1 };
	const uint64_t one[3] = { 4, 1, 3 }, odd[3] = { 3, 99, 1 };
	const uint64_t empty[2] = { 0, 5 }, huge[2] = { UINT64_MAX, 3 };
	uint64_t n = 7;

	CHECK(ckpt_strided_span(sz, t, 2, &n) == 0 && n == 63);
	CHECK(ckpt_strided_span(sz, c, 2, &n) == 0 && n == 63);
	CHECK(ckpt_strides_row_major(sz, c, 2));
	CHECK(!ckpt_strides_row_major(sz, t, 2));
	/* a size-1 dim may have any stride */
	CHECK(ckpt_strides_row_major(one, odd, 3));
	CHECK(ckpt_strided_span(empty, t, 2, &n) == 0 && n == 0);
	CHECK(ckpt_strides_row_major(empty, t, 2));
	CHECK(ckpt_strided_span(huge, c, 2, &n) == -EOVERFLOW);
	CHECK(ckpt_strided_span(NULL, NULL, 0, &n) == 0 && n == 1);
}

int main(void)
{
	TEST(test_rows_per_rank);
	TEST(test_offsets);
	TEST(test_one_element_whole);
	TEST(test_empty);
	TEST(test_huge_world);
	TEST(test_strides);
	return TEST_REPORT();
}
