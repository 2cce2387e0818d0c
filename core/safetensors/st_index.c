/* SPDX-License-Identifier: MIT */
/* Indexing a directory of safetensors files: see st_index.h. */
#include "safetensors/st_index.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/errbuf.h"
#include "common/grow.h"
#include "common/json.h"
#include "common/mpout.h"
#include "io/datafiles.h"
#include "model/meta.h"

#define INDEX_NAME "model.safetensors.index.json"
#define INDEX_MAX ((size_t)64 << 20)
#define NAME_MAX_ST 4096

struct st_tensor {
	char *fqn;		/* owned */
	uint32_t file;
	uint8_t dtype;
	uint8_t ndim;
	uint64_t shape[CKPT_MAX_DIMS];
	uint64_t foff, len;
};

struct st {
	const char *dir;
	int dirfd;
	bool follow;
	char **files;		/* owned names */
	size_t nfiles, cap_files;
	struct st_tensor *t;
	size_t nt, cap_t;
	char *err;
	size_t errlen;
};

static const struct {
	const char *name;
	enum ckpt_dtype dt;
} dtypes[] = {
	{ "F64", CKPT_F64 }, { "F32", CKPT_F32 }, { "F16", CKPT_F16 },
	{ "BF16", CKPT_BF16 }, { "F8_E4M3", CKPT_F8E4M3 },
	{ "F8_E5M2", CKPT_F8E5M2 }, { "I64", CKPT_I64 }, { "I32", CKPT_I32 },
	{ "I16", CKPT_I16 }, { "I8", CKPT_I8 }, { "U8", CKPT_U8 },
	{ "BOOL", CKPT_BOOL },
};

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int add_file(struct st *s, const char *name)
{
	if (ckpt_grow((void **)&s->files, &s->cap_files, s->nfiles + 1,
		      sizeof(char *)))
		return -ENOMEM;
	s->files[s->nfiles] = strdup(name);
	if (!s->files[s->nfiles])
		return -ENOMEM;
	s->nfiles++;
	return 0;
}

/* Read exactly len bytes at off of fd. */
static int read_at(int fd, void *buf, size_t len, uint64_t off)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = pread(fd, (char *)buf + got, len - got,
				  (off_t)(off + got));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -EIO;
		got += (size_t)n;
	}
	return 0;
}

