/* SPDX-License-Identifier: MIT */
/*
 * The view tree: each shown key's path (its planner_data entry, or its
 * FQN split on '.') becomes directories and a file.  Node 0 is the root.
 * Inode numbers, paths and lookups are declared in ckptfs.h.
 */
#ifndef CKPT_TREE_H
#define CKPT_TREE_H

#include <stdbool.h>
#include <stddef.h>

#include "view/view_types.h"

/*
 * Build v's nodes from v->meta (v's options already set: prefix, npy,
 * nslots).  With meta_dir, a .ckptfs/ directory holds the view's own
 * files.  Two keys needing the same path, a key whose file would be
 * another's directory, and a name longer than CKPT_NAME_MAX are errors
 * naming the keys.  Returns 0 or -errno with the reason in err; on error
 * what was built is freed by ckpt_tree_destroy().
 */
int ckpt_tree_build(struct ckpt_view *v, bool meta_dir, char *err,
		    size_t errlen);

/* Free the tree's arrays (not v). */
void ckpt_tree_destroy(struct ckpt_view *v);

/*
 * Encode one path component for use as a file name: a component that is
 * empty, ".", "..", or holds '/' or NUL is percent-encoded ("%" for empty,
 * "%2E" and "%2E%2E", and %2F, %00, %25 for '/', NUL and '%' inside).
 * Others are kept as they are.  out must hold 3 * len + 4 bytes; returns
 * the encoded length (out is NUL-terminated).
 */
size_t ckpt_view_encode_name(const char *s, size_t len, char *out);

#endif
