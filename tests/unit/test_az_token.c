/* SPDX-License-Identifier: MIT */
/*
 * Entra ID token answers (core/io/az_token.c, ckpt_az_token_parse): the
 * three shapes the token services send (the authority's numbers, the
 * metadata endpoint's strings, IDENTITY_ENDPOINT's expires_on), and
 * hostile ones: missing fields, wrong types, huge or non-numeric
 * lifetimes, an oversized or header-breaking token, duplicate keys, not
 * JSON.  No message may hold the token.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/az_token.h"
#include "testhelp.h"

#define NOW 1800000000LL
#define TOK "eyJhbGciOi.eyJhdWQiOi.c2ln"

static int parse(const char *json, char **tok, int64_t *exp, char *err,
		 size_t errlen)
{
	return ckpt_az_token_parse(json, strlen(json), NOW, "SRC", tok, exp,
				   err, errlen);
}

static void test_good(void)
{
	char err[300], *tok;
	int64_t exp;

	/* the authority (v2.0): expires_in a number */
	CHECK(parse("{\"token_type\":\"Bearer\",\"expires_in\":3599,"
		    "\"ext_expires_in\":3599,\"access_token\":\"" TOK "\"}",
		    &tok, &exp, err, sizeof(err)) == 0);
	CHECK(tok && !strcmp(tok, TOK) && exp == NOW + 3599);
	free(tok);
	/* IMDS: strings; expires_in wins over expires_on */
	CHECK(parse("{\"access_token\":\"" TOK "\",\"expires_in\":\"86399\","
		    "\"expires_on\":\"1\",\"resource\":\"https://storage."
		    "azure.com/\"}", &tok, &exp, err, sizeof(err)) == 0);
	CHECK(exp == NOW + 86399);
	free(tok);
	/* IDENTITY_ENDPOINT (2019-08-01): expires_on alone, a string */
	CHECK(parse("{\"access_token\":\"" TOK "\",\"expires_on\":"
		    "\"1800003600\"}", &tok, &exp, err, sizeof(err)) == 0);
	CHECK(exp == 1800003600LL);
	free(tok);
	/* escapes in the token are decoded */
	CHECK(parse("{\"access_token\":\"a\\/b\",\"expires_in\":60}", &tok,
		    &exp, err, sizeof(err)) == 0);
	CHECK(tok && !strcmp(tok, "a/b"));
	free(tok);
}

static void refused(const char *json, const char *want)
{
	char err[300] = "", *tok = (char *)"x";
	int64_t exp = 7;

	CHECK(parse(json, &tok, &exp, err, sizeof(err)) == -EINVAL);
	CHECK(tok == NULL && exp == 0);
	if (!strstr(err, want))
		fprintf(stderr, "  got '%s', want '%s'\n", err, want);
	CHECK(strstr(err, want) != NULL);
	CHECK(!strncmp(err, "SRC: ", 5));
	CHECK(!strstr(err, TOK));
}

static void test_hostile(void)
{
	char *big, *p;
	size_t n = CKPT_AZ_TOKEN_MAX + 1;

	refused("", "the answer is not JSON");
	refused("{\"access_token\":\"" TOK "\"", "the answer is not JSON");
	refused("[1,2]", "not a JSON object");
	refused("{\"expires_in\":60}", "no access_token string");
	refused("{\"access_token\":42,\"expires_in\":60}",
		"no access_token string");
	refused("{\"access_token\":null,\"expires_in\":60}",
		"no access_token string");
	refused("{\"access_token\":\"\",\"expires_in\":60}",
		"the access_token is empty");
	refused("{\"access_token\":\"a b\",\"expires_in\":60}",
		"holds a space or control character");
	refused("{\"access_token\":\"a\\r\\nX-Evil: 1\",\"expires_in\":60}",
		"holds a space or control character");
	refused("{\"access_token\":\"a\\u0000b\",\"expires_in\":60}",
		"the access_token is empty");
	refused("{\"access_token\":\"" TOK "\"}",
		"no expires_in or expires_on");
	refused("{\"access_token\":\"" TOK "\",\"expires_in\":\"soon\"}",
		"expires_in is not a number");
	refused("{\"access_token\":\"" TOK "\",\"expires_in\":\"-5\"}",
		"expires_in is not a number");
	refused("{\"access_token\":\"" TOK "\",\"expires_in\":-5}",
		"expires_in is not a number");
	refused("{\"access_token\":\"" TOK "\",\"expires_in\":0}",
		"expires_in is not a number");
	refused("{\"access_token\":\"" TOK "\",\"expires_in\":3599.5}",
		"not JSON");	/* the parser takes integers only */
	refused("{\"access_token\":\"" TOK "\",\"expires_in\":"
		"18446744073709551615}", "expires_in is not a number");
	refused("{\"access_token\":\"" TOK "\",\"expires_in\":"
		"\"99999999999999999999999\"}", "expires_in is not a number");
	refused("{\"access_token\":\"" TOK "\",\"expires_in\":true}",
		"expires_in is not a number");
	refused("{\"access_token\":\"" TOK "\",\"expires_in\":\"\"}",
		"expires_in is not a number");
	refused("{\"access_token\":\"" TOK "\",\"expires_on\":\"1\"}",
		"expires_on is not a time");
	refused("{\"access_token\":\"" TOK "\",\"expires_on\":"
		"\"06/20/2019 02:57:58 +00:00\"}", "expires_on is not a time");
	refused("{\"access_token\":\"" TOK "\",\"expires_on\":99999999999}",
		"expires_on is not a time");
	refused("{\"access_token\":\"" TOK "\",\"access_token\":\"other\","
		"\"expires_in\":60}", "names a key twice");

	/* a token one byte over the bound */
	big = malloc(n + 64);
	CHECK(big != NULL);
	if (!big)
		return;
	p = big + sprintf(big, "{\"expires_in\":60,\"access_token\":\"");
	memset(p, 'A', n);
	strcpy(p + n, "\"}");
	refused(big, "longer than 16384 bytes");
	/* at the bound: taken */
	strcpy(p + n - 1, "\"}");
	{
		char err[300], *tok;
		int64_t exp;

		CHECK(parse(big, &tok, &exp, err, sizeof(err)) == 0);
		CHECK(tok && strlen(tok) == CKPT_AZ_TOKEN_MAX);
		free(tok);
	}
	free(big);
}

int main(void)
{
	TEST(test_good);
	TEST(test_hostile);
	return TEST_REPORT();
}
