/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the read-ahead window policy (core/view/readahead.c):
 * an in-order reader of a file, whatever its request size, is served
 * every byte once and reads at most twice what it was served at any
 * point (exactly once to the end); windows grow and stop at the cap and
 * the file's end; a reader that jumps reads directly; re-reads inside
 * the window hit it.  Through ckpt_readahead_read() over a store made to
 * look remote (an object store's paths, served from a local directory):
 * a read past a file's end returns only the file's bytes, and readers of
 * a large file (whose windows are published) run beside readers going
 * from small file to small file (whose batches claim streams and look
 * for windows) with every byte right: run under ThreadSanitizer by
 * tests/tsan-s3.sh.  Expected bytes come from the formula that wrote
 * them.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ckptfs.h"
#include "ckptdir.h"
#include "io/store_impl.h"
#include "view/readahead.h"
#include "view/view_types.h"
#include "testhelp.h"

/* Read [0, size) in requests of len; check the bound after each. */
static void in_order(uint64_t size, uint64_t len, uint64_t max)
{
	struct ckpt_ra_stream st = { .next = UINT64_MAX };
	uint64_t off, served = 0, read = 0, wlen, fills = 0, biggest = 0;
	enum ckpt_ra_action a;

	for (off = 0; off < size; off += len) {
		uint64_t n = size - off < len ? size - off : len;

		a = ckpt_ra_decide(&st, off, n, size, max, &wlen);
		if (a == CKPT_RA_FILL) {
			CHECK(wlen >= n && wlen <= max && off + wlen <= size);
			st.buf = (char *)&st;	/* any non-NULL window */
			st.boff = off;
			st.blen = wlen;
			read += wlen;
			fills++;
			biggest = wlen > biggest ? wlen : biggest;
		} else if (a == CKPT_RA_DIRECT) {
			read += n;
		} else {
			CHECK(off >= st.boff && off + n <= st.boff + st.blen);
		}
		served += n;
		CHECK(read <= 2 * served);
	}
	CHECK(read == size);		/* to the end: every byte once */
	CHECK(biggest <= max);
	if (size >= 8 * len && max >= 4 * len)
		CHECK(fills > 0 && biggest > 2 * len);
}

static void test_in_order(void)
{
	static const uint64_t sizes[] = { 1, 4096, 1000000, 16 << 20,
					  (16 << 20) + 12345 };
	static const uint64_t lens[] = { 1, 4096, 131072, 1 << 20, 999 };
	unsigned i, k;

	for (i = 0; i < 5; i++)
		for (k = 0; k < 5; k++) {
			in_order(sizes[i], lens[k], 8 << 20);
			in_order(sizes[i], lens[k], 1 << 20);
		}
}

/* A jump restarts: read directly, no window; a re-read inside the
 * window is a hit and does not move it. */
static void test_jumps_and_hits(void)
{
	struct ckpt_ra_stream st = { .next = UINT64_MAX };
	uint64_t wlen = 0, size = 64 << 20, len = 1 << 20;

	CHECK(ckpt_ra_decide(&st, 0, len, size, 8 << 20, &wlen) ==
	      CKPT_RA_DIRECT);
	CHECK(ckpt_ra_decide(&st, len, len, size, 8 << 20, &wlen) ==
	      CKPT_RA_FILL && wlen == 2 * len);
	st.buf = (char *)&st;
	st.boff = len;
	st.blen = wlen;
	CHECK(ckpt_ra_decide(&st, 2 * len, len, size, 8 << 20, &wlen) ==
	      CKPT_RA_HIT);
	CHECK(ckpt_ra_decide(&st, len, 4096, size, 8 << 20, &wlen) ==
	      CKPT_RA_HIT);
	/* a jump past the window: direct, and the next in-order read
	 * counts only from the jump */
	CHECK(ckpt_ra_decide(&st, 40 << 20, len, size, 8 << 20, &wlen) ==
	      CKPT_RA_DIRECT);
	CHECK(ckpt_ra_decide(&st, (40 << 20) + len, len, size, 8 << 20,
			     &wlen) == CKPT_RA_FILL && wlen == 2 * len);
	/* a request as big as the cap: direct */
	st.buf = NULL;
	CHECK(ckpt_ra_decide(&st, (40 << 20) + 2 * len, 8 << 20, size,
			     8 << 20, &wlen) == CKPT_RA_DIRECT);
}

/* ---- through ckpt_readahead_read(), over an "object store" ---- */

#define NSMALL 20
#define BIG_ELEMS 400000u	/* 1.6 MB: more than a small file */
#define SMALL_ELEMS 1000u	/* 4000 bytes */
#define NKEYS (NSMALL + 1)

/* Key k of the checkpoint: "big" (k = 0), then "s00".."s19"; element i
 * of key k is k * 1000 + i, keys stored back to back in "data". */
static uint64_t key_elems(unsigned k)
{
	return k ? SMALL_ELEMS : BIG_ELEMS;
}

static void key_name(unsigned k, char *name, size_t n)
{
	if (k)
		snprintf(name, n, "s%02u", k - 1);
	else
		snprintf(name, n, "big");
}

static void keys_meta(msgpack_sbuffer *sb)
{
	msgpack_packer pk;
	uint64_t zero = 0, elems, off = 0;
	char name[16];
	unsigned k;

	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	mb_header(&pk, NKEYS);
	for (k = 0; k < NKEYS; k++) {
		key_name(k, name, sizeof(name));
		elems = key_elems(k);
		mb_str(&pk, name);
		msgpack_pack_map(&pk, 4);
		mb_str(&pk, "type");
		mb_str(&pk, "tensor");
		mb_str(&pk, "dtype");
		mb_str(&pk, "float32");
		mb_str(&pk, "size");
		mb_dims(&pk, &elems, 1);
		mb_str(&pk, "chunks");
		msgpack_pack_array(&pk, 1);
		msgpack_pack_map(&pk, 2);
		mb_str(&pk, "offsets");
		mb_dims(&pk, &zero, 1);
		mb_str(&pk, "sizes");
		mb_dims(&pk, &elems, 1);
	}
	mb_str(&pk, "storage_data");
	msgpack_pack_array(&pk, NKEYS);
	for (k = 0; k < NKEYS; k++) {
		key_name(k, name, sizeof(name));
		msgpack_pack_map(&pk, 5);
		mb_str(&pk, "fqn");
		mb_str(&pk, name);
		mb_str(&pk, "offsets");
		mb_dims(&pk, &zero, 1);
		mb_str(&pk, "relative_path");
		mb_str(&pk, "data");
		mb_str(&pk, "offset");
		msgpack_pack_uint64(&pk, off);
		mb_str(&pk, "length");
		msgpack_pack_uint64(&pk, key_elems(k) * 4);
		off += key_elems(k) * 4;
	}
}

struct ra_fixture {
	char *dir;
	struct ckpt_meta *m;
	struct ckpt_view *v;
	uint32_t node[NKEYS];
};

/* The checkpoint written and its view built, its store made to look
 * like an object store (parallelism > 0: whole small files fetched in
 * batches, the next ones by threads).  Returns 0 or -1. */
static int fixture_new(struct ra_fixture *f)
{
	struct ckpt_view_opts o = { .world = 1, .dtype = CKPT_DTYPE_COUNT };
	uint64_t total = 0, i, at = 0;
	msgpack_sbuffer sb;
	char err[512], name[16];
	float *data;
	unsigned k;
	int rc = -1;

	memset(f, 0, sizeof(*f));
	for (k = 0; k < NKEYS; k++)
		total += key_elems(k);
	data = malloc(total * sizeof(float));
	f->dir = cd_new();
	if (!data || !f->dir)
		goto out_free;
	for (k = 0; k < NKEYS; k++)
		for (i = 0; i < key_elems(k); i++)
			data[at++] = (float)(k * 1000 + i);
	msgpack_sbuffer_init(&sb);
	keys_meta(&sb);
	rc = cd_ckpt(f->dir, &sb, data, total * sizeof(float));
	msgpack_sbuffer_destroy(&sb);
	if (rc || ckpt_meta_open(f->dir, &f->m, err, sizeof(err)) ||
	    ckpt_files_open(f->m, 0, 0, err, sizeof(err)) ||
	    ckpt_view_new(f->m, &o, &f->v, err, sizeof(err))) {
		fprintf(stderr, "  %s\n", rc ? "cannot write" : err);
		rc = -1;
		goto out_free;
	}
	f->m->store->parallelism = 4;
	for (k = 0; k < NKEYS; k++) {
		key_name(k, name, sizeof(name));
		f->node[k] = ckpt_view_lookup(f->v, 0, name);
		if (f->node[k] == UINT32_MAX)
			rc = -1;
	}
out_free:
	free(data);
	return rc;
}

static void fixture_free(struct ra_fixture *f)
{
	ckpt_view_free(f->v);
	ckpt_meta_free(f->m);
	cd_remove(f->dir);
}

/* Whether buf holds elements [first, first + n) of key k. */
static bool right_elems(const float *buf, unsigned k, uint64_t first,
			uint64_t n)
{
	uint64_t i;

	for (i = 0; i < n; i++)
		if (buf[i] != (float)(k * 1000 + first + i))
			return false;
	return true;
}

/* A read that asks for more than the file holds gets the file's bytes
 * only: a small file fetched whole into a window, and the tail of the
 * large one. */
static void test_read_past_end(void)
{
	struct ra_fixture f;
	struct ckpt_readahead *ra;
	struct ckpt_scratch *s = ckpt_scratch_new();
	size_t got = 0, len = 65536;
	float *buf = calloc(1, len);
	uint64_t big = BIG_ELEMS * 4;

	CHECK(s && buf);
	if (fixture_new(&f) || !s || !buf) {
		CHECK(0);
		goto out;
	}
	ra = ckpt_readahead_new(8 << 20, 64 << 20);
	CHECK(ra);
	CHECK(ckpt_readahead_read(ra, f.v, 0, f.node[1], 0, len, buf, &got,
				  s) == 0);
	CHECK(got == SMALL_ELEMS * 4);
	CHECK(right_elems(buf, 1, 0, SMALL_ELEMS));
	/* again, served from a window fetched ahead with the one before */
	CHECK(ckpt_readahead_read(ra, f.v, 0, f.node[2], 0, len, buf, &got,
				  s) == 0);
	CHECK(got == SMALL_ELEMS * 4);
	CHECK(right_elems(buf, 2, 0, SMALL_ELEMS));
	CHECK(ckpt_readahead_read(ra, f.v, 0, f.node[0], big - 400, len, buf,
				  &got, s) == 0);
	CHECK(got == 400);
	CHECK(right_elems(buf, 0, BIG_ELEMS - 100, 100));
	CHECK(ckpt_readahead_read(ra, f.v, 0, f.node[0], big, len, buf, &got,
				  s) == 0);
	CHECK(got == 0);
	ckpt_readahead_free(ra);
	fixture_free(&f);
out:
	ckpt_scratch_free(s);
	free(buf);
}

struct ra_reader {
	struct ckpt_readahead *ra;
	const struct ra_fixture *f;
	bool small;		/* the small files in order, else "big" */
	int rounds;
	bool right;
};

static void *ra_reader_main(void *arg)
{
	struct ra_reader *r = arg;
	struct ckpt_scratch *s = ckpt_scratch_new();
	size_t len = 131072, got, n = 0;
	float *buf = malloc(len);
	uint64_t off;
	unsigned k;
	int round;

	r->right = s && buf;
	for (round = 0; r->right && round < r->rounds; round++) {
		if (r->small) {
			for (k = 1; k < NKEYS && r->right; k++)
				r->right = !ckpt_readahead_read(
						   r->ra, r->f->v, 0,
						   r->f->node[k], 0,
						   SMALL_ELEMS * 4, buf,
						   &got, s) &&
					   got == SMALL_ELEMS * 4 &&
					   right_elems(buf, k, 0,
						       SMALL_ELEMS);
			continue;
		}
		/* requests within the file: this case does not depend on
		 * the clamp (test_read_past_end()) */
		for (off = 0; off < BIG_ELEMS * 4 && r->right; off += n) {
			n = BIG_ELEMS * 4 - off < len ? BIG_ELEMS * 4 - off :
							 len;
			r->right = !ckpt_readahead_read(r->ra, r->f->v, 0,
							r->f->node[0], off, n,
							buf, &got, s) &&
				   got == n &&
				   right_elems(buf, 0, off / 4, n / 4);
		}
	}
	ckpt_scratch_free(s);
	free(buf);
	return NULL;
}

/* Two readers of the large file (windows filled and published) beside
 * two readers going from small file to small file (batches that claim
 * streams, threads that fetch the next files): every byte right, and,
 * under ThreadSanitizer, no race between a window's publication and the
 * streams' scans. */
static void test_readers_race(void)
{
	struct ckpt_readahead *ra;
	struct ra_reader r[4];
	struct ra_fixture f;
	pthread_t t[4];
	int i, started = 0;

	if (fixture_new(&f)) {
		CHECK(0);
		return;
	}
	ra = ckpt_readahead_new(8 << 20, 64 << 20);
	CHECK(ra);
	for (i = 0; ra && i < 4; i++) {
		r[i] = (struct ra_reader){ ra, &f, i % 2 == 1, 10, false };
		if (pthread_create(&t[i], NULL, ra_reader_main, &r[i]))
			break;
		started++;
	}
	CHECK(started == 4);
	for (i = 0; i < started; i++) {
		pthread_join(t[i], NULL);
		CHECK(r[i].right);
	}
	ckpt_readahead_free(ra);
	fixture_free(&f);
}

int main(void)
{
	TEST(test_in_order);
	TEST(test_jumps_and_hits);
	TEST(test_read_past_end);
	TEST(test_readers_race);
	return TEST_REPORT();
}
