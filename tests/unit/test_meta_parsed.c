/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of parsed forms (model/meta_parsed.c): every checkpoint of
 * the fuzz corpora, native and torch (indexed lazily), comes back from
 * its form with the same arrays; a form of another tag or build, or
 * damaged, is refused; a form restamped after an edit that breaks a
 * bound is refused with a message, and random edits never make a read
 * leave the arrays (run under ASan by make check).
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckptfs.h"
#include "model/meta.h"
#include "torch/torch_index.h"
#include "parsedform.h"
#include "testhelp.h"

#define NATIVE_CORPUS "tests/fuzz/corpus"
#define TORCH_CORPUS "tests/fuzz/torch_corpus"
#define TAG 0x1234abcdull

/* File path's bytes from skip on, into *buf (caller frees). */
static size_t slurp(const char *path, size_t skip, uint8_t **buf)
{
	FILE *f = fopen(path, "rb");
	long n;

	*buf = NULL;
	if (!f)
		return 0;
	if (fseek(f, 0, SEEK_END) || (n = ftell(f)) <= (long)skip ||
	    fseek(f, (long)skip, SEEK_SET) ||
	    !(*buf = malloc((size_t)n - skip)) ||
	    fread(*buf, 1, (size_t)n - skip, f) != (size_t)n - skip) {
		fclose(f);
		free(*buf);
		*buf = NULL;
		return 0;
	}
	fclose(f);
	return (size_t)n - skip;
}

/* The checkpoint of corpus file path: a native image after the fuzz
 * header, or a pickle after the mode byte, indexed lazily; NULL when it
 * does not parse. */
static struct ckpt_meta *corpus_meta(const char *path, bool torch)
{
	struct ckpt_meta *m = NULL;
	uint8_t *buf, *img = NULL;
	size_t n = slurp(path, torch ? 1 : 16, &buf), len = 0;
	char err[1024];

	if (!buf)
		return NULL;
	if (!torch) {
		ckpt_meta_parse(buf, n, "corpus", &m, err, sizeof(err));
	} else if (!ckpt_torch_index_lazy(NULL, "corpus/.metadata", buf, n,
					  &img, &len, err, sizeof(err))) {
		ckpt_meta_parse(img, len, "corpus", &m, err, sizeof(err));
		free(img);
	}
	free(buf);
	return m;
}

/* m taken back from its form: 0 and *out, or the load's -errno. */
static int round_trip(const struct ckpt_meta *m, uint64_t tag,
		      struct ckpt_meta **out, char *err, size_t errlen)
{
	uint8_t *form;
	size_t len;

	*out = NULL;
	if (!pf_map(m, tag, &form, &len))
		return -ENOMEM;
	return ckpt_meta_parsed_load(form, len, TAG, "f.ckptfs-parsed", out,
				     err, errlen);
}

static void each_corpus(const char *dir, bool torch, unsigned *parsed,
			unsigned *lazy)
{
	struct dirent *d;
	DIR *dh = opendir(dir);
	char path[512], err[1024];

	CHECK(dh != NULL);
	while (dh && (d = readdir(dh))) {
		struct ckpt_meta *m, *back;

		if (d->d_name[0] == '.' || (torch && d->d_name[0] == 'r'))
			continue;	/* record_*: an archive, not a pickle */
		snprintf(path, sizeof(path), "%s/%s", dir, d->d_name);
		m = corpus_meta(path, torch);
		if (!m)
			continue;
		(*parsed)++;
		*lazy += m->lazy != NULL;
		CHECK(round_trip(m, TAG, &back, err, sizeof(err)) == 0);
		if (back && !pf_same(m, back)) {
			fprintf(stderr, "  %s: differs after its form\n", path);
			CHECK(0);
		}
		ckpt_meta_free(back);
		ckpt_meta_free(m);
	}
	if (dh)
		closedir(dh);
}

static void test_corpus_round_trip(void)
{
	unsigned parsed = 0, lazy = 0;

	each_corpus(NATIVE_CORPUS, false, &parsed, &lazy);
	CHECK(parsed >= 10);
	parsed = 0;
	each_corpus(TORCH_CORPUS, true, &parsed, &lazy);
	CHECK(parsed >= 3 && lazy >= 3);
}

/* A lazily indexed torch checkpoint of the corpus with a few keys. */
static struct ckpt_meta *sample(void)
{
	struct ckpt_meta *m = corpus_meta(TORCH_CORPUS
					  "/spend_torch113_world2", true);

	CHECK(m && m->lazy && m->nentries > 4 && m->nchunks > 4);
	return m;
}

