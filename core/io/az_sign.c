/* SPDX-License-Identifier: MIT */
/* Azure Shared Key signing, SHA-256, HMAC and base64: see az_sign.h. */
#include "io/az_sign.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/s3_url.h"

/* SHA-256 (FIPS 180-4). */
struct sha256 {
	uint32_t h[8];
	uint8_t buf[64];
	size_t nbuf;
	uint64_t total;
};

static const uint32_t K[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b,
	0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01,
	0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7,
	0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc,
	0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152,
	0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
	0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
	0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
	0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
	0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08,
	0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f,
	0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
	0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t ror(uint32_t x, unsigned n)
{
	return (x >> n) | (x << (32 - n));
}

static void sha_block(struct sha256 *c, const uint8_t *p)
{
	uint32_t w[64], a, b, d, e, f, g, h, cc, t1, t2;
	unsigned i;

	for (i = 0; i < 16; i++)
		w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
		       (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
	for (i = 16; i < 64; i++) {
		uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^
			      (w[i - 15] >> 3);
		uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^
			      (w[i - 2] >> 10);

		w[i] = w[i - 16] + s0 + w[i - 7] + s1;
	}
	a = c->h[0]; b = c->h[1]; cc = c->h[2]; d = c->h[3];
	e = c->h[4]; f = c->h[5]; g = c->h[6]; h = c->h[7];
	for (i = 0; i < 64; i++) {
		t1 = h + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) +
		     ((e & f) ^ (~e & g)) + K[i] + w[i];
		t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) +
		     ((a & b) ^ (a & cc) ^ (b & cc));
		h = g; g = f; f = e; e = d + t1;
		d = cc; cc = b; b = a; a = t1 + t2;
	}
	c->h[0] += a; c->h[1] += b; c->h[2] += cc; c->h[3] += d;
	c->h[4] += e; c->h[5] += f; c->h[6] += g; c->h[7] += h;
}

static void sha_init(struct sha256 *c)
{
	static const uint32_t iv[8] = {
		0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
		0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
	};

	memcpy(c->h, iv, sizeof(iv));
	c->nbuf = 0;
	c->total = 0;
}

static void sha_update(struct sha256 *c, const void *msg, size_t len)
{
	const uint8_t *p = msg;

	c->total += len;
	while (len) {
		size_t n = 64 - c->nbuf < len ? 64 - c->nbuf : len;

		memcpy(c->buf + c->nbuf, p, n);
		c->nbuf += n;
		p += n;
		len -= n;
		if (c->nbuf == 64) {
			sha_block(c, c->buf);
			c->nbuf = 0;
		}
	}
}

static void sha_final(struct sha256 *c, uint8_t out[32])
{
	uint64_t bits = c->total * 8;
	uint8_t pad = 0x80, zero = 0, len[8];
	unsigned i;

	sha_update(c, &pad, 1);
	while (c->nbuf != 56)
		sha_update(c, &zero, 1);
	for (i = 0; i < 8; i++)
		len[i] = (uint8_t)(bits >> (56 - 8 * i));
	sha_update(c, len, 8);
	for (i = 0; i < 8; i++) {
		out[4 * i] = (uint8_t)(c->h[i] >> 24);
		out[4 * i + 1] = (uint8_t)(c->h[i] >> 16);
		out[4 * i + 2] = (uint8_t)(c->h[i] >> 8);
		out[4 * i + 3] = (uint8_t)c->h[i];
	}
}

void ckpt_az_sha256(const void *msg, size_t len, uint8_t out[32])
{
	struct sha256 c;

	sha_init(&c);
	sha_update(&c, msg, len);
	sha_final(&c, out);
}

void ckpt_az_hmac_sha256(const uint8_t *key, size_t klen, const void *msg,
			 size_t mlen, uint8_t out[32])
{
	uint8_t k[64] = { 0 }, pad[64], inner[32];
	struct sha256 c;
	unsigned i;

	if (klen > 64)
		ckpt_az_sha256(key, klen, k);
	else
		memcpy(k, key, klen);
	for (i = 0; i < 64; i++)
		pad[i] = k[i] ^ 0x36;
	sha_init(&c);
	sha_update(&c, pad, 64);
	sha_update(&c, msg, mlen);
	sha_final(&c, inner);
	for (i = 0; i < 64; i++)
		pad[i] = k[i] ^ 0x5c;
	sha_init(&c);
	sha_update(&c, pad, 64);
	sha_update(&c, inner, 32);
	sha_final(&c, out);
	memset(k, 0, sizeof(k));
	memset(pad, 0, sizeof(pad));
}

static const char B64[] =
	"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

void ckpt_az_b64_encode(const uint8_t *in, size_t n, char *out)
{
	size_t i, o = 0;

	for (i = 0; i + 2 < n; i += 3) {
		uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 |
			     in[i + 2];

		out[o++] = B64[v >> 18];
		out[o++] = B64[(v >> 12) & 63];
		out[o++] = B64[(v >> 6) & 63];
		out[o++] = B64[v & 63];
	}
	if (i < n) {
		uint32_t v = (uint32_t)in[i] << 16 |
			     (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0);

		out[o++] = B64[v >> 18];
		out[o++] = B64[(v >> 12) & 63];
		out[o++] = i + 1 < n ? B64[(v >> 6) & 63] : '=';
		out[o++] = '=';
	}
	out[o] = '\0';
}

