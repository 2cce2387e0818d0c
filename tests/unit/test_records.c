/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of records stored with transforms: the descriptor grammar
 * (model/transforms.c), the zstd decoder's bounds (io/zstd_decode.c), and
 * the decoded-record cache (records/record_cache.c): bounded by its cap,
 * LRU, a record decoded again after eviction, and many threads reading
 * while records come and go.  Expected values come from the formula that
 * wrote the data.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "ckptfs.h"
#include "ckptdir.h"
#include "io/zstd_decode.h"
#include "model/meta.h"
#include "model/transforms.h"
#include "testhelp.h"

#define NKEYS 8
#define ELEMS 1024		/* float32 elements per key: 4 KiB decoded */

static void test_grammar(void)
{
	static const struct {
		const char *d;
		int rc;
	} cases[] = {
		{ "stream.zstd/1", 0 }, { "stream.zstd/1.0", 0 },
		{ "stream.zstd/1.2.3", 0 }, { "stream.zstd", -ENOTSUP },
		{ "stream.zstd/2", -ENOTSUP }, { "stream.zstd/10", -ENOTSUP },
		{ "stream.zstd@corp/1", -ENOTSUP }, { "stream.lz4/1", -ENOTSUP },
		{ "", -EINVAL }, { "/1", -EINVAL }, { "stream.zstd/", -EINVAL },
		{ "stream.zstd/1.", -EINVAL }, { "stream.zstd/1..2", -EINVAL },
		{ "stream.zstd@/1", -EINVAL }, { "stream zstd/1", -EINVAL },
		{ "stream.zstd/1/1", -EINVAL }, { "stream.zstd/a", -EINVAL },
	};
	enum ckpt_transform t;
	char why[256];
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int rc = ckpt_transform_parse(cases[i].d, strlen(cases[i].d),
					      &t, why, sizeof(why));

		if (rc != cases[i].rc)
			fprintf(stderr, "  '%s': %d, want %d (%s)\n",
				cases[i].d, rc, cases[i].rc, why);
		CHECK(rc == cases[i].rc);
		CHECK(rc != -ENOTSUP || strstr(why, cases[i].d));
	}
}

/* zstd of src, with or without the content size in the frame. */
static size_t zc(void *dst, size_t cap, const void *src, size_t len,
		 bool size_flag)
{
	ZSTD_CCtx *c = ZSTD_createCCtx();
	size_t n;

	ZSTD_CCtx_setParameter(c, ZSTD_c_contentSizeFlag, size_flag);
	n = ZSTD_compress2(c, dst, cap, src, len);
	ZSTD_freeCCtx(c);
	return ZSTD_isError(n) ? 0 : n;
}

