/* SPDX-License-Identifier: MIT */
/*
 * The order readers go through a view's files: the order readdir gives
 * them (each directory sorted by name, depth first), in which find, cp -r
 * and a sort of the paths agree, rather than the order of the view's
 * nodes.  Read-ahead across files and locate-ahead follow it.
 */
#ifndef CKPT_VIEW_ORDER_H
#define CKPT_VIEW_ORDER_H

#include <stdint.h>

struct ckpt_view;

/* The key file after (before) node in that order, or UINT32_MAX.  node
 * is any node of v (a directory too).  Pure: v is only read. */
uint32_t ckpt_view_key_after(const struct ckpt_view *v, uint32_t node);
uint32_t ckpt_view_key_before(const struct ckpt_view *v, uint32_t node);

#endif
