/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the S3 store's pure parts, no server: where each setting
 * comes from (options, AWS_* variables, ~/.aws/credentials and
 * ~/.aws/config, profiles), that no message holds a secret, the
 * percent-encoding and sorting that SigV4 signing needs, s3:// roots,
 * and the XML of ListObjectsV2 pages and error answers.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/s3_config.h"
#include "io/s3_credhttp.h"
#include "io/s3_ini.h"
#include "io/s3_url.h"
#include "io/s3_xml.h"
#include "testhelp.h"

static char home[64];

/* The current credentials of c, copied (NULL: unsigned requests). */
static char ak_buf[256], sk_buf[256], tok_buf[256];

static void cur(struct ckpt_s3_cfg *c, bool *anon, bool *has_tok)
{
	struct ckpt_s3_credset *cs;

	(void)ckpt_s3_creds_get(c->creds, NULL, NULL, 0, &cs);
	*anon = !cs;
	*has_tok = cs && cs->session_token;
	snprintf(ak_buf, sizeof(ak_buf), "%s", cs ? cs->access_key : "");
	snprintf(sk_buf, sizeof(sk_buf), "%s", cs ? cs->secret_key : "");
	snprintf(tok_buf, sizeof(tok_buf), "%s",
		 cs && cs->session_token ? cs->session_token : "");
	ckpt_s3_credset_put(cs);
}

static const char *ak(struct ckpt_s3_cfg *c)
{
	bool a, t;

	cur(c, &a, &t);
	return a ? NULL : ak_buf;
}

static const char *sk(struct ckpt_s3_cfg *c)
{
	bool a, t;

	cur(c, &a, &t);
	return a ? NULL : sk_buf;
}

static const char *tok(struct ckpt_s3_cfg *c)
{
	bool a, t;

	cur(c, &a, &t);
	return t ? tok_buf : NULL;
}

static void put_file(const char *rel, const char *text)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", home, rel);
	f = fopen(path, "w");
	if (!f)
		return;
	fputs(text, f);
	fclose(f);
}

static void rm_file(const char *rel)
{
	char path[256];

	snprintf(path, sizeof(path), "%s/%s", home, rel);
	unlink(path);
}

