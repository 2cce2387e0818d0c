/* SPDX-License-Identifier: MIT */
/*
 * Serving a read of a view file: plan the byte range into runs, merge runs
 * that continue each other in the same data file, and pread each merged
 * run straight into the caller's buffer.
 */
#include "view.h"

#include <errno.h>

#include "datafiles.h"
#include "plan.h"
#include "reshard.h"

int ckpt_view_read(const struct ckpt_view *v, uint32_t node, uint64_t off,
		   size_t len, void *buf, size_t *got)
{
	struct ckpt_meta *m = v->meta;
	const struct ckpt_entry *e;
	struct ckpt_planner p;
	struct ckpt_run run, cur = { 0 };
	struct ckpt_box box = { 0 };
	size_t dst = 0;
	int rc;

	*got = 0;
	if (node >= v->nnodes || ckpt_node_is_dir(&v->nodes[node]))
		return -EISDIR;
	e = &m->entries[v->nodes[node].entry];
	if (e->kind == CKPT_KIND_TENSOR)
		ckpt_reshard_box(m, e, v->world, v->rank, &box);
	ckpt_planner_init(&p, m, e, &box, off, len);
	while ((rc = ckpt_planner_next(&p, &run)) > 0) {
		if (cur.len && run.file == cur.file &&
		    cur.foff + cur.len == run.foff) {
			cur.len += run.len;
			continue;
		}
		if (cur.len) {
			rc = ckpt_files_pread(m, cur.file, (char *)buf + dst,
					      cur.len, cur.foff);
			if (rc)
				return rc;
			dst += cur.len;
		}
		cur = run;
	}
	if (rc < 0)
		return rc;
	if (cur.len) {
		rc = ckpt_files_pread(m, cur.file, (char *)buf + dst, cur.len,
				      cur.foff);
		if (rc)
			return rc;
		dst += cur.len;
	}
	*got = dst;
	return 0;
}
