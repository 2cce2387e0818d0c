/* SPDX-License-Identifier: MIT */
/*
 * PyTorch distributed checkpoints (FileSystemWriter: a pickled .metadata
 * and __R_I.distcp files of torch.save archives) turned into the native
 * metadata image (docs/format.md), whose records point straight at each
 * tensor's raw bytes inside the .distcp files.  The native parser then
 * validates it like any other checkpoint, and reads never touch a zip or
 * a pickle again.  This is what `ckptfs index` writes to a file.
 */
#ifndef CKPT_TORCH_INDEX_H
#define CKPT_TORCH_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* True when a .metadata image is a pickle (protocol 2-5), not msgpack. */
bool ckpt_torch_is_pickle(const uint8_t *buf, size_t len);

struct ckpt_store;

/*
 * Build the native image for the torch checkpoint at the root of store s
 * from its .metadata pickle pkl[0, len).  name (the .metadata path) and
 * the data file paths prefix messages.  Data files are opened through s
 * (NULL: none can be, e.g. when fuzzing); only each record's zip end
 * records, central directory, data.pkl and local headers are read.
 * Returns 0 and sets *img (caller frees) and *imglen, or -errno with a
 * one-line reason.
 */
int ckpt_torch_index(struct ckpt_store *s, const char *name,
		     const uint8_t *pkl, size_t len, uint8_t **img,
		     size_t *imglen, char *err, size_t errlen);

/* The "source" stamp an index carries: the pickle's size and XXH3.  True
 * when img was built from exactly pkl. */
bool ckpt_torch_index_matches(const uint8_t *img, size_t imglen,
			      const uint8_t *pkl, size_t len);

/* The CKPT_VARIANT_* flags an index records (model/meta.h): whether the
 * .distcp files hold safetensors blobs.  0 when it says nothing. */
uint8_t ckpt_torch_index_variants(const uint8_t *img, size_t imglen);

#endif
