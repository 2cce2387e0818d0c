/* SPDX-License-Identifier: MIT */
/*
 * S3 settings, resolved the way the AWS tools resolve them.  Each setting
 * is taken from the first place that has it:
 *
 *   endpoint     opts, AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the
 *                profile's endpoint_url in the config file, then
 *                https://s3.REGION.amazonaws.com
 *   region       opts, AWS_REGION, AWS_DEFAULT_REGION, the profile's
 *                region in the config file, then us-east-1
 *   credentials  the SDKs' chain (s3_creds.h): opts, the environment,
 *                web identity, the profile, container credentials, EC2
 *                instance metadata; unsigned only with no_sign_request
 *   addressing   opts' addressing_style, the profile's "s3 =" /
 *                "  addressing_style = ..." in the config file, then
 *                auto (see ckpt_s3_use_virtual())
 *   profile      opts, AWS_PROFILE, then "default"
 *   CA bundle    opts' ca_bundle, AWS_CA_BUNDLE, the profile's ca_bundle
 *                in the config file, else none: the system's CA store
 *                (verification is never turned off)
 *   files        opts' credentials_file, AWS_SHARED_CREDENTIALS_FILE or
 *                ~/.aws/credentials ("[name]" sections); opts'
 *                config_file, AWS_CONFIG_FILE or ~/.aws/config
 *                ("[profile name]" sections, "[default]"); a file an
 *                option names must exist; parsed as botocore does
 *                (s3_ini.h); endpoint_url also from the profile's
 *                services section ("s3 =" / "  endpoint_url = ...")
 *
 * Secrets live only in the resolved struct and are wiped when it is
 * destroyed; no message this module writes holds one.
 */
#ifndef CKPT_S3_CONFIG_H
#define CKPT_S3_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "ckptfs.h"
#include "io/s3_creds.h"
#include "io/s3_url.h"

#define CKPT_S3_DEFAULT_PARALLEL 16
#define CKPT_S3_DEFAULT_PART_BYTES (8u << 20)
/*
 * Ranges at most this far apart are fetched by one GET (and never more
 * than half a part).  Measured against radosgw on this machine (2 cores,
 * loaded): a GET costs about 1 ms of the 16 in flight (7943 GETs of
 * 64 KiB: 6.9-8.2 s; merged into 64 GETs of 8 MiB: 0.85-1.2 s), while
 * 256 KiB arrive in about 0.5 ms, so a gap below that is cheaper fetched
 * than split; and no merge carries more than 1/32 gap bytes
 * (CKPT_S3_MERGE_WASTE_DIV), so bytes fetched stay within 1.032x of
 * bytes delivered.
 */
#define CKPT_S3_DEFAULT_MERGE_GAP (256u << 10)
#define CKPT_S3_DEFAULT_RETRIES 5
#define CKPT_S3_DEFAULT_TIMEOUT_MS 10000	/* to the first byte */
#define CKPT_S3_DEFAULT_CONNECT_MS 3000
/* A try that gets fewer than 4 bytes/s for 10 s fails: a drip of 1 byte/s
 * is a stall, a steady 5 bytes/s is progress. */
#define CKPT_S3_DEFAULT_LOW_SPEED_LIMIT 4
#define CKPT_S3_DEFAULT_LOW_SPEED_TIME 10
#define CKPT_S3_DEFAULT_OPEN_DEADLINE_MS 15000
#define CKPT_S3_DEFAULT_READ_DEADLINE_MS 300000
#define CKPT_S3_DEFAULT_LIST_MAX_KEYS 1000000
#define CKPT_S3_DEFAULT_REGION "us-east-1"

/*
 * A signer other than SigV4 (Azure's Shared Key; a SAS or anonymous
 * request signs nothing but still sends its version headers).  Before
 * each try the engine calls sign() with the method ("GET", "HEAD"), the
 * URL as sent, the range ("bytes=A-B", or NULL) and the If-Match value
 * (or NULL); it adds the try's header lines with add(actx, "Name: v")
 * (the range among them: the engine sends no Range header of its own).
 * Returns 0 or -errno.  Called from any thread.
 */
struct ckpt_s3_signer {
	int (*sign)(void *ctx, const char *method, const char *url,
		    const char *range, const char *if_match,
		    int (*add)(void *actx, const char *line), void *actx);
	void *ctx;
};

/* Resolved settings; every string owned (free with
 * ckpt_s3_config_destroy()). */
struct ckpt_s3_cfg {
	char *endpoint;		/* see ckpt_s3_endpoint_norm() */
	char *region;
	bool endpoint_given;	/* endpoint came from a setting, not
				 * the AWS default for the region */
	enum ckpt_s3_addressing addressing;
	struct ckpt_s3_creds *creds;	/* owned; the signer takes the
					 * current set from it per request */
	const char *cred_source;	/* where the credentials came from,
					 * for messages ("the environment
					 * (AWS_ACCESS_KEY_ID)"); borrowed
					 * from creds */
	const struct ckpt_s3_signer *signer;	/* NULL: SigV4 with creds;
						 * else borrowed (Azure) */
	char *ca_bundle;	/* PEM file for CURLOPT_CAINFO, or NULL */
	uint32_t parallel;
	uint32_t retries;
	uint32_t timeout_ms;	/* to the first byte of an answer */
	uint32_t connect_timeout_ms;
	uint32_t low_speed_limit;	/* bytes/s ... */
	uint32_t low_speed_time;	/* ... for seconds */
	uint32_t open_deadline_ms;	/* HEAD, probe, listing page */
	uint32_t read_deadline_ms;	/* ranged GET */
	uint32_t list_max_keys;
	uint64_t part_bytes;
	uint64_t merge_gap;
};

/*
 * Resolve the settings from o (may be NULL), the environment and the AWS
 * files.  Returns 0, or -EINVAL / -ENOENT / -ENOMEM / -EIO with one line
 * in err naming the setting or file and the problem (never a secret).
 * On failure cfg holds nothing to free.
 */
int ckpt_s3_config_load(const struct ckpt_s3_opts *o,
			struct ckpt_s3_cfg *cfg, char *err, size_t errlen);

/*
 * Only the numeric settings of o (parallel, parts, retries, time bounds,
 * caps), defaults for those 0, into cfg (Azure's store shares them).
 * Returns 0 or -EINVAL with err naming the setting out of range.
 */
int ckpt_s3_config_numbers(const struct ckpt_s3_opts *o,
			   struct ckpt_s3_cfg *cfg, char *err, size_t errlen);

/* Wipe the secrets and free every string of cfg.  Accepts a zeroed or
 * destroyed cfg. */
void ckpt_s3_config_destroy(struct ckpt_s3_cfg *cfg);

#endif
