/* SPDX-License-Identifier: MIT */
/* A listing's loop guard: see list_seen.h. */
#include "io/list_seen.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

int ckpt_list_token_seen(uint64_t **seen, size_t *n, size_t *cap,
			 const char *token)
{
	uint64_t hv = XXH3_64bits(token, strlen(token));
	size_t i;

	for (i = 0; i < *n; i++)
		if ((*seen)[i] == hv)
			return 1;
	if (*n == *cap) {
		size_t nc = *cap ? *cap * 2 : 64;
		uint64_t *ns = realloc(*seen, nc * sizeof(*ns));

		if (!ns)
			return -ENOMEM;
		*seen = ns;
		*cap = nc;
	}
	(*seen)[(*n)++] = hv;
	return 0;
}
