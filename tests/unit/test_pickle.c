/* SPDX-License-Identifier: MIT */
/* The strict pickle machine: what it builds, and what it refuses. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/asan.h"
#include "torch/pickle.h"
#include "testhelp.h"

static const struct pk_global table[] = {
	{ "torch", "Size", 1, false },
	{ "torch.distributed.*", "Metadata", 2, false },
};

#define P(s) ((const uint8_t *)(s)), (sizeof(s) - 1)

static int load(const uint8_t *b, size_t n, struct pk_value **root,
		struct pk_arena **a, char *err)
{
	err[0] = '\0';
	return pk_load(b, n, table, 2, "t", root, a, err, 256);
}

static void test_values(void)
{
	struct pk_value *v;
	struct pk_arena *a;
	char err[256];

	/* {'a': (1, -2, 300, 2**40, True, None)} with a frame and a memo */
	CHECK(load(P("\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00"
		     "}\x94\x8c\x01" "a\x94(K\x01J\xfe\xff\xff\xffM\x2c\x01"
		     "\x8a\x06\x00\x00\x00\x00\x00\x01\x88Nt\x94s."),
		   &v, &a, err) == 0);
	if (!v)
		return;
	CHECK(v->type == PK_DICT && v->n == 2);
	const struct pk_value *t = pk_dict_get(v, "a");
	CHECK(t && t->type == PK_TUPLE && t->n == 6);
	if (t && t->n == 6) {
		CHECK(t->u.items[0]->u.i == 1);
		CHECK(t->u.items[1]->u.i == -2);
		CHECK(t->u.items[2]->u.i == 300);
		CHECK(t->u.items[3]->u.i == (int64_t)1 << 40);
		CHECK(t->u.items[4]->type == PK_BOOL && t->u.items[4]->u.i == 1);
		CHECK(t->u.items[5]->type == PK_NONE);
	}
	pk_free(a);
	/* LONG1 negative, BINGET of a memoized string, APPENDS */
	CHECK(load(P("\x80\x02]q\x00(\x8a\x02\x00\xff\x8c\x01xq\x01h\x01" "e."),
		   &v, &a, err) == 0);
	CHECK(v && v->type == PK_LIST && v->n == 3 &&
	      v->u.items[0]->u.i == -256 && pk_str_is(v->u.items[2], "x"));
	pk_free(a);
	/* torch.Size((2, 3)) via GLOBAL + REDUCE; a class by name anywhere
	 * under torch.distributed, NEWOBJ + BUILD */
	CHECK(load(P("\x80\x02" "ctorch\nSize\n" "K\x02K\x03\x86\x85R."), &v,
		   &a, err) == 0);
	CHECK(pk_is_call(v, 1) && v->u.call.args->n == 1);
	pk_free(a);
	CHECK(load(P("\x80\x04\x8c\x1etorch.distributed.checkpoint.x"
		     "\x8c\x08Metadata\x93)\x81}b."), &v, &a, err) == 0);
	CHECK(pk_is_call(v, 2) && v->u.call.state &&
	      v->u.call.state->type == PK_DICT);
	pk_free(a);
}

static void refused(const char *what, const uint8_t *b, size_t n,
		    const char *want)
{
	struct pk_value *v = (struct pk_value *)1;
	struct pk_arena *a = (struct pk_arena *)1;
	char err[256];
	int rc = load(b, n, &v, &a, err);

	if (rc == 0 || !strstr(err, want) || v || a)
		fprintf(stderr, "  %s: rc %d err '%s'\n", what, rc, err);
	CHECK(rc < 0 && strstr(err, want) && !v && !a);
}

