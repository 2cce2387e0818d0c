/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of records stored with transforms: the descriptor grammar
 * (model/transforms.c), the zstd decoder's bounds and budget
 * (io/zstd_decode.c), and the decoded-record cache
 * (records/record_cache.c): LRU, a record decoded again after eviction,
 * and its byte budget, checked while many threads read (a sampler thread
 * watches loaded + reserved bytes, the cache keeps its high water), with
 * records larger than half the cache, warming, and a record past the
 * per-record limit.  Expected values come from the formula that wrote the
 * data.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

#include "ckptfs.h"
#include "ckptdir.h"
#include "common/bigbuf.h"
#include "io/zstd_decode.h"
#include "model/meta.h"
#include "model/transforms.h"
#include "records/record_cache.h"
#include "testhelp.h"

#define NKEYS 8
#define ELEMS 1024		/* float32 elements per key: 4 KiB decoded */
#define MAXKEYS 16

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

/* A budget that counts, and refuses past a limit with `refusal`. */
struct tbudget {
	uint64_t now, peak, limit;
	int refusal;
};

static int tb_take(void *ctx, uint64_t n)
{
	struct tbudget *b = ctx;

	if (b->now + n > b->limit)
		return b->refusal;
	b->now += n;
	if (b->now > b->peak)
		b->peak = b->now;
	return 0;
}

static void tb_give(void *ctx, uint64_t n)
{
	struct tbudget *b = ctx;

	b->now -= n;
}

#define ANY CKPT_DECODE_ANY

static uint64_t outlen;
static char why[256];

/* ckpt_decode_stored() of the len bytes of m through `layers` zstd
 * layers, its length into outlen and its reason into why. */
static int dec(const struct ckpt_mem_src *m, uint64_t len, unsigned layers,
	       uint64_t cap, uint64_t expect,
	       const struct ckpt_decode_budget *b, uint8_t **out)
{
	static const uint8_t chain[2] = { CKPT_XFORM_ZSTD, CKPT_XFORM_ZSTD };

	return ckpt_decode_stored(ckpt_mem_read, (void *)m, len, chain,
				  layers, cap, expect, b, out, &outlen, why,
				  sizeof(why));
}

