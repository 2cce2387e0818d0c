/* SPDX-License-Identifier: MIT */
/*
 * What the object stores share (see obj_store.h).  Opening an object
 * fixes its size and ETag, from a HEAD or from an earlier listing of the
 * root; every GET then carries If-Match.
 */
#include "io/obj_store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errbuf.h"
#include "common/escape.h"

static void wipe_free(char *s)
{
	if (s)
		memset(s, 0, strlen(s));
	free(s);
}

void ckpt_obj_store_init(struct ckpt_obj_store *os)
{
	pthread_mutex_init(&os->lock, NULL);
	atomic_init(&os->nobj, 0);
}

static void obj_destroy(struct ckpt_s3_object *o)
{
	free(o->name);
	free(o->uri);
	wipe_free(o->url);	/* it may hold a SAS */
}

void ckpt_obj_store_fini(struct ckpt_obj_store *os)
{
	uint32_t i, n;

	ckpt_s3_http_free(os->http);
	os->http = NULL;
	n = atomic_load(&os->nobj);
	for (i = 0; i < n; i++)
		obj_destroy(&os->chunks[i / CKPT_OBJ_CHUNK][i % CKPT_OBJ_CHUNK]);
	for (i = 0; i < CKPT_OBJ_MAX_CHUNKS && os->chunks[i]; i++)
		free(os->chunks[i]);
	ckpt_obj_names_free(&os->names);
	pthread_mutex_destroy(&os->lock);
	free(os->base.root);
	free(os->base.identity);
	free(os->base.warning);
}

const struct ckpt_s3_object *ckpt_obj_store_get(void *ctx, uint32_t id)
{
	struct ckpt_obj_store *os = ctx;

	if (id >= atomic_load_explicit(&os->nobj, memory_order_acquire))
		return NULL;
	return &os->chunks[id / CKPT_OBJ_CHUNK][id % CKPT_OBJ_CHUNK];
}

/* Under lock: publish an object for entry e.  Returns 0 or -errno. */
static int obj_publish(struct ckpt_obj_store *os, struct ckpt_obj_name *e)
{
	uint32_t id = atomic_load_explicit(&os->nobj, memory_order_relaxed);
	struct ckpt_s3_object *o;
	int rc;

	if (id / CKPT_OBJ_CHUNK >= CKPT_OBJ_MAX_CHUNKS)
		return -EMFILE;
	if (!os->chunks[id / CKPT_OBJ_CHUNK]) {
		os->chunks[id / CKPT_OBJ_CHUNK] = calloc(CKPT_OBJ_CHUNK,
							 sizeof(*o));
		if (!os->chunks[id / CKPT_OBJ_CHUNK])
			return -ENOMEM;
	}
	o = &os->chunks[id / CKPT_OBJ_CHUNK][id % CKPT_OBJ_CHUNK];
	rc = os->where(os, e->name, &o->url, &o->uri);
	o->name = rc ? NULL : strdup(e->name);
	if (!o->name) {
		obj_destroy(o);
		memset(o, 0, sizeof(*o));
		return -ENOMEM;
	}
	o->size = e->size;
	memcpy(o->etag, e->etag, sizeof(o->etag));
	e->id = id;
	atomic_store_explicit(&os->nobj, id + 1, memory_order_release);
	return 0;
}

static void fill_info(const struct ckpt_obj_name *e, uint32_t *id,
		      struct ckpt_store_file_info *info)
{
	*id = e->id;
	if (info) {
		memset(info, 0, sizeof(*info));
		info->size = e->size;
		memcpy(info->version, e->etag, sizeof(info->version));
		memcpy(info->ident, e->etag, sizeof(info->ident));
		info->mtime_sec = e->mtime;	/* whole seconds: a HEAD
						 * gives no more */
	}
}

