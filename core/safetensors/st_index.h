/* SPDX-License-Identifier: MIT */
/*
 * Safetensors checkpoints: a directory of *.safetensors files (Hugging
 * Face's layout, what HuggingFaceStorageWriter consolidates to), with or
 * without model.safetensors.index.json.  Every tensor is one whole chunk
 * at its data_offsets; keys are FQNs.  Or torch DCP's sharded safetensors
 * (HuggingFaceStorageWriter's sharded/shard-*.safetensors), whose
 * __metadata__ DCP_SHARDING_INFO places each tensor as a chunk of its key
 * at saved_offsets; a key's global shape is the union of its chunks, and
 * the chunks must tile it like any checkpoint's.  Headers: st_blob.h.
 */
#ifndef CKPT_ST_INDEX_H
#define CKPT_ST_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ckpt_store;

/*
 * The native image of the safetensors checkpoint at the root of store s:
 * 0 with *img (caller frees), *len, *sharded (DCP_SHARDING_INFO was used),
 * *mtime_sec/_nsec (the newest file read) and *warning (caller frees;
 * NULL, or one line naming the .safetensors files that
 * model.safetensors.index.json does not list: when there is an index, it
 * governs and they are left out), -ENOENT when the root holds no
 * .safetensors file, or another -errno with a one-line reason naming the
 * file and key.
 */
int ckpt_safetensors_index(struct ckpt_store *s, uint8_t **img, size_t *len,
			   bool *sharded, int64_t *mtime_sec,
			   int64_t *mtime_nsec, char **warning, char *err,
			   size_t errlen);

#endif
