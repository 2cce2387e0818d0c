/* SPDX-License-Identifier: MIT */
/*
 * S3 credentials: the chain the AWS SDKs walk, and refresh.
 *
 * The chain, first source that has credentials wins:
 *   1. explicit: ckpt_s3_opts' access_key / secret_key / session_token;
 *   2. the environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
 *      AWS_SESSION_TOKEN (skipped when opts name a profile);
 *   3. web identity: AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN
 *      [+ AWS_ROLE_SESSION_NAME] -> STS AssumeRoleWithWebIdentity;
 *   4. the profile of the shared files: role_arn with source_profile or
 *      credential_source (STS AssumeRole, chained), web_identity_token_file
 *      with role_arn, static keys in the credentials file,
 *      credential_process, static keys in the config file;
 *   5. container credentials: AWS_CONTAINER_CREDENTIALS_RELATIVE_URI
 *      (on 169.254.170.2) or _FULL_URI, with
 *      AWS_CONTAINER_AUTHORIZATION_TOKEN or _TOKEN_FILE;
 *   6. EC2 instance metadata (IMDSv2), unless AWS_EC2_METADATA_DISABLED
 *      is true; AWS_EC2_METADATA_SERVICE_ENDPOINT moves it.
 * Unsigned requests only when asked (no_sign_request).  A profile named
 * or configured that yields nothing is an error naming it and what it
 * lacks; nothing anywhere is an error naming the sources tried.
 *
 * Temporary credentials are fetched again before they expire: from 5
 * minutes before (or half their life, when that is shorter), the first
 * caller of ckpt_s3_creds_get() that notices wakes a refresher thread
 * (started then, once per process) and goes on with the current set, as
 * every caller does; only once a set has expired do callers wait for the
 * new one.  A set is immutable and counted: a request holds its own
 * reference, a refresh swaps the current one.
 */
#ifndef CKPT_S3_CREDS_H
#define CKPT_S3_CREDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ckptfs.h"
#include "io/s3_credset.h"
#include "io/s3_ini.h"

struct ckpt_s3_creds;

/* What the chain needs besides the options. */
struct ckpt_s3_creds_env {
	const char *region;		/* for STS's regional endpoint */
	const char *profile;		/* resolved name ("default") */
	bool profile_named;		/* by an option or AWS_PROFILE */
	const char *profile_from;	/* "AWS_PROFILE", "the profile option" */
	const struct ckpt_ini *cred;	/* the credentials file (borrowed
					 * for the call) */
	const struct ckpt_ini *conf;	/* the config file */
	uint32_t timeout_ms;		/* per credential request */
	const char *ca_bundle;		/* for https (STS, container), or
					 * NULL: the system's CAs */
};

/*
 * Walk the chain for o (may be NULL) and fetch the first credentials.
 * Returns 0 (free with ckpt_s3_creds_free()) or -errno with one line in
 * err naming the source and what failed, never a secret.
 */
int ckpt_s3_creds_new(const struct ckpt_s3_opts *o,
		      const struct ckpt_s3_creds_env *env,
		      struct ckpt_s3_creds **out, char *err, size_t errlen);

/*
 * A source of temporary credentials that is not in the AWS chain (Azure's
 * Entra ID tokens), refreshed by the same machinery.  fetch() gets a new
 * set into *out (1 reference) or returns -errno with one line in err,
 * never a secret; it must end within timeout_ms, and soon once *cancel
 * (may be NULL) is true or the calling thread's cancel flag is set.
 * free(ctx) is called once, when the creds are freed (or when
 * ckpt_s3_creds_new_source() fails).
 */
struct ckpt_s3_creds_source {
	int (*fetch)(void *ctx, uint32_t timeout_ms, const char *ca_bundle,
		     const _Atomic bool *cancel,
		     struct ckpt_s3_credset **out, char *err, size_t errlen);
	void (*free)(void *ctx);
	void *ctx;
	const char *what;	/* "a service principal ..." (copied) */
};

/*
 * Credentials from src, fetched once now (the caller's cancel flag ends
 * that fetch) and again before they expire, as ckpt_s3_creds_new()'s
 * are.  Returns 0 with *out (free with ckpt_s3_creds_free()) or -errno
 * with "WHAT: reason" in err.  src->ctx belongs to the creds from the
 * call on, success or not.
 */
int ckpt_s3_creds_new_source(const struct ckpt_s3_creds_source *src,
			     uint32_t timeout_ms, const char *ca_bundle,
			     struct ckpt_s3_creds **out, char *err,
			     size_t errlen);

/* Free c (accepts NULL): stops its refresher, killing a
 * credential_process it runs (an HTTP source ends within its timeout),
 * and joins it.  No call on c may be in progress. */
void ckpt_s3_creds_free(struct ckpt_s3_creds *c);

/* Where the credentials come from ("environment (AWS_ACCESS_KEY_ID)",
 * "web identity, role arn:..."), never a secret.  Borrowed. */
const char *ckpt_s3_creds_source(const struct ckpt_s3_creds *c);

/* Unsigned requests (no_sign_request)? */
bool ckpt_s3_creds_is_anonymous(const struct ckpt_s3_creds *c);

/* The plain http:// STS endpoint that c's credentials come from (an
 * assumed role's or a web identity's, which falls back to
 * AWS_ENDPOINT_URL, often http), or NULL: the credentials STS returns,
 * and with *web_token true the web identity token sent to it, cross
 * the network readable.  Borrowed from c. */
const char *ckpt_s3_creds_plain_sts(const struct ckpt_s3_creds *c,
				    bool *web_token);

/*
 * The current set into *out, with a reference for the caller (drop it
 * with ckpt_s3_credset_put()); a refresh is started when due (see
 * above), waited for only when the set has expired.  *out is NULL for
 * unsigned requests (or c NULL).  When a refresh fails, the set it would
 * have replaced is returned while it has not expired (the next call
 * tries again, at most once a second), and the failure is kept for
 * ckpt_s3_creds_last_error().
 *
 * The wait for a refresh ends early: -ECANCELED once *cf is set (the
 * call's cancel flag, may be NULL), -EINTR once *stop is (the store's
 * cancel, may be NULL), -ETIMEDOUT at deadline_ns (CLOCK_MONOTONIC ns,
 * 0: none), each noticed within CKPT_CANCEL_POLL_MS; *out is then NULL.
 * Returns 0 otherwise.  Thread-safe.
 */
int ckpt_s3_creds_get(struct ckpt_s3_creds *c, const volatile int *cf,
		      const _Atomic bool *stop, uint64_t deadline_ns,
		      struct ckpt_s3_credset **out);

/* Fetches so far (the first one included).  Thread-safe. */
unsigned ckpt_s3_creds_fetches(struct ckpt_s3_creds *c);

/* The last refresh failure into buf ("" when none).  Thread-safe. */
void ckpt_s3_creds_last_error(struct ckpt_s3_creds *c, char *buf,
			      size_t len);

#endif
