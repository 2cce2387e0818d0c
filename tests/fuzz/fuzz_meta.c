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

#include "ckptfs.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_RUNS 100000

static uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

struct check {
	const struct ckpt_meta *m;
	struct ckpt_key_info k;
	uint64_t total;
	long runs;
};

/* Each run lies inside one of the key's chunks' records (a record with
 * transforms: inside its decoded bytes). */
static int check_run(void *ctx, const struct ckpt_read_run *r)
{
	struct check *c = ctx;
	struct ckpt_chunk_info ch;

	if (r->chunk < c->k.chunk_first ||
	    r->chunk >= c->k.chunk_first + c->k.nchunks || r->len == 0 ||
	    ckpt_meta_chunk(c->m, r->chunk, &ch) || !ch.has_record ||
	    r->file != ch.file || r->decoded != (ch.transforms != NULL))
		abort();
	if (r->decoded ? r->foff + r->len > ch.decoded_len :
			 r->foff < ch.foff || r->foff + r->len > ch.foff + ch.len)
		abort();
	c->total += r->len;
	return ++c->runs > MAX_RUNS ? 1 : 0;
}

/* Plan [off, off+len) of file node i and check every run. */
static void plan_and_check(struct ckpt_view *v, uint32_t i, uint64_t off,
			   uint64_t len)
{
	struct check c = { .m = ckpt_view_meta(v) };
	struct ckpt_entry_info e;
	uint64_t want, size;
	int rc;

	if (ckpt_view_entry(v, 0, i, &e) || ckpt_meta_key(c.m, e.key, &c.k))
		abort();
	size = e.size - e.header;
	want = off >= size ? 0 : (len < size - off ? len : size - off);
	rc = ckpt_view_plan(v, 0, i, off, len, check_run, &c);
	if (rc == 1)
		return;		/* too many runs to follow */
	if (rc < 0 || c.total != want)
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
		struct ckpt_view_info vi;
		struct ckpt_node_info ni;

		ckpt_view_info(v, &vi);
		for (i = 0; i < vi.nnodes && files < 64; i++) {
			if (ckpt_view_node(v, i, &ni) || ni.type != CKPT_NODE_KEY)
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
