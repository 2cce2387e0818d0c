/* SPDX-License-Identifier: MIT */
/*
 * Writing msgpack images (the native metadata that the torch indexer and
 * the rank-local merge produce) with msgpack-c's packer into a growing
 * buffer that remembers a failed allocation.  Writing is not a trust
 * boundary; reading goes through the bounded cursor (mpcursor.h).
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
	msgpack_packer pk;	/* pack into this */
	bool failed;		/* out of memory at some write */
};

/* Start an empty image; release with ckpt_mpout_destroy(). */
void ckpt_mpout_init(struct ckpt_mpout *o);
void ckpt_mpout_destroy(struct ckpt_mpout *o);

/* Hand the image over: 0 with *buf (caller frees with free()) and *len,
 * or -ENOMEM when any write failed.  o is then empty. */
int ckpt_mpout_finish(struct ckpt_mpout *o, uint8_t **buf, size_t *len);

/* A NUL-terminated string (inline: a literal's length is known when it
 * is compiled), a bool, an array of n unsigned dims. */
static inline void ckpt_pack_cstr(msgpack_packer *pk, const char *s)
{
	msgpack_pack_str_with_body(pk, s, strlen(s));
}

void ckpt_pack_bool(msgpack_packer *pk, bool v);
void ckpt_pack_dims(msgpack_packer *pk, const uint64_t *d, unsigned n);

#endif