/* One tensor entry of file fi's header. */
static int one_tensor(struct st *s, uint32_t fi, const char *where,
		      const struct ckpt_json_doc *doc,
		      const struct ckpt_json *v, const char *fqn,
		      uint64_t data_at, uint64_t data_len)
{
	const struct ckpt_json *dt = ckpt_json_get(doc, v, "dtype");
	const struct ckpt_json *sh = ckpt_json_get(doc, v, "shape");
	const struct ckpt_json *of = ckpt_json_get(doc, v, "data_offsets");
	const struct ckpt_json *b, *e;
	struct st_tensor *t;
	char name[32];
	uint64_t numel = 1, bytes;
	uint32_t d;
	size_t k;

	if (!dt || ckpt_json_str(dt, name, sizeof(name)) < 0 || !sh ||
	    sh->type != CKPT_JSON_ARR || !of || of->type != CKPT_JSON_ARR)
		return ckpt_errf(s->err, s->errlen, -EINVAL,
				 "%s: key '%s': needs dtype, shape and data_offsets",
				 where, fqn);
	for (k = 0; k < sizeof(dtypes) / sizeof(dtypes[0]); k++)
		if (!strcmp(name, dtypes[k].name))
			break;
	if (k == sizeof(dtypes) / sizeof(dtypes[0]))
		return ckpt_errf(s->err, s->errlen, -EINVAL,
				 "%s: key '%s': dtype '%s' is not supported",
				 where, fqn, name);
	if (sh->n > CKPT_MAX_DIMS)
		return ckpt_errf(s->err, s->errlen, -EINVAL,
				 "%s: key '%s': %u dims, more than %d",
				 where, fqn, sh->n, CKPT_MAX_DIMS);
	if (ckpt_grow((void **)&s->t, &s->cap_t, s->nt + 1, sizeof(*s->t)))
		return ckpt_errf(s->err, s->errlen, -ENOMEM, "out of memory");
	t = &s->t[s->nt];
	memset(t, 0, sizeof(*t));
	t->file = fi;
	t->dtype = (uint8_t)dtypes[k].dt;
	t->ndim = (uint8_t)sh->n;
	for (d = 0; d < sh->n; d++) {
		const struct ckpt_json *x = ckpt_json_at(doc, sh, d);

		if (x->type != CKPT_JSON_INT ||
		    __builtin_mul_overflow(numel, x->v, &numel))
			return ckpt_errf(s->err, s->errlen, -EINVAL,
					 "%s: key '%s': shape is not a list of sizes that fit 64 bits",
					 where, fqn);
		t->shape[d] = x->v;
	}
	b = ckpt_json_at(doc, of, 0);
	e = ckpt_json_at(doc, of, 1);
	if (of->n != 2 || b->type != CKPT_JSON_INT ||
	    e->type != CKPT_JSON_INT || b->v > e->v || e->v > data_len)
		return ckpt_errf(s->err, s->errlen, -EINVAL,
				 "%s: key '%s': data_offsets must be [begin, end] with begin <= end <= %" PRIu64 " (the data's length)",
				 where, fqn, data_len);
	if (__builtin_mul_overflow(numel, ckpt_dtype_size(dtypes[k].dt),
				   &bytes) || bytes != e->v - b->v)
		return ckpt_errf(s->err, s->errlen, -EINVAL,
				 "%s: key '%s': data_offsets span %" PRIu64 " bytes, but %s x %u dims needs another size",
				 where, fqn, e->v - b->v, name, sh->n);
	t->foff = data_at + b->v;
	t->len = bytes;
	t->fqn = strdup(fqn);
	if (!t->fqn)
		return ckpt_errf(s->err, s->errlen, -ENOMEM, "out of memory");
	s->nt++;
	return 0;
}

static int cmp_foff(const void *a, const void *b)
{
	const struct st_tensor *x = *(struct st_tensor *const *)a;
	const struct st_tensor *y = *(struct st_tensor *const *)b;

	return x->foff < y->foff ? -1 : x->foff > y->foff;
}

/* Tensors of one file must not share bytes. */
static int check_overlaps(struct st *s, size_t from, const char *where)
{
	size_t n = s->nt - from, i;
	struct st_tensor **v;
	int rc = 0;

	if (n < 2)
		return 0;
	v = malloc(n * sizeof(*v));
	if (!v)
		return ckpt_errf(s->err, s->errlen, -ENOMEM, "out of memory");
	for (i = 0; i < n; i++)
		v[i] = &s->t[from + i];
	qsort(v, n, sizeof(*v), cmp_foff);
	for (i = 1; i < n && !rc; i++) {
		if (v[i - 1]->len && v[i]->len &&
		    v[i - 1]->foff + v[i - 1]->len > v[i]->foff)
			rc = ckpt_errf(s->err, s->errlen, -EINVAL,
				       "%s: keys '%s' and '%s': their data_offsets overlap",
				       where, v[i - 1]->fqn, v[i]->fqn);
	}
	free(v);
	return rc;
}