long ckpt_az_b64_decode(const char *s, uint8_t *out, size_t cap)
{
	size_t len = strlen(s), i, o = 0;
	uint32_t v = 0;
	unsigned bits = 0, pad = 0;

	if (len % 4)
		return -1;
	for (i = 0; i < len; i++) {
		const char *p;

		if (s[i] == '=') {
			if (i + 2 < len || ++pad > 2)
				return -1;
			continue;
		}
		if (pad)
			return -1;
		p = strchr(B64, s[i]);
		if (!s[i] || !p)
			return -1;
		v = v << 6 | (uint32_t)(p - B64);
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			if (o == cap)
				return -1;
			out[o++] = (uint8_t)(v >> bits);
		}
	}
	return (long)o;
}

void ckpt_az_http_date(time_t t, char out[CKPT_AZ_DATE_LEN])
{
	static const char days[7][4] = {
		"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat",
	};
	static const char months[12][4] = {
		"Jan", "Feb", "Mar", "Apr", "May", "Jun",
		"Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
	};
	struct tm tm;

	gmtime_r(&t, &tm);
	snprintf(out, CKPT_AZ_DATE_LEN, "%s, %02d %s %04d %02d:%02d:%02d GMT",
		 days[tm.tm_wday % 7], tm.tm_mday, months[tm.tm_mon % 12],
		 tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
}

/* A growing string; ok false once out of memory. */
struct sbuf {
	char *p;
	size_t len, cap;
	bool ok;
};

static void sb_add(struct sbuf *b, const char *s, size_t n)
{
	if (!b->ok)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t nc = (b->len + n + 1) * 2;
		char *np = realloc(b->p, nc);

		if (!np) {
			b->ok = false;
			return;
		}
		b->p = np;
		b->cap = nc;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void sb_str(struct sbuf *b, const char *s)
{
	sb_add(b, s, strlen(s));
}

struct qparam {
	char *name;	/* lower-cased */
	char *value;	/* decoded */
};

static int cmp_param(const void *a, const void *b)
{
	return strcmp(((const struct qparam *)a)->name,
		      ((const struct qparam *)b)->name);
}

/* Append "\nname:value" for each parameter of query q, sorted. */
static int add_query(struct sbuf *b, const char *q)
{
	struct qparam *v = NULL;
	size_t n = 0, i, cnt = 1;
	const char *p;
	int rc = 0;

	for (p = q; *p; p++)
		cnt += *p == '&';
	v = calloc(cnt, sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (p = q; *p && rc == 0;) {
		const char *amp = strchr(p, '&'), *eq;
		size_t len = amp ? (size_t)(amp - p) : strlen(p);
		char *raw;

		eq = memchr(p, '=', len);
		raw = strndup(eq ? eq + 1 : p + len,
			      eq ? len - (size_t)(eq + 1 - p) : 0);
		v[n].name = strndup(p, eq ? (size_t)(eq - p) : len);
		v[n].value = raw ? malloc(strlen(raw) + 1) : NULL;
		if (!raw || !v[n].name || !v[n].value)
			rc = -ENOMEM;
		else if (ckpt_s3_pct_decode(raw, v[n].value,
					    strlen(raw) + 1) < 0)
			rc = -EINVAL;
		free(raw);
		if (v[n].name)
			for (raw = v[n].name; *raw; raw++)
				if (*raw >= 'A' && *raw <= 'Z')
					*raw = (char)(*raw - 'A' + 'a');
		n++;
		p += len + (amp != NULL);
	}
	if (rc == 0) {
		qsort(v, n, sizeof(*v), cmp_param);
		for (i = 0; i < n; i++) {
			sb_str(b, "\n");
			sb_str(b, v[i].name);
			sb_str(b, ":");
			sb_str(b, v[i].value);
		}
	}
	for (i = 0; i < n; i++) {
		free(v[i].name);
		free(v[i].value);
	}
	free(v);
	return rc;
}

int ckpt_az_sharedkey(const char *account, const uint8_t *key, size_t klen,
		      const char *method, const char *url, const char *date,
		      const char *if_match, const char *range, char **line)
{
	struct sbuf b = { NULL, 0, 0, true };
	const char *host, *path, *qm;
	uint8_t mac[32];
	char sig[48];
	int rc;

	*line = NULL;
	host = strstr(url, "://");
	path = host ? strchr(host + 3, '/') : NULL;
	if (!path)
		return -EINVAL;
	qm = strchr(path, '?');
	/* VERB, Content-Encoding, -Language, -Length, -MD5, -Type, Date,
	 * If-Modified-Since, If-Match, If-None-Match, If-Unmodified-Since,
	 * Range: a GET or HEAD has only the verb and If-Match of them. */
	sb_str(&b, method);
	sb_str(&b, "\n\n\n\n\n\n\n\n");
	sb_str(&b, if_match ? if_match : "");
	sb_str(&b, "\n\n\n\n");
	/* the x-ms- headers, sorted */
	sb_str(&b, "x-ms-date:");
	sb_str(&b, date);
	if (range) {
		sb_str(&b, "\nx-ms-range:");
		sb_str(&b, range);
	}
	sb_str(&b, "\nx-ms-version:" CKPT_AZ_API_VERSION "\n/");
	sb_str(&b, account);
	sb_add(&b, path, qm ? (size_t)(qm - path) : strlen(path));
	rc = qm ? add_query(&b, qm + 1) : 0;
	if (rc == 0 && !b.ok)
		rc = -ENOMEM;
	if (rc == 0) {
		ckpt_az_hmac_sha256(key, klen, b.p, b.len, mac);
		ckpt_az_b64_encode(mac, sizeof(mac), sig);
		if (asprintf(line, "Authorization: SharedKey %s:%s", account,
			     sig) < 0) {
			*line = NULL;
			rc = -ENOMEM;
		}
	}
	free(b.p);
	return rc;
}
