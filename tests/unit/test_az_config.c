/* SPDX-License-Identifier: MIT */
/*
 * Azure names and credentials (core/io/az_config.c), without a network:
 * the three root forms, the endpoint's sources, the credentials' order,
 * refusals with one line that never holds the key or the SAS, and the
 * URLs a store builds (the SAS appended, never shown in the root).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "io/az_config.h"
#include "testhelp.h"

#define KEY "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
#define SIG "c2VjcmV0c2lnbmF0dXJl"

static void clear_env(void)
{
	unsetenv("AZURE_STORAGE_ACCOUNT");
	unsetenv("AZURE_STORAGE_KEY");
	unsetenv("AZURE_STORAGE_SAS_TOKEN");
	unsetenv("AZURE_STORAGE_CONNECTION_STRING");
	unsetenv("AZURE_STORAGE_BLOB_ENDPOINT");
	unsetenv("AZURE_CLIENT_SECRET");
	unsetenv("AZURE_FEDERATED_TOKEN_FILE");
	unsetenv("AZURE_TENANT_ID");
	unsetenv("AZURE_CLIENT_ID");
	unsetenv("IDENTITY_ENDPOINT");
	unsetenv("IDENTITY_HEADER");
	/* managed identity, tried last: a port nothing listens on (no
	 * network in a unit test) */
	setenv("AZURE_POD_IDENTITY_AUTHORITY_HOST", "http://127.0.0.1:1", 1);
}

static void test_names(void)
{
	struct ckpt_az_cfg c;
	char err[512];

	clear_env();
	setenv("AZURE_STORAGE_KEY", KEY, 1);
	CHECK(ckpt_az_config_load("az://acct1/ckpt/run/a/", NULL, &c, err,
				  sizeof(err)) == 0);
	CHECK(!strcmp(c.account, "acct1") && !strcmp(c.container, "ckpt"));
	CHECK(!strcmp(c.prefix, "run/a"));
	CHECK(!strcmp(c.endpoint, "https://acct1.blob.core.windows.net"));
	CHECK(c.auth == CKPT_AZ_SHARED_KEY && c.klen == 64);
	ckpt_az_config_destroy(&c);

	CHECK(ckpt_az_config_load("https://acct2.blob.core.windows.net/c-1/p/q",
				  NULL, &c, err, sizeof(err)) == 0);
	CHECK(!strcmp(c.account, "acct2") && !strcmp(c.container, "c-1"));
	CHECK(!strcmp(c.prefix, "p/q"));
	CHECK(!strcmp(c.endpoint, "https://acct2.blob.core.windows.net"));
	ckpt_az_config_destroy(&c);

	/* path style (Azurite): the account is the first segment */
	CHECK(ckpt_az_config_load("http://127.0.0.1:10000/devstoreaccount1/ckpt",
				  NULL, &c, err, sizeof(err)) == 0);
	CHECK(!strcmp(c.account, "devstoreaccount1"));
	CHECK(!strcmp(c.container, "ckpt") && !strcmp(c.prefix, ""));
	CHECK(!strcmp(c.endpoint, "http://127.0.0.1:10000/devstoreaccount1"));
	ckpt_az_config_destroy(&c);

	CHECK(ckpt_az_config_load("az://Acct/ckpt", NULL, &c, err,
				  sizeof(err)) == -EINVAL);
	CHECK(strstr(err, "az://Acct/ckpt: not az://ACCOUNT/CONTAINER") != NULL);
	CHECK(ckpt_az_config_load("az://acct/ab/x", NULL, &c, err,
				  sizeof(err)) == -EINVAL);
	CHECK(strstr(err, "'ab' is not a container name") != NULL);
	CHECK(ckpt_az_config_load("az://acct/ckpt?foo=bar", NULL, &c, err,
				  sizeof(err)) == -EINVAL);
	CHECK(strstr(err, "is not a SAS token") != NULL);
	CHECK(ckpt_az_root_is("az://a/b") && ckpt_az_root_is("https://x/y"));
	CHECK(!ckpt_az_root_is("s3://a/b") && !ckpt_az_root_is("dir/x"));
}

