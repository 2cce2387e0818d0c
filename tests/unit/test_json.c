/* SPDX-License-Identifier: MIT */
/* Unit tests of the strict JSON parser (common/json.c) used for
 * safetensors headers: values, escapes, and every refusal. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "testhelp.h"

static int parse(const char *s, struct ckpt_json_doc *d, char *err)
{
	return ckpt_json_parse(s, strlen(s), "h", d, err, 256);
}

/* Each text bad[i][0] is refused with a message holding bad[i][1]. */
static void refuses(const char *const bad[][2], size_t n)
{
	struct ckpt_json_doc d;
	char err[256];
	size_t i;

	for (i = 0; i < n; i++) {
		err[0] = '\0';
		CHECK(parse(bad[i][0], &d, err) == -EINVAL);
		CHECK(strstr(err, bad[i][1]) != NULL);
		if (!strstr(err, bad[i][1]))
			fprintf(stderr, "  %s -> %s\n", bad[i][0], err);
		CHECK(d.nodes == NULL);
	}
}

static void test_values(void)
{
	const char *t = " {\"a\": [1, 18446744073709551615, -5, true, false, null],"
			" \"b\\u00e9\\n\": \"x\\\"y\", \"c\": {}} ";
	struct ckpt_json_doc d;
	const struct ckpt_json *a, *b;
	char err[256], s[64];

	CHECK(parse(t, &d, err) == 0);
	a = ckpt_json_get(&d, &d.nodes[0], "a");
	CHECK(a && a->type == CKPT_JSON_ARR && a->n == 6);
	CHECK(ckpt_json_at(&d, a, 1)->v == UINT64_MAX);
	CHECK(ckpt_json_at(&d, a, 2)->type == CKPT_JSON_NEG &&
	      ckpt_json_at(&d, a, 2)->v == 5);
	CHECK(ckpt_json_at(&d, a, 3)->b && !ckpt_json_at(&d, a, 4)->b);
	CHECK(ckpt_json_at(&d, a, 5)->type == CKPT_JSON_NULL);
	b = ckpt_json_get(&d, &d.nodes[0], "b\xc3\xa9\n");
	CHECK(b && ckpt_json_str(b, s, sizeof(s)) == 3 && !strcmp(s, "x\"y"));
	CHECK(ckpt_json_get(&d, &d.nodes[0], "c")->n == 0);
	CHECK(ckpt_json_get(&d, &d.nodes[0], "zz") == NULL);
	ckpt_json_free(&d);
}

static void test_refusals(void)
{
	static const char *const bad[][2] = {
		{ "[1, 2", "expected ',' or ']'" },
		{ "{\"a\" 1}", "expected ':'" },
		{ "[01]", "leading zero" },
		{ "[1.5]", "only integers" },
		{ "[1e3]", "only integers" },
		{ "[18446744073709551616]", "does not fit 64 bits" },
		{ "\"abc", "unterminated string" },
		{ "\"a\x01\"", "control character" },
		{ "\"\\x\"", "bad escape" },
		{ "\"\\u12G4\"", "bad \\u escape" },
		{ "[tru]", "unexpected character" },
		{ "{} x", "trailing data" },
		{ "", "unexpected end" },
		{ "{\"a\":1,}", "expected a string key" },
	};
	struct ckpt_json_doc d;
	char err[256], deep[200];

	refuses(bad, sizeof(bad) / sizeof(bad[0]));
	memset(deep, '[', 100);
	memset(deep + 100, ']', 99);
	deep[199] = '\0';
	CHECK(parse(deep, &d, err) == -EINVAL && strstr(err, "nested too deep"));
	CHECK(strstr(err, "h: byte ") == err);
}

/* Strings are UTF-8: a surrogate pair escape decodes to one 4-byte
 * character (not CESU-8), a lone surrogate and invalid bytes are refused
 * with the string shown. */
