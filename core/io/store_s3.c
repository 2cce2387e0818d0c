/* SPDX-License-Identifier: MIT */
/*
 * The S3 store: a root "s3://bucket[/prefix]" read over libcurl (see
 * store.h for the contract, s3_config.h for the settings, s3_fetch.h for
 * reads).  Opening an object fixes its size and ETag, from a HEAD or from
 * an earlier listing of the root; every GET then carries If-Match.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/errbuf.h"
#include "common/escape.h"
#include "io/s3_config.h"
#include "io/s3_fetch.h"
#include "io/s3_http.h"
#include "io/s3_list.h"
#include "io/s3_url.h"
#include "io/obj_names.h"
#include "io/store_impl.h"

#define CHUNK_OBJS 1024u	/* objects per chunk of the table */
#define MAX_CHUNKS 4096u	/* so at most 4M objects open */
#define PROBE_MAX_BODY (1u << 20)
#define PROBE_MAX_TRIES 3

struct s3_store {
	struct ckpt_store base;
	struct ckpt_s3_cfg cfg;
	char *bucket;
	char *prefix;		/* "" or "a/b" */
	char *url_ep;		/* what URLs begin with: the endpoint, or
				 * the bucket's virtual-hosted one */
	const char *url_bucket;	/* bucket (path-style) or NULL
				 * (virtual-hosted): see ckpt_s3_url() */
	struct ckpt_s3_http *http;
	pthread_mutex_t lock;
	/* Opened objects by id; a chunk, once made, never moves. */
	struct ckpt_s3_object *chunks[MAX_CHUNKS];	/* guarded by lock */
	_Atomic uint32_t nobj;	/* published count (release/acquire) */
	/* Names opened or listed. */
	struct ckpt_obj_names names;	/* guarded by lock */
	bool listed_all;	/* the root was listed to its end: a later
				 * list() replays names[] (opening a
				 * checkpoint may ask twice, e.g. for
				 * __R.metadata, then *.safetensors);
				 * guarded by lock */
};

static const struct ckpt_s3_object *obj_get(void *ctx, uint32_t id)
{
	struct s3_store *st = ctx;

	if (id >= atomic_load_explicit(&st->nobj, memory_order_acquire))
		return NULL;
	return &st->chunks[id / CHUNK_OBJS][id % CHUNK_OBJS];
}

static void obj_destroy(struct ckpt_s3_object *o)
{
	free(o->name);
	free(o->uri);
	free(o->url);
}