static int one_file(struct st *s, uint32_t fi)
{
	char where[4352], fqn[NAME_MAX_ST];
	struct ckpt_json_doc doc = { 0 };
	const struct ckpt_json *root;
	uint8_t le[8];
	uint64_t hlen = 0, data_len;
	size_t first = s->nt;
	struct stat st;
	char *head = NULL;
	uint32_t k, c;
	int fd, rc, i;

	snprintf(where, sizeof(where), "%s/%s", s->dir, s->files[fi]);
	fd = ckpt_open_beneath(s->dirfd, s->files[fi], s->follow);
	if (fd < 0)
		return ckpt_errf(s->err, s->errlen, -errno, "%s: cannot open: %s",
				 where, strerror(errno));
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		rc = ckpt_errf(s->err, s->errlen, -EINVAL,
			       "%s: not a regular file", where);
		goto out_close;
	}
	if ((uint64_t)st.st_size < 8 || read_at(fd, le, 8, 0)) {
		rc = ckpt_errf(s->err, s->errlen, -EINVAL,
			       "%s: shorter than a safetensors header", where);
		goto out_close;
	}
	for (i = 7; i >= 0; i--)
		hlen = hlen << 8 | le[i];
	if (hlen > CKPT_ST_HEADER_MAX || hlen > (uint64_t)st.st_size - 8) {
		rc = ckpt_errf(s->err, s->errlen, -EINVAL,
			       "%s: header length %" PRIu64 " runs past the file (%" PRIu64 " bytes) or the %" PRIu64 "-byte cap",
			       where, hlen, (uint64_t)st.st_size,
			       CKPT_ST_HEADER_MAX);
		goto out_close;
	}
	head = malloc(hlen ? hlen : 1);
	if (!head) {
		rc = ckpt_errf(s->err, s->errlen, -ENOMEM, "out of memory");
		goto out_close;
	}
	if (read_at(fd, head, hlen, 8)) {
		rc = ckpt_errf(s->err, s->errlen, -EIO, "%s: cannot read its header",
			       where);
		goto out_head;
	}
	rc = ckpt_json_parse(head, hlen, where, &doc, s->err, s->errlen);
	if (rc)
		goto out_head;
	root = &doc.nodes[0];
	if (root->type != CKPT_JSON_OBJ) {
		rc = ckpt_errf(s->err, s->errlen, -EINVAL,
			       "%s: header is not a JSON object", where);
		goto out_doc;
	}
	data_len = (uint64_t)st.st_size - 8 - hlen;
	for (k = 0, c = root->first; k + 1 < root->n; k += 2) {
		const struct ckpt_json *kn = &doc.nodes[c];
		const struct ckpt_json *v = &doc.nodes[kn->next];

		c = v->next;	/* walk the siblings: O(n), not O(n^2) */

		if (ckpt_json_str(kn, fqn, sizeof(fqn)) <= 0) {
			rc = ckpt_errf(s->err, s->errlen, -EINVAL,
				       "%s: byte %u: a key that is empty, too long or holds NUL",
				       where, kn->at);
			goto out_doc;
		}
		if (!strcmp(fqn, "__metadata__"))
			continue;
		if (v->type != CKPT_JSON_OBJ) {
			rc = ckpt_errf(s->err, s->errlen, -EINVAL,
				       "%s: key '%s': not an object", where, fqn);
			goto out_doc;
		}
		rc = one_tensor(s, fi, where, &doc, v, fqn, 8 + hlen, data_len);
		if (rc)
			goto out_doc;
	}
	rc = check_overlaps(s, first, where);
out_doc:
	ckpt_json_free(&doc);
out_head:
	free(head);
out_close:
	close(fd);
	return rc;
}

/* model.safetensors.index.json, if there is one: its weight_map's files,
 * and every key it names must be in the file it names. */
