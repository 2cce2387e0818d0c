/* SPDX-License-Identifier: MIT */
/*
 * The strict pickle machine (see pickle.h).  Opcodes outside the table in
 * step() are refused by name and byte offset; so are globals outside the
 * caller's table.  Every length and index read from the input is checked
 * against what remains before it is used.
 */
#include "torch/pickle.h"

#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/asan.h"
#include "common/bigbuf.h"
#include "common/errbuf.h"

/* Released memory is poisoned under ASan, so a value used after its
 * batch was released is reported, not read as whatever reused it. */
#define POISON(p, n) CKPT_POISON(p, n)
#define UNPOISON(p, n) CKPT_UNPOISON(p, n)

/* Blocks start small and double up to ARENA_MAX_BLOCK: a record's
 * data.pkl is a few hundred bytes, and a fixed 1 MiB block per record cost
 * an mmap, a munmap and the sanitizer's quarantine each (issue 31). */
#define ARENA_FIRST_BLOCK ((size_t)4 << 10)
#define ARENA_MAX_BLOCK ((size_t)4 << 20)
/* Blocks of this size or more are on transparent huge pages when the
 * system gives them on request: a large .metadata's values are faulted
 * in 2 MiB at a time instead of 4 KiB, where the faults cost more than
 * the unpickling.  The arena is the machine's own memory, never the
 * caller's. */
#define ARENA_HUGE ((size_t)2 << 20)
#define ARENA_MIN_CAP ((size_t)64 << 20)	/* arena cap: max(this, ... */
#define ARENA_PER_BYTE 64			/* ... input bytes * this) */
#define ARENA_ALIGN _Alignof(struct pk_value)	/* values, pointer arrays */
#define SHARED_INTS 1024	/* integers [0, this) are shared values */

_Static_assert(sizeof(struct pk_value) == 32, "a value is 32 bytes");

struct pk_block {
	struct pk_block *next;
	size_t used, size;
	uint64_t seq;		/* blocks of head: newer ones are higher */
	max_align_t data[];
};

/*
 * Values go into head's blocks, newest first.  A streamed batch's values
 * are released back to where its MARK found the arena (arena_release()),
 * so what must outlive a batch goes elsewhere: shared values and copies
 * of the leaves a memo slot keeps go into the kept blocks, and anything
 * else that something outside the batch may point at raises the
 * machine's keep floor, below which nothing is released.
 */
struct pk_arena {
	struct pk_block *head;
	struct pk_block *kept;	/* never released before pk_free() */
	struct pk_block *spare;	/* released, reused before new ones */
	size_t total, cap;
	size_t next_block;	/* size of the next block, before doubling */
	size_t next_kept;	/* the same, of kept blocks */
	uint64_t seq;		/* the last block's seq */
	bool capped;		/* an allocation hit cap */
};

/* A point in head's blocks: b NULL (seq 0) is before the first.  in_at:
 * the input's offset then (the values allocated before it read only the
 * bytes before it); nstr: the machine's nstr then. */
struct arena_pos {
	struct pk_block *b;
	size_t used;
	uint64_t seq;
	size_t in_at;
	uint64_t nstr;
};

struct machine {
	const uint8_t *buf, *p, *end;
	const char *name;
	const struct pk_global *table;
	size_t ntable;
	struct pk_arena *a;
	struct pk_value **stack;
	size_t sp, stack_cap;
	size_t *marks;
	struct arena_pos *amarks;	/* the arena at each MARK */
	size_t nmarks, marks_cap;
	const struct pk_stream *st;	/* or NULL */
	uint32_t nstreamed;	/* dicts streamed so far */
	struct arena_pos keep;	/* never released below this */
	/* Memo: index i's slot is slot[rank of i among the indices a GET
	 * reads] (memo_slot()); an index no GET reads is not kept. */
	struct pk_value **memo;	/* [nread] */
	uint64_t *read;		/* bitmap: memo indices a GET reads */
	uint32_t *rank;		/* [w]: set bits of read[0, w) */
	size_t nread, nbits;	/* slots; bits in read */
	size_t nmemo;		/* MEMOIZE's next index */
	/* Shared immutable values, built on first use */
	struct pk_value *none, *bools[2], *empty_tuple;
	struct pk_value *ints[SHARED_INTS];
	/* Values and 1-item arrays freed by a PK_DIMS compaction, reused
	 * first; linked through their first pointer. */
	struct pk_value *free_vals;
	void *free_ones;
	size_t op_at;		/* offset of the current opcode */
	const uint8_t *spent;	/* input before it given back (spend) */
	/* Strings made (the only values that point into the input), and
	 * how many there were at the last release (spend) */
	uint64_t nstr, nstr_released;
	uint8_t op;
	char *err;
	size_t errlen;
};

static struct pk_block *block_new(size_t bs)
{
	void *p;

	if (bs < ARENA_HUGE)
		return malloc(sizeof(struct pk_block) + bs);
	if (posix_memalign(&p, ARENA_HUGE, sizeof(struct pk_block) + bs))
		return NULL;
	madvise(p, bs & ~(ARENA_HUGE - 1), MADV_HUGEPAGE);	/* a hint */
	return p;
}

/* A new block at the head of *list with room for size (rounded) bytes:
 * the spare list's first when it fits (head only), else a new one. */
static __attribute__((noinline)) struct pk_block *
list_grow(struct pk_arena *a, struct pk_block **list, size_t size)
{
	size_t *next = list == &a->kept ? &a->next_kept : &a->next_block;
	size_t bs = *next ? *next : ARENA_FIRST_BLOCK;
	struct pk_block *b;

	if (list != &a->kept && a->spare && a->spare->size >= size) {
		b = a->spare;	/* faulted in already */
		a->spare = b->next;
	} else {
		if (bs < ARENA_MAX_BLOCK)
			*next = bs * 2;
		if (bs < size)
			bs = size;
		if (bs > a->cap - a->total) {
			a->capped = true;
			return NULL;
		}
		b = block_new(bs);
		if (!b)
			return NULL;
		b->size = bs;
		a->total += bs;
	}
	b->next = *list;
	b->used = 0;
	b->seq = ++a->seq;
	*list = b;
	return b;
}