/* A clean slate: no AWS_* variable, no ~/.aws files. */
static void clean(void)
{
	static const char *vars[] = {
		"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
		"AWS_SESSION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION",
		"AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE",
		"AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE",
		"AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN",
		"AWS_ROLE_SESSION_NAME", "AWS_ENDPOINT_URL_STS",
		"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
		"AWS_CONTAINER_CREDENTIALS_FULL_URI",
		"AWS_CONTAINER_AUTHORIZATION_TOKEN",
		"AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
		"AWS_EC2_METADATA_SERVICE_ENDPOINT", "AWS_CA_BUNDLE",
	};
	size_t i;

	for (i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		unsetenv(vars[i]);
	setenv("HOME", home, 1);
	/* Never the link-local metadata address from a test. */
	setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
	rm_file(".aws/credentials");
	rm_file(".aws/config");
	rm_file("other-creds");
}

static void test_defaults(void)
{
	struct ckpt_s3_opts o = { 0 };
	struct ckpt_s3_cfg c;
	char err[512];

	clean();
	/* Nothing anywhere is an error naming the sources tried. */
	CHECK(ckpt_s3_config_load(NULL, &c, err, sizeof(err)) == -ENOKEY);
	fprintf(stderr, "  %s\n", err);
	CHECK(strstr(err, "no S3 credentials") &&
	      strstr(err, "AWS_ACCESS_KEY_ID") &&
	      strstr(err, "AWS_WEB_IDENTITY_TOKEN_FILE") &&
	      strstr(err, "profile 'default'") &&
	      strstr(err, "AWS_CONTAINER_CREDENTIALS") &&
	      strstr(err, "EC2 instance metadata") &&
	      strstr(err, "no-sign-request"));
	o.no_sign_request = true;
	CHECK(ckpt_s3_config_load(&o, &c, err, sizeof(err)) == 0);
	CHECK(ak(&c) == NULL && sk(&c) == NULL);
	CHECK(strcmp(c.region, "us-east-1") == 0);
	CHECK(strcmp(c.endpoint, "https://s3.us-east-1.amazonaws.com") == 0);
	CHECK(c.parallel == 16 && c.retries == 5 && c.timeout_ms == 10000);
	CHECK(c.connect_timeout_ms == 3000 && c.low_speed_limit == 4 &&
	      c.low_speed_time == 10 && c.open_deadline_ms == 15000 &&
	      c.read_deadline_ms == 300000 && c.list_max_keys == 1000000);
	CHECK(c.part_bytes == 8u << 20);
	CHECK(c.merge_gap == CKPT_S3_DEFAULT_MERGE_GAP);
	CHECK(strstr(c.cred_source, "unsigned"));
	ckpt_s3_config_destroy(&c);
}

static void test_env_over_files(void)
{
	struct ckpt_s3_cfg c;
	char err[512];

	clean();
	put_file(".aws/credentials",
		 "# comment\n[default]\naws_access_key_id = FILEKEY\n"
		 "aws_secret_access_key = filesecret\n"
		 "aws_session_token = filetoken\n");
	put_file(".aws/config", "[default]\nregion = eu-west-3\n"
		 "endpoint_url = http://file-endpoint:9000/\n");
	CHECK(ckpt_s3_config_load(NULL, &c, err, sizeof(err)) == 0);
	CHECK(ak(&c) && strcmp(ak(&c), "FILEKEY") == 0);
	CHECK(sk(&c) && strcmp(sk(&c), "filesecret") == 0);
	CHECK(tok(&c) && strcmp(tok(&c), "filetoken") == 0);
	CHECK(strstr(c.cred_source, "profile 'default'"));
	CHECK(strstr(c.cred_source, ".aws/credentials"));
	CHECK(strcmp(c.region, "eu-west-3") == 0);
	CHECK(strcmp(c.endpoint, "http://file-endpoint:9000") == 0);
	ckpt_s3_config_destroy(&c);

	/* The environment wins, as one set (no file token mixed in). */
	setenv("AWS_ACCESS_KEY_ID", "ENVKEY", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "envsecret", 1);
	setenv("AWS_DEFAULT_REGION", "ap-south-1", 1);
	setenv("AWS_ENDPOINT_URL", "http://env-endpoint:1", 1);
	CHECK(ckpt_s3_config_load(NULL, &c, err, sizeof(err)) == 0);
	CHECK(strcmp(ak(&c), "ENVKEY") == 0);
	CHECK(strcmp(sk(&c), "envsecret") == 0);
	CHECK(tok(&c) == NULL);
	CHECK(strcmp(c.cred_source, "the environment (AWS_ACCESS_KEY_ID)") == 0);
	CHECK(strcmp(c.region, "ap-south-1") == 0);
	CHECK(strcmp(c.endpoint, "http://env-endpoint:1") == 0);
	ckpt_s3_config_destroy(&c);

	/* AWS_REGION over AWS_DEFAULT_REGION, AWS_ENDPOINT_URL_S3 over
	 * AWS_ENDPOINT_URL, AWS_SESSION_TOKEN with the env keys. */
	setenv("AWS_REGION", "us-west-2", 1);
	setenv("AWS_ENDPOINT_URL_S3", "https://s3-only:443", 1);
	setenv("AWS_SESSION_TOKEN", "envtoken", 1);
	CHECK(ckpt_s3_config_load(NULL, &c, err, sizeof(err)) == 0);
	CHECK(strcmp(c.region, "us-west-2") == 0);
	CHECK(strcmp(c.endpoint, "https://s3-only:443") == 0);
	CHECK(tok(&c) && strcmp(tok(&c), "envtoken") == 0);
	ckpt_s3_config_destroy(&c);
}

static void test_opts_win(void)
{
	struct ckpt_s3_opts o = {
		.endpoint = "http://opt-endpoint:2", .region = "sa-east-1",
		.access_key = "OPTKEY", .secret_key = "optsecret",
		.parallel = 4, .part_bytes = 1 << 20, .merge_gap = 4096,
		.retries = 2, .timeout_ms = 1500,
	};
	struct ckpt_s3_cfg c;
	char err[512];

	clean();
	setenv("AWS_ACCESS_KEY_ID", "ENVKEY", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "envsecret", 1);
	setenv("AWS_SESSION_TOKEN", "envtoken", 1);
	setenv("AWS_REGION", "us-west-2", 1);
	setenv("AWS_ENDPOINT_URL", "http://env-endpoint:1", 1);
	CHECK(ckpt_s3_config_load(&o, &c, err, sizeof(err)) == 0);
	CHECK(strcmp(ak(&c), "OPTKEY") == 0);
	CHECK(strcmp(sk(&c), "optsecret") == 0);
	CHECK(tok(&c) == NULL);
	CHECK(strcmp(c.region, "sa-east-1") == 0);
	CHECK(strcmp(c.endpoint, "http://opt-endpoint:2") == 0);
	CHECK(c.parallel == 4 && c.part_bytes == 1 << 20);
	CHECK(c.merge_gap == 4096 && c.retries == 2 && c.timeout_ms == 1500);
	ckpt_s3_config_destroy(&c);
}

/* The CA bundle as the AWS tools take it: the option, AWS_CA_BUNDLE,
 * the profile's ca_bundle (~ expanded); none: the system's store; a
 * file that is not there is an error naming where it came from. */
static void test_ca_bundle(void)
{
	struct ckpt_s3_opts o = { .no_sign_request = true };
	struct ckpt_s3_cfg c;
	char err[512], want[256];

	clean();
	put_file("opt.pem", "x");
	put_file("env.pem", "x");
	put_file("prof.pem", "x");
	CHECK(ckpt_s3_config_load(&o, &c, err, sizeof(err)) == 0);
	CHECK(c.ca_bundle == NULL);
	ckpt_s3_config_destroy(&c);
	put_file(".aws/config", "[default]\nCA_Bundle = ~/prof.pem\n");
	CHECK(ckpt_s3_config_load(&o, &c, err, sizeof(err)) == 0);
	snprintf(want, sizeof(want), "%s/prof.pem", home);
	CHECK(c.ca_bundle && strcmp(c.ca_bundle, want) == 0);
	ckpt_s3_config_destroy(&c);
	snprintf(want, sizeof(want), "%s/env.pem", home);
	setenv("AWS_CA_BUNDLE", want, 1);
	CHECK(ckpt_s3_config_load(&o, &c, err, sizeof(err)) == 0);
	CHECK(c.ca_bundle && strcmp(c.ca_bundle, want) == 0);
	ckpt_s3_config_destroy(&c);
	snprintf(want, sizeof(want), "%s/opt.pem", home);
	o.ca_bundle = want;
	CHECK(ckpt_s3_config_load(&o, &c, err, sizeof(err)) == 0);
	CHECK(c.ca_bundle && strcmp(c.ca_bundle, want) == 0);
	ckpt_s3_config_destroy(&c);
	snprintf(want, sizeof(want), "%s/none.pem", home);
	CHECK(ckpt_s3_config_load(&o, &c, err, sizeof(err)) == -ENOENT);
	CHECK(strstr(err, "S3 CA bundle from the ca_bundle option: ") &&
	      strstr(err, "none.pem: No such file or directory"));
	o.ca_bundle = NULL;
	setenv("AWS_CA_BUNDLE", want, 1);
	CHECK(ckpt_s3_config_load(&o, &c, err, sizeof(err)) == -ENOENT);
	CHECK(strstr(err, "S3 CA bundle from AWS_CA_BUNDLE: "));
	unsetenv("AWS_CA_BUNDLE");
	put_file(".aws/config", "[default]\nca_bundle = /nonexistent.pem\n");
	CHECK(ckpt_s3_config_load(&o, &c, err, sizeof(err)) == -ENOENT);
	CHECK(strstr(err, "/.aws/config: /nonexistent.pem: No such file"));
	rm_file("opt.pem");
	rm_file("env.pem");
	rm_file("prof.pem");
	clean();
}

static void test_profiles(void)
{
	struct ckpt_s3_opts o = { .profile = "p3" };
	struct ckpt_s3_cfg c;
	char err[512];

	clean();
	put_file(".aws/credentials",
		 "[default]\naws_access_key_id = DEFKEY\n"
		 "aws_secret_access_key = defsecret\n"
		 "[p2]\naws_access_key_id = P2KEY\n"
		 "aws_secret_access_key = p2secret\n");
	put_file(".aws/config",
		 "[profile p2]\nregion = eu-north-1\n"
		 "services = mine\n"
		 "s3 =\n  endpoint_url = http://nested:1\n"
		 "[profile p3]\n; only in config\n"
		 "aws_access_key_id=P3KEY\naws_secret_access_key=p3secret\n"
		 "endpoint_url = http://p3:3\n"
		 "[p2]\nregion = not-a-config-section\n");
	setenv("AWS_PROFILE", "p2", 1);
	CHECK(ckpt_s3_config_load(NULL, &c, err, sizeof(err)) == 0);
	CHECK(strcmp(ak(&c), "P2KEY") == 0);
	CHECK(strcmp(c.region, "eu-north-1") == 0);
	/* The nested s3 block is not read: the default endpoint. */
	CHECK(strcmp(c.endpoint, "https://s3.eu-north-1.amazonaws.com") == 0);
	CHECK(strstr(c.cred_source, "'p2'"));
	ckpt_s3_config_destroy(&c);

	/* Keys in the config file alone. */
	setenv("AWS_PROFILE", "p3", 1);
	CHECK(ckpt_s3_config_load(NULL, &c, err, sizeof(err)) == 0);
	CHECK(strcmp(ak(&c), "P3KEY") == 0);
	CHECK(strcmp(c.endpoint, "http://p3:3") == 0);
	CHECK(strstr(c.cred_source, ".aws/config"));
	ckpt_s3_config_destroy(&c);

	/* AWS_PROFILE leaves env keys first; a profile option skips them. */
	setenv("AWS_ACCESS_KEY_ID", "ENVKEY", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "envsecret", 1);
	CHECK(ckpt_s3_config_load(NULL, &c, err, sizeof(err)) == 0);
	CHECK(strcmp(ak(&c), "ENVKEY") == 0);
	ckpt_s3_config_destroy(&c);
	CHECK(ckpt_s3_config_load(&o, &c, err, sizeof(err)) == 0);
	CHECK(strcmp(ak(&c), "P3KEY") == 0);
	ckpt_s3_config_destroy(&c);

	/* A named profile that is nowhere. */
	setenv("AWS_PROFILE", "nope", 1);
	CHECK(ckpt_s3_config_load(NULL, &c, err, sizeof(err)) == -ENOENT);
	CHECK(strstr(err, "'nope'") && strstr(err, "AWS_PROFILE"));
	CHECK(c.endpoint == NULL && ak(&c) == NULL);

	/* Other file locations, with ~ expanded. */
	unsetenv("AWS_PROFILE");
	unsetenv("AWS_ACCESS_KEY_ID");
	unsetenv("AWS_SECRET_ACCESS_KEY");
	put_file("other-creds", "[default]\naws_access_key_id = OTHER\n"
		 "aws_secret_access_key = othersecret\n");
	setenv("AWS_SHARED_CREDENTIALS_FILE", "~/other-creds", 1);
	setenv("AWS_CONFIG_FILE", "~/missing-config", 1);
	CHECK(ckpt_s3_config_load(NULL, &c, err, sizeof(err)) == 0);
	CHECK(ak(&c) && strcmp(ak(&c), "OTHER") == 0);
	CHECK(strstr(c.cred_source, "/other-creds"));
	CHECK(strcmp(c.region, "us-east-1") == 0);
	ckpt_s3_config_destroy(&c);
}

/* Refusals name the setting, never a secret. */
static void test_refusals(void)
{
	struct ckpt_s3_opts o = { .access_key = "OPTKEY" };
	struct ckpt_s3_cfg c;
	char err[512];

	clean();
	CHECK(ckpt_s3_config_load(&o, &c, err, sizeof(err)) == -EINVAL);
	CHECK(strstr(err, "secret_key") && !strstr(err, "OPTKEY"));

	setenv("AWS_SECRET_ACCESS_KEY", "lonelysecret", 1);
	CHECK(ckpt_s3_config_load(NULL, &c, err, sizeof(err)) == -EINVAL);
	CHECK(strstr(err, "AWS_ACCESS_KEY_ID is not"));
	CHECK(!strstr(err, "lonelysecret"));

	setenv("AWS_ACCESS_KEY_ID", "K", 1);
	setenv("AWS_SESSION_TOKEN", "tok\r\nX-Evil: 1", 1);
	CHECK(ckpt_s3_config_load(NULL, &c, err, sizeof(err)) == -EINVAL);
	CHECK(strstr(err, "control character") && !strstr(err, "Evil"));
	unsetenv("AWS_SESSION_TOKEN");

	setenv("AWS_ENDPOINT_URL", "http://user:s3cr3tpw@host:1", 1);
	CHECK(ckpt_s3_config_load(NULL, &c, err, sizeof(err)) == -EINVAL);
	CHECK(strstr(err, "AWS_ENDPOINT_URL") && !strstr(err, "s3cr3tpw"));
	setenv("AWS_ENDPOINT_URL", "ftp://host", 1);
	CHECK(ckpt_s3_config_load(NULL, &c, err, sizeof(err)) == -EINVAL);
	CHECK(strstr(err, "http://"));
	setenv("AWS_ENDPOINT_URL", "http://host/?token=x", 1);
	CHECK(ckpt_s3_config_load(NULL, &c, err, sizeof(err)) == -EINVAL);
	CHECK(!strstr(err, "token"));
	unsetenv("AWS_ENDPOINT_URL");

	setenv("AWS_REGION", "us-east-1:evil", 1);
	CHECK(ckpt_s3_config_load(NULL, &c, err, sizeof(err)) == -EINVAL);
	CHECK(strstr(err, "AWS_REGION"));
	unsetenv("AWS_REGION");

	o = (struct ckpt_s3_opts){ .parallel = 1000 };
	CHECK(ckpt_s3_config_load(&o, &c, err, sizeof(err)) == -EINVAL);
	CHECK(strstr(err, "parallel"));
	o = (struct ckpt_s3_opts){ .part_bytes = 1 << 20,
				   .merge_gap = 1 << 20 };
	CHECK(ckpt_s3_config_load(&o, &c, err, sizeof(err)) == -EINVAL);
	CHECK(strstr(err, "merge gap"));
	/* The default gap shrinks to fit small parts. */
	o = (struct ckpt_s3_opts){ .part_bytes = 64 << 10 };
	CHECK(ckpt_s3_config_load(&o, &c, err, sizeof(err)) == 0);
	CHECK(c.merge_gap == 32 << 10);
	ckpt_s3_config_destroy(&c);
	o = (struct ckpt_s3_opts){ .timeout_ms = 5 };
	CHECK(ckpt_s3_config_load(&o, &c, err, sizeof(err)) == -EINVAL);
	CHECK(strstr(err, "timeout"));
}

static void test_encoding(void)
{
	struct ckpt_s3_param p[4] = {
		{ "prefix", "ck pt/" }, { "list-type", "2" },
		{ "delimiter", "/" }, { "continuation-token", "a+b=c/d" },
	};
	char *s;

	s = ckpt_s3_pct_encode("a b/c~d-e_f.g", 13, true);
	CHECK(s && strcmp(s, "a%20b/c~d-e_f.g") == 0);
	free(s);
	s = ckpt_s3_pct_encode("a b/c", 5, false);
	CHECK(s && strcmp(s, "a%20b%2Fc") == 0);
	free(s);
	s = ckpt_s3_pct_encode("+&=?#%\xc3\xbc", 8, true);
	CHECK(s && strcmp(s, "%2B%26%3D%3F%23%25%C3%BC") == 0);
	free(s);
	/* Only such URLs are sent with CURLOPT_PATH_AS_IS (which libcurl 8
	 * refuses with SigV4). */
	CHECK(!ckpt_s3_url_has_dot_segment("http://h:1/b/a.b/.c/.../x"));
	CHECK(!ckpt_s3_url_has_dot_segment("http://h:1/b/k?prefix=./.."));
	CHECK(!ckpt_s3_url_has_dot_segment("http://h.x:1"));
	CHECK(ckpt_s3_url_has_dot_segment("http://h:1/b/./x"));
	CHECK(ckpt_s3_url_has_dot_segment("http://h:1/b/a/.."));
	CHECK(ckpt_s3_url_has_dot_segment("https://h/b/../k?x=1"));

	{
		char out[32];

		CHECK(ckpt_s3_pct_decode("a%20b+c%2B%2f%C3%A9", out,
					 sizeof(out)) == 9);
		CHECK(strcmp(out, "a b c+/\xc3\xa9") == 0);
		CHECK(ckpt_s3_pct_decode("%00", out, sizeof(out)) == -1);
		CHECK(ckpt_s3_pct_decode("%4", out, sizeof(out)) == -1);
		CHECK(ckpt_s3_pct_decode("%zz", out, sizeof(out)) == -1);
		CHECK(ckpt_s3_pct_decode("abc", out, 3) == -1);
	}

	s = ckpt_s3_query(p, 4);
	CHECK(s && strcmp(s, "continuation-token=a%2Bb%3Dc%2Fd&delimiter=%2F"
			     "&list-type=2&prefix=ck%20pt%2F") == 0);
	free(s);
	s = ckpt_s3_query(p, 0);
	CHECK(s && strcmp(s, "") == 0);
	free(s);

	s = ckpt_s3_url("http://h:1", "bkt", "a b/c+d", NULL);
	CHECK(s && strcmp(s, "http://h:1/bkt/a%20b/c%2Bd") == 0);
	free(s);
	s = ckpt_s3_url("http://h:1", "bkt", NULL, "list-type=2");
	CHECK(s && strcmp(s, "http://h:1/bkt?list-type=2") == 0);
	free(s);
	s = ckpt_s3_key("", "x.distcp");
	CHECK(s && strcmp(s, "x.distcp") == 0);
	free(s);
	s = ckpt_s3_key("run/7", "x.distcp");
	CHECK(s && strcmp(s, "run/7/x.distcp") == 0);
	free(s);
}

static void test_roots(void)
{
	char *b, *p, err[256];

	CHECK(ckpt_s3_root_parse("s3://bkt", &b, &p, err, sizeof(err)) == 0);
	CHECK(strcmp(b, "bkt") == 0 && strcmp(p, "") == 0);
	free(b);
	free(p);
	CHECK(ckpt_s3_root_parse("s3://my.bucket-1//ck/pt//", &b, &p, err,
				 sizeof(err)) == 0);
	CHECK(strcmp(b, "my.bucket-1") == 0 && strcmp(p, "ck/pt") == 0);
	free(b);
	free(p);
	CHECK(ckpt_s3_root_parse("s3://ab/x", &b, &p, err, sizeof(err)) ==
	      -EINVAL);
	CHECK(strstr(err, "3 to 63"));
	CHECK(ckpt_s3_root_parse("s3://bk t/x", &b, &p, err, sizeof(err)) ==
	      -EINVAL);
	CHECK(ckpt_s3_root_parse("/tmp/x", &b, &p, err, sizeof(err)) ==
	      -EINVAL);
}

static int n_seen;
static char seen[4][64];

static int on_entry(void *ctx, const struct ckpt_s3_xml_entry *e)
{
	(void)ctx;
	if (n_seen < 4)
		snprintf(seen[n_seen], sizeof(seen[0]), "%s|%llu|%s", e->key,
			 (unsigned long long)e->size, e->etag);
	n_seen++;
	return 0;
}

static void test_xml(void)
{
	static const char page[] =
		"<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListBucketResult "
		"xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>b"
		"</Name><Prefix>p/</Prefix><IsTruncated>true</IsTruncated>"
		"<Contents><Key>p/a&amp;b &lt;c&gt;&#233;&#x41;</Key>"
		"<ETag>&quot;abc&quot;</ETag><Size>123</Size></Contents>"
		"<Contents><Key>p/2</Key><Size>0</Size><ETag>&quot;d-2&quot;"
		"</ETag></Contents><CommonPrefixes><Prefix>p/sub/</Prefix>"
		"</CommonPrefixes><NextContinuationToken>1/x+y=</"
		"NextContinuationToken></ListBucketResult>";
	static const char bad_size[] =
		"<ListBucketResult><Contents><Key>k</Key><Size>12x</Size>"
		"</Contents></ListBucketResult>";
	static const char no_token[] =
		"<ListBucketResult><IsTruncated>true</IsTruncated>"
		"</ListBucketResult>";
	static const char error[] =
		"<?xml version=\"1.0\"?><Error><Code>NoSuchBucket</Code>"
		"<BucketName>x</BucketName></Error>";
	char err[256], code[64], out[16];
	bool trunc;
	char *tok;

	n_seen = 0;
	CHECK(ckpt_s3_xml_list_page(page, strlen(page), on_entry, NULL,
				    &trunc, &tok, err, sizeof(err)) == 0);
	CHECK(n_seen == 2 && trunc && tok && strcmp(tok, "1/x+y=") == 0);
	CHECK(strcmp(seen[0], "p/a&b <c>\xc3\xa9" "A|123|\"abc\"") == 0);
	CHECK(strcmp(seen[1], "p/2|0|\"d-2\"") == 0);
	free(tok);
	CHECK(ckpt_s3_xml_list_page(bad_size, strlen(bad_size), on_entry,
				    NULL, &trunc, &tok, err, sizeof(err)) ==
	      -EBADMSG);
	CHECK(strstr(err, "Size"));
	CHECK(ckpt_s3_xml_list_page(no_token, strlen(no_token), on_entry,
				    NULL, &trunc, &tok, err, sizeof(err)) ==
	      -EBADMSG);
	CHECK(ckpt_s3_xml_list_page(error, strlen(error), on_entry, NULL,
				    &trunc, &tok, err, sizeof(err)) ==
	      -EBADMSG);
	ckpt_s3_xml_error_code(error, strlen(error), code, sizeof(code));
	CHECK(strcmp(code, "NoSuchBucket") == 0);
	ckpt_s3_xml_error_code("<Error><Code>a b</Code>", 22, code,
			       sizeof(code));
	CHECK(strcmp(code, "") == 0);
	ckpt_s3_xml_error_code(NULL, 0, code, sizeof(code));
	CHECK(strcmp(code, "") == 0);

	CHECK(ckpt_s3_xml_text("a&amp;&#0;", 10, out, sizeof(out)) == -1);
	CHECK(ckpt_s3_xml_text("&bogus;", 7, out, sizeof(out)) == -1);
	CHECK(ckpt_s3_xml_text("0123456789abcdefg", 17, out, sizeof(out)) ==
	      -1);
	CHECK(ckpt_s3_xml_text("&#x1F600;", 9, out, sizeof(out)) == 4);
}

/* The shared files as botocore reads them. */
static void test_ini(void)
{
	char text[] = "# c\n[profile Dev]\nRole_ARN = arn:aws:iam::1:role/x\n"
		      "Region: eu-west-1\n; c2\ns3 =\n  Addressing_Style = path\n"
		      "  endpoint_url = http://n:1\nnote = one\n  two\n"
		      "[default]\nregion = us-east-2\n[other]\nregion = x\n"
		      "[services svc]\nsts =\n  endpoint_url = http://sts:1\n";
	struct ckpt_ini ini = { 0 };

	CHECK(ckpt_ini_parse(text, true, &ini) == 0);
	CHECK(ckpt_ini_has_section(&ini, "Dev"));
	CHECK(!ckpt_ini_has_section(&ini, "other"));	/* not a profile */
	CHECK(strcmp(ckpt_ini_get(&ini, "Dev", "role_arn"),
		     "arn:aws:iam::1:role/x") == 0);
	CHECK(strcmp(ckpt_ini_get(&ini, "Dev", "region"), "eu-west-1") == 0);
	CHECK(strcmp(ckpt_ini_get(&ini, "Dev", "s3.addressing_style"),
		     "path") == 0);
	CHECK(strcmp(ckpt_ini_get(&ini, "Dev", "s3.endpoint_url"),
		     "http://n:1") == 0);
	CHECK(strcmp(ckpt_ini_get(&ini, "Dev", "note"), "one\ntwo") == 0);
	CHECK(strcmp(ckpt_ini_get(&ini, "default", "region"),
		     "us-east-2") == 0);
	CHECK(strcmp(ckpt_ini_get(&ini, "services svc", "sts.endpoint_url"),
		     "http://sts:1") == 0);
	ckpt_ini_destroy(&ini);

	CHECK(ckpt_s3_parse_time("2026-12-04T13:43:12.250335979Z") ==
	      1796391792);
	CHECK(ckpt_s3_parse_time("2026-12-04T14:43:12+01:00") == 1796391792);
	CHECK(ckpt_s3_parse_time("2026-12-04 13:43:12") == -1);
}

/* A profile's keys in any case; services' sts endpoint. */
static void test_profile_case(void)
{
	struct ckpt_s3_cfg c;
	char err[512];

	clean();
	put_file(".aws/credentials", "[default]\nAWS_ACCESS_KEY_ID = UPKEY\n"
		 "Aws_Secret_Access_Key: upsecret\n");
	CHECK(ckpt_s3_config_load(NULL, &c, err, sizeof(err)) == 0);
	CHECK(ak(&c) && strcmp(ak(&c), "UPKEY") == 0);
	CHECK(strcmp(sk(&c), "upsecret") == 0);
	ckpt_s3_config_destroy(&c);
	/* A named profile with a role but no source: an error naming it. */
	put_file(".aws/config", "[profile r]\nrole_arn = arn:aws:iam::1:role/x\n");
	setenv("AWS_PROFILE", "r", 1);
	CHECK(ckpt_s3_config_load(NULL, &c, err, sizeof(err)) == -EINVAL);
	CHECK(strstr(err, "'r'") && strstr(err, "neither source_profile"));
	unsetenv("AWS_PROFILE");
}

/* Virtual-hosted and path-style URLs, and how auto picks (botocore's
 * check_dns_name and its rule for custom endpoints). */
static void test_addressing(void)
{
	char *s;

	CHECK(ckpt_s3_bucket_is_dns("ckpt-run-7"));
	CHECK(ckpt_s3_bucket_is_dns("abc"));
	CHECK(!ckpt_s3_bucket_is_dns("ab"));
	CHECK(!ckpt_s3_bucket_is_dns("a.b.c"));
	CHECK(!ckpt_s3_bucket_is_dns("Ckpt"));
	CHECK(!ckpt_s3_bucket_is_dns("ck_pt"));
	CHECK(!ckpt_s3_bucket_is_dns("-ckpt"));
	CHECK(!ckpt_s3_bucket_is_dns("ckpt-"));
	CHECK(ckpt_s3_bucket_is_dns("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"));
	CHECK(!ckpt_s3_bucket_is_dns("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"));

	CHECK(ckpt_s3_endpoint_is_aws("https://s3.us-west-2.amazonaws.com"));
	CHECK(ckpt_s3_endpoint_is_aws("https://S3.AMAZONAWS.COM:443/"));
	CHECK(ckpt_s3_endpoint_is_aws("https://amazonaws.com"));
	CHECK(!ckpt_s3_endpoint_is_aws("https://notamazonaws.com"));
	CHECK(!ckpt_s3_endpoint_is_aws("http://127.0.0.1:7480"));
	CHECK(!ckpt_s3_endpoint_is_aws("http://amazonaws.com.evil:1"));

	/* auto: virtual for the default endpoint and a DNS-label bucket */
	CHECK(ckpt_s3_use_virtual(CKPT_S3_ADDR_AUTO,
				  "https://s3.eu-north-1.amazonaws.com", false,
				  "ckpt"));
	CHECK(!ckpt_s3_use_virtual(CKPT_S3_ADDR_AUTO,
				   "https://s3.eu-north-1.amazonaws.com",
				   false, "my.ckpt"));
	CHECK(!ckpt_s3_use_virtual(CKPT_S3_ADDR_AUTO,
				   "https://s3.eu-north-1.amazonaws.com",
				   false, "My_Ckpt"));
	CHECK(ckpt_s3_use_virtual(CKPT_S3_ADDR_AUTO,
				  "https://s3.eu-north-1.amazonaws.com", true,
				  "ckpt"));
	/* a custom endpoint stays path-style unless asked */
	CHECK(!ckpt_s3_use_virtual(CKPT_S3_ADDR_AUTO, "http://127.0.0.1:7480",
				   true, "ckpt"));
	CHECK(ckpt_s3_use_virtual(CKPT_S3_ADDR_VIRTUAL,
				  "http://127.0.0.1:7480", true, "ckpt"));
	CHECK(!ckpt_s3_use_virtual(CKPT_S3_ADDR_PATH,
				   "https://s3.eu-north-1.amazonaws.com",
				   false, "ckpt"));

	s = ckpt_s3_virtual_endpoint("https://s3.eu-north-1.amazonaws.com",
				     "ckpt");
	CHECK(s && strcmp(s, "https://ckpt.s3.eu-north-1.amazonaws.com") == 0);
	free(s);
	s = ckpt_s3_virtual_endpoint("http://rgw.test:7480/base", "ckpt");
	CHECK(s && strcmp(s, "http://ckpt.rgw.test:7480/base") == 0);
	free(s);
	CHECK(ckpt_s3_virtual_endpoint("rgw.test", "ckpt") == NULL);

	/* bucket NULL: the endpoint is the bucket's own */
	s = ckpt_s3_url("https://ckpt.s3.eu-north-1.amazonaws.com", NULL,
			"run/a b.distcp", NULL);
	CHECK(s && strcmp(s, "https://ckpt.s3.eu-north-1.amazonaws.com/"
			     "run/a%20b.distcp") == 0);
	free(s);
	s = ckpt_s3_url("http://ckpt.rgw.test:7480", NULL, NULL,
			"list-type=2&prefix=run%2F");
	CHECK(s && strcmp(s, "http://ckpt.rgw.test:7480/?list-type=2"
			     "&prefix=run%2F") == 0);
	free(s);
}

/* addressing_style from the option and the profile's nested s3 block. */
static void test_addressing_config(void)
{
	struct ckpt_s3_opts o = { .no_sign_request = true };
	struct ckpt_s3_cfg c;
	char err[512];

	clean();
	CHECK(ckpt_s3_config_load(&o, &c, err, sizeof(err)) == 0);
	CHECK(c.addressing == CKPT_S3_ADDR_AUTO && !c.endpoint_given);
	ckpt_s3_config_destroy(&c);

	put_file(".aws/config",
		 "[default]\ns3 =\n  addressing_style = virtual\n"
		 "[profile p]\nS3 =\n  Addressing_Style = path\n"
		 "endpoint_url = http://127.0.0.1:1\n"
		 "[profile bad]\ns3 =\n  addressing_style = sideways\n");
	CHECK(ckpt_s3_config_load(&o, &c, err, sizeof(err)) == 0);
	CHECK(c.addressing == CKPT_S3_ADDR_VIRTUAL);
	ckpt_s3_config_destroy(&c);
	setenv("AWS_PROFILE", "p", 1);
	CHECK(ckpt_s3_config_load(&o, &c, err, sizeof(err)) == 0);
	CHECK(c.addressing == CKPT_S3_ADDR_PATH && c.endpoint_given);
	ckpt_s3_config_destroy(&c);
	/* the option wins over the profile */
	o.addressing_style = "virtual";
	CHECK(ckpt_s3_config_load(&o, &c, err, sizeof(err)) == 0);
	CHECK(c.addressing == CKPT_S3_ADDR_VIRTUAL);
	ckpt_s3_config_destroy(&c);
	o.addressing_style = "Virtual";
	CHECK(ckpt_s3_config_load(&o, &c, err, sizeof(err)) == -EINVAL);
	CHECK(strstr(err, "addressing style option") &&
	      strstr(err, "'Virtual'"));
	o.addressing_style = NULL;
	setenv("AWS_PROFILE", "bad", 1);
	CHECK(ckpt_s3_config_load(&o, &c, err, sizeof(err)) == -EINVAL);
	CHECK(strstr(err, "'sideways'") && strstr(err, ".aws/config"));
	unsetenv("AWS_PROFILE");
}

int main(void)
{
	snprintf(home, sizeof(home), "/tmp/ckptfs-s3cfg-XXXXXX");
	if (!mkdtemp(home))
		return 1;
	{
		char d[128];

		snprintf(d, sizeof(d), "%s/.aws", home);
		mkdir(d, 0700);
	}
	TEST(test_defaults);
	TEST(test_ini);
	TEST(test_profile_case);
	TEST(test_env_over_files);
	TEST(test_opts_win);
	TEST(test_ca_bundle);
	TEST(test_profiles);
	TEST(test_refusals);
	TEST(test_encoding);
	TEST(test_roots);
	TEST(test_xml);
	TEST(test_addressing);
	TEST(test_addressing_config);
	clean();
	{
		char cmd[160];

		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", home);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", home);
	}
	return TEST_REPORT();
}
