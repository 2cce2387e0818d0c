/* SPDX-License-Identifier: MIT */
/*
 * Per-call cancellation: the calling thread's cancel flag
 * (ckpt_thread_cancel_set() in ckptfs.h), which every wait of a call
 * polls (HTTP transfers and their backoff, the index cache's lock wait,
 * the index pass) so that the call ends with -ECANCELED soon after the
 * flag is set.
 */
#ifndef CKPT_CANCEL_H
#define CKPT_CANCEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* How often a wait that may last polls the flag, at most (ms). */
#define CKPT_CANCEL_POLL_MS 20

/* The calling thread's flag, or NULL.  Borrowed from the caller who set
 * it. */
const volatile int *ckpt_cancel_flag(void);

/* Is flag (may be NULL) set? */
static inline bool ckpt_is_flag_set(const volatile int *flag)
{
	return flag && *flag;
}

/* Is the calling thread's call cancelled? */
static inline bool ckpt_is_cancelled(void)
{
	return ckpt_is_flag_set(ckpt_cancel_flag());
}

/*
 * A call that failed while its flag is set failed because of it, whatever
 * a lower layer made of the broken-off transfer: rc becomes -ECANCELED
 * and err (and the thread's last error) "WHAT: cancelled".  Else rc.
 */
int ckpt_cancel_result(int rc, const char *what, char *err, size_t errlen);

/*
 * The open bound: one deadline for a whole open (probe, listing pages,
 * HEADs, the index pass's GETs), not for each of its requests.
 * ckpt_open_bound_begin() marks the calling thread as opening and returns
 * true, or false when an open is already in progress on it (a nested
 * call, which then ends nothing); ckpt_open_bound_end(began) ends it.
 */
bool ckpt_open_bound_begin(void);
void ckpt_open_bound_end(bool began);

/*
 * While the calling thread is opening: the CLOCK_MONOTONIC ns at which
 * its open must end, fixed at the first call as now + ms (a store's
 * configured open deadline; later calls keep it), and that ms in
 * *bound_ms.  0 when no open is in progress.
 */
uint64_t ckpt_open_bound_ns(uint32_t ms, uint32_t *bound_ms);

#endif