static void test_endpoint(void)
{
	struct ckpt_s3_opts o = { .az_endpoint = "http://127.0.0.1:9/acct/" };
	struct ckpt_az_cfg c;
	char err[512];

	clear_env();
	setenv("AZURE_STORAGE_KEY", KEY, 1);
	setenv("AZURE_STORAGE_BLOB_ENDPOINT", "http://127.0.0.1:8/acct", 1);
	CHECK(ckpt_az_config_load("az://acct/ckpt", &o, &c, err,
				  sizeof(err)) == 0);
	CHECK(!strcmp(c.endpoint, "http://127.0.0.1:9/acct"));	/* option */
	ckpt_az_config_destroy(&c);
	CHECK(ckpt_az_config_load("az://acct/ckpt", NULL, &c, err,
				  sizeof(err)) == 0);
	CHECK(!strcmp(c.endpoint, "http://127.0.0.1:8/acct"));	/* env */
	ckpt_az_config_destroy(&c);
	setenv("AZURE_STORAGE_BLOB_ENDPOINT", "ftp://x", 1);
	CHECK(ckpt_az_config_load("az://acct/ckpt", NULL, &c, err,
				  sizeof(err)) == -EINVAL);
	CHECK(strstr(err, "AZURE_STORAGE_BLOB_ENDPOINT") != NULL);
}

