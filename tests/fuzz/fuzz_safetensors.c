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
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *dir = fuzz_dir("st");
	struct ckpt_meta *m = NULL;
	char err[1024] = "";

	if (fuzz_put("model.safetensors", data, size))
		return 0;
	if (ckpt_meta_open(dir, &m, err, sizeof(err))) {
		if (m || !err[0])
			abort();	/* a refusal says why, owns nothing */
		return 0;
	}
	fuzz_read_view(m, 3, 1);
	ckpt_meta_free(m);
	return 0;
}
