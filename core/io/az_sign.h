/* SPDX-License-Identifier: MIT */
/*
 * Azure Storage request signing: Shared Key (HMAC-SHA256 of the string
 * to sign Azure's "Authorize with Shared Key" page defines), with the
 * SHA-256, HMAC and base64 it needs, so that libckptfs links no crypto
 * library.  A SAS needs no signing here: its token is a query string the
 * store appends to each URL.
 */
#ifndef CKPT_AZ_SIGN_H
#define CKPT_AZ_SIGN_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define CKPT_AZ_KEY_MAX 128	/* bytes of a decoded account key */
#define CKPT_AZ_DATE_LEN 64	/* "Sun, 06 Dec 2026 02:18:19 GMT" + NUL, and
				 * room the compiler sees for any int */
#define CKPT_AZ_API_VERSION "2021-08-06"	/* x-ms-version sent */

/* HMAC-SHA256 of msg[0..mlen) under key[0..klen) into out. */
void ckpt_az_hmac_sha256(const uint8_t *key, size_t klen, const void *msg,
			 size_t mlen, uint8_t out[32]);

/* SHA-256 of msg[0..len) into out. */
void ckpt_az_sha256(const void *msg, size_t len, uint8_t out[32]);

/* Standard base64 (with '=' padding) of in[0..n) into out, which holds
 * 4 * ((n + 2) / 3) + 1 bytes; NUL-terminated. */
void ckpt_az_b64_encode(const uint8_t *in, size_t n, char *out);

/* Decode standard base64 s into out (cap bytes).  Returns the length, or
 * -1 when s is not base64 (a byte outside the alphabet, bad padding) or
 * does not fit. */
long ckpt_az_b64_decode(const char *s, uint8_t *out, size_t cap);

/* t as an HTTP date ("Sun, 06 Dec 2026 02:18:19 GMT"), whatever the
 * locale, into out. */
void ckpt_az_http_date(time_t t, char out[CKPT_AZ_DATE_LEN]);

/*
 * The header line "Authorization: SharedKey ACCOUNT:SIGNATURE" for a
 * request with no body: method ("GET", "HEAD"), url (as sent: path and
 * query already encoded), the x-ms-date value date, the If-Match value
 * (or NULL) and the x-ms-range value (or NULL); x-ms-version is
 * CKPT_AZ_API_VERSION.  The canonicalized resource is "/ACCOUNT" + the
 * URL's path (Azurite's path-style URLs carry the account again), then
 * each query parameter, names lower-cased and sorted, values decoded.
 * Returns 0 and *line (caller frees with free(); it holds no secret but
 * a signature valid for this request) or -ENOMEM / -EINVAL (a URL
 * without a path or with a bad escape).
 */
int ckpt_az_sharedkey(const char *account, const uint8_t *key, size_t klen,
		      const char *method, const char *url, const char *date,
		      const char *if_match, const char *range, char **line);

#endif
