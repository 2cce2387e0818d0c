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
#include "io/s3_url.h"

#define AWS_FILE_MAX (1u << 20)	/* a larger ~/.aws file is refused */

/* What one profile of one AWS file says. */
struct aws_vals {
	char *access_key;
	char *secret_key;
	char *session_token;
	char *region;
	char *endpoint;
	bool found;		/* the profile's section is there */
};

static void wipe_free(char *s)
{
	if (s) {
		explicit_bzero(s, strlen(s));
		free(s);
	}
}

static void aws_vals_destroy(struct aws_vals *v)
{
	wipe_free(v->access_key);
	wipe_free(v->secret_key);
	wipe_free(v->session_token);
	free(v->region);
	free(v->endpoint);
	memset(v, 0, sizeof(*v));
}

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

static char *trim(char *s)
{
	char *e;

	while (*s == ' ' || *s == '\t')
		s++;
	e = s + strlen(s);
	while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
		*--e = '\0';
	return s;
}

/* Does section header text hdr (between the brackets, trimmed) name
 * profile?  The config file writes "[profile NAME]" (and "[default]"),
 * the credentials file "[NAME]". */
static bool section_is(char *hdr, const char *profile, bool config_style)
{
	if (config_style && strncmp(hdr, "profile", 7) == 0 &&
	    (hdr[7] == ' ' || hdr[7] == '\t'))
		return strcmp(trim(hdr + 7), profile) == 0;
	if (config_style && strcmp(profile, "default") != 0)
		return false;
	return strcmp(hdr, profile) == 0;
}

static int set_val(char **slot, const char *v)
{
	char *c = strdup(v);

	if (!c)
		return -ENOMEM;
	wipe_free(*slot);
	*slot = c;
	return 0;
}

/* Parse text (NUL-terminated, modified) for profile's keys into v. */
static int parse_aws_file(char *text, const char *profile, bool config_style,
			  struct aws_vals *v)
{
	bool in = false;
	char *line, *next;
	int rc = 0;

	for (line = text; line && rc == 0; line = next) {
		char *eq, *key, *val;

		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		/* An indented line belongs to a nested block ("s3 =\n
		 *   endpoint_url = ..."), which is not read. */
		if (line[0] == ' ' || line[0] == '\t')
			continue;
		line = trim(line);
		if (!line[0] || line[0] == '#' || line[0] == ';')
			continue;
		if (line[0] == '[') {
			char *close = strrchr(line, ']');

			if (!close)
				continue;
			*close = '\0';
			in = section_is(trim(line + 1), profile, config_style);
			v->found |= in;
			continue;
		}
		if (!in)
			continue;
		eq = strchr(line, '=');
		if (!eq)
			continue;
		*eq = '\0';
		key = trim(line);
		val = trim(eq + 1);
		if (strcmp(key, "aws_access_key_id") == 0)
			rc = set_val(&v->access_key, val);
		else if (strcmp(key, "aws_secret_access_key") == 0)
			rc = set_val(&v->secret_key, val);
		else if (strcmp(key, "aws_session_token") == 0)
			rc = set_val(&v->session_token, val);
		else if (config_style && strcmp(key, "region") == 0)
			rc = set_val(&v->region, val);
		else if (config_style && strcmp(key, "endpoint_url") == 0)
			rc = set_val(&v->endpoint, val);
	}
	return rc;
}

/* Read profile's values from the AWS file at path into v.  A missing
 * file is no error (v->found stays false) unless named is set: the name
 * came from an option (named names that option for the message). */
static int read_aws_file(const char *path, const char *profile,
			 bool config_style, const char *named,
			 struct aws_vals *v, char *err, size_t errlen)
{
	struct stat st;
	char *text;
	size_t got = 0;
	int fd, rc;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		if ((errno == ENOENT || errno == ENOTDIR) && !named)
			return 0;
		if (named)
			return ckpt_errf(err, errlen, -errno, "%s (from the %s "
					 "option): %s", path, named,
					 strerror(errno));
		return ckpt_errf(err, errlen, -errno, "%s: %s", path,
				 strerror(errno));
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return ckpt_errf(err, errlen, -EINVAL,
				 "%s: not a regular file", path);
	}
	if (st.st_size > AWS_FILE_MAX) {
		close(fd);
		return ckpt_errf(err, errlen, -EFBIG,
				 "%s: larger than %u bytes", path,
				 AWS_FILE_MAX);
	}
	text = malloc((size_t)st.st_size + 1);
	if (!text) {
		close(fd);
		return ckpt_errf(err, errlen, -ENOMEM, "%s: out of memory",
				 path);
	}
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, text + got, (size_t)st.st_size - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	text[got] = '\0';
	rc = parse_aws_file(text, profile, config_style, v);
	explicit_bzero(text, got);
	free(text);
	if (rc)
		return ckpt_errf(err, errlen, rc, "%s: out of memory", path);
	return 0;
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

