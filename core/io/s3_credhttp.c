/* SPDX-License-Identifier: MIT */
/* Credentials fetched over HTTP (STS, container endpoint, IMDSv2): see
 * s3_credhttp.h. */
#include "io/s3_credhttp.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/cancel.h"
#include "common/errbuf.h"
#include "common/json.h"
#include "io/s3_url.h"
#include "io/s3_xml.h"

#define ANSWER_MAX (64u << 10)	/* a credentials answer is < 8 KiB */
#define FIELD_MAX 4096		/* a session token is < 2 KiB */
#define IMDS_TOKEN_TTL "21600"

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;

static void curl_init(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* One request and its answer. */
struct once {
	const char *method;	/* "GET", "PUT", "POST" */
	const char *url;
	struct curl_slist *headers;
	const char *body;	/* POST fields, or NULL */
	const struct ckpt_s3_credset *sign;	/* or NULL */
	const char *sigv4;	/* "aws:amz:REGION:sts" */
	uint32_t timeout_ms;
	uint32_t connect_ms;	/* 0: timeout_ms */
	const _Atomic bool *cancel;	/* or NULL; the thread's flag too */
	bool cancelled;		/* out */
	const char *ca_bundle;	/* or NULL: the system's CAs */
	long status;		/* out */
	char *buf;		/* out: the body, NUL-terminated; free */
	size_t len;
	bool too_long;
	char reason[CURL_ERROR_SIZE];
};

static size_t on_body(char *p, size_t sz, size_t n, void *ctx)
{
	struct once *r = ctx;
	size_t k = sz * n;
	char *nb;

	if (r->len + k > ANSWER_MAX) {
		r->too_long = true;
		return 0;
	}
	nb = realloc(r->buf, r->len + k + 1);
	if (!nb)
		return 0;
	r->buf = nb;
	memcpy(r->buf + r->len, p, k);
	r->len += k;
	r->buf[r->len] = '\0';
	return k;
}

static void once_free(struct once *r)
{
	if (r->buf) {
		explicit_bzero(r->buf, r->len);
		free(r->buf);
	}
	r->buf = NULL;
	curl_slist_free_all(r->headers);
	r->headers = NULL;
}

/* Ends a transfer once its call or the store is cancelled. */
static int on_progress(void *ctx, curl_off_t dt, curl_off_t dn,
		       curl_off_t ut, curl_off_t un)
{
	struct once *r = ctx;

	(void)dt, (void)dn, (void)ut, (void)un;
	if (ckpt_is_cancelled() || (r->cancel && atomic_load(r->cancel)))
		r->cancelled = true;
	return r->cancelled;
}

/* Run r.  Returns 0 when an answer came (any status), -EIO with
 * r->reason when none did, -ENOMEM. */
static int once_run(struct once *r)
{
	struct curl_slist *hd = r->headers, *t;
	CURLcode rc = CURLE_OK;
	CURL *k;

	pthread_once(&curl_once, curl_init);
	k = curl_easy_init();
	if (!k)
		return -ENOMEM;
	r->reason[0] = '\0';
#define SET(opt, val) \
	do { if (rc == CURLE_OK) rc = curl_easy_setopt(k, opt, val); } while (0)
	SET(CURLOPT_NOSIGNAL, 1L);
	SET(CURLOPT_ERRORBUFFER, r->reason);
	SET(CURLOPT_URL, r->url);
	SET(CURLOPT_PROTOCOLS_STR, "http,https");
	SET(CURLOPT_FOLLOWLOCATION, 0L);
	SET(CURLOPT_TIMEOUT_MS, (long)r->timeout_ms);
	SET(CURLOPT_CONNECTTIMEOUT_MS, (long)(r->connect_ms ? r->connect_ms :
					      r->timeout_ms));
	SET(CURLOPT_USERAGENT, "ckptfs");
	SET(CURLOPT_NOPROGRESS, 0L);
	SET(CURLOPT_XFERINFOFUNCTION, on_progress);
	SET(CURLOPT_XFERINFODATA, r);
	if (r->ca_bundle)
		SET(CURLOPT_CAINFO, r->ca_bundle);
	SET(CURLOPT_WRITEFUNCTION, on_body);
	SET(CURLOPT_WRITEDATA, r);
	if (r->body) {
		SET(CURLOPT_POSTFIELDS, r->body);
	} else if (!strcmp(r->method, "PUT")) {
		SET(CURLOPT_CUSTOMREQUEST, "PUT");
	}
	if (r->sign) {
		SET(CURLOPT_AWS_SIGV4, r->sigv4);
		SET(CURLOPT_USERNAME, r->sign->access_key);
		SET(CURLOPT_PASSWORD, r->sign->secret_key);
		if (r->sign->token_hdr) {
			t = curl_slist_append(hd, r->sign->token_hdr);
			if (!t)
				rc = CURLE_OUT_OF_MEMORY;
			else
				hd = t;
		}
	}
	r->headers = hd;
	SET(CURLOPT_HTTPHEADER, hd);
#undef SET
	if (rc == CURLE_OK)
		rc = curl_easy_perform(k);
	if (rc == CURLE_WRITE_ERROR && r->too_long)
		snprintf(r->reason, sizeof(r->reason),
			 "the answer is larger than %u bytes", ANSWER_MAX);
	else if (rc != CURLE_OK && !r->reason[0])
		snprintf(r->reason, sizeof(r->reason), "%s",
			 curl_easy_strerror(rc));
	if (rc == CURLE_OK)
		curl_easy_getinfo(k, CURLINFO_RESPONSE_CODE, &r->status);
	curl_easy_cleanup(k);
	if (rc == CURLE_OUT_OF_MEMORY)
		return -ENOMEM;
	if (rc != CURLE_OK && r->cancelled) {
		snprintf(r->reason, sizeof(r->reason), "cancelled");
		return -ECANCELED;
	}
	return rc == CURLE_OK ? 0 : -EIO;
}

int ckpt_credhttp_run(struct ckpt_credhttp_call *c)
{
	struct once r = {
		.method = c->body ? "POST" : "GET", .url = c->url,
		.body = c->body, .timeout_ms = c->timeout_ms,
		.connect_ms = c->connect_ms, .cancel = c->cancel,
		.ca_bundle = c->ca_bundle,
	};
	struct curl_slist *t;
	size_t i;
	int rc = 0;

	c->status = 0;
	c->body_out = NULL;
	c->len = 0;
	c->reason[0] = '\0';
	for (i = 0; c->headers && c->headers[i]; i++) {
		t = curl_slist_append(r.headers, c->headers[i]);
		if (!t) {
			rc = -ENOMEM;
			goto out_free;
		}
		r.headers = t;
	}
	rc = once_run(&r);
	snprintf(c->reason, sizeof(c->reason), "%s", r.reason);
	if (rc == 0) {
		c->status = r.status;
		c->body_out = r.buf;
		c->len = r.len;
		r.buf = NULL;
		if (!c->body_out) {
			c->body_out = calloc(1, 1);
			if (!c->body_out)
				rc = -ENOMEM;
		}
	}
out_free:
	once_free(&r);
	return rc;
}

void ckpt_credhttp_done(struct ckpt_credhttp_call *c)
{
	if (c->body_out) {
		explicit_bzero(c->body_out, c->len);
		free(c->body_out);
	}
	c->body_out = NULL;
	c->len = 0;
}

int64_t ckpt_s3_parse_time(const char *s)
{
	struct tm tm = { 0 };
	int n = 0, oh = 0, om = 0;
	const char *p;
	int64_t t;

	if (!s || sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year,
			 &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
			 &tm.tm_sec, &n) != 6 || n != 19)
		return -1;
	p = s + n;
	if (*p == '.')
		for (p++; *p >= '0' && *p <= '9'; p++)
			;
	if (*p == 'Z' || *p == 'z') {
		p++;
	} else if ((*p == '+' || *p == '-') &&
		   sscanf(p + 1, "%2d:%2d", &oh, &om) == 2 && strlen(p) == 6) {
		if (*p == '-')
			oh = -oh, om = -om;
		p += 6;
	} else if (*p) {
		return -1;
	}
	if (*p || tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 ||
	    tm.tm_mday > 31 || tm.tm_hour > 23 || tm.tm_min > 59 ||
	    tm.tm_sec > 60)
		return -1;
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	t = (int64_t)timegm(&tm);
	return t - (int64_t)oh * 3600 - (int64_t)om * 60;
}

