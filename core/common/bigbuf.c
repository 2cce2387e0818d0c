/* SPDX-License-Identifier: MIT */
/* Large buffers from mmap: see bigbuf.h. */
#include "common/bigbuf.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define BIG ((size_t)128 << 10)	/* from here on, mmap */

static size_t mapped(size_t n)
{
	return n ? n : 1;
}

void *ckpt_big_alloc(size_t n)
{
	void *p;

	if (mapped(n) < BIG)
		return malloc(mapped(n));
	p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		 -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

void *ckpt_big_realloc(void *p, size_t old, size_t n)
{
	void *q;

	if (!p)
		return ckpt_big_alloc(n);
	if (mapped(old) < BIG && mapped(n) < BIG)
		return realloc(p, mapped(n));
	if (mapped(old) >= BIG && mapped(n) >= BIG) {
		q = mremap(p, old, n, MREMAP_MAYMOVE);
		return q == MAP_FAILED ? NULL : q;
	}
	q = ckpt_big_alloc(n);
	if (!q)
		return NULL;
	memcpy(q, p, old < n ? old : n);
	ckpt_big_free(p, old);
	return q;
}

void ckpt_big_free(void *p, size_t n)
{
	if (!p)
		return;
	if (mapped(n) < BIG)
		free(p);
	else
		munmap(p, n);
}
