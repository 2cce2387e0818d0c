/* SPDX-License-Identifier: MIT */
/*
 * Entra ID (Azure AD) bearer tokens for Azure Blob Storage, found as
 * DefaultAzureCredential finds them (what needs no browser), and
 * refreshed before they expire by s3_creds.c's machinery:
 *
 *   1. a service principal secret: AZURE_TENANT_ID + AZURE_CLIENT_ID +
 *      AZURE_CLIENT_SECRET, POSTed to AZURE_AUTHORITY_HOST (default
 *      https://login.microsoftonline.com)/TENANT/oauth2/v2.0/token;
 *   2. workload identity: AZURE_FEDERATED_TOKEN_FILE (read again at each
 *      fetch) + AZURE_CLIENT_ID + AZURE_TENANT_ID, the same endpoint with
 *      a client assertion;
 *   3. managed identity: IDENTITY_ENDPOINT + IDENTITY_HEADER where set
 *      (App Service, Azure ML), else the instance metadata endpoint
 *      (AZURE_POD_IDENTITY_AUTHORITY_HOST, default
 *      http://169.254.169.254), with AZURE_CLIENT_ID for a user-assigned
 *      identity; its connection is bounded by a second.
 *
 * No message holds a token, a secret or an answer's body.
 */
#ifndef CKPT_AZ_TOKEN_H
#define CKPT_AZ_TOKEN_H

#include <stddef.h>
#include <stdint.h>

#include "io/s3_config.h"

#define CKPT_AZ_TOKEN_MAX 16384	/* longer access tokens are refused */

/*
 * Find the first Entra ID source above and fetch its first token with
 * cfg's timeouts and CA bundle.  Returns 0 with *out (free with
 * ckpt_s3_creds_free(); its sets carry "Authorization: Bearer ...") and
 * the source in what (no secret); or -ENOKEY when none is configured and
 * the metadata endpoint gave none (err says what was tried and why, after
 * "tried "); or -errno with one line in err naming the source.
 */
int ckpt_az_token_creds(const struct ckpt_s3_cfg *cfg,
			struct ckpt_s3_creds **out, char *what,
			size_t whatlen, char *err, size_t errlen);

/*
 * Parse a token answer ({"access_token", "expires_in" or "expires_on",
 * numbers or strings of digits}); now is the time the token was asked
 * for.  Returns 0 with *token (caller wipes and frees) and *expires
 * (seconds since the epoch), or -EINVAL / -ENOMEM with err naming what
 * (the source) and the fault, never the token.
 */
int ckpt_az_token_parse(const char *text, size_t len, int64_t now,
			const char *what, char **token, int64_t *expires,
			char *err, size_t errlen);

#endif