/* size bytes from the newest block of *list (a->head or a->kept).
 * Inline: every value the machine makes comes from here, and its size
 * is most often a constant. */
static inline void *list_alloc(struct pk_arena *a, struct pk_block **list,
			       size_t size)
{
	struct pk_block *b = *list;
	void *p;

	if (size > SIZE_MAX / 2)
		return NULL;
	size = (size + ARENA_ALIGN - 1) & ~(ARENA_ALIGN - 1);
	if (!b || b->size - b->used < size) {
		b = list_grow(a, list, size);
		if (!b)
			return NULL;
	}
	p = (char *)b->data + b->used;
	b->used += size;
	UNPOISON(p, size);
	return p;
}

static inline void *arena_alloc(struct pk_arena *a, size_t size)
{
	return list_alloc(a, &a->head, size);
}

static struct arena_pos arena_top(const struct pk_arena *a)
{
	struct arena_pos p = { 0 };

	if (a->head)
		p = (struct arena_pos){ a->head, a->head->used,
					a->head->seq, 0, 0 };
	return p;
}

static bool pos_before(struct arena_pos x, struct arena_pos y)
{
	return x.seq < y.seq || (x.seq == y.seq && x.used < y.used);
}

/* Give back head's memory past p (which must be in it) to the spare
 * list: everything allocated after p is gone. */
static void arena_release(struct pk_arena *a, struct arena_pos p)
{
	while (a->head && a->head != p.b) {
		struct pk_block *b = a->head;

		a->head = b->next;
		b->next = a->spare;
		a->spare = b;
		POISON(b->data, b->size);
	}
	if (a->head) {
		a->head->used = p.used;
		POISON((char *)a->head->data + p.used, a->head->size - p.used);
	}
}

static void free_list(struct pk_block *b)
{
	struct pk_block *next;

	for (; b; b = next) {
		next = b->next;
		UNPOISON(b->data, b->size);
		free(b);
	}
}

void pk_free(struct pk_arena *a)
{
	if (!a)
		return;
	free_list(a->head);
	free_list(a->kept);
	free_list(a->spare);
	free(a);
}

size_t pk_arena_bytes(const struct pk_arena *a)
{
	return a ? a->total : 0;
}

static const char *op_name(uint8_t op)
{
	static const struct {
		uint8_t op;
		const char *name;
	} names[] = {
		{ 0x80, "PROTO" }, { 0x95, "FRAME" }, { '.', "STOP" },
		{ '(', "MARK" }, { 0x94, "MEMOIZE" }, { 'q', "BINPUT" },
		{ 'r', "LONG_BINPUT" }, { 'h', "BINGET" },
		{ 'j', "LONG_BINGET" }, { 0x8c, "SHORT_BINUNICODE" },
		{ 'X', "BINUNICODE" }, { 0x8d, "BINUNICODE8" },
		{ 'K', "BININT1" }, { 'M', "BININT2" }, { 'J', "BININT" },
		{ 0x8a, "LONG1" }, { 'N', "NONE" }, { 0x89, "NEWFALSE" },
		{ 0x88, "NEWTRUE" }, { ')', "EMPTY_TUPLE" },
		{ 0x85, "TUPLE1" }, { 0x86, "TUPLE2" }, { 0x87, "TUPLE3" },
		{ 't', "TUPLE" }, { ']', "EMPTY_LIST" }, { 'a', "APPEND" },
		{ 'e', "APPENDS" }, { '}', "EMPTY_DICT" }, { 's', "SETITEM" },
		{ 'u', "SETITEMS" }, { 0x93, "STACK_GLOBAL" },
		{ 'c', "GLOBAL" }, { 0x81, "NEWOBJ" }, { 'R', "REDUCE" },
		{ 'b', "BUILD" }, { 'Q', "BINPERSID" },
		/* Refused, named for the message. */
		{ 'i', "INST" }, { 'o', "OBJ" }, { 0x82, "EXT1" },
		{ 0x83, "EXT2" }, { 0x84, "EXT4" }, { 'P', "PERSID" },
		{ 0x92, "NEWOBJ_EX" }, { 'G', "BINFLOAT" },
		{ 'B', "BINBYTES" }, { 'C', "SHORT_BINBYTES" },
		{ 0x8e, "BINBYTES8" }, { 0x96, "BYTEARRAY8" },
		{ 0x97, "NEXT_BUFFER" }, { 0x98, "READONLY_BUFFER" },
		{ 0x8f, "EMPTY_SET" }, { 0x90, "ADDITEMS" },
		{ 0x91, "FROZENSET" }, { '0', "POP" }, { '1', "POP_MARK" },
		{ '2', "DUP" }, { 'S', "STRING" }, { 'V', "UNICODE" },
		{ 'I', "INT" }, { 'L', "LONG" }, { 'F', "FLOAT" },
		{ 'l', "LIST" }, { 'd', "DICT" }, { 'g', "GET" },
		{ 'p', "PUT" }, { 0x8b, "LONG4" },
	};
	size_t i;

	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (names[i].op == op)
			return names[i].name;
	}
	return "unknown";
}

static __attribute__((cold)) int fail(struct machine *mc, int rc,
				      const char *what)
{
	return ckpt_errf(mc->err, mc->errlen, rc,
			 "%s: pickle opcode %s (0x%02x) at byte %zu: %s",
			 mc->name, op_name(mc->op), mc->op, mc->op_at, what);
}

