/* SPDX-License-Identifier: MIT */
/* Entra ID bearer tokens for Azure Blob Storage: see az_token.h. */
#include "io/az_token.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "common/errbuf.h"
#include "common/json.h"
#include "io/s3_credhttp.h"
#include "io/s3_creds.h"
#include "io/s3_url.h"

#define AUTHORITY_DEFAULT "https://login.microsoftonline.com"
#define IMDS_DEFAULT "http://169.254.169.254"
#define IMDS_CONNECT_MS 1000	/* a machine without it fails fast */
#define SCOPE "https://storage.azure.com/.default"
#define RESOURCE "https%%3A%%2F%%2Fstorage.azure.com%%2F"
#define ASSERTION_TYPE "urn:ietf:params:oauth:client-assertion-type:" \
		       "jwt-bearer"
#define ID_MAX 128		/* a tenant or client ID */
#define ASSERTION_MAX (64u << 10)
#define LIFE_MAX (366 * 86400)	/* a longer-lived token is refused */

enum src_kind { SRC_SECRET, SRC_FEDERATED, SRC_APPSVC, SRC_IMDS };

/* How to fetch a token, again and again. */
struct az_src {
	enum src_kind kind;
	char *url;		/* the token endpoint (GET: with its query) */
	char *client_id;	/* or NULL (a system-assigned identity) */
	char *secret;		/* SRC_SECRET; secret */
	char *token_file;	/* SRC_FEDERATED */
	char *header;		/* SRC_APPSVC's X-IDENTITY-HEADER line
				 * (secret), SRC_IMDS's Metadata line */
	uint32_t connect_ms;
	char what[300];		/* for messages, no secret */
};

static const char *env(const char *name)
{
	const char *v = getenv(name);

	return v && v[0] ? v : NULL;
}

static void wipe_free(char *s)
{
	if (s) {
		explicit_bzero(s, strlen(s));
		free(s);
	}
}

static void src_free(void *ctx)
{
	struct az_src *s = ctx;

	if (!s)
		return;
	free(s->url);
	free(s->client_id);
	wipe_free(s->secret);
	free(s->token_file);
	wipe_free(s->header);
	free(s);
}

/* A token or header value: printable ASCII, no space. */
static bool is_token_text(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s <= 0x20 || (unsigned char)*s >= 0x7f)
			return false;
	return true;
}

/* A tenant or client ID as it may go in a URL and a message. */
static bool is_id(const char *s)
{
	size_t n = strlen(s), i;

	if (!n || n > ID_MAX)
		return false;
	for (i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') ||
		      (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9') || s[i] == '-' ||
		      s[i] == '.' || s[i] == '_'))
			return false;
	return true;
}

/* A base URL (http or https, printable, no query), '/'s cut at its end;
 * a new string or NULL. */
static char *base_url(const char *u)
{
	size_t l = strlen(u);

	if ((strncasecmp(u, "https://", 8) && strncasecmp(u, "http://", 7)) ||
	    !is_token_text(u) || strpbrk(u, "?#"))
		return NULL;
	while (l && u[l - 1] == '/')
		l--;
	return strndup(u, l);
}

/* A number of a token answer: a JSON integer or a string of 1 to 12
 * digits.  false when it is neither. */
static bool json_num(const struct ckpt_json *v, int64_t *out)
{
	char buf[16];
	long n;
	int64_t x = 0;
	long i;

	if (v->type == CKPT_JSON_INT) {
		if (v->v > (uint64_t)1 << 40)
			return false;
		*out = (int64_t)v->v;
		return true;
	}
	if (v->type != CKPT_JSON_STR)
		return false;
	n = ckpt_json_str(v, buf, sizeof(buf));
	if (n < 1 || n > 12)
		return false;
	for (i = 0; i < n; i++) {
		if (buf[i] < '0' || buf[i] > '9')
			return false;
		x = x * 10 + (buf[i] - '0');
	}
	*out = x;
	return true;
}

