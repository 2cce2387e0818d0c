/* SPDX-License-Identifier: MIT */
/*
 * Large buffers straight from the kernel, so that freeing one gives its
 * memory back at once.  glibc keeps freed heap memory (up to 32 MiB a
 * block) in per-thread arenas: records decoded by many threads would
 * otherwise keep a process's RSS far above what the record cache holds.
 * Small sizes use malloc.  Not a replacement for malloc: a buffer is freed
 * with its size.
 */
#ifndef CKPT_BIGBUF_H
#define CKPT_BIGBUF_H

#include <stddef.h>

/* n bytes (1 when n is 0), uninitialized; NULL when out of memory.
 * Free with ckpt_big_free(p, n). */
void *ckpt_big_alloc(size_t n);

/* Resize p from old to n bytes, keeping the first min(old, n); NULL (p
 * untouched) when out of memory. */
void *ckpt_big_realloc(void *p, size_t old, size_t n);

/* Free p of n bytes, as allocated or resized.  Accepts NULL. */
void ckpt_big_free(void *p, size_t n);

#endif