static int read_index(struct st *s, struct ckpt_json_doc *doc, char **text,
		      const struct ckpt_json **map)
{
	char where[4352];
	struct stat st;
	size_t len;
	int fd, rc;

	*map = NULL;
	*text = NULL;
	fd = ckpt_open_beneath(s->dirfd, INDEX_NAME, s->follow);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	snprintf(where, sizeof(where), "%s/%s", s->dir, INDEX_NAME);
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) ||
	    (uint64_t)st.st_size > INDEX_MAX) {
		close(fd);
		return ckpt_errf(s->err, s->errlen, -EINVAL,
				 "%s: not a regular file of at most %zu bytes",
				 where, INDEX_MAX);
	}
	len = (size_t)st.st_size;
	*text = malloc(len ? len : 1);
	rc = !*text ? -ENOMEM : read_at(fd, *text, len, 0);
	close(fd);
	if (rc)
		return ckpt_errf(s->err, s->errlen, rc, "%s: cannot read it",
				 where);
	rc = ckpt_json_parse(*text, len, where, doc, s->err, s->errlen);
	if (rc)
		return rc;
	*map = ckpt_json_get(doc, &doc->nodes[0], "weight_map");
	if (!*map || (*map)->type != CKPT_JSON_OBJ)
		return ckpt_errf(s->err, s->errlen, -EINVAL,
				 "%s: no weight_map object", where);
	return 0;
}

static int cmp_fqn(const void *a, const void *b)
{
	return strcmp(((const struct st_tensor *)a)->fqn,
		      ((const struct st_tensor *)b)->fqn);
}

static int check_index(struct st *s, const struct ckpt_json_doc *doc,
		       const struct ckpt_json *map)
{
	char key[NAME_MAX_ST], file[NAME_MAX_ST];
	struct st_tensor probe, *hit;
	uint32_t k, c;

	for (k = 0, c = map->first; k + 1 < map->n; k += 2) {
		const struct ckpt_json *kn = &doc->nodes[c];
		const struct ckpt_json *fn = &doc->nodes[kn->next];

		c = fn->next;

		if (ckpt_json_str(kn, key, sizeof(key)) <= 0 ||
		    ckpt_json_str(fn, file, sizeof(file)) <= 0)
			return ckpt_errf(s->err, s->errlen, -EINVAL,
					 "%s/" INDEX_NAME ": byte %u: weight_map entries must be non-empty strings",
					 s->dir, kn->at);
		probe.fqn = key;	/* s->t is sorted by FQN here */
		hit = bsearch(&probe, s->t, s->nt, sizeof(*s->t), cmp_fqn);
		if (!hit)
			return ckpt_errf(s->err, s->errlen, -EINVAL,
					 "%s/" INDEX_NAME ": key '%s' is in no safetensors file",
					 s->dir, key);
		if (strcmp(s->files[hit->file], file))
			return ckpt_errf(s->err, s->errlen, -EINVAL,
					 "%s/" INDEX_NAME ": key '%s' is in %s, but the index says %s",
					 s->dir, key, s->files[hit->file], file);
	}
	return 0;
}


