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
#include "read_view.h"

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
	struct ckpt_meta *m = NULL;
	char path[128], err[1024] = "";
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
	fuzz_read_view(m, 3, 1);
	ckpt_meta_free(m);
	return 0;
}
