/* SPDX-License-Identifier: MIT */
/*
 * A strict pickle reader that never executes anything.
 *
 * It runs a subset of the pickle machine (protocols 2-5, the opcodes that
 * torch's checkpoint files use) and builds a tree of values.  A global is
 * allowed only when the caller's table names it; anything else is refused
 * at the GLOBAL / STACK_GLOBAL opcode.  Calls (REDUCE, NEWOBJ), BUILD and
 * persistent ids are not performed: they become PK_CALL nodes recording the
 * callable's table id, the arguments and the state, for the caller to
 * interpret.
 *
 * Memory is one arena, bounded by a multiple of the input's size, and
 * freed at once.  Values are 32 bytes; None, booleans, the empty tuple and
 * the integers 0-1023 are shared (never written after they are built), and
 * only the memo slots that a GET reads are kept (a first pass over the
 * opcodes finds them), and a pk_global.dims call (torch.Size) is one
 * PK_DIMS value: a large .metadata costs about five times its size rather
 * than fifteen (59 MB for a 12 MB one of 81,000 chunks).  A caller that
 * reads a large dict item by item streams it instead (pk_load_stream()):
 * its items are handed over a batch at a time and not kept, so the whole
 * tree is never built.  The machine is a loop over an explicit stack, so
 * nesting depth costs no C stack.  Values may share children (memo references) and
 * may even be cyclic (a list appended to itself), so callers must walk them
 * by a fixed schema, never by unbounded recursion.
 */
#ifndef CKPT_PICKLE_H
#define CKPT_PICKLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

enum pk_type {
	PK_NONE,
	PK_BOOL,
	PK_INT,
	PK_STR,		/* UTF-8 as stored, not NUL-terminated */
	PK_TUPLE,
	PK_LIST,
	PK_DICT,	/* items hold key, value, key, value, ... */
	PK_GLOBAL,	/* an allowed global: id from the table */
	PK_CALL,	/* callable id applied to args (+ BUILD state) */
	PK_DIMS,	/* a pk_global.dims callable of one tuple of n
			 * non-negative ints (torch.Size((2, 3))): u.dims */
};

/* pk_value.flags */
#define PK_PINNED 1	/* shared, or in a memo slot a GET reads */
#define PK_DIMS_GLOBAL 2	/* PK_GLOBAL of a pk_global.dims entry */
#define PK_KEPT 4	/* in the arena's kept blocks (never released) */
#define PK_STREAMED 8	/* PK_DICT whose items went to a pk_stream: n is
			 * 0, id is the stream's role and cap its number */
#define PK_UNSTREAMED 16	/* PK_DICT a pk_stream declined: kept whole */

/* The callable id of a BINPERSID node (args = the persistent id). */
#define PK_PERSID_ID (-1)

/* The most dims of a PK_DIMS value: a longer tuple stays a PK_CALL. */
#define PK_DIMS_MAX 16

struct pk_value {
	uint8_t type;		/* enum pk_type */
	uint8_t flags;		/* PK_PINNED, PK_DIMS_GLOBAL */
	int32_t id;		/* PK_CALL: callable table id or PK_PERSID_ID */
	uint32_t n;		/* items (tuple, list; dict: 2 x pairs) */
	uint32_t cap;
	union {
		int64_t i;	/* PK_BOOL, PK_INT */
		struct {
			const char *s;	/* into the input buffer */
			uint32_t len;
		} str;
		struct pk_value **items;
		uint64_t *dims;	/* PK_DIMS: n of them */
		struct {
			struct pk_value *args;	/* PK_TUPLE or any */
			struct pk_value *state;	/* NULL until BUILD */
		} call;
		int global;	/* PK_GLOBAL: table id */
	} u;
};

/* One allowed global.  module ending in '*' matches any module with that
 * prefix ("torch.distributed.*"): classes are matched by name. */
struct pk_global {
	const char *module;
	const char *name;
	int id;			/* >= 0 */
	/* A call of it (REDUCE) on one tuple of non-negative ints becomes
	 * one PK_DIMS value, and the tuples and ints go back to the
	 * machine: a torch.Size costs 32 + 8 x dims bytes. */
	bool dims;
};

