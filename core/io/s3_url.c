/* SPDX-License-Identifier: MIT */
/* S3 names and URLs: see s3_url.h. */
#include "io/s3_url.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/errbuf.h"

static bool is_unreserved(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
	       (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
	       c == '~';
}

char *ckpt_s3_pct_encode(const char *s, size_t len, bool keep_slash)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t i, at = 0;
	char *out;

	if (len > (SIZE_MAX - 1) / 3)
		return NULL;
	out = malloc(len * 3 + 1);
	if (!out)
		return NULL;
	for (i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if (is_unreserved(c) || (keep_slash && c == '/')) {
			out[at++] = (char)c;
		} else {
			out[at++] = '%';
			out[at++] = hex[c >> 4];
			out[at++] = hex[c & 15];
		}
	}
	out[at] = '\0';
	return out;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

long ckpt_s3_pct_decode(const char *s, char *out, size_t cap)
{
	size_t at = 0;

	for (; *s; s++) {
		char c = *s;

		if (c == '%') {
			int hi, lo;

			if (!s[1] || !s[2])
				return -1;
			hi = hexval(s[1]);
			lo = hexval(s[2]);
			if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
				return -1;
			c = (char)(hi * 16 + lo);
			s += 2;
		} else if (c == '+') {
			c = ' ';
		}
		if (at + 1 >= cap)
			return -1;
		out[at++] = c;
	}
	if (cap == 0)
		return -1;
	out[at] = '\0';
	return (long)at;
}

struct enc_param {
	char *name;
	char *value;
};

static int cmp_param(const void *a, const void *b)
{
	const struct enc_param *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	return c ? c : strcmp(x->value, y->value);
}

char *ckpt_s3_query(const struct ckpt_s3_param *p, size_t n)
{
	struct enc_param *e;
	size_t i, total = 1, at = 0;
	char *out = NULL;

	e = calloc(n ? n : 1, sizeof(*e));
	if (!e)
		return NULL;
	for (i = 0; i < n; i++) {
		e[i].name = ckpt_s3_pct_encode(p[i].name, strlen(p[i].name),
					       false);
		e[i].value = ckpt_s3_pct_encode(p[i].value,
						strlen(p[i].value), false);
		if (!e[i].name || !e[i].value)
			goto out_free;
		total += strlen(e[i].name) + strlen(e[i].value) + 2;
	}
	qsort(e, n, sizeof(*e), cmp_param);
	out = malloc(total);
	if (!out)
		goto out_free;
	out[0] = '\0';
	for (i = 0; i < n; i++)
		at += (size_t)snprintf(out + at, total - at, "%s%s=%s",
				       i ? "&" : "", e[i].name, e[i].value);
out_free:
	for (i = 0; i < n; i++) {
		free(e[i].name);
		free(e[i].value);
	}
	free(e);
	return out;
}

static bool is_bucket_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_';
}

int ckpt_s3_root_parse(const char *root, char **bucket, char **prefix,
		       char *err, size_t errlen)
{
	const char *b, *slash, *p;
	size_t blen, plen;

	*bucket = NULL;
	*prefix = NULL;
	if (strncmp(root, "s3://", 5) != 0)
		return ckpt_errf(err, errlen, -EINVAL,
				 "%s: not an s3://bucket/prefix root", root);
	b = root + 5;
	slash = strchr(b, '/');
	blen = slash ? (size_t)(slash - b) : strlen(b);
	if (blen < 3 || blen > 63)
		return ckpt_errf(err, errlen, -EINVAL,
				 "%s: a bucket name has 3 to 63 characters",
				 root);
	for (size_t i = 0; i < blen; i++)
		if (!is_bucket_char(b[i]))
			return ckpt_errf(err, errlen, -EINVAL,
					 "s3://%.*s: bucket name has byte "
					 "0x%02x; it may hold letters, digits, "
					 "'.', '-' and '_'", (int)i, b,
					 (unsigned char)b[i]);
	p = slash ? slash : b + blen;
	while (*p == '/')
		p++;
	plen = strlen(p);
	while (plen > 0 && p[plen - 1] == '/')
		plen--;
	*bucket = strndup(b, blen);
	*prefix = strndup(p, plen);
	if (!*bucket || !*prefix) {
		free(*bucket);
		free(*prefix);
		*bucket = NULL;
		*prefix = NULL;
		return ckpt_errf(err, errlen, -ENOMEM, "%s: out of memory",
				 root);
	}
	return 0;
}

char *ckpt_s3_key(const char *prefix, const char *name)
{
	char *k;

	if (!prefix[0])
		return strdup(name);
	if (asprintf(&k, "%s/%s", prefix, name) < 0)
		return NULL;
	return k;
}

