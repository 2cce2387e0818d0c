/* SPDX-License-Identifier: MIT */
/* List Blobs over the HTTP engine: see az_list.h. */
#include "io/az_list.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>

#include "common/errbuf.h"
#include "io/list_seen.h"
#include "io/s3_url.h"
#include "io/s3_xml.h"


#define PAGE_MAX (16u << 20)	/* bytes of one page's XML */
#define NAME_MAX_LEN 4096
#define MARKER_MAX 2048

/* A <Blob>'s <Last-Modified> (RFC 1123, as a HEAD's header), seconds
 * since the epoch; 0 when absent or unreadable, as S3's listing. */
static int64_t blob_mtime(const char *b, const char *e, char *date,
			  size_t len)
{
	time_t t;

	if (ckpt_s3_xml_elem(b, (size_t)(e - b), "Last-Modified", date,
			     len) <= 0)
		return 0;
	t = curl_getdate(date, NULL);
	return t > 0 ? (int64_t)t : 0;
}

/* Each <Blob> of a page: fn for those directly under want.  Returns 0,
 * fn's value, -EBADMSG (*bad says what), or -EFBIG past the cap. */
static int page_blobs(const char *xml, size_t len, const char *want,
		      uint64_t *keys, uint32_t key_cap,
		      int (*fn)(void *ctx, const char *name, uint64_t size,
				const char *etag, int64_t mtime),
		      void *ctx, const char **bad)
{
	const char *p = xml, *end = xml + len;
	size_t wl = strlen(want);
	char name[NAME_MAX_LEN], num[32], tag[CKPT_STORE_VERSION_MAX - 2];
	char etag[CKPT_STORE_VERSION_MAX], date[64];
	int rc;

	for (;;) {
		const char *b = memmem(p, (size_t)(end - p), "<Blob>", 6), *e;
		uint64_t size;
		char *stop;

		if (!b)
			return 0;
		e = memmem(b, (size_t)(end - b), "</Blob>", 7);
		if (!e) {
			*bad = "a <Blob> without its end";
			return -EBADMSG;
		}
		p = e + 7;
		if (key_cap && ++*keys > key_cap)
			return -EFBIG;
		if (ckpt_s3_xml_elem(b, (size_t)(e - b), "Name", name,
				     sizeof(name)) < 0) {
			*bad = "a blob without a readable <Name>";
			return -EBADMSG;
		}
		if (strncmp(name, want, wl) || !name[wl] ||
		    strchr(name + wl, '/'))
			continue;
		if (ckpt_s3_xml_elem(b, (size_t)(e - b), "Content-Length", num,
				     sizeof(num)) <= 0 || num[0] < '0' ||
		    num[0] > '9') {
			*bad = "a blob without a <Content-Length>";
			return -EBADMSG;
		}
		errno = 0;
		size = strtoull(num, &stop, 10);
		if (errno || *stop) {
			*bad = "a blob with a bad <Content-Length>";
			return -EBADMSG;
		}
		if (ckpt_s3_xml_elem(b, (size_t)(e - b), "Etag", tag,
				     sizeof(tag)) <= 0) {
			*bad = "a blob without an <Etag>";
			return -EBADMSG;
		}
		/* quoted, as a HEAD's ETag header is */
		if (tag[0] == '"')
			snprintf(etag, sizeof(etag), "%s", tag);
		else
			snprintf(etag, sizeof(etag), "\"%s\"", tag);
		if (!ckpt_s3_etag_is_clean(etag)) {
			*bad = "a blob's ETag holds a control character";
			return -EBADMSG;
		}
		rc = fn(ctx, name + wl, size, etag, blob_mtime(b, e, date,
								 sizeof(date)));
		if (rc)
			return rc;
	}
}

int ckpt_az_list(struct ckpt_s3_http *h, const struct ckpt_az_cfg *cfg,
		 unsigned max_results, uint32_t key_cap,
		 int (*fn)(void *ctx, const char *name, uint64_t size,
			   const char *etag, int64_t mtime),
		 void *ctx, char *err, size_t errlen)
{
	const char *root = cfg->root;
	char *want = NULL, *query = NULL, *url = NULL;
	char mr[16], marker[MARKER_MAX] = "";
	unsigned long page = 0, page_cap;
	uint64_t *seen = NULL, keys = 0;
	size_t nseen = 0, capseen = 0;
	int rc = 0;

	page_cap = key_cap ? 2ul * (key_cap / (max_results ? max_results :
					       5000) + 1) + 16 : ULONG_MAX;
	if (asprintf(&want, "%s%s", cfg->prefix, cfg->prefix[0] ? "/" : "") <
	    0)
		return ckpt_errf(err, errlen, -ENOMEM, "%s: out of memory",
				 root);
	snprintf(mr, sizeof(mr), "%u", max_results);
	do {
		struct ckpt_s3_param p[6] = {
			{ "restype", "container" },
			{ "comp", "list" },
			{ "delimiter", "/" },
			{ "prefix", want },
		};
		struct ckpt_s3_req q = { .max_body = PAGE_MAX, .list = true };
		size_t np = 4, failed;
		const char *bad = NULL;

		if (page >= page_cap) {
			rc = ckpt_errf(err, errlen, -EFBIG, "%s: listing "
				       "stopped after %lu pages, the most for "
				       "%u blobs (s3_list_max_keys)", root,
				       page, key_cap);
			break;
		}
		if (marker[0])
			p[np++] = (struct ckpt_s3_param){ "marker", marker };
		if (max_results)
			p[np++] = (struct ckpt_s3_param){ "maxresults", mr };
		free(url);
		free(query);
		url = NULL;
		query = ckpt_s3_query(p, np);
		if (query)
			url = ckpt_az_url(cfg, NULL, query);
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
		rc = page_blobs(q.buf ? q.buf : "", q.buflen, want, &keys,
				key_cap, fn, ctx, &bad);
		if (rc == 0 && ckpt_s3_xml_elem(q.buf, q.buflen, "NextMarker",
						marker, sizeof(marker)) < 0) {
			marker[0] = '\0';
			/* there, but too long or malformed: never taken for
			 * the end of the listing */
			if (q.buf && memmem(q.buf, q.buflen, "<NextMarker>",
					    12)) {
				rc = -EBADMSG;
				bad = "a <NextMarker> too long or malformed";
			}
		}
		ckpt_s3_req_destroy(&q);
		if (rc == -EFBIG && !bad) {
			ckpt_errf(err, errlen, rc, "%s: listing stopped at "
				  "page %lu: more than %u blobs "
				  "(s3_list_max_keys)", root, page, key_cap);
			break;
		}
		if (rc == -EBADMSG && bad) {
			ckpt_errf(err, errlen, rc, "%s: listing (page %lu): "
				  "%s", root, page, bad);
			break;
		}
		if (rc)
			break;
		if (marker[0]) {
			rc = ckpt_list_token_seen(&seen, &nseen, &capseen,
						  marker);
			if (rc < 0) {
				ckpt_errf(err, errlen, rc, "%s: out of memory",
					  root);
				break;
			}
			if (rc) {
				rc = ckpt_errf(err, errlen, -EIO, "%s: listing "
					       "(page %lu): the server gave a "
					       "marker it gave before (a "
					       "loop)", root, page);
				break;
			}
		}
	} while (marker[0]);
	free(seen);
	free(url);
	free(query);
	free(want);
	return rc;
}
