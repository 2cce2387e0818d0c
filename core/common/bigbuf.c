/* SPDX-License-Identifier: MIT */
/* Large buffers from mmap: see bigbuf.h. */
#include "common/bigbuf.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/asan.h"

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

#define HUGE_PAGE ((size_t)2 << 20)

void *ckpt_malloc_huge(size_t n)
{
	void *p;

	if (n < 2 * HUGE_PAGE)
		return malloc(mapped(n));
	if (posix_memalign(&p, HUGE_PAGE, n))
		return NULL;
	madvise(p, n & ~(HUGE_PAGE - 1), MADV_HUGEPAGE);	/* a hint */
	return p;
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

void ckpt_give_back(const uint8_t **from, const uint8_t *to)
{
	long pg = sysconf(_SC_PAGESIZE);
	size_t page = pg > 0 ? (size_t)pg : 4096;
	uintptr_t b, e, mask;

	mask = ~(uintptr_t)(page - 1);
	b = ((uintptr_t)*from + page - 1) & mask;
	e = (uintptr_t)to & mask;
	if (b >= e)
		return;
#ifdef CKPT_ASAN
	CKPT_POISON((void *)b, e - b);
#else
	(void)madvise((void *)b, e - b, MADV_DONTNEED);	/* a hint */
#endif
	*from = *from + (e - (uintptr_t)*from);
}