static void test_refusals(void)
{
	refused("os.system", P("\x80\x02" "cposix\nsystem\n" "X\x02\x00\x00\x00lsR."),
		"names global 'posix.system', which is not allowed");
	refused("wrong module", P("\x80\x02" "cos\nSize\n."), "'os.Size'");
	refused("BINFLOAT", P("\x80\x04G\x3f\xf0\x00\x00\x00\x00\x00\x00."),
		"opcode BINFLOAT");
	refused("INST", P("\x80\x02(ios\nsystem\n."), "opcode INST");
	refused("memo", P("\x80\x04Nh\x03."), "memo index 3 is not set");
	refused("memo long", P("\x80\x04Nj\xff\xff\xff\xff."), "memo index 4294967295");
	refused("memo put", P("\x80\x02Nr\x00\x00\x00\x10."), "memo index out of range");
	refused("underflow", P("\x80\x02s."), "stack underflow");
	refused("past mark", P("\x80\x02N(\x85."), "stack underflow");
	refused("append non-list", P("\x80\x02NNa."), "APPEND to something not a list");
	refused("build non-object", P("\x80\x02N}b."), "BUILD of something not a new object");
	refused("call non-global", P("\x80\x02N)R."), "not an allowed global");
	refused("no stop", P("\x80\x02N"), "ends without STOP");
	refused("trailing", P("\x80\x02N.xx"), "2 bytes after the pickle's STOP");
	refused("string", P("\x80\x02X\xff\x00\x00\x00ab."), "string runs past the end");
	refused("frame", P("\x80\x04\x95\xff\x00\x00\x00\x00\x00\x00\x00N."), "frame runs past the end");
	refused("protocol", P("\x80\x09N."), "unsupported protocol");
	refused("two values", P("\x80\x02NN."), "stack not a single value at STOP");
	refused("long 9", P("\x80\x02\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01."),
		"integer wider than 64 bits");
	refused("odd dict", P("\x80\x02}(Nu."), "odd number of dict items");
}

/* A million nested lists: no C recursion, bounded memory. */
static void test_deep(void)
{
	size_t n = 1000000, i, len = 2 + n + (n - 1) + 1;
	uint8_t *b = malloc(len);
	struct pk_value *v;
	struct pk_arena *a;
	char err[256];

	b[0] = 0x80;
	b[1] = 2;
	for (i = 0; i < n; i++)
		b[2 + i] = ']';
	for (i = 0; i < n - 1; i++)
		b[2 + n + i] = 'a';
	b[len - 1] = '.';
	CHECK(load(b, len, &v, &a, err) == 0);
	CHECK(v && v->type == PK_LIST && v->n == 1);
	pk_free(a);
	free(b);
}

/* A record's data.pkl is a few hundred bytes: its arena must not cost a
 * fixed large block (1 MiB each, an mmap apiece under ASan: issue 31). */
static void test_arena_small(void)
{
	struct pk_value *v;
	struct pk_arena *a;
	char err[256];

	CHECK(load(P("\x80\x02](K\x01K\x02K\x03" "e."), &v, &a, err) == 0);
	CHECK(v && v->type == PK_LIST && v->n == 3);
	CHECK(pk_arena_bytes(a) > 0 && pk_arena_bytes(a) <= 8192);
	pk_free(a);
}

/* One list of 300,000 items: its item array (2.4 MB) outgrows the largest
 * block, and the blocks before it grow by doubling. */
static void test_arena_large(void)
{
	size_t n = 300000, i, len = 2 + 2 + 2 * n + 2;
	uint8_t *b = malloc(len), *p = b;
	struct pk_value *v;
	struct pk_arena *a;
	char err[256];
	bool same = true;

	*p++ = 0x80;
	*p++ = 2;
	*p++ = ']';
	*p++ = '(';
	for (i = 0; i < n; i++) {
		*p++ = 'K';
		*p++ = (uint8_t)(i & 0xff);
	}
	*p++ = 'e';
	*p++ = '.';
	CHECK(load(b, len, &v, &a, err) == 0);
	CHECK(v && v->type == PK_LIST && v->n == n);
	for (i = 0; v && i < v->n && i < n; i++)
		same = same && v->u.items[i]->type == PK_INT &&
		       v->u.items[i]->u.i == (int64_t)(i & 0xff);
	CHECK(same);
	pk_free(a);
	free(b);
}

