/* SPDX-License-Identifier: MIT */
/* Indexing a directory of safetensors files: see st_index.h. */
#include "safetensors/st_index.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errbuf.h"
#include "common/grow.h"
#include "common/json.h"
#include "common/mpout.h"
#include "io/store.h"
#include "model/meta.h"
#include "safetensors/st_blob.h"

#define INDEX_NAME "model.safetensors.index.json"
#define INDEX_MAX ((size_t)64 << 20)
#define NAME_MAX_ST 4096

struct st {
	const char *dir;	/* the store's root, for messages */
	struct ckpt_store *store;
	int64_t mtime_sec, mtime_nsec;	/* the newest file read */
	char **files;		/* owned names */
	size_t nfiles, cap_files;
	struct ckpt_st_set set;
	char *err;
	size_t errlen;
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

/* The newest modification time of the files read is the checkpoint's. */
static void saw(struct st *s, const struct ckpt_store_file_info *fi)
{
	if (fi->mtime_sec > s->mtime_sec ||
	    (fi->mtime_sec == s->mtime_sec && fi->mtime_nsec > s->mtime_nsec)) {
		s->mtime_sec = fi->mtime_sec;
		s->mtime_nsec = fi->mtime_nsec;
	}
}

/* The tensors of safetensors file fi. */
static int one_file(struct st *s, uint32_t fi)
{
	struct ckpt_store_file_info info;
	char where[4352];
	uint32_t id;
	int rc;

	snprintf(where, sizeof(where), "%s/%s", s->dir, s->files[fi]);
	rc = ckpt_store_open(s->store, s->files[fi], &id, &info, s->err,
			     s->errlen);
	if (rc)
		return rc;
	saw(s, &info);
	return ckpt_st_read_blob(s->store, id, 0, info.size, fi, where,
				 &s->set, s->err, s->errlen);
}

/* model.safetensors.index.json, if there is one: its weight_map's files,
 * and every key it names must be in the file it names. */
static int read_index(struct st *s, struct ckpt_json_doc *doc, char **text,
		      const struct ckpt_json **map)
{
	struct ckpt_store_file_info info;
	char where[4352];
	size_t len;
	int rc;

	*map = NULL;
	*text = NULL;
	rc = ckpt_store_read_file(s->store, INDEX_NAME, INDEX_MAX,
				  (uint8_t **)text, &len, &info, s->err,
				  s->errlen);
	if (rc == -ENOENT)
		return 0;
	if (rc)
		return rc;
	saw(s, &info);
	snprintf(where, sizeof(where), "%s/%s", s->dir, INDEX_NAME);
	rc = ckpt_json_parse(*text, len, where, doc, s->err, s->errlen);
	if (rc)
		return rc;
	*map = ckpt_json_get(doc, &doc->nodes[0], "weight_map");
	if (!*map || (*map)->type != CKPT_JSON_OBJ)
		return ckpt_errf(s->err, s->errlen, -EINVAL,
				 "%s: no weight_map object", where);
	return 0;
}

/* The distinct file names a weight_map names, sorted: *out (caller frees
 * each and the array), *n.  0 or -ENOMEM. */
static int listed_files(const struct ckpt_json_doc *doc,
			const struct ckpt_json *map, char ***out, size_t *n)
{
	char file[NAME_MAX_ST], **names;
	size_t nl = 0, i, u = 0;
	uint32_t k, c;

	names = malloc((map->n / 2 + 1) * sizeof(*names));
	if (!names)
		return -ENOMEM;
	for (k = 0, c = map->first; k + 1 < map->n; k += 2) {
		const struct ckpt_json *fn = &doc->nodes[doc->nodes[c].next];

		c = fn->next;
		if (ckpt_json_str(fn, file, sizeof(file)) <= 0)
			continue;	/* check_index() names it */
		names[nl] = strdup(file);
		if (!names[nl]) {
			while (nl)
				free(names[--nl]);
			free(names);
			return -ENOMEM;
		}
		nl++;
	}
	qsort(names, nl, sizeof(*names), cmp_str);
	for (i = 0; i < nl; i++) {
		if (u && !strcmp(names[u - 1], names[i]))
			free(names[i]);
		else
			names[u++] = names[i];
	}
	*out = names;
	*n = u;
	return 0;
}

/*
 * When model.safetensors.index.json exists it governs, as Hugging Face's
 * loaders have it: .safetensors files its weight_map does not name (a
 * stale shard of an earlier save, say) are left out, and *warning (caller
 * frees) names them in one line.  0 or -errno.
 */
static int drop_unlisted(struct st *s, const struct ckpt_json_doc *doc,
			 const struct ckpt_json *map, char **warning)
{
	char **listed = NULL, *w = NULL;
	size_t nl = 0, i, kept = 0, len = 0, ndrop = 0;
	FILE *f;
	int rc;

	rc = listed_files(doc, map, &listed, &nl);
	f = rc ? NULL : open_memstream(&w, &len);
	if (!f) {
		rc = ckpt_errf(s->err, s->errlen, -ENOMEM, "out of memory");
		goto out_listed;
	}
	for (i = 0; i < s->nfiles; i++) {
		if (bsearch(&s->files[i], listed, nl, sizeof(*listed),
			    cmp_str)) {
			s->files[kept++] = s->files[i];
			continue;
		}
		fprintf(f, "%s%s", ndrop++ ? ", " : "", s->files[i]);
		free(s->files[i]);
	}
	s->nfiles = kept;
	if (fclose(f) || !w) {
		rc = ckpt_errf(s->err, s->errlen, -ENOMEM, "out of memory");
		goto out_w;
	}
	if (ndrop && asprintf(warning, "%s/" INDEX_NAME " does not list %s, so %s ignored: %s",
			      s->dir, ndrop > 1 ? "these files" : "this file",
			      ndrop > 1 ? "they are" : "it is", w) < 0) {
		*warning = NULL;
		rc = ckpt_errf(s->err, s->errlen, -ENOMEM, "out of memory");
	}
out_w:
	free(w);
out_listed:
	for (i = 0; i < nl; i++)
		free(listed[i]);
	free(listed);
	return rc;
}

static int cmp_fqn(const void *a, const void *b)
{
	return strcmp(((const struct ckpt_st_tensor *)a)->fqn,
		      ((const struct ckpt_st_tensor *)b)->fqn);
}

/* By FQN, then by saved offsets: a key's chunks in order. */
static int cmp_chunk(const void *a, const void *b)
{
	const struct ckpt_st_tensor *x = a, *y = b;
	int c = strcmp(x->fqn, y->fqn);
	unsigned d;

	for (d = 0; !c && d < x->ndim && d < y->ndim; d++)
		if (x->saved[d] != y->saved[d])
			c = x->saved[d] < y->saved[d] ? -1 : 1;
	return c;
}

static int check_index(struct st *s, const struct ckpt_json_doc *doc,
		       const struct ckpt_json *map)
{
	char key[NAME_MAX_ST], file[NAME_MAX_ST];
	struct ckpt_st_tensor probe, *hit;
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
		hit = bsearch(&probe, s->set.t, s->set.nt, sizeof(*s->set.t),
			      cmp_fqn);
		if (!hit)
			return ckpt_errf_key(s->err, s->errlen, -EINVAL,
					     key, SIZE_MAX,
					     "%s/" INDEX_NAME ": key '%s' is in no safetensors file",
					     s->dir, key);
		if (strcmp(s->files[hit->file], file))
			return ckpt_errf_key(s->err, s->errlen, -EINVAL,
					     key, SIZE_MAX,
					     "%s/" INDEX_NAME ": key '%s' is in %s, but the index says %s",
					     s->dir, key, s->files[hit->file], file);
	}
	return 0;
}


