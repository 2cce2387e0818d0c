/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of view reads (view/data_read.c through ckpt_view_read()):
 * dim-1 tilings for every (W, R), strided records read with bounded memory
 * and at most twice the delivered bytes, dtype and npy views, geometry
 * computed at build, names longer than a file name may be, EIO with a
 * reason (and as fields) when a data file is cut short, the batch's cancel
 * flag, world/rank refused, and -o verify checking each record once
 * however many readers come first.  Expected values come from the
 * formula that wrote the data, not from the engine.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "ckptfs.h"
#include "ckptdir.h"
#include "testhelp.h"
#include "view/data_read.h"
#include "view/view_types.h"

/* Open dir and build the view (W, R) with opts o (world/rank set here). */
static int open_view(const char *dir, struct ckpt_view_opts *o, uint32_t w,
		     uint32_t r, struct ckpt_meta **m, struct ckpt_view **v)
{
	char err[512];

	o->world = w;
	o->rank = r;
	if (ckpt_meta_open(dir, m, err, sizeof(err)) ||
	    ckpt_files_open(*m, 0, 0, err, sizeof(err))) {
		fprintf(stderr, "  %s\n", err);
		return -1;
	}
	if (ckpt_view_new(*m, o, v, err, sizeof(err))) {
		fprintf(stderr, "  %s\n", err);
		ckpt_meta_free(*m);
		return -1;
	}
	return 0;
}

/* The file node of the view's only key "t". */
static uint32_t node_t(const struct ckpt_view *v)
{
	return ckpt_view_lookup(v, 0, "t");
}

/* A [6,5] float32 tensor saved as two dim-1 chunks ([6,3] and [6,2]),
 * element (i, j) = i * 5 + j. */
static char *dim1_ckpt(void)
{
	struct mb_chunk ch[2] = { { { 0, 0 }, { 6, 3 } },
				  { { 0, 3 }, { 6, 2 } } };
	uint64_t shape[2] = { 6, 5 };
	msgpack_sbuffer sb;
	float data[30];
	char *dir = cd_new();
	unsigned i, j, n = 0;

	for (i = 0; i < 6; i++)
		for (j = 0; j < 3; j++)
			data[n++] = (float)(i * 5 + j);
	for (i = 0; i < 6; i++)
		for (j = 3; j < 5; j++)
			data[n++] = (float)(i * 5 + j);
	msgpack_sbuffer_init(&sb);
	mb_tensor_meta(&sb, shape, 2, ch, 2, "float32", 4);
	if (dir && cd_ckpt(dir, &sb, data, sizeof(data))) {
		cd_remove(dir);
		dir = NULL;
	}
	msgpack_sbuffer_destroy(&sb);
	return dir;
}

static void test_dim1_every_rank(void)
{
	char *dir = dim1_ckpt();
	uint32_t w, r;

	CHECK(dir != NULL);
	for (w = 1; dir && w <= 8; w++) {
		for (r = 0; r < w; r++) {
			struct ckpt_view_opts o = { .dtype = CKPT_DTYPE_COUNT };
			struct ckpt_scratch *s = ckpt_scratch_new();
			uint32_t cs = (6 + w - 1) / w, r0 = r * cs;
			uint32_t r1 = (r + 1) * cs < 6 ? (r + 1) * cs : 6;
			struct ckpt_entry_info e;
			struct ckpt_meta *m;
			struct ckpt_view *v;
			float want[30], got[30];
			size_t n = 0, k, g;
			uint32_t i, j;

			if (r0 > 6)
				r0 = 6;
			if (r1 < r0)
				r1 = r0;
			for (i = r0; i < r1; i++)
				for (j = 0; j < 5; j++)
					want[n++] = (float)(i * 5 + j);
			CHECK(open_view(dir, &o, w, r, &m, &v) == 0);
			CHECK(ckpt_view_entry(v, 0, node_t(v), &e) == 0);
			CHECK(e.size == n * 4 && e.offsets[0] == r0 &&
			      e.shape[0] == r1 - r0 && e.shape[1] == 5);
			CHECK(ckpt_view_read(v, 0, node_t(v), 0, 4096, got, &g,
					     s) == 0);
			CHECK(g == n * 4 && memcmp(got, want, g) == 0);
			/* Unaligned pieces. */
			for (k = 0; k + 7 <= n * 4; k += 5) {
				char piece[7];

				CHECK(ckpt_view_read(v, 0, node_t(v), k, 7, piece,
						     &g, s) == 0);
				CHECK(g == 7 &&
				      memcmp(piece, (char *)want + k, 7) == 0);
			}
			CHECK(ckpt_view_read(v, 0, node_t(v), n * 4, 10, got, &g,
					     s) == 0 && g == 0);
			ckpt_scratch_free(s);
			ckpt_view_free(v);
			ckpt_meta_free(m);
		}
	}
	cd_remove(dir);
}

