/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the .ckptfs/ files (view/vfiles.c): manifest rows whole
 * for long paths, the safetensors header aligned and complete, and a build
 * that runs out of memory leaves nothing behind, caches nothing, and
 * succeeds on the next try.  Out-of-memory is injected by wrapping
 * open_memstream(3) at link time:
 */
// wrap: open_memstream
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ckptfs.h"
#include "ckptdir.h"
#include "testhelp.h"

FILE *__real_open_memstream(char **ptr, size_t *size);
FILE *__wrap_open_memstream(char **ptr, size_t *size);

static int fail_after = -1;	/* calls that succeed before one fails */

FILE *__wrap_open_memstream(char **ptr, size_t *size)
{
	if (fail_after == 0) {
		fail_after = -1;
		errno = ENOMEM;
		return NULL;
	}
	if (fail_after > 0)
		fail_after--;
	return __real_open_memstream(ptr, size);
}

static struct ckpt_meta *meta_of(const char *const *names, unsigned n)
{
	struct ckpt_meta *m = NULL;
	msgpack_sbuffer sb;
	char err[512];

	msgpack_sbuffer_init(&sb);
	mb_keys_meta(&sb, names, n, 6);
	if (ckpt_meta_parse((const uint8_t *)sb.data, sb.size, "t/.metadata",
			    &m, err, sizeof(err)))
		fprintf(stderr, "  %s\n", err);
	msgpack_sbuffer_destroy(&sb);
	return m;
}

static uint32_t meta_node(const struct ckpt_view *v, const char *name)
{
	uint32_t d = ckpt_view_lookup(v, 0, ".ckptfs");

	return d == CKPT_NONE ? CKPT_NONE : ckpt_view_lookup(v, d, name);
}

static char *read_all(const struct ckpt_view *v, uint32_t node, size_t *len)
{
	struct ckpt_scratch *s = ckpt_scratch_new();
	uint64_t size = 0;
	char *buf = NULL;

	if (s && ckpt_view_size(v, 0, node, &size) == 0 &&
	    (buf = calloc(1, size + 1)) &&
	    ckpt_view_read(v, 0, node, 0, size, buf, len, s) != 0) {
		free(buf);
		buf = NULL;
	}
	ckpt_scratch_free(s);
	return buf;
}

/* A 602-byte path: its manifest row keeps all 7 columns. */
static void test_manifest_long_path(void)
{
	char fqn[700];
	const char *names[2] = { fqn, "short" };
	struct ckpt_view_opts o = { .world = 2, .rank = 1,
				    .dtype = CKPT_DTYPE_COUNT, .meta_dir = true };
	struct ckpt_meta *m = NULL;
	struct ckpt_view *v = NULL;
	char err[512], *tsv, *line, *save = NULL;
	size_t len = 0;
	int rows = 0;

	memset(fqn, 'a', 200);
	fqn[200] = '.';
	memset(fqn + 201, 'b', 200);
	fqn[401] = '.';
	memset(fqn + 402, 'c', 200);
	fqn[602] = '\0';
	m = meta_of(names, 2);
	CHECK(m && ckpt_view_new(m, &o, &v, err, sizeof(err)) == 0);
	if (!v)
		goto out;
	tsv = read_all(v, meta_node(v, "manifest.tsv"), &len);
	CHECK(tsv != NULL);
	for (line = strtok_r(tsv, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		int cols = 1;
		char *p;

		for (p = line; *p; p++)
			cols += *p == '\t';
		CHECK(cols == 7);
		if (rows == 1)
			CHECK(strlen(strtok(line, "\t")) == 602);
		rows++;
	}
	CHECK(rows == 3);
	free(tsv);
out:
	ckpt_view_free(v);
	ckpt_meta_free(m);
}

/* view.safetensors: 8-byte little-endian length, a JSON header that
 * names every tensor, data starting 8-byte aligned. */
static void test_safetensors_header(void)
{
	const char *names[3] = { "a.x", "a.y", "b" };
	struct ckpt_view_opts o = { .world = 3, .rank = 0,
				    .dtype = CKPT_DTYPE_COUNT, .meta_dir = true };
	char *dir = cd_new(), err[512], *st = NULL;
	float *data = mb_keys_data(3, 6);
	struct ckpt_meta *m = NULL;
	struct ckpt_view *v = NULL;
	msgpack_sbuffer sb;
	uint64_t hlen = 0;
	size_t len = 0;
	int i;

	msgpack_sbuffer_init(&sb);
	mb_keys_meta(&sb, names, 3, 6);
	CHECK(dir && data && cd_ckpt(dir, &sb, data, 3 * 6 * 4) == 0);
	msgpack_sbuffer_destroy(&sb);
	CHECK(ckpt_meta_open(dir, &m, err, sizeof(err)) == 0 &&
	      ckpt_files_open(m, 0, 0, err, sizeof(err)) == 0 &&
	      ckpt_view_new(m, &o, &v, err, sizeof(err)) == 0);
	if (!v)
		goto out;
	st = read_all(v, meta_node(v, "view.safetensors"), &len);
	CHECK(st != NULL && len > 8);
	for (i = 7; st && i >= 0; i--)
		hlen = hlen << 8 | (unsigned char)st[i];
	CHECK((8 + hlen) % 8 == 0 && 8 + hlen + 3 * 2 * 4 == len);
	CHECK(st && st[8] == '{' && strstr(st + 8, "\"a.y\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}"));
	/* The data: rank 0's 2 rows of each key, back to back. */
	for (i = 0; st && i < 3; i++) {
		float x[2];

		memcpy(x, st + 8 + hlen + 8 * i, 8);
		CHECK(x[0] == (float)(i * 1000) && x[1] == (float)(i * 1000 + 1));
	}
out:
	free(st);
	free(data);
	ckpt_view_free(v);
	ckpt_meta_free(m);
	cd_remove(dir);
}

/* Out of memory at each of the builder's streams: the size call fails
 * (no size 0 for the kernel to cache), nothing leaks (ASan, valgrind),
 * and the next call builds the whole file. */
static void test_oom_not_cached(void)
{
	const char *names[2] = { "p.w", "p.b" };
	struct ckpt_view_opts o = { .world = 1, .dtype = CKPT_DTYPE_COUNT,
				    .meta_dir = true };
	struct ckpt_meta *m = meta_of(names, 2);
	struct ckpt_view *v = NULL;
	char err[512], *json;
	uint64_t size = 1;
	size_t len;
	int k;

	CHECK(m && ckpt_view_new(m, &o, &v, err, sizeof(err)) == 0);
	if (!v)
		goto out;
	for (k = 0; k < 3; k++) {
		fail_after = k;
		CHECK(ckpt_view_size(v, 0, meta_node(v, "view.json"), &size) ==
		      -ENOMEM);
		CHECK(size == 0);
	}
	fail_after = -1;
	CHECK(ckpt_view_size(v, 0, meta_node(v, "view.json"), &size) == 0);
	CHECK(size > 0);
	json = read_all(v, meta_node(v, "view.json"), &len);
	CHECK(json && len == size && strstr(json, "\"files\": 2"));
	free(json);
out:
	ckpt_view_free(v);
	ckpt_meta_free(m);
}

int main(void)
{
	TEST(test_manifest_long_path);
	TEST(test_safetensors_header);
	TEST(test_oom_not_cached);
	return TEST_REPORT();
}
