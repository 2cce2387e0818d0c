/* SPDX-License-Identifier: MIT */
/* An index-threaded LRU list: see lru.h. */
#include "common/lru.h"

#include "ckptfs.h"

static struct ckpt_lru_link *at(void *links, size_t stride, uint32_t i)
{
	return (struct ckpt_lru_link *)((char *)links + (size_t)i * stride);
}

void ckpt_lru_init(struct ckpt_lru *l)
{
	l->head = l->tail = CKPT_NONE;
}

void ckpt_lru_link_init(struct ckpt_lru_link *k)
{
	k->prev = k->next = CKPT_NONE;
}

void ckpt_lru_unlink(struct ckpt_lru *l, void *links, size_t stride,
		     uint32_t i)
{
	struct ckpt_lru_link *k = at(links, stride, i);

	if (k->prev != CKPT_NONE)
		at(links, stride, k->prev)->next = k->next;
	else
		l->head = k->next;
	if (k->next != CKPT_NONE)
		at(links, stride, k->next)->prev = k->prev;
	else
		l->tail = k->prev;
	ckpt_lru_link_init(k);
}

void ckpt_lru_push(struct ckpt_lru *l, void *links, size_t stride,
		   uint32_t i)
{
	struct ckpt_lru_link *k = at(links, stride, i);

	k->prev = CKPT_NONE;
	k->next = l->head;
	if (l->head != CKPT_NONE)
		at(links, stride, l->head)->prev = i;
	l->head = i;
	if (l->tail == CKPT_NONE)
		l->tail = i;
}