/* A pk_global.dims callable compacts a tuple of ints no GET reads. */
static void test_dims(void)
{
	static const struct pk_global dt[] = { { "torch", "Size", 1, true } };
	struct pk_value *v;
	struct pk_arena *a;
	char err[256];
	const struct pk_value *x, *y;

	/* [Size((5000, 70000)), Size((3,)), Size(())] and a 3-tuple arg */
	CHECK(pk_load(P("\x80\x02](ctorch\nSize\nq\x00"
			"M\x88\x13J\x70\x11\x01\x00\x86\x85R"
			"h\x00K\x03\x85\x85R"
			"h\x00)\x85R"
			"h\x00K\x01K\x02\x86K\x03\x86\x85R" "e."),
		      dt, 1, "t", &v, &a, err, sizeof(err)) == 0);
	CHECK(v && v->type == PK_LIST && v->n == 4);
	if (v && v->n == 4) {
		x = v->u.items[0];
		CHECK(x->type == PK_DIMS && x->n == 2 &&
		      x->u.dims[0] == 5000 && x->u.dims[1] == 70000);
		x = v->u.items[1];
		CHECK(x->type == PK_DIMS && x->n == 1 && x->u.dims[0] == 3);
		/* Size(()): an empty tuple stays a call */
		CHECK(pk_is_call(v->u.items[2], 1));
		/* a tuple that is not all ints stays a call */
		x = v->u.items[3];
		CHECK(pk_is_call(x, 1) && x->u.call.args->n == 1);
	}
	pk_free(a);
	/* (Size(t), t) with t memoized and read: t stays a tuple of ints */
	CHECK(pk_load(P("\x80\x02" "ctorch\nSize\n" "K\x07K\x08\x86q\x01"
			"\x85R" "h\x01\x86."),
		      dt, 1, "t", &v, &a, err, sizeof(err)) == 0);
	CHECK(v && v->type == PK_TUPLE && v->n == 2);
	if (v && v->n == 2) {
		x = v->u.items[0];
		y = v->u.items[1];
		CHECK(pk_is_call(x, 1) && x->u.call.args->u.items[0] == y);
		CHECK(y->type == PK_TUPLE && y->n == 2 &&
		      y->u.items[0]->type == PK_INT && y->u.items[0]->u.i == 7 &&
		      y->u.items[1]->u.i == 8);
	}
	pk_free(a);
	/* Freed values are reused: a big int after a compaction is intact */
	CHECK(pk_load(P("\x80\x02" "ctorch\nSize\n" "J\x00\x00\x01\x00"
			"\x85\x85R" "J\x01\x00\x02\x00\x86."),
		      dt, 1, "t", &v, &a, err, sizeof(err)) == 0);
	CHECK(v && v->type == PK_TUPLE && v->n == 2 &&
	      v->u.items[0]->type == PK_DIMS &&
	      v->u.items[0]->u.dims[0] == 65536 &&
	      v->u.items[1]->type == PK_INT && v->u.items[1]->u.i == 131073);
	pk_free(a);
}

/* What a pk_stream saw. */
struct seen {
	unsigned batches;
	size_t pairs;
	int64_t keys, vals;	/* sums */
	bool shared_ok;		/* every value's string is "shared" */
	uint32_t dict;
};

static int count_pairs(void *ctx, unsigned role, uint32_t dict,
		       const struct pk_value *const *kv, size_t n)
{
	struct seen *s = ctx;
	size_t i;

	if (role != 0)
		return -EINVAL;
	s->batches++;
	s->dict = dict;
	for (i = 0; i < n; i++) {
		const struct pk_value *v = kv[2 * i + 1];

		s->pairs++;
		s->keys += kv[2 * i]->u.i;
		if (v->type != PK_TUPLE || v->n != 2) {
			s->shared_ok = false;
			continue;
		}
		s->vals += v->u.items[0]->u.i;
		s->shared_ok = s->shared_ok &&
			       pk_str_is(v->u.items[1], "shared");
	}
	return 0;
}

static void put_int(uint8_t **p, uint32_t v)
{
	*(*p)++ = 'J';
	memcpy(*p, &v, 4);	/* little-endian machines only */
	*p += 4;
}

/* A torch.distributed Metadata object (table id 2) built by NEWOBJ; its
 * BUILD state follows. */
#define NEW_MD "\x80\x04" "ctorch.distributed.m\nMetadata\n" ")\x81"

/*
 * A Metadata whose state is {'L': 'x' * lead (when lead), 's': {i:
 * (i * 3, 'shared') for i in range(n)}, 't': 'shared'} as Python writes
 * it (SETITEMS batches of 1000; 'shared' memoized at item memo_at and
 * read by GET in every later one and after the dict, the items before
 * it with their own), into a new buffer (*len bytes; the caller frees
 * it), with the sums of its keys and values.
 */
