/* SPDX-License-Identifier: MIT */
/*
 * A small strict JSON parser for untrusted headers (safetensors): the
 * whole text into a tree of nodes in one allocation, bounded in depth and
 * node count, with byte offsets in every error.  RFC 8259 values only;
 * numbers must be integers that fit 64 bits (safetensors needs no more),
 * strings must be valid UTF-8 with no lone surrogate escape (\ud800) and
 * are kept as they are written (escapes decoded on demand by
 * ckpt_json_str(), surrogate pairs into one 4-byte UTF-8 character).
 */
#ifndef CKPT_JSON_H
#define CKPT_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CKPT_JSON_MAX_DEPTH 64

enum ckpt_json_type {
	CKPT_JSON_NULL,
	CKPT_JSON_BOOL,
	CKPT_JSON_INT,		/* a non-negative integer < 2^64 */
	CKPT_JSON_NEG,		/* a negative integer (value is -v) */
	CKPT_JSON_STR,
	CKPT_JSON_ARR,
	CKPT_JSON_OBJ,
};

struct ckpt_json {
	uint8_t type;		/* enum ckpt_json_type */
	bool b;
	uint32_t n;		/* ARR / OBJ: children (OBJ: key, value pairs
				 * count as 2 each) */
	uint32_t first;		/* ARR / OBJ: index of the first child */
	uint32_t next;		/* next sibling, or 0 */
	uint64_t v;		/* INT / NEG */
	const char *s;		/* STR: raw text between the quotes */
	uint32_t len;
	uint32_t at;		/* byte offset in the text, for messages */
};

/* A parsed document: nodes[0] is the root.  Free with ckpt_json_free(). */
struct ckpt_json_doc {
	struct ckpt_json *nodes;
	uint32_t nnodes;
};

/*
 * Parse len bytes at text (not NUL-terminated, kept by the caller while
 * the doc is used: strings point into it).  name prefixes messages.
 * Returns 0, or -EINVAL with "NAME: byte N: reason" in err.
 */
int ckpt_json_parse(const char *text, size_t len, const char *name,
		    struct ckpt_json_doc *doc, char *err, size_t errlen);
void ckpt_json_free(struct ckpt_json_doc *doc);

/* The value of key in object o (keys compared after decoding), or NULL. */
const struct ckpt_json *ckpt_json_get(const struct ckpt_json_doc *doc,
				      const struct ckpt_json *o,
				      const char *key);

/* The i-th child of an array or object (objects: key, value, ...). */
const struct ckpt_json *ckpt_json_at(const struct ckpt_json_doc *doc,
				     const struct ckpt_json *a, uint32_t i);

/* Decode string node s into out (cap bytes, NUL-terminated): its length,
 * or -1 when it does not fit or holds \u0000. */
long ckpt_json_str(const struct ckpt_json *s, char *out, size_t cap);

/*
 * The first key of object o that is written twice (compared decoded; the
 * later of the two), in *dup: 1 when there is one, 0 when none (*dup
 * NULL), -ENOMEM.  O(n log n).  RFC 8259 leaves repeated names to the
 * reader: Python's json keeps the last, a first-match lookup the first,
 * so an untrusted header with one is refused rather than read either way.
 */
int ckpt_json_find_dup(const struct ckpt_json_doc *doc,
		       const struct ckpt_json *o, const struct ckpt_json **dup);

#endif
