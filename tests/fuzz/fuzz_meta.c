/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the metadata parser, the validator, the view tree
 * and the read planner.  Input: a 16-byte header (world, rank, offset,
 * length as little-endian u32) followed by a .metadata image.  Every run
 * the planner produces is checked against the records and the file sizes
 * the validator accepted; a violation aborts.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/meta.h"
#include "../../core/plan.h"
#include "../../core/reshard.h"
#include "../../core/view.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_RUNS 100000

static uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

/* Plan [off, off+len) of file node i and check every run. */
static void plan_and_check(struct ckpt_view *v, uint32_t i, uint64_t off,
			   uint64_t len)
{
	const struct ckpt_meta *m = v->meta;
	const struct ckpt_entry *e = &m->entries[v->nodes[i].entry];
	uint64_t want, total = 0, size = ckpt_view_size(v, 0, i);
	struct ckpt_planner p;
	struct ckpt_box box = { 0 };
	struct ckpt_run r;
	long runs = 0;
	int rc;

	if (e->kind == CKPT_KIND_TENSOR)
		ckpt_view_box(v, 0, e, &box);
	ckpt_planner_init(&p, m, e, &box, off, len);
	want = off >= size ? 0 : (len < size - off ? len : size - off);
	while ((rc = ckpt_planner_next(&p, &r)) > 0) {
		const struct ckpt_chunk *c;

		if (r.chunk < e->chunk_first ||
		    r.chunk >= e->chunk_first + e->nchunks || r.len == 0)
			abort();
		c = &m->chunks[r.chunk];
		if (r.file != c->file || r.file >= m->nfiles)
			abort();
		/* Inside the chunk's record, hence inside the file. */
		if (r.foff < c->foff || r.foff + r.len > c->foff + c->len ||
		    r.foff + r.len > m->files[r.file].need)
			abort();
		total += r.len;
		if (++runs > MAX_RUNS)
			return;
	}
	if (rc < 0 || total != want)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ckpt_view_opts o = { 0 };
	struct ckpt_meta *m = NULL;
	struct ckpt_view *v = NULL;
	uint32_t i, files = 0;
	uint64_t off, len;
	char err[512];

	if (size < 16)
		return 0;
	if (ckpt_meta_parse(data + 16, size - 16, "fuzz", &m, err,
			    sizeof(err)) != 0) {
		if (m || !err[0])	/* failure must say why, own nothing */
			abort();
		return 0;
	}
	o.dtype = CKPT_DTYPE_COUNT;
	o.world = 1 + le32(data) % 64;
	o.rank = le32(data + 4) % o.world;
	off = le32(data + 8) % 8192;
	len = le32(data + 12) % (1u << 20);
	if (ckpt_view_new(m, &o, &v, err, sizeof(err)) == 0) {
		for (i = 0; i < v->nnodes && files < 64; i++) {
			const struct ckpt_node *n = &v->nodes[i];

			if (ckpt_node_is_dir(n))
				continue;
			files++;
			plan_and_check(v, i, off, len);
			plan_and_check(v, i, 0, 1u << 20);
		}
		ckpt_view_free(v);
	}
	ckpt_meta_free(m);
	return 0;
}
