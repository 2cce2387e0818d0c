/* SPDX-License-Identifier: MIT */
/*
 * The view: the tree of directories and files that a rank of a new world
 * sees, built once from a meta.  The tree is the same for every rank (only
 * sizes and bytes differ), so one mount can serve several ranks ("slots")
 * from one tree: with --ranks, the root holds rankN/ directories, each
 * with the whole tree.  Immutable once built, so lookups and reads may run
 * on any number of threads.
 */
#ifndef CKPT_VIEW_H
#define CKPT_VIEW_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "layout.h"
#include "meta.h"
#include "reshard.h"
#include "strtab.h"

struct ckpt_view_opts {
	uint32_t world;		/* >= 1 */
	uint32_t rank;		/* < world; used when nranks == 0 */
	const uint32_t *ranks;	/* --ranks: distinct, each < world */
	uint32_t nranks;	/* 0: one rank, no rankN/ directories */
	const char *prefix;	/* NULL: every key; else first component */
	const struct ckpt_layout *layout;	/* NULL or bound to the meta */
	enum ckpt_dtype dtype;	/* CKPT_DTYPE_COUNT: no conversion */
	bool verify;		/* -o verify: check records on first read */
	bool npy;		/* --format npy: tensors as NAME.npy files */
	bool meta_dir;		/* a .ckptfs/ directory in each tree */
	const char *source;	/* the checkpoint, for .ckptfs/ files */
	const char *layout_path;	/* for view.json, or NULL */
	/* Called once per record found corrupt (verify), with one line naming
	 * the file, offset and key; may be NULL. */
	void (*report)(const char *line);
};

struct ckpt_node {
	uint32_t parent;	/* node index; the root is its own parent */
	uint32_t name;		/* NUL-terminated, at view->names + name */
	uint32_t name_len;
	uint32_t entry;		/* files: meta entry; CKPT_NONE for dirs */
	uint32_t owner;		/* the first entry whose path made it */
	uint32_t child_first;	/* dirs: at view->children, sorted by name */
	uint32_t nchildren;
	uint32_t nsubdirs;
};

struct ckpt_view {
	struct ckpt_meta *meta;		/* borrowed; reads use its fd cache */
	uint32_t world;
	uint32_t nslots;		/* ranks served, >= 1 */
	uint32_t *slot_rank;		/* rank of each slot */
	bool multi;			/* rankN/ directories at the root */
	const struct ckpt_layout *layout;	/* borrowed, or NULL */
	enum ckpt_dtype dtype;		/* conversion target, or COUNT */
	bool verify;
	uint8_t *vstate;		/* per chunk, atomic: 0 unchecked,
					 * 1 good, 2 corrupt */
	void (*report)(const char *line);
	bool npy;
	char *source;			/* owned copy, or NULL */
	char *layout_path;		/* owned copy, or NULL */
	struct ckpt_vfiles *vfiles;	/* per slot, built on first use */
	pthread_mutex_t vfiles_lock;	/* guards building vfiles */
	char *prefix;			/* owned copy, or NULL */
	struct ckpt_node *nodes;
	uint32_t nnodes;
	uint32_t nfiles;		/* per slot */
	uint64_t total_bytes;		/* all slots */
	uint32_t *children;
	char *names;
	size_t names_len;
	struct ckpt_strtab by_name;	/* (parent, name) -> node */
};

/*
 * Build the view of m for o.  Two keys needing the same path, or a key
 * whose file would be another's directory, are an error naming both.
 * Returns 0 and sets *out (caller frees with ckpt_view_free(); m must
 * outlive it), or -errno with the reason in err.
 */
int ckpt_view_new(struct ckpt_meta *m, const struct ckpt_view_opts *o,
		  struct ckpt_view **out, char *err, size_t errlen);

/* Accepts NULL. */
void ckpt_view_free(struct ckpt_view *v);

/* Inode numbers.  One slot: node i is inode i + 1.  Several: inode 1 is
 * the root of rankN/ directories, 2 + s is slot s's directory (its node
 * 0), and node i >= 1 of slot s follows after those. */
uint64_t ckpt_view_ino(const struct ckpt_view *v, uint32_t slot,
		       uint32_t node);

/* Decode an inode: 0 with *slot and *node set, 1 for the root of the rankN/
 * directories, or -ENOENT. */