static void test_decoder_bounds(void)
{
	static uint8_t raw[10000], z[30000], zz[30000];
	struct tbudget tb = { 0, 0, UINT64_MAX, -EFBIG };
	struct ckpt_decode_budget b = { tb_take, tb_give, &tb };
	struct ckpt_mem_src m;
	uint8_t *out = NULL;
	uint64_t need;
	size_t n, n2, i;

	for (i = 0; i < sizeof(raw); i++)
		raw[i] = (uint8_t)(i * 7);
	for (int flag = 0; flag < 2; flag++) {
		n = zc(z, sizeof(z), raw, sizeof(raw), flag);
		CHECK(n > 0);
		m = (struct ckpt_mem_src){ z, n };
		/* Exactly at the cap: fine; one byte under: refused. */
		CHECK(dec(&m, n, 1, sizeof(raw), ANY, NULL, &out) == 0);
		CHECK(outlen == sizeof(raw) && out && !memcmp(out, raw, sizeof(raw)));
		ckpt_big_free(out, outlen);
		out = NULL;
		CHECK(dec(&m, n, 1, sizeof(raw) - 1, ANY, NULL, &out) == -EFBIG);
		CHECK(out == NULL);
		/* Through a budget: every buffer taken first; the output
		 * alone is left taken; a budget one byte short of the
		 * peak refuses, and nothing stays taken. */
		tb = (struct tbudget){ 0, 0, UINT64_MAX, -EFBIG };
		CHECK(dec(&m, n, 1, sizeof(raw), ANY, &b, &out) == 0);
		CHECK(outlen == sizeof(raw) && out && !memcmp(out, raw, sizeof(raw)));
		CHECK(tb.now == outlen);
		CHECK(tb.peak >= n + sizeof(raw) + ckpt_zstd_context_bytes() / 2);
		ckpt_big_free(out, outlen);
		out = NULL;
		need = tb.peak;
		tb = (struct tbudget){ 0, 0, need - 1, -EFBIG };
		CHECK(dec(&m, n, 1, sizeof(raw), ANY, &b, &out) == -EFBIG);
		CHECK(out == NULL && tb.now == 0);
		CHECK(strstr(why, "cap") != NULL);
		tb = (struct tbudget){ 0, 0, need - 1, -EAGAIN };
		CHECK(dec(&m, n, 1, sizeof(raw), ANY, &b, &out) == -EAGAIN);
		CHECK(out == NULL && tb.now == 0);
		/* Counting only. */
		tb = (struct tbudget){ 0, 0, UINT64_MAX, -EFBIG };
		CHECK(dec(&m, n, 1, sizeof(raw), ANY, &b, NULL) == 0);
		CHECK(outlen == sizeof(raw) && tb.now == 0);
		/* Two layers, in stored order. */
		n2 = zc(zz, sizeof(zz), z, n, !flag);
		m = (struct ckpt_mem_src){ zz, n2 };
		CHECK(dec(&m, n2, 2, sizeof(raw), ANY, &b, &out) == 0);
		CHECK(outlen == sizeof(raw) && out && !memcmp(out, raw, sizeof(raw)));
		CHECK(tb.now == outlen);
		ckpt_big_free(out, outlen);
		out = NULL;
	}
	/* Two frames back to back decode to both. */
	n = zc(z, sizeof(z), raw, 5000, true);
	n2 = zc(z + n, sizeof(z) - n, raw + 5000, 5000, false);
	m = (struct ckpt_mem_src){ z, n + n2 };
	CHECK(dec(&m, n + n2, 1, sizeof(raw), ANY, NULL, &out) == 0);
	CHECK(outlen == sizeof(raw) && out && !memcmp(out, raw, sizeof(raw)));
	ckpt_big_free(out, outlen);
	out = NULL;
	/* A frame that does not say its size, whose size the caller knows,
	 * is decoded straight into a buffer of that size: no window, less
	 * memory than streaming it.  Told too little, it is streamed, and
	 * the true size comes back. */
	n = zc(z, sizeof(z), raw, sizeof(raw), false);
	m = (struct ckpt_mem_src){ z, n };
	tb = (struct tbudget){ 0, 0, UINT64_MAX, -EFBIG };
	CHECK(dec(&m, n, 1, sizeof(raw), ANY, &b, &out) == 0);
	need = tb.peak;
	ckpt_big_free(out, outlen);
	tb = (struct tbudget){ 0, 0, UINT64_MAX, -EFBIG };
	CHECK(dec(&m, n, 1, sizeof(raw), sizeof(raw), &b, &out) == 0);
	CHECK(outlen == sizeof(raw) && out && !memcmp(out, raw, sizeof(raw)));
	CHECK(tb.now == outlen && tb.peak < need);
	ckpt_big_free(out, outlen);
	tb = (struct tbudget){ 0, 0, UINT64_MAX, -EFBIG };
	CHECK(dec(&m, n, 1, sizeof(raw), 100, &b, &out) == 0);
	CHECK(outlen == sizeof(raw) && tb.now == outlen);
	ckpt_big_free(out, outlen);
	out = NULL;
	/* Empty, garbage, truncated: nothing stays taken. */
	tb = (struct tbudget){ 0, 0, UINT64_MAX, -EFBIG };
	m = (struct ckpt_mem_src){ z, 0 };
	CHECK(dec(&m, 0, 1, 100, ANY, &b, &out) == -EBADMSG);
	m = (struct ckpt_mem_src){ raw, 64 };
	CHECK(dec(&m, 64, 1, 100, ANY, &b, &out) == -EBADMSG);
	m = (struct ckpt_mem_src){ z, n - 3 };
	CHECK(dec(&m, n - 3, 1, sizeof(raw), ANY, &b, &out) == -EBADMSG);
	CHECK(out == NULL && tb.now == 0);
}

static uint64_t max_stored;	/* the longest record zstd_ckpt() wrote */