int ckpt_az_token_parse(const char *text, size_t len, int64_t now,
			const char *what, char **token, int64_t *expires,
			char *err, size_t errlen)
{
	struct ckpt_json_doc d = { 0 };
	const struct ckpt_json *root, *tok, *ein, *eon, *dup = NULL;
	char jerr[200];
	char *t = NULL;
	int64_t n;
	long tl;
	int rc;

	*token = NULL;
	*expires = 0;
	if (ckpt_json_parse(text, len, "answer", &d, jerr, sizeof(jerr)))
		return ckpt_errf(err, errlen, -EINVAL, "%s: the answer is not "
				 "JSON (%s)", what, jerr);
	root = &d.nodes[0];
	if (root->type != CKPT_JSON_OBJ) {
		rc = ckpt_errf(err, errlen, -EINVAL, "%s: the answer is not a "
			       "JSON object", what);
		goto out_free;
	}
	rc = ckpt_json_find_dup(&d, root, &dup);
	if (rc != 0) {
		rc = rc < 0 ? ckpt_errf(err, errlen, rc, "out of memory") :
		     ckpt_errf(err, errlen, -EINVAL, "%s: the answer names a "
			       "key twice", what);
		goto out_free;
	}
	tok = ckpt_json_get(&d, root, "access_token");
	if (!tok || tok->type != CKPT_JSON_STR) {
		rc = ckpt_errf(err, errlen, -EINVAL, "%s: the answer has no "
			       "access_token string", what);
		goto out_free;
	}
	t = malloc(CKPT_AZ_TOKEN_MAX + 1);
	if (!t) {
		rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
		goto out_free;
	}
	tl = ckpt_json_str(tok, t, CKPT_AZ_TOKEN_MAX + 1);
	if (tl < 1 || tl > CKPT_AZ_TOKEN_MAX || !is_token_text(t)) {
		rc = ckpt_errf(err, errlen, -EINVAL, "%s: the access_token is "
			       "empty, longer than %d bytes or holds a space "
			       "or control character", what,
			       CKPT_AZ_TOKEN_MAX);
		goto out_free;
	}
	ein = ckpt_json_get(&d, root, "expires_in");
	eon = ckpt_json_get(&d, root, "expires_on");
	if (ein) {
		if (!json_num(ein, &n) || n < 1 || n > LIFE_MAX) {
			rc = ckpt_errf(err, errlen, -EINVAL, "%s: expires_in "
				       "is not a number of seconds from 1 to "
				       "%d", what, LIFE_MAX);
			goto out_free;
		}
		*expires = now + n;
	} else if (eon) {
		if (!json_num(eon, &n) || n <= now || n > now + LIFE_MAX) {
			rc = ckpt_errf(err, errlen, -EINVAL, "%s: expires_on "
				       "is not a time (seconds since the "
				       "epoch) in the coming year", what);
			goto out_free;
		}
		*expires = n;
	} else {
		rc = ckpt_errf(err, errlen, -EINVAL, "%s: the answer has no "
			       "expires_in or expires_on", what);
		goto out_free;
	}
	*token = t;
	t = NULL;
	rc = 0;
out_free:
	if (t) {
		explicit_bzero(t, CKPT_AZ_TOKEN_MAX + 1);
		free(t);
	}
	ckpt_json_free(&d);
	return rc;
}

/* An error answer's "error" code (AADSTS's "invalid_client"), if it is a
 * short plain word, into buf; "" otherwise. */
static void error_code(const char *text, size_t len, char *buf, size_t cap)
{
	struct ckpt_json_doc d = { 0 };
	const struct ckpt_json *e;
	char jerr[80], tmp[64];
	long n, i;

	buf[0] = '\0';
	if (ckpt_json_parse(text, len, "answer", &d, jerr, sizeof(jerr)))
		return;
	if (d.nodes[0].type == CKPT_JSON_OBJ &&
	    (e = ckpt_json_get(&d, &d.nodes[0], "error")) &&
	    e->type == CKPT_JSON_STR &&
	    (n = ckpt_json_str(e, tmp, sizeof(tmp))) > 0) {
		for (i = 0; i < n; i++)
			if (!((tmp[i] >= 'a' && tmp[i] <= 'z') ||
			      (tmp[i] >= 'A' && tmp[i] <= 'Z') ||
			      (tmp[i] >= '0' && tmp[i] <= '9') ||
			      tmp[i] == '_' || tmp[i] == '-'))
				break;
		if (i == n)
			snprintf(buf, cap, " %s", tmp);
	}
	ckpt_json_free(&d);
}