static void test_decoder_bounds(void)
{
	static uint8_t raw[10000], z[30000], zz[30000];
	const uint8_t chain[2] = { CKPT_XFORM_ZSTD, CKPT_XFORM_ZSTD };
	struct ckpt_mem_src m;
	uint8_t *out = NULL;
	uint64_t outlen = 0;
	size_t n, n2, i;
	char why[256];

	for (i = 0; i < sizeof(raw); i++)
		raw[i] = (uint8_t)(i * 7);
	for (int flag = 0; flag < 2; flag++) {
		n = zc(z, sizeof(z), raw, sizeof(raw), flag);
		CHECK(n > 0);
		m = (struct ckpt_mem_src){ z, n };
		/* Exactly at the cap: fine; one byte under: refused. */
		CHECK(ckpt_decode_stored(ckpt_mem_read, &m, n, chain, 1, sizeof(raw),
					 &out, &outlen, why, sizeof(why)) == 0);
		CHECK(outlen == sizeof(raw) && out && !memcmp(out, raw, sizeof(raw)));
		free(out);
		out = NULL;
		CHECK(ckpt_decode_stored(ckpt_mem_read, &m, n, chain, 1,
					 sizeof(raw) - 1, &out, &outlen, why,
					 sizeof(why)) == -EFBIG);
		CHECK(out == NULL);
		/* Counting only. */
		CHECK(ckpt_decode_stored(ckpt_mem_read, &m, n, chain, 1, sizeof(raw),
					 NULL, &outlen, why, sizeof(why)) == 0);
		CHECK(outlen == sizeof(raw));
		/* Two layers, in stored order. */
		n2 = zc(zz, sizeof(zz), z, n, !flag);
		m = (struct ckpt_mem_src){ zz, n2 };
		CHECK(ckpt_decode_stored(ckpt_mem_read, &m, n2, chain, 2, sizeof(raw),
					 &out, &outlen, why, sizeof(why)) == 0);
		CHECK(outlen == sizeof(raw) && out && !memcmp(out, raw, sizeof(raw)));
		free(out);
		out = NULL;
	}
	/* Two frames back to back decode to both. */
	n = zc(z, sizeof(z), raw, 5000, true);
	n2 = zc(z + n, sizeof(z) - n, raw + 5000, 5000, false);
	m = (struct ckpt_mem_src){ z, n + n2 };
	CHECK(ckpt_decode_stored(ckpt_mem_read, &m, n + n2, chain, 1, sizeof(raw),
				 &out, &outlen, why, sizeof(why)) == 0);
	CHECK(outlen == sizeof(raw) && out && !memcmp(out, raw, sizeof(raw)));
	free(out);
	out = NULL;
	/* Empty, garbage, truncated. */
	m = (struct ckpt_mem_src){ z, 0 };
	CHECK(ckpt_decode_stored(ckpt_mem_read, &m, 0, chain, 1, 100, &out, &outlen,
				 why, sizeof(why)) == -EBADMSG);
	m = (struct ckpt_mem_src){ raw, 64 };
	CHECK(ckpt_decode_stored(ckpt_mem_read, &m, 64, chain, 1, 100, &out,
				 &outlen, why, sizeof(why)) == -EBADMSG);
	m = (struct ckpt_mem_src){ z, n - 3 };
	CHECK(ckpt_decode_stored(ckpt_mem_read, &m, n - 3, chain, 1, sizeof(raw),
				 &out, &outlen, why, sizeof(why)) == -EBADMSG);
	CHECK(out == NULL);
}

/* NKEYS float32 keys k0..k7 of ELEMS elements (key k's element i =
 * k * 10000 + i), each one zstd record in "data". */
static char *zstd_ckpt(void)
{
	static const char *const names[NKEYS] = { "k0", "k1", "k2", "k3",
						  "k4", "k5", "k6", "k7" };
	static float vals[ELEMS];
	static uint8_t z[NKEYS][8192];
	uint64_t zoff[NKEYS], zlen[NKEYS], off = 0;
	msgpack_sbuffer sb;
	char *dir = cd_new();
	uint8_t *data;
	unsigned k, i;

	if (!dir)
		return NULL;
	for (k = 0; k < NKEYS; k++) {
		for (i = 0; i < ELEMS; i++)
			vals[i] = (float)(k * 10000 + i);
		zlen[k] = zc(z[k], sizeof(z[k]), vals, sizeof(vals), k % 2);
		zoff[k] = off;
		off += zlen[k];
	}
	msgpack_sbuffer_init(&sb);
	mb_keys_meta_recs(&sb, names, NKEYS, ELEMS, 0, zoff, zlen,
			  "stream.zstd/1");
	data = malloc(off);
	for (k = 0; data && k < NKEYS; k++)
		memcpy(data + zoff[k], z[k], zlen[k]);
	if (!data || cd_ckpt(dir, &sb, data, off)) {
		cd_remove(dir);
		dir = NULL;
	}
	free(data);
	msgpack_sbuffer_destroy(&sb);
	return dir;
}

static int open_all(const char *dir, uint64_t cap, struct ckpt_meta **m,
		    struct ckpt_view **v)
{
	struct ckpt_open_opts oo = { .cache_bytes = cap };
	struct ckpt_view_opts vo = { .world = 1, .dtype = CKPT_DTYPE_COUNT };
	char err[512];

	if (ckpt_meta_open_opts(dir, &oo, m, err, sizeof(err)) ||
	    ckpt_files_open(*m, 0, 0, err, sizeof(err)) ||
	    ckpt_view_new(*m, &vo, v, err, sizeof(err))) {
		fprintf(stderr, "  %s\n", err);
		return -1;
	}
	return 0;
}

/* Read key k whole and check every element. */
static bool read_key(struct ckpt_view *v, unsigned k)
{
	static __thread float got[ELEMS];
	char name[8];
	uint32_t node;
	size_t n = 0;
	unsigned i;

	snprintf(name, sizeof(name), "k%u", k);
	node = ckpt_view_lookup(v, 0, name);
	if (ckpt_view_read(v, 0, node, 0, sizeof(got), got, &n, NULL) ||
	    n != sizeof(got))
		return false;
	for (i = 0; i < ELEMS; i++)
		if (got[i] != (float)(k * 10000 + i))
			return false;
	return true;
}

