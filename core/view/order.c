/* SPDX-License-Identifier: MIT */
/*
 * The order readers go through a view's files (view/order.h): a walk of
 * the tree whose directories' children are sorted by name (tree.c),
 * stepping from a node to the next or previous one without a table.
 */
#include "view/order.h"

#include <string.h>

#include "view/view_types.h"

/* node's index among its parent's children (sorted by name), or
 * UINT32_MAX for the root. */
static uint32_t sibling_at(const struct ckpt_view *v, uint32_t node)
{
	const struct ckpt_node *p = &v->nodes[v->nodes[node].parent];
	const uint32_t *c = v->children + p->child_first;
	const char *name = v->names + v->nodes[node].name;
	uint32_t lo = 0, hi = p->nchildren, mid;
	int d;

	if (!node)
		return UINT32_MAX;
	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		d = strcmp(v->names + v->nodes[c[mid]].name, name);
		if (!d)
			return mid;
		if (d < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return UINT32_MAX;
}

/* The node after node (a directory comes before what it holds), or
 * UINT32_MAX. */
static uint32_t node_after(const struct ckpt_view *v, uint32_t node)
{
	const struct ckpt_node *n = &v->nodes[node], *p;
	uint32_t s;

	if (ckpt_node_is_dir(n) && n->nchildren)
		return v->children[n->child_first];
	while (node) {
		s = sibling_at(v, node);
		if (s == UINT32_MAX)
			return UINT32_MAX;
		p = &v->nodes[v->nodes[node].parent];
		if (s + 1 < p->nchildren)
			return v->children[p->child_first + s + 1];
		node = v->nodes[node].parent;
	}
	return UINT32_MAX;
}

/* The node before node, or UINT32_MAX. */
static uint32_t node_before(const struct ckpt_view *v, uint32_t node)
{
	const struct ckpt_node *n;
	uint32_t s = sibling_at(v, node);

	if (s == UINT32_MAX)
		return UINT32_MAX;
	if (!s)
		return v->nodes[node].parent;
	node = v->children[v->nodes[v->nodes[node].parent].child_first +
			   s - 1];
	for (n = &v->nodes[node]; ckpt_node_is_dir(n) && n->nchildren;
	     n = &v->nodes[node])
		node = v->children[n->child_first + n->nchildren - 1];
	return node;
}

uint32_t ckpt_view_key_after(const struct ckpt_view *v, uint32_t node)
{
	while ((node = node_after(v, node)) != UINT32_MAX)
		if (ckpt_node_is_key(&v->nodes[node]))
			return node;
	return UINT32_MAX;
}

uint32_t ckpt_view_key_before(const struct ckpt_view *v, uint32_t node)
{
	while ((node = node_before(v, node)) != UINT32_MAX)
		if (ckpt_node_is_key(&v->nodes[node]))
			return node;
	return UINT32_MAX;
}