static __attribute__((cold)) int oom(struct machine *mc)
{
	if (mc->a->capped)
		return fail(mc, -E2BIG, "pickle builds too many objects for its size");
	return fail(mc, -ENOMEM, "out of memory");
}

static int take(struct machine *mc, size_t n, const uint8_t **out)
{
	if ((size_t)(mc->end - mc->p) < n)
		return fail(mc, -EINVAL, "truncated pickle");
	*out = mc->p;
	mc->p += n;
	return 0;
}

/* The n-byte little-endian unsigned at p.  The opcodes' fixed widths
 * (1, 2, 4, 8) are single loads: a byte loop for each LONG_BINGET and
 * BININT cost 3% of a large .metadata's open (issue 38). */
static inline uint64_t le(const uint8_t *p, unsigned n)
{
	uint64_t v = 0;
	uint32_t v32;
	uint16_t v16;

	switch (n) {
	case 1:
		return p[0];
	case 2:
		memcpy(&v16, p, 2);
		return le16toh(v16);
	case 4:
		memcpy(&v32, p, 4);
		return le32toh(v32);
	case 8:
		memcpy(&v, p, 8);
		return le64toh(v);
	default:
		while (n--)
			v = v << 8 | p[n];
		return v;
	}
}

static inline struct pk_value *new_value(struct machine *mc, enum pk_type t)
{
	struct pk_value *v = mc->free_vals;

	if (v)
		mc->free_vals = v->u.call.args;
	else
		v = arena_alloc(mc->a, sizeof(*v));

	if (v) {
		memset(v, 0, sizeof(*v));
		v->type = (uint8_t)t;
	}
	return v;
}

/* A value in the kept blocks (shared values, memo slots' leaves). */
static struct pk_value *new_kept(struct machine *mc, enum pk_type t)
{
	struct pk_value *v = list_alloc(mc->a, &mc->a->kept, sizeof(*v));

	if (v) {
		memset(v, 0, sizeof(*v));
		v->type = (uint8_t)t;
		v->flags = PK_KEPT | PK_PINNED;
	}
	return v;
}

/* Nothing allocated so far is released: something that outlives the
 * current batch may point at any of it. */
static void keep_all(struct machine *mc)
{
	if (mc->st) {
		mc->keep = arena_top(mc->a);
		mc->keep.in_at = (size_t)(mc->p - mc->buf);
		mc->keep.nstr = mc->nstr;
	}
}

/*
 * A batch's values were released (spend), back to its MARK or the keep
 * floor; p is whichever of the two was taken later.  The input's bytes
 * from p's offset to the current opcode are read by no value left: what
 * was made before p read only bytes before it, what was made since is
 * released or unreachable, unless the memo keeps it (a copy:
 * keep_value()) or something kept links to it (keep_all() then moved the
 * floor).  This goes by when values were made, not where they lie: one
 * remade from the free lists lies below the MARK though made after it.
 * Give those bytes' pages back.
 */
static void spend_input(struct machine *mc, struct arena_pos p)
{
	/* Unless no string was made since the last release (only opcodes
	 * between two batches, such as SETITEMS then MARK), the bytes
	 * since then may be read by values kept below p. */
	if (p.nstr != mc->nstr_released &&
	    p.in_at > (size_t)(mc->spent - mc->buf))
		mc->spent = mc->buf + p.in_at;
	mc->nstr_released = mc->nstr;
	ckpt_give_back(&mc->spent, mc->buf + mc->op_at);
}

/* push()'s slow path: v is NULL (out of memory), or the stack is full. */
static __attribute__((noinline)) int push_grow(struct machine *mc,
					       struct pk_value *v)
{
	size_t ncap = mc->stack_cap ? mc->stack_cap * 2 : 64;
	struct pk_value **ns;

	if (!v)
		return oom(mc);
	/* Every push consumed at least one input byte. */
	if (ncap > (size_t)(mc->end - mc->buf) + 64)
		ncap = (size_t)(mc->end - mc->buf) + 64;
	if (ncap <= mc->sp)
		return fail(mc, -EINVAL, "stack overflow");
	ns = realloc(mc->stack, ncap * sizeof(*ns));
	if (!ns)
		return oom(mc);
	mc->stack = ns;
	mc->stack_cap = ncap;
	mc->stack[mc->sp++] = v;
	return 0;
}

/* Push v, which may be NULL after a failed allocation (then -ENOMEM or
 * -E2BIG).  Inline: most opcodes end in a push. */
static inline int push(struct machine *mc, struct pk_value *v)
{
	if (__builtin_expect(!v || mc->sp == mc->stack_cap, 0))
		return push_grow(mc, v);
	mc->stack[mc->sp++] = v;
	return 0;
}

/* The stack floor: values above the innermost MARK are not below it. */
static inline size_t floor_sp(const struct machine *mc)
{
	return mc->nmarks ? mc->marks[mc->nmarks - 1] : 0;
}

static inline int pop(struct machine *mc, struct pk_value **v)
{
	if (mc->sp <= floor_sp(mc))
		return fail(mc, -EINVAL, "stack underflow");
	*v = mc->stack[--mc->sp];
	return 0;
}

static int pop_mark(struct machine *mc, size_t *at)
{
	if (!mc->nmarks)
		return fail(mc, -EINVAL, "no MARK to pop");
	*at = mc->marks[--mc->nmarks];
	return 0;
}

/* A new tuple or list of stack[from, sp), popped. */
static int collect(struct machine *mc, enum pk_type t, size_t from)
{
	size_t n = mc->sp - from;
	struct pk_value *v;

	if (n == 0 && t == PK_TUPLE) {	/* immutable: shared */
		if (!mc->empty_tuple)
			mc->empty_tuple = new_kept(mc, PK_TUPLE);
		return push(mc, mc->empty_tuple);
	}
	v = new_value(mc, t);
	if (!v)
		return oom(mc);
	if (n == 1 && mc->free_ones) {
		v->u.items = mc->free_ones;
		mc->free_ones = *(void **)mc->free_ones;
	} else if (n) {
		v->u.items = arena_alloc(mc->a, n * sizeof(*v->u.items));
		if (!v->u.items)
			return oom(mc);
	}
	if (n)
		memcpy(v->u.items, mc->stack + from, n * sizeof(*v->u.items));
	v->n = v->cap = (uint32_t)n;
	mc->sp = from;
	return push(mc, v);
}