static void test_order(void)
{
	struct ckpt_s3_opts anon = { .az_anonymous = true };
	struct ckpt_az_cfg c;
	char err[1024], *u;

	clear_env();
	setenv("AZURE_STORAGE_KEY", KEY, 1);
	setenv("AZURE_STORAGE_SAS_TOKEN", "?sv=2021-08-06&sp=rl&sig=" SIG, 1);
	/* the URL's SAS first, then the environment's, then the key */
	CHECK(ckpt_az_config_load("https://acct.blob.core.windows.net/ckpt/p"
				  "?sv=2021-08-06&sig=url" SIG, NULL, &c, err,
				  sizeof(err)) == 0);
	CHECK(c.auth == CKPT_AZ_SAS && !strcmp(c.sas, "sv=2021-08-06&sig=url"
					       SIG));
	CHECK(!strcmp(c.root, "https://acct.blob.core.windows.net/ckpt/p"));
	CHECK(!strcmp(c.cred_source, "a SAS token on the URL"));
	u = ckpt_az_url(&c, "p/x y", "comp=list");
	CHECK(u && !strcmp(u, "https://acct.blob.core.windows.net/ckpt/p/x%20y"
			   "?comp=list&sv=2021-08-06&sig=url" SIG));
	free(u);
	ckpt_az_config_destroy(&c);
	CHECK(ckpt_az_config_load("az://acct/ckpt", NULL, &c, err,
				  sizeof(err)) == 0);
	CHECK(c.auth == CKPT_AZ_SAS && !strcmp(c.sas, "sv=2021-08-06&sp=rl&sig="
					       SIG));
	CHECK(strstr(c.cred_source, "AZURE_STORAGE_SAS_TOKEN") != NULL);
	ckpt_az_config_destroy(&c);
	unsetenv("AZURE_STORAGE_SAS_TOKEN");
	setenv("AZURE_STORAGE_ACCOUNT", "other", 1);
	CHECK(ckpt_az_config_load("az://acct/ckpt", NULL, &c, err,
				  sizeof(err)) == -EACCES);
	CHECK(strstr(err, "key of account 'other'") && !strstr(err, KEY));
	unsetenv("AZURE_STORAGE_ACCOUNT");
	setenv("AZURE_STORAGE_KEY", "not base64 " SIG, 1);
	CHECK(ckpt_az_config_load("az://acct/ckpt", NULL, &c, err,
				  sizeof(err)) == -EINVAL);
	CHECK(strstr(err, "is not base64") && !strstr(err, SIG));
	unsetenv("AZURE_STORAGE_KEY");

	/* the connection string: its endpoint and its key */
	setenv("AZURE_STORAGE_CONNECTION_STRING",
	       "DefaultEndpointsProtocol=http;AccountName=acct;AccountKey="
	       KEY ";BlobEndpoint=http://127.0.0.1:7/acct;", 1);
	CHECK(ckpt_az_config_load("az://acct/ckpt", NULL, &c, err,
				  sizeof(err)) == 0);
	CHECK(c.auth == CKPT_AZ_SHARED_KEY && c.klen == 64);
	CHECK(!strcmp(c.endpoint, "http://127.0.0.1:7/acct"));
	CHECK(strstr(c.cred_source, "AZURE_STORAGE_CONNECTION_STRING") &&
	      !strstr(c.cred_source, KEY));
	ckpt_az_config_destroy(&c);
	CHECK(ckpt_az_config_load("az://other/ckpt", NULL, &c, err,
				  sizeof(err)) == -EACCES);
	CHECK(strstr(err, "is for account 'acct', not 'other'") != NULL);
	unsetenv("AZURE_STORAGE_CONNECTION_STRING");

	/* nothing: an error naming what was tried; anonymous only asked */
	CHECK(ckpt_az_config_load("az://acct/ckpt", NULL, &c, err,
				  sizeof(err)) == -EACCES);
	CHECK(strstr(err, "no Azure credentials: tried a SAS token on the "
		      "URL, AZURE_STORAGE_SAS_TOKEN, AZURE_STORAGE_KEY, "
		      "AZURE_STORAGE_CONNECTION_STRING, AZURE_CLIENT_SECRET, "
		      "AZURE_FEDERATED_TOKEN_FILE, IDENTITY_ENDPOINT, an "
		      "Entra ID token from the instance metadata endpoint "
		      "(managed identity at http://127.0.0.1:1): no answer "
		      "from http://127.0.0.1:1/metadata/identity/oauth2/"
		      "token: ") != NULL);
	CHECK(strstr(err, "; -o az_anonymous reads a public container"));

	/* Entra ID sources half configured, or with IDs that are not:
	 * refused before any request, naming the variable, never the
	 * secret */
	setenv("AZURE_CLIENT_SECRET", "s3cr3t-value", 1);
	CHECK(ckpt_az_config_load("az://acct/ckpt", NULL, &c, err,
				  sizeof(err)) == -EINVAL);
	CHECK(!strcmp(err, "az://acct/ckpt: Entra ID: AZURE_CLIENT_SECRET is "
		      "set but AZURE_TENANT_ID is not"));
	setenv("AZURE_TENANT_ID", "t-1", 1);
	CHECK(ckpt_az_config_load("az://acct/ckpt", NULL, &c, err,
				  sizeof(err)) == -EINVAL);
	CHECK(strstr(err, "AZURE_CLIENT_SECRET is set but AZURE_CLIENT_ID "
		      "is not") != NULL);
	setenv("AZURE_CLIENT_ID", "c 1&x=y", 1);
	CHECK(ckpt_az_config_load("az://acct/ckpt", NULL, &c, err,
				  sizeof(err)) == -EINVAL);
	CHECK(strstr(err, "AZURE_CLIENT_ID is not an ID") != NULL);
	CHECK(!strstr(err, "s3cr3t"));
	setenv("AZURE_CLIENT_ID", "c-1", 1);
	setenv("AZURE_AUTHORITY_HOST", "ftp://x", 1);
	CHECK(ckpt_az_config_load("az://acct/ckpt", NULL, &c, err,
				  sizeof(err)) == -EINVAL);
	CHECK(strstr(err, "AZURE_AUTHORITY_HOST is not an http(s) URL") !=
	      NULL);
	/* a configured source that does not answer is its own error */
	setenv("AZURE_AUTHORITY_HOST", "http://127.0.0.1:1/", 1);
	CHECK(ckpt_az_config_load("az://acct/ckpt", NULL, &c, err,
				  sizeof(err)) == -EIO);
	CHECK(strstr(err, "az://acct/ckpt: an Entra ID token for a service "
		      "principal (AZURE_CLIENT_SECRET, client ID c-1, tenant "
		      "t-1): no answer from http://127.0.0.1:1/t-1/oauth2/"
		      "v2.0/token: ") == err);
	CHECK(!strstr(err, "s3cr3t"));
	unsetenv("AZURE_AUTHORITY_HOST");
	unsetenv("AZURE_CLIENT_SECRET");
	setenv("AZURE_FEDERATED_TOKEN_FILE", "/nonexistent/token", 1);
	unsetenv("AZURE_TENANT_ID");
	CHECK(ckpt_az_config_load("az://acct/ckpt", NULL, &c, err,
				  sizeof(err)) == -EINVAL);
	CHECK(strstr(err, "AZURE_FEDERATED_TOKEN_FILE is set but "
		      "AZURE_TENANT_ID is not") != NULL);
	setenv("AZURE_TENANT_ID", "t-1", 1);
	CHECK(ckpt_az_config_load("az://acct/ckpt", NULL, &c, err,
				  sizeof(err)) == -ENOENT);
	CHECK(strstr(err, "workload identity (AZURE_FEDERATED_TOKEN_FILE, "
		      "client ID c-1, tenant t-1): /nonexistent/token: ") !=
	      NULL);
	clear_env();

	CHECK(ckpt_az_config_load("az://acct/ckpt", &anon, &c, err,
				  sizeof(err)) == 0);
	CHECK(c.auth == CKPT_AZ_ANONYMOUS);
	CHECK(!strcmp(c.cred_source, "anonymous (az_anonymous)"));
	u = ckpt_az_url(&c, NULL, NULL);
	CHECK(u && !strcmp(u, "https://acct.blob.core.windows.net/ckpt"));
	free(u);
	ckpt_az_config_destroy(&c);
}

int main(void)
{
	TEST(test_names);
	TEST(test_endpoint);
	TEST(test_order);
	clear_env();
	return TEST_REPORT();
}
