/* SPDX-License-Identifier: MIT */
/*
 * The S3 settings as options of the mount and of the subcommands: -o keys
 * (`-o s3_endpoint=URL,s3_region=R`, which fstab lines use) and the same
 * names as long options (`--s3-endpoint URL`, or `--s3_endpoint URL`).
 * Credentials are never options: a command line shows in `ps` and
 * /proc/PID/cmdline, so they come from the AWS environment variables or
 * files only, and an option that tries to give one is refused without
 * echoing its value.
 */
#ifndef CKFS_S3_OPTS_H
#define CKFS_S3_OPTS_H

#include <stdbool.h>
#include <stddef.h>
#include <getopt.h>
#include <stdint.h>

#include "ckptfs.h"

/* What the options said; strings owned.  Zero: not given. */
struct s3_cli {
	char *endpoint, *region, *profile, *credentials_file, *config_file;
	char *ca_bundle;
	uint32_t parallel, retries, timeout_ms;
	uint32_t connect_timeout_ms, low_speed_limit, low_speed_time;
	uint32_t open_deadline_ms, read_deadline_ms, list_max_keys;
	uint64_t part_bytes, merge_gap;
	bool no_sign_request;
	char *addressing_style;
	char *az_endpoint;	/* az_endpoint (Azure) */
	bool az_anonymous;	/* az_anonymous (Azure) */
};

/*
 * Take option name (an -o key "s3_endpoint", or a long option's name with
 * its dashes as underscores) with value val.  Returns 1 when it is one of
 * ours and was taken, 0 when name is not an S3 option, -1 with a one-line
 * reason in err (a bad value, a missing one, or a credential).
 */
int s3_cli_take(struct s3_cli *c, const char *name, const char *val,
		char *err, size_t errlen);

/*
 * The same as getopt_long() entries: S3_CLI_LONG_OPTIONS goes into a
 * struct option table (each name in both spellings, and the credential
 * names, so that those are refused without their value being shown), and
 * s3_cli_take_opt() takes what getopt_long() returned for them: 1 taken,
 * 0 code is not one of these, -1 with err.
 */
#define S3_CLI_OPT 0x5300	/* getopt_long codes from here */
#define S3_CLI_OPT_SECRET (S3_CLI_OPT + 0xff)
#define S3_CLI_AZ 0x80		/* the Azure options' codes, from here */
#define S3_CLI_LONG(name, i) \
	{ name, required_argument, NULL, S3_CLI_OPT + (i) }
#define S3_CLI_FLAG(name, i) \
	{ name, no_argument, NULL, S3_CLI_OPT + (i) }
#define S3_CLI_SECRET(name) \
	{ name, optional_argument, NULL, S3_CLI_OPT_SECRET }
#define S3_CLI_LONG_OPTIONS \
	S3_CLI_LONG("s3-endpoint", 0), S3_CLI_LONG("s3-region", 1), \
	S3_CLI_LONG("s3-profile", 2), S3_CLI_LONG("s3-credentials-file", 3), \
	S3_CLI_LONG("s3-config-file", 4), S3_CLI_LONG("s3-parallel", 5), \
	S3_CLI_LONG("s3-retries", 6), S3_CLI_LONG("s3-timeout-ms", 7), \
	S3_CLI_LONG("s3-part-size", 8), S3_CLI_LONG("s3-merge-gap", 9), \
	S3_CLI_LONG("s3-connect-timeout-ms", 10), \
	S3_CLI_LONG("s3-low-speed-limit", 11), \
	S3_CLI_LONG("s3-low-speed-time", 12), \
	S3_CLI_LONG("s3-open-deadline-ms", 13), \
	S3_CLI_LONG("s3-read-deadline-ms", 14), \
	S3_CLI_LONG("s3-list-max-keys", 15), \
	S3_CLI_LONG("s3_connect_timeout_ms", 10), \
	S3_CLI_LONG("s3_low_speed_limit", 11), \
	S3_CLI_LONG("s3_low_speed_time", 12), \
	S3_CLI_LONG("s3_open_deadline_ms", 13), \
	S3_CLI_LONG("s3_read_deadline_ms", 14), \
	S3_CLI_LONG("s3_list_max_keys", 15), \
	S3_CLI_LONG("s3_endpoint", 0), S3_CLI_LONG("s3_region", 1), \
	S3_CLI_LONG("s3_profile", 2), S3_CLI_LONG("s3_credentials_file", 3), \
	S3_CLI_LONG("s3_config_file", 4), S3_CLI_LONG("s3_parallel", 5), \
	S3_CLI_LONG("s3_retries", 6), S3_CLI_LONG("s3_timeout_ms", 7), \
	S3_CLI_LONG("s3_part_size", 8), S3_CLI_LONG("s3_merge_gap", 9), \
	S3_CLI_FLAG("s3-no-sign-request", 16), \
	S3_CLI_FLAG("s3_no_sign_request", 16), \
	S3_CLI_LONG("s3-ca-bundle", 17), S3_CLI_LONG("s3_ca_bundle", 17), \
	S3_CLI_LONG("s3-addressing-style", 18), \
	S3_CLI_LONG("s3_addressing_style", 18), \
	S3_CLI_LONG("az-endpoint", S3_CLI_AZ), \
	S3_CLI_LONG("az_endpoint", S3_CLI_AZ), \
	S3_CLI_FLAG("az-anonymous", S3_CLI_AZ + 1), \
	S3_CLI_FLAG("az_anonymous", S3_CLI_AZ + 1), \
	S3_CLI_SECRET("s3-access-key"), S3_CLI_SECRET("s3-access-key-id"), \
	S3_CLI_SECRET("s3-secret-key"), S3_CLI_SECRET("s3-secret-access-key"), \
	S3_CLI_SECRET("s3-session-token"), \
	S3_CLI_SECRET("aws-access-key-id"), \
	S3_CLI_SECRET("aws-secret-access-key"), \
	S3_CLI_SECRET("aws-session-token"), S3_CLI_SECRET("s3_access_key"), \
	S3_CLI_SECRET("s3_secret_key"), S3_CLI_SECRET("s3_session_token")