/*
 * Is the dict at stack[at] the value of a role's key in the state of a
 * parent object being built: the key at at - 1, and below them, inside
 * the innermost MARK, only whole key-value pairs of that state, a dict
 * right below the MARK, and the new parent object below it?  Returns the
 * role, or st->nroles.
 */
static unsigned stream_role(const struct machine *mc, size_t at)
{
	const struct pk_stream *st = mc->st;
	const struct pk_value *k, *sd, *obj;
	size_t m = floor_sp(mc);
	unsigned r = 0;

	if (!mc->nmarks || at < m + 1 || (at - 1 - m) % 2 || m < 2)
		return (unsigned)st->nroles;
	k = mc->stack[at - 1];
	sd = mc->stack[m - 1];
	obj = mc->stack[m - 2];
	if (k->type != PK_STR || sd->type != PK_DICT ||
	    obj->type != PK_CALL || obj->id != st->parent_id ||
	    obj->u.call.state)
		return (unsigned)st->nroles;
	while (r < st->nroles && !pk_str_is(k, st->roles[r]))
		r++;
	return r;
}

/*
 * The items stack[from, from + n) set into dict c (at from - 1), given to
 * the stream when c is (or, on its first items, becomes) a streamed dict:
 * 0 when they were, 1 when c is built as usual, or -errno.  The role's
 * context (stream_role()) is looked for below the items' own MARK, which
 * SETITEMS has popped.
 */
static int stream_items(struct machine *mc, struct pk_value *c, size_t from,
			size_t n)
{
	const struct pk_stream *st = mc->st;
	bool first = !(c->flags & PK_STREAMED);
	uint32_t id;
	unsigned r;
	int rc;

	if (!st || (c->flags & PK_UNSTREAMED))
		return 1;
	if (first) {
		if (c->n || mc->nstreamed == UINT32_MAX - 1)
			return 1;
		r = stream_role(mc, from - 1);
		if (r == st->nroles)
			return 1;
		id = mc->nstreamed + 1;
	} else {
		r = (unsigned)c->id;
		id = c->cap;
	}
	rc = st->pairs(st->ctx, r, id,
		       (const struct pk_value *const *)mc->stack + from, n / 2);
	if (rc == 1 && first) {
		c->flags |= PK_UNSTREAMED;
		return 1;
	}
	if (rc == 1)
		return fail(mc, -EINVAL, "a streamed dict declined part way");
	if (rc)
		return rc;
	if (first) {
		c->flags |= PK_STREAMED;
		c->id = (int32_t)r;
		c->cap = id;
		mc->nstreamed++;
	}
	mc->sp = from;
	return 0;
}

/* Append stack[from, sp) to the list or dict below from, and pop them.
 * mark: where the arena was at their MARK (SETITEMS, APPENDS), or NULL. */
static int extend(struct machine *mc, size_t from, enum pk_type want,
		  const struct arena_pos *mark)
{
	size_t n = mc->sp - from, need;
	struct pk_value *c;
	int rc;

	if (from == 0 || from <= floor_sp(mc))
		return fail(mc, -EINVAL, "stack underflow");
	c = mc->stack[from - 1];
	if (c->type != want)
		return fail(mc, -EINVAL, want == PK_LIST ?
			    "APPEND to something not a list" :
			    "SETITEM on something not a dict");
	if (want == PK_DICT && n % 2)
		return fail(mc, -EINVAL, "odd number of dict items");
	if (n == 0)	/* an empty APPENDS / SETITEMS batch */
		return 0;
	if (want == PK_DICT && (rc = stream_items(mc, c, from, n)) <= 0) {
		/* Their values are gone: give the batch's memory back, but
		 * none that something kept may point at (keep). */
		if (rc == 0 && mark) {
			struct arena_pos to = pos_before(*mark, mc->keep) ?
					      mc->keep : *mark;

			arena_release(mc->a, to);
			mc->free_vals = NULL;
			mc->free_ones = NULL;
			if (mc->st->spend)
				spend_input(mc, mc->keep.in_at > mark->in_at ?
						mc->keep : *mark);
		}
		return rc;
	}
	need = (size_t)c->n + n;
	if (need > UINT32_MAX / 2)
		return fail(mc, -E2BIG, "container too large");
	if (need > c->cap) {
		size_t ncap = c->cap ? (size_t)c->cap * 2 : 4;
		struct pk_value **ni;

		while (ncap < need)
			ncap *= 2;
		ni = arena_alloc(mc->a, ncap * sizeof(*ni));
		if (!ni)
			return oom(mc);
		if (c->n)
			memcpy(ni, c->u.items, c->n * sizeof(*ni));
		c->u.items = ni;
		c->cap = (uint32_t)ncap;
	}
	memcpy(c->u.items + c->n, mc->stack + from, n * sizeof(*c->u.items));
	c->n = (uint32_t)need;
	mc->sp = from;
	if (c->flags & PK_PINNED)	/* reachable from outside a batch */
		keep_all(mc);
	return 0;
}