/* The chunks a slice touches are decided at build: dim-1 rows touch both
 * chunks; an empty slice touches none. */
static void test_geometry_chunks(void)
{
	struct ckpt_view_opts o = { .dtype = CKPT_DTYPE_COUNT };
	char *dir = dim1_ckpt();
	const uint32_t *ch;
	struct ckpt_meta *m;
	struct ckpt_view *v;

	CHECK(dir && open_view(dir, &o, 3, 1, &m, &v) == 0);
	CHECK(ckpt_view_chunks(v, 0, node_t(v), &ch) == 2);
	ckpt_view_free(v);
	ckpt_meta_free(m);
	CHECK(open_view(dir, &o, 8, 7, &m, &v) == 0);	/* rows 7.. of 6 */
	CHECK(ckpt_view_chunks(v, 0, node_t(v), &ch) == 0);
	ckpt_view_free(v);
	ckpt_meta_free(m);
	cd_remove(dir);
}

#define TR 256
#define TC 512

static char *transposed_ckpt(void)
{
	float *data = malloc(TR * TC * sizeof(float));
	char *dir = cd_new();
	msgpack_sbuffer sb;
	uint64_t i, j;

	for (i = 0; data && i < TR; i++)
		for (j = 0; j < TC; j++)
			data[i + j * TR] = (float)(i * TC + j);
	msgpack_sbuffer_init(&sb);
	mb_transposed_meta(&sb, TR, TC);
	if (!data || !dir || cd_ckpt(dir, &sb, data, TR * TC * sizeof(float))) {
		cd_remove(dir);
		dir = NULL;
	}
	msgpack_sbuffer_destroy(&sb);
	free(data);
	return dir;
}

static bool rowmajor_ok(const char *buf, uint64_t off, size_t len)
{
	size_t k;

	for (k = 0; k < len; k++) {
		uint64_t b = off + k;
		float x = (float)(b / 4);
		unsigned char want[4];

		memcpy(want, &x, 4);
		if ((unsigned char)buf[k] != want[b % 4])
			return false;
	}
	return true;
}

/*
 * A transposed record (strides [1, rows]), read in 4 KiB requests, then at
 * random offsets: right bytes, never more than twice the delivered bytes
 * read from the data file, staging memory bounded by the request.  (The
 * earlier engine read the whole record for every request: 256x here.)
 */