static uint8_t *shared_pickle(size_t n, size_t memo_at, size_t lead,
			      size_t *len, int64_t *keys, int64_t *vals)
{
	uint8_t *b = malloc(64 + lead + n * 20), *p = b;
	size_t i;

	*keys = *vals = 0;
	if (!b)
		return NULL;
	memcpy(p, NEW_MD "}(", sizeof(NEW_MD "}(") - 1);
	p += sizeof(NEW_MD "}(") - 1;
	if (lead) {
		memcpy(p, "\x8c\x01LX", 4);	/* BINUNICODE */
		p += 4;
		memcpy(p, &(uint32_t){ (uint32_t)lead }, 4);
		memset(p + 4, 'x', lead);
		p += 4 + lead;
	}
	memcpy(p, "\x8c\x01s}", 4);
	p += 4;
	for (i = 0; i < n; i++) {
		if (i % 1000 == 0)
			*p++ = '(';
		put_int(&p, (uint32_t)i);
		put_int(&p, (uint32_t)(i * 3));
		if (i < memo_at) {
			memcpy(p, "\x8c\x06shared", 8);
			p += 8;
		} else if (i == memo_at) {
			memcpy(p, "\x8c\x06shared\x94", 9);	/* memo 0 */
			p += 9;
		} else {
			memcpy(p, "h\x00", 2);
			p += 2;
		}
		*p++ = 0x86;	/* TUPLE2 */
		*keys += (int64_t)i;
		*vals += (int64_t)i * 3;
		if (i % 1000 == 999 || i == n - 1)
			*p++ = 'u';
	}
	memcpy(p, "\x8c\x01th\x00ub.", 8);
	p += 8;
	*len = (size_t)(p - b);
	return b;
}

/* shared_pickle() streamed: the dict's items reach the stream batch by
 * batch, cost the memory of a batch, and a value kept by the memo
 * outlives its batch. */
static void test_stream(void)
{
	static const char *const roles[] = { "s" };
	size_t n = 25000, len;
	struct seen seen = { .shared_ok = true };
	struct pk_stream st = { 2, roles, 1, count_pairs, &seen, false };
	struct pk_value *v;
	const struct pk_value *state;
	struct pk_arena *a, *whole;
	char err[256];
	int64_t keys, vals;
	uint8_t *b = shared_pickle(n, 0, 0, &len, &keys, &vals);

	err[0] = '\0';
	CHECK(b && pk_load_stream(b, len, table, 2, &st, "t", &v, &a, err,
				  sizeof(err)) == 0);
	CHECK(seen.batches == 25 && seen.pairs == n && seen.keys == keys &&
	      seen.vals == vals && seen.shared_ok);
	state = pk_is_call(v, 2) ? v->u.call.state : NULL;
	CHECK(state && state->type == PK_DICT && state->n == 4);
	if (state && state->n == 4) {
		const struct pk_value *d = pk_dict_get(state, "s");

		CHECK(pk_stream_id(d) == seen.dict && seen.dict &&
		      d->n == 0);
		CHECK(pk_str_is(pk_dict_get(state, "t"), "shared"));
	}
	/* The same pickle unstreamed holds every item at once. */
	CHECK(pk_load(b, len, table, 2, "t", &v, &whole, err,
		      sizeof(err)) == 0);
	if (!v)
		fprintf(stderr, "  %s\n", err);
	state = pk_is_call(v, 2) ? v->u.call.state : NULL;
	CHECK(pk_dict_get(state, "s") && pk_dict_get(state, "s")->n == 2 * n);
	CHECK(pk_arena_bytes(a) * 8 < pk_arena_bytes(whole));
	pk_free(whole);
	pk_free(a);
	free(b);
}

/* Whether the page at p was given back: poisoned under ASan, else all
 * zeros (no page of shared_pickle() is). */
static bool given_back(const uint8_t *p)
{
#ifdef CKPT_ASAN
	return __asan_address_is_poisoned(p);
#else
	size_t i;

	for (i = 0; i < 4096; i++)
		if (p[i])
			return false;
	return true;
#endif
}

/*
 * Streamed with spend: the same items, and the input's pages behind each
 * batch are given back as the load goes (nearly all of the dict's), but
 * none that a value kept is read from: 'shared', memoized in the sixth
 * batch and read by GET in the later ones and after the dict, is a copy;
 * the long string made before the dict is read whole after it.  (Either
 * rule removed fails this test.)
 */
