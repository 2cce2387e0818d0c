/* SPDX-License-Identifier: MIT */
/*
 * Test-side helpers that write small .metadata images with msgpack-c's
 * packer, so unit tests can feed ckpt_meta_parse() exact bytes.
 */
#ifndef CKPT_METABUILD_H
#define CKPT_METABUILD_H

#include <msgpack.h>
#include <stdint.h>
#include <string.h>

static inline void mb_str(msgpack_packer *pk, const char *s)
{
	msgpack_pack_str(pk, strlen(s));
	msgpack_pack_str_body(pk, s, strlen(s));
}

static inline void mb_dims(msgpack_packer *pk, const uint64_t *d, unsigned n)
{
	unsigned i;

	msgpack_pack_array(pk, n);
	for (i = 0; i < n; i++)
		msgpack_pack_uint64(pk, d[i]);
}

/* The map's header and the start of state_dict_metadata with nkeys
 * keys; 4 top-level fields in all. */
static inline void mb_header(msgpack_packer *pk, uint32_t nkeys)
{
	msgpack_pack_map(pk, 4);
	mb_str(pk, "format");
	mb_str(pk, "tensorplay-dcp");
	mb_str(pk, "version");
	msgpack_pack_uint32(pk, 1);
	mb_str(pk, "state_dict_metadata");
	msgpack_pack_map(pk, nkeys);
}

/*
 * The image of one float32 tensor "t" of shape[nd], saved whole as one
 * record in file path at offset off of len bytes, up to and including
 * those fields of its storage_data entry: the caller packs the entry's
 * other nmore fields next.
 */
static inline void mb_one_record(msgpack_packer *pk, const uint64_t *shape,
				 unsigned nd, const char *path, uint64_t off,
				 uint64_t len, uint32_t nmore)
{
	uint64_t zero[4] = { 0, 0, 0, 0 };

	mb_header(pk, 1);
	mb_str(pk, "t");
	msgpack_pack_map(pk, 4);
	mb_str(pk, "type");
	mb_str(pk, "tensor");
	mb_str(pk, "dtype");
	mb_str(pk, "float32");
	mb_str(pk, "size");
	mb_dims(pk, shape, nd);
	mb_str(pk, "chunks");
	msgpack_pack_array(pk, 1);
	msgpack_pack_map(pk, 2);
	mb_str(pk, "offsets");
	mb_dims(pk, zero, nd);
	mb_str(pk, "sizes");
	mb_dims(pk, shape, nd);
	mb_str(pk, "storage_data");
	msgpack_pack_array(pk, 1);
	msgpack_pack_map(pk, 5 + nmore);
	mb_str(pk, "fqn");
	mb_str(pk, "t");
	mb_str(pk, "offsets");
	mb_dims(pk, zero, nd);
	mb_str(pk, "relative_path");
	mb_str(pk, path);
	mb_str(pk, "offset");
	msgpack_pack_uint64(pk, off);
	mb_str(pk, "length");
	msgpack_pack_uint64(pk, len);
}

/* A chunk as (offsets, sizes) for mb_tensor_meta. */
struct mb_chunk {
	uint64_t off[4], size[4];
};

/*
 * One float32 tensor "t" of shape[ndim] saved as the given chunks, stored
 * back to back in "data" in chunk order.  Writes the image into sb (caller
 * inits and destroys it).
 */
static inline void mb_tensor_meta(msgpack_sbuffer *sb, const uint64_t *shape,
				  unsigned ndim, const struct mb_chunk *ch,
				  unsigned nch, const char *dtype,
				  unsigned isz)
{
	msgpack_packer pk;
	uint64_t off = 0;
	unsigned i, d;

	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	mb_header(&pk, 1);
	mb_str(&pk, "t");
	msgpack_pack_map(&pk, 4);
	mb_str(&pk, "type");
	mb_str(&pk, "tensor");
	mb_str(&pk, "dtype");
	mb_str(&pk, dtype);
	mb_str(&pk, "size");
	mb_dims(&pk, shape, ndim);
	mb_str(&pk, "chunks");
	msgpack_pack_array(&pk, nch);
	for (i = 0; i < nch; i++) {
		msgpack_pack_map(&pk, 2);
		mb_str(&pk, "offsets");
		mb_dims(&pk, ch[i].off, ndim);
		mb_str(&pk, "sizes");
		mb_dims(&pk, ch[i].size, ndim);
	}
	mb_str(&pk, "storage_data");
	msgpack_pack_array(&pk, nch);
	for (i = 0; i < nch; i++) {
		uint64_t len = isz;

		for (d = 0; d < ndim; d++)
			len *= ch[i].size[d];
		msgpack_pack_map(&pk, 5);
		mb_str(&pk, "fqn");
		mb_str(&pk, "t");
		mb_str(&pk, "offsets");
		mb_dims(&pk, ch[i].off, ndim);
		mb_str(&pk, "relative_path");
		mb_str(&pk, "data");
		mb_str(&pk, "offset");
		msgpack_pack_uint64(&pk, off);
		mb_str(&pk, "length");
		msgpack_pack_uint64(&pk, len);
		off += len;
	}
}

#endif
