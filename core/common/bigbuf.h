/* SPDX-License-Identifier: MIT */
/*
 * Large buffers straight from the kernel, so that freeing one gives its
 * memory back at once.  glibc keeps freed heap memory (up to 32 MiB a
 * block) in per-thread arenas: records decoded by many threads would
 * otherwise keep a process's RSS far above what the record cache holds.
 * Small sizes use malloc.  Not a replacement for malloc: a buffer is freed
 * with its size.  Also here: malloc()'s buffers for huge pages
 * (ckpt_malloc_huge(), freed with free()), and giving back the pages of a
 * buffer read once.
 */
#ifndef CKPT_BIGBUF_H
#define CKPT_BIGBUF_H

#include <stddef.h>
#include <stdint.h>

/* n bytes (1 when n is 0), uninitialized; NULL when out of memory.
 * Free with ckpt_big_free(p, n). */
void *ckpt_big_alloc(size_t n);

/* Resize p from old to n bytes, keeping the first min(old, n); NULL (p
 * untouched) when out of memory. */
void *ckpt_big_realloc(void *p, size_t old, size_t n);

/* Free p of n bytes, as allocated or resized.  Accepts NULL. */
void ckpt_big_free(void *p, size_t n);

/*
 * n bytes (1 when n is 0) for free(), uninitialized, NULL when out of
 * memory: from 4 MiB on aligned to 2 MiB and hinted MADV_HUGEPAGE, so
 * that filling it (a whole .metadata read in) faults in huge pages where
 * the system allows, not 512 times as many small ones (issue 38: a
 * 12 MB .metadata's open took 2,550 page faults fewer).  Pages given back
 * from it (ckpt_give_back()) leave the process's RSS at once, and the
 * system's memory once their whole 2 MiB is given back or the kernel
 * splits the huge page.
 */
void *ckpt_malloc_huge(size_t n);

/*
 * A buffer read once, front to back, given back to the system as it goes:
 * the whole pages inside [*from, to) of memory the caller owns (malloc()'s
 * or the above; not a shared mapping) are released (MADV_DONTNEED: they
 * read as zeros after), and *from moves to the last page boundary at or
 * before to, so the next call goes on from there.  Under ASan the pages
 * are poisoned instead, so a read of them is reported.  The caller may
 * still free the buffer as usual.
 */
void ckpt_give_back(const uint8_t **from, const uint8_t *to);

#endif
