/* SPDX-License-Identifier: MIT */
/*
 * Writing msgpack images (the native metadata that the torch indexer and
 * the rank-local merge produce) into a growing buffer that remembers a
 * failed allocation.  The encoding is msgpack-c's own (its pack template,
 * pack_template.h), instantiated here as ckpt_mp_*() functions that write
 * straight into the buffer: msgpack-c's packer calls a callback for each
 * piece of each value, which cost more than the indexer's unpickling of a
 * large .metadata (issue 38).  Writing is not a trust boundary; reading
 * goes through the bounded cursor (mpcursor.h).
 */
#ifndef CKPT_MPOUT_H
#define CKPT_MPOUT_H

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct ckpt_mpout {
	msgpack_sbuffer sb;
	bool failed;		/* out of memory at some write */
};

/* Start an empty image; release with ckpt_mpout_destroy(). */
void ckpt_mpout_init(struct ckpt_mpout *o);
void ckpt_mpout_destroy(struct ckpt_mpout *o);

/* Hand the image over: 0 with *buf (caller frees with free()) and *len,
 * o then empty; or -ENOMEM when any write failed, o still to be
 * destroyed. */
int ckpt_mpout_finish(struct ckpt_mpout *o, uint8_t **buf, size_t *len);

/* Append len bytes where the buffer must grow first (or len > 16):
 * 0, or -1 with o->failed set. */
int ckpt_mpout_append_slow(struct ckpt_mpout *o, const void *buf,
			   size_t len);

/* Append len bytes to o: 0, or -1 (o->failed) when out of memory.  The
 * packer writes a value's head and short strings a few bytes at a time,
 * so those are copied with fixed-size copies the compiler inlines. */
static inline int ckpt_mpout_append(struct ckpt_mpout *o, const void *buf,
				    size_t len)
{
	msgpack_sbuffer *sb = &o->sb;
	const char *s = buf;
	char *d;

	if (!len)	/* no bytes: data may still be NULL */
		return o->failed ? -1 : 0;
	if (o->failed || len > 16 || sb->alloc - sb->size < len)
		return ckpt_mpout_append_slow(o, buf, len);
	d = sb->data + sb->size;
	if (len >= 8) {
		memcpy(d, s, 8);
		memcpy(d + len - 8, s + len - 8, 8);
	} else if (len >= 4) {
		memcpy(d, s, 4);
		memcpy(d + len - 4, s + len - 4, 4);
	} else if (len >= 2) {
		memcpy(d, s, 2);
		memcpy(d + len - 2, s + len - 2, 2);
	} else {
		*d = *s;
	}
	sb->size += len;
	return 0;
}

/* ckpt_mp_uint64(o, v), ckpt_mp_map(o, n), ckpt_mp_array(o, n),
 * ckpt_mp_str(o, len), ckpt_mp_str_body(o, s, len), ckpt_mp_nil(o),
 * ckpt_mp_true(o), ckpt_mp_bin(o, len), ckpt_mp_fix_uint8(o, v), ...:
 * msgpack-c's msgpack_pack_*() with o for the packer.  The template's
 * timestamp calls msgpack_pack_ext() by name: it is pointed at ours.
 * Checked with msgpack-c 4.0: a template that called another
 * msgpack_pack_*() by name would not compile (the packer's type), not
 * encode differently. */
#define msgpack_pack_inline_func(name) static inline int ckpt_mp ## name
#define msgpack_pack_inline_func_cint(name) static inline int ckpt_mp ## name
#define msgpack_pack_inline_func_fixint(name) \
	static inline int ckpt_mp_fix ## name
#define msgpack_pack_user struct ckpt_mpout *
#define msgpack_pack_append_buffer(user, buf, len) \
	return ckpt_mpout_append(user, buf, len)
#define msgpack_pack_ext(x, l, type) ckpt_mp_ext(x, l, type)
#include <msgpack/pack_template.h>
#undef msgpack_pack_ext

static inline int ckpt_mp_str_with_body(struct ckpt_mpout *o, const void *s,
					size_t len)
{
	int rc = ckpt_mp_str(o, len);

	return rc ? rc : ckpt_mp_str_body(o, s, len);
}

/* A NUL-terminated string (always inline: a literal's length is known
 * when it is compiled), a bool, an array of n unsigned dims. */
__attribute__((always_inline))
static inline void ckpt_pack_cstr(struct ckpt_mpout *o, const char *s)
{
	ckpt_mp_str_with_body(o, s, strlen(s));
}

void ckpt_pack_bool(struct ckpt_mpout *o, bool v);
void ckpt_pack_dims(struct ckpt_mpout *o, const uint64_t *d, unsigned n);

#endif