int s3_cli_take_opt(struct s3_cli *c, int code, const char *val, char *err,
		    size_t errlen);

/* The -o name ("s3_region") of the first setting c holds, or NULL when
 * it holds none: they mean something for an s3:// checkpoint only.  The
 * name is the calling thread's, valid until its next call. */
const char *s3_cli_first(const struct s3_cli *c);
/* The library's settings for c (strings borrowed from c). */
void s3_cli_fill(const struct s3_cli *c, struct ckpt_s3_opts *o);

void s3_cli_destroy(struct s3_cli *c);

/* The options' help lines, for the usage texts. */
#define S3_CLI_HELP \
"  s3:// checkpoints (credentials as the AWS SDKs find them: environment, web\n" \
"  identity, the AWS files' profile, container, EC2 metadata; never from options;\n" \
"  see docs/s3-credentials.md); each also -o s3_NAME=V:\n" \
"  --s3-endpoint URL        e.g. http://127.0.0.1:7480 (AWS_ENDPOINT_URL)\n" \
"  --s3-region R            (AWS_REGION; default us-east-1)\n" \
"  --s3-profile P           profile of the AWS files (AWS_PROFILE)\n" \
"  --s3-credentials-file F  (AWS_SHARED_CREDENTIALS_FILE; ~/.aws/credentials)\n" \
"  --s3-config-file F       (AWS_CONFIG_FILE; ~/.aws/config)\n" \
"  --s3-parallel N          GETs in flight (16)\n" \
"  --s3-part-size SIZE      large ranges split into parts of SIZE (8M)\n" \
"  --s3-merge-gap SIZE      ranges at most SIZE apart fetched by one GET (256K)\n" \
"  --s3-retries N           per request, after the first try (5)\n" \
"  --s3-timeout-ms N        a try's wait for the first byte (10000)\n" \
"  --s3-connect-timeout-ms N  to connect (3000)\n" \
"  --s3-low-speed-limit B   bytes/s: a try slower than this ... (4)\n" \
"  --s3-low-speed-time S    ... for S seconds fails (10)\n" \
"  --s3-open-deadline-ms N  the whole open, all its requests and retries (15000)\n" \
"  --s3-read-deadline-ms N  each GET of a read, retries included (300000)\n" \
"  --s3-list-max-keys N     a listing of more keys fails (1000000)\n" \
"  --s3-no-sign-request     unsigned requests, for public buckets (without it,\n" \
"                           no credentials found is an error)\n" \
"  --s3-ca-bundle FILE      PEM CAs for https endpoints (AWS_CA_BUNDLE, the\n" \
"                           profile's ca_bundle; default: the system's CAs)\n" \
"  --s3-addressing-style S  auto, virtual (BUCKET.HOST/KEY) or path\n" \
"                           (HOST/BUCKET/KEY); auto: virtual for AWS endpoints\n"

#endif
