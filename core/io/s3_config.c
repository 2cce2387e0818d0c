/* SPDX-License-Identifier: MIT */
/* S3 settings from options, the environment and the AWS files: see
 * s3_config.h. */
#include "io/s3_config.h"

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/errbuf.h"
#include "io/s3_ini.h"
#include "io/s3_url.h"

static const char *env(const char *name)
{
	const char *v = getenv(name);

	return v && v[0] ? v : NULL;
}

/* "~/x" -> "$HOME/x"; anything else copied.  NULL when out of memory. */
static char *expand_home(const char *path)
{
	const char *home = env("HOME");
	struct passwd pw, *res = NULL;
	char buf[4096], *out;

	if (path[0] != '~' || (path[1] != '/' && path[1] != '\0'))
		return strdup(path);
	if (!home && getpwuid_r(getuid(), &pw, buf, sizeof(buf), &res) == 0 &&
	    res)
		home = res->pw_dir;
	if (!home)
		home = "/";
	if (asprintf(&out, "%s%s", home, path + 1) < 0)
		return NULL;
	return out;
}

/* An AWS file's path: the option's, else the variable's, else dflt
 * (each with ~ expanded).  NULL when out of memory. */
static char *aws_file_path(const char *opt, const char *var, const char *dflt)
{
	if (opt && opt[0])
		return expand_home(opt);
	return expand_home(env(var) ? env(var) : dflt);
}

/* A value that goes into a header or the signing scope must not hold a
 * control byte (a CR/LF would end the header). */
static bool is_clean(const char *s)
{
	for (; s && *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return false;
	return true;
}

static bool is_region(const char *s)
{
	if (!s[0] || strlen(s) > 64)
		return false;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || *s == '-' || *s == '_'))
			return false;
	return true;
}

/* opts' numbers, 0 meaning the default, checked against sane bounds. */
int ckpt_s3_config_numbers(const struct ckpt_s3_opts *o,
			   struct ckpt_s3_cfg *cfg,
			   char *err, size_t errlen)
{
	cfg->parallel = o && o->parallel ? o->parallel :
			CKPT_S3_DEFAULT_PARALLEL;
	cfg->part_bytes = o && o->part_bytes ? o->part_bytes :
			  CKPT_S3_DEFAULT_PART_BYTES;
	cfg->merge_gap = o && o->merge_gap ? o->merge_gap :
			 CKPT_S3_DEFAULT_MERGE_GAP;
	if (!(o && o->merge_gap) && cfg->merge_gap > cfg->part_bytes / 2)
		cfg->merge_gap = cfg->part_bytes / 2;
	cfg->retries = o && o->retries ? o->retries : CKPT_S3_DEFAULT_RETRIES;
	if (cfg->retries == CKPT_S3_NO_RETRIES)
		cfg->retries = 0;
	cfg->timeout_ms = o && o->timeout_ms ? o->timeout_ms :
			  CKPT_S3_DEFAULT_TIMEOUT_MS;
#define PICK(f, def) cfg->f = o && o->f ? o->f : (def)
	PICK(connect_timeout_ms, CKPT_S3_DEFAULT_CONNECT_MS);
	PICK(low_speed_limit, CKPT_S3_DEFAULT_LOW_SPEED_LIMIT);
	PICK(low_speed_time, CKPT_S3_DEFAULT_LOW_SPEED_TIME);
	PICK(open_deadline_ms, CKPT_S3_DEFAULT_OPEN_DEADLINE_MS);
	PICK(read_deadline_ms, CKPT_S3_DEFAULT_READ_DEADLINE_MS);
	PICK(list_max_keys, CKPT_S3_DEFAULT_LIST_MAX_KEYS);
#undef PICK
	if (cfg->connect_timeout_ms < 100 || cfg->connect_timeout_ms > 600000)
		return ckpt_errf(err, errlen, -EINVAL,
				 "S3 connect timeout %u ms: from 100 ms to "
				 "10 minutes", cfg->connect_timeout_ms);
	if (cfg->low_speed_time > 3600)
		return ckpt_errf(err, errlen, -EINVAL,
				 "S3 low speed time %u s: at most 1 hour",
				 cfg->low_speed_time);
	if (cfg->open_deadline_ms < 100 || cfg->read_deadline_ms < 100 ||
	    cfg->open_deadline_ms > 86400000 ||
	    cfg->read_deadline_ms > 86400000)
		return ckpt_errf(err, errlen, -EINVAL,
				 "S3 %s deadline %u ms: from 100 ms to 1 day",
				 cfg->open_deadline_ms < 100 ||
				 cfg->open_deadline_ms > 86400000 ?
				 "open" : "read",
				 cfg->open_deadline_ms < 100 ||
				 cfg->open_deadline_ms > 86400000 ?
				 cfg->open_deadline_ms : cfg->read_deadline_ms);
	if (cfg->parallel > 256)
		return ckpt_errf(err, errlen, -EINVAL,
				 "S3 parallel=%u: at most 256", cfg->parallel);
	if (cfg->part_bytes < (64u << 10) || cfg->part_bytes > (1u << 30))
		return ckpt_errf(err, errlen, -EINVAL,
				 "S3 part size %llu: from 64 KiB to 1 GiB",
				 (unsigned long long)cfg->part_bytes);
	if (cfg->merge_gap > cfg->part_bytes / 2)
		return ckpt_errf(err, errlen, -EINVAL,
				 "S3 merge gap %llu: at most half the part "
				 "size (%llu)",
				 (unsigned long long)cfg->merge_gap,
				 (unsigned long long)cfg->part_bytes);
	if (cfg->retries > 100)
		return ckpt_errf(err, errlen, -EINVAL,
				 "S3 retries=%u: at most 100", cfg->retries);
	if (cfg->timeout_ms < 100 || cfg->timeout_ms > 3600000)
		return ckpt_errf(err, errlen, -EINVAL,
				 "S3 timeout %u ms: from 100 ms to 1 hour",
				 cfg->timeout_ms);
	return 0;
}

