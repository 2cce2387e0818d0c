/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of metadata parsing and validation (core/meta_parse.c,
 * core/tiling.c): good images parse; every cut of a good image and
 * hostile numbers are refused with a message, never a crash.
 */
#include <errno.h>
#include <stdlib.h>

#include "model/meta.h"
#include "metabuild.h"
#include "testhelp.h"

static int parse(const msgpack_sbuffer *sb, char *err, size_t errlen)
{
	struct ckpt_meta *m = NULL;
	int rc;

	rc = ckpt_meta_parse((const uint8_t *)sb->data, sb->size, "x/.metadata",
			     &m, err, errlen);
	ckpt_meta_free(m);
	return rc;
}

static void test_good_and_every_cut(void)
{
	uint64_t shape[2] = { 4, 6 };
	struct mb_chunk ch[2] = { { { 0, 0 }, { 4, 3 } },
				  { { 0, 3 }, { 4, 3 } } };
	msgpack_sbuffer sb;
	char err[512];
	size_t full, cut;

	msgpack_sbuffer_init(&sb);
	mb_tensor_meta(&sb, shape, 2, ch, 2, "bfloat16", 2);
	CHECK(parse(&sb, err, sizeof(err)) == 0);
	full = sb.size;
	for (cut = 0; cut < full; cut++) {
		sb.size = cut;
		err[0] = '\0';
		CHECK(parse(&sb, err, sizeof(err)) < 0);
		CHECK(strncmp(err, "x/.metadata: ", 13) == 0);
	}
	sb.size = full;
	msgpack_sbuffer_destroy(&sb);
}

static void expect_reject(const uint64_t *shape, unsigned ndim,
			  const struct mb_chunk *ch, unsigned nch,
			  const char *want)
{
	msgpack_sbuffer sb;
	char err[512] = "";

	msgpack_sbuffer_init(&sb);
	mb_tensor_meta(&sb, shape, ndim, ch, nch, "float32", 4);
	CHECK(parse(&sb, err, sizeof(err)) < 0);
	if (!strstr(err, want)) {
		fprintf(stderr, "  want '%s' in '%s'\n", want, err);
		CHECK(0);
	}
	msgpack_sbuffer_destroy(&sb);
}

static void test_tiling_rules(void)
{
	uint64_t shape[2] = { 6, 8 };
	struct mb_chunk overlap[2] = { { { 0, 0 }, { 6, 8 } },
				       { { 4, 0 }, { 2, 8 } } };
	struct mb_chunk gap[2] = { { { 0, 0 }, { 3, 8 } },
				   { { 4, 0 }, { 2, 8 } } };
	struct mb_chunk outside[1] = { { { 0, 0 }, { 7, 8 } } };
	struct mb_chunk wrap[2] = { { { 0, 0 }, { 6, 8 } },
				    { { UINT64_MAX, 0 }, { 2, 8 } } };

	expect_reject(shape, 2, overlap, 2,
		      "chunk [4,0]+[2,8] overlaps chunk [0,0]+[6,8]");
	expect_reject(shape, 2, gap, 2, "the tiling has a gap");
	expect_reject(shape, 2, outside, 1, "lies outside the shape");
	expect_reject(shape, 2, wrap, 2, "lies outside the shape");
}

static void test_overflowing_shape(void)
{
	uint64_t shape[3] = { UINT64_MAX / 2, 4, 4 };
	uint64_t shape2[2] = { UINT64_MAX / 8 + 1, 1 };
	struct mb_chunk ch[1] = { { { 0, 0, 0 }, { UINT64_MAX / 2, 4, 4 } } };
	struct mb_chunk ch2[1] = { { { 0, 0 }, { UINT64_MAX / 8 + 1, 1 } } };

	expect_reject(shape, 3, ch, 1, "element count overflows");
	expect_reject(shape2, 2, ch2, 1, "byte size overflows");
}

static void test_not_a_map(void)
{
	static const uint8_t junk[] = { 0x93, 1, 2, 3 };
	struct ckpt_meta *m = NULL;
	char err[256];

	CHECK(ckpt_meta_parse(junk, sizeof(junk), "j", &m, err,
			      sizeof(err)) < 0 && !m);
	CHECK(strstr(err, "expected a msgpack map") != NULL);
	CHECK(ckpt_meta_parse(junk, 0, "j", &m, err, sizeof(err)) < 0);
	CHECK(strstr(err, "empty file") != NULL);
}

/* One float32 tensor "t" [4] in one record of file "d" at 100, with
 * "archive": [at, n] and extra (a key and an int, or NULL). */
