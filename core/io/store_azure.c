/* SPDX-License-Identifier: MIT */
/*
 * The Azure Blob Storage store: a root "az://ACCOUNT/CONTAINER[/PREFIX]"
 * or a blob URL (az_config.h) read over S3's HTTP engine, which signs
 * with az_config.c's signer (see store.h for the contract, obj_store.h
 * for opens, reads and listings, which it shares with S3's store).
 * Here: how a name becomes a URL, the listing, the probe at open, the
 * warning.
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
#include "io/s3_http.h"
#include "io/az_list.h"
#include "io/s3_url.h"
#include "io/obj_store.h"
#include "io/store_impl.h"

#define PROBE_MAX_BODY (1u << 20)
#define PROBE_MAX_TRIES 3

struct az_store {
	struct ckpt_obj_store os;	/* first: see obj_store.h */
	struct ckpt_az_cfg cfg;	/* must not move: its signer points
				 * into it */
};

static int az_where(struct ckpt_obj_store *os, const char *name, char **url,
		    char **uri)
{
	struct az_store *st = (struct az_store *)os;
	char *key = ckpt_s3_key(st->cfg.prefix, name);

	*url = key ? ckpt_az_url(&st->cfg, key, NULL) : NULL;
	if (!*url || asprintf(uri, "az://%s/%s/%s", st->cfg.account,
			      st->cfg.container, key) < 0)
		*uri = NULL;
	free(key);
	return *url && *uri ? 0 : -ENOMEM;
}

static int az_list_root(struct ckpt_obj_store *os, ckpt_obj_listed_fn fn,
			void *ctx, char *err, size_t errlen)
{
	struct az_store *st = (struct az_store *)os;

	return ckpt_az_list(os->http, &st->cfg, 0,
			    st->cfg.http.list_max_keys, fn, ctx, err, errlen);
}

static void az_destroy(struct ckpt_store *s)
{
	struct az_store *st = (struct az_store *)s;

	if (!st)
		return;
	ckpt_obj_store_fini(&st->os);
	ckpt_az_config_destroy(&st->cfg);
	free(st);
}

static const struct ckpt_store_ops az_ops =
	CKPT_OBJ_STORE_OPS("azure", az_destroy);

/*
 * Ask for one blob under the prefix: proves the endpoint answers, the
 * container exists and the credentials are accepted, with a line that
 * says which of them is wrong.  A SAS without list permission may still
 * read: its refusal of the listing is not an error.
 */
static int probe(struct az_store *st, char *err, size_t errlen)
{
	const struct ckpt_az_cfg *c = &st->cfg;
	char rshown[CKPT_S3_NAME_SHOWN];
	const char *root = ckpt_escape_mid(c->root, strlen(c->root), rshown,
					   sizeof(rshown));
	char *want = NULL, *query = NULL, *url = NULL;
	struct ckpt_s3_req q = { .max_body = PROBE_MAX_BODY, .list = true };
	struct ckpt_s3_param p[4] = {
		{ "restype", "container" }, { "comp", "list" },
		{ "maxresults", "1" }, { "prefix", "" },
	};
	size_t failed;
	int rc;

	if (asprintf(&want, "%s%s", c->prefix, c->prefix[0] ? "/" : "") < 0)
		want = NULL;
	if (want) {
		p[3].value = want;
		query = ckpt_s3_query(p, 4);
	}
	if (query)
		url = ckpt_az_url(c, NULL, query);
	if (!url) {
		rc = ckpt_errf(err, errlen, -ENOMEM, "%s: out of memory",
			       root);
		goto out_free;
	}
	q.url = url;
	q.max_tries = c->http.retries + 1 < PROBE_MAX_TRIES ?
		      c->http.retries + 1 : PROBE_MAX_TRIES;
	rc = ckpt_s3_http_run(st->os.http, &q, 1, &failed);
	if (rc == 0)
		goto out_free;
	if (q.status == 0 && q.tls_failed) {
		rc = ckpt_errf(err, errlen, -EIO, "%s: %s", root, q.reason);
	} else if (q.status == 0) {
		rc = q.curl_code == 6 ? -EHOSTUNREACH :
		     q.curl_code == 28 || q.curl_code == 42 ? -ETIMEDOUT :
		     -ECONNREFUSED;
		ckpt_errf(err, errlen, rc, "%s: cannot reach %s: %s", root,
			  c->endpoint, q.reason);
	} else if (q.status == 404 &&
		   strcmp(q.code, "ContainerNotFound") == 0) {
		rc = ckpt_errf(err, errlen, -ENOENT, "%s: container '%s' does "
			       "not exist at %s (%s)", root, c->container,
			       c->endpoint, q.reason);
	} else if (q.status == 403 &&
		   (strcmp(q.code, "AuthorizationPermissionMismatch") == 0 ||
		    strcmp(q.code, "AuthorizationResourceTypeMismatch") == 0) &&
		   c->auth == CKPT_AZ_SAS) {
		rc = 0;		/* may not list, may still read */
	} else if (q.status == 403 || q.status == 401) {
		rc = ckpt_errf(err, errlen, -EACCES, "%s: %s refused the "
			       "credentials (%s) (%s)", root, c->endpoint,
			       c->cred_source, q.reason);
	} else if (q.status == 404) {
		rc = ckpt_errf(err, errlen, -ENOENT, "%s: %s has no such "
			       "account or container (%s)", root, c->endpoint,
			       q.reason);
	} else {
		rc = ckpt_errf(err, errlen, -EIO, "%s: %s answered %s", root,
			       c->endpoint, q.reason);
	}
out_free:
	ckpt_s3_req_destroy(&q);
	if (url)
		memset(url, 0, strlen(url));
	free(url);
	free(query);
	free(want);
	return rc;
}

