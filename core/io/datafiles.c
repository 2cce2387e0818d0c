/* SPDX-License-Identifier: MIT */
/* Opening and reading the data files of an open checkpoint: see
 * datafiles.h. */
#include "io/datafiles.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "common/cancel.h"
#include "common/errbuf.h"
#include "common/relpath.h"

#define KEY_SHOWN 120

int ckpt_files_open_one(struct ckpt_store *s, const char *name,
			const char *key, size_t keylen, uint32_t *id,
			struct ckpt_store_file_info *info, char *err,
			size_t errlen)
{
	char why[1024], k[KEY_SHOWN + 16] = "";
	const char *root = s ? ckpt_store_root(s) : ".";
	int rc;

	if (key)
		snprintf(k, sizeof(k), "key '%.*s': ",
			 (int)(keylen > KEY_SHOWN ? KEY_SHOWN : keylen), key);
	if (!s)
		return ckpt_errf_key(err, errlen, -EBADF, key, keylen,
				     "%s: %sparsed from memory, no directory to open data files in",
				     name, k);
	rc = ckpt_store_open(s, name, id, info, why, sizeof(why));
	switch (rc) {
	case 0:
		return 0;
	case -EXDEV:
		return ckpt_errf_key(err, errlen, rc, key, keylen,
				     "%s/%s: %sdata file " CKPT_STORE_OUTSIDE,
				     root, name, k);
	case -EINVAL:
		if (!ckpt_relpath_is_safe(name, (uint32_t)strnlen(name, 4096)))
			return ckpt_errf(err, errlen, rc, "%s", why);
		return ckpt_errf_key(err, errlen, rc, key, keylen,
				     "%s/%s: %sdata file is not a regular file",
				     root, name, k);
	case -ENOENT:
	case -EACCES:
	case -EPERM:
	case -ENOTDIR:
	case -ELOOP:
		return ckpt_errf_key(err, errlen, rc, key, keylen,
				     "%s/%s: %scannot open data file: %s", root,
				     name, k, strerror(-rc));
	default:	/* the store's own reason (S3: the server's answer) */
		return ckpt_errf_key(err, errlen, rc, key, keylen, "%s%s", k,
				     why);
	}
}

/* Guards by file, then offset. */
static int cmp_guard(const void *a, const void *b, void *ctx)
{
	const struct ckpt_meta *m = ctx;
	const struct ckpt_guard *x = &m->guards[*(const uint32_t *)a];
	const struct ckpt_guard *y = &m->guards[*(const uint32_t *)b];
	uint32_t fx = m->chunks[x->chunk].file, fy = m->chunks[y->chunk].file;

	if (fx != fy)
		return fx < fy ? -1 : 1;
	return x->off < y->off ? -1 : x->off > y->off;
}

/* m->guard_order and guard_ok, and each opened file's share of them. */
static int order_guards(struct ckpt_meta *m, struct ckpt_file_open *opened,
			char *err, size_t errlen)
{
	uint32_t i;

	if (!m->nguards)
		return 0;
	m->guard_order = malloc(m->nguards * sizeof(*m->guard_order));
	m->guard_ok = calloc(m->nguards, sizeof(*m->guard_ok));
	if (!m->guard_order || !m->guard_ok)
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	for (i = 0; i < m->nguards; i++)
		m->guard_order[i] = i;
	qsort_r(m->guard_order, m->nguards, sizeof(*m->guard_order),
		cmp_guard, m);
	for (i = m->nguards; i-- > 0; ) {
		uint32_t f = m->chunks[m->guards[m->guard_order[i]].chunk].file;

		opened[f].guard_first = i;
		opened[f].guard_count++;
	}
	/* Two keys may view one record, or a record part of another: then
	 * the binary search of each_unchecked() could step over a guard. */
	for (i = 1; i < m->nguards; i++) {
		const struct ckpt_chunk *a =
			&m->chunks[m->guards[m->guard_order[i - 1]].chunk];
		const struct ckpt_chunk *b =
			&m->chunks[m->guards[m->guard_order[i]].chunk];

		if (a->file == b->file &&
		    (b->foff < a->foff || b->foff + b->len < a->foff + a->len))
			opened[a->file].guards_nested = true;
	}
	return 0;
}

