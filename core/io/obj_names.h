/* SPDX-License-Identifier: MIT */
/*
 * The names an object store knows (S3's, Azure's): each opened or only
 * listed, found by name through a hash table.  Not thread-safe: the
 * store calls every function under its own lock.
 */
#ifndef CKPT_OBJ_NAMES_H
#define CKPT_OBJ_NAMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/strtab.h"
#include "io/store.h"

/* A name the store knows: opened (id set) or only listed. */
struct ckpt_obj_name {
	char *name;		/* owned */
	uint64_t size;
	char etag[CKPT_STORE_VERSION_MAX];
	int64_t mtime;		/* Last-Modified, seconds (0: unknown) */
	uint32_t id;		/* UINT32_MAX: listed, not opened */
	uint64_t listed_size;	/* as the listing said (when listed) */
	bool listed;		/* by the listing of the root */
	bool missing;		/* a HEAD answered 404: opened again, it is
				 * -ENOENT without a request (a close that
				 * stores an index after a shutdown's
				 * cancel still knows there is none) */
};

/* Zeroed is empty.  Must not move once a name is added (the table's
 * hash reads the names through it). */
struct ckpt_obj_names {
	struct ckpt_obj_name *v;	/* owned; moves as it grows */
	size_t n, cap;
	struct ckpt_strtab tab;
	size_t tab_items;	/* what tab was sized for */
};

/* The entry for name, or NULL.  Valid until the next add. */
struct ckpt_obj_name *ckpt_obj_names_find(struct ckpt_obj_names *t,
					  const char *name);

/* Add name (not there yet; copied) as listed-not-opened with size, etag
 * (copied, cut to fit) and mtime.  The entry, valid until the next add,
 * or NULL when out of memory (t unchanged). */
struct ckpt_obj_name *ckpt_obj_names_add(struct ckpt_obj_names *t,
					 const char *name, uint64_t size,
					 const char *etag, int64_t mtime);

/* Free every name and the table; t is then empty. */
void ckpt_obj_names_free(struct ckpt_obj_names *t);

#endif
