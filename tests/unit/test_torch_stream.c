/* SPDX-License-Identifier: MIT */
/*
 * The torch indexer's streaming read of .metadata (core/torch/
 * torch_index.c over pk_load_stream()) on pickles shaped to mislead it,
 * kept in tests/fuzz/torch_corpus (one mode byte, then the pickle).  The
 * image must be what the whole tree's walk wrote (docs/performance.md):
 * a dict of a role's name elsewhere in the pickle is not the role's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "model/meta.h"
#include "torch/torch_index.h"
#include "testhelp.h"

#define CORPUS "tests/fuzz/torch_corpus/"

/* The pickle of corpus file name, into *buf (caller frees). */
static size_t read_case(const char *name, uint8_t **buf)
{
	char path[256];
	FILE *f;
	long n;

	snprintf(path, sizeof(path), CORPUS "%s", name);
	*buf = NULL;
	f = fopen(path, "rb");
	if (!f)
		return 0;
	if (fseek(f, 0, SEEK_END) || (n = ftell(f)) <= 1 ||
	    fseek(f, 1, SEEK_SET) || !(*buf = malloc((size_t)n)) ||
	    fread(*buf, 1, (size_t)n - 1, f) != (size_t)n - 1) {
		fclose(f);
		free(*buf);
		*buf = NULL;
		return 0;
	}
	fclose(f);
	return (size_t)n - 1;
}

static bool has(const uint8_t *img, size_t len, const char *s)
{
	size_t n = strlen(s), i;

	for (i = 0; i + n <= len; i++)
		if (!memcmp(img + i, s, n))
			return true;
	return false;
}

/* Index name lazily: 0 or -errno, the image in *img. */
static int index_case(const char *name, uint8_t **img, size_t *len)
{
	uint8_t *pkl;
	size_t n = read_case(name, &pkl);
	char err[512] = "";
	int rc;

	*img = NULL;
	*len = 0;
	if (!n)
		return -ENOENT;
	rc = ckpt_torch_index_lazy(NULL, ".metadata", pkl, n, img, len, err,
				   sizeof(err));
	if (rc)
		fprintf(stderr, "  %s: %s\n", name, err);
	free(pkl);
	return rc;
}

/* planner_data's first item is "storage_data": {a record of evil.distcp}
 * (planner-private: not a path, dropped); the real storage_data follows
 * with a record of key 'a' and one of 'b'. */
static void test_decoy_in_planner_data(void)
{
	uint8_t *img;
	size_t len;

	CHECK(index_case("stream_decoy_in_planner_data", &img, &len) == 0);
	CHECK(img && !has(img, len, "evil.distcp"));
	free(img);
	CHECK(index_case("stream_decoy_late", &img, &len) == 0);
	CHECK(img && !has(img, len, "evil.distcp"));
	free(img);
}

/* A Megatron-style Metadata whose planner's SavePlans (their own
 * planner_data dicts) are pickled into it. */
static void test_saveplan_planner_data(void)
{
	uint8_t *img;
	size_t len;

	CHECK(index_case("stream_saveplan_planner_data", &img, &len) == 0);
	free(img);
}

/* Only 0-dim tensors: no chunk has a dim to keep. */
static void test_scalars_only(void)
{
	uint8_t *img;
	size_t len;

	CHECK(index_case("stream_scalar", &img, &len) == 0);
	CHECK(img && has(img, len, "chunks"));
	free(img);
}

/* The parsed checkpoints a and b hold the same entries, chunks, dims and
 * strings. */
static bool same_meta(const struct ckpt_meta *a, const struct ckpt_meta *b)
{
	uint32_t i;

	if (a->nentries != b->nentries || a->nchunks != b->nchunks ||
	    a->ndims != b->ndims || a->strings_len != b->strings_len ||
	    a->nfiles != b->nfiles ||
	    (a->ndims &&
	     memcmp(a->dims, b->dims, a->ndims * sizeof(*a->dims))) ||
	    (a->strings_len &&
	     memcmp(a->strings, b->strings, a->strings_len)))
		return false;
	for (i = 0; i < a->nchunks; i++)
		if (a->chunks[i].file != b->chunks[i].file ||
		    a->chunks[i].foff != b->chunks[i].foff ||
		    a->chunks[i].len != b->chunks[i].len ||
		    a->chunks[i].dims_at != b->chunks[i].dims_at)
			return false;
	for (i = 0; i < a->nentries; i++)
		if (a->entries[i].fqn != b->entries[i].fqn ||
		    a->entries[i].dtype != b->entries[i].dtype ||
		    a->entries[i].nchunks != b->entries[i].nchunks)
			return false;
	return true;
}