static int global(struct machine *mc, const char *mod, size_t mlen,
		  const char *name, size_t nlen)
{
	struct pk_value *v;
	size_t i;

	for (i = 0; i < mc->ntable; i++) {
		const struct pk_global *g = &mc->table[i];
		size_t gl = strlen(g->module);

		if (strlen(g->name) != nlen || memcmp(g->name, name, nlen))
			continue;
		if (gl && g->module[gl - 1] == '*') {
			if (mlen < gl - 1 || memcmp(g->module, mod, gl - 1))
				continue;
		} else if (gl != mlen || memcmp(g->module, mod, mlen)) {
			continue;
		}
		v = new_value(mc, PK_GLOBAL);
		if (!v)
			return oom(mc);
		v->u.global = g->id;
		if (g->dims)
			v->flags = PK_DIMS_GLOBAL;
		return push(mc, v);
	}
	return ckpt_errf(mc->err, mc->errlen, -EINVAL,
			 "%s: pickle at byte %zu names global '%.*s.%.*s', which is not allowed",
			 mc->name, mc->op_at, (int)(mlen > 100 ? 100 : mlen),
			 mod, (int)(nlen > 100 ? 100 : nlen), name);
}

static void free_value(struct machine *mc, struct pk_value *v)
{
	v->u.call.args = mc->free_vals;
	mc->free_vals = v;
}

/*
 * fn(args) where fn is a PK_DIMS_GLOBAL: one tuple of at most
 * PK_DIMS_MAX non-negative ints, which no memo slot that a GET reads
 * holds (so nothing else points at them), becomes that tuple retyped
 * PK_DIMS, its item array holding the ints' values; the args tuple, its
 * item array and the ints (those not shared) are freed for reuse.
 * Returns the value, or NULL when args are not of that shape.
 */
static struct pk_value *compact_dims(struct machine *mc, struct pk_value *args)
{
	struct pk_value *t;
	uint32_t i;

	if (args->type != PK_TUPLE || args->n != 1 ||
	    (args->flags & PK_PINNED))
		return NULL;
	t = args->u.items[0];
	if (t->type != PK_TUPLE || t->n == 0 || t->n > PK_DIMS_MAX ||
	    (t->flags & PK_PINNED))
		return NULL;
	for (i = 0; i < t->n; i++)
		if (t->u.items[i]->type != PK_INT || t->u.items[i]->u.i < 0)
			return NULL;
	for (i = 0; i < t->n; i++) {
		struct pk_value *d = t->u.items[i];

		t->u.dims[i] = (uint64_t)d->u.i;
		if (!(d->flags & PK_PINNED))
			free_value(mc, d);
	}
	t->type = PK_DIMS;
	*(void **)args->u.items = mc->free_ones;
	mc->free_ones = args->u.items;
	free_value(mc, args);
	return t;
}

static int call(struct machine *mc, int id_from_persid)
{
	struct pk_value *args = NULL, *fn = NULL, *v;
	int rc;

	rc = pop(mc, &args);
	if (rc)
		return rc;
	if (!id_from_persid) {
		rc = pop(mc, &fn);
		if (rc)
			return rc;
		if (fn->type != PK_GLOBAL)
			return fail(mc, -EINVAL, "calls something not an allowed global");
		if (args->type != PK_TUPLE)
			return fail(mc, -EINVAL, "arguments are not a tuple");
		if ((fn->flags & PK_DIMS_GLOBAL) && mc->op == 'R' &&
		    (v = compact_dims(mc, args)))
			return push(mc, v);
	}
	v = new_value(mc, PK_CALL);
	if (!v)
		return oom(mc);
	v->id = id_from_persid ? PK_PERSID_ID : fn->u.global;
	v->u.call.args = args;
	return push(mc, v);
}

/* Set bits of w, without a call (the baseline x86-64 has no popcnt
 * instruction, and libgcc's is a table walk). */
static inline unsigned bits_set(uint64_t w)
{
	w = w - ((w >> 1) & 0x5555555555555555ull);
	w = (w & 0x3333333333333333ull) + ((w >> 2) & 0x3333333333333333ull);
	w = (w + (w >> 4)) & 0x0f0f0f0f0f0f0f0full;
	return (unsigned)((w * 0x0101010101010101ull) >> 56);
}

/* The slot of memo index idx, or SIZE_MAX when no GET reads it. */
static inline size_t memo_slot(const struct machine *mc, uint64_t idx)
{
	uint64_t w;

	if (idx >= mc->nbits)
		return SIZE_MAX;
	w = mc->read[idx / 64];
	if (!(w >> (idx % 64) & 1))
		return SIZE_MAX;
	return mc->rank[idx / 64] +
	       (size_t)bits_set(w & ((1ull << (idx % 64)) - 1));
}

/*
 * v, about to be memoized for a GET, made to outlive any batch: a leaf
 * (nothing else points at it yet: it was just pushed) is copied into the
 * kept blocks, and the copy returned; anything else keeps all there is.
 */
static struct pk_value *keep_value(struct machine *mc, struct pk_value *v)
{
	struct pk_value *k;

	switch (v->type) {
	case PK_NONE: case PK_BOOL: case PK_INT: case PK_STR: case PK_GLOBAL:
	case PK_DIMS:
		break;
	default:
		keep_all(mc);
		return v;
	}
	k = new_kept(mc, (enum pk_type)v->type);
	if (!k)
		return NULL;
	*k = *v;
	k->flags |= PK_KEPT | PK_PINNED;
	if (v->type == PK_DIMS) {
		k->u.dims = list_alloc(mc->a, &mc->a->kept,
				       v->n * sizeof(*v->u.dims));
		if (!k->u.dims)
			return NULL;
		memcpy(k->u.dims, v->u.dims, v->n * sizeof(*v->u.dims));
	} else if (v->type == PK_STR && mc->st->spend) {
		char *s = list_alloc(mc->a, &mc->a->kept,
				     v->u.str.len ? v->u.str.len : 1);

		if (!s)
			return NULL;
		memcpy(s, v->u.str.s, v->u.str.len);
		k->u.str.s = s;	/* buf's page may be given back */
	}
	return k;
}

