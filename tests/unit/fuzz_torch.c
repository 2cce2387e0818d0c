/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the PyTorch checkpoint readers: the strict
 * unpickler, the .metadata schema walk and the zip locator.  The first
 * byte picks the target:
 *   even: the rest is a .metadata pickle, indexed with no data files
 *         (every tensor record's file fails to open: a clean error); an
 *         image that comes out is parsed and validated like a mount's;
 *   odd:  the rest is one .distcp record (a torch.save archive), located
 *         through an in-memory read callback; a record said to lie
 *         outside the buffer aborts.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/meta.h"
#include "torch/torch_index.h"
#include "torch/torch_record.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct mem {
	const uint8_t *p;
	size_t n;
};

static int mem_read(void *ctx, uint64_t off, void *buf, size_t len)
{
	const struct mem *m = ctx;

	if (off > m->n || len > m->n - off)
		abort();	/* tz_* must bounds-check before reading */
	memcpy(buf, m->p + off, len);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[1024] = "";

	if (size < 1)
		return 0;
	if (!(data[0] & 1)) {
		struct ckpt_meta *m;
		uint8_t *img;
		size_t len;

		if (ckpt_torch_index(NULL, "fuzz/.metadata", data + 1,
				     size - 1, &img, &len, err,
				     sizeof(err)) == 0) {
			if (!ckpt_torch_index_matches(img, len, data + 1,
						      size - 1))
				abort();
			if (ckpt_meta_parse(img, len, "fuzz", &m, err,
					    sizeof(err)) == 0)
				ckpt_meta_free(m);
			free(img);
		} else if (!err[0]) {
			abort();	/* every refusal says why */
		}
	} else {
		struct mem mm = { data + 1, size - 1 };
		struct torch_tensor_rec t;

		err[0] = '\0';
		if (torch_record_locate(mem_read, &mm, mm.n, "fuzz", &t, err,
					sizeof(err)) == 0) {
			if (t.data_off > mm.n || t.data_len > mm.n - t.data_off)
				abort();
		} else if (!err[0]) {
			abort();
		}
	}
	return 0;
}
