/* SPDX-License-Identifier: MIT */
/* Unit tests of the strict JSON parser (common/json.c) used for
 * safetensors headers: values, escapes, and every refusal. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "testhelp.h"

static int parse(const char *s, struct ckpt_json_doc *d, char *err)
{
	return ckpt_json_parse(s, strlen(s), "h", d, err, 256);
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
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		CHECK(parse(bad[i][0], &d, err) == -EINVAL);
		CHECK(strstr(err, bad[i][1]) != NULL);
		if (!strstr(err, bad[i][1]))
			fprintf(stderr, "  %s -> %s\n", bad[i][0], err);
		CHECK(d.nodes == NULL);
	}
	memset(deep, '[', 100);
	memset(deep + 100, ']', 99);
	deep[199] = '\0';
	CHECK(parse(deep, &d, err) == -EINVAL && strstr(err, "nested too deep"));
	CHECK(strstr(err, "h: byte ") == err);
}

int main(void)
{
	TEST(test_values);
	TEST(test_refusals);
	return TEST_REPORT();
}