struct pk_arena;

/*
 * Run the pickle in buf[0, len) with the globals in table[0, n).  On
 * success sets *root to the value STOP returned and *arena to the memory
 * holding it (free with pk_free(); values point into buf, which the caller
 * keeps alive).  Returns 0, or -EINVAL / -ENOMEM / -E2BIG with the reason
 * (opcode, byte offset) in err, prefixed by name.
 */
int pk_load(const uint8_t *buf, size_t len, const struct pk_global *table,
	    size_t n, const char *name, struct pk_value **root,
	    struct pk_arena **arena, char *err, size_t errlen);

/*
 * Streaming: the items of a dict that is the value of a key named
 * roles[r] in the state (BUILD) of an object of callable id parent_id are
 * handed to pairs(ctx, r, dict_id, kv, npairs) as each SETITEM / SETITEMS
 * fills them (kv: key, value, key, value, ...), and are not kept: the dict
 * is marked PK_STREAMED and stays empty.  dict_id is that dict's own
 * number (pk_stream_id()), never reused within a load, so the caller can
 * tell the dict it saw from another.  The values a batch built are
 * released after the call unless something kept outside it still points
 * at them, so a dict of a million items costs the memory of one batch.
 * The kv values are valid only during the call, and strings in them point
 * into buf.  pairs returns 0; 1 to decline that dict for good (it is then
 * built as usual, PK_UNSTREAMED); or -errno with the reason in the
 * machine's err buffer.
 *
 * spend: the caller is done with buf once the load returns, so buf's
 * whole pages behind a released batch are given back to the system
 * (madvise(MADV_DONTNEED); poisoned under ASan) as the load goes, and
 * the pickle and what the caller builds from it are not held whole at
 * once.  buf must then be writable memory of the caller's (malloc()'s),
 * whose bytes are undefined after the load: the caller may only free it.
 * Strings the memo keeps across batches are copied to the arena; the
 * values the load returns point only into pages it kept.
 */
struct pk_stream {
	int parent_id;
	const char *const *roles;
	size_t nroles;
	int (*pairs)(void *ctx, unsigned role, uint32_t dict_id,
		     const struct pk_value *const *kv, size_t npairs);
	void *ctx;
	bool spend;
};

/* A streamed dict's number (as pairs() was given it), else 0. */
static inline uint32_t pk_stream_id(const struct pk_value *v)
{
	return v && v->type == PK_DICT && (v->flags & PK_STREAMED) ? v->cap :
									0;
}

/* pk_load(), streaming the dicts that st names (st may be NULL). */
int pk_load_stream(const uint8_t *buf, size_t len,
		   const struct pk_global *table, size_t n,
		   const struct pk_stream *st, const char *name,
		   struct pk_value **root, struct pk_arena **arena, char *err,
		   size_t errlen);

void pk_free(struct pk_arena *a);

/* Bytes the arena holds from the allocator (its blocks' sizes). */
size_t pk_arena_bytes(const struct pk_arena *a);

/* Helpers for schema walks.  All return NULL / false on a type mismatch.
 * Inline, so that a literal's length is known when it is compiled. */
static inline bool pk_str_is(const struct pk_value *v, const char *lit)
{
	size_t n = strlen(lit);

	return v && v->type == PK_STR && v->u.str.len == n &&
	       memcmp(v->u.str.s, lit, n) == 0;
}

static inline const struct pk_value *pk_dict_get(const struct pk_value *dict,
						 const char *key)
{
	uint32_t i;

	if (!dict || dict->type != PK_DICT)
		return NULL;
	for (i = 0; i + 1 < dict->n; i += 2) {
		if (pk_str_is(dict->u.items[i], key))
			return dict->u.items[i + 1];
	}
	return NULL;
}

/* A call node of callable id with a state (BUILD) or args; NULL if not. */
bool pk_is_call(const struct pk_value *v, int id);

#endif
