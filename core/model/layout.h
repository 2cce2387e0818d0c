/* SPDX-License-Identifier: MIT */
/*
 * 2-D (tensor parallel x data parallel) layouts: for each parameter, the
 * box of the global tensor its tensor-parallel group holds.  The dim-0
 * split over the data-parallel ranks then applies inside that box.
 *
 * The file is text, one box per line: `NAME OFFSETS SIZES`, e.g.
 * `layers.0.attn.weight 0,512 1024,512`; `#` starts a comment; blank lines
 * are ignored.  NAME binds a key when it is the key's FQN, else when it is
 * the key's PARAM (the middle of (prefix, "state", PARAM, STATE)), else
 * when it is a shell glob (`*`, `?`, `[...]`, as fnmatch(3)) matching the
 * FQN, the first such line winning.
 */
#ifndef CKPT_LAYOUT_H
#define CKPT_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "model/meta.h"
#include "common/strtab.h"

struct ckpt_layout_box {
	char *param;		/* owned, NUL-terminated */
	unsigned line;		/* in the file, for messages */
	unsigned ndim;
	uint64_t off[CKPT_MAX_DIMS];
	uint64_t size[CKPT_MAX_DIMS];
	uint32_t matched;	/* keys of m that use it (after bind) */
};

struct ckpt_layout {
	char *path;		/* the file, for messages */
	struct ckpt_layout_box *boxes;
	uint32_t nboxes;
	struct ckpt_strtab by_param;
	uint32_t *entry_box;	/* after bind: per meta entry, box or
				 * CKPT_NONE */
};

/* Parse a layout file.  Returns 0 and sets *out (caller frees with
 * ckpt_layout_free()), or -errno with "FILE:LINE: reason" in err. */
int ckpt_layout_load(const char *path, struct ckpt_layout **out, char *err,
		     size_t errlen);

/* Parse layout text already in memory (tests); name is used in messages. */
int ckpt_layout_parse(const char *text, size_t len, const char *name,
		      struct ckpt_layout **out, char *err, size_t errlen);

void ckpt_layout_free(struct ckpt_layout *l);

/*
 * Match each key of m to its parameter's box: a key whose path is
 * (prefix, "state", PARAM, STATE) uses PARAM's line.  For every such key
 * with more than one element, the box must have as many dims as the
 * tensor and lie inside its shape.  Returns 0, or -EINVAL naming the line,
 * the key and the problem.  Lines that match no key keep matched == 0 (the
 * caller warns).  Not thread-safe; call once.
 */
int ckpt_layout_bind(struct ckpt_layout *l, const struct ckpt_meta *m,
		     char *err, size_t errlen);

/* The PARAM of a key's path, if it has the (prefix, "state", PARAM, STATE)
 * shape: its planner_data path when given, else its FQN split on '.' with
 * the middle components joined.  Writes into out (size outlen) and returns
 * its length, or -1. */
int ckpt_layout_param_of(const struct ckpt_meta *m, const struct ckpt_entry *e,
			 char *out, size_t outlen);

#endif