static unsigned loaded(const struct ckpt_meta *m)
{
	unsigned i, n = 0;

	for (i = 0; i < m->nzrecs; i++)
		n += m->zrecs[i].state == CKPT_ZREC_LOADED;
	return n;
}

static void test_cache_lru(void)
{
	char *dir = zstd_ckpt();
	struct ckpt_meta *m = NULL;
	struct ckpt_view *v = NULL;
	const uint64_t cap = 3 * ELEMS * 4;	/* three records */
	unsigned k;

	CHECK(dir && open_all(dir, cap, &m, &v) == 0);
	if (!v)
		goto out;
	CHECK(m->nzrecs == NKEYS);
	for (k = 0; k < NKEYS; k++) {
		CHECK(read_key(v, k));
		CHECK(m->zc.used <= cap);
		CHECK(loaded(m) == (k + 1 < 3 ? k + 1 : 3));
	}
	/* The three most recent stay; k0 was evicted and decodes again. */
	CHECK(m->zrecs[NKEYS - 1].state == CKPT_ZREC_LOADED);
	CHECK(m->zrecs[0].state == CKPT_ZREC_COLD);
	CHECK(read_key(v, 0));
	CHECK(m->zrecs[0].state == CKPT_ZREC_LOADED);
	/* Loaded now: 6, 7, 0.  Touching 6 leaves 7 the least recent, so
	 * loading 1 evicts 7. */
	CHECK(read_key(v, 6));
	CHECK(read_key(v, 1));
	CHECK(m->zrecs[7].state == CKPT_ZREC_COLD);
	CHECK(m->zrecs[5].state == CKPT_ZREC_COLD);
	CHECK(m->zrecs[6].state == CKPT_ZREC_LOADED);
	CHECK(m->zrecs[0].state == CKPT_ZREC_LOADED);
	CHECK(m->zrecs[1].state == CKPT_ZREC_LOADED);
	CHECK(m->zc.used <= cap);
out:
	ckpt_view_free(v);
	ckpt_meta_free(m);
	cd_remove(dir);
}

static void test_cache_cap_is_the_record_limit(void)
{
	char *dir = zstd_ckpt();
	struct ckpt_meta *m = NULL;
	struct ckpt_view *v = NULL;

	CHECK(dir && open_all(dir, 1000, &m, &v) == 0);
	if (v) {
		CHECK(!read_key(v, 2));
		CHECK(strstr(ckpt_last_error(), "key 'k2'") != NULL);
		CHECK(strstr(ckpt_last_error(), "1000-byte cap") != NULL);
		CHECK(m->zc.used == 0);
	}
	ckpt_view_free(v);
	ckpt_meta_free(m);
	cd_remove(dir);
}

struct reader {
	struct ckpt_view *v;
	unsigned seed;
	int bad;
};

static void *reader_main(void *arg)
{
	struct reader *r = arg;
	int i;

	for (i = 0; i < 200; i++)
		if (!read_key(r->v, (unsigned)rand_r(&r->seed) % NKEYS))
			r->bad++;
	return NULL;
}

static void test_cache_threads(void)
{
	char *dir = zstd_ckpt();
	struct ckpt_meta *m = NULL;
	struct ckpt_view *v = NULL;
	struct reader r[8];
	pthread_t th[8];
	int i, bad = 0;

	CHECK(dir && open_all(dir, 2 * ELEMS * 4, &m, &v) == 0);
	if (!v)
		goto out;
	for (i = 0; i < 8; i++) {
		r[i] = (struct reader){ v, (unsigned)i * 7919u + 1, 0 };
		pthread_create(&th[i], NULL, reader_main, &r[i]);
	}
	for (i = 0; i < 8; i++) {
		pthread_join(th[i], NULL);
		bad += r[i].bad;
	}
	CHECK(bad == 0);
	CHECK(m->zc.used <= 2 * ELEMS * 4);
out:
	ckpt_view_free(v);
	ckpt_meta_free(m);
	cd_remove(dir);
}

int main(void)
{
	TEST(test_grammar);
	TEST(test_decoder_bounds);
	TEST(test_cache_lru);
	TEST(test_cache_cap_is_the_record_limit);
	TEST(test_cache_threads);
	return TEST_REPORT();
}
