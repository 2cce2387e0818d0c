/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: records stored with zstd ("stream.zstd/1") through the
 * public API: the decoder's bounds, and for a torch.save payload the
 * archive found in the decoded bytes (zip, data.pkl, strides) and the
 * gather of a strided tensor.  The input is [flags, n, stored bytes...]:
 * flags bit 0 a torch.save payload (else raw), bit 1 two zstd layers, bit
 * 2 a bytes entry (raw, with the decoded size n * 64); n (1..256) is the
 * float32 tensor's length.  A fixed .metadata saying so is written beside
 * the stored bytes, the checkpoint opened with a 1 MiB cache, and every
 * file of a W=2 R=1 view read whole; reads may fail, never crash.
 */
#include <msgpack.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckptfs.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void str(msgpack_packer *pk, const char *s)
{
	msgpack_pack_str_with_body(pk, s, strlen(s));
}

static void metadata(msgpack_sbuffer *sb, uint8_t flags, uint64_t n,
		     uint64_t stored)
{
	msgpack_packer pk;
	bool bytes = flags & 4;
	unsigned layers = flags & 2 ? 2 : 1, i;

	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 4);
	str(&pk, "format");
	str(&pk, "tensorplay-dcp");
	str(&pk, "version");
	msgpack_pack_uint64(&pk, 1);
	str(&pk, "state_dict_metadata");
	msgpack_pack_map(&pk, 1);
	str(&pk, "x");
	if (bytes) {
		msgpack_pack_map(&pk, 1);
		str(&pk, "type");
		str(&pk, "bytes");
	} else {
		msgpack_pack_map(&pk, 4);
		str(&pk, "type");
		str(&pk, "tensor");
		str(&pk, "dtype");
		str(&pk, "float32");
		str(&pk, "size");
		msgpack_pack_array(&pk, 1);
		msgpack_pack_uint64(&pk, n);
		str(&pk, "chunks");
		msgpack_pack_array(&pk, 1);
		msgpack_pack_map(&pk, 2);
		str(&pk, "offsets");
		msgpack_pack_array(&pk, 1);
		msgpack_pack_uint64(&pk, 0);
		str(&pk, "sizes");
		msgpack_pack_array(&pk, 1);
		msgpack_pack_uint64(&pk, n);
	}
	str(&pk, "storage_data");
	msgpack_pack_array(&pk, 1);
	msgpack_pack_map(&pk, bytes ? 7 : 7);
	str(&pk, "fqn");
	str(&pk, "x");
	str(&pk, "offsets");
	if (bytes) {
		msgpack_pack_nil(&pk);
	} else {
		msgpack_pack_array(&pk, 1);
		msgpack_pack_uint64(&pk, 0);
	}
	str(&pk, "relative_path");
	str(&pk, "data");
	str(&pk, "offset");
	msgpack_pack_uint64(&pk, 0);
	str(&pk, "length");
	msgpack_pack_uint64(&pk, stored);
	str(&pk, "transforms");
	msgpack_pack_array(&pk, layers);
	for (i = 0; i < layers; i++)
		str(&pk, "stream.zstd/1");
	if (bytes) {
		str(&pk, "size");
		msgpack_pack_uint64(&pk, n * 64);
	} else {
		str(&pk, "payload");
		str(&pk, flags & 1 ? "torch.save" : "raw");
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ckpt_open_opts oo = { .cache_bytes = 1 << 20 };
	struct ckpt_meta *m = NULL;
	const char *dir;
	msgpack_sbuffer sb;
	char err[1024] = "";
	int rc;

	if (size < 3)
		return 0;
	dir = fuzz_dir("zstd");
	msgpack_sbuffer_init(&sb);
	metadata(&sb, data[0], (uint64_t)data[1] + 1, size - 2);
	rc = fuzz_put(".metadata", sb.data, sb.size) ||
	     fuzz_put("data", data + 2, size - 2);
	msgpack_sbuffer_destroy(&sb);
	if (rc)
		return 0;
	if (ckpt_meta_open_opts(dir, &oo, &m, err, sizeof(err))) {
		if (m || !err[0])
			abort();	/* a refusal says why, owns nothing */
		return 0;
	}
	fuzz_read_view(m, 2, 1);
	ckpt_meta_free(m);
	return 0;
}