/* Under lock: publish an object for entry e.  Returns 0 or -errno. */
static int obj_publish(struct s3_store *st, struct ckpt_obj_name *e)
{
	uint32_t id = atomic_load_explicit(&st->nobj, memory_order_relaxed);
	struct ckpt_s3_object *o;
	char *key;

	if (id / CHUNK_OBJS >= MAX_CHUNKS)
		return -EMFILE;
	if (!st->chunks[id / CHUNK_OBJS]) {
		st->chunks[id / CHUNK_OBJS] = calloc(CHUNK_OBJS, sizeof(*o));
		if (!st->chunks[id / CHUNK_OBJS])
			return -ENOMEM;
	}
	o = &st->chunks[id / CHUNK_OBJS][id % CHUNK_OBJS];
	key = ckpt_s3_key(st->prefix, e->name);
	o->name = strdup(e->name);
	o->url = key ? ckpt_s3_url(st->url_ep, st->url_bucket, key, NULL) :
		 NULL;
	if (key && asprintf(&o->uri, "s3://%s/%s", st->bucket, key) < 0)
		o->uri = NULL;
	free(key);
	if (!o->name || !o->url || !o->uri) {
		obj_destroy(o);
		memset(o, 0, sizeof(*o));
		return -ENOMEM;
	}
	o->size = e->size;
	memcpy(o->etag, e->etag, sizeof(o->etag));
	e->id = id;
	atomic_store_explicit(&st->nobj, id + 1, memory_order_release);
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
static int head_object(struct s3_store *st, const char *name, uint64_t *size,
		       char *etag, int64_t *mtime, char *err, size_t errlen)
{
	struct ckpt_s3_req q = { .head = true };
	char *key, *url, *uri = NULL, shown[CKPT_S3_NAME_SHOWN];
	size_t failed;
	int rc;

	key = ckpt_s3_key(st->prefix, name);
	url = key ? ckpt_s3_url(st->url_ep, st->url_bucket, key, NULL) :
	      NULL;
	if (url && asprintf(&uri, "s3://%s/%s", st->bucket, key) < 0)
		uri = NULL;
	if (!uri) {
		rc = ckpt_errf(err, errlen, -ENOMEM, "%s: out of memory",
			       st->base.root);
		goto out_free;
	}
	ckpt_escape_mid(uri, strlen(uri), shown, sizeof(shown));
	q.url = url;
	rc = ckpt_s3_http_run(st->http, &q, 1, &failed);
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
		rc = ckpt_errf(err, errlen, -ENOENT, "%s: no such "
			       "object", shown);
	else if (q.status == 403)
		rc = ckpt_errf(err, errlen, -EACCES, "%s: access "
			       "denied (%s)", shown, q.reason);
	else
		ckpt_errf(err, errlen, rc, "%s: %s", shown, q.reason);
	ckpt_s3_req_destroy(&q);
out_free:
	free(uri);
	free(url);
	free(key);
	return rc;
}

static int s3_open(struct ckpt_store *s, const char *name, uint32_t *id,
		   struct ckpt_store_file_info *info, char *err,
		   size_t errlen)
{
	struct s3_store *st = (struct s3_store *)s;
	char etag[CKPT_STORE_VERSION_MAX] = "";
	struct ckpt_obj_name *e;
	uint64_t size = 0;
	int64_t mtime = 0;
	int rc;

	pthread_mutex_lock(&st->lock);
	e = ckpt_obj_names_find(&st->names, name);
	if (e && e->missing) {
		pthread_mutex_unlock(&st->lock);
		return ckpt_errf(err, errlen, -ENOENT, "%s/%s: no such object",
				 s->root, name);
	}
	if (e && e->id == UINT32_MAX && e->etag[0]) {	/* listed */
		rc = obj_publish(st, e);
		if (rc) {
			pthread_mutex_unlock(&st->lock);
			return ckpt_errf(err, errlen, rc, "%s/%s: %s",
					 s->root, name, strerror(-rc));
		}
	}
	if (e && e->id != UINT32_MAX) {
		fill_info(e, id, info);
		pthread_mutex_unlock(&st->lock);
		return 0;
	}
	pthread_mutex_unlock(&st->lock);

	/* No lock held while the HEAD runs; another thread may open the
	 * same name meanwhile, and the first one published wins. */
	rc = head_object(st, name, &size, etag, &mtime, err, errlen);
	if (rc == -ENOENT) {
		pthread_mutex_lock(&st->lock);
		if (!ckpt_obj_names_find(&st->names, name)) {
			e = ckpt_obj_names_add(&st->names, name, 0, "", 0);
			if (e)
				e->missing = true;
		}
		pthread_mutex_unlock(&st->lock);
	}
	if (rc)
		return rc;
	pthread_mutex_lock(&st->lock);
	e = ckpt_obj_names_find(&st->names, name);
	if (!e)
		e = ckpt_obj_names_add(&st->names, name, size, etag, mtime);
	if (!e) {
		rc = -ENOMEM;
	} else if (e->id == UINT32_MAX) {
		e->size = size;
		e->mtime = mtime;
		memcpy(e->etag, etag, sizeof(e->etag));
		e->missing = false;
		rc = obj_publish(st, e);
	}
	if (rc == 0)
		fill_info(e, id, info);
	pthread_mutex_unlock(&st->lock);
	if (rc)
		return ckpt_errf(err, errlen, rc, "%s/%s: %s", s->root, name,
				 strerror(-rc));
	return 0;
}

static const char *s3_name(const struct ckpt_store *s, uint32_t id)
{
	const struct ckpt_s3_object *o = obj_get((void *)s, id);

	return o ? o->name : NULL;
}

static int s3_read_joined(struct ckpt_store *s,
			  const struct ckpt_store_range *r, size_t n,
			  size_t first_join, uint32_t join)
{
	struct s3_store *st = (struct s3_store *)s;
	uint64_t delivered = 0;
	int rc;

	rc = ckpt_s3_fetch(st->http, st->cfg.merge_gap, st->cfg.part_bytes,
			   obj_get, st, r, n, first_join, join, &delivered);
	atomic_fetch_add(&s->bytes_delivered, delivered);
	return rc;
}

static int s3_read(struct ckpt_store *s, const struct ckpt_store_range *r,
		   size_t n)
{
	return s3_read_joined(s, r, n, n, 0);
}

struct list_ctx {
	struct s3_store *st;
	int (*fn)(void *ctx, const char *name, uint64_t size);
	void *ctx;
};

/* Remember what a listing says (so opening costs no HEAD), then pass it
 * on.  An opened name keeps what open fixed. */
static int on_listed(void *ctx, const char *name, uint64_t size,
		     const char *etag, int64_t mtime)
{
	struct list_ctx *lc = ctx;
	struct s3_store *st = lc->st;
	struct ckpt_obj_name *e;

	pthread_mutex_lock(&st->lock);
	e = ckpt_obj_names_find(&st->names, name);
	if (!e) {
		e = ckpt_obj_names_add(&st->names, name, size, etag, mtime);
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
	pthread_mutex_unlock(&st->lock);
	if (!e)
		return -ENOMEM;
	return lc->fn(lc->ctx, name, size);
}

/* A second list() of the store: what the first one said, in its order,
 * without a request.  Names are copied out so that fn runs unlocked. */
static int replay_listing(struct s3_store *st,
			  int (*fn)(void *ctx, const char *name, uint64_t size),
			  void *ctx, char *err, size_t errlen)
{
	struct { char *name; uint64_t size; } *v;
	size_t n = 0, i;
	int rc = 0;

	pthread_mutex_lock(&st->lock);
	v = calloc(st->names.n ? st->names.n : 1, sizeof(*v));
	for (i = 0; v && i < st->names.n; i++) {
		if (!st->names.v[i].listed)
			continue;
		v[n].name = strdup(st->names.v[i].name);
		v[n].size = st->names.v[i].listed_size;
		if (!v[n++].name) {
			rc = -ENOMEM;
			break;
		}
	}
	pthread_mutex_unlock(&st->lock);
	if (!v || rc)
		rc = ckpt_errf(err, errlen, -ENOMEM, "%s: out of memory",
			       st->base.root);
	for (i = 0; rc == 0 && i < n; i++)
		rc = fn(ctx, v[i].name, v[i].size);
	for (i = 0; v && i < n; i++)
		free(v[i].name);
	free(v);
	return rc;
}

static int s3_list(struct ckpt_store *s,
		   int (*fn)(void *ctx, const char *name, uint64_t size),
		   void *ctx, char *err, size_t errlen)
{
	struct s3_store *st = (struct s3_store *)s;
	struct list_ctx lc = { st, fn, ctx };
	bool again;
	int rc;

	pthread_mutex_lock(&st->lock);
	again = st->listed_all;
	pthread_mutex_unlock(&st->lock);
	if (again)
		return replay_listing(st, fn, ctx, err, errlen);
	rc = ckpt_s3_list(st->http, st->url_ep, st->url_bucket, st->prefix,
			  0, st->cfg.list_max_keys, s->root, on_listed, &lc,
			  err, errlen);
	if (rc == -ENOMEM && err && !err[0])
		ckpt_errf(err, errlen, rc, "%s: out of memory", s->root);
	if (rc == 0) {
		pthread_mutex_lock(&st->lock);
		st->listed_all = true;
		pthread_mutex_unlock(&st->lock);
	}
	return rc;
}

static void s3_destroy(struct ckpt_store *s)
{
	struct s3_store *st = (struct s3_store *)s;
	uint32_t i, n;

	if (!st)
		return;
	ckpt_s3_http_free(st->http);
	n = atomic_load(&st->nobj);
	for (i = 0; i < n; i++)
		obj_destroy(&st->chunks[i / CHUNK_OBJS][i % CHUNK_OBJS]);
	for (i = 0; i < MAX_CHUNKS && st->chunks[i]; i++)
		free(st->chunks[i]);
	ckpt_obj_names_free(&st->names);
	pthread_mutex_destroy(&st->lock);
	ckpt_s3_config_destroy(&st->cfg);
	free(st->url_ep);
	free(st->bucket);
	free(st->prefix);
	free(s->root);
	free(s->identity);
	free(s->warning);
	free(st);
}

static void s3_cancel(struct ckpt_store *s)
{
	ckpt_s3_http_cancel(((struct s3_store *)s)->http);
}

static const struct ckpt_store_ops s3_ops = {
	.kind = "s3",
	.destroy = s3_destroy,
	.list = s3_list,
	.open = s3_open,
	.name = s3_name,
	.read = s3_read,
	.read_joined = s3_read_joined,
	.willneed = NULL,
	.cancel = s3_cancel,
};

/*
 * Ask for one key under the prefix: proves the endpoint answers, the
 * bucket exists and the credentials are accepted, with a line that says
 * which of them is wrong.
 */
static int probe(struct s3_store *st, char *err, size_t errlen)
{
	const struct ckpt_s3_cfg *c = &st->cfg;
	char rshown[CKPT_S3_NAME_SHOWN];
	const char *root = ckpt_escape_mid(st->base.root,
					   strlen(st->base.root), rshown,
					   sizeof(rshown));
	char *want = NULL, *query = NULL, *url = NULL;
	struct ckpt_s3_req q = { .max_body = PROBE_MAX_BODY,
				    .list = true };
	struct ckpt_s3_param p[3] = {
		{ "list-type", "2" }, { "max-keys", "1" }, { "prefix", "" },
	};
	size_t failed;
	int rc;

	if (asprintf(&want, "%s%s", st->prefix, st->prefix[0] ? "/" : "") < 0)
		want = NULL;
	if (want) {
		p[2].value = want;
		query = ckpt_s3_query(p, 3);
	}
	if (query)
		url = ckpt_s3_url(st->url_ep, st->url_bucket, NULL, query);
	if (!url) {
		rc = ckpt_errf(err, errlen, -ENOMEM, "%s: out of memory",
			       root);
		goto out_free;
	}
	q.url = url;
	q.max_tries = c->retries + 1 < PROBE_MAX_TRIES ? c->retries + 1 :
		      PROBE_MAX_TRIES;
	rc = ckpt_s3_http_run(st->http, &q, 1, &failed);
	if (rc == 0)
		goto out_free;
	if (q.status == 0 && q.tls_failed) {
		/* the reason names the host and why */
		rc = ckpt_errf(err, errlen, -EIO, "%s: %s", root, q.reason);
	} else if (q.status == 0) {
		rc = q.curl_code == 6 ? -EHOSTUNREACH :
		     q.curl_code == 28 || q.curl_code == 42 ? -ETIMEDOUT :
		     -ECONNREFUSED;
		ckpt_errf(err, errlen, rc, "%s: cannot reach %s: %s", root,
			  c->endpoint, q.reason);
	} else if (q.status == 404 && strcmp(q.code, "NoSuchBucket") == 0) {
		rc = ckpt_errf(err, errlen, -ENOENT, "%s: bucket '%s' does not "
			       "exist at %s (%s)", root, st->bucket,
			       c->endpoint, q.reason);
	} else if (strcmp(q.code, "SignatureDoesNotMatch") == 0) {
		rc = ckpt_errf(err, errlen, -EACCES, "%s: %s refused the "
			       "secret key from %s (%s)", root, c->endpoint,
			       c->cred_source, q.reason);
	} else if (strcmp(q.code, "InvalidAccessKeyId") == 0) {
		rc = ckpt_errf(err, errlen, -EACCES, "%s: %s does not know the "
			       "access key id from %s (%s)", root,
			       c->endpoint, c->cred_source, q.reason);
	} else if (q.status == 403 && strcmp(q.code, "AccessDenied") == 0 &&
		   !ckpt_s3_creds_is_anonymous(c->creds)) {
		rc = 0;		/* may not list, may still read */
	} else if (q.status == 403) {
		rc = ckpt_errf(err, errlen, -EACCES, "%s: %s denied access "
			       "with %s (%s)", root, c->endpoint,
			       c->cred_source, q.reason);
	} else if (q.status == 301 || q.status == 400) {
		rc = ckpt_errf(err, errlen, -EINVAL, "%s: %s refused the "
			       "request (%s); is region '%s' the bucket's?",
			       root, c->endpoint, q.reason, c->region);
	} else {
		rc = ckpt_errf(err, errlen, -EIO, "%s: %s answered %s", root,
			       c->endpoint, q.reason);
	}
out_free:
	ckpt_s3_req_destroy(&q);
	free(url);
	free(query);
	free(want);
	return rc;
}

/*
 * A session token sent over plain http:// can be read and replayed by
 * anyone on the path for as long as it lives, and so can a web identity
 * token sent to STS over http (STS's endpoint falls back to
 * AWS_ENDPOINT_URL) and the credentials STS returns: say so, in one
 * line, once per store (its first user shows it: ckpt_meta_warning(),
 * the daemon's log, Python's warnings).  No secret in it.
 */
static void token_warning(struct s3_store *st)
{
	struct ckpt_s3_credset *cs;
	bool token, web = false;
	const char *sts = ckpt_s3_creds_plain_sts(st->cfg.creds, &web);
	char *s3 = NULL, *ststxt = NULL;

	/* the set was fetched a moment ago: no refresh to wait for */
	(void)ckpt_s3_creds_get(st->cfg.creds, NULL, NULL, 0, &cs);
	token = cs && cs->session_token;

	ckpt_s3_credset_put(cs);
	if (token && !strncasecmp(st->cfg.endpoint, "http://", 7) &&
	    asprintf(&s3, "a session token (from %s) goes over plain http "
		     "to %s, readable on the way; use an https:// endpoint",
		     st->cfg.cred_source, st->cfg.endpoint) < 0)
		s3 = NULL;
	if (sts && asprintf(&ststxt, web ?
			    "a web identity token (from %s) goes over plain "
			    "http to STS at %s, and the credentials STS "
			    "returns come back the same way, readable on the "
			    "way; use an https:// STS endpoint "
			    "(AWS_ENDPOINT_URL_STS)" :
			    "the credentials STS returns (for %s) come over "
			    "plain http from STS at %s, readable on the way; "
			    "use an https:// STS endpoint "
			    "(AWS_ENDPOINT_URL_STS)",
			    st->cfg.cred_source, sts) < 0)
		ststxt = NULL;
	if ((s3 || ststxt) &&
	    asprintf(&st->base.warning, "%s: %s%s%s", st->base.root,
		     s3 ? s3 : "", s3 && ststxt ? "; " : "",
		     ststxt ? ststxt : "") < 0)
		st->base.warning = NULL;
	free(s3);
	free(ststxt);
}

int ckpt_store_s3_new(const char *root, const struct ckpt_store_opts *o,
		      struct ckpt_store **out, char *err, size_t errlen)
{
	struct s3_store *st;
	char cerr[400];
	int rc;

	*out = NULL;
	st = calloc(1, sizeof(*st));
	if (!st)
		return ckpt_errf(err, errlen, -ENOMEM, "%s: out of memory",
				 root);
	pthread_mutex_init(&st->lock, NULL);
	st->base.ops = &s3_ops;
	st->base.root = strdup(root);
	if (!st->base.root) {
		rc = ckpt_errf(err, errlen, -ENOMEM, "%s: out of memory", root);
		goto out_fail;
	}
	rc = ckpt_s3_root_parse(root, &st->bucket, &st->prefix, err, errlen);
	if (rc)
		goto out_fail;
	rc = ckpt_s3_config_load(o ? o->s3 : NULL, &st->cfg, cerr,
				 sizeof(cerr));
	if (rc) {
		ckpt_errf(err, errlen, rc, "%s: %s", root, cerr);
		goto out_fail;
	}
	if (ckpt_s3_use_virtual(st->cfg.addressing, st->cfg.endpoint,
				st->cfg.endpoint_given, st->bucket)) {
		if (!ckpt_s3_bucket_is_dns(st->bucket)) {
			rc = ckpt_errf(err, errlen, -EINVAL, "%s: bucket '%s' "
				       "cannot be virtual-hosted (a DNS "
				       "label: a-z, 0-9 and '-', no '.'); "
				       "use addressing style path or auto",
				       root, st->bucket);
			goto out_fail;
		}
		st->url_ep = ckpt_s3_virtual_endpoint(st->cfg.endpoint,
						      st->bucket);
		st->url_bucket = NULL;
	} else {
		st->url_ep = strdup(st->cfg.endpoint);
		st->url_bucket = st->bucket;
	}
	if (!st->url_ep) {
		rc = ckpt_errf(err, errlen, -ENOMEM, "%s: out of memory", root);
		goto out_fail;
	}
	if (asprintf(&st->base.identity, "s3:%s/%s/%s", st->cfg.endpoint,
		     st->bucket, st->prefix) < 0) {
		st->base.identity = NULL;
		rc = ckpt_errf(err, errlen, -ENOMEM, "%s: out of memory", root);
		goto out_fail;
	}
	st->base.parallelism = st->cfg.parallel;
	st->base.credentials = st->cfg.cred_source;
	rc = ckpt_s3_http_new(&st->cfg, &st->base, &st->http, cerr,
			      sizeof(cerr));
	if (rc) {
		ckpt_errf(err, errlen, rc, "%s: %s", root, cerr);
		goto out_fail;
	}
	rc = probe(st, err, errlen);
	if (rc)
		goto out_fail;
	token_warning(st);
	*out = &st->base;
	return 0;

out_fail:
	s3_destroy(&st->base);
	return rc;
}
