/* SPDX-License-Identifier: MIT */
/* The S3 settings as command-line and -o options: see s3_opts.h. */
#include "s3_opts.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NO_SECRETS \
	"S3 credentials are never taken from options (a command line shows in ps); set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or use a profile of the AWS files (s3_profile, s3_credentials_file)"

enum kind { STR, U32, SIZE, FLAG };

struct s3_key {
	const char *name;	/* without "s3_" */
	enum kind kind;
	size_t at;		/* offset of the field in struct s3_cli */
};

#define F(field) offsetof(struct s3_cli, field)

static const struct s3_key keys[] = {
	{ "endpoint", STR, F(endpoint) },
	{ "region", STR, F(region) },
	{ "profile", STR, F(profile) },
	{ "credentials_file", STR, F(credentials_file) },
	{ "config_file", STR, F(config_file) },
	{ "parallel", U32, F(parallel) },
	{ "retries", U32, F(retries) },
	{ "timeout_ms", U32, F(timeout_ms) },
	{ "part_size", SIZE, F(part_bytes) },
	{ "merge_gap", SIZE, F(merge_gap) },
	{ "connect_timeout_ms", U32, F(connect_timeout_ms) },
	{ "low_speed_limit", U32, F(low_speed_limit) },
	{ "low_speed_time", U32, F(low_speed_time) },
	{ "open_deadline_ms", U32, F(open_deadline_ms) },
	{ "read_deadline_ms", U32, F(read_deadline_ms) },
	{ "list_max_keys", U32, F(list_max_keys) },
	{ "no_sign_request", FLAG, F(no_sign_request) },
	{ "ca_bundle", STR, F(ca_bundle) },
	{ "addressing_style", STR, F(addressing_style) },
};	/* in the order of S3_CLI_LONG_OPTIONS' codes */

/* Azure's own (without "az_"), from code S3_CLI_OPT + S3_CLI_AZ on. */
static const struct s3_key az_keys[] = {
	{ "endpoint", STR, F(az_endpoint) },
	{ "anonymous", FLAG, F(az_anonymous) },
};

/* Names that would carry a credential (after "s3_" or "aws_"). */
static const char *const secret_names[] = {
	"access_key", "access_key_id", "secret_key", "secret_access_key",
	"secret", "session_token", "token", NULL,
};

/* "123", "64K", "8M", "1G" (powers of 1024): 0, or -1. */
static int parse_size(const char *s, uint64_t *out)
{
	unsigned long long v;
	unsigned shift = 0;
	char *end;

	if (!s || *s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return -1;
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	default: break;
	}
	if ((*end == 'i' || *end == 'B') && shift)
		end += *end == 'i' && end[1] == 'B' ? 2 : 1;
	if (*end || v > (UINT64_MAX >> shift))
		return -1;
	*out = (uint64_t)v << shift;
	return 0;
}

static bool is_secret(const char *name)
{
	int i;

	if (!strncmp(name, "s3_", 3) || !strncmp(name, "aws_", 4))
		name += name[0] == 's' ? 3 : 4;
	else
		return false;
	for (i = 0; secret_names[i]; i++)
		if (!strcmp(name, secret_names[i]))
			return true;
	return false;
}

int s3_cli_take(struct s3_cli *c, const char *name, const char *val,
		char *err, size_t errlen)
{
	const struct s3_key *k = NULL;
	unsigned long long n;
	char *end, **sp;
	size_t i;

	if (is_secret(name)) {
		snprintf(err, errlen, "%s: " NO_SECRETS, name);
		return -1;
	}
	if (!strncmp(name, "az_", 3)) {
		for (i = 0; i < sizeof(az_keys) / sizeof(az_keys[0]); i++)
			if (!strcmp(name + 3, az_keys[i].name))
				k = &az_keys[i];
	} else if (strncmp(name, "s3_", 3)) {
		return 0;
	}
	for (i = 0; !k && strncmp(name, "az_", 3) &&
	     i < sizeof(keys) / sizeof(keys[0]); i++)
		if (!strcmp(name + 3, keys[i].name))
			k = &keys[i];
	if (!k) {
		snprintf(err, errlen, "unknown S3 option '%s' (see --help)",
			 name);
		return -1;
	}
	if (k->kind == FLAG) {
		bool on = !val || !strcmp(val, "1") || !strcmp(val, "true");

		if (!on && strcmp(val, "0") && strcmp(val, "false")) {
			snprintf(err, errlen, "%s takes no value, or 1/0, "
				 "true/false; got '%s'", name, val);
			return -1;
		}
		*(bool *)((char *)c + k->at) = on;
		return 1;
	}
	if (!val || !*val) {
		snprintf(err, errlen, "%s needs a value", name);
		return -1;
	}
	switch (k->kind) {
	case FLAG:
		return 1;
	case STR:
		sp = (char **)((char *)c + k->at);
		free(*sp);
		*sp = strdup(val);
		if (!*sp) {
			snprintf(err, errlen, "out of memory");
			return -1;
		}
		return 1;
	case U32:
		errno = 0;
		n = strtoull(val, &end, 10);
		if (*val >= '0' && *val <= '9' && !*end &&
		    (errno == ERANGE || n >= UINT32_MAX)) {
			snprintf(err, errlen, "%s must be at most %u, got '%s'",
				 name, UINT32_MAX - 1, val);
			return -1;
		}
		if (*val < '0' || *val > '9' || errno || *end) {
			snprintf(err, errlen,
				 "%s must be a whole number, got '%s'", name,
				 val);
			return -1;
		}
		/* retries=0 is asked for, unlike the library's 0 (default) */
		if (!strcmp(k->name, "retries") && n == 0)
			n = CKPT_S3_NO_RETRIES;
		if (n == 0) {
			snprintf(err, errlen, "%s must be at least 1, got '%s'",
				 name, val);
			return -1;
		}
		*(uint32_t *)((char *)c + k->at) = (uint32_t)n;
		return 1;
	case SIZE:
		if (parse_size(val, (uint64_t *)((char *)c + k->at)) ||
		    !*(uint64_t *)((char *)c + k->at)) {
			snprintf(err, errlen, "%s must be a size such as 262144, 256K or 8M, got '%s'",
				 name, val);
			return -1;
		}
		return 1;
	}
	return 0;
}