static void test_strided_bounded(void)
{
	struct ckpt_view_opts o = { .dtype = CKPT_DTYPE_COUNT };
	struct ckpt_scratch *s = ckpt_scratch_new();
	uint64_t size = TR * TC * 4, off, delivered = 0;
	char *dir = transposed_ckpt(), *buf = malloc(1 << 20);
	struct ckpt_meta *m;
	struct ckpt_view *v;
	size_t got, maxreq = 0;
	unsigned k;

	CHECK(dir && buf && s && open_view(dir, &o, 1, 0, &m, &v) == 0);
	if (!dir || !buf || !s)
		goto out;
	for (off = 0; off < size; off += 4096) {
		CHECK(ckpt_view_read(v, 0, node_t(v), off, 4096, buf, &got, s) == 0);
		CHECK(got == 4096 && rowmajor_ok(buf, off, got));
	}
	CHECK(s->strided_read <= 2 * size);
	CHECK(s->cap_sstage <= 2 * 4096);
	s->strided_read = 0;
	srand(7);
	for (k = 0; k < 300; k++) {
		size_t len = 1 + (size_t)rand() % 20000;

		off = (uint64_t)rand() % size;
		CHECK(ckpt_view_read(v, 0, node_t(v), off, len, buf, &got, s) == 0);
		CHECK(got == (len < size - off ? len : size - off));
		CHECK(rowmajor_ok(buf, off, got));
		delivered += got;
		maxreq = len > maxreq ? len : maxreq;
	}
	/* Element-aligned pieces cost at most 2x; a cut element at either
	 * end of a request costs its whole 4 bytes. */
	CHECK(s->strided_read <= 2 * delivered + 300 * 8);
	CHECK(s->cap_sstage <= 2 * maxreq + 8);
	/* One 1 MiB request: the whole tensor (512 KiB) at once. */
	CHECK(ckpt_view_read(v, 0, node_t(v), 0, 1 << 20, buf, &got, s) == 0);
	CHECK(got == size && rowmajor_ok(buf, 0, got));
	ckpt_view_free(v);
	ckpt_meta_free(m);
out:
	free(buf);
	ckpt_scratch_free(s);
	cd_remove(dir);
}

/* --dtype bfloat16: each float32 value (small integers, exact) becomes
 * its top 16 bits; the entry shows the converted dtype. */
static void test_dtype_view(void)
{
	struct ckpt_view_opts o = { .dtype = CKPT_BF16 };
	struct ckpt_scratch *s = ckpt_scratch_new();
	char *dir = dim1_ckpt();
	struct ckpt_entry_info e;
	struct ckpt_meta *m;
	struct ckpt_view *v;
	uint16_t got[30];
	size_t g, k;

	CHECK(dir && open_view(dir, &o, 2, 1, &m, &v) == 0);
	CHECK(ckpt_view_entry(v, 0, node_t(v), &e) == 0);
	CHECK(e.dtype == CKPT_BF16 && e.saved_dtype == CKPT_F32);
	CHECK(e.size == 3 * 5 * 2);
	CHECK(ckpt_view_read(v, 0, node_t(v), 0, sizeof(got), got, &g, s) == 0);
	CHECK(g == 30);
	for (k = 0; k < 15; k++) {
		float x = (float)(15 + k);
		uint32_t bits;

		memcpy(&bits, &x, 4);
		CHECK(got[k] == bits >> 16);
	}
	ckpt_scratch_free(s);
	ckpt_view_free(v);
	ckpt_meta_free(m);
	cd_remove(dir);
}

/* --format npy: a 64-byte-aligned header, then the same bytes. */
static void test_npy_view(void)
{
	struct ckpt_view_opts o = { .dtype = CKPT_DTYPE_COUNT, .npy = true };
	struct ckpt_scratch *s = ckpt_scratch_new();
	char *dir = dim1_ckpt(), buf[4096];
	struct ckpt_entry_info e;
	struct ckpt_meta *m;
	struct ckpt_view *v;
	uint32_t node;
	size_t g, k;

	CHECK(dir && open_view(dir, &o, 3, 2, &m, &v) == 0);
	node = ckpt_view_lookup(v, 0, "t.npy");
	CHECK(node != CKPT_NONE);
	CHECK(ckpt_view_entry(v, 0, node, &e) == 0);
	CHECK(e.header > 0 && e.header % 64 == 0);
	CHECK(e.size == e.header + 2 * 5 * 4);
	CHECK(ckpt_view_read(v, 0, node, 0, sizeof(buf), buf, &g, s) == 0);
	CHECK(g == e.size && memcmp(buf, "\x93NUMPY\x01\x00", 8) == 0);
	CHECK(strstr(buf + 10, "'shape': (2, 5)") != NULL);
	for (k = 0; k < 10; k++) {
		float x;

		memcpy(&x, buf + e.header + 4 * k, 4);
		CHECK(x == (float)(20 + k));
	}
	ckpt_scratch_free(s);
	ckpt_view_free(v);
	ckpt_meta_free(m);
	cd_remove(dir);
}

