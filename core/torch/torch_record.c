/* SPDX-License-Identifier: MIT */
/*
 * data.pkl of a saved tensor, as torch writes it:
 *   _rebuild_tensor_v2(BINPERSID(('storage', torch.FloatStorage, '0',
 *                                 'cpu', numel)),
 *                      storage_offset, size, stride, requires_grad,
 *                      OrderedDict() [, metadata])
 * or, for the dtypes torch 2.1+ saves without a typed storage class
 * (float8), the same with an untyped storage counted in bytes and the dtype:
 *   _rebuild_tensor_v3(BINPERSID(('storage', torch.UntypedStorage, '0',
 *                                 'cpu', nbytes)),
 *                      storage_offset, size, stride, requires_grad,
 *                      OrderedDict(), torch.float8_e4m3fn [, metadata])
 * Nothing else is accepted.
 */
#include "torch/torch_record.h"

#include <errno.h>
#include <stdbool.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errbuf.h"
#include "common/strides.h"
#include "torch/pickle.h"
#include "torch/torch_globals.h"

static int bad(const char *where, char *err, size_t errlen, const char *what)
{
	return ckpt_errf(err, errlen, -EINVAL, "%s: data.pkl: %s", where, what);
}

static int read_dims(const struct pk_value *v, uint64_t *out, unsigned *n)
{
	uint32_t i;

	if (!v || v->type != PK_TUPLE || v->n > CKPT_MAX_DIMS)
		return -EINVAL;
	for (i = 0; i < v->n; i++) {
		const struct pk_value *x = v->u.items[i];

		if (x->type != PK_INT || x->u.i < 0)
			return -EINVAL;
		out[i] = (uint64_t)x->u.i;
	}
	*n = v->n;
	return 0;
}

/* Fill t's dtype, shape and storage from the data.pkl tree; sets *key. */
static int interpret(const struct pk_value *root, const char *where,
		     struct torch_tensor_rec *t, const struct pk_value **key,
		     char *err, size_t errlen)
{
	const struct pk_value *args, *pid, *p, *st, *off, *n, *dt = NULL;
	bool v3 = pk_is_call(root, TG_REBUILD_TENSOR_V3);
	unsigned nstride;

	if ((!v3 && !pk_is_call(root, TG_REBUILD_TENSOR)) ||
	    root->u.call.state)
		return bad(where, err, errlen, "not a plain saved tensor (_rebuild_tensor_v2 or _v3)");
	args = root->u.call.args;
	if (!v3 && (args->n < 6 || args->n > 7))
		return bad(where, err, errlen, "_rebuild_tensor_v2 takes 6 or 7 arguments");
	if (v3 && (args->n < 7 || args->n > 8))
		return bad(where, err, errlen, "_rebuild_tensor_v3 takes 7 or 8 arguments");
	if (v3) {
		dt = args->u.items[6];
		if (dt->type != PK_GLOBAL || dt->u.global < TG_DTYPE ||
		    dt->u.global >= TG_DTYPE + CKPT_DTYPE_COUNT)
			return bad(where, err, errlen, "_rebuild_tensor_v3's dtype is not a known torch dtype");
	}
	pid = args->u.items[0];
	if (!pk_is_call(pid, PK_PERSID_ID))
		return bad(where, err, errlen, "storage is not a persistent id");
	p = pid->u.call.args;
	if (p->type != PK_TUPLE || p->n != 5 || !pk_str_is(p->u.items[0], "storage"))
		return bad(where, err, errlen, "storage persistent id is not ('storage', type, key, location, numel)");
	st = p->u.items[1];
	*key = p->u.items[2];
	n = p->u.items[4];
	if (v3 && (st->type != PK_GLOBAL ||
		   st->u.global != TG_UNTYPED_STORAGE))
		return bad(where, err, errlen, "_rebuild_tensor_v3's storage is not an UntypedStorage");
	if (!v3 && (st->type != PK_GLOBAL || st->u.global < TG_STORAGE ||
		    st->u.global >= TG_STORAGE + CKPT_DTYPE_COUNT))
		return bad(where, err, errlen, "storage type is not a known storage class");
	if ((*key)->type != PK_STR || (*key)->u.str.len == 0 ||
	    (*key)->u.str.len > 64 || memchr((*key)->u.str.s, '/', (*key)->u.str.len))
		return bad(where, err, errlen, "storage key is not a short name");
	if (n->type != PK_INT || n->u.i < 0)
		return bad(where, err, errlen, "storage element count is not a non-negative integer");
	if (v3) {
		/* An untyped storage is counted in bytes, its offset and
		 * strides in elements of the dtype. */
		t->dtype = (enum ckpt_dtype)(dt->u.global - TG_DTYPE);
		if ((uint64_t)n->u.i % ckpt_dtype_size(t->dtype))
			return bad(where, err, errlen, "untyped storage's byte count is not a whole number of elements of its dtype");
		t->storage_numel = (uint64_t)n->u.i /
				   ckpt_dtype_size(t->dtype);
	} else {
		t->dtype = (enum ckpt_dtype)(st->u.global - TG_STORAGE);
		t->storage_numel = (uint64_t)n->u.i;
	}
	off = args->u.items[1];
	if (off->type != PK_INT || off->u.i < 0)
		return bad(where, err, errlen, "storage offset is not a non-negative integer");
	t->storage_offset = (uint64_t)off->u.i;
	if (read_dims(args->u.items[2], t->size, &t->ndim) ||
	    read_dims(args->u.items[3], t->stride, &nstride) ||
	    nstride != t->ndim)
		return bad(where, err, errlen, "size and stride are not tuples of equal length of non-negative integers");
	return 0;
}