static void test_other_tag_build_or_damage(void)
{
	struct ckpt_meta *m = sample(), *back;
	char err[1024] = "";
	uint8_t *form;
	size_t len;

	if (!m)
		return;
	CHECK(pf_map(m, TAG + 1, &form, &len));
	CHECK(ckpt_meta_parsed_load(form, len, TAG, "f", &back, err,
				    sizeof(err)) == -ESTALE && !back);
	CHECK(pf_map(m, TAG, &form, &len));
	form[9] ^= 1;	/* the build's layout */
	CHECK(ckpt_meta_parsed_load(form, len, TAG, "f", &back, err,
				    sizeof(err)) == -ESTALE);
	CHECK(pf_map(m, TAG, &form, &len));
	form[len - 1] ^= 0x40;	/* a bit of the body */
	CHECK(ckpt_meta_parsed_load(form, len, TAG, "dir/f", &back, err,
				    sizeof(err)) == -EBADMSG);
	CHECK(strstr(err, "dir/f: parsed form is corrupt") == err);
	CHECK(pf_map(m, TAG, &form, &len));
	ckpt_meta_parsed_restamp(form, len - 8, TAG);	/* cut short */
	CHECK(ckpt_meta_parsed_load(form, len - 8, TAG, "f", &back, err,
				    sizeof(err)) == -EINVAL);
	CHECK(strstr(err, "runs past the end") != NULL);
	CHECK(pf_map(m, TAG, &form, &len));
	CHECK(ckpt_meta_parsed_load(form, 16, TAG, "f", &back, err,
				    sizeof(err)) == -EBADMSG);
	CHECK(strstr(err, "f: not a parsed form (too short)") == err);
	CHECK(pf_map(m, TAG, &form, &len));
	form[0] = 'X';
	CHECK(ckpt_meta_parsed_load(form, len, TAG, "f", &back, err,
				    sizeof(err)) == -EBADMSG);
	ckpt_meta_free(m);
}

/* One edit of a meta's arrays that breaks a bound. */
typedef void (*edit_fn)(struct ckpt_meta *m);

static void e_fqn(struct ckpt_meta *m)
{
	m->entries[1].fqn = (uint32_t)m->strings_len;
}
static void e_ndim(struct ckpt_meta *m)
{
	m->entries[1].ndim = CKPT_MAX_DIMS + 1;
}
static void e_kind(struct ckpt_meta *m)
{
	m->entries[1].kind = 7;
}
static void e_size_at(struct ckpt_meta *m)
{
	m->entries[1].size_at = m->ndims;
}
static void e_chunk_first(struct ckpt_meta *m)
{
	m->entries[2].chunk_first++;
}
static void e_nbytes(struct ckpt_meta *m)
{
	m->entries[1].nbytes++;
}
static void e_file(struct ckpt_meta *m)
{
	m->chunks[0].file = m->nfiles;
}
static void e_dims_at(struct ckpt_meta *m)
{
	m->chunks[0].dims_at = m->ndims;
}
static void e_bool(struct ckpt_meta *m)
{
	*(unsigned char *)&m->chunks[0].has_xxh3 = 2;
}
static void e_strings_end(struct ckpt_meta *m)
{
	m->strings[m->strings_len - 1] = 'x';
}
static void e_path(struct ckpt_meta *m)
{
	m->files[0].path = (uint32_t)m->strings_len;
}
static void e_lazy_strides(struct ckpt_meta *m)
{
	uint32_t i;

	for (i = 0; i < m->nchunks; i++)
		if (m->located[i] == CKPT_LOC_PENDING)
			m->lazy[i].strides_at = m->ndims;
}
static void e_outside_shape(struct ckpt_meta *m)
{
	uint32_t i;

	for (i = 0; i < m->nentries; i++) {
		const struct ckpt_entry *e = &m->entries[i];

		if (e->kind == CKPT_KIND_TENSOR && e->ndim && e->nchunks) {
			m->dims[m->chunks[e->chunk_first].dims_at + e->ndim]++;
			return;
		}
	}
}
static void e_twice(struct ckpt_meta *m)
{
	m->entries[2].fqn = m->entries[1].fqn;
	m->entries[2].fqn_len = m->entries[1].fqn_len;
}
static void e_key_nul(struct ckpt_meta *m)
{
	m->strings[m->entries[1].fqn] = '\0';
}
static void e_key_utf8(struct ckpt_meta *m)
{
	m->strings[m->entries[1].fqn] = (char)0xff;
}
/* a pending record's strides over its tensor's shape: a locate would
 * rewrite the shape after it was checked */
