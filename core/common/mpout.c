/* SPDX-License-Identifier: MIT */
/* Writing msgpack images with msgpack-c: see mpout.h. */
#include "common/mpout.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int write_cb(void *data, const char *buf, size_t len)
{
	struct ckpt_mpout *o = data;

	if (o->failed || msgpack_sbuffer_write(&o->sb, buf, len)) {
		o->failed = true;
		return -1;
	}
	return 0;
}

void ckpt_mpout_init(struct ckpt_mpout *o)
{
	msgpack_sbuffer_init(&o->sb);
	msgpack_packer_init(&o->pk, o, write_cb);
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

void ckpt_pack_bool(msgpack_packer *pk, bool v)
{
	if (v)
		msgpack_pack_true(pk);
	else
		msgpack_pack_false(pk);
}

void ckpt_pack_dims(msgpack_packer *pk, const uint64_t *d, unsigned n)
{
	unsigned i;

	msgpack_pack_array(pk, n);
	for (i = 0; i < n; i++)
		msgpack_pack_uint64(pk, d[i]);
}
