/* SPDX-License-Identifier: MIT */
/*
 * The little XML that S3 answers with: a ListObjectsV2 page
 * (ListBucketResult) and an error body (<Error><Code>...).  Not a general
 * XML parser: S3 writes no CDATA, no comments inside these elements and
 * escapes '<' and '&' in text, so elements are found by their tags and
 * their text decoded (the five named entities and &#N; / &#xN;).
 */
#ifndef CKPT_S3_XML_H
#define CKPT_S3_XML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One <Contents> entry of a page; strings borrowed for the call. */
struct ckpt_s3_xml_entry {
	const char *key;	/* decoded */
	uint64_t size;
	const char *etag;	/* decoded, quotes kept ("\"abc\""), or "" */
	int64_t mtime;		/* <LastModified>, seconds since the epoch;
				 * 0: none or unreadable */
};

/*
 * Parse one ListObjectsV2 page of len bytes: call fn(ctx, entry) for each
 * <Contents> in order (fn returns 0 to go on, else that value is
 * returned), set *truncated from <IsTruncated> and *token to a new copy
 * of <NextContinuationToken> (caller frees; NULL when absent).  Returns
 * 0, fn's value, or -EBADMSG / -ENOMEM with err saying what is wrong.
 */
int ckpt_s3_xml_list_page(const char *xml, size_t len,
			  int (*fn)(void *ctx,
				    const struct ckpt_s3_xml_entry *e),
			  void *ctx, bool *truncated, char **token,
			  char *err, size_t errlen);

/* The decoded <Code> of an S3 error body into code (cap bytes, always
 * NUL-terminated; "" when there is none or it does not fit). */
void ckpt_s3_xml_error_code(const char *xml, size_t len, char *code,
			    size_t cap);

/*
 * Decode len bytes of XML text (entities) into out (cap bytes, NUL-
 * terminated).  Returns the decoded length, or -1 when it does not fit,
 * an entity is unknown or malformed, or it decodes to a NUL.
 */
long ckpt_s3_xml_text(const char *s, size_t len, char *out, size_t cap);

/*
 * The decoded text of the first element <tag> of len bytes of xml (an STS
 * answer's <AccessKeyId>, say) into out (cap bytes, NUL-terminated).
 * Returns its length, or -1 (out "") when there is none, it does not fit
 * or it is malformed: never a truncated value.
 */
long ckpt_s3_xml_elem(const char *xml, size_t len, const char *tag,
		      char *out, size_t cap);

#endif
