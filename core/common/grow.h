/* SPDX-License-Identifier: MIT */
/* Growing arrays: the one doubling realloc the parsers and builders use. */
#ifndef CKPT_GROW_H
#define CKPT_GROW_H

#include <stddef.h>

/*
 * Grow *arr (of elem-sized items, *cap of them; NULL and 0 to start) to
 * hold at least need items, doubling from 16.  Returns 0, or -ENOMEM
 * (then *arr and *cap are unchanged; the caller still frees *arr).
 */
int ckpt_grow(void **arr, size_t *cap, size_t need, size_t elem);

#endif