static void test_stream_spend(void)
{
	static const char *const roles[] = { "s" };
	size_t n = 25000, lead = 3 * 4096, len, pg, given = 0, pages = 0;
	struct seen seen = { .shared_ok = true };
	struct pk_stream st = { 2, roles, 1, count_pairs, &seen, true };
	struct pk_value *v = NULL;
	const struct pk_value *state;
	struct pk_arena *a = NULL;
	char err[256];
	int64_t keys, vals;
	uint8_t *b = shared_pickle(n, 5500, lead, &len, &keys, &vals);
	const struct pk_value *l;
	char *want = malloc(lead);

	err[0] = '\0';
	CHECK(b && want && pk_load_stream(b, len, table, 2, &st, "t", &v, &a,
					  err, sizeof(err)) == 0);
	if (err[0])
		fprintf(stderr, "  %s\n", err);
	CHECK(seen.batches == 25 && seen.pairs == n && seen.keys == keys &&
	      seen.vals == vals && seen.shared_ok);
	state = pk_is_call(v, 2) ? v->u.call.state : NULL;
	CHECK(state && pk_str_is(pk_dict_get(state, "t"), "shared"));
	l = state ? pk_dict_get(state, "L") : NULL;
	if (want)
		memset(want, 'x', lead);
	CHECK(l && l->type == PK_STR && l->u.str.len == lead && want &&
	      memcmp(l->u.str.s, want, lead) == 0);
	/* the dict's pages: those after the long string */
	for (pg = ((uintptr_t)b + lead + 64 + 4095) & ~(uintptr_t)4095;
	     b && pg + 4096 <= (uintptr_t)b + len; pg += 4096, pages++)
		given += given_back((const uint8_t *)pg);
	fprintf(stderr, "  %zu of %zu whole pages given back\n", given,
		pages);
	CHECK(pages > 50 && given * 10 >= pages * 9);
	pk_free(a);
	free(want);
	free(b);
}

/*
 * Spent, values remade from the free lists sit below the batch's MARK in
 * the arena, though made after it: a string S of three pages and T =
 * (S,), memoized (which keeps everything so far), made after a
 * torch.Size's compaction freed values, leave the arena where the MARK
 * found it.  S is still read whole after the dict through T (its pages
 * were given back once: what is given back goes by when values were
 * made, not where they lie).
 */
static void test_stream_spend_reuse(void)
{
	static const struct pk_global sized[] = {
		{ "torch", "Size", 1, true },
		{ "torch.distributed.*", "Metadata", 2, false },
	};
	static const char *const roles[] = { "s" };
	struct seen seen = { .shared_ok = true };
	struct pk_stream st = { 2, roles, 1, count_pairs, &seen, true };
	size_t slen = 3 * 4096, n = 0, i;
	uint8_t *b = malloc(slen + 256);
	struct pk_value *v = NULL;
	const struct pk_value *state, *t = NULL;
	struct pk_arena *a = NULL;
	char err[256] = "";
	bool whole = false;

	if (!b) {
		CHECK(b != NULL);
		return;
	}
#define PUT(s) (memcpy(b + n, s, sizeof(s) - 1), n += sizeof(s) - 1)
	PUT(NEW_MD "}(\x8c\x01z" "ctorch\nSize\n(");
	for (i = 0; i < 8; i++) {	/* ints of 1024 and more: not shared */
		b[n++] = 'M';
		b[n++] = 0;
		b[n++] = (uint8_t)(4 + i);
	}
	PUT("t\x85R" "\x8c\x01s}(K\x01X");
	memcpy(b + n, &(uint32_t){ (uint32_t)slen }, 4);
	memset(b + n + 4, 'A', slen);
	n += 4 + slen;
	PUT("\x85q\x00u" "\x8c\x01th\x00ub.");
#undef PUT
	CHECK(pk_load_stream(b, n, sized, 2, &st, "t", &v, &a, err,
			     sizeof(err)) == 0);
	if (err[0])
		fprintf(stderr, "  %s\n", err);
	state = pk_is_call(v, 2) ? v->u.call.state : NULL;
	if (state)
		t = pk_dict_get(state, "t");
	CHECK(seen.pairs == 1 && t && t->type == PK_TUPLE && t->n == 1 &&
	      t->u.items[0]->type == PK_STR &&
	      t->u.items[0]->u.str.len == slen);
	if (t && t->n == 1 && t->u.items[0]->u.str.len == slen) {
		const char *s = t->u.items[0]->u.str.s;

		for (i = 0; i < slen && s[i] == 'A'; i++)
			;
		whole = i == slen;
	}
	CHECK(whole);
	pk_free(a);
	free(b);
}

/* The pickle b[0, n) loaded with role "s" streaming in a Metadata's state
 * (counted into *seen); that state, or NULL. */