/* A data file cut short after the mount's checks: EIO, and the reason
 * names the file, the offset and the key. */
static void test_truncated_eio(void)
{
	struct ckpt_view_opts o = { .dtype = CKPT_DTYPE_COUNT };
	struct ckpt_batch_opts bo = { .threads = 2 };
	struct ckpt_read_req req = { 0 };
	struct ckpt_error e;
	struct ckpt_scratch *s = ckpt_scratch_new();
	char *dir = dim1_ckpt(), path[4200], buf[256];
	struct ckpt_meta *m;
	struct ckpt_view *v;
	size_t g;

	CHECK(dir && open_view(dir, &o, 1, 0, &m, &v) == 0);
	snprintf(path, sizeof(path), "%s/data", dir);
	CHECK(truncate(path, 40) == 0);
	CHECK(ckpt_view_read(v, 0, node_t(v), 0, sizeof(buf), buf, &g, s) == -EIO);
	CHECK(strstr(ckpt_last_error(), "/data: offset") != NULL);
	CHECK(strstr(ckpt_last_error(), "key 't'") != NULL);
	CHECK(strstr(ckpt_last_error(), "truncated") != NULL);
	/* The same as fields, for callers that must not parse text. */
	ckpt_last_error_get(&e);
	CHECK(e.code == EIO && strcmp(e.path, path) == 0 &&
	      strcmp(e.key, "t") == 0 && e.offset == 0);
	CHECK(strcmp(e.message, ckpt_last_error()) == 0);
	/* A batch hands its worker's failure to the calling thread. */
	req.node = node_t(v);
	req.len = 24;
	req.dst = buf;
	CHECK(ckpt_view_read_batch_opts(v, &req, 1, &bo, NULL, 0) == -EIO);
	ckpt_last_error_get(&e);
	CHECK(e.code == EIO && strcmp(e.path, path) == 0 &&
	      strcmp(e.key, "t") == 0 && e.offset != CKPT_NO_OFFSET);
	ckpt_scratch_free(s);
	ckpt_view_free(v);
	ckpt_meta_free(m);
	cd_remove(dir);
}

/* The cancel flag: set before a batch, nothing is read and the batch is
 * -ECANCELED with that code as the last error; cleared, it reads. */
static void test_cancel_flag(void)
{
	struct ckpt_view_opts o = { .dtype = CKPT_DTYPE_COUNT };
	volatile int cancel = 1;
	struct ckpt_batch_opts bo = { .threads = 2, .cancel = &cancel };
	struct ckpt_read_req req = { 0 };
	char *dir = dim1_ckpt();
	struct ckpt_error e;
	struct ckpt_meta *m;
	struct ckpt_view *v;
	float buf[30];
	char err[256];

	CHECK(dir && open_view(dir, &o, 1, 0, &m, &v) == 0);
	memset(buf, 0xa5, sizeof(buf));
	req.node = node_t(v);
	req.len = sizeof(buf);
	req.dst = buf;
	CHECK(ckpt_view_read_batch_opts(v, &req, 1, &bo, err, sizeof(err)) ==
	      -ECANCELED);
	ckpt_last_error_get(&e);
	CHECK(e.code == ECANCELED && strcmp(err, "cancelled") == 0);
	CHECK(((unsigned char *)buf)[0] == 0xa5);
	cancel = 0;
	CHECK(ckpt_view_read_batch_opts(v, &req, 1, &bo, err, sizeof(err)) == 0);
	CHECK(buf[0] == 0.0f && buf[29] == 29.0f);
	ckpt_view_free(v);
	ckpt_meta_free(m);
	cd_remove(dir);
}

