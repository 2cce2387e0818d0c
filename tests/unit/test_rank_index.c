/* SPDX-License-Identifier: MIT */
/* Unit tests of the rank-local index container (core/torch/torch_index.c:
 * ckpt_torch_rank_index_pack() and _parse()). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/mpout.h"
#include "torch/torch_index.h"
#include "testhelp.h"

static void test_round_trip(void)
{
	static const uint8_t a[] = { 1, 2, 3 }, b[] = { 0 };
	const struct ckpt_rank_image in[3] = {
		{ 0, a, sizeof(a) }, { 2, b, 0 }, { 7, b, sizeof(b) },
	};
	struct ckpt_rank_image *out = NULL;
	uint8_t *buf = NULL;
	size_t len = 0, n = 0, cut;

	CHECK(ckpt_torch_rank_index_pack(in, 3, &buf, &len) == 0);
	CHECK(ckpt_torch_is_rank_index(buf, len));
	CHECK(ckpt_torch_rank_index_parse(buf, len, &out, &n) == 0);
	CHECK(n == 3);
	CHECK(out && out[0].rank == 0 && out[0].len == 3 &&
	      !memcmp(out[0].img, a, 3));
	CHECK(out && out[1].rank == 2 && out[1].len == 0);
	CHECK(out && out[2].rank == 7 && out[2].len == 1 && !out[2].img[0]);
	CHECK(out && out[0].img >= buf && out[2].img + 1 <= buf + len);
	free(out);
	/* Every truncation is refused, never read past. */
	for (cut = 0; cut < len; cut++) {
		out = NULL;
		CHECK(ckpt_torch_rank_index_parse(buf, cut, &out, &n) ==
		      -EBADMSG && !out);
	}
	free(buf);
}

/* A container written by hand: format fmt, version ver, ranks r[0..n). */
static void pack(const char *fmt, uint64_t ver, const uint64_t *r, size_t n,
		 uint8_t **buf, size_t *len)
{
	struct ckpt_mpout w;
	size_t i;

	ckpt_mpout_init(&w);
	ckpt_mp_map(&w, 3);
	ckpt_pack_cstr(&w, "format");
	ckpt_pack_cstr(&w, fmt);
	ckpt_pack_cstr(&w, "version");
	ckpt_mp_uint64(&w, ver);
	ckpt_pack_cstr(&w, "ranks");
	ckpt_mp_array(&w, (uint32_t)n);
	for (i = 0; i < n; i++) {
		ckpt_mp_map(&w, 2);
		ckpt_pack_cstr(&w, "rank");
		ckpt_mp_uint64(&w, r[i]);
		ckpt_pack_cstr(&w, "index");
		ckpt_mp_bin(&w, 1);
		ckpt_mp_bin_body(&w, "x", 1);
	}
	CHECK(ckpt_mpout_finish(&w, buf, len) == 0);
	ckpt_mpout_destroy(&w);
}

static void test_refused(void)
{
	static const uint64_t up[] = { 1, 3 }, down[] = { 3, 1 },
			      twice[] = { 2, 2 };
	struct ckpt_rank_image *out;
	uint8_t *buf;
	size_t len, n;

	pack(CKPT_RANK_INDEX_FORMAT, 1, up, 2, &buf, &len);
	CHECK(ckpt_torch_rank_index_parse(buf, len, &out, &n) == 0 && n == 2);
	free(out);
	free(buf);
	pack(CKPT_RANK_INDEX_FORMAT, 1, down, 2, &buf, &len);
	CHECK(ckpt_torch_rank_index_parse(buf, len, &out, &n) == -EBADMSG);
	free(buf);
	pack(CKPT_RANK_INDEX_FORMAT, 1, twice, 2, &buf, &len);
	CHECK(ckpt_torch_rank_index_parse(buf, len, &out, &n) == -EBADMSG);
	free(buf);
	pack(CKPT_RANK_INDEX_FORMAT, 2, up, 2, &buf, &len);
	CHECK(!ckpt_torch_is_rank_index(buf, len));
	free(buf);
	pack("ckptfs", 1, up, 2, &buf, &len);	/* a native image's name */
	CHECK(!ckpt_torch_is_rank_index(buf, len));
	free(buf);
}

int main(void)
{
	TEST(test_round_trip);
	TEST(test_refused);
	return TEST_REPORT();
}
