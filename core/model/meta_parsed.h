/* SPDX-License-Identifier: MIT */
/*
 * A parsed checkpoint's own arrays as one blob, the "parsed form", that
 * the build of ckptfs which wrote it takes back without parsing: the
 * node-local index cache keeps one beside each image it stores
 * (<key>.ckptfs-parsed), so the node's other opens of that checkpoint
 * read the arrays instead of parsing the image again.  A form is tied to
 * the image it was parsed from (a tag: its hash) and to this build's
 * struct layout; the whole blob carries its own hash, and every index in
 * it is checked against the arrays' bounds before it is used.
 */
#ifndef CKPT_META_PARSED_H
#define CKPT_META_PARSED_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "model/meta.h"

#define CKPT_PARSED_IOV_MAX 24	/* the header, 10 arrays, their padding */

/* m's parsed form as iovecs: iov[0] is head, the rest borrowed from m's
 * arrays (valid while m is neither changed nor freed).  len is their
 * total. */
struct ckpt_parsed_iov {
	uint8_t head[128];
	struct iovec iov[CKPT_PARSED_IOV_MAX];
	int n;
	size_t len;
};

/*
 * The parsed form of m, which ckpt_meta_parse() made and nothing has
 * located in yet (each record located or pending), tagged with tag (the
 * caller's name for what it was parsed from).  Returns 0, or -EINVAL when
 * m is not one a form is made of (a record being located, or failed).
 */
int ckpt_meta_parsed_pack(const struct ckpt_meta *m, uint64_t tag,
			  struct ckpt_parsed_iov *out);

/*
 * The checkpoint in buf[0..len), a parsed form made by this build with
 * tag tag.  buf (a private mapping of len bytes, writable) is taken in
 * every case: on success the new meta's arrays point into it and
 * ckpt_meta_free() unmaps it, else it is unmapped here.  Returns 0 and sets *out (caller frees with
 * ckpt_meta_free(); its dir, store and origin are the caller's to set, as
 * after ckpt_meta_parse()), -ESTALE when buf is a form of another tag or
 * build (not an error: parse the image), or -EBADMSG (not a form, or its
 * bytes do not hash to its stamp), -EINVAL (an index or size out of
 * bounds) or -ENOMEM, with err naming name and the problem.
 */
int ckpt_meta_parsed_load(uint8_t *buf, size_t len, uint64_t tag,
			  const char *name, struct ckpt_meta **out, char *err,
			  size_t errlen);

/* Whether buf[0..len) has the head of a parsed form made by this build
 * with tag tag: what ckpt_meta_parsed_load() checks first, before it
 * reads further (its bytes' hash and every bound still to come). */
bool ckpt_meta_parsed_fits(const uint8_t *buf, size_t len, uint64_t tag);

/* Stamp buf[0..len), a parsed form of any build, edited or not, as this
 * build's with tag tag and a hash of its bytes as they are: for tests and
 * the fuzz target, which check that ckpt_meta_parsed_load() refuses what
 * does not fit without trusting the hash.  A buf shorter than the head
 * is left as it is. */
void ckpt_meta_parsed_restamp(uint8_t *buf, size_t len, uint64_t tag);

#endif
