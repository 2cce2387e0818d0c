/* SPDX-License-Identifier: MIT */
/*
 * Credentials fetched over HTTP, one request at a time with its own curl
 * handle: STS (AssumeRole, signed with SigV4 for service "sts";
 * AssumeRoleWithWebIdentity, unsigned), the container credentials
 * endpoint (ECS, EKS Pod Identity) and EC2 instance metadata (IMDSv2).
 * No message holds a secret, a token or an answer's body.
 */
#ifndef CKPT_S3_CREDHTTP_H
#define CKPT_S3_CREDHTTP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/s3_credset.h"

struct ckpt_s3_sts_call {
	const char *endpoint;	/* "https://sts.us-east-1.amazonaws.com" */
	const char *region;	/* of the signature */
	const char *role_arn;
	const char *session_name;
	const char *external_id;	/* or NULL */
	uint32_t duration_s;	/* 0: STS's default */
	const char *web_token;	/* set: AssumeRoleWithWebIdentity */
	const struct ckpt_s3_credset *source;	/* AssumeRole's signer */
	uint32_t timeout_ms;
	const char *ca_bundle;	/* PEM CAs for https, or NULL: the
				 * system's */
};

/*
 * Call STS; on success *out is a new set (1 reference).  Returns 0, or
 * -EACCES (STS refused: its status and <Code> in err), -EIO (no answer,
 * or one without credentials) or -ENOMEM.
 */
int ckpt_s3_sts_assume(const struct ckpt_s3_sts_call *c,
		       struct ckpt_s3_credset **out, char *err,
		       size_t errlen);

/*
 * GET the container credentials endpoint url, with the Authorization
 * header auth (or NULL).  A plain http:// url must be on a loopback
 * address, 169.254.170.2 or 169.254.170.23 (as the SDKs require).
 * Returns 0 with *out, or -errno with err.
 */
int ckpt_s3_container_fetch(const char *url, const char *auth,
			    uint32_t timeout_ms, const char *ca_bundle,
			    struct ckpt_s3_credset **out, char *err,
			    size_t errlen);

/*
 * IMDSv2 at endpoint ("http://169.254.169.254"): PUT a session token,
 * GET the instance profile's role name, GET its credentials.  *role gets
 * a new copy of the role name (caller frees).  Returns 0 with *out, or
 * -errno with err.
 */
int ckpt_s3_imds_fetch(const char *endpoint, uint32_t timeout_ms,
		       struct ckpt_s3_credset **out, char **role, char *err,
		       size_t errlen);

/* One request to a token service (Azure's Entra ID), for callers that
 * parse the answer themselves. */
struct ckpt_credhttp_call {
	const char *url;
	const char *const *headers;	/* "Name: value" lines, NULL-ended,
					 * or NULL */
	const char *body;	/* set: POST it (form-encoded); else GET */
	uint32_t timeout_ms;	/* the whole request */
	uint32_t connect_ms;	/* 0: timeout_ms */
	const char *ca_bundle;	/* or NULL: the system's CAs */
	const _Atomic bool *cancel;	/* or NULL */
	long status;		/* out: the HTTP status */
	char *body_out;		/* out: the answer, NUL-terminated (at most
				 * 64 KiB); ckpt_credhttp_done() wipes it */
	size_t len;
	char reason[256];	/* out: why no answer came */
};

/*
 * Run c.  Returns 0 when an answer came (any status; c->body_out set),
 * -EIO with c->reason when none did (refused, timed out, too long),
 * -ECANCELED once *c->cancel or the calling thread's cancel flag is set
 * (noticed within a second or so), -ENOMEM.  No redirect is followed.
 */
int ckpt_credhttp_run(struct ckpt_credhttp_call *c);

/* Wipe and free c's answer.  Accepts a call never run. */
void ckpt_credhttp_done(struct ckpt_credhttp_call *c);

/* "2026-12-03T14:25:47Z" (fraction and "+00:00" allowed) -> seconds
 * since the epoch; -1 when it is not that form. */
int64_t ckpt_s3_parse_time(const char *s);

/*
 * The JSON credentials of a container endpoint, IMDS or a
 * credential_process ({"AccessKeyId", "SecretAccessKey", "Token" or
 * "SessionToken", "Expiration"}); what names the source in messages.
 * Returns 0 with *out, or -EINVAL / -ENOMEM with err.
 */
int ckpt_s3_json_creds(const char *text, size_t len, const char *what,
		       struct ckpt_s3_credset **out, char *err,
		       size_t errlen);

#endif