static void lazy_meta(msgpack_sbuffer *sb, uint64_t at, uint64_t n,
		      const char *extra)
{
	uint64_t shape[1] = { 4 };
	msgpack_packer pk;

	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	mb_one_record(&pk, shape, 1, "d", at, 16, 1 + (extra != NULL));
	mb_str(&pk, "archive");
	msgpack_pack_array(&pk, 2);
	msgpack_pack_uint64(&pk, at);
	msgpack_pack_uint64(&pk, n);
	if (extra) {
		mb_str(&pk, extra);
		msgpack_pack_uint64(&pk, 7);
	}
}

/* A record with "archive" is pending: no read may plan it until it is
 * located, and with no locator it is EIO, not the placeholder's bytes. */
static void test_lazy_record(void)
{
	struct ckpt_chunk_info ci;
	struct ckpt_meta *m = NULL;
	msgpack_sbuffer sb;
	uint32_t c = 0;
	char err[512] = "";

	msgpack_sbuffer_init(&sb);
	lazy_meta(&sb, 100, 600, NULL);
	CHECK(ckpt_meta_parse((const uint8_t *)sb.data, sb.size, "x", &m, err,
			      sizeof(err)) == 0);
	CHECK(m && m->lazy && m->nlazy == 1);
	CHECK(!ckpt_chunk_is_located(m, 0));
	CHECK(m->files[0].need == 700);	/* the whole archive */
	CHECK(ckpt_meta_chunk(m, 0, &ci) == 0);
	CHECK(ci.foff == 100 && ci.len == 600);
	CHECK(ckpt_meta_locate(m, &c, 1) == -EIO);
	CHECK(ckpt_meta_locate(m, &c, 1) == -EIO);	/* and stays so */
	ckpt_meta_free(m);
	msgpack_sbuffer_destroy(&sb);

	/* An archive too small for the chunk, or with a checksum, is
	 * refused at parse. */
	msgpack_sbuffer_init(&sb);
	lazy_meta(&sb, 100, 8, NULL);
	CHECK(parse(&sb, err, sizeof(err)) == -EINVAL);
	CHECK(strstr(err, "archive [100, 8]") != NULL);
	msgpack_sbuffer_destroy(&sb);
	msgpack_sbuffer_init(&sb);
	lazy_meta(&sb, 100, 600, "crc32");
	CHECK(parse(&sb, err, sizeof(err)) == -EINVAL);
	msgpack_sbuffer_destroy(&sb);
}

/* The fetched ranges a joined read batch keeps (model/meta.h): a long
 * range before a short one still holds what lies after the short one;
 * a range one byte short, or of another file, holds nothing. */
static void test_fetched_find(void)
{
	static uint8_t b[4];
	const struct ckpt_fetched w[] = {
		{ 0, 100, 50, b },
		{ 1, 0, 1000, b },	/* long */
		{ 1, 10, 20, b },	/* inside it */
		{ 1, 500, 24, b },
		{ 2, 0, 8, b },
	};
	size_t n = sizeof(w) / sizeof(w[0]);
	const struct ckpt_fetched *f;

	CHECK(ckpt_fetched_find(w, n, 1000, 0, 100, 50) == &w[0]);
	CHECK(!ckpt_fetched_find(w, n, 1000, 0, 100, 51));
	CHECK(!ckpt_fetched_find(w, n, 1000, 0, 99, 2));
	CHECK(ckpt_fetched_find(w, n, 1000, 1, 12, 4) == &w[2]);
	f = ckpt_fetched_find(w, n, 1000, 1, 600, 400);
	CHECK(f == &w[1]);
	CHECK(!ckpt_fetched_find(w, n, 1000, 1, 600, 401));
	CHECK(ckpt_fetched_find(w, n, 1000, 1, 999, 1) == &w[1]);
	CHECK(!ckpt_fetched_find(w, n, 1000, 1, UINT64_MAX - 1, 2));
	CHECK(ckpt_fetched_find(w, n, 1000, 2, 0, 8) == &w[4]);
	CHECK(!ckpt_fetched_find(w, n, 1000, 3, 0, 1));
	CHECK(!ckpt_fetched_find(NULL, 0, 0, 0, 0, 1));
}

int main(void)
{
	TEST(test_fetched_find);
	TEST(test_lazy_record);
	TEST(test_good_and_every_cut);
	TEST(test_tiling_rules);
	TEST(test_overflowing_shape);
	TEST(test_not_a_map);
	return TEST_REPORT();
}
