/* SPDX-License-Identifier: MIT */
/*
 * Safetensors checkpoints: a directory of *.safetensors files (Hugging
 * Face's layout, what HuggingFaceStorageWriter consolidates to), with or
 * without model.safetensors.index.json.  Every tensor is one whole chunk
 * at its data_offsets; keys are FQNs.  The headers are untrusted JSON:
 * bounded in size, parsed strictly, every offset checked against its file.
 */
#ifndef CKPT_ST_INDEX_H
#define CKPT_ST_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CKPT_ST_HEADER_MAX ((uint64_t)100 << 20)	/* header bytes cap */

/*
 * The native image of the safetensors checkpoint in dir (dirfd open on
 * it): 0 with *img (caller frees) and *len, -ENOENT when dir holds no
 * .safetensors file, or another -errno with a one-line reason naming the
 * file and key.
 */
int ckpt_safetensors_index(const char *dir, int dirfd, bool follow,
			   uint8_t **img, size_t *len, char *err,
			   size_t errlen);

#endif