/* memo_put()'s slot for a GET: the top of the stack kept there (made
 * to outlive its batch when streaming). */
static __attribute__((noinline)) int memo_keep(struct machine *mc,
					       size_t slot)
{
	struct pk_value *v = mc->stack[mc->sp - 1];

	if (mc->st && !(v->flags & PK_KEPT)) {
		v = keep_value(mc, v);
		if (!v)
			return oom(mc);
		mc->stack[mc->sp - 1] = v;
	}
	mc->memo[slot] = v;
	v->flags |= PK_PINNED;
	return 0;
}

/* Memoize the top of the stack as idx.  Inline: most of a .metadata's
 * MEMOIZEs are of slots no GET reads, which cost a bit test. */
static inline int memo_put(struct machine *mc, uint64_t idx)
{
	size_t slot;

	if (mc->sp <= floor_sp(mc))
		return fail(mc, -EINVAL, "memoizing an empty stack");
	/* A memo slot per opcode executed at most: bounded by the input. */
	if (idx > (uint64_t)(mc->p - mc->buf))
		return fail(mc, -EINVAL, "memo index out of range");
	if (idx >= mc->nmemo)
		mc->nmemo = idx + 1;
	slot = memo_slot(mc, idx);
	return slot == SIZE_MAX ? 0 : memo_keep(mc, slot);
}

/* memo_get()'s failure, out of line: its message buffer is not on the
 * stack of every GET. */
static __attribute__((noinline, cold)) int memo_unset(struct machine *mc,
						      uint64_t idx)
{
	char what[64];

	snprintf(what, sizeof(what), "memo index %llu is not set",
		 (unsigned long long)idx);
	return fail(mc, -EINVAL, what);
}

static inline int memo_get(struct machine *mc, uint64_t idx)
{
	size_t slot = memo_slot(mc, idx);

	if (slot == SIZE_MAX || !mc->memo[slot])
		return memo_unset(mc, idx);
	return push(mc, mc->memo[slot]);
}

/* An int or bool; those in [0, SHARED_INTS) and bools are shared. */
static int push_int(struct machine *mc, enum pk_type t, int64_t i)
{
	struct pk_value **shared = NULL, *v;

	if (t == PK_BOOL)
		shared = &mc->bools[i != 0];
	else if (i >= 0 && i < SHARED_INTS)
		shared = &mc->ints[i];
	if (shared && *shared)
		return push(mc, *shared);
	v = shared ? new_kept(mc, t) : new_value(mc, t);
	if (v)
		v->u.i = i;
	if (shared && v)
		*shared = v;
	return push(mc, v);
}

static int push_str(struct machine *mc, unsigned lenbytes)
{
	const uint8_t *q = NULL, *s = NULL;
	struct pk_value *v;
	uint64_t n;
	int rc;

	rc = take(mc, lenbytes, &q);
	if (rc)
		return rc;
	n = le(q, lenbytes);
	if (n > (uint64_t)(mc->end - mc->p) || n > UINT32_MAX)
		return fail(mc, -EINVAL, "string runs past the end");
	rc = take(mc, (size_t)n, &s);
	if (rc)
		return rc;
	v = new_value(mc, PK_STR);
	if (!v)
		return oom(mc);
	mc->nstr++;
	v->u.str.s = (const char *)s;
	v->u.str.len = (uint32_t)n;
	return push(mc, v);
}

/* GLOBAL's "module\nname\n" text arguments. */
static int read_line(struct machine *mc, const char **s, size_t *len)
{
	const uint8_t *nl = memchr(mc->p, '\n', (size_t)(mc->end - mc->p));

	if (!nl)
		return fail(mc, -EINVAL, "unterminated GLOBAL name");
	*s = (const char *)mc->p;
	*len = (size_t)(nl - mc->p);
	mc->p = nl + 1;
	return 0;
}