/* Read the federated token file (again at each fetch); NULL with *rc
 * and err. */
static char *read_assertion(const struct az_src *s, int *rc, char *err,
			    size_t errlen)
{
	FILE *f = fopen(s->token_file, "re");
	char *buf;
	size_t n;

	if (!f) {
		*rc = ckpt_errf(err, errlen, -errno, "%s: %s: %s", s->what,
				s->token_file, strerror(errno));
		return NULL;
	}
	buf = malloc(ASSERTION_MAX + 1);
	if (!buf) {
		fclose(f);
		*rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
		return NULL;
	}
	n = fread(buf, 1, ASSERTION_MAX + 1, f);
	fclose(f);
	while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' ||
		     buf[n - 1] == ' ' || buf[n - 1] == '\t'))
		n--;
	buf[n < ASSERTION_MAX ? n : ASSERTION_MAX] = '\0';
	if (!n || n >= ASSERTION_MAX || !is_token_text(buf)) {
		explicit_bzero(buf, ASSERTION_MAX + 1);
		free(buf);
		*rc = ckpt_errf(err, errlen, -EINVAL, "%s: %s is empty, "
				"larger than %u bytes or holds a space or "
				"control character", s->what, s->token_file,
				ASSERTION_MAX);
		return NULL;
	}
	return buf;
}

/* The form body of a token request to the authority into *body.
 * Returns 0 or -errno with err. */
static int form_body(const struct az_src *s, char **body, char *err,
		     size_t errlen)
{
	struct ckpt_s3_param p[5] = {
		{ "grant_type", "client_credentials" },
		{ "client_id", s->client_id },
		{ "scope", SCOPE },
	};
	char *assertion = NULL;
	int rc = 0;

	if (s->kind == SRC_SECRET) {
		p[3] = (struct ckpt_s3_param){ "client_secret", s->secret };
		*body = ckpt_s3_query(p, 4);
	} else {
		assertion = read_assertion(s, &rc, err, errlen);
		if (!assertion)
			return rc;
		p[3] = (struct ckpt_s3_param){ "client_assertion_type",
					       ASSERTION_TYPE };
		p[4] = (struct ckpt_s3_param){ "client_assertion", assertion };
		*body = ckpt_s3_query(p, 5);
		wipe_free(assertion);
	}
	if (!*body)
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	return 0;
}

