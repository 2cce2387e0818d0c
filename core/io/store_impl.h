/* SPDX-License-Identifier: MIT */
/*
 * What a storage implementation provides (see store.h for the contract
 * each operation keeps).  Only io/ includes this: store.c dispatches to
 * the implementation a root names, and implements the generic calls
 * (ckpt_store_pread, ckpt_store_read_file, ckpt_store_stats) over these.
 *
 * An implementation embeds struct ckpt_store as its first member and
 * owns its file table: ids are small integers that stay valid, and file
 * records never move, while other threads open more files.
 */
#ifndef CKPT_STORE_IMPL_H
#define CKPT_STORE_IMPL_H

#include <stdatomic.h>

#include "io/store.h"

struct ckpt_store_ops {
	const char *kind;	/* "local", "s3", "azure" */
	/* Free everything the implementation owns, s included. */
	void (*destroy)(struct ckpt_store *s);
	int (*list)(struct ckpt_store *s,
		    int (*fn)(void *ctx, const char *name, uint64_t size),
		    void *ctx, char *err, size_t errlen);
	/* name is already checked: relative, no "..", no NUL. */
	int (*open)(struct ckpt_store *s, const char *name, uint32_t *id,
		    struct ckpt_store_file_info *info, char *err,
		    size_t errlen);
	const char *(*name)(const struct ckpt_store *s, uint32_t id);
	int (*read)(struct ckpt_store *s, const struct ckpt_store_range *r,
		    size_t n);
	/* ckpt_store_read_joined(); may be NULL (read() serves it) */
	int (*read_joined)(struct ckpt_store *s,
			   const struct ckpt_store_range *r, size_t n,
			   size_t first_join, uint32_t join);
	void (*willneed)(struct ckpt_store *s, uint32_t id, uint64_t off,
			 uint64_t len);	/* may be NULL */
	/* ckpt_store_set_opts(); may be NULL (nothing to change). */
	int (*set_opts)(struct ckpt_store *s, const struct ckpt_store_opts *o,
			char *err, size_t errlen);
	/* ckpt_store_cancel(); may be NULL (reads never wait on anything
	 * but the local kernel). */
	void (*cancel)(struct ckpt_store *s);
};

struct ckpt_store {
	const struct ckpt_store_ops *ops;
	char *root;		/* as given; owned */
	char *identity;		/* see ckpt_store_identity(); owned */
	const char *credentials;	/* see ckpt_store_credentials();
					 * the implementation's, or NULL */
	char *warning;		/* see ckpt_store_warning(); owned by the
				 * implementation, or NULL */
	unsigned parallelism;
	/* Counters, updated by the implementation as it works. */
	_Atomic uint64_t bytes_fetched;
	_Atomic uint64_t bytes_delivered;
	_Atomic uint64_t requests;
	_Atomic uint64_t retries;
	_Atomic uint64_t connects;
	_Atomic uint64_t gets;	/* HTTP GETs of objects (whole or ranged) */
	_Atomic uint64_t heads;	/* HTTP HEADs */
	_Atomic uint64_t lists;	/* HTTP GETs of listings (ListObjectsV2) */
};

/* The implementations' constructors, called by ckpt_store_new() with
 * the root as given.  Each fills the common fields itself. */
int ckpt_store_local_new(const char *root, const struct ckpt_store_opts *o,
			 struct ckpt_store **out, char *err, size_t errlen);
int ckpt_store_s3_new(const char *root, const struct ckpt_store_opts *o,
		      struct ckpt_store **out, char *err, size_t errlen);
int ckpt_store_azure_new(const char *root, const struct ckpt_store_opts *o,
			 struct ckpt_store **out, char *err, size_t errlen);

#endif
