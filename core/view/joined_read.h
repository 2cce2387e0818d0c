/* SPDX-License-Identifier: MIT */
/*
 * Locating a read batch's pending records (a PyTorch checkpoint opened
 * lazily) with their data: a record whose needed
 * bytes touch one end of its tensor data (or lie near one: join_range())
 * is fetched in one request that
 * also holds the zip structures locating it needs, and the batch's reads
 * are then served from those bytes (docs/performance.md, "joined reads").
 */
#ifndef CKPT_JOINED_READ_H
#define CKPT_JOINED_READ_H

#include <stdbool.h>
#include <stddef.h>

#include "model/meta.h"
#include "plan/reshard.h"

struct ckpt_joined;

/*
 * Locate every pending chunk that the boxes box[i] of entries ents[i]
 * (i < n; the bytes the batch reads, unless join is non-NULL and
 * join[i] false: then box[i] only says which chunks to locate, and
 * none of them is joined) meet, as ckpt_meta_locate() would (best effort: a chunk that
 * cannot be located is marked failed, and the read that needs it says
 * why).  The chunks whose needed bytes start at their data's first
 * byte or end at its last are fetched with their zip structures in one
 * round of requests (parallel on an object store, a pread each on a
 * local one), and stay registered in
 * m (model/meta.h, meta->fetched) until ckpt_joined_free(): reads inside
 * them are served from memory.  Returns that registration (NULL when
 * there is none).  Thread-safe.
 *
 * With done non-NULL (a box batch: request i's len[i] bytes, box[i]
 * row-major, at dst[i]; done[i] false), a chunk that request i alone
 * needs, whose needed bytes are one run of request i's destination (the
 * whole of it, or the rows it shares with a box of the same extent in
 * every other dim: a split along dim 0), is fetched into that run (but
 * for the zip structures beside it, and bytes that the record's
 * position within its archive moves past the range: those come from
 * side buffers), then put in place once located.  When every chunk box
 * i meets was pending, joined and put in place, done[i] is set: its
 * bytes are read.
 */
struct ckpt_joined *ckpt_joined_locate(struct ckpt_meta *m,
				       const struct ckpt_entry *const *ents,
				       const struct ckpt_box *box,
				       const bool *join, size_t n,
				       uint8_t *const *dst,
				       const uint64_t *len, bool *done);

/* Unregister j from m and free it (NULL is fine).  Thread-safe. */
void ckpt_joined_free(struct ckpt_meta *m, struct ckpt_joined *j);

#endif
