/* SPDX-License-Identifier: MIT */
/*
 * A small msgpack writer into a growing heap buffer: the native metadata
 * image that `ckptfs index` writes and that torch checkpoints are turned
 * into at mount.  Errors are sticky: after an allocation failure every
 * call does nothing and mpw_finish() reports -ENOMEM.
 */
#ifndef CKPT_MPWRITE_H
#define CKPT_MPWRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct mp_writer {
	uint8_t *buf;		/* owned until mpw_finish() hands it over */
	size_t len, cap;
	bool failed;
};

void mpw_map(struct mp_writer *w, uint32_t n);
void mpw_array(struct mp_writer *w, uint32_t n);
void mpw_str(struct mp_writer *w, const char *s, size_t len);
void mpw_cstr(struct mp_writer *w, const char *s);
void mpw_uint(struct mp_writer *w, uint64_t v);
void mpw_int(struct mp_writer *w, int64_t v);
void mpw_nil(struct mp_writer *w);
void mpw_bool(struct mp_writer *w, bool v);

/* Hand the image to the caller (free() it) and reset w.  Returns 0, or
 * -ENOMEM if any write failed (nothing is handed over then). */
int mpw_finish(struct mp_writer *w, uint8_t **buf, size_t *len);

/* Free whatever w holds. */
void mpw_discard(struct mp_writer *w);

#endif