/* HEAD the object name: its size and ETag.  -ENOENT when absent. */
static int head_object(struct ckpt_obj_store *os, const char *name,
		       uint64_t *size, char *etag, int64_t *mtime, char *err,
		       size_t errlen)
{
	struct ckpt_s3_req q = { .head = true };
	char *url = NULL, *uri = NULL, shown[CKPT_S3_NAME_SHOWN];
	size_t failed;
	int rc;

	if (os->where(os, name, &url, &uri)) {
		rc = ckpt_errf(err, errlen, -ENOMEM, "%s: out of memory",
			       os->base.root);
		goto out_free;
	}
	ckpt_escape_mid(uri, strlen(uri), shown, sizeof(shown));
	q.url = url;
	rc = ckpt_s3_http_run(os->http, &q, 1, &failed);
	if (rc == 0 && (!q.has_length || !q.etag[0])) {
		rc = ckpt_errf(err, errlen, -EIO, "%s: the HEAD answer "
			       "has no %s", shown,
			       q.has_length ? "usable ETag" :
			       "Content-Length");
	}
	else if (rc == 0) {
		*size = q.length;
		*mtime = q.mtime;
		memcpy(etag, q.etag, sizeof(q.etag));
	}
	else if (q.status == 404)
		rc = ckpt_errf(err, errlen, -ENOENT, "%s: no such %s", shown,
			       os->noun);
	else if (q.status == 403)
		rc = ckpt_errf(err, errlen, -EACCES, "%s: access "
			       "denied (%s)", shown, q.reason);
	else
		ckpt_errf(err, errlen, rc, "%s: %s", shown, q.reason);
	ckpt_s3_req_destroy(&q);
out_free:
	free(uri);
	wipe_free(url);
	return rc;
}

int ckpt_obj_store_open(struct ckpt_store *s, const char *name, uint32_t *id,
			struct ckpt_store_file_info *info, char *err,
			size_t errlen)
{
	struct ckpt_obj_store *os = (struct ckpt_obj_store *)s;
	char etag[CKPT_STORE_VERSION_MAX] = "";
	struct ckpt_obj_name *e;
	uint64_t size = 0;
	int64_t mtime = 0;
	int rc;

	pthread_mutex_lock(&os->lock);
	e = ckpt_obj_names_find(&os->names, name);
	if (e && e->missing) {
		pthread_mutex_unlock(&os->lock);
		return ckpt_errf(err, errlen, -ENOENT, "%s/%s: no such %s",
				 s->root, name, os->noun);
	}
	if (e && e->id == UINT32_MAX && e->etag[0]) {	/* listed */
		rc = obj_publish(os, e);
		if (rc) {
			pthread_mutex_unlock(&os->lock);
			return ckpt_errf(err, errlen, rc, "%s/%s: %s",
					 s->root, name, strerror(-rc));
		}
	}
	if (e && e->id != UINT32_MAX) {
		fill_info(e, id, info);
		pthread_mutex_unlock(&os->lock);
		return 0;
	}
	pthread_mutex_unlock(&os->lock);

	/* No lock held while the HEAD runs; another thread may open the
	 * same name meanwhile, and the first one published wins. */
	rc = head_object(os, name, &size, etag, &mtime, err, errlen);
	if (rc == -ENOENT) {
		pthread_mutex_lock(&os->lock);
		if (!ckpt_obj_names_find(&os->names, name)) {
			e = ckpt_obj_names_add(&os->names, name, 0, "", 0);
			if (e)
				e->missing = true;
		}
		pthread_mutex_unlock(&os->lock);
	}
	if (rc)
		return rc;
	pthread_mutex_lock(&os->lock);
	e = ckpt_obj_names_find(&os->names, name);
	if (!e)
		e = ckpt_obj_names_add(&os->names, name, size, etag, mtime);
	if (!e) {
		rc = -ENOMEM;
	} else if (e->id == UINT32_MAX) {
		e->size = size;
		e->mtime = mtime;
		memcpy(e->etag, etag, sizeof(e->etag));
		e->missing = false;
		rc = obj_publish(os, e);
	}
	if (rc == 0)
		fill_info(e, id, info);
	pthread_mutex_unlock(&os->lock);
	if (rc)
		return ckpt_errf(err, errlen, rc, "%s/%s: %s", s->root, name,
				 strerror(-rc));
	return 0;
}

const char *ckpt_obj_store_name(const struct ckpt_store *s, uint32_t id)
{
	const struct ckpt_s3_object *o = ckpt_obj_store_get((void *)s, id);

	return o ? o->name : NULL;
}

