/* SPDX-License-Identifier: MIT */
/*
 * A least-recently-used list threaded through an array by index, as the
 * open-file cache (io/datafiles.c) and the decoded-record cache
 * (records/record_cache.c) keep theirs: item i's link lives in the item,
 * at (char *)links + i * stride, where links is the first item's link.
 * No allocation; the caller holds whatever lock guards the items.
 */
#ifndef CKPT_LRU_H
#define CKPT_LRU_H

#include <stddef.h>
#include <stdint.h>

struct ckpt_lru_link {
	uint32_t prev, next;	/* CKPT_NONE-terminated */
};

struct ckpt_lru {
	uint32_t head, tail;	/* most / least recently used */
};

/* An empty list; a link not on any list. */
void ckpt_lru_init(struct ckpt_lru *l);
void ckpt_lru_link_init(struct ckpt_lru_link *k);

/* Take item i off the list (it must be on it). */
void ckpt_lru_unlink(struct ckpt_lru *l, void *links, size_t stride,
		     uint32_t i);

/* Put item i (not on the list) at its front: the most recently used. */
void ckpt_lru_push(struct ckpt_lru *l, void *links, size_t stride,
		   uint32_t i);

#endif