/* The credentials as one set from the first source that has a key id. */
static int pick_credentials(const struct ckpt_s3_opts *o, bool skip_env,
			    const struct aws_vals *cred, const char *cred_path,
			    const struct aws_vals *conf, const char *conf_path,
			    const char *profile, struct ckpt_s3_cfg *cfg,
			    char *err, size_t errlen)
{
	const char *ak = NULL, *sk = NULL, *tok = NULL;
	const char *src = NULL, *ak_name = NULL, *sk_name = NULL;
	char *where = NULL;

	if (o && (o->access_key || o->secret_key)) {
		ak = o->access_key;
		sk = o->secret_key;
		tok = o->session_token;
		src = "the access_key option";
		ak_name = "access_key";
		sk_name = "secret_key";
	} else if (!skip_env &&
		   (env("AWS_ACCESS_KEY_ID") || env("AWS_SECRET_ACCESS_KEY"))) {
		ak = env("AWS_ACCESS_KEY_ID");
		sk = env("AWS_SECRET_ACCESS_KEY");
		tok = env("AWS_SESSION_TOKEN");
		src = "AWS_ACCESS_KEY_ID";
		ak_name = "AWS_ACCESS_KEY_ID";
		sk_name = "AWS_SECRET_ACCESS_KEY";
	} else if (cred->access_key || cred->secret_key ||
		   conf->access_key || conf->secret_key) {
		bool in_cred = cred->access_key || cred->secret_key;
		const struct aws_vals *v = in_cred ? cred : conf;

		ak = v->access_key;
		sk = v->secret_key;
		tok = v->session_token;
		if (asprintf(&where, "profile '%s' in %s", profile,
			     in_cred ? cred_path : conf_path) < 0)
			return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
		ak_name = "aws_access_key_id";
		sk_name = "aws_secret_access_key";
	} else {
		cfg->cred_source = strdup("no credentials (anonymous)");
		return cfg->cred_source ? 0 :
		       ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	}
	if (!where && !(where = strdup(src)))
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	cfg->cred_source = where;
	if (!ak || !ak[0])
		return ckpt_errf(err, errlen, -EINVAL,
				 "S3 credentials from %s: %s is set but %s "
				 "is not", where, sk_name, ak_name);
	if (!sk || !sk[0])
		return ckpt_errf(err, errlen, -EINVAL,
				 "S3 credentials from %s: %s is set but %s "
				 "is not", where, ak_name, sk_name);
	if (!is_clean(ak) || !is_clean(sk) || !is_clean(tok))
		return ckpt_errf(err, errlen, -EINVAL,
				 "S3 credentials from %s hold a control "
				 "character", where);
	cfg->access_key = strdup(ak);
	cfg->secret_key = strdup(sk);
	cfg->session_token = tok && tok[0] ? strdup(tok) : NULL;
	if (!cfg->access_key || !cfg->secret_key ||
	    (tok && tok[0] && !cfg->session_token))
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	return 0;
}

/* opts' numbers, 0 meaning the default, checked against sane bounds. */
static int pick_numbers(const struct ckpt_s3_opts *o, struct ckpt_s3_cfg *cfg,
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

int ckpt_s3_config_load(const struct ckpt_s3_opts *o,
			struct ckpt_s3_cfg *cfg, char *err, size_t errlen)
{
	struct aws_vals cred = { 0 }, conf = { 0 };
	char *cred_path = NULL, *conf_path = NULL;
	const char *profile, *region, *endpoint, *src;
	bool named, skip_env;
	int rc;

	memset(cfg, 0, sizeof(*cfg));
	rc = pick_numbers(o, cfg, err, errlen);
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
	rc = read_aws_file(cred_path, profile, false,
			   o && o->credentials_file && o->credentials_file[0] ?
			   "credentials_file" : NULL, &cred, err, errlen);
	if (rc)
		goto out_fail;
	rc = read_aws_file(conf_path, profile, true,
			   o && o->config_file && o->config_file[0] ?
			   "config_file" : NULL, &conf, err, errlen);
	if (rc)
		goto out_fail;
	if (named && !cred.found && !conf.found) {
		rc = ckpt_errf(err, errlen, -ENOENT,
			       "S3 profile '%s' (from %s) is in neither %s "
			       "nor %s", profile,
			       skip_env ? "the profile option" : "AWS_PROFILE",
			       cred_path, conf_path);
		goto out_fail;
	}

	rc = pick_credentials(o, skip_env, &cred, cred_path, &conf, conf_path,
			      profile, cfg, err, errlen);
	if (rc)
		goto out_fail;

	if (o && o->region && o->region[0])
		region = o->region, src = "the region option";
	else if (env("AWS_REGION"))
		region = env("AWS_REGION"), src = "AWS_REGION";
	else if (env("AWS_DEFAULT_REGION"))
		region = env("AWS_DEFAULT_REGION"), src = "AWS_DEFAULT_REGION";
	else if (conf.region && conf.region[0])
		region = conf.region, src = conf_path;
	else
		region = CKPT_S3_DEFAULT_REGION, src = "the default";
	if (!is_region(region)) {
		rc = ckpt_errf(err, errlen, -EINVAL,
			       "S3 region from %s: '%s' is not a region name",
			       src, is_clean(region) ? region : "?");
		goto out_fail;
	}
	cfg->region = strdup(region);

	if (o && o->endpoint && o->endpoint[0])
		endpoint = o->endpoint, src = "the endpoint option";
	else if (env("AWS_ENDPOINT_URL_S3"))
		endpoint = env("AWS_ENDPOINT_URL_S3"),
		src = "AWS_ENDPOINT_URL_S3";
	else if (env("AWS_ENDPOINT_URL"))
		endpoint = env("AWS_ENDPOINT_URL"), src = "AWS_ENDPOINT_URL";
	else if (conf.endpoint && conf.endpoint[0])
		endpoint = conf.endpoint, src = conf_path;
	else
		endpoint = NULL, src = "the default";
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
	rc = 0;
	goto out_free;

out_fail:
	ckpt_s3_config_destroy(cfg);
out_free:
	aws_vals_destroy(&cred);
	aws_vals_destroy(&conf);
	free(cred_path);
	free(conf_path);
	return rc;
}

void ckpt_s3_config_destroy(struct ckpt_s3_cfg *cfg)
{
	wipe_free(cfg->access_key);
	wipe_free(cfg->secret_key);
	wipe_free(cfg->session_token);
	free(cfg->endpoint);
	free(cfg->region);
	free(cfg->cred_source);
	memset(cfg, 0, sizeof(*cfg));
}