/* The keys: runs of s->set.t (sorted) with one FQN, each a key whose
 * chunks are the run (one whole chunk, unless sharded). */
struct key_run {
	size_t first, n;
	uint64_t shape[CKPT_MAX_DIMS];
};

/* Group the sorted tensors into keys.  Sharded: the global shape is the
 * union of the chunks, and a chunk saved twice identically (a replicated
 * tensor) is kept once; the native parser then checks the tiling. */
static int group_keys(struct st *s, struct key_run **out, size_t *nout)
{
	struct ckpt_st_set *set = &s->set;
	struct key_run *k = NULL;
	size_t nk = 0, cap = 0, i, j;
	unsigned d;

	for (i = 0; i < set->nt; i = j) {
		const struct ckpt_st_tensor *t = &set->t[i];
		struct key_run *r;

		for (j = i + 1; j < set->nt && !strcmp(set->t[j].fqn, t->fqn); j++) {
			const struct ckpt_st_tensor *u = &set->t[j];

			if (!set->sharded)
				goto twice;
			if (u->dtype != t->dtype || u->ndim != t->ndim) {
				free(k);
				return ckpt_errf_key(s->err, s->errlen, -EINVAL,
						     t->fqn, SIZE_MAX,
						     "%s: key '%s': %s has %s x %u dims, %s has %s x %u dims",
						     s->dir, t->fqn, s->files[t->file],
						     ckpt_dtype_name(t->dtype), t->ndim,
						     s->files[u->file],
						     ckpt_dtype_name(u->dtype), u->ndim);
			}
		}
		if (ckpt_grow((void **)&k, &cap, nk + 1, sizeof(*k))) {
			free(k);
			return ckpt_errf(s->err, s->errlen, -ENOMEM, "out of memory");
		}
		r = &k[nk++];
		r->first = i;
		r->n = j - i;
		for (d = 0; d < t->ndim; d++) {
			size_t c;

			r->shape[d] = 0;
			for (c = i; c < j; c++) {
				uint64_t end = set->t[c].saved[d] + set->t[c].shape[d];

				if (end > r->shape[d])
					r->shape[d] = end;
			}
		}
	}
	*out = k;
	*nout = nk;
	return 0;
twice:
	free(k);
	return ckpt_errf_key(s->err, s->errlen, -EINVAL,
			     set->t[i].fqn, SIZE_MAX,
			     "%s: key '%s' is in both %s and %s", s->dir,
			     set->t[i].fqn, s->files[set->t[i].file],
			     s->files[set->t[j].file]);
}

