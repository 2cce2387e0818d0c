/* SPDX-License-Identifier: MIT */
/*
 * S3 names and URLs: the s3://bucket/prefix root, object keys, and the
 * percent-encoding that path-style URLs and signed query strings need
 * (libcurl signs the path and the query exactly as they are written).
 */
#ifndef CKPT_S3_URL_H
#define CKPT_S3_URL_H

#include <stdbool.h>
#include <stddef.h>

/*
 * Percent-encode len bytes of s as RFC 3986 does: the unreserved bytes
 * A-Z a-z 0-9 - . _ ~ stay, '/' stays when keep_slash, every other byte
 * becomes %XX (upper-case hex).  Returns a new string (caller frees) or
 * NULL when out of memory.
 */
char *ckpt_s3_pct_encode(const char *s, size_t len, bool keep_slash);

/*
 * Decode %XX escapes of s into out (cap bytes, NUL-terminated), '+' as a
 * space (the form S3 uses for keys listed with encoding-type=url).
 * Returns the decoded length, or -1 when it does not fit, an escape is
 * malformed, or it decodes to a NUL.
 */
long ckpt_s3_pct_decode(const char *s, char *out, size_t cap);

/* One query parameter; value may be "" (written "name="). */
struct ckpt_s3_param {
	const char *name;
	const char *value;
};

/*
 * A canonical query string for SigV4: each name and value encoded (no
 * byte but the unreserved ones left), sorted by encoded name, then value,
 * joined with '&'.  Returns a new string (caller frees) or NULL (ENOMEM).
 */
char *ckpt_s3_query(const struct ckpt_s3_param *p, size_t n);

/*
 * Split root "s3://bucket[/prefix]" into a new bucket string and a new
 * prefix string (no leading or trailing '/', runs of '/' kept as they are
 * inside; "" for none).  The bucket must be 3 to 63 bytes of a-z A-Z 0-9
 * . - _.  Returns 0 (caller frees both) or -EINVAL / -ENOMEM with err
 * naming the root.
 */
int ckpt_s3_root_parse(const char *root, char **bucket, char **prefix,
		       char *err, size_t errlen);

/* The object key of name under prefix: "prefix/name", or name when the
 * prefix is "".  Returns a new string (caller frees) or NULL (ENOMEM). */
char *ckpt_s3_key(const char *prefix, const char *name);

/* Does url's path (before any '?') hold a "." or ".." segment? */
bool ckpt_s3_url_has_dot_segment(const char *url);

/*
 * The path-style URL "ENDPOINT/BUCKET[/KEY][?QUERY]": key encoded with
 * its '/' kept (NULL: the bucket itself); query already canonical, or
 * NULL.  With bucket NULL, endpoint is a virtual-hosted bucket's own
 * (ckpt_s3_virtual_endpoint()): "ENDPOINT/KEY[?QUERY]", or for the
 * bucket itself "ENDPOINT/[?QUERY]".  Returns a new string (caller
 * frees) or NULL (ENOMEM).
 */
char *ckpt_s3_url(const char *endpoint, const char *bucket, const char *key,
		  const char *query);

/*
 * Check and normalize an endpoint URL: "http://" or "https://", a host,
 * an optional port and path, no user name or password, no query or
 * fragment; trailing '/' removed.  Returns a new string (caller frees) or
 * NULL with err saying why (never echoing what stood before an '@').
 */
char *ckpt_s3_endpoint_norm(const char *url, const char *source, char *err,
			    size_t errlen);

/* How a bucket is addressed (botocore's s3.addressing_style). */
enum ckpt_s3_addressing {
	CKPT_S3_ADDR_AUTO = 0,
	CKPT_S3_ADDR_VIRTUAL,
	CKPT_S3_ADDR_PATH,
};

/*
 * Can bucket be a DNS label of a virtual-hosted URL?  botocore's
 * check_dns_name(): 3 to 63 bytes of a-z 0-9 '-', starting and ending
 * with a letter or digit, no '.' (a dotted name breaks the certificate
 * match of *.s3.REGION.amazonaws.com).
 */
bool ckpt_s3_bucket_is_dns(const char *bucket);

/* Is endpoint's host AWS's own ("amazonaws.com" or a name under it)? */
bool ckpt_s3_endpoint_is_aws(const char *endpoint);

/*
 * Pick the style for bucket at endpoint (normalized): VIRTUAL and PATH
 * as asked, AUTO as botocore picks: virtual-hosted for an AWS endpoint
 * (endpoint_given false: the default one, or a host under amazonaws.com)
 * when the bucket is DNS-compatible, path-style otherwise and for every
 * other endpoint.  Returns true for virtual-hosted.
 */
bool ckpt_s3_use_virtual(enum ckpt_s3_addressing style, const char *endpoint,
			 bool endpoint_given, const char *bucket);

/*
 * The virtual-hosted endpoint of bucket: "SCHEME://BUCKET.HOST[:PORT]
 * [/PATH]" from endpoint "SCHEME://HOST[:PORT][/PATH]" (normalized).
 * Returns a new string (caller frees) or NULL (ENOMEM, or no "://").
 */
char *ckpt_s3_virtual_endpoint(const char *endpoint, const char *bucket);

#endif