/* nkeys float32 keys k0.. of elems elements (key k's element i =
 * k * 10000 + i), each one zstd record in "data", with and without the
 * frame's content size. */
static char *zstd_ckpt_n(unsigned nkeys, uint64_t elems)
{
	static const char *const names[MAXKEYS] = {
		"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8", "k9",
		"k10", "k11", "k12", "k13", "k14", "k15" };
	uint64_t zoff[MAXKEYS], zlen[MAXKEYS], off = 0, i;
	size_t zcap = ZSTD_compressBound(elems * 4);
	float *vals = malloc(elems * 4);
	uint8_t *data = malloc(nkeys * zcap);
	msgpack_sbuffer sb;
	char *dir = cd_new();
	unsigned k;

	max_stored = 0;
	if (!dir || !vals || !data)
		goto out_free;
	for (k = 0; k < nkeys; k++) {
		for (i = 0; i < elems; i++)
			vals[i] = (float)(k * 10000 + i);
		zlen[k] = zc(data + off, zcap, vals, elems * 4, k % 2);
		zoff[k] = off;
		off += zlen[k];
		if (zlen[k] > max_stored)
			max_stored = zlen[k];
	}
	msgpack_sbuffer_init(&sb);
	mb_keys_meta_recs(&sb, names, nkeys, elems, 0, zoff, zlen,
			  "stream.zstd/1");
	if (cd_ckpt(dir, &sb, data, off)) {
		cd_remove(dir);
		dir = NULL;
	}
	msgpack_sbuffer_destroy(&sb);
out_free:
	free(vals);
	free(data);
	return dir;
}

static char *zstd_ckpt(void)
{
	return zstd_ckpt_n(NKEYS, ELEMS);
}

/* A cache that holds n decoded records of elems floats, and has room for
 * one more decode's stored bytes and zstd context but not its output. */
static uint64_t cap_for(unsigned n, uint64_t elems)
{
	return n * elems * 4 + ckpt_zstd_context_bytes() + max_stored;
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

/* Read [from, from + n) elements of key k of elems and check each. */
static bool read_part(struct ckpt_view *v, unsigned k, uint64_t from,
		      uint64_t n)
{
	float *got = malloc(n * 4 + 1);
	char name[8];
	uint32_t node;
	size_t len = 0;
	uint64_t i;
	bool ok;

	snprintf(name, sizeof(name), "k%u", k);
	node = ckpt_view_lookup(v, 0, name);
	ok = got && ckpt_view_read(v, 0, node, from * 4, n * 4, got, &len,
				   NULL) == 0 && len == n * 4;
	for (i = 0; ok && i < n; i++)
		ok = got[i] == (float)(k * 10000 + from + i);
	free(got);
	return ok;
}

/* Read key k whole and check every element. */
static bool read_key(struct ckpt_view *v, unsigned k)
{
	return read_part(v, k, 0, ELEMS);
}

static unsigned loaded(struct ckpt_meta *m)
{
	unsigned i, n = 0;

	for (i = 0; i < m->nzrecs; i++)
		n += ckpt_record_state(m, i) == CKPT_RECORD_LOADED;
	return n;
}

static uint64_t used_now(struct ckpt_meta *m)
{
	struct ckpt_record_cache_stats st;

	ckpt_record_cache_stats(m, &st);
	return st.used;
}

static void test_cache_lru(void)
{
	char *dir = zstd_ckpt();
	struct ckpt_meta *m = NULL;
	struct ckpt_view *v = NULL;
	uint64_t cap = cap_for(3, ELEMS);
	unsigned k;

	CHECK(dir && open_all(dir, cap, &m, &v) == 0);
	if (!v)
		goto out;
	CHECK(m->nzrecs == NKEYS);
	for (k = 0; k < NKEYS; k++) {
		CHECK(read_key(v, k));
		CHECK(used_now(m) <= cap);
		CHECK(loaded(m) == (k + 1 < 3 ? k + 1 : 3));
	}
	/* The three most recent stay; k0 was evicted and decodes again. */
	CHECK(ckpt_record_state(m, NKEYS - 1) == CKPT_RECORD_LOADED);
	CHECK(ckpt_record_state(m, 0) == CKPT_RECORD_COLD);
	CHECK(read_key(v, 0));
	CHECK(ckpt_record_state(m, 0) == CKPT_RECORD_LOADED);
	/* Loaded now: 6, 7, 0.  Touching 6 leaves 7 the least recent, so
	 * loading 1 evicts 7. */
	CHECK(read_key(v, 6));
	CHECK(read_key(v, 1));
	CHECK(ckpt_record_state(m, 7) == CKPT_RECORD_COLD);
	CHECK(ckpt_record_state(m, 5) == CKPT_RECORD_COLD);
	CHECK(ckpt_record_state(m, 6) == CKPT_RECORD_LOADED);
	CHECK(ckpt_record_state(m, 0) == CKPT_RECORD_LOADED);
	CHECK(ckpt_record_state(m, 1) == CKPT_RECORD_LOADED);
	CHECK(used_now(m) <= cap);
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
		CHECK(used_now(m) == 0);
		CHECK(ckpt_record_state(m, 2) == CKPT_RECORD_FAILED);
	}
	ckpt_view_free(v);
	ckpt_meta_free(m);
	cd_remove(dir);
}

