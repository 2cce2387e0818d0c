/* SPDX-License-Identifier: MIT */
/* One counted, immutable set of S3 credentials: see s3_credset.h. */
#include "io/s3_credset.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void wipe_free(char *s)
{
	if (s) {
		explicit_bzero(s, strlen(s));
		free(s);
	}
}

struct ckpt_s3_credset *ckpt_s3_credset_new(const char *ak, const char *sk,
					    const char *token,
					    int64_t expires)
{
	struct ckpt_s3_credset *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	atomic_init(&c->refs, 1);
	c->access_key = strdup(ak);
	c->secret_key = strdup(sk);
	c->expires = expires;
	if (token) {
		c->session_token = strdup(token);
		if (asprintf(&c->token_hdr, "x-amz-security-token: %s",
			     token) < 0)
			c->token_hdr = NULL;
	}
	if (!c->access_key || !c->secret_key ||
	    (token && (!c->session_token || !c->token_hdr))) {
		atomic_store(&c->refs, 1);
		ckpt_s3_credset_put(c);
		return NULL;
	}
	return c;
}

struct ckpt_s3_credset *ckpt_s3_credset_new_bearer(const char *token,
						   int64_t expires)
{
	struct ckpt_s3_credset *c = ckpt_s3_credset_new("", "", NULL,
							expires);

	if (!c)
		return NULL;
	c->session_token = strdup(token);
	if (asprintf(&c->token_hdr, "Authorization: Bearer %s", token) < 0)
		c->token_hdr = NULL;
	if (!c->session_token || !c->token_hdr) {
		ckpt_s3_credset_put(c);
		return NULL;
	}
	return c;
}

void ckpt_s3_credset_put(struct ckpt_s3_credset *c)
{
	if (!c || atomic_fetch_sub(&c->refs, 1) != 1)
		return;
	wipe_free(c->access_key);
	wipe_free(c->secret_key);
	wipe_free(c->session_token);
	wipe_free(c->token_hdr);
	free(c);
}