/* Is chunk c the same box as the one before it in its key? */
static bool repeats(const struct ckpt_st_set *set, const struct key_run *r,
		    size_t c)
{
	const struct ckpt_st_tensor *t = &set->t[c], *p;

	if (c <= r->first)
		return false;
	p = &set->t[c - 1];
	return !memcmp(t->saved, p->saved, t->ndim * sizeof(uint64_t)) &&
	       !memcmp(t->shape, p->shape, t->ndim * sizeof(uint64_t));
}

static int write_image(struct st *s, uint8_t **img, size_t *len)
{
	const struct ckpt_st_set *set = &s->set;
	struct key_run *keys = NULL;
	struct ckpt_mpout o;
	size_t nk = 0, i, c, nrec = 0, n;
	int rc;

	rc = group_keys(s, &keys, &nk);
	if (rc)
		return rc;
	ckpt_mpout_init(&o);
	ckpt_mp_map(&o, 4);
	ckpt_pack_cstr(&o, "format");
	ckpt_pack_cstr(&o, CKPT_FORMAT_NAME);
	ckpt_pack_cstr(&o, "version");
	ckpt_mp_uint64(&o, CKPT_FORMAT_VERSION);
	ckpt_pack_cstr(&o, "state_dict_metadata");
	ckpt_mp_map(&o, nk);
	for (i = 0; i < nk; i++) {
		const struct key_run *r = &keys[i];
		const struct ckpt_st_tensor *t = &set->t[r->first];

		for (c = r->first, n = 0; c < r->first + r->n; c++)
			n += !repeats(set, r, c);
		nrec += n;
		ckpt_pack_cstr(&o, t->fqn);
		ckpt_mp_map(&o, 4);
		ckpt_pack_cstr(&o, "type");
		ckpt_pack_cstr(&o, "tensor");
		ckpt_pack_cstr(&o, "dtype");
		ckpt_pack_cstr(&o, ckpt_dtype_name((enum ckpt_dtype)t->dtype));
		ckpt_pack_cstr(&o, "size");
		ckpt_pack_dims(&o, r->shape, t->ndim);
		ckpt_pack_cstr(&o, "chunks");
		ckpt_mp_array(&o, n);
		for (c = r->first; c < r->first + r->n; c++) {
			if (repeats(set, r, c))
				continue;
			ckpt_mp_map(&o, 2);
			ckpt_pack_cstr(&o, "offsets");
			ckpt_pack_dims(&o, set->t[c].saved, t->ndim);
			ckpt_pack_cstr(&o, "sizes");
			ckpt_pack_dims(&o, set->t[c].shape, t->ndim);
		}
	}
	ckpt_pack_cstr(&o, "storage_data");
	ckpt_mp_array(&o, nrec);
	for (i = 0; i < nk; i++) {
		for (c = keys[i].first; c < keys[i].first + keys[i].n; c++) {
			const struct ckpt_st_tensor *t = &set->t[c];

			if (repeats(set, &keys[i], c))
				continue;
			ckpt_mp_map(&o, 5);
			ckpt_pack_cstr(&o, "fqn");
			ckpt_pack_cstr(&o, t->fqn);
			ckpt_pack_cstr(&o, "offsets");
			ckpt_pack_dims(&o, t->saved, t->ndim);
			ckpt_pack_cstr(&o, "relative_path");
			ckpt_pack_cstr(&o, s->files[t->file]);
			ckpt_pack_cstr(&o, "offset");
			ckpt_mp_uint64(&o, t->foff);
			ckpt_pack_cstr(&o, "length");
			ckpt_mp_uint64(&o, t->len);
		}
	}
	free(keys);
	rc = ckpt_mpout_finish(&o, img, len);
	ckpt_mpout_destroy(&o);
	return rc ? ckpt_errf(s->err, s->errlen, rc, "out of memory") : 0;
}

