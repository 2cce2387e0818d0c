/* SPDX-License-Identifier: MIT */
/* A small strict JSON parser: see json.h. */
#include "common/json.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errbuf.h"
#include "common/escape.h"
#include "common/grow.h"

struct jp {
	const char *p, *start, *end;
	const char *name;
	struct ckpt_json_doc *doc;
	size_t cap;
	char *err;
	size_t errlen;
};

static int fail(struct jp *j, const char *why)
{
	return ckpt_errf(j->err, j->errlen, -EINVAL, "%s: byte %zu: %s",
			 j->name, (size_t)(j->p - j->start), why);
}

static void ws(struct jp *j)
{
	while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' ||
				 *j->p == '\n' || *j->p == '\r'))
		j->p++;
}

/* A new node of type t at the current offset: its index, or -1. */
static long node(struct jp *j, int t)
{
	struct ckpt_json *n;

	if (j->doc->nnodes == UINT32_MAX ||
	    ckpt_grow((void **)&j->doc->nodes, &j->cap, j->doc->nnodes + 1,
		      sizeof(*n)))
		return -1;
	n = &j->doc->nodes[j->doc->nnodes];
	memset(n, 0, sizeof(*n));
	n->type = (uint8_t)t;
	n->at = (uint32_t)(j->p - j->start);
	return j->doc->nnodes++;
}

static int hex4(const char *p)
{
	int i, v = 0;

	for (i = 0; i < 4; i++) {
		char c = p[i];

		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= c - '0';
		else if (c >= 'a' && c <= 'f')
			v |= c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			v |= c - 'A' + 10;
		else
			return -1;
	}
	return v;
}

/* A string that is refused: its (escaped) start in the message. */
static long bad_string(struct jp *j, const char *s, const char *why)
{
	char shown[96];
	size_t len = (size_t)(j->end - s);
	const char *q = memchr(s, '"', len);

	ckpt_escape_msg(s, q ? (size_t)(q - s) : len, true, shown,
			sizeof(shown));
	return ckpt_errf(j->err, j->errlen, -EINVAL,
			 "%s: byte %zu: string \"%s\" %s", j->name,
			 (size_t)(j->p - j->start), shown, why);
}

static bool is_high_surrogate(int u)
{
	return u >= 0xD800 && u <= 0xDBFF;
}

static bool is_low_surrogate(int u)
{
	return u >= 0xDC00 && u <= 0xDFFF;
}

/*
 * A string: every byte valid UTF-8, every escape one of RFC 8259's, and
 * every \u escape a character: a high surrogate must be followed by a
 * low one (the pair is one character above U+FFFF), and neither may
 * stand alone.
 */
static long string(struct jp *j)
{
	const char *s = ++j->p;
	long n;

	while (j->p < j->end && *j->p != '"') {
		unsigned char c = (unsigned char)*j->p;

		if (c < 0x20)
			return fail(j, "control character in a string");
		if (c >= 0x80) {
			size_t k = ckpt_utf8_seq(j->p, (size_t)(j->end - j->p));

			if (!k)
				return bad_string(j, s, "is not valid UTF-8");
			j->p += k;
			continue;
		}
		if (c == '\\') {
			if (j->end - j->p < 2)
				break;
			c = (unsigned char)j->p[1];
			if (c == 'u') {
				int u;

				if (j->end - j->p < 6 || (u = hex4(j->p + 2)) < 0)
					return fail(j, "bad \\u escape");
				if (is_low_surrogate(u) ||
				    (is_high_surrogate(u) &&
				     (j->end - j->p < 12 || j->p[6] != '\\' ||
				      j->p[7] != 'u' ||
				      !is_low_surrogate(hex4(j->p + 8)))))
					return bad_string(j, s, "holds a lone surrogate");
				j->p += is_high_surrogate(u) ? 12 : 6;
				continue;
			}
			if (!strchr("\"\\/bfnrt", c) || !c)
				return fail(j, "bad escape in a string");
			j->p += 2;
			continue;
		}
		j->p++;
	}
	if (j->p >= j->end)
		return fail(j, "unterminated string");
	if ((size_t)(j->p - s) > UINT32_MAX)
		return fail(j, "string too long");
	n = node(j, CKPT_JSON_STR);
	if (n < 0)
		return ckpt_errf(j->err, j->errlen, -ENOMEM, "%s: out of memory",
				 j->name);
	j->doc->nodes[n].s = s;
	j->doc->nodes[n].len = (uint32_t)(j->p - s);
	j->doc->nodes[n].at = (uint32_t)(s - 1 - j->start);
	j->p++;
	return n;
}

