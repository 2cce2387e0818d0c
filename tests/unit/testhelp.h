/* SPDX-License-Identifier: MIT */
/*
 * A two-macro unit-test harness (after redis testhelp.h): TEST(name) runs
 * a case, CHECK(cond) records a failure without stopping it.  TEST_REPORT()
 * prints "N passed, N failed" and gives the exit code.
 */
#ifndef CKPT_TESTHELP_H
#define CKPT_TESTHELP_H

#include <stdio.h>

static int th_passed, th_failed, th_case_failed;

#define CHECK(cond)                                                        \
	do {                                                               \
		if (!(cond)) {                                             \
			th_case_failed = 1;                                \
			fprintf(stderr, "  %s:%d: CHECK(%s) failed\n",     \
				__FILE__, __LINE__, #cond);                \
		}                                                          \
	} while (0)

#define TEST(fn)                                                           \
	do {                                                               \
		th_case_failed = 0;                                        \
		fn();                                                      \
		if (th_case_failed) {                                      \
			th_failed++;                                       \
			printf("not ok %s\n", #fn);                        \
		} else {                                                   \
			th_passed++;                                       \
			printf("ok %s\n", #fn);                            \
		}                                                          \
	} while (0)

#define TEST_REPORT()                                                      \
	(printf("%d passed, %d failed\n", th_passed, th_failed),           \
	 th_failed ? 1 : 0)

#endif
