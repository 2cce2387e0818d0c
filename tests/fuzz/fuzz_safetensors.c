/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: the safetensors reader (header length, strict JSON, every
 * offset check) through the public API.  Each input is written as
 * model.safetensors in a private directory and opened as a checkpoint;
 * when that succeeds, every file of a W=3 R=1 view is read whole.  A
 * refusal must say why and own nothing.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckptfs.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64];

static void cleanup(void)
{
	char path[128];

	snprintf(path, sizeof(path), "%s/model.safetensors", dir);
	unlink(path);
	rmdir(dir);
}

static void setup(void)
{
	if (dir[0])
		return;
	snprintf(dir, sizeof(dir), "/tmp/ckptfs-fuzz-st.%d", (int)getpid());
	mkdir(dir, 0700);
	atexit(cleanup);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ckpt_view_opts o = { .world = 3, .rank = 1,
				    .dtype = CKPT_DTYPE_COUNT };
	struct ckpt_scratch *s;
	struct ckpt_meta *m = NULL;
	struct ckpt_view *v = NULL;
	struct ckpt_view_info vi;
	char path[128], err[1024] = "", buf[4096];
	uint32_t i;
	FILE *f;

	setup();
	snprintf(path, sizeof(path), "%s/model.safetensors", dir);
	f = fopen(path, "wb");
	if (!f)
		return 0;
	fwrite(data, 1, size, f);
	fclose(f);
	if (ckpt_meta_open(dir, &m, err, sizeof(err))) {
		if (m || !err[0])
			abort();	/* a refusal says why, owns nothing */
		return 0;
	}
	s = ckpt_scratch_new();
	if (s && !ckpt_files_open(m, 0, 0, err, sizeof(err)) &&
	    !ckpt_view_new(m, &o, &v, err, sizeof(err))) {
		ckpt_view_info(v, &vi);
		for (i = 0; i < vi.nnodes; i++) {
			uint64_t off = 0, size_v = 0;
			size_t got;

			if (ckpt_view_size(v, 0, i, &size_v))
				continue;
			while (off < size_v &&
			       !ckpt_view_read(v, 0, i, off, sizeof(buf), buf,
					       &got, s) && got)
				off += got;
		}
	}
	ckpt_view_free(v);
	ckpt_scratch_free(s);
	ckpt_meta_free(m);
	return 0;
}