int s3_cli_take_opt(struct s3_cli *c, int code, const char *val, char *err,
		    size_t errlen)
{
	char name[64];

	if (code == S3_CLI_OPT_SECRET) {
		snprintf(err, errlen, "%s", NO_SECRETS);
		return -1;
	}
	if (code >= S3_CLI_OPT + S3_CLI_AZ &&
	    code < S3_CLI_OPT + S3_CLI_AZ +
		   (int)(sizeof(az_keys) / sizeof(az_keys[0]))) {
		snprintf(name, sizeof(name), "az_%s",
			 az_keys[code - S3_CLI_OPT - S3_CLI_AZ].name);
		return s3_cli_take(c, name, val, err, errlen);
	}
	if (code < S3_CLI_OPT ||
	    code >= S3_CLI_OPT + (int)(sizeof(keys) / sizeof(keys[0])))
		return 0;
	snprintf(name, sizeof(name), "s3_%s", keys[code - S3_CLI_OPT].name);
	return s3_cli_take(c, name, val, err, errlen);
}

const char *s3_cli_first(const struct s3_cli *c)
{
	/* "s3_" and a key's name (was a second table, which the keys added
	 * later overran) */
	static __thread char full[48];
	const char *at;
	size_t i;

	for (i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		at = (const char *)c + keys[i].at;
		if ((keys[i].kind == STR && *(char *const *)at) ||
		    (keys[i].kind == U32 && *(const uint32_t *)at) ||
		    (keys[i].kind == SIZE && *(const uint64_t *)at) ||
		    (keys[i].kind == FLAG && *(const bool *)at)) {
			snprintf(full, sizeof(full), "s3_%s", keys[i].name);
			return full;
		}
	}
	if (c->az_endpoint)
		return "az_endpoint";
	if (c->az_anonymous)
		return "az_anonymous";
	return NULL;
}

void s3_cli_fill(const struct s3_cli *c, struct ckpt_s3_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->endpoint = c->endpoint;
	o->region = c->region;
	o->profile = c->profile;
	o->credentials_file = c->credentials_file;
	o->config_file = c->config_file;
	o->parallel = c->parallel;
	o->retries = c->retries;
	o->timeout_ms = c->timeout_ms;
	o->part_bytes = c->part_bytes;
	o->merge_gap = c->merge_gap;
	o->connect_timeout_ms = c->connect_timeout_ms;
	o->low_speed_limit = c->low_speed_limit;
	o->low_speed_time = c->low_speed_time;
	o->open_deadline_ms = c->open_deadline_ms;
	o->read_deadline_ms = c->read_deadline_ms;
	o->list_max_keys = c->list_max_keys;
	o->no_sign_request = c->no_sign_request;
	o->ca_bundle = c->ca_bundle;
	o->addressing_style = c->addressing_style;
	o->az_endpoint = c->az_endpoint;
	o->az_anonymous = c->az_anonymous;
}

void s3_cli_destroy(struct s3_cli *c)
{
	free(c->endpoint);
	free(c->region);
	free(c->profile);
	free(c->credentials_file);
	free(c->config_file);
	free(c->ca_bundle);
	free(c->addressing_style);
	free(c->az_endpoint);
	memset(c, 0, sizeof(*c));
}
