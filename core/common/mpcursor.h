/* SPDX-License-Identifier: MIT */
/*
 * A bounds-checked, allocation-free msgpack reader for the metadata.
 *
 * msgpack-c's unpacker builds an object tree whose size follows the counts
 * written in the input, so a 5-byte array header can ask for gigabytes.
 * This cursor never allocates: every container count is checked against
 * the bytes that remain (each element takes at least one byte), strings
 * point into the caller's buffer and are not NUL-terminated.
 */
#ifndef CKPT_MPCURSOR_H
#define CKPT_MPCURSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct mp_cursor {
	const uint8_t *p;	/* next byte to read */
	const uint8_t *end;	/* one past the last byte */
};

/* Each reader returns 0 and advances, -EBADMSG when the input ends early,
 * or -EPROTO when the next value has another type (the cursor does not
 * move then).  Borrowed pointers stay valid while the buffer does. */
int mp_read_map(struct mp_cursor *c, uint32_t *n);
int mp_read_array(struct mp_cursor *c, uint32_t *n);
int mp_read_str(struct mp_cursor *c, const char **s, uint32_t *len);
int mp_read_bin(struct mp_cursor *c, const uint8_t **b, uint32_t *len);
int mp_read_uint(struct mp_cursor *c, uint64_t *v);	/* int >= 0 too */
int mp_read_bool(struct mp_cursor *c, bool *v);

/* True (and consumed) when the next value is nil. */
bool mp_take_nil(struct mp_cursor *c);

/* True when the next value is a (signed or unsigned) integer / string. */
bool mp_is_int(const struct mp_cursor *c);
bool mp_is_str(const struct mp_cursor *c);

/* Read any integer as int64 (uint64 above INT64_MAX is -ERANGE). */
int mp_read_int(struct mp_cursor *c, int64_t *v);

/* Skip one complete value, iteratively (no recursion whatever the depth).
 * Returns 0, or -EBADMSG on truncated or malformed input. */
int mp_skip(struct mp_cursor *c);

/* A short name of the next value's type, for messages ("map", "str", ...,
 * "end of data"). Static storage. */
const char *mp_type_name(const struct mp_cursor *c);

static inline size_t mp_left(const struct mp_cursor *c)
{
	return (size_t)(c->end - c->p);
}

#endif