/*
 * Spent (the open's way: the pickle's and the image's pages given back
 * as they are read): every corpus pickle that indexes gives the image it
 * gives unspent, and that image parses spent as it does unspent.
 */
static void test_spend_same(void)
{
	static const char *const names[] = {
		"metadata", "proto2_meta", "memo", "size_forms", "size_shared",
		"stream_decoy_in_planner_data", "stream_decoy_late",
		"stream_saveplan_planner_data", "stream_scalar",
	};
	size_t i, n, len, slen;
	unsigned indexed = 0;

	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		uint8_t *pkl, *img = NULL, *simg = NULL;
		struct ckpt_meta *m = NULL, *sm = NULL;
		char err[512] = "";
		int rc;

		if (index_case(names[i], &img, &len))
			continue;
		n = read_case(names[i], &pkl);
		rc = ckpt_torch_index_spend(NULL, ".metadata", pkl, n,
					    &simg, &slen, err, sizeof(err));
		free(pkl);
		CHECK(rc == 0 && slen == len && !memcmp(img, simg, len));
		CHECK(ckpt_meta_parse(img, len, "x", &m, err,
				      sizeof(err)) == 0);
		if (simg)
			CHECK(ckpt_meta_parse_spend(simg, slen, "x", &sm, err,
						    sizeof(err)) == 0);
		CHECK(m && sm && same_meta(m, sm));
		indexed++;
		ckpt_meta_free(m);
		ckpt_meta_free(sm);
		free(img);
		free(simg);
	}
	CHECK(indexed >= 5);
}

/* Whether the stamp's image_xxh3 (a fixed-width 0xcf value) is the
 * XXH3 of every byte after it, computed here on the image whole. */
static bool hash_holds(const uint8_t *img, size_t len)
{
	const uint8_t *at = memmem(img, len, "image_xxh3", 10);
	uint64_t want;
	size_t body;

	if (!at || !ckpt_torch_index_image_hash(img, len, &want))
		return false;
	body = (size_t)(at - img) + 10 + 9;
	return at[10] == 0xcf && body <= len &&
	       XXH3_64bits(img + body, len - body) == want;
}

/*
 * The image an open stages in the node-local index cache, in pieces
 * (ckpt_torch_index_pieces(), spent or not), is byte for byte the one
 * ckpt_torch_index_merged() builds with nothing located: the same
 * stamp, the same hash of what follows it.
 */
static void test_pieces_same(void)
{
	static const char *const names[] = {
		"metadata", "proto2_meta", "stream_decoy_in_planner_data",
		"stream_decoy_late", "stream_saveplan_planner_data",
		"stream_scalar",
	};
	static const struct ckpt_meta *const none[1] = { NULL };
	size_t i, n, len, plen;
	unsigned indexed = 0;
	int spend;

	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		for (spend = 0; spend < 2; spend++) {
			struct ckpt_torch_pieces pc;
			uint8_t *pkl, *img = NULL, *pimg = NULL;
			char err[512] = "";
			int rc;

			n = read_case(names[i], &pkl);
			if (!n)
				continue;
			rc = ckpt_torch_index_merged(NULL, ".metadata", pkl, n,
						     none, 0, &img, &len, err,
						     sizeof(err));
			CHECK(rc == 0);
			if (rc) {
				free(pkl);
				continue;
			}
			CHECK(ckpt_torch_index_pieces(NULL, ".metadata", pkl,
						      n, spend, &pc, err,
						      sizeof(err)) == 0);
			free(pkl);
			CHECK(pc.n > 1 && pc.n <= CKPT_TORCH_PIECES &&
			      pc.len == len);
			CHECK(ckpt_torch_pieces_join(&pc, &pimg, &plen) == 0);
			CHECK(pc.n == 0 && plen == len &&
			      !memcmp(img, pimg, len));
			CHECK(hash_holds(pimg, plen));
			indexed++;
			free(img);
			free(pimg);
		}
	}
	CHECK(indexed == 12);
}

int main(void)
{
	TEST(test_decoy_in_planner_data);
	TEST(test_saveplan_planner_data);
	TEST(test_scalars_only);
	TEST(test_spend_same);
	TEST(test_pieces_same);
	return TEST_REPORT();
}