/* Execute one opcode.  Returns 1 at STOP, 0 to go on, or -errno. */
static int step(struct machine *mc, struct pk_value **root)
{
	const uint8_t *q = NULL;
	struct pk_value *a = NULL, *b = NULL;
	const char *s1 = NULL, *s2 = NULL;
	size_t l1 = 0, l2 = 0, at = 0;
	int rc;

	mc->op_at = (size_t)(mc->p - mc->buf);
	rc = take(mc, 1, &q);
	if (rc)
		return fail(mc, -EINVAL, "pickle ends without STOP");
	mc->op = q[0];
	switch (mc->op) {
	case 0x80:	/* PROTO */
		if ((rc = take(mc, 1, &q)))
			return rc;
		if (q[0] < 2 || q[0] > 5)
			return fail(mc, -EINVAL, "unsupported protocol");
		return 0;
	case 0x95:	/* FRAME: a hint; the frame must fit */
		if ((rc = take(mc, 8, &q)))
			return rc;
		if (le(q, 8) > (uint64_t)(mc->end - mc->p))
			return fail(mc, -EINVAL, "frame runs past the end");
		return 0;
	case '.':	/* STOP */
		if (mc->nmarks || mc->sp != 1)
			return fail(mc, -EINVAL, "stack not a single value at STOP");
		*root = mc->stack[0];
		return 1;
	case '(':	/* MARK */
		if (mc->nmarks == mc->marks_cap) {
			size_t ncap = mc->marks_cap ? mc->marks_cap * 2 : 16;
			size_t *nm = realloc(mc->marks, ncap * sizeof(*nm));
			struct arena_pos *na;

			if (!nm)
				return oom(mc);
			mc->marks = nm;
			na = realloc(mc->amarks, ncap * sizeof(*na));
			if (!na)
				return oom(mc);
			mc->amarks = na;
			mc->marks_cap = ncap;
		}
		mc->amarks[mc->nmarks] = arena_top(mc->a);
		mc->amarks[mc->nmarks].in_at = mc->op_at;
		mc->amarks[mc->nmarks].nstr = mc->nstr;
		mc->marks[mc->nmarks++] = mc->sp;
		return 0;
	case 0x94:	/* MEMOIZE */
		return memo_put(mc, mc->nmemo);
	case 'q':
		if ((rc = take(mc, 1, &q)))
			return rc;
		return memo_put(mc, q[0]);
	case 'r':
		if ((rc = take(mc, 4, &q)))
			return rc;
		return memo_put(mc, le(q, 4));
	case 'h':
		if ((rc = take(mc, 1, &q)))
			return rc;
		return memo_get(mc, q[0]);
	case 'j':
		if ((rc = take(mc, 4, &q)))
			return rc;
		return memo_get(mc, le(q, 4));
	case 0x8c:
		return push_str(mc, 1);
	case 'X':
		return push_str(mc, 4);
	case 0x8d:
		return push_str(mc, 8);
	case 'K':
		if ((rc = take(mc, 1, &q)))
			return rc;
		return push_int(mc, PK_INT, q[0]);
	case 'M':
		if ((rc = take(mc, 2, &q)))
			return rc;
		return push_int(mc, PK_INT, (int64_t)le(q, 2));
	case 'J':
		if ((rc = take(mc, 4, &q)))
			return rc;
		return push_int(mc, PK_INT, (int32_t)(uint32_t)le(q, 4));
	case 0x8a: {	/* LONG1: little-endian two's complement */
		uint64_t v;
		unsigned n;

		if ((rc = take(mc, 1, &q)))
			return rc;
		n = q[0];
		if (n > 8)
			return fail(mc, -EINVAL, "integer wider than 64 bits");
		if ((rc = take(mc, n, &q)))
			return rc;
		v = le(q, n);
		if (n && n < 8 && (q[n - 1] & 0x80))
			v |= ~(uint64_t)0 << (8 * n);
		return push_int(mc, PK_INT, (int64_t)v);
	}
	case 'N':
		if (!mc->none)
			mc->none = new_kept(mc, PK_NONE);
		return push(mc, mc->none);
	case 0x89:
	case 0x88:
		return push_int(mc, PK_BOOL, mc->op == 0x88);
	case ')':
		return collect(mc, PK_TUPLE, mc->sp);
	case 0x85:
	case 0x86:
	case 0x87:
		l1 = (size_t)(mc->op - 0x84);
		if (mc->sp < floor_sp(mc) + l1)
			return fail(mc, -EINVAL, "stack underflow");
		return collect(mc, PK_TUPLE, mc->sp - l1);
	case 't':
		if ((rc = pop_mark(mc, &at)))
			return rc;
		return collect(mc, PK_TUPLE, at);
	case ']':
		return push(mc, new_value(mc, PK_LIST));
	case '}':
		return push(mc, new_value(mc, PK_DICT));
	case 'a':
		if (mc->sp < floor_sp(mc) + 2)
			return fail(mc, -EINVAL, "stack underflow");
		return extend(mc, mc->sp - 1, PK_LIST, NULL);
	case 's':
		if (mc->sp < floor_sp(mc) + 3)
			return fail(mc, -EINVAL, "stack underflow");
		return extend(mc, mc->sp - 2, PK_DICT, NULL);
	case 'e':
	case 'u':
		if ((rc = pop_mark(mc, &at)))
			return rc;
		return extend(mc, at, mc->op == 'e' ? PK_LIST : PK_DICT,
			      &mc->amarks[mc->nmarks]);
	case 0x93:	/* STACK_GLOBAL */
		if ((rc = pop(mc, &b)) || (rc = pop(mc, &a)))
			return rc;
		if (a->type != PK_STR || b->type != PK_STR)
			return fail(mc, -EINVAL, "module or name is not a string");
		return global(mc, a->u.str.s, a->u.str.len, b->u.str.s,
			      b->u.str.len);
	case 'c':
		if ((rc = read_line(mc, &s1, &l1)) ||
		    (rc = read_line(mc, &s2, &l2)))
			return rc;
		return global(mc, s1, l1, s2, l2);
	case 0x81:	/* NEWOBJ */
	case 'R':	/* REDUCE */
		return call(mc, 0);
	case 'Q':	/* BINPERSID */
		return call(mc, 1);
	case 'b':	/* BUILD */
		if ((rc = pop(mc, &b)))
			return rc;
		if (mc->sp <= floor_sp(mc))
			return fail(mc, -EINVAL, "stack underflow");
		a = mc->stack[mc->sp - 1];
		if (a->type != PK_CALL || a->u.call.state)
			return fail(mc, -EINVAL, "BUILD of something not a new object");
		a->u.call.state = b;
		if (a->flags & PK_PINNED)	/* see extend() */
			keep_all(mc);
		return 0;
	default:
		return fail(mc, -EINVAL, "opcode not supported");
	}
}

/* scan_memo()'s view of an opcode: W(n) for a fixed-width argument of n
 * bytes (0-8), a SCAN_ kind for a variable one, and 0 (SCAN_END) for
 * STOP and every opcode that step() refuses.  Must agree with step(). */
enum {
	SCAN_END = 0,
	SCAN_GET1 = 16,		/* BINGET: a 1-byte memo index */
	SCAN_GET4,		/* LONG_BINGET: a 4-byte one */
	SCAN_COUNTED1,		/* a length of 1 byte, then its bytes */
	SCAN_COUNTED4,
	SCAN_COUNTED8,
	SCAN_LINES,		/* GLOBAL: two lines */
};
#define W(n) ((n) + 1)

