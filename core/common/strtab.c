/* SPDX-License-Identifier: MIT */
/* The (seed, string) hash index: see strtab.h. */
#include "common/strtab.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

int ckpt_strtab_init(struct ckpt_strtab *t, size_t max_items,
		     ckpt_strtab_key_fn key, const void *ctx)
{
	size_t cap = 16;

	while (cap < max_items * 2) {
		if (cap > SIZE_MAX / 4 / sizeof(uint32_t))
			return -ENOMEM;
		cap *= 2;
	}
	t->slots = calloc(cap, sizeof(uint32_t));
	if (!t->slots)
		return -ENOMEM;
	t->mask = cap - 1;
	t->key = key;
	t->ctx = ctx;
	return 0;
}

void ckpt_strtab_destroy(struct ckpt_strtab *t)
{
	free(t->slots);
	t->slots = NULL;
}

static size_t slot_of(const struct ckpt_strtab *t, uint64_t seed,
		      const char *s, size_t len)
{
	return (size_t)XXH3_64bits_withSeed(s, len, seed) & t->mask;
}

static int same_key(const struct ckpt_strtab *t, uint32_t idx, uint64_t seed,
		    const char *s, size_t len)
{
	const char *ks;
	uint64_t kseed;
	size_t klen;

	t->key(t->ctx, idx, &kseed, &ks, &klen);
	return kseed == seed && klen == len && memcmp(ks, s, len) == 0;
}

uint32_t ckpt_strtab_find(const struct ckpt_strtab *t, uint64_t seed,
			  const char *s, size_t len)
{
	size_t i = slot_of(t, seed, s, len);

	while (t->slots[i]) {
		if (same_key(t, t->slots[i] - 1, seed, s, len))
			return t->slots[i] - 1;
		i = (i + 1) & t->mask;
	}
	return UINT32_MAX;
}

uint32_t ckpt_strtab_insert(struct ckpt_strtab *t, uint32_t idx)
{
	const char *s;
	uint64_t seed;
	size_t len, i;

	t->key(t->ctx, idx, &seed, &s, &len);
	i = slot_of(t, seed, s, len);
	while (t->slots[i]) {
		if (same_key(t, t->slots[i] - 1, seed, s, len))
			return t->slots[i] - 1;
		i = (i + 1) & t->mask;
	}
	t->slots[i] = idx + 1;
	return UINT32_MAX;
}