static int files_open(struct ckpt_meta *m, unsigned flags, uint32_t max_open,
		      char *err, size_t errlen)
{
	struct ckpt_store_opts so = { 0 };
	struct ckpt_store_file_info info;
	struct ckpt_file_open *opened;
	uint32_t i;
	int rc;

	if (!m->store)
		return ckpt_errf(err, errlen, -EBADF,
				 "%s: parsed from memory, no directory to open data files in",
				 m->meta_path ? m->meta_path : "checkpoint");
	if (m->opened)
		return ckpt_errf(err, errlen, -EALREADY,
				 "%s: data files are open already", m->dir);
	if (flags & ~(unsigned)CKPT_FILES_KNOWN)
		return ckpt_errf(err, errlen, -EINVAL,
				 "%s: unknown data file flags 0x%x", m->dir,
				 flags & ~(unsigned)CKPT_FILES_KNOWN);
	so.follow_symlinks = m->follow_symlinks ||
			     (flags & CKPT_FILES_FOLLOW_SYMLINKS);
	so.raise_nofile = flags & CKPT_FILES_RAISE_NOFILE;
	so.max_open = max_open;
	so.direct_io = flags & CKPT_FILES_DIRECT_IO;
	rc = ckpt_store_set_opts(m->store, &so, err, errlen);
	if (rc)
		return rc;
	opened = calloc(m->nfiles ? m->nfiles : 1, sizeof(*opened));
	if (!opened)
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	/* One listing of the root instead of a HEAD per data file. */
	ckpt_store_list_ahead(m->store, m->nfiles);
	for (i = 0; i < m->nfiles; i++) {
		const struct ckpt_file *f = &m->files[i];
		const char *rel = m->strings + f->path;
		const struct ckpt_entry *e = &m->entries[f->need_entry];
		const char *key = ckpt_entry_fqn(m, e);

		/* What a failure below concerns. */
		ckpt_last_error_file(m->dir, rel, CKPT_NO_OFFSET);
		ckpt_last_error_key(key);
		rc = ckpt_files_open_one(m->store, rel, key, e->fqn_len,
					 &opened[i].id, &info, err, errlen);
		if (rc)
			goto out_free;
		if (info.size < f->need) {
			rc = ckpt_errf_key(err, errlen, -EINVAL, key, SIZE_MAX,
					   "%s/%s: key '%s': data file has %" PRIu64
					   " bytes, its record ends at %" PRIu64,
					   m->dir, rel, key, info.size, f->need);
			goto out_free;
		}
		opened[i].size = info.size;
	}
	rc = order_guards(m, opened, err, errlen);
	if (rc)
		goto out_free;
	m->opened = opened;
	m->huge_pages = flags & CKPT_FILES_HUGE_PAGES;
	return 0;
out_free:
	free(m->guard_order);
	free((void *)m->guard_ok);
	m->guard_order = NULL;
	m->guard_ok = NULL;
	free(opened);
	return rc;
}

void ckpt_meta_mark_open(struct ckpt_meta *m)
{
	struct ckpt_store_stats st;

	ckpt_store_stats(m->store, &st);
	m->at_open.gets = st.gets;
	m->at_open.heads = st.heads;
	m->at_open.lists = st.lists;
	m->at_open.bytes_fetched = st.bytes_fetched;
	m->at_open.bytes_delivered = st.bytes_delivered;
}

int ckpt_files_open(struct ckpt_meta *m, unsigned flags, uint32_t max_open,
		    char *err, size_t errlen)
{
	int rc;

	ckpt_clear_last_error();
	rc = files_open(m, flags, max_open, err, errlen);
	rc = ckpt_cancel_result(rc, m->dir, err, errlen);
	if (rc)
		return ckpt_last_error_finish(rc, m->dir);
	if (m->store)
		ckpt_meta_mark_open(m);
	ckpt_clear_last_error();
	return 0;
}

bool ckpt_files_are_open(const struct ckpt_meta *m)
{
	return m->opened != NULL;
}