/* The config file's value of key for profile p: the profile's own, else
 * (nested) in the profile's services section under svc ("s3"). */
static const char *conf_get(const struct ckpt_ini *conf, const char *p,
			    const char *svc, const char *key)
{
	const char *v = ckpt_ini_get(conf, p, key), *sn;
	char sec[300], k[128];

	if (v && v[0])
		return v;
	sn = ckpt_ini_get(conf, p, "services");
	if (!sn || !svc)
		return NULL;
	snprintf(sec, sizeof(sec), "services %s", sn);
	snprintf(k, sizeof(k), "%s.%s", svc, key);
	v = ckpt_ini_get(conf, sec, k);
	return v && v[0] ? v : NULL;
}

int ckpt_s3_config_load(const struct ckpt_s3_opts *o,
			struct ckpt_s3_cfg *cfg, char *err, size_t errlen)
{
	struct ckpt_ini cred = { 0 }, conf = { 0 };
	struct ckpt_s3_creds_env ce = { 0 };
	char *cred_path = NULL, *conf_path = NULL;
	const char *profile, *region, *endpoint, *src, *asrc, *v;
	bool named, skip_env;
	int rc;

	memset(cfg, 0, sizeof(*cfg));
	rc = ckpt_s3_config_numbers(o, cfg, err, errlen);
	if (rc)
		return rc;

	skip_env = o && o->profile && o->profile[0];
	profile = skip_env ? o->profile : env("AWS_PROFILE");
	named = profile != NULL;
	if (!profile)
		profile = "default";
	cred_path = aws_file_path(o ? o->credentials_file : NULL,
				  "AWS_SHARED_CREDENTIALS_FILE",
				  "~/.aws/credentials");
	conf_path = aws_file_path(o ? o->config_file : NULL,
				  "AWS_CONFIG_FILE", "~/.aws/config");
	if (!cred_path || !conf_path) {
		rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
		goto out_fail;
	}
	rc = ckpt_ini_load(cred_path, false,
			   o && o->credentials_file && o->credentials_file[0] ?
			   "credentials_file" : NULL, &cred, err, errlen);
	if (rc)
		goto out_fail;
	rc = ckpt_ini_load(conf_path, true,
			   o && o->config_file && o->config_file[0] ?
			   "config_file" : NULL, &conf, err, errlen);
	if (rc)
		goto out_fail;
	if (named && !ckpt_ini_has_section(&cred, profile) &&
	    !ckpt_ini_has_section(&conf, profile)) {
		rc = ckpt_errf(err, errlen, -ENOENT,
			       "S3 profile '%s' (from %s) is in neither %s "
			       "nor %s", profile,
			       skip_env ? "the profile option" : "AWS_PROFILE",
			       cred_path, conf_path);
		goto out_fail;
	}

	v = conf_get(&conf, profile, NULL, "region");
	if (o && o->region && o->region[0])
		region = o->region, src = "the region option";
	else if (env("AWS_REGION"))
		region = env("AWS_REGION"), src = "AWS_REGION";
	else if (env("AWS_DEFAULT_REGION"))
		region = env("AWS_DEFAULT_REGION"), src = "AWS_DEFAULT_REGION";
	else if (v)
		region = v, src = conf_path;
	else
		region = CKPT_S3_DEFAULT_REGION, src = "the default";
	if (!is_region(region)) {
		rc = ckpt_errf(err, errlen, -EINVAL,
			       "S3 region from %s: '%s' is not a region name",
			       src, is_clean(region) ? region : "?");
		goto out_fail;
	}
	cfg->region = strdup(region);