/* Does a header or signature value hold a control byte? */
static bool is_clean(const char *s)
{
	for (; s && *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return false;
	return true;
}

/* A set from the fields, checked. */
static int make_set(const char *ak, const char *sk, const char *tok,
		    const char *exp, const char *what,
		    struct ckpt_s3_credset **out, char *err, size_t errlen)
{
	int64_t e = 0;

	if (!ak[0] || !sk[0])
		return ckpt_errf(err, errlen, -EINVAL, "%s: the answer has no "
				 "%s", what, !ak[0] ? "AccessKeyId" :
				 "SecretAccessKey");
	if (!is_clean(ak) || !is_clean(sk) || !is_clean(tok))
		return ckpt_errf(err, errlen, -EINVAL, "%s: the credentials "
				 "hold a control character", what);
	if (exp && exp[0]) {
		e = ckpt_s3_parse_time(exp);
		if (e < 0)
			return ckpt_errf(err, errlen, -EINVAL, "%s: Expiration "
					 "'%.40s' is not an ISO 8601 time",
					 what, is_clean(exp) ? exp : "?");
	}
	*out = ckpt_s3_credset_new(ak, sk, tok && tok[0] ? tok : NULL, e);
	return *out ? 0 : ckpt_errf(err, errlen, -ENOMEM, "out of memory");
}

/* The decoded string of key in object o into buf ("" when absent). */
static int json_field(const struct ckpt_json_doc *d, const char *key,
		      char *buf, size_t cap)
{
	const struct ckpt_json *v = ckpt_json_get(d, &d->nodes[0], key);

	buf[0] = '\0';
	if (!v)
		return 0;
	if (v->type != CKPT_JSON_STR || ckpt_json_str(v, buf, cap) < 0)
		return -1;
	return 0;
}

int ckpt_s3_json_creds(const char *text, size_t len, const char *what,
		       struct ckpt_s3_credset **out, char *err, size_t errlen)
{
	struct ckpt_json_doc d = { 0 };
	char *ak, *sk, *tok, *exp, *ver, jerr[200];
	int rc;

	*out = NULL;
	/* The parser's message could quote the text: keep only its fact. */
	if (ckpt_json_parse(text, len, "answer", &d, jerr, sizeof(jerr)))
		return ckpt_errf(err, errlen, -EINVAL, "%s: the answer is not "
				 "JSON", what);
	if (d.nodes[0].type != CKPT_JSON_OBJ) {
		ckpt_json_free(&d);
		return ckpt_errf(err, errlen, -EINVAL, "%s: the answer is not "
				 "a JSON object", what);
	}
	ak = calloc(5, FIELD_MAX);
	if (!ak) {
		ckpt_json_free(&d);
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	}
	sk = ak + FIELD_MAX;
	tok = sk + FIELD_MAX;
	exp = tok + FIELD_MAX;
	ver = exp + FIELD_MAX;
	if (json_field(&d, "AccessKeyId", ak, FIELD_MAX) ||
	    json_field(&d, "SecretAccessKey", sk, FIELD_MAX) ||
	    json_field(&d, "Token", tok, FIELD_MAX) ||
	    (!tok[0] && json_field(&d, "SessionToken", tok, FIELD_MAX)) ||
	    json_field(&d, "Expiration", exp, FIELD_MAX) ||
	    json_field(&d, "Code", ver, FIELD_MAX)) {
		rc = ckpt_errf(err, errlen, -EINVAL, "%s: a credentials field "
			       "is not a string or is too long", what);
	} else if (ver[0] && strcmp(ver, "Success") != 0) {
		rc = ckpt_errf(err, errlen, -EACCES, "%s: Code is '%.60s'",
			       what, is_clean(ver) ? ver : "?");
	} else {
		rc = make_set(ak, sk, tok, exp, what, out, err, errlen);
	}
	explicit_bzero(ak, 5 * FIELD_MAX);
	free(ak);
	ckpt_json_free(&d);
	return rc;
}

int ckpt_s3_sts_assume(const struct ckpt_s3_sts_call *c,
		       struct ckpt_s3_credset **out, char *err, size_t errlen)
{
	struct ckpt_s3_param p[6];
	struct once r = { .method = "POST", .timeout_ms = c->timeout_ms,
			  .ca_bundle = c->ca_bundle };
	const char *action = c->web_token ? "AssumeRoleWithWebIdentity" :
			     "AssumeRole";
	char sigv4[96], dur[16], code[64], *url = NULL, *body = NULL;
	char *ak = NULL, *sk, *tok, *exp;
	size_t n = 0;
	int rc;

	*out = NULL;
	p[n++] = (struct ckpt_s3_param){ "Action", action };
	p[n++] = (struct ckpt_s3_param){ "Version", "2011-06-15" };
	p[n++] = (struct ckpt_s3_param){ "RoleArn", c->role_arn };
	p[n++] = (struct ckpt_s3_param){ "RoleSessionName", c->session_name };
	if (c->web_token)
		p[n++] = (struct ckpt_s3_param){ "WebIdentityToken",
						 c->web_token };
	else if (c->external_id)
		p[n++] = (struct ckpt_s3_param){ "ExternalId",
						 c->external_id };
	if (c->duration_s) {
		snprintf(dur, sizeof(dur), "%u", c->duration_s);
		p[n++] = (struct ckpt_s3_param){ "DurationSeconds", dur };
	}
	body = ckpt_s3_query(p, n);
	if (!body || asprintf(&url, "%s/", c->endpoint) < 0) {
		url = NULL;
		rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
		goto out_free;
	}
	r.url = url;
	r.body = body;
	if (!c->web_token) {
		snprintf(sigv4, sizeof(sigv4), "aws:amz:%s:sts", c->region);
		r.sign = c->source;
		r.sigv4 = sigv4;
	}
	r.headers = curl_slist_append(NULL, "Accept: application/xml");
	if (!r.headers) {
		rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
		goto out_free;
	}
	rc = once_run(&r);
	if (rc == -ENOMEM) {
		ckpt_errf(err, errlen, rc, "out of memory");
		goto out_free;
	}
	if (rc) {
		ckpt_errf(err, errlen, rc, "STS %s at %s: no answer: %s",
			  action, c->endpoint, r.reason);
		goto out_free;
	}
	if (r.status < 200 || r.status > 299) {
		ckpt_s3_xml_error_code(r.buf, r.len, code, sizeof(code));
		rc = ckpt_errf(err, errlen, r.status == 403 ||
			       r.status == 400 ? -EACCES : -EIO,
			       "STS %s of role %s at %s: HTTP %ld%s%s",
			       action, c->role_arn, c->endpoint, r.status,
			       code[0] ? " " : "", code);
		goto out_free;
	}
	ak = calloc(4, FIELD_MAX);
	if (!ak) {
		rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
		goto out_free;
	}
	sk = ak + FIELD_MAX;
	tok = sk + FIELD_MAX;
	exp = tok + FIELD_MAX;
	/* a field too long or malformed comes back empty (refused by
	 * make_set), never truncated */
	ckpt_s3_xml_elem(r.buf, r.len, "AccessKeyId", ak, FIELD_MAX);
	ckpt_s3_xml_elem(r.buf, r.len, "SecretAccessKey", sk, FIELD_MAX);
	ckpt_s3_xml_elem(r.buf, r.len, "SessionToken", tok, FIELD_MAX);
	ckpt_s3_xml_elem(r.buf, r.len, "Expiration", exp, FIELD_MAX);
	if (!tok[0]) {
		rc = ckpt_errf(err, errlen, -EIO, "STS %s of role %s at %s: "
			       "no SessionToken in the answer (or one over %d "
			       "bytes)", action, c->role_arn, c->endpoint,
			       FIELD_MAX - 1);
		goto out_free;
	}
	{
		char what[300];

		snprintf(what, sizeof(what), "STS %s of role %s at %s",
			 action, c->role_arn, c->endpoint);
		rc = make_set(ak, sk, tok, exp, what, out, err, errlen);
		if (rc == -EINVAL)
			rc = -EIO;
	}
	explicit_bzero(ak, 4 * FIELD_MAX);
out_free:
	free(ak);
	once_free(&r);
	if (body) {
		explicit_bzero(body, strlen(body));
		free(body);
	}
	free(url);
	return rc;
}

/* Is url's host one the SDKs allow over plain http? */
static bool is_allowed_http(const char *url)
{
	static const char *const ok[] = {
		"localhost", "169.254.170.2", "169.254.170.23", "[::1]",
		"[fd00:ec2::23]", NULL,
	};
	const char *h = url + 7, *e;
	size_t hl;
	int i;

	/* user info ("http://localhost:x@elsewhere/") would make curl go
	 * elsewhere while the host checked here looks local */
	if (memchr(h, '@', strcspn(h, "/?#")))
		return false;
	e = h;
	if (*e == '[')
		e = strchr(e, ']') ? strchr(e, ']') + 1 : e + strlen(e);
	else
		e += strcspn(e, ":/?#");
	hl = (size_t)(e - h);
	if (hl > 4 && !strncmp(h, "127.", 4))
		return strspn(h, "0123456789.") == hl;
	for (i = 0; ok[i]; i++)
		if (strlen(ok[i]) == hl && !strncasecmp(h, ok[i], hl))
			return true;
	return false;
}

int ckpt_s3_container_fetch(const char *url, const char *auth,
			    uint32_t timeout_ms, const char *ca_bundle,
			    struct ckpt_s3_credset **out, char *err,
			    size_t errlen)
{
	struct once r = { .method = "GET", .url = url,
			  .timeout_ms = timeout_ms, .ca_bundle = ca_bundle };
	char what[300], *hdr = NULL;
	int rc;

	*out = NULL;
	snprintf(what, sizeof(what), "container credentials at %s", url);
	if (strncasecmp(url, "https://", 8) != 0 &&
	    (strncasecmp(url, "http://", 7) != 0 || !is_allowed_http(url)))
		return ckpt_errf(err, errlen, -EINVAL, "%s: only https, or "
				 "http on a loopback address, 169.254.170.2 "
				 "or 169.254.170.23", what);
	if (auth && !is_clean(auth))
		return ckpt_errf(err, errlen, -EINVAL, "%s: the authorization "
				 "token holds a control character", what);
	r.headers = curl_slist_append(NULL, "Accept: application/json");
	if (r.headers && auth && asprintf(&hdr, "Authorization: %s", auth) > 0) {
		struct curl_slist *t = curl_slist_append(r.headers, hdr);

		if (t)
			r.headers = t;
		else
			hdr = (explicit_bzero(hdr, strlen(hdr)), free(hdr),
			       NULL);
	} else if (auth) {
		hdr = NULL;
	}
	if (!r.headers || (auth && !hdr)) {
		rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
		goto out_free;
	}
	rc = once_run(&r);
	if (rc == -ENOMEM) {
		ckpt_errf(err, errlen, rc, "out of memory");
	} else if (rc) {
		ckpt_errf(err, errlen, -EIO, "%s: no answer: %s", what,
			  r.reason);
	} else if (r.status < 200 || r.status > 299) {
		rc = ckpt_errf(err, errlen, r.status == 401 ||
			       r.status == 403 ? -EACCES : -EIO,
			       "%s: HTTP %ld", what, r.status);
	} else {
		rc = ckpt_s3_json_creds(r.buf ? r.buf : "", r.len, what, out,
					err, errlen);
	}
out_free:
	if (hdr) {
		explicit_bzero(hdr, strlen(hdr));
		free(hdr);
	}
	once_free(&r);
	return rc;
}

/* Why a request failed: curl's reason, or the status. */
static void why(const struct once *r, int rc, char *buf, size_t len)
{
	if (rc)
		snprintf(buf, len, "%s", r->reason);
	else
		snprintf(buf, len, "HTTP %ld", r->status);
}

/* GET url with the IMDSv2 token header tokhdr into r (set anew; free
 * with once_free()).  Returns once_run()'s result, or -ENOMEM. */
static int imds_get(struct once *r, const char *url, const char *tokhdr,
		    uint32_t timeout_ms)
{
	*r = (struct once){ .method = "GET", .url = url,
			    .timeout_ms = timeout_ms };
	r->headers = curl_slist_append(NULL, tokhdr);
	if (!r->headers)
		return -ENOMEM;
	return once_run(r);
}

int ckpt_s3_imds_fetch(const char *endpoint, uint32_t timeout_ms,
		       struct ckpt_s3_credset **out, char **role, char *err,
		       size_t errlen)
{
	struct once r = { .method = "PUT", .timeout_ms = timeout_ms };
	char *url = NULL, *tokhdr = NULL, *name = NULL, what[300];
	char reason[CURL_ERROR_SIZE + 16];
	size_t nl;
	int rc;

	*out = NULL;
	*role = NULL;
	snprintf(what, sizeof(what), "EC2 instance metadata at %s", endpoint);
	if (asprintf(&url, "%s/latest/api/token", endpoint) < 0) {
		url = NULL;
		goto out_nomem;
	}
	r.url = url;
	r.headers = curl_slist_append(NULL, "X-aws-ec2-metadata-token-ttl-"
				      "seconds: " IMDS_TOKEN_TTL);
	if (!r.headers)
		goto out_nomem;
	rc = once_run(&r);
	if (rc == -ENOMEM)
		goto out_nomem;
	if (rc) {
		rc = ckpt_errf(err, errlen, -EIO, "%s: no answer: %s", what,
			       r.reason);
		goto out_free;
	}
	if (r.status != 200 || !r.buf || !r.len || !is_clean(r.buf)) {
		rc = ckpt_errf(err, errlen, -EIO, "%s: the session token "
			       "request (PUT /latest/api/token) got HTTP %ld",
			       what, r.status);
		goto out_free;
	}
	if (asprintf(&tokhdr, "X-aws-ec2-metadata-token: %s", r.buf) < 0) {
		tokhdr = NULL;
		goto out_nomem;
	}
	once_free(&r);
	free(url);
	if (asprintf(&url, "%s/latest/meta-data/iam/security-credentials/",
		     endpoint) < 0) {
		url = NULL;
		goto out_nomem;
	}
	rc = imds_get(&r, url, tokhdr, timeout_ms);
	if (rc == -ENOMEM)
		goto out_nomem;
	if (rc || r.status != 200 || !r.buf) {
		why(&r, rc, reason, sizeof(reason));
		rc = ckpt_errf(err, errlen, -EIO, "%s: no instance profile "
			       "(GET iam/security-credentials/: %s)", what,
			       reason);
		goto out_free;
	}
	nl = strcspn(r.buf, "\r\n");
	r.buf[nl] = '\0';
	if (!nl || strchr(r.buf, '/') || !is_clean(r.buf) || nl > 128) {
		rc = ckpt_errf(err, errlen, -EIO, "%s: no instance profile "
			       "role in the answer", what);
		goto out_free;
	}
	name = strdup(r.buf);
	if (!name)
		goto out_nomem;
	once_free(&r);
	free(url);
	if (asprintf(&url, "%s/latest/meta-data/iam/security-credentials/%s",
		     endpoint, name) < 0) {
		url = NULL;
		goto out_nomem;
	}
	rc = imds_get(&r, url, tokhdr, timeout_ms);
	if (rc == -ENOMEM)
		goto out_nomem;
	if (rc || r.status != 200) {
		why(&r, rc, reason, sizeof(reason));
		rc = ckpt_errf(err, errlen, -EIO, "%s: the credentials of role "
			       "'%s': %s", what, name, reason);
		goto out_free;
	}
	snprintf(what + strlen(what), sizeof(what) - strlen(what),
		 ", role '%s'", name);
	rc = ckpt_s3_json_creds(r.buf ? r.buf : "", r.len, what, out, err,
				errlen);
	if (rc == 0) {
		*role = name;
		name = NULL;
	}
	goto out_free;

out_nomem:
	rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
out_free:
	once_free(&r);
	if (tokhdr) {
		explicit_bzero(tokhdr, strlen(tokhdr));
		free(tokhdr);
	}
	free(name);
	free(url);
	return rc;
}
