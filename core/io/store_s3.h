/* SPDX-License-Identifier: MIT */
/*
 * What the S3 store offers beyond struct ckpt_store_ops (store_impl.h):
 * stopping its reads at shutdown.
 */
#ifndef CKPT_STORE_S3_H
#define CKPT_STORE_S3_H

#include "io/store.h"

/*
 * For shutdown (a daemon told to stop while reads wait on a server that
 * does not answer): every read of s in progress ends at once with -EINTR,
 * and so does every later one.  s must be an S3 store.  Thread-safe; the
 * store must still be freed with ckpt_store_free().
 */
void ckpt_store_s3_cancel(struct ckpt_store *s);

#endif
