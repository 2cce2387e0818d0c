/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the order readers go through a view's files
 * (view/order.c): from the root, ckpt_view_key_after() visits every key
 * file once, in the order of the paths sorted component by component
 * (readdir's order, which find and sort agree on), whatever the order of
 * the keys in the metadata; ckpt_view_key_before() walks it back.
 */
#include <stdlib.h>
#include <string.h>

#include "ckptfs.h"
#include "ckptdir.h"
#include "testhelp.h"
#include "view/order.h"
#include "view/view_types.h"

#define NKEYS 12

/* Keys in no sorted order; '.' makes directories. */
static const char *const keys[NKEYS] = {
	"layer2.w", "layer10.w", "layer1.w", "layer1.b", "z", "a.b.c",
	"a.b.d", "a.c", "layer10.b", "b", "layer1x.w", "a0",
};

static struct ckpt_meta *meta_of(void)
{
	struct ckpt_meta *m = NULL;
	msgpack_sbuffer sb;
	char err[512];

	msgpack_sbuffer_init(&sb);
	mb_keys_meta(&sb, keys, NKEYS, 6);
	if (ckpt_meta_parse((const uint8_t *)sb.data, sb.size, "t/.metadata",
			    &m, err, sizeof(err)))
		fprintf(stderr, "  %s\n", err);
	msgpack_sbuffer_destroy(&sb);
	return m;
}

/* node's path from the root, components joined by '\1' (below every
 * character of a name, so that strcmp() of two paths compares them
 * component by component). */
static void path_of(const struct ckpt_view *v, uint32_t node, char *out,
		    size_t len)
{
	char tmp[512];

	out[0] = '\0';
	while (node) {
		snprintf(tmp, sizeof(tmp), "%s%s%s",
			 v->names + v->nodes[node].name, out[0] ? "\1" : "",
			 out);
		snprintf(out, len, "%s", tmp);
		node = v->nodes[node].parent;
	}
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void test_readdir_order(void)
{
	struct ckpt_view_opts o = { .world = 2, .rank = 1,
				    .dtype = CKPT_DTYPE_COUNT };
	struct ckpt_meta *m = meta_of();
	struct ckpt_view *v = NULL;
	char err[512], *want[NKEYS], got[512];
	uint32_t i, n = 0, node, seen[NKEYS];

	CHECK(m && ckpt_view_new(m, &o, &v, err, sizeof(err)) == 0);
	if (!v)
		goto out;
	for (i = 0; i < v->nnodes; i++)
		if (ckpt_node_is_key(&v->nodes[i]) && n < NKEYS) {
			path_of(v, i, got, sizeof(got));
			want[n++] = strdup(got);
		}
	CHECK(n == NKEYS);
	qsort(want, n, sizeof(*want), cmp_str);
	/* forward from the root */
	for (i = 0, node = 0; i <= n; i++) {
		node = ckpt_view_key_after(v, node);
		if (i == n) {
			CHECK(node == UINT32_MAX);
			break;
		}
		CHECK(node != UINT32_MAX);
		if (node == UINT32_MAX)
			break;
		path_of(v, node, got, sizeof(got));
		CHECK(strcmp(got, want[i]) == 0);
		seen[i] = node;
	}
	/* and back from the last */
	for (i = n - 1; i > 0 && node != UINT32_MAX; i--)
		CHECK(ckpt_view_key_before(v, seen[i]) == seen[i - 1]);
	CHECK(ckpt_view_key_before(v, seen[0]) == UINT32_MAX);
	CHECK(ckpt_view_key_after(v, seen[n - 1]) == UINT32_MAX);
	for (i = 0; i < n; i++)
		free(want[i]);
out:
	ckpt_view_free(v);
	ckpt_meta_free(m);
}

int main(void)
{
	TEST(test_readdir_order);
	return TEST_REPORT();
}