static int write_image(struct st *s, uint8_t **img, size_t *len)
{
	static const uint64_t zeros[CKPT_MAX_DIMS];
	struct ckpt_mpout o;
	size_t i;
	int rc;

	ckpt_mpout_init(&o);
	msgpack_pack_map(&o.pk, 4);
	ckpt_pack_cstr(&o.pk, "format");
	ckpt_pack_cstr(&o.pk, CKPT_FORMAT_NAME);
	ckpt_pack_cstr(&o.pk, "version");
	msgpack_pack_uint64(&o.pk, CKPT_FORMAT_VERSION);
	ckpt_pack_cstr(&o.pk, "state_dict_metadata");
	msgpack_pack_map(&o.pk, s->nt);
	for (i = 0; i < s->nt; i++) {
		const struct st_tensor *t = &s->t[i];

		ckpt_pack_cstr(&o.pk, t->fqn);
		msgpack_pack_map(&o.pk, 4);
		ckpt_pack_cstr(&o.pk, "type");
		ckpt_pack_cstr(&o.pk, "tensor");
		ckpt_pack_cstr(&o.pk, "dtype");
		ckpt_pack_cstr(&o.pk, ckpt_dtype_name((enum ckpt_dtype)t->dtype));
		ckpt_pack_cstr(&o.pk, "size");
		ckpt_pack_dims(&o.pk, t->shape, t->ndim);
		ckpt_pack_cstr(&o.pk, "chunks");
		msgpack_pack_array(&o.pk, 1);
		msgpack_pack_map(&o.pk, 2);
		ckpt_pack_cstr(&o.pk, "offsets");
		ckpt_pack_dims(&o.pk, zeros, t->ndim);
		ckpt_pack_cstr(&o.pk, "sizes");
		ckpt_pack_dims(&o.pk, t->shape, t->ndim);
	}
	ckpt_pack_cstr(&o.pk, "storage_data");
	msgpack_pack_array(&o.pk, s->nt);
	for (i = 0; i < s->nt; i++) {
		const struct st_tensor *t = &s->t[i];

		msgpack_pack_map(&o.pk, 5);
		ckpt_pack_cstr(&o.pk, "fqn");
		ckpt_pack_cstr(&o.pk, t->fqn);
		ckpt_pack_cstr(&o.pk, "offsets");
		ckpt_pack_dims(&o.pk, zeros, t->ndim);
		ckpt_pack_cstr(&o.pk, "relative_path");
		ckpt_pack_cstr(&o.pk, s->files[t->file]);
		ckpt_pack_cstr(&o.pk, "offset");
		msgpack_pack_uint64(&o.pk, t->foff);
		ckpt_pack_cstr(&o.pk, "length");
		msgpack_pack_uint64(&o.pk, t->len);
	}
	rc = ckpt_mpout_finish(&o, img, len);
	ckpt_mpout_destroy(&o);
	return rc ? ckpt_errf(s->err, s->errlen, rc, "out of memory") : 0;
}

int ckpt_safetensors_index(const char *dir, int dirfd, bool follow,
			   uint8_t **img, size_t *len, char *err,
			   size_t errlen)
{
	struct st s = { .dir = dir, .dirfd = dirfd, .follow = follow,
			.err = err, .errlen = errlen };
	struct ckpt_json_doc idoc = { 0 };
	const struct ckpt_json *map = NULL;
	char *itext = NULL;
	struct dirent *de;
	size_t i;
	DIR *d;
	int rc = 0;

	*img = NULL;
	*len = 0;
	d = opendir(dir);
	if (!d)
		return -ENOENT;
	while (!rc && (de = readdir(d))) {
		size_t n = strlen(de->d_name);

		if (n > 12 && !strcmp(de->d_name + n - 12, ".safetensors"))
			rc = add_file(&s, de->d_name);
	}
	closedir(d);
	if (rc) {
		rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
		goto out_free;
	}
	if (!s.nfiles) {
		rc = -ENOENT;
		goto out_free;
	}
	qsort(s.files, s.nfiles, sizeof(char *), cmp_str);
	for (i = 0; i < s.nfiles && !rc; i++)
		rc = one_file(&s, (uint32_t)i);
	if (rc)
		goto out_free;
	/* One key in two files is an error naming both. */
	qsort(s.t, s.nt, sizeof(*s.t), cmp_fqn);
	for (i = 1; i < s.nt; i++) {
		if (!strcmp(s.t[i - 1].fqn, s.t[i].fqn)) {
			rc = ckpt_errf(err, errlen, -EINVAL,
				       "%s: key '%s' is in both %s and %s", dir,
				       s.t[i].fqn, s.files[s.t[i - 1].file],
				       s.files[s.t[i].file]);
			goto out_free;
		}
	}
	rc = read_index(&s, &idoc, &itext, &map);
	if (!rc && map)
		rc = check_index(&s, &idoc, map);
	if (!rc)
		rc = write_image(&s, img, len);
out_free:
	ckpt_json_free(&idoc);
	free(itext);
	for (i = 0; i < s.nt; i++)
		free(s.t[i].fqn);
	free(s.t);
	for (i = 0; i < s.nfiles; i++)
		free(s.files[i]);
	free(s.files);
	return rc;
}
