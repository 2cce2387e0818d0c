/* SPDX-License-Identifier: MIT */
/* The calling thread's cancel flag: see cancel.h and ckptfs.h. */
#include "common/cancel.h"

#include <errno.h>

#include "ckptfs.h"
#include "common/errbuf.h"

static __thread const volatile int *thread_flag;

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
