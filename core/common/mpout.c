/* SPDX-License-Identifier: MIT */
/* Writing msgpack images with msgpack-c's encoding: see mpout.h. */
#include "common/mpout.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int ckpt_mpout_append_slow(struct ckpt_mpout *o, const void *buf,
			   size_t len)
{
	if (o->failed || msgpack_sbuffer_write(&o->sb, buf, len)) {
		o->failed = true;
		return -1;
	}
	return 0;
}

void ckpt_mpout_init(struct ckpt_mpout *o)
{
	msgpack_sbuffer_init(&o->sb);
	o->failed = false;
}

void ckpt_mpout_destroy(struct ckpt_mpout *o)
{
	msgpack_sbuffer_destroy(&o->sb);
}

int ckpt_mpout_finish(struct ckpt_mpout *o, uint8_t **buf, size_t *len)
{
	if (o->failed)
		return -ENOMEM;
	*len = o->sb.size;
	*buf = (uint8_t *)msgpack_sbuffer_release(&o->sb);
	if (!*buf) {		/* an empty image */
		*buf = malloc(1);
		if (!*buf)
			return -ENOMEM;
	}
	return 0;
}

void ckpt_pack_bool(struct ckpt_mpout *o, bool v)
{
	if (v)
		ckpt_mp_true(o);
	else
		ckpt_mp_false(o);
}

void ckpt_pack_dims(struct ckpt_mpout *o, const uint64_t *d, unsigned n)
{
	unsigned i;

	ckpt_mp_array(o, n);
	for (i = 0; i < n; i++)
		ckpt_mp_uint64(o, d[i]);
}