static void test_utf8(void)
{
	static const char *const bad[][2] = {
		{ "\"\\ud800\"", "string \"\\ud800\" holds a lone surrogate" },
		{ "\"a\\udc00\"", "holds a lone surrogate" },
		{ "\"\\ud800\\u0041\"", "holds a lone surrogate" },
		{ "\"\\ud800x\"", "holds a lone surrogate" },
		{ "\"\\udbff\\ud800\"", "holds a lone surrogate" },
		{ "\"\\ud83d", "holds a lone surrogate" },
		{ "\"a\xff\"", "string \"a\\xff\" is not valid UTF-8" },
		{ "\"\xc0\xaf\"", "is not valid UTF-8" },	/* overlong '/' */
		{ "\"\xed\xa0\x80\"", "is not valid UTF-8" },	/* CESU-8 */
		{ "\"\xf4\x90\x80\x80\"", "is not valid UTF-8" },	/* > U+10FFFF */
		{ "\"\xe2\x82\"", "is not valid UTF-8" },	/* cut short */
		{ "{\"k\": \"\x80\"}", "byte 7: string" },
	};
	struct ckpt_json_doc d;
	char err[256], s[64];

	CHECK(parse("[\"\\ud83d\\ude00\", \"\xf0\x9f\x98\x80\", "
		    "\"\\u00e9\\u20ac\\uFFFF\", \"\\udbff\\udfff\"]", &d, err) == 0);
	CHECK(ckpt_json_str(ckpt_json_at(&d, &d.nodes[0], 0), s, sizeof(s)) == 4);
	CHECK(!strcmp(s, "\xf0\x9f\x98\x80"));
	CHECK(ckpt_json_str(ckpt_json_at(&d, &d.nodes[0], 1), s, sizeof(s)) == 4);
	CHECK(!strcmp(s, "\xf0\x9f\x98\x80"));
	CHECK(ckpt_json_str(ckpt_json_at(&d, &d.nodes[0], 2), s, sizeof(s)) == 8);
	CHECK(!strcmp(s, "\xc3\xa9\xe2\x82\xac\xef\xbf\xbf"));
	CHECK(ckpt_json_str(ckpt_json_at(&d, &d.nodes[0], 3), s, sizeof(s)) == 4);
	CHECK(!strcmp(s, "\xf4\x8f\xbf\xbf"));	/* U+10FFFF */
	/* too small a buffer: -1, never a cut character */
	CHECK(ckpt_json_str(ckpt_json_at(&d, &d.nodes[0], 0), s, 4) == -1);
	ckpt_json_free(&d);
	refuses(bad, sizeof(bad) / sizeof(bad[0]));
}

/* Repeated names in an object, compared decoded, found in O(n log n). */
static void test_dups(void)
{
	const struct ckpt_json *dup;
	struct ckpt_json_doc d;
	char err[256], *big;
	size_t i, at;

	CHECK(parse("{\"a\": 1, \"b\": 2, \"c\": {\"x\": 1, \"x\": 2}, "
		    "\"\\u0062\": 3}", &d, err) == 0);
	CHECK(ckpt_json_find_dup(&d, &d.nodes[0], &dup) == 1);
	CHECK(dup && dup->type == CKPT_JSON_STR && dup->len == 6);	/* \u0062 */
	CHECK(ckpt_json_find_dup(&d, ckpt_json_get(&d, &d.nodes[0], "c"),
				 &dup) == 1 && dup->len == 1);
	CHECK(ckpt_json_find_dup(&d, ckpt_json_get(&d, &d.nodes[0], "a"),
				 &dup) == 0 && !dup);
	ckpt_json_free(&d);
	CHECK(parse("{\"ab\": 1, \"a\": 2, \"abc\": 3, \"\": 4}", &d, err) == 0);
	CHECK(ckpt_json_find_dup(&d, &d.nodes[0], &dup) == 0 && !dup);
	ckpt_json_free(&d);
	/* 20000 distinct names, then one again */
	big = malloc(20001 * 12 + 16);
	CHECK(big != NULL);
	if (!big)
		return;
	at = (size_t)sprintf(big, "{");
	for (i = 0; i < 20000; i++)
		at += (size_t)sprintf(big + at, "\"k%zu\":0,", i);
	sprintf(big + at, "\"k7\":1}");
	CHECK(parse(big, &d, err) == 0);
	CHECK(ckpt_json_find_dup(&d, &d.nodes[0], &dup) == 1 &&
	      dup->len == 2 && !memcmp(dup->s, "k7", 2));
	ckpt_json_free(&d);
	free(big);
}

int main(void)
{
	TEST(test_values);
	TEST(test_refusals);
	TEST(test_utf8);
	TEST(test_dups);
	return TEST_REPORT();
}