int ckpt_obj_store_read_joined(struct ckpt_store *s,
			       const struct ckpt_store_range *r, size_t n,
			       size_t first_join, uint32_t join)
{
	struct ckpt_obj_store *os = (struct ckpt_obj_store *)s;
	uint64_t delivered = 0;
	int rc;

	rc = ckpt_s3_fetch(os->http, os->merge_gap, os->part_bytes,
			   ckpt_obj_store_get, os, r, n, first_join, join,
			   &delivered);
	atomic_fetch_add(&s->bytes_delivered, delivered);
	return rc;
}

int ckpt_obj_store_read(struct ckpt_store *s,
			const struct ckpt_store_range *r, size_t n)
{
	return ckpt_obj_store_read_joined(s, r, n, n, 0);
}

struct list_ctx {
	struct ckpt_obj_store *os;
	int (*fn)(void *ctx, const char *name, uint64_t size);
	void *ctx;
};

/* Remember what a listing says (so opening costs no HEAD), then pass it
 * on.  An opened name keeps what open fixed. */
static int on_listed(void *ctx, const char *name, uint64_t size,
		     const char *etag, int64_t mtime)
{
	struct list_ctx *lc = ctx;
	struct ckpt_obj_store *os = lc->os;
	struct ckpt_obj_name *e;

	pthread_mutex_lock(&os->lock);
	e = ckpt_obj_names_find(&os->names, name);
	if (!e) {
		e = ckpt_obj_names_add(&os->names, name, size, etag, mtime);
	} else if (e->id == UINT32_MAX) {
		e->size = size;
		e->mtime = mtime;
		snprintf(e->etag, sizeof(e->etag), "%s", etag);
	}
	if (e) {
		e->listed = true;
		e->listed_size = size;
		e->missing = false;
	}
	pthread_mutex_unlock(&os->lock);
	if (!e)
		return -ENOMEM;
	return lc->fn(lc->ctx, name, size);
}

/* A second list() of the store: what the first one said, in its order,
 * without a request.  Names are copied out so that fn runs unlocked. */
static int replay_listing(struct ckpt_obj_store *os,
			  int (*fn)(void *ctx, const char *name, uint64_t size),
			  void *ctx, char *err, size_t errlen)
{
	struct { char *name; uint64_t size; } *v;
	size_t n = 0, i;
	int rc = 0;

	pthread_mutex_lock(&os->lock);
	v = calloc(os->names.n ? os->names.n : 1, sizeof(*v));
	for (i = 0; v && i < os->names.n; i++) {
		if (!os->names.v[i].listed)
			continue;
		v[n].name = strdup(os->names.v[i].name);
		v[n].size = os->names.v[i].listed_size;
		if (!v[n++].name) {
			rc = -ENOMEM;
			break;
		}
	}
	pthread_mutex_unlock(&os->lock);
	if (!v || rc)
		rc = ckpt_errf(err, errlen, -ENOMEM, "%s: out of memory",
			       os->base.root);
	for (i = 0; rc == 0 && i < n; i++)
		rc = fn(ctx, v[i].name, v[i].size);
	for (i = 0; v && i < n; i++)
		free(v[i].name);
	free(v);
	return rc;
}

int ckpt_obj_store_list(struct ckpt_store *s,
			int (*fn)(void *ctx, const char *name, uint64_t size),
			void *ctx, char *err, size_t errlen)
{
	struct ckpt_obj_store *os = (struct ckpt_obj_store *)s;
	struct list_ctx lc = { os, fn, ctx };
	bool again;
	int rc;

	pthread_mutex_lock(&os->lock);
	again = os->listed_all;
	pthread_mutex_unlock(&os->lock);
	if (again)
		return replay_listing(os, fn, ctx, err, errlen);
	rc = os->list_root(os, on_listed, &lc, err, errlen);
	if (rc == -ENOMEM && err && !err[0])
		ckpt_errf(err, errlen, rc, "%s: out of memory", s->root);
	if (rc == 0) {
		pthread_mutex_lock(&os->lock);
		os->listed_all = true;
		pthread_mutex_unlock(&os->lock);
	}
	return rc;
}

void ckpt_obj_store_cancel(struct ckpt_store *s)
{
	ckpt_s3_http_cancel(((struct ckpt_obj_store *)s)->http);
}
