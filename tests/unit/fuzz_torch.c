/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the PyTorch checkpoint readers: the strict
 * unpickler, the .metadata schema walk and the zip locator.  The first
 * byte picks the target:
 *   even: the rest is a .metadata pickle, indexed with no data files
 *         (every tensor record's file fails to open: a clean error); an
 *         image that comes out is parsed and validated like a mount's;
 *         and indexed lazily as an open does, spending a copy of the
 *         pickle and then the image (their pages given back as they are
 *         read; poisoned under ASan): the same image and checkpoint as
 *         unspent, or the same refusal; and that checkpoint comes back
 *         the same from its parsed form (the index cache's);
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
#include "parsedform.h"

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

/* m comes back from its parsed form (the index cache's) the same. */
static void form_agrees(const struct ckpt_meta *m)
{
	struct ckpt_meta *back = NULL;
	char err[1024];
	uint8_t *form;
	size_t len;

	if (!pf_map(m, 7, &form, &len))
		return;		/* out of memory */
	if (ckpt_meta_parsed_load(form, len, 7, "fuzz", &back, err,
				  sizeof(err)) || !pf_same(m, back))
		abort();
	ckpt_meta_free(back);
}

/* The lazy index of pkl, unspent and spent, and their parses, agree. */
static void spend_agrees(const uint8_t *pkl, size_t n)
{
	uint8_t *img = NULL, *simg = NULL, *copy = malloc(n ? n : 1);
	struct ckpt_meta *m = NULL, *sm = NULL;
	size_t len = 0, slen = 0;
	char err[1024] = "", serr[1024] = "";
	int rc, src;

	if (!copy)
		return;
	memcpy(copy, pkl, n);
	rc = ckpt_torch_index_lazy(NULL, "fuzz/.metadata", pkl, n, &img,
				   &len, err, sizeof(err));
	src = ckpt_torch_index_spend(NULL, "fuzz/.metadata", copy, n,
				     &simg, &slen, serr, sizeof(serr));
	free(copy);
	if (rc != src || (rc && strcmp(err, serr)) ||
	    (!rc && (len != slen || memcmp(img, simg, len))))
		abort();	/* spending changed what came out */
	if (!rc) {
		rc = ckpt_meta_parse(img, len, "fuzz", &m, err, sizeof(err));
		src = ckpt_meta_parse_spend(simg, slen, "fuzz", &sm, serr,
					    sizeof(serr));
		if (rc != src || (rc && strcmp(err, serr)) ||
		    (!rc && (m->nentries != sm->nentries ||
			     m->nchunks != sm->nchunks ||
			     m->strings_len != sm->strings_len ||
			     (m->strings_len &&
			      memcmp(m->strings, sm->strings,
				     m->strings_len)))))
			abort();
		if (!rc)
			form_agrees(m);
	}
	ckpt_meta_free(m);
	ckpt_meta_free(sm);
	free(img);
	free(simg);
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
		spend_agrees(data + 1, size - 1);
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