/* Watches a cache while threads use it: the most loaded + reserved bytes
 * seen, over how many samples. */
struct sampler {
	struct ckpt_meta *m;
	atomic_bool stop;
	uint64_t worst;
	unsigned samples;
};

static void *sampler_main(void *arg)
{
	struct sampler *s = arg;
	struct ckpt_record_cache_stats st;

	while (!atomic_load(&s->stop)) {
		ckpt_record_cache_stats(s->m, &st);
		if (st.used + st.reserved > s->worst)
			s->worst = st.used + st.reserved;
		s->samples++;
		usleep(100);
	}
	return NULL;
}

struct reader {
	struct ckpt_view *v;
	unsigned seed;
	unsigned key;		/* big: this thread's key */
	uint64_t elems;
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

/* Read this thread's key in 16 pieces, each checked. */
static void *big_reader_main(void *arg)
{
	struct reader *r = arg;
	uint64_t piece = r->elems / 16, at;

	for (at = 0; at < r->elems; at += piece)
		if (!read_part(r->v, r->key, at, piece))
			r->bad++;
	return NULL;
}

/* Start n threads of fn over readers r, a sampler beside them; join. */
static void run_threads(struct ckpt_meta *m, struct reader *r, unsigned n,
			void *(*fn)(void *), struct sampler *s)
{
	pthread_t th[MAXKEYS], sth;
	unsigned i;

	*s = (struct sampler){ .m = m };
	atomic_init(&s->stop, false);
	pthread_create(&sth, NULL, sampler_main, s);
	for (i = 0; i < n; i++)
		pthread_create(&th[i], NULL, fn, &r[i]);
	for (i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	atomic_store(&s->stop, true);
	pthread_join(sth, NULL);
}

/* After run_threads(): every read was right, and loaded + reserved
 * stayed within cap while they ran, not only once they were done.  The
 * cache's accounting into *st. */
static void check_run(struct ckpt_meta *m, const struct reader *r,
		      unsigned n, const struct sampler *s, uint64_t cap,
		      struct ckpt_record_cache_stats *st)
{
	unsigned i;
	int bad = 0;

	for (i = 0; i < n; i++)
		bad += r[i].bad;
	CHECK(bad == 0);
	ckpt_record_cache_stats(m, st);
	CHECK(s->samples > 0);
	CHECK(s->worst <= cap);
	CHECK(st->high_water <= cap);
	CHECK(st->used <= cap && st->reserved == 0);
}

static void test_cache_threads(void)
{
	char *dir = zstd_ckpt();
	struct ckpt_meta *m = NULL;
	struct ckpt_view *v = NULL;
	struct ckpt_record_cache_stats st;
	uint64_t cap = cap_for(2, ELEMS);
	struct reader r[8];
	struct sampler s;
	int i;

	CHECK(dir && open_all(dir, cap, &m, &v) == 0);
	if (!v)
		goto out;
	for (i = 0; i < 8; i++)
		r[i] = (struct reader){ v, (unsigned)i * 7919u + 1, 0, 0, 0 };
	run_threads(m, r, 8, reader_main, &s);
	check_run(m, r, 8, &s, cap, &st);
	CHECK(st.high_water > 0);
out:
	ckpt_view_free(v);
	ckpt_meta_free(m);
	cd_remove(dir);
}

#define BIG_ELEMS (64 * 1024)	/* 256 KiB records */

/* MAXKEYS records of BIG_ELEMS floats, opened with a cache that holds one
 * decoded record and one decode but not two (its size into *cap). */
static int open_big(char **dir, uint64_t *cap, struct ckpt_meta **m,
		    struct ckpt_view **v)
{
	*dir = zstd_ckpt_n(MAXKEYS, BIG_ELEMS);
	*cap = cap_for(1, BIG_ELEMS) + BIG_ELEMS * 2;
	return *dir ? open_all(*dir, *cap, m, v) : -1;
}

/*
 * The case, scaled down: 16 threads each read their own record of
 * 256 KiB in pieces, with a cache that holds one decoded record and one
 * decode but not two: every read completes (no deadlock when every
 * reserved record is being read; alarm() turns a hang into a failure),
 * with the right bytes, and loaded + reserved never passes the cap.
 */
static void test_cache_bound_16_readers(void)
{
	const uint64_t elems = BIG_ELEMS;
	struct ckpt_meta *m = NULL;
	struct ckpt_view *v = NULL;
	struct ckpt_record_cache_stats st;
	struct reader r[MAXKEYS];
	struct sampler s;
	uint64_t cap;
	char *dir;
	unsigned i;

	CHECK(open_big(&dir, &cap, &m, &v) == 0);
	if (!v)
		goto out;
	alarm(120);
	for (i = 0; i < MAXKEYS; i++)
		r[i] = (struct reader){ v, 0, i, elems, 0 };
	run_threads(m, r, MAXKEYS, big_reader_main, &s);
	alarm(0);
	check_run(m, r, MAXKEYS, &s, cap, &st);
	CHECK(st.high_water > elems * 4);	/* it did decode */
	CHECK(st.waits > 0);			/* and had to take turns */
out:
	ckpt_view_free(v);
	ckpt_meta_free(m);
	cd_remove(dir);
}

struct warmer {
	struct ckpt_meta *m;
	uint32_t file;
};

static void *warm_main(void *arg)
{
	struct warmer *w = arg;

	ckpt_record_warm(w->m, w->file);
	return NULL;
}

/* Warming claims and reserves in one step: 16 threads warming 16
 * records of which one fits decode at most what fits, and a record that
 * is already loaded is not decoded again. */
static void test_warm_is_race_free(void)
{
	struct ckpt_meta *m = NULL;
	struct ckpt_view *v = NULL;
	struct ckpt_record_cache_stats st;
	struct warmer w[MAXKEYS];
	pthread_t th[MAXKEYS];
	uint64_t cap;
	unsigned i, n;
	char *dir;

	CHECK(open_big(&dir, &cap, &m, &v) == 0);
	if (!v)
		goto out;
	for (i = 0; i < MAXKEYS; i++) {
		w[i] = (struct warmer){ m, CKPT_ZREC | i };
		pthread_create(&th[i], NULL, warm_main, &w[i]);
	}
	for (i = 0; i < MAXKEYS; i++)
		pthread_join(th[i], NULL);
	ckpt_record_cache_stats(m, &st);
	CHECK(st.high_water <= cap);
	CHECK(st.waits == 0);		/* warming never waits */
	n = loaded(m);
	CHECK(n == 1 && st.loads == 1);
	for (i = 0; i < MAXKEYS; i++)
		if (ckpt_record_state(m, i) == CKPT_RECORD_LOADED)
			ckpt_record_warm(m, CKPT_ZREC | i);
	ckpt_record_cache_stats(m, &st);
	CHECK(st.loads == 1);
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
	TEST(test_cache_bound_16_readers);
	TEST(test_warm_is_race_free);
	return TEST_REPORT();
}
