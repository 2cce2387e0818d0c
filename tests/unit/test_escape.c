/* SPDX-License-Identifier: MIT */
/* Unit tests of common/escape.c: UTF-8 validation, message escapes and
 * the TSV escape of manifest.tsv and `ckptfs ls`. */
#include <errno.h>
#include <string.h>

#include "ckptfs.h"
#include "common/errbuf.h"
#include "common/escape.h"
#include "testhelp.h"

static void test_utf8(void)
{
	static const struct {
		const char *s;
		size_t valid;	/* the valid prefix's length */
	} t[] = {
		{ "plain", 5 },
		{ "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 9 },
		{ "\xf4\x8f\xbf\xbf", 4 },		/* U+10FFFF */
		{ "a\xff", 1 },
		{ "a\x80", 1 },				/* a lone continuation */
		{ "ab\xc0\xaf", 2 },			/* overlong '/' */
		{ "\xe0\x80\xaf", 0 },			/* overlong, 3 bytes */
		{ "\xf0\x80\x80\xaf", 0 },		/* overlong, 4 bytes */
		{ "x\xed\xa0\x80", 1 },			/* a surrogate (CESU-8) */
		{ "\xed\x9f\xbf", 3 },			/* U+D7FF, just below */
		{ "\xf4\x90\x80\x80", 0 },		/* above U+10FFFF */
		{ "\xf5\x80\x80\x80", 0 },
		{ "\xe2\x82", 0 },			/* cut short */
		{ "\xe2\x28\xa1", 0 },			/* not a continuation */
	};
	size_t i;

	for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		size_t got = ckpt_utf8_valid_prefix(t[i].s, strlen(t[i].s));

		CHECK(got == t[i].valid);
		if (got != t[i].valid)
			fprintf(stderr, "  case %zu: %zu\n", i, got);
		CHECK(ckpt_utf8_is_valid(t[i].s, strlen(t[i].s)) ==
		      (t[i].valid == strlen(t[i].s)));
	}
	CHECK(ckpt_utf8_is_valid("a\0b", 3));	/* NUL is the callers' rule */
}

static void test_escape_msg(void)
{
	char out[64];

	CHECK(!strcmp(ckpt_escape_msg("a\xff\xfe.w", 5, false, out, sizeof(out)),
		      "a\\xff\\xfe.w"));
	CHECK(!strcmp(ckpt_escape_msg("t\tn\nr\r\\\x01\x7f\xc3\xa9", 11, false,
				      out, sizeof(out)),
		      "t\\tn\\nr\\r\\\\\\x01\\x7f\xc3\xa9"));
	CHECK(!strcmp(ckpt_escape_msg("x\\ud800", 7, true, out, sizeof(out)),
		      "x\\ud800"));
	CHECK(!strcmp(ckpt_escape_msg("a\0b", 3, false, out, sizeof(out)),
		      "a\\x00b"));
	/* cut: never half a character or escape, always "..." */
	CHECK(!strcmp(ckpt_escape_msg("abcdefgh", 8, false, out, 8), "abcd..."));
	CHECK(!strcmp(ckpt_escape_msg("abcd", 4, false, out, 5), "abcd"));
	CHECK(!strcmp(ckpt_escape_msg("abcde", 5, false, out, 5), "a..."));
	CHECK(!strcmp(ckpt_escape_msg("\xff\xff\xff", 3, false, out, 10),
		      "\\xff..."));
	CHECK(!strcmp(ckpt_escape_msg("\xc3\xa9\xc3\xa9\xc3\xa9", 6, false, out,
				      6), "\xc3\xa9..."));
	CHECK(!strcmp(ckpt_escape_msg("abc", 3, false, out, 3), ""));
}

/* Shortened in the middle, between whole pieces; short names as
 * ckpt_escape_msg(). */
static void test_escape_mid(void)
{
	char big[1200], out[40];
	size_t i;

	CHECK(strcmp(ckpt_escape_mid("a\x1b[31mb", 7, out, sizeof(out)),
		     "a\\x1b[31mb") == 0);
	for (i = 0; i < sizeof(big) - 1; i++)
		big[i] = (char)('a' + i % 26);
	big[sizeof(big) - 1] = '\0';
	ckpt_escape_mid(big, strlen(big), out, sizeof(out));
	CHECK(strlen(out) <= sizeof(out) - 1);
	CHECK(strncmp(out, "abcdefghijklmnop", 16) == 0);
	CHECK(strstr(out, "\xe2\x80\xa6"));
	/* The end shows: ..., 1198 % 26 = 2 ('c') last. */
	CHECK(out[strlen(out) - 1] == 'a' + (sizeof(big) - 2) % 26);
	/* A cut never splits an escape: ESC pieces around the middle. */
	memset(big, '\x1b', 100);
	big[100] = '\0';
	ckpt_escape_mid(big, 100, out, sizeof(out));
	CHECK(strncmp(out, "\\x1b\\x1b\\x1b\\x1b", 16) == 0);
	CHECK(strlen(out) >= 4 &&
	      strcmp(out + strlen(out) - 4, "\\x1b") == 0);
	CHECK(strstr(out, "\\x1b\xe2\x80\xa6\\x1b"));
}

/* A whole line: backslashes (escapes already made) kept, control bytes
 * escaped, a long line cut in the middle with its end kept; and
 * ckpt_errf() formats every core message that way. */
static void test_escape_line(void)
{
	char out[48], err[40], big[300];

	CHECK(!strcmp(ckpt_escape_line("k 'a\\x1b': no", 13, out,
				       sizeof(out)), "k 'a\\x1b': no"));
	CHECK(!strcmp(ckpt_escape_line("a\x1b[31m\r\nb", 9, out,
				       sizeof(out)), "a\\x1b[31m\\r\\nb"));
	memset(big, 'k', sizeof(big));
	memcpy(big + sizeof(big) - 9, ": reason", 9);
	ckpt_escape_line(big, strlen(big), out, sizeof(out));
	CHECK(strlen(out) < sizeof(out));
	CHECK(strstr(out, "\xe2\x80\xa6"));
	CHECK(!strcmp(out + strlen(out) - 8, ": reason"));
	CHECK(ckpt_errf(err, sizeof(err), -EIO, "%s/%s: key '%s': short",
			"dir", "f\x1b[31m", big) == -EIO);
	CHECK(!strcmp(err + strlen(err) - 7, ": short"));
	CHECK(!strchr(err, 0x1b));
	CHECK(!strncmp(err, "dir/f\\x1b[31m", 13));
}

static void test_tsv(void)
{
	char out[64];

	CHECK(ckpt_tsv_escape("a\tb.c\nd\r\\e", out, sizeof(out)) == 14);
	CHECK(!strcmp(out, "a\\tb.c\\nd\\r\\\\e"));
	CHECK(ckpt_tsv_escape("plain/x", out, sizeof(out)) == 7 &&
	      !strcmp(out, "plain/x"));
	/* as snprintf: the length needed, out cut and terminated */
	CHECK(ckpt_tsv_escape("a\tb", out, 3) == 4 && !strcmp(out, "a"));
	CHECK(ckpt_tsv_escape("a\tb", NULL, 0) == 4);
	CHECK(ckpt_tsv_escape("ab\tc", out, 4) == 5 && !strcmp(out, "ab"));
	CHECK(ckpt_tsv_escape("a\tb", out, 5) == 4 && !strcmp(out, "a\\tb"));
}

int main(void)
{
	TEST(test_utf8);
	TEST(test_escape_msg);
	TEST(test_escape_mid);
	TEST(test_escape_line);
	TEST(test_tsv);
	return TEST_REPORT();
}