/* A SAS sent over plain http:// can be read and replayed by anyone on the
 * path until it expires: say so, once per store, without the SAS. */
static void sas_warning(struct az_store *st)
{
	if (st->cfg.auth != CKPT_AZ_SAS ||
	    strncasecmp(st->cfg.endpoint, "http://", 7))
		return;
	if (asprintf(&st->os.base.warning, "%s: a SAS token (from %s) goes over "
		     "plain http to %s, readable on the way; use an https:// "
		     "endpoint", st->cfg.root, st->cfg.cred_source,
		     st->cfg.endpoint) < 0)
		st->os.base.warning = NULL;
}

/* A bearer token is refused over plain http://, as the Azure SDKs
 * refuse it (and Azure Storage would answer 400 after it crossed the
 * path in the clear): -EINVAL naming the source and the endpoint. */
static int bearer_over_http(const struct ckpt_az_cfg *c, char *err,
			    size_t errlen)
{
	if (c->auth != CKPT_AZ_TOKEN || strncasecmp(c->endpoint, "http://", 7))
		return 0;
	return ckpt_errf(err, errlen, -EINVAL, "%s: %s would go over plain "
			 "http to %s, readable on the way; Azure Storage takes "
			 "tokens over https only: use an https:// endpoint",
			 c->root, c->cred_source, c->endpoint);
}

int ckpt_store_azure_new(const char *root, const struct ckpt_store_opts *o,
			 struct ckpt_store **out, char *err, size_t errlen)
{
	struct az_store *st;
	char cerr[400];
	int rc;

	*out = NULL;
	st = calloc(1, sizeof(*st));
	if (!st)
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	ckpt_obj_store_init(&st->os);
	st->os.base.ops = &az_ops;
	st->os.noun = "blob";
	st->os.where = az_where;
	st->os.list_root = az_list_root;
	rc = ckpt_az_config_load(root, o ? o->s3 : NULL, &st->cfg, err,
				 errlen);
	if (rc)
		goto out_fail;
	rc = bearer_over_http(&st->cfg, err, errlen);
	if (rc)
		goto out_fail;
	/* never the SAS a URL root may carry */
	st->os.base.root = strdup(st->cfg.root);
	if (!st->os.base.root ||
	    asprintf(&st->os.base.identity, "az:%s/%s/%s", st->cfg.endpoint,
		     st->cfg.container, st->cfg.prefix) < 0) {
		st->os.base.identity = NULL;
		rc = ckpt_errf(err, errlen, -ENOMEM, "%s: out of memory",
			       st->cfg.root);
		goto out_fail;
	}
	st->os.merge_gap = st->cfg.http.merge_gap;
	st->os.part_bytes = st->cfg.http.part_bytes;
	st->os.base.parallelism = st->cfg.http.parallel;
	st->os.base.credentials = st->cfg.cred_source;
	rc = ckpt_s3_http_new(&st->cfg.http, &st->os.base, &st->os.http, cerr,
			      sizeof(cerr));
	if (rc) {
		ckpt_errf(err, errlen, rc, "%s: %s", st->cfg.root, cerr);
		goto out_fail;
	}
	rc = probe(st, err, errlen);
	if (rc)
		goto out_fail;
	sas_warning(st);
	*out = &st->os.base;
	return 0;

out_fail:
	az_destroy(&st->os.base);
	return rc;
}