/* Collect the *.safetensors names of the listing. */
static int list_one(void *ctx, const char *name, uint64_t size)
{
	struct st *s = ctx;
	size_t n = strlen(name);

	(void)size;
	if (n > 12 && !strcmp(name + n - 12, ".safetensors"))
		return add_file(s, name);
	return 0;
}

int ckpt_safetensors_index(struct ckpt_store *store, uint8_t **img,
			   size_t *len, bool *sharded, int64_t *mtime_sec,
			   int64_t *mtime_nsec, char **warning, char *err,
			   size_t errlen)
{
	struct st s = { .dir = ckpt_store_root(store), .store = store,
			.err = err, .errlen = errlen };
	struct ckpt_json_doc idoc = { 0 };
	const struct ckpt_json *map = NULL;
	const char *dir = s.dir;
	char *itext = NULL;
	size_t i;
	int rc = 0;

	*img = NULL;
	*len = 0;
	*sharded = false;
	*warning = NULL;
	rc = ckpt_store_list(store, list_one, &s, err, errlen);
	if (rc == -ENOMEM)
		rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	if (rc)
		goto out_free;
	if (!s.nfiles) {
		rc = -ENOENT;
		goto out_free;
	}
	qsort(s.files, s.nfiles, sizeof(char *), cmp_str);
	rc = read_index(&s, &idoc, &itext, &map);
	if (!rc && map)
		rc = drop_unlisted(&s, &idoc, map, warning);
	for (i = 0; i < s.nfiles && !rc; i++)
		rc = one_file(&s, (uint32_t)i);
	if (rc)
		goto out_free;
	/* Sharded (DCP_SHARDING_INFO): every tensor is a chunk of its key.
	 * Otherwise one key in two files is an error naming both. */
	for (i = 0; s.set.sharded && i < s.set.nt; i++) {
		if (!s.set.t[i].has_saved) {
			rc = ckpt_errf_key(err, errlen, -EINVAL,
					   s.set.t[i].fqn, SIZE_MAX,
					   "%s/%s: key '%s': no DCP_SHARDING_INFO saved_offsets, but other files have them",
					   dir, s.files[s.set.t[i].file],
					   s.set.t[i].fqn);
			goto out_free;
		}
	}
	qsort(s.set.t, s.set.nt, sizeof(*s.set.t),
	      s.set.sharded ? cmp_chunk : cmp_fqn);
	if (!s.set.sharded && map)
		rc = check_index(&s, &idoc, map);
	if (!rc)
		rc = write_image(&s, img, len);
	if (!rc) {
		*sharded = s.set.sharded;
		*mtime_sec = s.mtime_sec;
		*mtime_nsec = s.mtime_nsec;
	}
out_free:
	if (rc) {
		free(*warning);
		*warning = NULL;
	}
	ckpt_json_free(&idoc);
	free(itext);
	ckpt_st_set_free(&s.set);
	for (i = 0; i < s.nfiles; i++)
		free(s.files[i]);
	free(s.files);
	return rc;
}