static void e_strides_alias(struct ckpt_meta *m)
{
	uint32_t i;

	for (i = 0; i < m->nentries; i++) {
		const struct ckpt_entry *e = &m->entries[i];

		if (e->ndim && e->nchunks &&
		    m->lazy[e->chunk_first].strides_at != CKPT_NONE) {
			m->lazy[e->chunk_first].strides_at = e->size_at;
			return;
		}
	}
}
static void e_need(struct ckpt_meta *m)
{
	m->files[0].need = 0;
}
static void e_file_twice(struct ckpt_meta *m)
{
	m->files[1].path = m->files[0].path;
}

/* Edits of a checkpoint with zstd records: a bytes entry's record is
 * raw (a torch.save archive of a 0-d tensor would be read past as the
 * entry's bytes), and a guard is only a plain record's. */
static void e_zrec_bytes_archive(struct ckpt_meta *m)
{
	uint32_t i;

	for (i = 0; i < m->nzrecs; i++)
		m->zrecs[i].payload = CKPT_PAYLOAD_TORCH_SAVE;
}
static void e_zrec_no_transform(struct ckpt_meta *m)
{
	m->zrecs[0].ntransforms = 0;
}
static struct ckpt_guard guard;	/* the edits' own guards array */
static void guard_of(struct ckpt_meta *m, uint32_t ci, uint32_t len,
		     uint64_t off)
{
	guard.chunk = ci;
	guard.entry = (uint32_t)(ckpt_meta_chunk_entry(m, ci) - m->entries);
	guard.len = len;
	guard.off = off;
	m->guards = &guard;	/* not freed: the meta's arrays are a form's */
	m->nguards = 1;
}
static void e_guard_zrec(struct ckpt_meta *m)
{
	guard_of(m, m->zrecs[0].chunk, 30, 0);
}
static uint32_t plain_chunk(const struct ckpt_meta *m)
{
	uint32_t i;

	for (i = 0; i < m->nchunks; i++)
		if (!ckpt_is_zrec(m->chunks[i].file) &&
		    m->chunks[i].foff >= 64)
			return i;
	return 0;
}
static void e_guard_len0(struct ckpt_meta *m)
{
	guard_of(m, plain_chunk(m), 0, 0);
}
static void e_guard_past(struct ckpt_meta *m)
{
	uint32_t ci = plain_chunk(m);

	guard_of(m, ci, 30, m->chunks[ci].foff - 10);
}
static void e_guard_entry(struct ckpt_meta *m)
{
	guard_of(m, plain_chunk(m), 30, 0);
	guard.entry = guard.entry ? 0 : 1;
}

struct edit {
	const char *name;
	edit_fn fn;
};

/* Each of edits[0..n) of m is refused once restamped. */
static void refuse_each(const struct ckpt_meta *m, const struct edit *edits,
			size_t n)
{
	struct ckpt_meta *ed, *back;
	char err[1024];
	size_t i;

	for (i = 0; i < n; i++) {
		/* a copy whose arrays lie in a writable mapping */
		CHECK(round_trip(m, TAG, &ed, err, sizeof(err)) == 0);
		if (!ed)
			continue;
		edits[i].fn(ed);
		err[0] = '\0';
		if (round_trip(ed, TAG, &back, err, sizeof(err)) != -EINVAL ||
		    !strstr(err, "f.ckptfs-parsed: ")) {
			fprintf(stderr, "  edit %s: not refused (%s)\n",
				edits[i].name, err);
			CHECK(0);
		}
		ckpt_meta_free(back);
		ckpt_meta_free(ed);
	}
}

static void test_restamped_zrec_and_guard_edits_refused(void)
{
	static const struct edit edits[] = {
		{ "zrec_bytes_archive", e_zrec_bytes_archive },
		{ "zrec_no_transform", e_zrec_no_transform },
		{ "guard_zrec", e_guard_zrec }, { "guard_len0", e_guard_len0 },
		{ "guard_past", e_guard_past },
		{ "guard_entry", e_guard_entry },
	};
	struct ckpt_meta *m = corpus_meta(NATIVE_CORPUS "/zstd-records", false);
	struct ckpt_meta *back;
	char err[1024];
	uint32_t i, bytes = 0;

	CHECK(m && m->nzrecs > 1 && plain_chunk(m));
	if (!m)
		return;
	for (i = 0; i < m->nzrecs; i++)
		bytes += ckpt_meta_chunk_entry(m, m->zrecs[i].chunk)->kind ==
			 CKPT_KIND_BYTES;
	CHECK(bytes > 0);
	/* unedited, with a guard that fits: taken */
	CHECK(round_trip(m, TAG, &back, err, sizeof(err)) == 0);
	if (back) {
		struct ckpt_meta *again;

		guard_of(back, plain_chunk(back), 30, 0);
		CHECK(round_trip(back, TAG, &again, err, sizeof(err)) == 0);
		CHECK(again && again->nguards == 1);
		ckpt_meta_free(again);
		ckpt_meta_free(back);
	}
	refuse_each(m, edits, sizeof(edits) / sizeof(edits[0]));
	ckpt_meta_free(m);
}

