/* SPDX-License-Identifier: MIT */
/*
 * A listing's loop guard, for S3's continuation tokens and Azure's
 * markers: a token given twice means the pages cycle.
 */
#ifndef CKPT_LIST_SEEN_H
#define CKPT_LIST_SEEN_H

#include <stddef.h>
#include <stdint.h>

/* Has token been given before (its 64-bit hash is in *seen)?  Returns 1
 * if so, else remembers it and returns 0; -ENOMEM when *seen cannot
 * grow.  *seen (n used of cap) belongs to the caller, who frees it; zero
 * all three to start.  A hash collision, which would stop a sound
 * listing, is as unlikely as any. */
int ckpt_list_token_seen(uint64_t **seen, size_t *n, size_t *cap,
			 const char *token);

#endif
