/* SPDX-License-Identifier: MIT */
/*
 * AddressSanitizer's poisoning, where the build has it: CKPT_ASAN is
 * defined under ASan (gcc's -fsanitize=address, or clang's), and
 * CKPT_POISON / CKPT_UNPOISON mark memory the program owns as not to be
 * read / readable again; without ASan they do nothing.
 */
#ifndef CKPT_ASAN_H
#define CKPT_ASAN_H

#if defined(__SANITIZE_ADDRESS__)	/* gcc */
#define CKPT_ASAN 1
#elif defined(__has_feature)		/* clang */
#if __has_feature(address_sanitizer)
#define CKPT_ASAN 1
#endif
#endif

#ifdef CKPT_ASAN
#include <sanitizer/asan_interface.h>
#define CKPT_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define CKPT_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define CKPT_POISON(p, n) ((void)(p), (void)(n))
#define CKPT_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#endif
