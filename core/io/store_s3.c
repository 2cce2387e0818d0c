/* SPDX-License-Identifier: MIT */
/*
 * The S3 store: a root "s3://bucket[/prefix]" read over libcurl (see
 * store.h for the contract, s3_config.h for the settings, obj_store.h for
 * opens, reads and listings, which it shares with Azure's store).  Here:
 * how a name becomes a URL, the listing, the probe at open, the warning.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/errbuf.h"
#include "common/escape.h"
#include "io/s3_config.h"
#include "io/s3_http.h"
#include "io/s3_list.h"
#include "io/s3_url.h"
#include "io/obj_store.h"
#include "io/store_impl.h"

#define PROBE_MAX_BODY (1u << 20)
#define PROBE_MAX_TRIES 3

struct s3_store {
	struct ckpt_obj_store os;	/* first: see obj_store.h */
	struct ckpt_s3_cfg cfg;
	char *bucket;
	char *prefix;		/* "" or "a/b" */
	char *url_ep;		/* what URLs begin with: the endpoint, or
				 * the bucket's virtual-hosted one */
	const char *url_bucket;	/* bucket (path-style) or NULL
				 * (virtual-hosted): see ckpt_s3_url() */
};

static int s3_where(struct ckpt_obj_store *os, const char *name, char **url,
		    char **uri)
{
	struct s3_store *st = (struct s3_store *)os;
	char *key = ckpt_s3_key(st->prefix, name);

	*url = key ? ckpt_s3_url(st->url_ep, st->url_bucket, key, NULL) :
	       NULL;
	if (!*url || asprintf(uri, "s3://%s/%s", st->bucket, key) < 0)
		*uri = NULL;
	free(key);
	return *url && *uri ? 0 : -ENOMEM;
}

static int s3_list_root(struct ckpt_obj_store *os, ckpt_obj_listed_fn fn,
			void *ctx, char *err, size_t errlen)
{
	struct s3_store *st = (struct s3_store *)os;

	return ckpt_s3_list(os->http, st->url_ep, st->url_bucket, st->prefix,
			    0, st->cfg.list_max_keys, os->base.root, fn, ctx,
			    err, errlen);
}

static void s3_destroy(struct ckpt_store *s)
{
	struct s3_store *st = (struct s3_store *)s;

	if (!st)
		return;
	ckpt_obj_store_fini(&st->os);
	ckpt_s3_config_destroy(&st->cfg);
	free(st->url_ep);
	free(st->bucket);
	free(st->prefix);
	free(st);
}

static const struct ckpt_store_ops s3_ops =
	CKPT_OBJ_STORE_OPS("s3", s3_destroy);

/*
 * Ask for one key under the prefix: proves the endpoint answers, the
 * bucket exists and the credentials are accepted, with a line that says
 * which of them is wrong.
 */
static int probe(struct s3_store *st, char *err, size_t errlen)
{
	const struct ckpt_s3_cfg *c = &st->cfg;
	char rshown[CKPT_S3_NAME_SHOWN];
	const char *root = ckpt_escape_mid(st->os.base.root,
					   strlen(st->os.base.root), rshown,
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
	rc = ckpt_s3_http_run(st->os.http, &q, 1, &failed);
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
	    asprintf(&st->os.base.warning, "%s: %s%s%s", st->os.base.root,
		     s3 ? s3 : "", s3 && ststxt ? "; " : "",
		     ststxt ? ststxt : "") < 0)
		st->os.base.warning = NULL;
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
	ckpt_obj_store_init(&st->os);
	st->os.base.ops = &s3_ops;
	st->os.noun = "object";
	st->os.where = s3_where;
	st->os.list_root = s3_list_root;
	st->os.base.root = strdup(root);
	if (!st->os.base.root) {
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
	if (asprintf(&st->os.base.identity, "s3:%s/%s/%s", st->cfg.endpoint,
		     st->bucket, st->prefix) < 0) {
		st->os.base.identity = NULL;
		rc = ckpt_errf(err, errlen, -ENOMEM, "%s: out of memory", root);
		goto out_fail;
	}
	st->os.merge_gap = st->cfg.merge_gap;
	st->os.part_bytes = st->cfg.part_bytes;
	st->os.base.parallelism = st->cfg.parallel;
	st->os.base.credentials = st->cfg.cred_source;
	rc = ckpt_s3_http_new(&st->cfg, &st->os.base, &st->os.http, cerr,
			      sizeof(cerr));
	if (rc) {
		ckpt_errf(err, errlen, rc, "%s: %s", root, cerr);
		goto out_fail;
	}
	rc = probe(st, err, errlen);
	if (rc)
		goto out_fail;
	token_warning(st);
	*out = &st->os.base;
	return 0;

out_fail:
	s3_destroy(&st->os.base);
	return rc;
}
