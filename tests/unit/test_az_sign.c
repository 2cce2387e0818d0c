/* SPDX-License-Identifier: MIT */
/*
 * Azure signing (core/io/az_sign.c): SHA-256 and HMAC-SHA256 against the
 * FIPS 180-2 and RFC 4231 vectors, base64 both ways, HTTP dates, and the
 * Shared Key header against signatures computed by tests/azure/azblob.py
 * (Python's hmac, written from Azure's rules, not from the C code).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "io/az_sign.h"
#include "testhelp.h"

/* Azurite's well-known development key (public). */
#define DEV_KEY "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
#define DATE "Sun, 06 Dec 2026 02:18:19 GMT"

static void hex(const uint8_t *p, size_t n, char *out)
{
	static const char d[] = "0123456789abcdef";
	size_t i;

	for (i = 0; i < n; i++) {
		out[2 * i] = d[p[i] >> 4];
		out[2 * i + 1] = d[p[i] & 15];
	}
	out[2 * n] = '\0';
}

static void test_sha256(void)
{
	uint8_t h[32];
	char x[65], *big;

	ckpt_az_sha256("abc", 3, h);
	hex(h, 32, x);
	CHECK(!strcmp(x, "ba7816bf8f01cfea414140de5dae2223"
			 "b00361a396177a9cb410ff61f20015ad"));
	ckpt_az_sha256("", 0, h);
	hex(h, 32, x);
	CHECK(!strcmp(x, "e3b0c44298fc1c149afbf4c8996fb924"
			 "27ae41e4649b934ca495991b7852b855"));
	/* two blocks, the length in the second */
	ckpt_az_sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
		       56, h);
	hex(h, 32, x);
	CHECK(!strcmp(x, "248d6a61d20638b8e5c026930c3e6039"
			 "a33ce45964ff2167f6ecedd419db06c1"));
	big = malloc(1000000);
	CHECK(big != NULL);
	if (!big)
		return;
	memset(big, 'a', 1000000);
	ckpt_az_sha256(big, 1000000, h);
	free(big);
	hex(h, 32, x);
	CHECK(!strcmp(x, "cdc76e5c9914fb9281a1c7e284d73e67"
			 "f1809a48a497200e046d39ccc7112cd0"));
}

static void test_hmac(void)
{
	uint8_t key[131], mac[32];
	char x[65];

	/* RFC 4231 case 2 */
	ckpt_az_hmac_sha256((const uint8_t *)"Jefe", 4,
			    "what do ya want for nothing?", 28, mac);
	hex(mac, 32, x);
	CHECK(!strcmp(x, "5bdcc146bf60754e6a042426089575c7"
			 "5a003f089d2739839dec58b964ec3843"));
	/* case 6: a key longer than the block is hashed first */
	memset(key, 0xaa, sizeof(key));
	ckpt_az_hmac_sha256(key, sizeof(key),
			    "Test Using Larger Than Block-Size Key - Hash Key First",
			    54, mac);
	hex(mac, 32, x);
	CHECK(!strcmp(x, "60e431591ee0b67f0d8a26aacbf5b77f"
			 "8e0bc6213728c5140546040f0ee37f54"));
}

static void test_base64(void)
{
	uint8_t out[8];
	char enc[16];

	ckpt_az_b64_encode((const uint8_t *)"f", 1, enc);
	CHECK(!strcmp(enc, "Zg=="));
	ckpt_az_b64_encode((const uint8_t *)"fo", 2, enc);
	CHECK(!strcmp(enc, "Zm8="));
	ckpt_az_b64_encode((const uint8_t *)"foobar", 6, enc);
	CHECK(!strcmp(enc, "Zm9vYmFy"));
	CHECK(ckpt_az_b64_decode("Zm9vYmE=", out, sizeof(out)) == 5);
	CHECK(!memcmp(out, "fooba", 5));
	CHECK(ckpt_az_b64_decode("Zg==", out, sizeof(out)) == 1);
	CHECK(ckpt_az_b64_decode("Zg=", out, sizeof(out)) == -1);
	CHECK(ckpt_az_b64_decode("Z=g=", out, sizeof(out)) == -1);
	CHECK(ckpt_az_b64_decode("Zm9v YmE", out, sizeof(out)) == -1);
	CHECK(ckpt_az_b64_decode("Zm9vYmFyYmF6", out, 8) == -1);  /* 9 */
	CHECK(ckpt_az_b64_decode("", out, sizeof(out)) == 0);
}

static void test_date(void)
{
	char d[CKPT_AZ_DATE_LEN];

	ckpt_az_http_date(1796523499, d);
	CHECK(!strcmp(d, DATE));
	ckpt_az_http_date(0, d);
	CHECK(!strcmp(d, "Thu, 01 Jan 1970 00:00:00 GMT"));
}

static void test_sharedkey(void)
{
	uint8_t key[CKPT_AZ_KEY_MAX];
	long kl = ckpt_az_b64_decode(DEV_KEY, key, sizeof(key));
	char *line = NULL;

	CHECK(kl == 64);
	if (kl != 64)
		return;
	/* a ranged GET with If-Match, path style (the account twice) */
	CHECK(ckpt_az_sharedkey("devstoreaccount1", key, (size_t)kl, "GET",
				"http://127.0.0.1:10000/devstoreaccount1/ckpt/run/__0_0.distcp",
				DATE, "\"0x8DC\"", "bytes=0-99", &line) == 0);
	CHECK(line && !strcmp(line, "Authorization: SharedKey devstoreaccount1:"
			      "aYW9MQwdp/bWpOSqxAFJTXbpeYqdm7thDAoX+qmeQ+o="));
	free(line);
	/* a listing: parameters sorted, names lower-cased, values decoded */
	CHECK(ckpt_az_sharedkey("acct", key, (size_t)kl, "GET",
				"https://acct.blob.core.windows.net/ckpt?restype=container&comp=list&delimiter=%2F&prefix=run%2F&marker=2%213%21abc&maxresults=1",
				DATE, NULL, NULL, &line) == 0);
	CHECK(line && !strcmp(line, "Authorization: SharedKey acct:"
			      "ZDstGNXeVmyX1kRUFfuflQvqd5Wo4iVkbbwpu4fxoy0="));
	free(line);
	CHECK(ckpt_az_sharedkey("devstoreaccount1", key, (size_t)kl, "HEAD",
				"http://127.0.0.1:10000/devstoreaccount1/ckpt/run/__0_0.distcp",
				DATE, NULL, NULL, &line) == 0);
	CHECK(line && !strcmp(line, "Authorization: SharedKey devstoreaccount1:"
			      "r/CllpRh6X1pVbMOjEa2HNmDUxYxlhLtILEcqiVfVQU="));
	free(line);
	/* no path, a bad escape */
	CHECK(ckpt_az_sharedkey("a", key, 1, "GET", "http://h", DATE, NULL,
				NULL, &line) == -EINVAL && !line);
	CHECK(ckpt_az_sharedkey("a", key, 1, "GET", "http://h/c?x=%zz", DATE,
				NULL, NULL, &line) == -EINVAL && !line);
}

int main(void)
{
	TEST(test_sha256);
	TEST(test_hmac);
	TEST(test_base64);
	TEST(test_date);
	TEST(test_sharedkey);
	return TEST_REPORT();
}