int ckpt_files_pread(struct ckpt_meta *m, uint32_t fi, void *buf, size_t len,
		     uint64_t off)
{
	struct ckpt_store_range r = { fi, off, len, buf };

	if (!m->opened || fi >= m->nfiles)
		return -EIO;	/* a decoded record: records/record_cache.h */
	return ckpt_files_read(m, &r, 1);
}

/*
 * Call fn(m, g, arg) for each guard of file fi (m->guards index g) whose
 * record [foff, foff + len) meets [off, off + len) and that is not yet
 * known intact; stops at and returns fn's first non-zero result.
 * When the records of a file do not overlap, ordered by guard offset they
 * are ordered by start and end as well: a binary search finds the first.
 * When they do (guards_nested), every guard of the file is looked at.
 */
static int each_unchecked(struct ckpt_meta *m, uint32_t fi, uint64_t off,
			  uint64_t len,
			  int (*fn)(struct ckpt_meta *, uint32_t, void *),
			  void *arg)
{
	const struct ckpt_file_open *f = &m->opened[fi];
	uint32_t lo = f->guard_first, hi = f->guard_first + f->guard_count;
	uint64_t end = off + len;	/* in the file: cannot wrap */
	int rc;

	while (lo < hi && !f->guards_nested) {
		uint32_t mid = lo + (hi - lo) / 2;
		const struct ckpt_chunk *c =
			&m->chunks[m->guards[m->guard_order[mid]].chunk];

		if (c->foff + c->len <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (; lo < f->guard_first + f->guard_count; lo++) {
		uint32_t g = m->guard_order[lo];
		const struct ckpt_chunk *c = &m->chunks[m->guards[g].chunk];

		if (c->foff >= end && !f->guards_nested)
			break;
		if (c->foff >= end || c->foff + c->len <= off ||
		    atomic_load_explicit(&m->guard_ok[g], memory_order_relaxed))
			continue;
		rc = fn(m, g, arg);
		if (rc)
			return rc;
	}
	return 0;
}

/* A guard (a zip local header) comes in the same request as data of its
 * file that starts at most this far after it (usually its record's
 * bytes), rather than in a request of its own. */
#define GUARD_JOIN (64u << 10)

struct guard_batch {
	struct ckpt_store_range *r;	/* the data's ranges, then guards' */
	uint32_t *g;			/* the guards, in the order added */
	uint8_t *buf;			/* their bytes, one after another */
	size_t base;			/* the guards' ranges start at r[base] */
	size_t n, bytes;
};

static int count_guard(struct ckpt_meta *m, uint32_t g, void *arg)
{
	struct guard_batch *b = arg;

	b->n++;
	b->bytes += m->guards[g].len;
	return 0;
}

static int add_guard_range(struct ckpt_meta *m, uint32_t g, void *arg)
{
	struct guard_batch *b = arg;
	const struct ckpt_guard *gd = &m->guards[g];

	b->r[b->base + b->n] = (struct ckpt_store_range){
		.id = m->opened[m->chunks[gd->chunk].file].id,
		.off = gd->off, .len = gd->len, .dst = b->buf + b->bytes,
	};
	b->g[b->n] = g;
	b->n++;
	b->bytes += gd->len;
	return 0;
}

/* Guard g's bytes as read into at: intact (marked so), or -EIO naming
 * the file, the key and what moved. */
static int check_guard(struct ckpt_meta *m, uint32_t g, const uint8_t *at)
{
	const struct ckpt_guard *gd = &m->guards[g];
	const struct ckpt_chunk *c = &m->chunks[gd->chunk];
	const char *rel = m->strings + m->files[c->file].path;
	const char *key = ckpt_entry_fqn(m, &m->entries[gd->entry]);

	if (XXH3_64bits(at, gd->len) == gd->xxh3) {
		atomic_store_explicit(&m->guard_ok[g], 1, memory_order_relaxed);
		return 0;
	}
	ckpt_errf_key(NULL, 0, -EIO, key, SIZE_MAX,
		      "%s/%s: key '%.*s': the record at %" PRIu64 " is not where the index says: the zip local header before it (%" PRIu32 " bytes at %" PRIu64 ") is not the one indexed (the file was rewritten since it was indexed; index it again)",
		      m->dir, rel, KEY_SHOWN, key, c->foff, gd->len, gd->off);
	ckpt_last_error_file(m->dir, rel, gd->off);
	return -EIO;
}

/*
 * Serve the ranges of r[0..n) (meta file indices) that lie inside a
 * range a read batch fetched (model/meta.h, meta->fetched) from it, and
 * move the others to the front of r: how many are left to read.
 */
static size_t serve_fetched(struct ckpt_meta *m, struct ckpt_store_range *r,
			    size_t n)
{
	const struct ckpt_fetched_set *s;
	size_t i, left = 0;

	if (!m->lazy)
		return n;	/* only a lazy open fetches any */
	pthread_rwlock_rdlock(&m->fetched_lock);
	for (i = 0; i < n; i++) {
		const struct ckpt_fetched *w = NULL;

		for (s = m->fetched; s && !w; s = s->next)
			w = ckpt_fetched_find(s->w, s->n, s->maxlen, r[i].id,
					      r[i].off, r[i].len);
		if (w)
			memcpy(r[i].dst, w->buf + (r[i].off - w->off),
			       (size_t)r[i].len);
		else
			r[left++] = r[i];
	}
	pthread_rwlock_unlock(&m->fetched_lock);
	return left;
}

int ckpt_files_read(struct ckpt_meta *m, struct ckpt_store_range *r,
		    size_t n)
{
	struct guard_batch b = { 0 };
	size_t i;
	int rc;

	for (i = 0; i < n; i++)
		if (!m->opened || r[i].id >= m->nfiles)
			return -EIO;
	n = serve_fetched(m, r, n);
	if (!n)
		return 0;
	for (i = 0; i < n; i++) {
		if (!m->opened || r[i].id >= m->nfiles)
			return -EIO;
		if (m->nguards)
			each_unchecked(m, r[i].id, r[i].off, r[i].len,
				       count_guard, &b);
	}
	if (!b.n) {
		for (i = 0; i < n; i++)
			r[i].id = m->opened[r[i].id].id;
		return ckpt_store_read(m->store, r, n);
	}
	/* Read each guard not yet checked with the data it guards, in one
	 * batch: the store merges neighbouring ranges, so on S3 a record's
	 * header costs no request of its own. */
	b.r = malloc((n + b.n) * sizeof(*b.r));
	b.g = malloc(b.n * sizeof(*b.g));
	b.buf = malloc(b.bytes ? b.bytes : 1);
	if (!b.r || !b.g || !b.buf) {
		rc = -ENOMEM;
		goto out_free;
	}
	/* Another thread may mark some intact meanwhile: fewer, not more. */
	b.base = n;
	b.n = b.bytes = 0;
	for (i = 0; i < n; i++)
		each_unchecked(m, r[i].id, r[i].off, r[i].len,
			       add_guard_range, &b);
	for (i = 0; i < n; i++) {
		r[i].id = m->opened[r[i].id].id;
		b.r[i] = r[i];
	}
	rc = ckpt_store_read_joined(m->store, b.r, n + b.n, n, GUARD_JOIN);
	for (i = 0; !rc && i < b.n; i++)
		rc = check_guard(m, b.g[i], b.r[n + i].dst);
out_free:
	free(b.r);
	free(b.g);
	free(b.buf);
	return rc;
}

void ckpt_files_willneed(struct ckpt_meta *m, uint32_t fi, uint64_t off,
			 uint64_t len)
{
	if (!m->opened || fi >= m->nfiles)
		return;		/* a decoded record: nothing to hint */
	ckpt_store_willneed(m->store, m->opened[fi].id, off, len);
}

void ckpt_files_close(struct ckpt_meta *m)
{
	free(m->opened);
	m->opened = NULL;
	free(m->guard_order);
	free((void *)m->guard_ok);
	m->guard_order = NULL;
	m->guard_ok = NULL;
	ckpt_store_free(m->store);
	m->store = NULL;
}

int ckpt_meta_file(const struct ckpt_meta *m, uint32_t fi, const char **path,
		   uint64_t *size)
{
	if (fi >= m->nfiles)
		return -ENOENT;
	*path = m->strings + m->files[fi].path;
	*size = m->opened ? m->opened[fi].size : 0;
	return 0;
}