	/* The services section's s3 endpoint_url, else the profile's. */
	v = conf_get(&conf, profile, "s3", "endpoint_url");
	if (ckpt_ini_get(&conf, profile, "services") &&
	    ckpt_ini_get(&conf, profile, "endpoint_url")) {
		const char *sv;
		char sec[300];

		snprintf(sec, sizeof(sec), "services %s",
			 ckpt_ini_get(&conf, profile, "services"));
		sv = ckpt_ini_get(&conf, sec, "s3.endpoint_url");
		if (sv && sv[0])
			v = sv;
	}
	if (o && o->endpoint && o->endpoint[0])
		endpoint = o->endpoint, src = "the endpoint option";
	else if (env("AWS_ENDPOINT_URL_S3"))
		endpoint = env("AWS_ENDPOINT_URL_S3"),
		src = "AWS_ENDPOINT_URL_S3";
	else if (env("AWS_ENDPOINT_URL"))
		endpoint = env("AWS_ENDPOINT_URL"), src = "AWS_ENDPOINT_URL";
	else if (v)
		endpoint = v, src = conf_path;
	else
		endpoint = NULL, src = "the default";
	v = conf_get(&conf, profile, NULL, "s3.addressing_style");
	if (o && o->addressing_style && o->addressing_style[0])
		v = o->addressing_style, asrc = "the addressing style option";
	else
		asrc = conf_path;
	if (!v || !strcmp(v, "auto")) {
		cfg->addressing = CKPT_S3_ADDR_AUTO;
	} else if (!strcmp(v, "virtual")) {
		cfg->addressing = CKPT_S3_ADDR_VIRTUAL;
	} else if (!strcmp(v, "path")) {
		cfg->addressing = CKPT_S3_ADDR_PATH;
	} else {
		rc = ckpt_errf(err, errlen, -EINVAL,
			       "S3 addressing style from %s: '%s' is not "
			       "auto, virtual or path", asrc,
			       is_clean(v) && strlen(v) < 64 ? v : "?");
		goto out_fail;
	}
	cfg->endpoint_given = endpoint != NULL;
	if (endpoint) {
		cfg->endpoint = ckpt_s3_endpoint_norm(endpoint, src, err,
						      errlen);
		if (!cfg->endpoint) {
			rc = -EINVAL;
			goto out_fail;
		}
	} else if (asprintf(&cfg->endpoint, "https://s3.%s.amazonaws.com",
			    region) < 0) {
		cfg->endpoint = NULL;
	}
	if (!cfg->region || !cfg->endpoint) {
		rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
		goto out_fail;
	}

	v = conf_get(&conf, profile, NULL, "ca_bundle");
	if (o && o->ca_bundle && o->ca_bundle[0])
		v = o->ca_bundle, src = "the ca_bundle option";
	else if (env("AWS_CA_BUNDLE"))
		v = env("AWS_CA_BUNDLE"), src = "AWS_CA_BUNDLE";
	else if (v)
		src = conf_path;
	if (v) {
		cfg->ca_bundle = expand_home(v);
		if (!cfg->ca_bundle) {
			rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
			goto out_fail;
		}
		if (access(cfg->ca_bundle, R_OK) != 0) {
			int e = errno;

			rc = ckpt_errf(err, errlen, -e, "S3 CA bundle from "
				       "%s: %s: %s", src,
				       is_clean(v) ? cfg->ca_bundle : "?",
				       strerror(e));
			goto out_fail;
		}
	}

	ce.region = cfg->region;
	ce.ca_bundle = cfg->ca_bundle;
	ce.profile = profile;
	ce.profile_named = named;
	ce.profile_from = skip_env ? "the profile option" : "AWS_PROFILE";
	ce.cred = &cred;
	ce.conf = &conf;
	ce.timeout_ms = cfg->timeout_ms;
	rc = ckpt_s3_creds_new(o, &ce, &cfg->creds, err, errlen);
	if (rc)
		goto out_fail;
	cfg->cred_source = ckpt_s3_creds_source(cfg->creds);
	rc = 0;
	goto out_free;

out_fail:
	ckpt_s3_config_destroy(cfg);
out_free:
	ckpt_ini_destroy(&cred);
	ckpt_ini_destroy(&conf);
	free(cred_path);
	free(conf_path);
	return rc;
}

void ckpt_s3_config_destroy(struct ckpt_s3_cfg *cfg)
{
	ckpt_s3_creds_free(cfg->creds);
	free(cfg->endpoint);
	free(cfg->region);
	free(cfg->ca_bundle);
	memset(cfg, 0, sizeof(*cfg));
}
