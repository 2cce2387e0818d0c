/* SPDX-License-Identifier: MIT */
/*
 * Azure Blob Storage settings: the root's names and the credentials, found
 * as the Azure SDKs find them:
 *
 *   names        az://ACCOUNT/CONTAINER[/PREFIX],
 *                https://ACCOUNT.blob.core.windows.net/CONTAINER[/PREFIX]
 *                (any host ACCOUNT.blob.*), and a path-style URL
 *                http(s)://HOST[:PORT]/ACCOUNT/CONTAINER[/PREFIX]
 *                (Azurite); a URL may end in ?SAS
 *   endpoint     the URL's own; for az://: opts' az_endpoint,
 *                AZURE_STORAGE_BLOB_ENDPOINT, the connection string's
 *                BlobEndpoint, then https://ACCOUNT.blob.core.windows.net
 *   credentials  the first of: a SAS on the URL (?sv=...),
 *                AZURE_STORAGE_SAS_TOKEN, Shared Key from
 *                AZURE_STORAGE_KEY (AZURE_STORAGE_ACCOUNT, when set, must
 *                be the root's account), AZURE_STORAGE_CONNECTION_STRING
 *                (AccountKey or SharedAccessSignature); anonymous only
 *                with opts' az_anonymous; then Entra ID tokens
 *                (az_token.h: a service principal secret, workload
 *                identity, managed identity).  None: an error naming
 *                them.
 *
 * Secrets (the key, the SAS) live only in the struct and are wiped when
 * it is destroyed; no message this module writes holds one.
 */
#ifndef CKPT_AZ_CONFIG_H
#define CKPT_AZ_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ckptfs.h"
#include "io/az_sign.h"
#include "io/s3_config.h"

enum ckpt_az_auth {
	CKPT_AZ_SAS,
	CKPT_AZ_SHARED_KEY,
	CKPT_AZ_ANONYMOUS,
	CKPT_AZ_TOKEN,		/* Entra ID bearer tokens (az_token.h),
				 * in http.creds */
};

/* Resolved settings; free with ckpt_az_config_destroy(). */
struct ckpt_az_cfg {
	struct ckpt_s3_cfg http;	/* the engine's: numbers, endpoint
					 * (for messages), ca_bundle,
					 * signer (&signer below) */
	char *root;		/* the root less any ?SAS, for messages */
	char *account;
	char *container;
	char *prefix;		/* "" or "a/b" */
	char *endpoint;		/* the account's blob endpoint, no
				 * trailing '/' */
	enum ckpt_az_auth auth;
	char *sas;		/* the SAS query (no '?'); secret */
	uint8_t key[CKPT_AZ_KEY_MAX];	/* the account key; secret */
	size_t klen;
	char cred_source[300];	/* where they came from, no secret */
	struct ckpt_s3_signer signer;
};

/* Is root an Azure one (az://, http:// or https://)? */
bool ckpt_az_root_is(const char *root);

/*
 * Resolve root and the settings of o (may be NULL) and the environment.
 * An Entra ID token is fetched here (bounded by the open deadline,
 * ended by the caller's cancel flag: -ECANCELED).
 * Returns 0, or -EINVAL / -EACCES (no credentials) / -ENOMEM with one
 * line in err naming the root, the setting and the problem, never a
 * secret.  On failure cfg holds nothing to free.  cfg must not move
 * afterwards (the signer points into it).
 */
int ckpt_az_config_load(const char *root, const struct ckpt_s3_opts *o,
			struct ckpt_az_cfg *cfg, char *err, size_t errlen);

/* Wipe the secrets and free cfg's strings.  Accepts a zeroed cfg. */
void ckpt_az_config_destroy(struct ckpt_az_cfg *cfg);

/* The URL of name under the root ("" name: the container itself), the
 * SAS appended; extra_query (or NULL) already encoded.  Caller frees;
 * NULL when out of memory.  It holds the SAS: never put it in a
 * message. */
char *ckpt_az_url(const struct ckpt_az_cfg *cfg, const char *key,
		  const char *extra_query);

#endif