static long number(struct jp *j)
{
	bool neg = *j->p == '-';
	uint64_t v = 0;
	long n;

	if (neg)
		j->p++;
	if (j->p >= j->end || *j->p < '0' || *j->p > '9')
		return fail(j, "bad number");
	if (*j->p == '0' && j->p + 1 < j->end && j->p[1] >= '0' &&
	    j->p[1] <= '9')
		return fail(j, "number with a leading zero");
	while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
		if (__builtin_mul_overflow(v, 10, &v) ||
		    __builtin_add_overflow(v, (uint64_t)(*j->p - '0'), &v))
			return fail(j, "integer does not fit 64 bits");
		j->p++;
	}
	if (j->p < j->end && (*j->p == '.' || *j->p == 'e' || *j->p == 'E'))
		return fail(j, "only integers are accepted here");
	n = node(j, neg ? CKPT_JSON_NEG : CKPT_JSON_INT);
	if (n < 0)
		return ckpt_errf(j->err, j->errlen, -ENOMEM, "%s: out of memory",
				 j->name);
	j->doc->nodes[n].v = v;
	return n;
}

static long value(struct jp *j, unsigned depth);

/* Link child c after prev (or as first) of parent p. */
static void link_child(struct jp *j, long p, long *prev, long c)
{
	if (*prev < 0)
		j->doc->nodes[p].first = (uint32_t)c;
	else
		j->doc->nodes[*prev].next = (uint32_t)c;
	*prev = c;
	j->doc->nodes[p].n++;
}

static long container(struct jp *j, unsigned depth, bool obj)
{
	char close = obj ? '}' : ']';
	long n, prev = -1, c;

	if (depth >= CKPT_JSON_MAX_DEPTH)
		return fail(j, "nested too deep");
	n = node(j, obj ? CKPT_JSON_OBJ : CKPT_JSON_ARR);
	if (n < 0)
		return ckpt_errf(j->err, j->errlen, -ENOMEM, "%s: out of memory",
				 j->name);
	j->p++;
	ws(j);
	if (j->p < j->end && *j->p == close) {
		j->p++;
		return n;
	}
	for (;;) {
		ws(j);
		if (obj) {
			if (j->p >= j->end || *j->p != '"')
				return fail(j, "expected a string key");
			c = string(j);
			if (c < 0)
				return c;
			link_child(j, n, &prev, c);
			ws(j);
			if (j->p >= j->end || *j->p != ':')
				return fail(j, "expected ':'");
			j->p++;
		}
		c = value(j, depth + 1);
		if (c < 0)
			return c;
		link_child(j, n, &prev, c);
		ws(j);
		if (j->p < j->end && *j->p == ',') {
			j->p++;
			continue;
		}
		if (j->p < j->end && *j->p == close) {
			j->p++;
			return n;
		}
		return fail(j, obj ? "expected ',' or '}'" : "expected ',' or ']'");
	}
}

static long literal(struct jp *j, const char *word, int type, bool b)
{
	size_t k = strlen(word);
	long n;

	if ((size_t)(j->end - j->p) < k || memcmp(j->p, word, k))
		return fail(j, "unexpected character");
	n = node(j, type);
	if (n < 0)
		return ckpt_errf(j->err, j->errlen, -ENOMEM, "%s: out of memory",
				 j->name);
	j->doc->nodes[n].b = b;
	j->p += k;
	return n;
}

static long value(struct jp *j, unsigned depth)
{
	ws(j);
	if (j->p >= j->end)
		return fail(j, "unexpected end");
	switch (*j->p) {
	case '{':
		return container(j, depth, true);
	case '[':
		return container(j, depth, false);
	case '"':
		return string(j);
	case 't':
		return literal(j, "true", CKPT_JSON_BOOL, true);
	case 'f':
		return literal(j, "false", CKPT_JSON_BOOL, false);
	case 'n':
		return literal(j, "null", CKPT_JSON_NULL, false);
	default:
		if (*j->p == '-' || (*j->p >= '0' && *j->p <= '9'))
			return number(j);
		return fail(j, "unexpected character");
	}
}

int ckpt_json_parse(const char *text, size_t len, const char *name,
		    struct ckpt_json_doc *doc, char *err, size_t errlen)
{
	struct jp j = { text, text, text + len, name, doc, 0, err, errlen };
	long root;

	memset(doc, 0, sizeof(*doc));
	if (len > UINT32_MAX)
		return ckpt_errf(err, errlen, -EINVAL, "%s: too long", name);
	root = value(&j, 0);
	if (root >= 0) {
		ws(&j);
		if (j.p != j.end)
			root = fail(&j, "trailing data after the value");
	}
	if (root < 0) {
		ckpt_json_free(doc);
		return (int)root;
	}
	return 0;
}

void ckpt_json_free(struct ckpt_json_doc *doc)
{
	free(doc->nodes);
	doc->nodes = NULL;
	doc->nnodes = 0;
}

const struct ckpt_json *ckpt_json_at(const struct ckpt_json_doc *doc,
				     const struct ckpt_json *a, uint32_t i)
{
	uint32_t k, c;

	if (!a || (a->type != CKPT_JSON_ARR && a->type != CKPT_JSON_OBJ) ||
	    i >= a->n)
		return NULL;
	for (k = 0, c = a->first; k < i; k++)
		c = doc->nodes[c].next;
	return &doc->nodes[c];
}

