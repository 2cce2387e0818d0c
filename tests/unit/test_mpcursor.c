/* SPDX-License-Identifier: MIT */
/* Unit tests of the bounds-checked msgpack cursor (core/mpcursor.c). */
#include <errno.h>

#include "common/mpcursor.h"
#include "testhelp.h"

#define CUR(arr) { (arr), (arr) + sizeof(arr) }

static void test_scalars(void)
{
	static const uint8_t b[] = { 0x05, 0xcc, 0xff, 0xcf, 1, 2, 3, 4, 5, 6,
				     7, 8, 0xff, 0xd0, 0x80, 0xa3, 'a', 'b',
				     'c', 0xc3, 0xc0 };
	struct mp_cursor c = CUR(b);
	uint64_t u;
	int64_t s;
	const char *str;
	uint32_t len;
	bool bo;

	CHECK(mp_read_uint(&c, &u) == 0 && u == 5);
	CHECK(mp_read_uint(&c, &u) == 0 && u == 255);
	CHECK(mp_read_uint(&c, &u) == 0 && u == 0x0102030405060708ull);
	CHECK(mp_read_uint(&c, &u) == -ERANGE);	/* -1 */
	CHECK(mp_read_int(&c, &s) == 0 && s == -1);
	CHECK(mp_read_int(&c, &s) == 0 && s == -128);
	CHECK(mp_read_uint(&c, &u) == -EPROTO);	/* a string */
	CHECK(mp_read_str(&c, &str, &len) == 0 && len == 3 && str[2] == 'c');
	CHECK(mp_read_bool(&c, &bo) == 0 && bo);
	CHECK(mp_take_nil(&c));
	CHECK(mp_left(&c) == 0);
	CHECK(mp_read_uint(&c, &u) == -EBADMSG);
}

/* mp_read_uint() at the edges of the positive fixints: 0 and 0x7f read,
 * a fixmap head (0x80) is not an integer, a negative fixint is out of
 * range and left unread. */
static void test_uint_edges(void)
{
	static const uint8_t b[] = { 0x00, 0x7f, 0x80, 0xe0 };
	struct mp_cursor c = CUR(b);
	uint64_t u = 1;
	uint32_t n;
	int64_t s;

	CHECK(mp_read_uint(&c, &u) == 0 && u == 0);
	CHECK(mp_read_uint(&c, &u) == 0 && u == 0x7f);
	CHECK(mp_read_uint(&c, &u) == -EPROTO);
	CHECK(mp_read_map(&c, &n) == 0 && n == 0);
	CHECK(mp_read_uint(&c, &u) == -ERANGE);
	CHECK(mp_read_int(&c, &s) == 0 && s == -32);
	CHECK(mp_left(&c) == 0);
}

static void test_counts_bounded_by_bytes(void)
{
	/* array32 of 2^32-1 elements with 3 bytes after it */
	static const uint8_t a[] = { 0xdd, 0xff, 0xff, 0xff, 0xff, 1, 2, 3 };
	static const uint8_t m[] = { 0xdf, 0x80, 0, 0, 0, 1, 2 };
	static const uint8_t s[] = { 0xdb, 0xff, 0xff, 0xff, 0xf0, 'x' };
	static const uint8_t ok[] = { 0x93, 1, 2, 3 };
	struct mp_cursor c1 = CUR(a), c2 = CUR(m), c3 = CUR(s), c4 = CUR(ok);
	const char *str;
	uint32_t n;

	CHECK(mp_read_array(&c1, &n) == -EBADMSG);
	CHECK(mp_skip(&c1) == -EBADMSG);
	CHECK(mp_read_map(&c2, &n) == -EBADMSG);
	CHECK(mp_read_str(&c3, &str, &n) == -EBADMSG);
	CHECK(mp_read_array(&c4, &n) == 0 && n == 3);
}

static void test_skip_nested_and_truncated(void)
{
	/* {"a": [1, {"b": nil}], "c": bin8(2)} */
	static const uint8_t b[] = { 0x82, 0xa1, 'a', 0x92, 0x01, 0x81, 0xa1,
				     'b', 0xc0, 0xa1, 'c', 0xc4, 0x02, 9, 9 };
	struct mp_cursor c = CUR(b);
	size_t cut;

	CHECK(mp_skip(&c) == 0 && mp_left(&c) == 0);
	for (cut = 0; cut < sizeof(b); cut++) {
		struct mp_cursor t = { b, b + cut };

		CHECK(mp_skip(&t) == -EBADMSG);
	}
}

static void test_deep_nesting_no_recursion(void)
{
	static uint8_t deep[200001];
	struct mp_cursor c = { deep, deep + sizeof(deep) };
	size_t i;

	for (i = 0; i + 1 < sizeof(deep); i++)
		deep[i] = 0x91;	/* [[[[...]]]] */
	deep[sizeof(deep) - 1] = 0xc0;
	CHECK(mp_skip(&c) == 0);
	c.p = deep;
	c.end = deep + sizeof(deep) - 1;
	CHECK(mp_skip(&c) == -EBADMSG);
}

static void test_bin(void)
{
	/* bin8(2), bin16(1), a string (not bin), bin8 claiming 5 of 1 */
	static const uint8_t b[] = { 0xc4, 0x02, 7, 8, 0xc5, 0x00, 0x01, 9,
				     0xa1, 'x' };
	static const uint8_t cut[] = { 0xc4, 0x05, 1 };
	struct mp_cursor c = CUR(b), t = CUR(cut);
	const uint8_t *p;
	uint32_t n;

	CHECK(mp_read_bin(&c, &p, &n) == 0 && n == 2 && p[1] == 8);
	CHECK(mp_read_bin(&c, &p, &n) == 0 && n == 1 && p[0] == 9);
	CHECK(mp_read_bin(&c, &p, &n) == -EPROTO && mp_left(&c) == 2);
	CHECK(mp_read_bin(&t, &p, &n) == -EBADMSG && mp_left(&t) == 3);
}

int main(void)
{
	TEST(test_scalars);
	TEST(test_uint_edges);
	TEST(test_counts_bounded_by_bytes);
	TEST(test_skip_nested_and_truncated);
	TEST(test_deep_nesting_no_recursion);
	TEST(test_bin);
	return TEST_REPORT();
}
