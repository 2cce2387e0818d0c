/* SPDX-License-Identifier: MIT */
/*
 * The view's data structures, shared by the view modules: the tree
 * (tree.c), each key file's geometry per rank (geom.c), data reads
 * (data_read.c), the .ckptfs/ files (vfiles.c) and the public entry
 * points (view.c).
 *
 * The tree is the same for every rank served ("slot"); only geometry and
 * bytes differ.  With --ranks the root holds rankN/ directories, each with
 * the whole tree.  Everything but the lazily built .ckptfs/ files is
 * immutable once ckpt_view_new() returns.
 */
#ifndef CKPT_VIEW_TYPES_H
#define CKPT_VIEW_TYPES_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ckptfs.h"
#include "common/strtab.h"
#include "model/layout.h"
#include "model/meta.h"

#define CKPT_NAME_MAX 255	/* longest file name (statfs f_namemax) */

struct ckpt_node {
	uint32_t parent;	/* node index; the root is its own parent */
	uint32_t name;		/* NUL-terminated, at view->names + name */
	uint32_t name_len;
	uint32_t entry;		/* key files: meta entry; CKPT_NONE for
				 * dirs; CKPT_VIRT_* for .ckptfs/ files */
	uint32_t file;		/* key files: index in v->file_node */
	uint32_t owner;		/* the first entry whose path made it */
	uint32_t child_first;	/* dirs: at view->children, sorted by name */
	uint32_t nchildren;
	uint32_t nsubdirs;
};

/* The files of .ckptfs/: their nodes' entry is one of these. */
enum {
	CKPT_VIRT_JSON = CKPT_NONE - 3,	/* view.json */
	CKPT_VIRT_TSV,			/* manifest.tsv */
	CKPT_VIRT_SAFETENSORS,		/* view.safetensors */
};

static inline bool ckpt_node_is_dir(const struct ckpt_node *n)
{
	return n->entry == CKPT_NONE;
}

static inline bool ckpt_node_is_virtual(const struct ckpt_node *n)
{
	return n->entry >= CKPT_VIRT_JSON && n->entry != CKPT_NONE;
}

static inline bool ckpt_node_is_key(const struct ckpt_node *n)
{
	return n->entry < CKPT_VIRT_JSON;
}

/*
 * A key file's geometry for one slot, decided once when the view is built
 * (geom.c): requests only plan bytes.
 */
struct ckpt_geom {
	uint64_t data_size;	/* bytes of data, after conversion */
	uint64_t size;		/* file bytes: npy header + data */
	uint32_t box_at;	/* box offsets at v->gdims[box_at], sizes at
				 * v->gdims[box_at + ndim] (tensors) */
	uint32_t chunk_at;	/* touched chunks: v->gchunks[chunk_at ...] */
	uint32_t nchunks;
	uint32_t npy_at;	/* npy header at v->npy_heads + npy_at */
	uint16_t npy_len;	/* 0: no header */
	uint8_t dtype;		/* shown (after --dtype) */
	uint8_t ndim;
};

struct ckpt_vfiles;

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
					 * 1 good, 2 corrupt, 3 being checked
					 * (by one thread; others wait) */
	pthread_mutex_t vlock;		/* guards leaving state 3 */
	pthread_cond_t vdone;		/* a check ended */
	_Atomic uint64_t nverified;	/* records checked so far */
	void (*report)(void *ctx, const char *line);
	void *report_ctx;		/* borrowed, handed to report */
	bool npy;
	char *source;			/* owned copy, or NULL */
	char *layout_path;		/* owned copy, or NULL */
	char *prefix;			/* owned copy, or NULL */

	/* The tree (tree.c). */
	struct ckpt_node *nodes;
	uint32_t nnodes;
	uint32_t *children;
	char *names;
	size_t names_len;
	struct ckpt_strtab by_name;	/* (parent, name) -> node */
	uint32_t nfiles;		/* key files per slot */
	uint32_t *file_node;		/* key file index -> node */

	/* Geometry (geom.c): geom[slot * nfiles + file]. */
	struct ckpt_geom *geom;
	uint64_t *gdims;
	uint32_t *gchunks;
	char *npy_heads;
	uint64_t total_bytes;		/* key files of all slots */

	/* .ckptfs/ (vfiles.c): per slot, built on first use. */
	struct ckpt_vfiles *vfiles;
	pthread_mutex_t vfiles_lock;	/* guards building vfiles */
};

/* Geometry of key file node for slot. */
static inline const struct ckpt_geom *
ckpt_view_geom(const struct ckpt_view *v, uint32_t slot, uint32_t node)
{
	return &v->geom[(size_t)slot * v->nfiles + v->nodes[node].file];
}

#endif