/* The library itself refuses world 0, a rank not below world and a rank
 * given twice (-EINVAL, naming it), instead of dividing by them. */
static void test_ranks_refused(void)
{
	struct ckpt_view_opts o = { .dtype = CKPT_DTYPE_COUNT };
	uint32_t twice[2] = { 1, 1 }, past[2] = { 0, 4 };
	char *dir = dim1_ckpt(), err[256];
	struct ckpt_meta *m;
	struct ckpt_view *v = NULL;

	CHECK(dir && ckpt_meta_open(dir, &m, err, sizeof(err)) == 0);
	o.world = 0;
	CHECK(ckpt_view_new(m, &o, &v, err, sizeof(err)) == -EINVAL && !v);
	CHECK(strstr(err, "world must be at least 1") != NULL);
	o.world = 4;
	o.rank = 4;
	CHECK(ckpt_view_new(m, &o, &v, err, sizeof(err)) == -EINVAL && !v);
	CHECK(strstr(err, "rank 4 is out of range") != NULL);
	o.rank = 0;
	o.ranks = past;
	o.nranks = 2;
	CHECK(ckpt_view_new(m, &o, &v, err, sizeof(err)) == -EINVAL && !v);
	o.ranks = twice;
	CHECK(ckpt_view_new(m, &o, &v, err, sizeof(err)) == -EINVAL && !v);
	CHECK(strstr(err, "rank 1 is given twice") != NULL);
	o.ranks = past;
	o.nranks = 1;
	CHECK(ckpt_view_new(m, &o, &v, err, sizeof(err)) == 0 && v);
	ckpt_view_free(v);
	ckpt_meta_free(m);
	cd_remove(dir);
}

/* A path component longer than 255 bytes cannot be a file name: the view
 * is refused with a message naming the key; 255 bytes is fine. */
static void test_long_names(void)
{
	char name[400], err[512];
	const char *names[1] = { name };
	struct ckpt_view_opts o = { .world = 1, .dtype = CKPT_DTYPE_COUNT };
	struct ckpt_meta *m;
	struct ckpt_view *v;
	msgpack_sbuffer sb;
	int rc;

	memset(name, 'x', 300);
	name[300] = '\0';
	msgpack_sbuffer_init(&sb);
	mb_keys_meta(&sb, names, 1, 4);
	CHECK(ckpt_meta_parse((const uint8_t *)sb.data, sb.size, "t/.metadata",
			      &m, err, sizeof(err)) == 0);
	rc = ckpt_view_new(m, &o, &v, err, sizeof(err));
	CHECK(rc == -ENAMETOOLONG && v == NULL);
	CHECK(strstr(err, "key 'xxxx") && strstr(err, "300 bytes") &&
	      strstr(err, "255"));
	ckpt_meta_free(m);
	msgpack_sbuffer_destroy(&sb);

	name[255] = '\0';
	msgpack_sbuffer_init(&sb);
	mb_keys_meta(&sb, names, 1, 4);
	CHECK(ckpt_meta_parse((const uint8_t *)sb.data, sb.size, "t/.metadata",
			      &m, err, sizeof(err)) == 0);
	CHECK(ckpt_view_new(m, &o, &v, err, sizeof(err)) == 0);
	ckpt_view_free(v);
	/* ... but not with --format npy's ".npy" added. */
	o.npy = true;
	CHECK(ckpt_view_new(m, &o, &v, err, sizeof(err)) == -ENAMETOOLONG);
	ckpt_meta_free(m);
	msgpack_sbuffer_destroy(&sb);
}

struct vreader {
	struct ckpt_view *v;
	uint32_t node;
	pthread_barrier_t *go;
	int rc;
	bool right;
	char err[1024];
};

static void *vreader_main(void *arg)
{
	struct vreader *r = arg;
	float buf[1024];
	size_t got = 0;
	unsigned i;

	pthread_barrier_wait(r->go);
	r->rc = ckpt_view_read(r->v, 0, r->node, 0, sizeof(buf), buf, &got,
			       NULL);
	snprintf(r->err, sizeof(r->err), "%s", ckpt_last_error());
	r->right = got == sizeof(buf);
	for (i = 0; r->right && i < 1024; i++)
		r->right = buf[i] == (float)i;
	return NULL;
}