static void test_restamped_edits_refused(void)
{
	static const struct edit edits[] = {
		{ "fqn", e_fqn }, { "ndim", e_ndim }, { "kind", e_kind },
		{ "size_at", e_size_at }, { "chunk_first", e_chunk_first },
		{ "nbytes", e_nbytes }, { "file", e_file },
		{ "dims_at", e_dims_at }, { "bool", e_bool },
		{ "strings_end", e_strings_end }, { "path", e_path },
		{ "lazy_strides", e_lazy_strides },
		{ "outside_shape", e_outside_shape }, { "twice", e_twice },
		{ "key_nul", e_key_nul }, { "key_utf8", e_key_utf8 },
		{ "strides_alias", e_strides_alias }, { "need", e_need },
		{ "file_twice", e_file_twice },
	};
	struct ckpt_meta *m = sample(), *ed;
	char err[1024];

	if (!m)
		return;
	CHECK(m->nfiles > 1);
	refuse_each(m, edits, sizeof(edits) / sizeof(edits[0]));
	/* A form is made only before anything is located. */
	CHECK(round_trip(m, TAG, &ed, err, sizeof(err)) == 0);
	if (ed) {
		struct ckpt_parsed_iov pv;

		ed->located[0] = CKPT_LOC_LOCATING;
		CHECK(ckpt_meta_parsed_pack(ed, TAG, &pv) == -EINVAL);
		ckpt_meta_free(ed);
	}
	ckpt_meta_free(m);
}

static uint64_t rng = 0x2545f4914f6cdd1dull;

static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* Read everything a loaded meta's users read: every chunk's description
 * and a view's plan of each file (ASan reports a read past an array). */
static void walk(struct ckpt_meta *m)
{
	struct ckpt_view_opts o = { .dtype = CKPT_DTYPE_COUNT, .world = 3,
				    .rank = 1 };
	struct ckpt_chunk_info ch;
	struct ckpt_view *v = NULL;
	struct ckpt_key_info k;
	char err[512];
	uint32_t i;

	for (i = 0; i < m->nentries; i++)
		(void)ckpt_meta_key(m, i, &k);
	for (i = 0; i < m->nchunks; i++)
		(void)ckpt_meta_chunk(m, i, &ch);
	if (ckpt_view_new(m, &o, &v, err, sizeof(err)) == 0)
		ckpt_view_free(v);
}

static void random_edits(const struct ckpt_meta *m)
{
	unsigned i, k, loaded = 0;
	struct ckpt_meta *back;
	char err[1024];
	uint8_t *form;
	size_t len;

	for (i = 0; i < 3000; i++) {
		if (!pf_map(m, TAG, &form, &len)) {
			CHECK(0);
			break;
		}
		for (k = 0; k <= rnd() % 4; k++) {
			size_t at = 128 + rnd() % (len - 128);

			form[at] = (uint8_t)(rnd() % 3 ? rnd() : 0xff);
		}
		ckpt_meta_parsed_restamp(form, len, TAG);
		err[0] = '\0';
		if (ckpt_meta_parsed_load(form, len, TAG, "f", &back, err,
					  sizeof(err)) == 0) {
			loaded++;
			walk(back);
			ckpt_meta_free(back);
		} else {
			CHECK(!back && strncmp(err, "f: ", 3) == 0);
		}
	}
	CHECK(loaded < 3000);	/* the edits were seen */
}

/* A lazily indexed torch checkpoint, and a native one with zstd records
 * (bytes entries' among them), each edited at random. */
static void test_random_edits_stay_inside(void)
{
	struct ckpt_meta *m = sample();
	struct ckpt_meta *z = corpus_meta(NATIVE_CORPUS "/zstd-records", false);

	CHECK(m && z);
	if (m)
		random_edits(m);
	if (z)
		random_edits(z);
	ckpt_meta_free(m);
	ckpt_meta_free(z);
}

int main(void)
{
	TEST(test_corpus_round_trip);
	TEST(test_other_tag_build_or_damage);
	TEST(test_restamped_edits_refused);
	TEST(test_restamped_zrec_and_guard_edits_refused);
	TEST(test_random_edits_stay_inside);
	return TEST_REPORT();
}
