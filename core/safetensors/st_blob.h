/* SPDX-License-Identifier: MIT */
/*
 * One safetensors blob: an 8-byte little-endian header length, a JSON
 * header, then the data.  A blob is a whole .safetensors file, or the
 * tail of a .distcp file torch wrote with SerializationFormat.SAFETENSORS.
 * The header is untrusted: its length is capped (CKPT_ST_HEADER_MAX), it
 * is parsed by the strict common/json.c, and every data_offsets pair is
 * checked against the data's length, dtype x shape and the other tensors.
 * `__metadata__`'s DCP_SHARDING_INFO (torch DCP: a JSON string
 * {fqn: {"saved_offsets": [...]}}) gives each tensor's place in its global
 * tensor.
 */
#ifndef CKPT_ST_BLOB_H
#define CKPT_ST_BLOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/meta.h"

#define CKPT_ST_HEADER_MAX ((uint64_t)100 << 20)	/* header bytes cap */

struct ckpt_st_tensor {
	char *fqn;		/* owned */
	uint32_t file;		/* the caller's file number */
	uint8_t dtype;		/* enum ckpt_dtype */
	uint8_t ndim;
	uint64_t shape[CKPT_MAX_DIMS];
	uint64_t foff, len;	/* its bytes, in the file */
	bool has_saved;		/* DCP_SHARDING_INFO gave ... */
	uint64_t saved[CKPT_MAX_DIMS];	/* ... its offsets in the global tensor */
};

/* Tensors of one or more blobs. */
struct ckpt_st_set {
	struct ckpt_st_tensor *t;
	size_t nt, cap;
	bool sharded;		/* some blob had DCP_SHARDING_INFO */
};

struct ckpt_store;

/*
 * Parse the blob at [base, end) of file id of store s and append its tensors, numbered
 * file fi, to set; within the blob they come sorted by FQN (see
 * ckpt_st_find()).  A blob with DCP_SHARDING_INFO must give every tensor
 * saved_offsets that fit 64 bits.  where names the blob in messages.
 * Returns 0, or -errno with a one-line reason naming it and the key.
 */
int ckpt_st_read_blob(struct ckpt_store *s, uint32_t id, uint64_t base,
		      uint64_t end, uint32_t fi, const char *where,
		      struct ckpt_st_set *set, char *err, size_t errlen);

/* The tensor called fqn among set->t[from, to) (sorted by FQN), or NULL. */
const struct ckpt_st_tensor *ckpt_st_find(const struct ckpt_st_set *set,
					  size_t from, size_t to,
					  const char *fqn, size_t len);

/* Free the tensors (not set itself) and empty it. */
void ckpt_st_set_free(struct ckpt_st_set *set);

#endif