char *ckpt_s3_url(const char *endpoint, const char *bucket, const char *key,
		  const char *query)
{
	char *ek = NULL, *url;
	int n;

	if (key) {
		ek = ckpt_s3_pct_encode(key, strlen(key), true);
		if (!ek)
			return NULL;
	}
	if (bucket)
		n = asprintf(&url, "%s/%s%s%s%s%s", endpoint, bucket,
			     ek ? "/" : "", ek ? ek : "", query ? "?" : "",
			     query ? query : "");
	else
		n = asprintf(&url, "%s/%s%s%s", endpoint, ek ? ek : "",
			     query ? "?" : "", query ? query : "");
	free(ek);
	return n < 0 ? NULL : url;
}

char *ckpt_s3_endpoint_norm(const char *url, const char *source, char *err,
			    size_t errlen)
{
	const char *host, *end;
	size_t len;

	if (strncmp(url, "http://", 7) == 0) {
		host = url + 7;
	} else if (strncmp(url, "https://", 8) == 0) {
		host = url + 8;
	} else {
		ckpt_errf(err, errlen, -EINVAL,
			  "%s: endpoint must begin with http:// or https://",
			  source);
		return NULL;
	}
	end = host + strcspn(host, "/?#");
	if (memchr(host, '@', (size_t)(end - host))) {
		ckpt_errf(err, errlen, -EINVAL,
			  "%s: endpoint URL holds a user name or password; "
			  "give credentials as AWS_ACCESS_KEY_ID and "
			  "AWS_SECRET_ACCESS_KEY instead", source);
		return NULL;
	}
	if (end == host) {
		ckpt_errf(err, errlen, -EINVAL, "%s: endpoint '%s' has no host",
			  source, url);
		return NULL;
	}
	if (strpbrk(url, "?# \t\r\n")) {
		ckpt_errf(err, errlen, -EINVAL,
			  "%s: endpoint URL may not hold a query, fragment "
			  "or space", source);
		return NULL;
	}
	len = strlen(url);
	while (len > (size_t)(end - url) && url[len - 1] == '/')
		len--;
	return strndup(url, len);
}

bool ckpt_s3_url_has_dot_segment(const char *url)
{
	const char *p = strstr(url, "://"), *end;

	p = p ? strchr(p + 3, '/') : NULL;	/* the path, after the host */
	if (!p)
		return false;
	end = p + strcspn(p, "?#");
	while (p < end) {
		const char *seg = p + 1;
		size_t n = strcspn(seg, "/?#");

		if ((n == 1 && seg[0] == '.') ||
		    (n == 2 && seg[0] == '.' && seg[1] == '.'))
			return true;
		p = seg + n;
	}
	return false;
}

bool ckpt_s3_bucket_is_dns(const char *bucket)
{
	size_t i, n = strlen(bucket);

	if (n < 3 || n > 63)
		return false;
	for (i = 0; i < n; i++) {
		char c = bucket[i];
		bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');

		if (!alnum && !(c == '-' && i > 0 && i < n - 1))
			return false;
	}
	return true;
}

/* The host of a normalized endpoint (after "://", before ':' or '/'), as
 * a pointer and a length; false when there is no "://". */
static bool endpoint_host(const char *endpoint, const char **host,
			  size_t *len)
{
	const char *h = strstr(endpoint, "://");

	if (!h)
		return false;
	h += 3;
	*host = h;
	*len = h[0] == '[' ? strcspn(h, "]") + 1 : strcspn(h, ":/");
	return true;
}

bool ckpt_s3_endpoint_is_aws(const char *endpoint)
{
	static const char aws[] = "amazonaws.com";
	const size_t alen = sizeof(aws) - 1;
	const char *h;
	size_t n;

	if (!endpoint_host(endpoint, &h, &n))
		return false;
	if (n > 0 && h[n - 1] == '.')		/* a rooted name */
		n--;
	if (n == alen)
		return strncasecmp(h, aws, alen) == 0;
	return n > alen && h[n - alen - 1] == '.' &&
	       strncasecmp(h + n - alen, aws, alen) == 0;
}

bool ckpt_s3_use_virtual(enum ckpt_s3_addressing style, const char *endpoint,
			 bool endpoint_given, const char *bucket)
{
	switch (style) {
	case CKPT_S3_ADDR_VIRTUAL:
		return true;
	case CKPT_S3_ADDR_PATH:
		return false;
	case CKPT_S3_ADDR_AUTO:
		break;
	}
	if (endpoint_given && !ckpt_s3_endpoint_is_aws(endpoint))
		return false;
	return ckpt_s3_bucket_is_dns(bucket);
}

char *ckpt_s3_virtual_endpoint(const char *endpoint, const char *bucket)
{
	const char *h;
	size_t n;
	char *out;

	if (!endpoint_host(endpoint, &h, &n))
		return NULL;
	if (asprintf(&out, "%.*s%s.%s", (int)(h - endpoint), endpoint, bucket,
		     h) < 0)
		return NULL;
	return out;
}
