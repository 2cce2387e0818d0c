/* SPDX-License-Identifier: MIT */
/* ListObjectsV2 over the HTTP engine: see s3_list.h. */
#include "io/s3_list.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errbuf.h"
#include "common/escape.h"
#include "io/list_seen.h"
#include "io/s3_url.h"
#include "io/s3_xml.h"


#define PAGE_MAX (16u << 20)	/* bytes of one page's XML */
#define KEY_MAX 4096

struct page_ctx {
	size_t plen;		/* strlen of "prefix/" */
	int (*fn)(void *ctx, const char *name, uint64_t size,
		  const char *etag, int64_t mtime);
	void *ctx;
	const char *want;	/* "prefix/" */
	int fn_rc;
	uint64_t keys;		/* entries seen, all pages */
	uint32_t key_cap;	/* 0: none */
	bool over_cap;
	bool bad_key;
	bool bad_etag;	/* key holds the entry whose ETag was refused */
	char key[KEY_MAX];	/* the entry's key, decoded */
};

static int on_entry(void *ctx, const struct ckpt_s3_xml_entry *e)
{
	struct page_ctx *pc = ctx;
	const char *name;

	if (pc->key_cap && ++pc->keys > pc->key_cap) {
		pc->over_cap = true;
		return -EFBIG;
	}
	/* Keys come percent-encoded (encoding-type=url), so that a key with
	 * a byte XML cannot carry still lists. */
	if (ckpt_s3_pct_decode(e->key, pc->key, KEY_MAX) < 0) {
		pc->bad_key = true;
		return -EBADMSG;
	}
	if (strncmp(pc->key, pc->want, pc->plen) != 0)
		return 0;
	if (!ckpt_s3_etag_is_clean(e->etag)) {
		/* It would be pinned and sent back in If-Match. */
		pc->bad_etag = true;
		return -EBADMSG;
	}
	name = pc->key + pc->plen;
	if (!name[0] || strchr(name, '/'))
		return 0;
	pc->fn_rc = pc->fn(pc->ctx, name, e->size, e->etag, e->mtime);
	return pc->fn_rc;
}

int ckpt_s3_list(struct ckpt_s3_http *h, const char *endpoint,
		 const char *bucket, const char *prefix, unsigned max_keys,
		 uint32_t key_cap, const char *root,
		 int (*fn)(void *ctx, const char *name, uint64_t size,
			   const char *etag, int64_t mtime),
		 void *ctx, char *err, size_t errlen)
{
	struct page_ctx *pc;
	char *want = NULL, *token = NULL, *query = NULL, *url = NULL;
	char mk[16], perr[160], shown[CKPT_S3_NAME_SHOWN];
	char rshown[CKPT_S3_NAME_SHOWN];
	unsigned long page = 0, page_cap;
	uint64_t *seen = NULL;
	size_t nseen = 0, capseen = 0;
	int rc = 0;

	root = ckpt_escape_mid(root, strlen(root), rshown, sizeof(rshown));
	page_cap = key_cap ? 2ul * (key_cap / (max_keys ? max_keys : 1000) + 1) +
			     16 : ULONG_MAX;

	pc = calloc(1, sizeof(*pc));
	if (!pc || asprintf(&want, "%s%s", prefix, prefix[0] ? "/" : "") < 0) {
		free(pc);
		return ckpt_errf(err, errlen, -ENOMEM, "%s: out of memory",
				 root);
	}
	pc->fn = fn;
	pc->ctx = ctx;
	pc->want = want;
	pc->plen = strlen(want);
	pc->key_cap = key_cap;
	snprintf(mk, sizeof(mk), "%u", max_keys);
	do {
		struct ckpt_s3_param p[6] = {
			{ "list-type", "2" },
			{ "delimiter", "/" },
			{ "prefix", want },
			{ "encoding-type", "url" },
		};
		struct ckpt_s3_req q = { .max_body = PAGE_MAX,
					    .list = true };
		size_t np = 4, failed;
		bool truncated;
		char *next;

		if (page >= page_cap) {
			rc = ckpt_errf(err, errlen, -EFBIG, "%s: listing "
				       "stopped after %lu pages, the most for "
				       "%u keys (s3_list_max_keys)", root,
				       page, key_cap);
			break;
		}
		if (token)
			p[np++] = (struct ckpt_s3_param){ "continuation-token",
							  token };
		if (max_keys)
			p[np++] = (struct ckpt_s3_param){ "max-keys", mk };
		free(url);
		free(query);
		url = NULL;
		query = ckpt_s3_query(p, np);
		if (query)
			url = ckpt_s3_url(endpoint, bucket, NULL, query);
		if (!url) {
			rc = ckpt_errf(err, errlen, -ENOMEM,
				       "%s: out of memory", root);
			break;
		}
		q.url = url;
		page++;
		rc = ckpt_s3_http_run(h, &q, 1, &failed);
		if (rc) {
			ckpt_errf(err, errlen, rc, "%s: listing (page %lu) "
				  "failed: %s", root, page, q.reason);
			ckpt_s3_req_destroy(&q);
			break;
		}
		rc = ckpt_s3_xml_list_page(q.buf ? q.buf : "", q.buflen,
					   on_entry, pc, &truncated, &next,
					   perr, sizeof(perr));
		ckpt_s3_req_destroy(&q);
		if (rc) {
			if (pc->over_cap)
				ckpt_errf(err, errlen, -EFBIG, "%s: listing "
					  "stopped at page %lu: more than %u "
					  "keys (s3_list_max_keys)", root,
					  page, key_cap);
			else if (pc->bad_etag)
				ckpt_errf(err, errlen, -EBADMSG, "%s: listing "
					  "(page %lu): the ETag of '%s' holds "
					  "a control character or is too "
					  "long: refused", root, page,
					  ckpt_escape_mid(pc->key,
							  strlen(pc->key),
							  shown,
							  sizeof(shown)));
			else if (pc->bad_key)
				ckpt_errf(err, errlen, -EBADMSG, "%s: listing "
					  "(page %lu): a key is not "
					  "percent-encoded as asked", root,
					  page);
			else if (pc->fn_rc == 0)
				ckpt_errf(err, errlen, rc, "%s: listing (page "
					  "%lu): %s", root, page, perr);
			break;
		}
		if (truncated && !next) {
			rc = ckpt_errf(err, errlen, -EBADMSG, "%s: listing "
				       "(page %lu): truncated, but no "
				       "continuation token", root, page);
			break;
		}
		if (truncated) {
			rc = ckpt_list_token_seen(&seen, &nseen, &capseen,
						  next);
			if (rc) {
				free(next);
				if (rc < 0)
					ckpt_errf(err, errlen, rc, "%s: out of "
						  "memory", root);
				else
					rc = ckpt_errf(err, errlen, -EIO,
						       "%s: listing (page "
						       "%lu): the server gave "
						       "a continuation token "
						       "it gave before (a "
						       "loop)", root, page);
				break;
			}
		}
		free(token);
		token = truncated ? next : NULL;
		if (!truncated)
			free(next);
	} while (token);
	free(seen);
	free(token);
	free(url);
	free(query);
	free(want);
	free(pc);
	return rc;
}