static const uint8_t scan_arg[256] = {
	[0x80] = W(1), ['q'] = W(1), ['K'] = W(1),
	['r'] = W(4), ['J'] = W(4), ['M'] = W(2), [0x95] = W(8),
	['h'] = SCAN_GET1, ['j'] = SCAN_GET4,
	[0x8c] = SCAN_COUNTED1, [0x8a] = SCAN_COUNTED1,
	['X'] = SCAN_COUNTED4, [0x8d] = SCAN_COUNTED8,
	['c'] = SCAN_LINES,
	['('] = W(0), [0x94] = W(0), ['N'] = W(0), [0x88] = W(0),
	[0x89] = W(0), [')'] = W(0), [0x85] = W(0), [0x86] = W(0),
	[0x87] = W(0), ['t'] = W(0), [']'] = W(0), ['}'] = W(0),
	['a'] = W(0), ['s'] = W(0), ['e'] = W(0), ['u'] = W(0),
	[0x93] = W(0), [0x81] = W(0), ['R'] = W(0), ['Q'] = W(0),
	['b'] = W(0),
};
#undef W

/*
 * The memo indices that a GET reads, into mc->read and mc->rank, and a
 * slot for each in mc->memo: a pass over the opcodes that decodes their
 * arguments as step() does, and stops where step() would fail (a
 * truncated argument, an opcode it refuses) or at STOP, so every GET
 * that step() runs was seen here.
 */
static int scan_memo(struct machine *mc)
{
	const uint8_t *p = mc->buf, *end = mc->end, *nl;
	uint64_t n, idx;
	size_t words, w, total = 0;
	unsigned k;

	/* memo_put() refuses indices past the bytes read: at most len. */
	if ((size_t)(end - p) >= UINT32_MAX)
		return -E2BIG;
	mc->nbits = (size_t)(end - p) + 1;
	words = mc->nbits / 64 + 1;
	mc->read = calloc(words, sizeof(*mc->read));
	mc->rank = calloc(words, sizeof(*mc->rank));
	if (!mc->read || !mc->rank)
		return -ENOMEM;
	while (p < end) {
		uint8_t op = *p++;
		unsigned arg = scan_arg[op];
		size_t left = (size_t)(end - p);

		if (arg - 1 < SCAN_GET1 - 1) {	/* a fixed-width argument */
			if (arg - 1 > left)
				goto out_rank;
			p += arg - 1;
			continue;
		}
		switch (arg) {
		case SCAN_GET1:
		case SCAN_GET4:
			k = arg == SCAN_GET1 ? 1 : 4;
			if (left < k)
				goto out_rank;
			idx = le(p, k);
			p += k;
			if (idx < mc->nbits)
				mc->read[idx / 64] |= 1ull << (idx % 64);
			break;
		case SCAN_COUNTED1:
		case SCAN_COUNTED4:
		case SCAN_COUNTED8:
			k = arg == SCAN_COUNTED1 ? 1 : arg == SCAN_COUNTED4 ? 4 : 8;
			if (left < k)
				goto out_rank;
			n = le(p, k);
			if (n > left - k)
				goto out_rank;
			p += k + n;	/* the length, then its bytes */
			break;
		case SCAN_LINES:
			for (k = 0; k < 2; k++) {
				nl = memchr(p, '\n', (size_t)(end - p));
				if (!nl)
					goto out_rank;
				p = nl + 1;
			}
			break;
		default:	/* STOP, or an opcode step() refuses */
			goto out_rank;
		}
	}
out_rank:
	for (w = 0; w < words; w++) {
		mc->rank[w] = (uint32_t)total;
		total += (size_t)bits_set(mc->read[w]);
	}
	mc->nread = total;
	mc->memo = calloc(total ? total : 1, sizeof(*mc->memo));
	return mc->memo ? 0 : -ENOMEM;
}

int pk_load(const uint8_t *buf, size_t len, const struct pk_global *table,
	    size_t n, const char *name, struct pk_value **root,
	    struct pk_arena **arena, char *err, size_t errlen)
{
	return pk_load_stream(buf, len, table, n, NULL, name, root, arena,
			      err, errlen);
}

int pk_load_stream(const uint8_t *buf, size_t len,
		   const struct pk_global *table, size_t n,
		   const struct pk_stream *st, const char *name,
		   struct pk_value **root, struct pk_arena **arena, char *err,
		   size_t errlen)
{
	struct machine mc = { 0 };
	int rc;

	*root = NULL;
	*arena = NULL;
	mc.buf = mc.p = buf;
	mc.end = buf + len;
	mc.name = name;
	mc.table = table;
	mc.ntable = n;
	mc.err = err;
	mc.errlen = errlen;
	mc.st = st && st->nroles ? st : NULL;
	mc.spent = buf;
	mc.a = calloc(1, sizeof(*mc.a));
	if (!mc.a)
		return ckpt_errf(err, errlen, -ENOMEM, "%s: out of memory",
				 name);
	mc.a->cap = len > (SIZE_MAX - ARENA_MIN_CAP) / ARENA_PER_BYTE ?
		    SIZE_MAX : ARENA_MIN_CAP + len * ARENA_PER_BYTE;
	rc = scan_memo(&mc);
	if (rc) {
		rc = ckpt_errf(err, errlen, rc, rc == -E2BIG ?
			       "%s: pickle of 4 GiB or more" :
			       "%s: out of memory", name);
		goto out_machine;
	}
	while ((rc = step(&mc, root)) == 0)
		;
	if (rc == 1 && mc.p != mc.end)
		rc = ckpt_errf(err, errlen, -EINVAL,
			       "%s: %zu bytes after the pickle's STOP", name,
			       (size_t)(mc.end - mc.p));
	else if (rc == 1)
		rc = 0;
out_machine:
	free(mc.stack);
	free(mc.marks);
	free(mc.amarks);
	free(mc.memo);
	free(mc.read);
	free(mc.rank);
	if (rc) {
		pk_free(mc.a);
		*root = NULL;
		return rc;
	}
	*arena = mc.a;
	return 0;
}

bool pk_is_call(const struct pk_value *v, int id)
{
	return v && v->type == PK_CALL && v->id == id;
}