int torch_record_locate(tz_read_fn read, void *ctx, uint64_t len,
			const char *where, struct torch_tensor_rec *t,
			char *err, size_t errlen)
{
	struct tz_archive z;
	struct tz_record pkl, data, order;
	const struct pk_value *root, *key = NULL;
	struct pk_arena *arena = NULL;
	uint8_t *pbuf = NULL, *obuf = NULL;
	const char *pname;
	size_t plen;
	char dname[80];
	uint64_t need, bytes;
	int rc;

	memset(t, 0, sizeof(*t));
	rc = tz_open(&z, read, ctx, len, where, err, errlen);
	if (rc)
		return rc;
	rc = tz_find(&z, NULL, 0, "data.pkl", &pkl, &pname, &plen, err,
		     errlen);
	if (rc == -ENOENT)
		rc = ckpt_errf(err, errlen, -EINVAL,
			       "%s: archive has no data.pkl", where);
	if (rc)
		goto out_zip;
	rc = tz_read(&z, &pkl, TORCH_DATAPKL_MAX, &pbuf, err, errlen);
	if (rc)
		goto out_zip;
	rc = pk_load(pbuf, (size_t)pkl.size, torch_datapkl_globals,
		     torch_datapkl_nglobals, where, (struct pk_value **)&root,
		     &arena, err, errlen);
	if (rc)
		goto out_pkl;
	rc = interpret(root, where, t, &key, err, errlen);
	if (rc)
		goto out_arena;

	rc = tz_find(&z, pname, plen, "byteorder", &order, NULL, NULL, err,
		     errlen);
	if (rc == 0) {
		rc = tz_read(&z, &order, 16, &obuf, err, errlen);
		if (rc)
			goto out_arena;
		if (order.size != 6 || memcmp(obuf, "little", 6)) {
			rc = ckpt_errf(err, errlen, -EINVAL,
				       "%s: archive's byteorder is not 'little'",
				       where);
			goto out_arena;
		}
	} else if (rc != -ENOENT) {
		goto out_arena;
	}
	/* interpret() checked: 1 to 64 bytes, no '/' */
	memcpy(dname, "data/", 5);
	memcpy(dname + 5, key->u.str.s, key->u.str.len);
	dname[5 + key->u.str.len] = '\0';
	rc = tz_find(&z, pname, plen, dname, &data, NULL, NULL, err, errlen);
	if (rc == -ENOENT)
		rc = ckpt_errf(err, errlen, -EINVAL,
			       "%s: archive has no record '%.*s%s' for its storage",
			       where, (int)plen, pname, dname);
	if (rc)
		goto out_arena;
	if (__builtin_mul_overflow(t->storage_numel,
				   (uint64_t)ckpt_dtype_size(t->dtype), &bytes) ||
	    bytes != data.size) {
		rc = ckpt_errf(err, errlen, -EINVAL,
			       "%s: storage record is %" PRIu64 " bytes, data.pkl says %" PRIu64
			       " elements of %s", where, data.size,
			       t->storage_numel, ckpt_dtype_name(t->dtype));
		goto out_arena;
	}
	if (ckpt_strided_span(t->size, t->stride, t->ndim, &need) ||
	    (need && __builtin_add_overflow(need, t->storage_offset, &need)) ||
	    need > t->storage_numel) {
		rc = ckpt_errf(err, errlen, -EINVAL,
			       "%s: data.pkl's size, strides and offset address elements past the storage's %" PRIu64,
			       where, t->storage_numel);
		goto out_arena;
	}
	t->hdr_off = data.hdr_off;
	t->data_off = data.data_off;
	t->data_len = data.size;
	t->crc32 = data.crc32;
	rc = 0;
out_arena:
	pk_free(arena);
	free(obuf);
out_pkl:
	free(pbuf);
out_zip:
	tz_close(&z);
	return rc;
}