static const struct pk_value *load_s(const uint8_t *b, size_t n,
				     struct seen *seen, struct pk_value **v,
				     struct pk_arena **a)
{
	static const char *const roles[] = { "s" };
	struct pk_stream st = { 2, roles, 1, count_pairs, seen, false };
	char err[256];

	*v = NULL;
	*a = NULL;
	if (pk_load_stream(b, n, table, 2, &st, "t", v, a, err, sizeof(err))) {
		fprintf(stderr, "  %s\n", err);
		return NULL;
	}
	return pk_is_call(*v, 2) ? (*v)->u.call.state : NULL;
}

/*
 * What a batch links into something older is not released with it:
 * a list made before the streamed dict, fetched into a batch by GET and
 * appended to there; a tuple memoized in a batch and read after it.
 * (Either rule removed fails this test.)
 * Values built after the batch would overwrite them (and ASan reports the
 * released memory).
 */
static void test_stream_keeps_links(void)
{
	struct seen seen = { .shared_ok = true };
	struct pk_value *v;
	struct pk_arena *a;
	const struct pk_value *l, *t, *state;

	/* A Metadata of state {'L': ['new'], 's': {1: L, 2: T}, 'T': (7, 8),
	 * 'z': 'zzzz', 'y': (9, 9)}: 'new' appended to L inside the first
	 * batch, T made and memoized (memo 1) inside the second; each batch
	 * on its own, so that each rule is what keeps its value */
	state = load_s(P(NEW_MD "}(\x8c\x01L]\x94"
			 "\x8c\x01s}(K\x01h\x00\x8c\x03new" "a" "u"
			 "(K\x02K\x07K\x08\x86\x94" "u"
			 "\x8c\x01Th\x01"
			 "\x8c\x01z\x8c\x04zzzz"
			 "\x8c\x01yK\x09K\x09\x86" "ub."),
		       &seen, &v, &a);
	CHECK(state != NULL);
	l = pk_dict_get(state, "L");
	t = pk_dict_get(state, "T");
	CHECK(seen.pairs == 2);
	CHECK(l && l->type == PK_LIST && l->n == 1 &&
	      pk_str_is(l->u.items[0], "new"));
	CHECK(t && t->type == PK_TUPLE && t->n == 2 &&
	      t->u.items[0]->u.i == 7 && t->u.items[1]->u.i == 8);
	CHECK(pk_str_is(pk_dict_get(state, "z"), "zzzz"));
	pk_free(a);
}

/*
 * Only a role's dict in the parent's own state streams: not one under
 * the same key deeper down ({'x': {'s': {3: 4}}}), nor one in a plain
 * dict, nor in another class's state.
 */
static void test_stream_context(void)
{
	struct seen seen = { .shared_ok = true };
	struct pk_value *v;
	struct pk_arena *a;
	const struct pk_value *state, *x;

	state = load_s(P(NEW_MD "}(\x8c\x01s}(K\x01K\x02"
			 "\x8c\x06shared\x86u"
			 "\x8c\x01x}(\x8c\x01s}(K\x03K\x04uu" "ub."),
		       &seen, &v, &a);
	CHECK(state != NULL);
	CHECK(seen.pairs == 1 && seen.batches == 1);
	CHECK(pk_stream_id(pk_dict_get(state, "s")) == seen.dict);
	x = pk_dict_get(pk_dict_get(state, "x"), "s");
	CHECK(x && !pk_stream_id(x) && x->n == 2);
	pk_free(a);
	/* a plain dict's 's', and the state of a torch.Size (id 1) */
	seen.pairs = 0;
	load_s(P("\x80\x04}(\x8c\x01s}(K\x01K\x02uu."), &seen, &v, &a);
	CHECK(v && seen.pairs == 0 && pk_dict_get(v, "s")->n == 2);
	pk_free(a);
	load_s(P("\x80\x04" "ctorch\nSize\n" ")\x81"
		 "}(\x8c\x01s}(K\x01K\x02uub."), &seen, &v, &a);
	CHECK(v && seen.pairs == 0);
	pk_free(a);
}

int main(void)
{
	TEST(test_values);
	TEST(test_refusals);
	TEST(test_deep);
	TEST(test_arena_small);
	TEST(test_arena_large);
	TEST(test_dims);
	TEST(test_stream);
	TEST(test_stream_spend);
	TEST(test_stream_spend_reuse);
	TEST(test_stream_keeps_links);
	TEST(test_stream_context);
	return TEST_REPORT();
}
