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

int main(void)
{
	TEST(test_decoy_in_planner_data);
	TEST(test_saveplan_planner_data);
	TEST(test_scalars_only);
	return TEST_REPORT();
}