static unsigned nreports;

static void count_report(void *ctx, const char *line)
{
	(void)ctx;
	(void)line;
	__atomic_add_fetch(&nreports, 1, __ATOMIC_RELAXED);
}

/* 16 threads read key `name` at once (the first reads of its record);
 * returns how many got -EIO and checks the others' bytes. */
static char last_err[1024];

static unsigned read_at_once(struct ckpt_view *v, const char *name)
{
	struct vreader r[16];
	pthread_barrier_t go;
	pthread_t th[16];
	unsigned i, eio = 0;

	pthread_barrier_init(&go, NULL, 16);
	for (i = 0; i < 16; i++) {
		r[i] = (struct vreader){ v, ckpt_view_lookup(v, 0, name), &go,
					 0, false, "" };
		pthread_create(&th[i], NULL, vreader_main, &r[i]);
	}
	for (i = 0; i < 16; i++) {
		pthread_join(th[i], NULL);
		if (r[i].rc == -EIO) {
			eio++;
			snprintf(last_err, sizeof(last_err), "%s", r[i].err);
		}
		else
			CHECK(r[i].rc == 0 && r[i].right);
	}
	pthread_barrier_destroy(&go);
	return eio;
}

/* -o verify: a record is checked once, by the first reader; readers that
 * come while it is being checked wait for the verdict instead of checking
 * it again.  A corrupt one fails every read and is reported once. */
static void test_verify_once(void)
{
	const char *names[2] = { "good", "bad" };
	const uint64_t elems = 4 << 20;	/* 16 MiB: checking takes a while */
	struct ckpt_view_opts o = { .dtype = CKPT_DTYPE_COUNT, .verify = true,
				    .report = count_report };
	float *data = malloc(2 * elems * 4);
	char *dir = cd_new();
	struct ckpt_meta *m = NULL;
	struct ckpt_view *v = NULL;
	uint64_t sums[2], i;
	msgpack_sbuffer sb;

	CHECK(data && dir);
	if (!data || !dir)
		goto out;
	for (i = 0; i < 2 * elems; i++)
		data[i] = (float)(i % elems);
	sums[0] = XXH3_64bits(data, elems * 4);
	sums[1] = XXH3_64bits(data + elems, elems * 4) ^ 1;
	msgpack_sbuffer_init(&sb);
	mb_keys_meta_sums(&sb, names, 2, elems, 0, NULL, NULL, NULL, sums);
	CHECK(cd_ckpt(dir, &sb, data, 2 * elems * 4) == 0);
	msgpack_sbuffer_destroy(&sb);
	CHECK(open_view(dir, &o, 1, 0, &m, &v) == 0);
	if (!v)
		goto out;
	CHECK(read_at_once(v, "good") == 0);
	CHECK(atomic_load(&v->nverified) == 1);
	CHECK(read_at_once(v, "good") == 0);
	CHECK(atomic_load(&v->nverified) == 1);
	CHECK(read_at_once(v, "bad") == 16);
	CHECK(atomic_load(&v->nverified) == 2);
	CHECK(nreports == 1);
	CHECK(strstr(last_err, "key 'bad'") && strstr(last_err, "xxh3 mismatch"));
out:
	ckpt_view_free(v);
	ckpt_meta_free(m);
	cd_remove(dir);
	free(data);
}

int main(void)
{
	TEST(test_dim1_every_rank);
	TEST(test_geometry_chunks);
	TEST(test_strided_bounded);
	TEST(test_dtype_view);
	TEST(test_npy_view);
	TEST(test_truncated_eio);
	TEST(test_cancel_flag);
	TEST(test_ranks_refused);
	TEST(test_long_names);
	TEST(test_verify_once);
	return TEST_REPORT();
}