long ckpt_json_str(const struct ckpt_json *s, char *out, size_t cap)
{
	size_t o = 0;
	uint32_t i;

	if (!s || s->type != CKPT_JSON_STR)
		return -1;
	for (i = 0; i < s->len; i++) {
		unsigned c = (unsigned char)s->s[i];

		if (c == '\\') {
			c = (unsigned char)s->s[++i];
			switch (c) {
			case 'b': c = '\b'; break;
			case 'f': c = '\f'; break;
			case 'n': c = '\n'; break;
			case 'r': c = '\r'; break;
			case 't': c = '\t'; break;
			case 'u': {
				uint32_t u = (uint32_t)hex4(s->s + i + 1);

				i += 4;
				if (u == 0)
					return -1;
				if (is_high_surrogate((int)u)) {
					/* The parser saw the low half follow. */
					u = 0x10000 + ((u - 0xD800) << 10 |
						       ((uint32_t)hex4(s->s + i + 3) -
							0xDC00));
					i += 6;
				}
				if (u < 0x80) {
					c = u;
					break;
				}
				/* UTF-8: 2, 3 or 4 bytes, the last one below. */
				if (o + 4 >= cap)
					return -1;
				if (u < 0x800) {
					out[o++] = (char)(0xC0 | u >> 6);
				} else if (u < 0x10000) {
					out[o++] = (char)(0xE0 | u >> 12);
					out[o++] = (char)(0x80 | ((u >> 6) & 0x3F));
				} else {
					out[o++] = (char)(0xF0 | u >> 18);
					out[o++] = (char)(0x80 | ((u >> 12) & 0x3F));
					out[o++] = (char)(0x80 | ((u >> 6) & 0x3F));
				}
				c = 0x80 | (u & 0x3F);
				break;
			}
			default:
				break;	/* \" \\ \/ */
			}
		}
		if (o + 1 >= cap)
			return -1;
		out[o++] = (char)c;
	}
	out[o] = '\0';
	return (long)o;
}

const struct ckpt_json *ckpt_json_get(const struct ckpt_json_doc *doc,
				      const struct ckpt_json *o,
				      const char *key)
{
	char buf[1024];
	uint32_t k, c;

	if (!o || o->type != CKPT_JSON_OBJ)
		return NULL;
	for (k = 0, c = o->first; k + 1 < o->n; k += 2) {
		const struct ckpt_json *kn = &doc->nodes[c];
		uint32_t v = kn->next;

		if (ckpt_json_str(kn, buf, sizeof(buf)) >= 0 &&
		    strcmp(buf, key) == 0)
			return &doc->nodes[v];
		c = doc->nodes[v].next;
	}
	return NULL;
}

struct dup_key {
	const char *s;		/* decoded, in the pool */
	size_t len;
	const struct ckpt_json *node;
};

static int cmp_dup_key(const void *a, const void *b)
{
	const struct dup_key *x = a, *y = b;
	int c = memcmp(x->s, y->s, x->len < y->len ? x->len : y->len);

	if (c || x->len != y->len)
		return c ? c : x->len < y->len ? -1 : 1;
	return x->node->at < y->node->at ? -1 : x->node->at > y->node->at;
}

int ckpt_json_find_dup(const struct ckpt_json_doc *doc,
		       const struct ckpt_json *o, const struct ckpt_json **dup)
{
	struct dup_key *keys;
	size_t n, i, pool_len = 0, at = 0;
	uint32_t k, c;
	char *pool;

	*dup = NULL;
	if (!o || o->type != CKPT_JSON_OBJ || o->n < 4)
		return 0;
	n = o->n / 2;
	for (k = 0, c = o->first; k + 1 < o->n; k += 2) {
		pool_len += doc->nodes[c].len + 1;
		c = doc->nodes[doc->nodes[c].next].next;
	}
	keys = malloc(n * sizeof(*keys));
	pool = malloc(pool_len);
	if (!keys || !pool) {
		free(keys);
		free(pool);
		return -ENOMEM;
	}
	for (i = 0, c = o->first; i < n; i++) {
		const struct ckpt_json *kn = &doc->nodes[c];
		long len = ckpt_json_str(kn, pool + at, kn->len + 1);

		if (len < 0) {	/* holds \u0000: compared as written */
			memcpy(pool + at, kn->s, kn->len);
			len = kn->len;
		}
		keys[i] = (struct dup_key){ pool + at, (size_t)len, kn };
		at += kn->len + 1;
		c = doc->nodes[kn->next].next;
	}
	qsort(keys, n, sizeof(*keys), cmp_dup_key);
	for (i = 1; i < n && !*dup; i++)
		if (keys[i].len == keys[i - 1].len &&
		    !memcmp(keys[i].s, keys[i - 1].s, keys[i].len))
			*dup = keys[i].node;
	free(keys);
	free(pool);
	return *dup ? 1 : 0;
}
