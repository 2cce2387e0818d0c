/* SPDX-License-Identifier: MIT */
/*
 * An open-addressing hash index from (seed, string) to a uint32 item
 * number, keyed by XXH3.  The table stores only item numbers; the caller
 * supplies a function that gives back an item's key, so the strings live
 * once, in the caller's own arrays.  Not thread-safe for writers; lookups
 * on a table no longer written to may run concurrently.
 */
#ifndef CKPT_STRTAB_H
#define CKPT_STRTAB_H

#include <stddef.h>
#include <stdint.h>

/* Give back item idx's seed and key. */
typedef void (*ckpt_strtab_key_fn)(const void *ctx, uint32_t idx,
				   uint64_t *seed, const char **s,
				   size_t *len);

struct ckpt_strtab {
	uint32_t *slots;	/* item + 1, 0 = empty */
	size_t mask;
	ckpt_strtab_key_fn key;
	const void *ctx;
};

/* Size the table for up to max_items items.  Returns 0 or -ENOMEM.
 * Release with ckpt_strtab_destroy(). */
int ckpt_strtab_init(struct ckpt_strtab *t, size_t max_items,
		     ckpt_strtab_key_fn key, const void *ctx);
void ckpt_strtab_destroy(struct ckpt_strtab *t);

/* Find the item with this key; UINT32_MAX when absent. */
uint32_t ckpt_strtab_find(const struct ckpt_strtab *t, uint64_t seed,
			  const char *s, size_t len);

/* Insert item idx unless an item with the same key is there: returns
 * UINT32_MAX when inserted, else the existing item.  The table must have
 * been sized for it. */
uint32_t ckpt_strtab_insert(struct ckpt_strtab *t, uint32_t idx);

#endif
