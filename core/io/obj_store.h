/* SPDX-License-Identifier: MIT */
/*
 * What the object stores (S3's, Azure's) share, behind store.h: the table
 * of opened objects (ids for ckpt_s3_fetch), the names opened or listed,
 * open by a listing's entry or a HEAD, reads through S3's HTTP engine,
 * and a second list() replayed from the first.  A store embeds a struct
 * ckpt_obj_store first, fills in what it names (below), and points its
 * ops at the ckpt_obj_store_* functions; what differs (how a name becomes
 * a URL, how the root is listed, config and probe) stays its own.
 */
#ifndef CKPT_OBJ_STORE_H
#define CKPT_OBJ_STORE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/obj_names.h"
#include "io/s3_fetch.h"
#include "io/s3_http.h"
#include "io/store_impl.h"

#define CKPT_OBJ_CHUNK 1024u	/* objects per chunk of the table */
#define CKPT_OBJ_MAX_CHUNKS 4096u	/* so at most 4M objects open */

/* The callback a listing calls for each object under the root. */
typedef int (*ckpt_obj_listed_fn)(void *ctx, const char *name,
				  uint64_t size, const char *etag,
				  int64_t mtime);

struct ckpt_obj_store {
	struct ckpt_store base;		/* first: the store is one */

	/* Set by the store before its first open or list. */
	struct ckpt_s3_http *http;	/* owned: freed by _fini */
	uint64_t merge_gap, part_bytes;	/* for ckpt_s3_fetch */
	const char *noun;		/* "object", "blob": messages */
	/* Set *url (the GET URL; may hold a secret: wiped before it is
	 * freed) and *uri (for messages) of the object name, malloc'd;
	 * the caller frees both, also when it fails.  0 or -ENOMEM. */
	int (*where)(struct ckpt_obj_store *os, const char *name,
		     char **url, char **uri);
	/* The whole root to fn, in pages; 0 or -errno with err filled. */
	int (*list_root)(struct ckpt_obj_store *os, ckpt_obj_listed_fn fn,
			 void *ctx, char *err, size_t errlen);

	/* The shared state: _init, then guarded by lock. */
	pthread_mutex_t lock;
	/* Opened objects by id; a chunk, once made, never moves. */
	struct ckpt_s3_object *chunks[CKPT_OBJ_MAX_CHUNKS];
	_Atomic uint32_t nobj;	/* published count (release/acquire) */
	struct ckpt_obj_names names;	/* opened or listed */
	bool listed_all;	/* the root was listed to its end: a later
				 * list() replays names[] (opening a
				 * checkpoint may ask twice, e.g. for
				 * __R.metadata, then *.safetensors) */
};

/* os zeroed (calloc'd with its store): the lock and empty tables. */
void ckpt_obj_store_init(struct ckpt_obj_store *os);

/* Free what _init and the shared functions made, os->http and the base's
 * root, identity and warning; not os itself nor what the store holds
 * beside (its destroy does that). */
void ckpt_obj_store_fini(struct ckpt_obj_store *os);

/* The object of id, or NULL past the published ones.  ctx is the
 * struct ckpt_obj_store (the shape ckpt_s3_fetch wants). */
const struct ckpt_s3_object *ckpt_obj_store_get(void *ctx, uint32_t id);

/* The store_ops entries, for a store that begins with a struct
 * ckpt_obj_store (contracts: store.h). */
int ckpt_obj_store_open(struct ckpt_store *s, const char *name, uint32_t *id,
			struct ckpt_store_file_info *info, char *err,
			size_t errlen);
const char *ckpt_obj_store_name(const struct ckpt_store *s, uint32_t id);
int ckpt_obj_store_read_joined(struct ckpt_store *s,
			       const struct ckpt_store_range *r, size_t n,
			       size_t first_join, uint32_t join);
int ckpt_obj_store_read(struct ckpt_store *s,
			const struct ckpt_store_range *r, size_t n);
int ckpt_obj_store_list(struct ckpt_store *s,
			int (*fn)(void *ctx, const char *name, uint64_t size),
			void *ctx, char *err, size_t errlen);
void ckpt_obj_store_cancel(struct ckpt_store *s);

/* The store_ops of a store named KIND whose destroy is DESTROY. */
#define CKPT_OBJ_STORE_OPS(KIND, DESTROY) {			\
	.kind = (KIND),						\
	.destroy = (DESTROY),					\
	.list = ckpt_obj_store_list,				\
	.open = ckpt_obj_store_open,				\
	.name = ckpt_obj_store_name,				\
	.read = ckpt_obj_store_read,				\
	.read_joined = ckpt_obj_store_read_joined,		\
	.willneed = NULL,					\
	.cancel = ckpt_obj_store_cancel,			\
}

#endif
