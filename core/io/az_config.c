/* SPDX-License-Identifier: MIT */
/* Azure Blob Storage names and credentials: see az_config.h. */
#include "io/az_config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "common/errbuf.h"
#include "io/az_token.h"
#include "io/s3_url.h"

#define NAME_MAX_LEN 1024

static const char *env(const char *name)
{
	const char *v = getenv(name);

	return v && v[0] ? v : NULL;
}

bool ckpt_az_root_is(const char *root)
{
	return !strncmp(root, "az://", 5) || !strncmp(root, "https://", 8) ||
	       !strncmp(root, "http://", 7);
}

/* An account name as Azure allows it: 3 to 24 of a-z 0-9. */
static bool is_account(const char *s, size_t n)
{
	size_t i;

	if (n < 3 || n > 24)
		return false;
	for (i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') ||
		      (s[i] >= '0' && s[i] <= '9')))
			return false;
	return true;
}

/* A container name: 3 to 63 of a-z 0-9 '-', or "$root". */
static bool is_container(const char *s)
{
	size_t n = strlen(s), i;

	if (!strcmp(s, "$root"))
		return true;
	if (n < 3 || n > 63 || s[0] == '-' || s[n - 1] == '-')
		return false;
	for (i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') ||
		      (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
			return false;
	return true;
}

/* A SAS as it may go on a URL: printable, no space, '#' or '&&'. */
static bool is_sas(const char *s)
{
	const char *p;

	if (!strstr(s, "sig=") || s[0] == '&')
		return false;
	for (p = s; *p; p++)
		if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f ||
		    *p == '#')
			return false;
	return true;
}

/* CONTAINER[/PREFIX] (URL-decoded when decode) into cfg. */
static int split_path(struct ckpt_az_cfg *cfg, const char *path, size_t len,
		      bool decode, char *err, size_t errlen)
{
	char *p = strndup(path, len), *slash, *d;
	size_t n;

	if (!p)
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	if (decode) {
		d = malloc(len + 1);
		if (!d || ckpt_s3_pct_decode(p, d, len + 1) < 0) {
			free(p);
			free(d);
			return ckpt_errf(err, errlen, d ? -EINVAL : -ENOMEM,
					 "%s: a malformed %%-escape in the "
					 "path", cfg->root);
		}
		free(p);
		p = d;
	}
	slash = strchr(p, '/');
	if (slash)
		*slash = '\0';
	cfg->container = strdup(p);
	d = slash ? slash + 1 : (char *)"";
	while (*d == '/')
		d++;
	n = strlen(d);
	while (n && d[n - 1] == '/')
		n--;
	cfg->prefix = strndup(d, n);
	free(p);
	if (!cfg->container || !cfg->prefix)
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	if (!is_container(cfg->container))
		return ckpt_errf(err, errlen, -EINVAL, "%s: '%.80s' is not a "
				 "container name (3 to 63 of a-z, 0-9 and "
				 "'-')", cfg->root, cfg->container);
	return 0;
}

/* Parse root into account, container, prefix, the URL's own endpoint
 * (or NULL) and its SAS (or NULL). */
static int parse_root(struct ckpt_az_cfg *cfg, const char *root,
		      char **url_sas, char *err, size_t errlen)
{
	const char *q = strchr(root, '?'), *host, *hend, *path, *acct_end;
	size_t rlen = q ? (size_t)(q - root) : strlen(root);

	*url_sas = NULL;
	cfg->root = strndup(root, rlen);
	if (!cfg->root)
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	if (rlen > NAME_MAX_LEN)
		return ckpt_errf(err, errlen, -EINVAL, "%.64s...: name too "
				 "long", cfg->root);
	if (q) {
		if (!is_sas(q + 1))
			return ckpt_errf(err, errlen, -EINVAL, "%s: what "
					 "follows '?' is not a SAS token "
					 "(sv=...&sig=...)", cfg->root);
		*url_sas = strdup(q + 1);
		if (!*url_sas)
			return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	}
	if (!strncmp(root, "az://", 5)) {
		host = root + 5;
		acct_end = memchr(host, '/', rlen - 5);
		if (!acct_end || !is_account(host, (size_t)(acct_end - host)))
			return ckpt_errf(err, errlen, -EINVAL, "%s: not "
					 "az://ACCOUNT/CONTAINER[/PREFIX] "
					 "(an account is 3 to 24 of a-z and "
					 "0-9)", cfg->root);
		cfg->account = strndup(host, (size_t)(acct_end - host));
		if (!cfg->account)
			return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
		return split_path(cfg, acct_end + 1,
				  rlen - (size_t)(acct_end + 1 - root), false,
				  err, errlen);
	}
	host = strstr(root, "://") + 3;
	path = memchr(host, '/', rlen - (size_t)(host - root));
	hend = path ? path : root + rlen;
	if (!path || memchr(host, '@', (size_t)(hend - host)))
		return ckpt_errf(err, errlen, -EINVAL, "%s: not a blob URL "
				 "(https://ACCOUNT.blob.core.windows.net/"
				 "CONTAINER[/PREFIX])", cfg->root);
	acct_end = memchr(host, '.', (size_t)(hend - host));
	if (acct_end && !strncmp(acct_end, ".blob.", 6)) {
		/* https://ACCOUNT.blob.SUFFIX/CONTAINER/PREFIX */
		if (!is_account(host, (size_t)(acct_end - host)))
			return ckpt_errf(err, errlen, -EINVAL, "%s: not an "
					 "account name before .blob.",
					 cfg->root);
		cfg->account = strndup(host, (size_t)(acct_end - host));
		cfg->endpoint = strndup(root, (size_t)(hend - root));
		if (!cfg->account || !cfg->endpoint)
			return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
		return split_path(cfg, path + 1,
				  rlen - (size_t)(path + 1 - root), true, err,
				  errlen);
	}
	/* path style: http://HOST:PORT/ACCOUNT/CONTAINER/PREFIX (Azurite) */
	host = path + 1;
	acct_end = memchr(host, '/', rlen - (size_t)(host - root));
	if (!acct_end || !is_account(host, (size_t)(acct_end - host)))
		return ckpt_errf(err, errlen, -EINVAL, "%s: not a blob URL "
				 "(http(s)://HOST/ACCOUNT/CONTAINER[/PREFIX] "
				 "or https://ACCOUNT.blob.core.windows.net/"
				 "CONTAINER[/PREFIX])", cfg->root);
	cfg->account = strndup(host, (size_t)(acct_end - host));
	cfg->endpoint = strndup(root, (size_t)(acct_end - root));
	if (!cfg->account || !cfg->endpoint)
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	return split_path(cfg, acct_end + 1,
			  rlen - (size_t)(acct_end + 1 - root), true, err,
			  errlen);
}

/* The value of field name ("AccountKey") of connection string cs, a new
 * string, or NULL (*oom set when out of memory). */
static char *cs_field(const char *cs, const char *name, bool *oom)
{
	size_t nl = strlen(name);
	const char *p = cs;

	while (*p) {
		const char *end = strchr(p, ';');
		size_t len = end ? (size_t)(end - p) : strlen(p);

		while (len && (*p == ' ' || *p == '\t')) {
			p++;
			len--;
		}
		if (len > nl && p[nl] == '=' && !strncasecmp(p, name, nl)) {
			char *v = strndup(p + nl + 1, len - nl - 1);

			if (!v)
				*oom = true;
			return v;
		}
		p += len + (end != NULL);
	}
	return NULL;
}

static int take_key(struct ckpt_az_cfg *cfg, const char *b64,
		    const char *where, char *err, size_t errlen)
{
	long n = ckpt_az_b64_decode(b64, cfg->key, sizeof(cfg->key));

	if (n <= 0)
		return ckpt_errf(err, errlen, -EINVAL, "%s: the account key "
				 "from %s is not base64 (or longer than %d "
				 "bytes)", cfg->root, where, CKPT_AZ_KEY_MAX);
	cfg->klen = (size_t)n;
	cfg->auth = CKPT_AZ_SHARED_KEY;
	return 0;
}

static int take_sas(struct ckpt_az_cfg *cfg, const char *sas,
		    const char *where, char *err, size_t errlen)
{
	if (sas[0] == '?')
		sas++;
	if (!is_sas(sas))
		return ckpt_errf(err, errlen, -EINVAL, "%s: the SAS token from "
				 "%s is not one (sv=...&sig=..., printable, "
				 "no spaces)", cfg->root, where);
	cfg->sas = strdup(sas);
	if (!cfg->sas)
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	cfg->auth = CKPT_AZ_SAS;
	return 0;
}

/* Find the credentials in the documented order. */
static int find_creds(struct ckpt_az_cfg *cfg, const struct ckpt_s3_opts *o,
		      char *url_sas, const char *cs, char *err,
		      size_t errlen)
{
	const char *acct = env("AZURE_STORAGE_ACCOUNT"), *v;
	char *f, why[600];
	bool oom = false;
	int rc;

	if (url_sas) {
		cfg->sas = url_sas;
		cfg->auth = CKPT_AZ_SAS;
		snprintf(cfg->cred_source, sizeof(cfg->cred_source),
			 "a SAS token on the URL");
		return 0;
	}
	if ((v = env("AZURE_STORAGE_SAS_TOKEN"))) {
		snprintf(cfg->cred_source, sizeof(cfg->cred_source),
			 "a SAS token from the environment "
			 "(AZURE_STORAGE_SAS_TOKEN)");
		return take_sas(cfg, v, "AZURE_STORAGE_SAS_TOKEN", err, errlen);
	}
	if ((v = env("AZURE_STORAGE_KEY"))) {
		if (acct && strcmp(acct, cfg->account))
			return ckpt_errf(err, errlen, -EACCES, "%s: "
					 "AZURE_STORAGE_KEY is the key of "
					 "account '%.64s' "
					 "(AZURE_STORAGE_ACCOUNT), not of '%s'",
					 cfg->root, acct, cfg->account);
		snprintf(cfg->cred_source, sizeof(cfg->cred_source),
			 "Shared Key of account %s from the environment "
			 "(AZURE_STORAGE_KEY%s)", cfg->account,
			 acct ? ", AZURE_STORAGE_ACCOUNT" : "");
		return take_key(cfg, v, "AZURE_STORAGE_KEY", err, errlen);
	}
	if (cs) {
		f = cs_field(cs, "AccountName", &oom);
		if (f && strcmp(f, cfg->account)) {
			rc = ckpt_errf(err, errlen, -EACCES, "%s: "
				       "AZURE_STORAGE_CONNECTION_STRING is for "
				       "account '%.64s', not '%s'", cfg->root,
				       f, cfg->account);
			free(f);
			return rc;
		}
		free(f);
		f = cs_field(cs, "SharedAccessSignature", &oom);
		if (f) {
			snprintf(cfg->cred_source, sizeof(cfg->cred_source),
				 "a SAS token from the connection string "
				 "(AZURE_STORAGE_CONNECTION_STRING)");
			rc = take_sas(cfg, f, "AZURE_STORAGE_CONNECTION_STRING",
				      err, errlen);
			memset(f, 0, strlen(f));
			free(f);
			return rc;
		}
		f = cs_field(cs, "AccountKey", &oom);
		if (f) {
			snprintf(cfg->cred_source, sizeof(cfg->cred_source),
				 "Shared Key of account %s from the connection "
				 "string (AZURE_STORAGE_CONNECTION_STRING)",
				 cfg->account);
			rc = take_key(cfg, f, "AZURE_STORAGE_CONNECTION_STRING",
				      err, errlen);
			memset(f, 0, strlen(f));
			free(f);
			return rc;
		}
		if (oom)
			return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	}
	if (o && o->az_anonymous) {
		cfg->auth = CKPT_AZ_ANONYMOUS;
		snprintf(cfg->cred_source, sizeof(cfg->cred_source),
			 "anonymous (az_anonymous)");
		return 0;
	}
	rc = ckpt_az_token_creds(&cfg->http, &cfg->http.creds,
				 cfg->cred_source, sizeof(cfg->cred_source),
				 why, sizeof(why));
	if (rc == 0) {
		cfg->auth = CKPT_AZ_TOKEN;
		return 0;
	}
	if (rc != -ENOKEY)
		return ckpt_errf(err, errlen, rc, "%s: %s", cfg->root, why);
	return ckpt_errf(err, errlen, -EACCES, "%s: no Azure credentials: "
			 "tried a SAS token on the URL, "
			 "AZURE_STORAGE_SAS_TOKEN, AZURE_STORAGE_KEY, "
			 "AZURE_STORAGE_CONNECTION_STRING, "
			 "AZURE_CLIENT_SECRET, AZURE_FEDERATED_TOKEN_FILE, "
			 "IDENTITY_ENDPOINT, %s; -o az_anonymous reads a "
			 "public container", cfg->root, why);
}

static int az_sign(void *ctx, const char *method, const char *url,
		   const char *range, const char *if_match,
		   int (*add)(void *actx, const char *line), void *actx)
{
	const struct ckpt_az_cfg *cfg = ctx;
	char date[CKPT_AZ_DATE_LEN], line[CKPT_AZ_DATE_LEN + 64];
	char *auth;
	int rc;

	ckpt_az_http_date(time(NULL), date);
	snprintf(line, sizeof(line), "x-ms-date: %s", date);
	rc = add(actx, line);
	if (rc == 0)
		rc = add(actx, "x-ms-version: " CKPT_AZ_API_VERSION);
	if (rc == 0 && range) {
		snprintf(line, sizeof(line), "x-ms-range: %s", range);
		rc = add(actx, line);
	}
	if (rc || cfg->auth != CKPT_AZ_SHARED_KEY)
		return rc;
	rc = ckpt_az_sharedkey(cfg->account, cfg->key, cfg->klen, method,
			       url, date, if_match, range, &auth);
	if (rc)
		return rc;
	rc = add(actx, auth);
	free(auth);
	return rc;
}

int ckpt_az_config_load(const char *root, const struct ckpt_s3_opts *o,
			struct ckpt_az_cfg *cfg, char *err, size_t errlen)
{
	const char *cs = env("AZURE_STORAGE_CONNECTION_STRING");
	char *url_sas = NULL, *ep = NULL, *csep = NULL, why[300];
	const char *ep_src = NULL;
	bool oom = false;
	int rc;

	memset(cfg, 0, sizeof(*cfg));
	rc = parse_root(cfg, root, &url_sas, err, errlen);
	if (rc)
		goto out_fail;
	rc = ckpt_s3_config_numbers(o, &cfg->http, why, sizeof(why));
	if (rc) {
		ckpt_errf(err, errlen, rc, "%s: %s", cfg->root, why);
		goto out_fail;
	}
	if (cfg->endpoint) {
		ep = cfg->endpoint;
		ep_src = "the URL";
	} else if (o && o->az_endpoint) {
		ep = (char *)o->az_endpoint;
		ep_src = "az_endpoint";
	} else if (env("AZURE_STORAGE_BLOB_ENDPOINT")) {
		ep = (char *)env("AZURE_STORAGE_BLOB_ENDPOINT");
		ep_src = "AZURE_STORAGE_BLOB_ENDPOINT";
	} else if (cs && (csep = cs_field(cs, "BlobEndpoint", &oom))) {
		ep = csep;
		ep_src = "the connection string's BlobEndpoint";
	} else if (asprintf(&csep, "https://%s.blob.core.windows.net",
			    cfg->account) >= 0) {
		ep = csep;
		ep_src = "the account";
	} else {
		csep = NULL;
		oom = true;
	}
	if (oom) {
		rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
		goto out_fail;
	}
	ep = ckpt_s3_endpoint_norm(ep, ep_src, why, sizeof(why));
	free(csep);
	if (!ep) {
		rc = ckpt_errf(err, errlen, -EINVAL, "%s: %s", cfg->root, why);
		goto out_fail;
	}
	free(cfg->endpoint);
	cfg->endpoint = ep;
	cfg->http.endpoint = strdup(ep);
	if (o && o->ca_bundle)
		cfg->http.ca_bundle = strdup(o->ca_bundle);
	if (!cfg->http.endpoint ||
	    (o && o->ca_bundle && !cfg->http.ca_bundle)) {
		rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
		goto out_fail;
	}
	rc = find_creds(cfg, o, url_sas, cs, err, errlen);
	url_sas = NULL;		/* cfg->sas owns it now, or it is freed */
	if (rc)
		goto out_fail;
	cfg->http.cred_source = cfg->cred_source;
	cfg->signer.sign = az_sign;
	cfg->signer.ctx = cfg;
	cfg->http.signer = &cfg->signer;
	return 0;

out_fail:
	if (url_sas && url_sas != cfg->sas) {
		memset(url_sas, 0, strlen(url_sas));
		free(url_sas);
	}
	ckpt_az_config_destroy(cfg);
	return rc;
}

void ckpt_az_config_destroy(struct ckpt_az_cfg *cfg)
{
	if (cfg->sas) {
		memset(cfg->sas, 0, strlen(cfg->sas));
		free(cfg->sas);
	}
	memset(cfg->key, 0, sizeof(cfg->key));
	free(cfg->root);
	free(cfg->account);
	free(cfg->container);
	free(cfg->prefix);
	free(cfg->endpoint);
	free(cfg->http.endpoint);
	free(cfg->http.ca_bundle);
	ckpt_s3_creds_free(cfg->http.creds);
	memset(cfg, 0, sizeof(*cfg));
}

char *ckpt_az_url(const struct ckpt_az_cfg *cfg, const char *key,
		  const char *extra_query)
{
	char *q = NULL, *url;

	if (extra_query && cfg->sas) {
		if (asprintf(&q, "%s&%s", extra_query, cfg->sas) < 0)
			return NULL;
	} else {
		q = extra_query ? strdup(extra_query) :
		    cfg->sas ? strdup(cfg->sas) : NULL;
		if ((extra_query || cfg->sas) && !q)
			return NULL;
	}
	url = ckpt_s3_url(cfg->endpoint, cfg->container, key, q);
	if (q) {
		memset(q, 0, strlen(q));
		free(q);
	}
	return url;
}
