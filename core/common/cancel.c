/* SPDX-License-Identifier: MIT */
/* The calling thread's cancel flag: see cancel.h and ckptfs.h. */
#include "common/cancel.h"

#include <errno.h>
#include <time.h>

#include "ckptfs.h"
#include "common/errbuf.h"

static __thread const volatile int *thread_flag;
static __thread bool opening;
static __thread uint64_t open_end_ns;
static __thread uint32_t open_ms;

const volatile int *ckpt_thread_cancel_set(const volatile int *flag)
{
	const volatile int *old = thread_flag;

	thread_flag = flag;
	return old;
}

const volatile int *ckpt_cancel_flag(void)
{
	return thread_flag;
}

int ckpt_cancel_result(int rc, const char *what, char *err, size_t errlen)
{
	if (!rc || !ckpt_is_cancelled())
		return rc;
	ckpt_clear_last_error();
	return ckpt_errf(err, errlen, -ECANCELED, "%s: cancelled",
			 what ? what : "libckptfs");
}

bool ckpt_open_bound_begin(void)
{
	if (opening)
		return false;
	opening = true;
	open_end_ns = 0;
	open_ms = 0;
	return true;
}

void ckpt_open_bound_end(bool began)
{
	if (!began)
		return;
	opening = false;
	open_end_ns = 0;
	open_ms = 0;
}

uint64_t ckpt_open_bound_ns(uint32_t ms, uint32_t *bound_ms)
{
	struct timespec ts;

	if (!opening)
		return 0;
	if (!open_end_ns) {
		clock_gettime(CLOCK_MONOTONIC, &ts);
		open_end_ns = (uint64_t)ts.tv_sec * 1000000000u +
			      (uint64_t)ts.tv_nsec +
			      (uint64_t)ms * 1000000u;
		open_ms = ms;
	}
	*bound_ms = open_ms;
	return open_end_ns;
}