int ckpt_view_ino_decode(const struct ckpt_view *v, uint64_t ino,
			 uint32_t *slot, uint32_t *node);

/* The box entry e shows to slot's rank (layout applied). */
void ckpt_view_box(const struct ckpt_view *v, uint32_t slot,
		   const struct ckpt_entry *e, struct ckpt_box *box);

/* The dtype the view shows for entry e (after any --dtype conversion). */
enum ckpt_dtype ckpt_view_dtype(const struct ckpt_view *v,
				const struct ckpt_entry *e);

/* Bytes of file node for slot; 0 for directories. */
uint64_t ckpt_view_size(const struct ckpt_view *v, uint32_t slot,
			uint32_t node);

/*
 * Extended attributes of file node for slot: user.ckptfs.fqn, .kind
 * ("tensor" or "bytes"), and for tensors .dtype (after --dtype), .shape
 * (the local view's shape), .global_shape and .offsets (where the local
 * view starts in the global tensor), dims comma-separated.
 * ckpt_view_xattr() writes the value of name into buf (not NUL-terminated)
 * and returns its length, even when longer than cap (then buf holds a
 * prefix); -ENODATA when the node has no such attribute.
 * ckpt_view_xattr_list() does the same for the NUL-separated name list.
 */
int ckpt_view_xattr(const struct ckpt_view *v, uint32_t slot, uint32_t node,
		    const char *name, char *buf, size_t cap);
int ckpt_view_xattr_list(const struct ckpt_view *v, uint32_t node, char *buf,
			 size_t cap);

/* The child of directory node dir called name (NUL-terminated), or
 * CKPT_NONE. */
uint32_t ckpt_view_lookup(const struct ckpt_view *v, uint32_t dir,
			  const char *name);

static inline int ckpt_node_is_dir(const struct ckpt_node *n)
{
	return n->entry == CKPT_NONE;
}

/* The files of .ckptfs/: their nodes' entry is one of these. */
enum {
	CKPT_VIRT_JSON = CKPT_NONE - 3,	/* view.json */
	CKPT_VIRT_TSV,			/* manifest.tsv */
	CKPT_VIRT_SAFETENSORS,		/* view.safetensors */
};

static inline bool ckpt_node_is_virtual(const struct ckpt_node *n)
{
	return n->entry >= CKPT_VIRT_JSON && n->entry != CKPT_NONE;
}

/* The view path of node i ("a/b/c"), into out (cap bytes). */
void ckpt_view_path(const struct ckpt_view *v, uint32_t i, char *out,
		    size_t cap);

/* Reusable working memory for ckpt_view_read(), one per thread.  Start it
 * zeroed; release with ckpt_read_scratch_destroy(). */
struct ckpt_read_scratch {
	void *runs;		/* pending runs */
	void *extents;		/* inside runs' allocation */
	uint32_t *order;	/* inside runs' allocation */
	char *stage;		/* staging buffer for gathers */
	size_t cap_stage;
	char *conv;		/* source elements of a dtype view */
	size_t cap_conv;
	char *rec;		/* a strided chunk's whole record */
	size_t cap_rec;
	const void *rec_meta;	/* whose chunk rec_chunk it holds */
	uint32_t rec_chunk;
};

void ckpt_read_scratch_destroy(struct ckpt_read_scratch *s);

/*
 * Read up to len bytes of file node, as slot's rank sees it, at off into
 * buf; *got is how many (0 at or past the end).  s is the calling thread's
 * scratch (may be NULL, but then dtype views fail with -ENOMEM and gathers
 * are slower).  Returns 0, -ENOMEM, or -EIO when a data file cannot give
 * every byte asked for.  Thread-safe with one scratch per thread.
 */
int ckpt_view_read(const struct ckpt_view *v, uint32_t slot, uint32_t node,
		   uint64_t off, size_t len, void *buf, size_t *got,
		   struct ckpt_read_scratch *s);

/*
 * Encode one path component for use as a file name: a component that is
 * empty, ".", "..", or holds '/' or NUL is percent-encoded ("%" for empty,
 * "%2E" and "%2E%2E", and %2F, %00, %25 for '/', NUL and '%' inside).
 * Others are kept as they are.  out must hold 3 * len + 4 bytes; returns
 * the encoded length (out is NUL-terminated).
 */
size_t ckpt_view_encode_name(const char *s, size_t len, char *out);

#endif
