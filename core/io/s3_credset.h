/* SPDX-License-Identifier: MIT */
/*
 * One set of S3 credentials (key id, secret, session token, expiry):
 * immutable once made and counted, so that a request keeps the set it
 * signs with while a refresh replaces the current one (s3_creds.h).
 */
#ifndef CKPT_S3_CREDSET_H
#define CKPT_S3_CREDSET_H

#include <stdatomic.h>
#include <stdint.h>

/* One set of credentials, immutable once made. */
struct ckpt_s3_credset {
	_Atomic unsigned refs;
	char *access_key;
	char *secret_key;
	char *session_token;	/* or NULL */
	char *token_hdr;	/* "x-amz-security-token: ..." or NULL */
	int64_t expires;	/* seconds since the epoch; 0: never */
};

/* A set from its parts (copied); 1 reference.  NULL when out of
 * memory.  Free with ckpt_s3_credset_put(). */
struct ckpt_s3_credset *ckpt_s3_credset_new(const char *ak, const char *sk,
					    const char *token,
					    int64_t expires);

/* A bearer token's set (Azure's Entra ID): no keys, session_token the
 * token and token_hdr "Authorization: Bearer TOKEN".  1 reference; NULL
 * when out of memory.  Free with ckpt_s3_credset_put(). */
struct ckpt_s3_credset *ckpt_s3_credset_new_bearer(const char *token,
						   int64_t expires);

/* Drop a reference; the last one wipes and frees.  Accepts NULL. */
void ckpt_s3_credset_put(struct ckpt_s3_credset *c);

#endif