/* The creds' fetch(): one token from s. */
static int src_fetch(void *ctx, uint32_t timeout_ms, const char *ca,
		     const _Atomic bool *cancel, struct ckpt_s3_credset **out,
		     char *err, size_t errlen)
{
	struct az_src *s = ctx;
	const char *hdrs[3] = { "Accept: application/json", NULL, NULL };
	struct ckpt_credhttp_call c = {
		.url = s->url, .headers = hdrs, .timeout_ms = timeout_ms,
		.connect_ms = s->connect_ms < timeout_ms ? s->connect_ms :
			      timeout_ms,
		.ca_bundle = ca, .cancel = cancel,
	};
	char *body = NULL, *token = NULL, code[80];
	int64_t asked = time(NULL), expires;
	int rc;

	*out = NULL;
	if (s->kind == SRC_SECRET || s->kind == SRC_FEDERATED) {
		rc = form_body(s, &body, err, errlen);
		if (rc)
			return rc;
		c.body = body;
	} else {
		hdrs[1] = s->header;
	}
	rc = ckpt_credhttp_run(&c);
	wipe_free(body);
	if (rc == -ECANCELED) {
		ckpt_errf(err, errlen, rc, "%s: cancelled", s->what);
		goto out_free;
	}
	if (rc) {
		ckpt_errf(err, errlen, rc, "%s: no answer from %.*s: %s",
			  s->what, (int)strcspn(s->url, "?"), s->url,
			  rc == -ENOMEM ? "out of memory" : c.reason);
		goto out_free;
	}
	if (c.status != 200) {
		error_code(c.body_out, c.len, code, sizeof(code));
		rc = c.status == 400 || c.status == 401 || c.status == 403 ?
		     -EACCES : -EIO;
		ckpt_errf(err, errlen, rc, "%s: %.*s answered HTTP %ld%s",
			  s->what, (int)strcspn(s->url, "?"), s->url,
			  c.status, code);
		goto out_free;
	}
	rc = ckpt_az_token_parse(c.body_out, c.len, asked, s->what, &token,
				 &expires, err, errlen);
	if (rc)
		goto out_free;
	*out = ckpt_s3_credset_new_bearer(token, expires);
	if (!*out)
		rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
out_free:
	wipe_free(token);
	ckpt_credhttp_done(&c);
	return rc;
}

/* Both IDs, checked, into s (what for messages). */
static int take_ids(struct az_src *s, const char *var, char *err,
		    size_t errlen)
{
	const char *tenant = env("AZURE_TENANT_ID");
	const char *cid = env("AZURE_CLIENT_ID");
	const char *auth = env("AZURE_AUTHORITY_HOST");
	char *base;

	if (!tenant || !cid)
		return ckpt_errf(err, errlen, -EINVAL, "Entra ID: %s is set "
				 "but %s is not", var, !tenant ?
				 "AZURE_TENANT_ID" : "AZURE_CLIENT_ID");
	if (!is_id(tenant) || !is_id(cid))
		return ckpt_errf(err, errlen, -EINVAL, "Entra ID: %s is not an "
				 "ID (1 to %d of A-Z, a-z, 0-9, '-', '.', "
				 "'_')", !is_id(tenant) ? "AZURE_TENANT_ID" :
				 "AZURE_CLIENT_ID", ID_MAX);
	base = base_url(auth ? auth : AUTHORITY_DEFAULT);
	if (!base)
		return ckpt_errf(err, errlen, -EINVAL, "Entra ID: "
				 "AZURE_AUTHORITY_HOST is not an http(s) URL "
				 "without a query");
	if (asprintf(&s->url, "%s/%s/oauth2/v2.0/token", base, tenant) < 0)
		s->url = NULL;
	free(base);
	s->client_id = strdup(cid);
	if (!s->url || !s->client_id)
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	return 0;
}

/* A managed identity source: IDENTITY_ENDPOINT's or IMDS's. */
static int mi_src(struct az_src *s, char *err, size_t errlen)
{
	const char *ep = env("IDENTITY_ENDPOINT");
	const char *hdr = env("IDENTITY_HEADER");
	const char *cid = env("AZURE_CLIENT_ID");
	const char *imds = env("AZURE_POD_IDENTITY_AUTHORITY_HOST");
	char *base, idq[ID_MAX + 16] = "", idw[ID_MAX + 32] = "";

	if (cid && !is_id(cid))
		return ckpt_errf(err, errlen, -EINVAL, "Entra ID: "
				 "AZURE_CLIENT_ID is not an ID (1 to %d of "
				 "A-Z, a-z, 0-9, '-', '.', '_')", ID_MAX);
	if (cid) {
		snprintf(idq, sizeof(idq), "&client_id=%s", cid);
		snprintf(idw, sizeof(idw), ", client ID %s", cid);
		s->client_id = strdup(cid);
		if (!s->client_id)
			return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	}
	if (ep && hdr) {
		s->kind = SRC_APPSVC;
		if (!is_token_text(hdr))
			return ckpt_errf(err, errlen, -EINVAL, "Entra ID: "
					 "IDENTITY_HEADER holds a space or "
					 "control character");
		base = base_url(ep);
		if (!base)
			return ckpt_errf(err, errlen, -EINVAL, "Entra ID: "
					 "IDENTITY_ENDPOINT is not an http(s) "
					 "URL without a query");
		if (asprintf(&s->url, "%s?api-version=2019-08-01&resource="
			     RESOURCE "%s", base, idq) < 0)
			s->url = NULL;
		if (asprintf(&s->header, "X-IDENTITY-HEADER: %s", hdr) < 0)
			s->header = NULL;
		snprintf(s->what, sizeof(s->what), "an Entra ID token from "
			 "the managed identity endpoint (IDENTITY_ENDPOINT%s)",
			 idw);
	} else {
		s->kind = SRC_IMDS;
		s->connect_ms = IMDS_CONNECT_MS;
		base = base_url(imds ? imds : IMDS_DEFAULT);
		if (!base)
			return ckpt_errf(err, errlen, -EINVAL, "Entra ID: "
					 "AZURE_POD_IDENTITY_AUTHORITY_HOST is "
					 "not an http(s) URL without a query");
		if (asprintf(&s->url, "%s/metadata/identity/oauth2/token?"
			     "api-version=2018-02-01&resource=" RESOURCE
			     "%s", base, idq) < 0)
			s->url = NULL;
		s->header = strdup("Metadata: true");
		snprintf(s->what, sizeof(s->what), "an Entra ID token from "
			 "the instance metadata endpoint (managed identity at "
			 "%s%s)", base, idw);
	}
	free(base);
	if (!s->url || !s->header)
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	return 0;
}

int ckpt_az_token_creds(const struct ckpt_s3_cfg *cfg,
			struct ckpt_s3_creds **out, char *what,
			size_t whatlen, char *err, size_t errlen)
{
	struct ckpt_s3_creds_source cs = { .fetch = src_fetch,
					   .free = src_free };
	struct az_src *s;
	const char *v;
	bool imds;
	int rc;

	*out = NULL;
	what[0] = '\0';
	s = calloc(1, sizeof(*s));
	if (!s)
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	s->connect_ms = cfg->connect_timeout_ms;
	if ((v = env("AZURE_CLIENT_SECRET"))) {
		s->kind = SRC_SECRET;
		rc = take_ids(s, "AZURE_CLIENT_SECRET", err, errlen);
		if (rc == 0 && !(s->secret = strdup(v)))
			rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
		if (rc)
			goto out_fail;
		snprintf(s->what, sizeof(s->what), "an Entra ID token for a "
			 "service principal (AZURE_CLIENT_SECRET, client ID "
			 "%s, tenant %s)", s->client_id,
			 env("AZURE_TENANT_ID"));
	} else if ((v = env("AZURE_FEDERATED_TOKEN_FILE"))) {
		s->kind = SRC_FEDERATED;
		rc = take_ids(s, "AZURE_FEDERATED_TOKEN_FILE", err, errlen);
		if (rc == 0 && !(s->token_file = strdup(v)))
			rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
		if (rc)
			goto out_fail;
		snprintf(s->what, sizeof(s->what), "an Entra ID token by "
			 "workload identity (AZURE_FEDERATED_TOKEN_FILE, client"
			 " ID %s, tenant %s)", s->client_id,
			 env("AZURE_TENANT_ID"));
	} else {
		rc = mi_src(s, err, errlen);
		if (rc)
			goto out_fail;
	}
	snprintf(what, whatlen, "%s", s->what);
	imds = s->kind == SRC_IMDS;
	cs.ctx = s;
	cs.what = s->what;
	rc = ckpt_s3_creds_new_source(&cs, cfg->open_deadline_ms,
				      cfg->ca_bundle, out, err, errlen);
	/* s belongs to the creds now, or is freed */
	if (rc && rc != -ECANCELED && rc != -ENOMEM && imds)
		rc = -ENOKEY;	/* IMDS, tried for want of anything else */
	return rc;

out_fail:
	src_free(s);
	return rc;
}
