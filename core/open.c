/* SPDX-License-Identifier: MIT */
/*
 * "Open this directory as a checkpoint": makes its store (io/store.h), the
 * open handle's source of every byte, reads .metadata through it, picks
 * the format reader (native msgpack, a PyTorch DCP pickle indexed by
 * core/torch/, rank-local __R.metadata files, safetensors files), and
 * hands the image to the native parser and validator (model/).
 */
#include "model/meta.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <xxhash.h>

#include "common/asan.h"
#include "common/cancel.h"
#include "common/errbuf.h"
#include "common/escape.h"
#include "common/grow.h"
#include "io/datafiles.h"
#include "io/index_cache.h"
#include "io/store.h"
#include "model/meta_parsed.h"
#include "records/record_cache.h"
#include "safetensors/st_index.h"
#include "torch/torch_index.h"

/*
 * The store of checkpoint dir: every byte of the checkpoint is read
 * through it.  A directory that does not exist is -ENOENT naming it (a
 * directory holding no checkpoint is -EINVAL, "not a checkpoint").
 */
static int open_store(const char *dir, bool follow,
		      const struct ckpt_s3_opts *s3, struct ckpt_store **s,
		      char *err, size_t errlen)
{
	struct ckpt_store_opts so = { .follow_symlinks = follow, .s3 = s3 };
	int rc;

	rc = ckpt_store_new(dir, &so, s, err, errlen);
	/* (An object store's own line says which of endpoint, bucket or
	 * credentials is wrong: kept.) */
	if (rc == -ENOENT && !ckpt_store_root_is_remote(dir))
		ckpt_errf(err, errlen, rc, "%s: cannot open: %s", dir,
			  strerror(ENOENT));
	return rc;
}

static void set_mtime(struct timespec *t, const struct ckpt_store_file_info *fi)
{
	t->tv_sec = (time_t)fi->mtime_sec;
	t->tv_nsec = (long)fi->mtime_nsec;
}

/* .metadata, whole: *path (caller frees) names it, also on error;
 * version (may be NULL) gets its version (ckpt_store_open()). */
static int read_dot_metadata(struct ckpt_store *s, char **path, uint8_t **buf,
			     size_t *len, struct timespec *mtime,
			     char version[CKPT_STORE_VERSION_MAX], char *err,
			     size_t errlen)
{
	struct ckpt_store_file_info fi;
	int rc;

	if (asprintf(path, "%s/.metadata", ckpt_store_root(s)) < 0) {
		*path = NULL;
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	}
	rc = ckpt_store_read_file(s, ".metadata", CKPT_META_MAX_BYTES, buf, len,
				  &fi, err, errlen);
	if (!rc)
		set_mtime(mtime, &fi);
	if (!rc && version)
		memcpy(version, fi.version, sizeof(fi.version));
	return rc;
}

/* Index the torch checkpoint of s from its pickle: see torch_index.h. */
static int index_now(struct ckpt_store *s, const char *meta_path,
		     const uint8_t *pkl, size_t len, uint8_t **img,
		     size_t *imglen, char *err, size_t errlen)
{
	return ckpt_torch_index(s, meta_path, pkl, len, img, imglen, err,
				errlen);
}

#define RANK_LOCAL_MAX 65536	/* __R.metadata files merged at most */

static int cmp_rank(const void *a, const void *b)
{
	unsigned long x = *(const unsigned long *)a, y = *(const unsigned long *)b;

	return x < y ? -1 : x > y;
}

/* "__R.metadata" with R decimal: 0 and *rank, or -1. */
static int rank_local_name(const char *s, unsigned long *rank)
{
	char *end;

	if (strncmp(s, "__", 2) || s[2] < '0' || s[2] > '9')
		return -1;
	errno = 0;
	*rank = strtoul(s + 2, &end, 10);
	return errno || strcmp(end, ".metadata") ? -1 : 0;
}

/* The listing's __R.metadata files (rank-local checkpoints: see
 * rank_local_image() below). */
struct rank_scan {
	unsigned long *ranks;
	size_t n, cap;
	bool has_index;		/* a .ckptfs-index is listed beside them */
};

static int scan_rank(void *ctx, const char *name, uint64_t size)
{
	struct rank_scan *rs = ctx;
	unsigned long r;

	(void)size;
	if (!strcmp(name, CKPT_INDEX_NAME))
		rs->has_index = true;
	if (rank_local_name(name, &r))
		return 0;
	if (rs->n == RANK_LOCAL_MAX)
		return -E2BIG;
	if (ckpt_grow((void **)&rs->ranks, &rs->cap, rs->n + 1,
		      sizeof(*rs->ranks)))
		return -ENOMEM;
	rs->ranks[rs->n++] = r;
	return 0;
}

/* Whether a PyTorch checkpoint's records are located when a read needs
 * them rather than all at open: on every store (an object store, a local
 * disk, a shared filesystem, where the eager pass is a random read per
 * record boundary of the whole checkpoint before the first byte of
 * data); CKPTFS_EAGER_INDEX=1 indexes them all at open, as before. */
static bool locate_lazily(void)
{
	const char *eager = getenv("CKPTFS_EAGER_INDEX");

	return !(eager && eager[0] == '1');
}

/* An image to build when the pickle given back before a parsed form was
 * taken could not be read again as it was (pickle_again()). */
static int pickle_gone(const char *meta_path, char *err, size_t errlen)
{
	return ckpt_errf(err, errlen, -ESTALE,
			 "%s: changed (or became unreadable) while it was being opened; open it again",
			 meta_path);
}

/* Before an image with the stamp of s's data files is built: the stamp
 * opens every data file, on an object store through one listing of the
 * root rather than a HEAD each. */
static void list_for_stamp(struct ckpt_store *s)
{
	ckpt_store_list_ahead(s, UINT32_MAX);
}

/* The image of the torch checkpoint of s with pickle pkl (.metadata at
 * meta_path) as an open builds it now: lazy (ckpt_torch_index_lazy()),
 * or lazy with the stamp of its data files, so that it may be stored in
 * the node-local index cache (ckpt_torch_index_merged() of nothing
 * located), or eager (ckpt_torch_index()).  spend: pkl is torch_meta()'s
 * own *pklp, which it only frees afterwards, so a lazy index without the
 * stamp gives its pages back as it goes (ckpt_torch_index_spend(); the
 * stamped one an open stores is built spent by build_staged()). */
static int build_image(struct ckpt_store *s, const char *meta_path,
		       const uint8_t *pkl, size_t len, bool lazy,
		       bool stamped, bool spend, uint8_t **img, size_t *imglen,
		       char *err, size_t errlen)
{
	const struct ckpt_meta *none[1] = { NULL };

	if (!pkl)
		return pickle_gone(meta_path, err, errlen);
	if (!lazy)
		return ckpt_torch_index(s, meta_path, pkl, len, img, imglen,
					err, errlen);
	if (stamped) {
		list_for_stamp(s);
		return ckpt_torch_index_merged(s, meta_path, pkl, len, none, 0,
					       img, imglen, err, errlen);
	}
	if (spend)
		return ckpt_torch_index_spend(s, meta_path, (uint8_t *)pkl,
					      len, img, imglen, err, errlen);
	return ckpt_torch_index_lazy(s, meta_path, pkl, len, img, imglen, err,
				     errlen);
}

/* A directory of safetensors files: see safetensors/st_index.h. */
static int safetensors_image(struct ckpt_store *s, uint8_t **img,
			     size_t *imglen, struct timespec *mtime,
			     bool *sharded, char **warning, char *err,
			     size_t errlen)
{
	int64_t sec = 0, nsec = 0;
	int rc;

	rc = ckpt_safetensors_index(s, img, imglen, sharded, &sec, &nsec,
				    warning, err, errlen);
	mtime->tv_sec = (time_t)sec;
	mtime->tv_nsec = (long)nsec;
	return rc;
}

/* *warning (owned; the first one kept) = "fmt...". */
static void add_warning(char **warning, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void add_warning(char **warning, const char *fmt, ...)
{
	va_list ap;

	if (*warning)
		return;
	va_start(ap, fmt);
	if (vasprintf(warning, fmt, ap) < 0)
		*warning = NULL;
	va_end(ap);
}

/* The key s's checkpoint (.metadata version mver) is cached under, into
 * hex: of an object store's endpoint, bucket and prefix, or of a local
 * directory's canonical path and identity.  -ENOMEM or 0. */
static int cache_key(struct ckpt_store *s, const char *mver,
		     char hex[CKPT_INDEX_CACHE_KEY_HEX])
{
	const char *dir = ckpt_store_root(s);
	char canon[PATH_MAX], *root;

	if (ckpt_store_root_is_remote(dir)) {
		ckpt_index_cache_key(ckpt_store_identity(s), mver, hex);
		return 0;
	}
	if (!realpath(dir, canon))
		snprintf(canon, sizeof(canon), "%s", dir);
	if (asprintf(&root, "%s\n%s", canon, ckpt_store_identity(s)) < 0)
		return -ENOMEM;
	ckpt_index_cache_key(root, mver, hex);
	free(root);
	return 0;
}

/* A cached entry that fails its checks: a warning saying why (without
 * the advice meant for .ckptfs-index: this file is rebuilt). */
static void cache_ignored(char **warning, char *why)
{
	char *advice = strstr(why, "; run 'ckptfs index ");

	if (advice)
		*advice = '\0';
	add_warning(warning, "index cache: %s (ignored, indexed again)",
		    why);
}

/*
 * ic's stamp check of hex's cached image in c, img[0..len): the whole
 * image (tag NULL), or its head, the hash of its records into *tag
 * (ckpt_torch_index_check_head()).  Strict: each data file's ident must
 * match too.  Returns 0 or -errno with why.
 */
static int check_cached(const struct ckpt_index_cache *c, const char *hex,
			struct ckpt_index_check *ic, const uint8_t *img,
			size_t len, uint64_t *tag, char *why, size_t whylen)
{
	char path[PATH_MAX];
	int rc;

	snprintf(path, sizeof(path), "%s/%s.ckptfs-index", c->dir, hex);
	ic->index_path = path;
	ic->strict = true;
	rc = tag ? ckpt_torch_index_check_head(ic, img, len, tag, why, whylen) :
		   ckpt_torch_index_check(ic, img, len, why, whylen);
	ic->index_path = NULL;
	ic->strict = false;
	return rc;
}

/*
 * A cached image of key hex in c that ic accepts: 0 and *img, or -errno
 * (-ENOENT: none), with one line in *warning when there was one that is
 * not used (its file, why, and that it is rebuilt).
 */
static int image_hit(const struct ckpt_index_cache *c, const char *hex,
		     struct ckpt_index_check *ic, uint8_t **img,
		     size_t *imglen, char **warning)
{
	char why[1024];
	int rc;

	rc = ckpt_index_cache_read(c, hex, CKPT_META_MAX_BYTES, img, imglen,
				   why, sizeof(why));
	if (rc == -ENOENT)
		return rc;
	if (!rc) {
		rc = check_cached(c, hex, ic, *img, *imglen, NULL, why,
				  sizeof(why));
		if (rc) {
			free(*img);
			*img = NULL;
		} else {
			ckpt_index_cache_touch(c, hex);	/* kept by use */
		}
	}
	if (rc)
		cache_ignored(warning, why);
	return rc;
}

/* A lazy image built under the cache key's lock and staged
 * (build_staged()), kept locked until the open has parsed it
 * (store_held()); or a cached image with no parsed form to take, whose
 * form is stored once the open has parsed it (store_held()). */
struct cache_hold {
	bool held;		/* c locked on hex, the image staged */
	bool form;		/* c open (unlocked): store a parsed form */
	struct ckpt_index_cache c;
	char hex[CKPT_INDEX_CACHE_KEY_HEX];
	struct ckpt_index_staged staged;
	const uint8_t *map;	/* the staged image mapped, or NULL */
	uint64_t tag;		/* the hash of the image's records (its
				 * stamp's): its parsed form's tag */
	bool has_tag;
};

/* An image of len bytes the open is done with: the staged one h mapped
 * (it outlives h's lock), or one in memory. */
static void release_image(struct cache_hold *h, uint8_t *img, size_t len)
{
	if (!img || img != h->map) {
		free(img);
		return;
	}
	CKPT_UNPOISON(img, len);	/* spent: poisoned */
	munmap(img, len);
	h->map = NULL;
}

/* Release h's lock and cache: the image is not stored. */
static void drop_held(struct cache_hold *h)
{
	ckpt_index_cache_drop_lock(&h->c, h->hex);
	ckpt_index_cache_close(&h->c);
	h->held = false;
}

/* The most a parsed form may hold (it is about the size of its image). */
#define PARSED_MAX_BYTES (2 * CKPT_META_MAX_BYTES)

/* .metadata of s read again: the buffer (the caller's), or NULL when it
 * cannot be read or is not len bytes of hash xxh3 any more. */
static uint8_t *read_pickle_as(struct ckpt_store *s, size_t len,
			       uint64_t xxh3)
{
	uint8_t *pkl = NULL;
	size_t n = 0;
	char why[256];

	if (ckpt_store_read_file(s, ".metadata", CKPT_META_MAX_BYTES, &pkl,
				 &n, NULL, why, sizeof(why)))
		return NULL;
	if (n != len || XXH3_64bits(pkl, n) != xxh3) {
		free(pkl);	/* replaced since: not this open's */
		return NULL;
	}
	return pkl;
}

/* Before a parsed form is loaded (it is about the size of the pickle):
 * the pickle *drop, which ic checked the image's stamp against, given
 * back (ic->pkl NULL then; its hash stays), when the open needs it no
 * more (drop not NULL: torch_meta()). */
static void give_pickle_back(struct ckpt_index_check *ic, uint8_t **drop)
{
	if (!drop || !*drop || !ic->has_pkl_xxh3)
		return;
	free(*drop);
	*drop = NULL;
	ic->pkl = NULL;
}

/* The pickle given back (give_pickle_back()) read again, as the open
 * read it (ic->pkl_len bytes of hash ic->pkl_xxh3), into *drop and
 * ic->pkl; left NULL if it is not that any more or cannot be read (an
 * index to build then fails: pickle_gone()). */
static void pickle_again(struct ckpt_index_check *ic, uint8_t **drop)
{
	if (!drop || *drop || !ic->has_pkl_xxh3)
		return;
	*drop = read_pickle_as(ic->store, ic->pkl_len, ic->pkl_xxh3);
	ic->pkl = *drop;
}

/*
 * The checkpoint parsed from the cached image of key hex in c that hashes
 * to tag, taken back from its parsed form (model/meta_parsed.h) into
 * *parsed; left NULL when there is none that fits (a form of another
 * image or build is replaced once the image is parsed; one that fails
 * its checks also leaves a warning).  A form of this build and image
 * takes the pickle *drop's place in memory (give_pickle_back(); read
 * again should it then fail its checks).
 */
static void parsed_hit(const struct ckpt_index_cache *c, const char *hex,
		       uint64_t tag, struct ckpt_index_check *ic,
		       uint8_t **drop, struct ckpt_meta **parsed,
		       char **warning)
{
	char why[1024], name[PATH_MAX];
	bool fits = false;
	uint8_t *buf;
	size_t len;
	int rc;

	*parsed = NULL;
	rc = ckpt_index_cache_map_parsed(c, hex, PARSED_MAX_BYTES, &buf, &len,
					 why, sizeof(why));
	if (rc == -ENOENT)
		return;
	if (!rc) {
		fits = ckpt_meta_parsed_fits(buf, len, tag);
		if (fits)
			give_pickle_back(ic, drop);
		snprintf(name, sizeof(name), "%s/%s.ckptfs-parsed", c->dir, hex);
		rc = ckpt_meta_parsed_load(buf, len, tag, name, parsed, why,
					   sizeof(why));
	}
	if (rc && fits)
		pickle_again(ic, drop);
	if (rc && rc != -ESTALE)
		add_warning(warning, "index cache: %s (ignored, parsed again)",
			    why);
}

/* Bytes read first of a cached image whose parsed form is taken: enough
 * for the stamp of a checkpoint of a few thousand data files (one with
 * more reads 8 times more until its stamp is whole). */
#define IMAGE_HEAD_BYTES ((size_t)256 << 10)

/*
 * The checkpoint parsed from hex's cached image, from its parsed form,
 * with only the image's head read: its stamp checked as image_hit()
 * checks it, but for the hash of its records, which the form stands in
 * for.  Returns 0 with *parsed and *img (the head, which says the
 * image's variants; caller frees), or -errno when the whole image is to
 * be read (no form that fits, a stamp beyond the head, or stale).
 */
static int form_hit(const struct ckpt_index_cache *c, const char *hex,
		    struct ckpt_index_check *ic, uint8_t **drop,
		    uint8_t **img, size_t *imglen, struct ckpt_meta **parsed,
		    char **warning)
{
	char why[1024];
	size_t head = IMAGE_HEAD_BYTES;
	uint64_t tag;
	int rc;

	for (;;) {
		rc = ckpt_index_cache_read_head(c, hex, head, img, imglen, why,
						sizeof(why));
		if (rc)
			return rc;
		if (ckpt_torch_index_has_stamp(*img, *imglen) ||
		    *imglen < head || head >= CKPT_META_MAX_BYTES)
			break;
		free(*img);	/* a stamp longer than the head */
		head *= 8;
	}
	rc = check_cached(c, hex, ic, *img, *imglen, &tag, why, sizeof(why));
	if (!rc) {
		parsed_hit(c, hex, tag, ic, drop, parsed, warning);
		if (!*parsed)
			rc = -ENOENT;
	}
	if (rc) {
		free(*img);
		*img = NULL;
		return rc;
	}
	ckpt_index_cache_touch(c, hex);	/* kept by use */
	return 0;
}

/*
 * A cached image of key hex in c that ic accepts: 0 with *parsed, the
 * checkpoint from its parsed form (form_hit()), or else *img, the whole
 * image; or -errno (-ENOENT: none), as image_hit().  drop (or NULL): the
 * pickle to give back before the form is loaded (give_pickle_back()).
 */
static int cache_hit(const struct ckpt_index_cache *c, const char *hex,
		     struct ckpt_index_check *ic, uint8_t **drop,
		     uint8_t **img, size_t *imglen, struct ckpt_meta **parsed,
		     char **warning)
{
	*parsed = NULL;
	if (!form_hit(c, hex, ic, drop, img, imglen, parsed, warning))
		return 0;
	return image_hit(c, hex, ic, img, imglen, warning);
}

/* Store m, parsed from hex's image in c whose records hash to tag, as
 * that image's parsed form: best effort (a failure leaves a warning, and
 * the next open parses). */
static void parsed_store(const struct ckpt_index_cache *c, const char *hex,
			 uint64_t tag, const struct ckpt_meta *m,
			 char **warning)
{
	struct ckpt_parsed_iov pv;
	char why[1024];

	if (ckpt_meta_parsed_pack(m, tag, &pv))
		return;
	if (ckpt_index_cache_write_parsed(c, hex, pv.iov, pv.n, why,
					  sizeof(why)))
		add_warning(warning, "index cache: %s (not cached)", why);
}

/* Before the parse spends img (ckpt_meta_parse_spend()): note the tag of
 * its parsed form, for store_held(). */
static void note_tag(struct cache_hold *h, const uint8_t *img,
		     size_t imglen)
{
	if (h->held || h->form)
		h->has_tag = ckpt_torch_index_image_hash(img, imglen, &h->tag);
}

/*
 * Store the image staged under h's lock when m (parsed from it) is one
 * the open keeps: each data file at least as long as its records need,
 * as ckpt_files_open() will require (a lazy image has read no data file:
 * a checkpoint that fails there is not cached, as one that fails to
 * index is not); m NULL: not parsed, not stored.  With the image, m as
 * its parsed form.  Then release the lock: the node's other opens,
 * waiting on it, read the image and take the form.  Or, for a cached
 * image that had no form (h->form), store m as its form.
 */
/* Whether each data file of m (as s has it open: the stamp opened
 * them) holds the records m needs of it, as ckpt_files_open() checks. */
static bool has_files_whole(struct ckpt_store *s, const struct ckpt_meta *m)
{
	struct ckpt_store_file_info fi;
	uint32_t i, id;

	for (i = 0; i < m->nfiles; i++)
		if (ckpt_store_open(s, m->strings + m->files[i].path, &id,
				    &fi, NULL, 0) ||
		    fi.size < m->files[i].need)
			return false;
	return true;
}

static void store_held(struct cache_hold *h, struct ckpt_store *s,
		       const struct ckpt_meta *m, char **warning)
{
	char why[1024];

	if (h->form) {
		if (m && h->has_tag)
			parsed_store(&h->c, h->hex, h->tag, m, warning);
		ckpt_index_cache_close(&h->c);
		h->form = false;
	}
	if (!h->held)
		return;
	if (!m || !has_files_whole(s, m)) {
		ckpt_index_cache_unstage(&h->c, &h->staged);
		drop_held(h);
		return;
	}
	if (ckpt_index_cache_commit(&h->c, &h->staged, why, sizeof(why))) {
		add_warning(warning, "index cache: %s (not cached)", why);
		drop_held(h);
		return;
	}
	if (h->has_tag)
		parsed_store(&h->c, h->hex, h->tag, m, warning);
	ckpt_index_cache_close(&h->c);
	h->held = false;
}

/*
 * The lazy image of ic (stamped) built under c's lock on hex, and staged
 * in the cache as the index gives it, in pieces: neither the image nor a
 * joined copy of it is held in memory beside what the parse builds.
 * *img is the staged file mapped (hold->map: its pages are the page
 * cache's, and the parse gives back those it has read), held by *hold
 * (c's now) until store_held().  Should staging fail, a warning, the
 * lock dropped and the image joined into *img in memory: not stored;
 * should mapping fail, joined in memory but still stored.  Returns 0, or
 * -errno with err when the index fails (the lock dropped, c closed).
 */
static int build_staged(struct ckpt_store *s,
			const struct ckpt_index_check *ic,
			struct ckpt_index_cache *c, const char *hex,
			bool spend, struct cache_hold *hold, uint8_t **img,
			size_t *imglen, char **warning, char *err,
			size_t errlen)
{
	struct ckpt_torch_pieces pc;
	char why[1024];
	int rc;

	if (!ic->pkl) {
		rc = pickle_gone(ic->meta_path, err, errlen);
		goto out_drop;
	}
	list_for_stamp(s);
	rc = ckpt_torch_index_pieces(s, ic->meta_path, (uint8_t *)ic->pkl,
				     ic->pkl_len, spend, &pc, err, errlen);
	if (rc)
		goto out_drop;
	hold->c = *c;	/* closed by store_held() */
	memcpy(hold->hex, hex, sizeof(hold->hex));
	hold->held = true;
	if (ckpt_index_cache_stage(c, hex, pc.iov, pc.n, &hold->staged, why,
				   sizeof(why))) {
		add_warning(warning, "index cache: %s (not cached)", why);
		drop_held(hold);
	} else if (!ckpt_index_cache_map_staged(c, &hold->staged, pc.len,
						&hold->map, why,
						sizeof(why))) {
		*imglen = pc.len;
		*img = (uint8_t *)hold->map;
		ckpt_torch_pieces_free(&pc);
		return 0;
	} else {
		add_warning(warning, "index cache: %s (parsed from memory)",
			    why);
	}
	if (ckpt_torch_pieces_join(&pc, img, imglen)) {
		if (hold->held) {
			ckpt_index_cache_unstage(&hold->c, &hold->staged);
			drop_held(hold);
		}
		return ckpt_errf(err, errlen, -ENOMEM, "%s: out of memory",
				 ic->meta_path);
	}
	return 0;
out_drop:
	ckpt_index_cache_drop_lock(c, hex);
	ckpt_index_cache_close(c);
	return rc;
}

/*
 * A torch checkpoint without an index, through the index cache dir
 * (ckptfs.h): a current cached image, or else, holding the key's lock,
 * one another process wrote meanwhile, or else indexed now (lazily or
 * not: build_image()) and stored.  So the processes of a node that open
 * the same checkpoint at once parse its .metadata once: the first to take
 * the lock builds and stores the image, the others wait for the lock and
 * read that.  A lazy image is stored once parsed (store_held()): *hold
 * keeps the lock until then, and the image's parsed form is stored with
 * it.  A cached image comes with its parsed form into *parsed when that
 * fits it (parsed_hit()); else *hold keeps the cache open to store the
 * form once the image is parsed.  Whatever goes wrong with the cache
 * leaves a warning and indexes in memory; only indexing itself can fail.
 */
static int cached_image(struct ckpt_store *s, struct ckpt_index_check *ic,
			const char *cdir, const char *mver, bool lazy,
			bool spend, uint8_t **drop, uint8_t **img,
			size_t *imglen, uint8_t *origin,
			struct cache_hold *hold, struct ckpt_meta **parsed,
			char **warning, char *err, size_t errlen)
{
	struct ckpt_index_cache c;
	char hex[CKPT_INDEX_CACHE_KEY_HEX], why[1024];
	bool again = false;
	char *ignored;
	int rc;

	if (cache_key(s, mver, hex))
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	if (ckpt_index_cache_open(cdir, &c, why, sizeof(why))) {
		add_warning(warning, "%s", why);
		goto out_index;
	}
	if (!cache_hit(&c, hex, ic, drop, img, imglen, parsed, warning))
		goto out_hit;
lock:
	rc = ckpt_index_cache_lock(&c, hex, why, sizeof(why));
	if (rc == -ECANCELED) {
		ckpt_index_cache_close(&c);
		return ckpt_errf(err, errlen, rc, "%s", why);
	}
	if (rc) {
		add_warning(warning, "index cache: %s (indexed in memory)",
			    why);
		goto out_close;
	}
	/* Whoever held the lock may have written it meanwhile: read
	 * outside the lock, so that the node's other opens waiting on it
	 * read theirs at the same time, not one after another.  Should it
	 * not do, read again under the lock (and say why then). */
	if (!again && ckpt_index_cache_has_image(&c, hex)) {
		ckpt_index_cache_unlock(&c);
		ignored = NULL;
		rc = cache_hit(&c, hex, ic, drop, img, imglen, parsed,
			       &ignored);
		free(ignored);
		if (!rc)
			goto out_hit;
		again = true;
		goto lock;
	}
	if (!cache_hit(&c, hex, ic, drop, img, imglen, parsed, warning))
		goto out_hit;
	*origin = CKPT_ORIGIN_TORCH;
	if (lazy)
		return build_staged(s, ic, &c, hex, spend, hold, img, imglen,
				    warning, err, errlen);
	rc = build_image(s, ic->meta_path, ic->pkl, ic->pkl_len, lazy, true,
			 spend, img, imglen, err, errlen);
	if (rc) {
		ckpt_index_cache_drop_lock(&c, hex);
	} else if (ckpt_index_cache_write(&c, hex, *img, *imglen, why,
					  sizeof(why))) {
		add_warning(warning, "index cache: %s (not cached)", why);
		ckpt_index_cache_drop_lock(&c, hex);
	}
	ckpt_index_cache_close(&c);
	return rc;
out_hit:
	*origin = CKPT_ORIGIN_TORCH_INDEX_CACHE;
	if (*parsed) {
		ckpt_index_cache_close(&c);
		return 0;
	}
	ckpt_index_cache_unlock(&c);	/* stores the form unlocked */
	hold->c = c;	/* closed by store_held() */
	memcpy(hold->hex, hex, sizeof(hex));
	hold->form = true;
	return 0;
out_close:
	ckpt_index_cache_close(&c);
out_index:
	*origin = CKPT_ORIGIN_TORCH;
	return build_image(s, ic->meta_path, ic->pkl, ic->pkl_len, lazy,
			   false, spend, img, imglen, err, errlen);
}

/*
 * A torch checkpoint's native image: the index given, or else
 * .ckptfs-index when there is one, checked against the checkpoint as it
 * is now (ckpt_torch_index_check(): a stale or edited index is an error,
 * never trusted); with no index, from the index cache when o has one
 * (cached_image()), else built now.  On every store the image built
 * now is lazy (ckpt_torch_index_lazy()): the open reads .metadata alone
 * and each record is located when a read needs it.  With an index cache
 * the lazy image is stored at open (stamped: build_image()), so that the
 * node's other opens read it rather than parse the pickle again, and
 * what the open locates is merged into it when it is freed
 * (located_to_cache()); CKPTFS_EAGER_INDEX=1 in the environment indexes
 * the checkpoint whole at open, as before, and stores that.
 */
static int torch_image(struct ckpt_store *s, const char *meta_path,
		       const struct ckpt_open_opts *o, const char *mver,
		       const uint8_t *pkl, size_t len, bool spend,
		       uint8_t **drop, const uint64_t *xxh3, uint8_t **img,
		       size_t *imglen, uint8_t *origin,
		       struct cache_hold *hold, struct ckpt_meta **parsed,
		       char **warning, char *err, size_t errlen)
{
	struct ckpt_index_check ic = {
		.dir = ckpt_store_root(s), .meta_path = meta_path, .store = s,
		.pkl = pkl, .pkl_len = len, .pkl_xxh3 = xxh3 ? *xxh3 : 0,
		.has_pkl_xxh3 = xxh3 != NULL,
	};
	bool lazy = locate_lazily();
	char *ipath = NULL;
	int rc;

	if (o && o->index) {
		/* A file the user names is on this machine, even when the
		 * checkpoint is remote: read through a local store. */
		ic.index_path = o->index;
		rc = ckpt_store_read_local(o->index, CKPT_META_MAX_BYTES, img,
					   imglen, NULL, err, errlen);
	} else {
		if (asprintf(&ipath, "%s/%s", ic.dir, CKPT_INDEX_NAME) < 0)
			return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
		ic.index_path = ipath;
		rc = ckpt_store_read_file(s, CKPT_INDEX_NAME,
					  CKPT_META_MAX_BYTES, img, imglen,
					  NULL, err, errlen);
		if (rc == -ENOENT) {
			free(ipath);
			ic.index_path = NULL;
			if (o && o->index_cache)
				return cached_image(s, &ic, o->index_cache,
						    mver, lazy, spend, drop,
						    img, imglen, origin,
						    hold, parsed, warning,
						    err, errlen);
			*origin = CKPT_ORIGIN_TORCH;
			return build_image(s, meta_path, pkl, len, lazy, false,
					   spend, img, imglen, err, errlen);
		}
	}
	if (!rc) {
		rc = ckpt_torch_index_check(&ic, *img, *imglen, err, errlen);
		if (rc) {
			free(*img);
			*img = NULL;
		}
	}
	free(ipath);
	*origin = CKPT_ORIGIN_TORCH_INDEX;
	return rc;
}

/* Store img as s's cached image in cdir, replacing one that did not
 * parse; a failure only adds a warning. */
static void cache_replace(struct ckpt_store *s, const char *cdir,
			  const char *mver, const uint8_t *img, size_t imglen,
			  char **warning)
{
	struct ckpt_index_cache c;
	char hex[CKPT_INDEX_CACHE_KEY_HEX], why[1024];

	if (cache_key(s, mver, hex))
		return;
	if (ckpt_index_cache_open(cdir, &c, why, sizeof(why)))
		return;		/* it opened a moment ago: said then */
	if (ckpt_index_cache_lock(&c, hex, why, sizeof(why)) ||
	    ckpt_index_cache_write(&c, hex, img, imglen, why, sizeof(why)))
		add_warning(warning, "index cache: %s (not cached)", why);
	ckpt_index_cache_close(&c);
}

/* A lazy open with an index cache keeps the pickle it opened to store
 * what it locates (keep_for_cache()) when it comes from an object store,
 * where reading it again would cost a GET; a local one is read again. */
static bool keeps_pickle(struct ckpt_store *s, const struct ckpt_open_opts *o)
{
	return o && o->index_cache &&
	       ckpt_store_root_is_remote(ckpt_store_root(s));
}

/*
 * A torch checkpoint with pickle *pklp as .metadata (meta_path), parsed
 * into *m from its image (torch_image()).  *pklp is freed (and NULL) as
 * soon as nothing needs it, before the parse, unless keeps_pickle().  A
 * cached image that passes its stamp check but does not parse is
 * ignored, with a warning, and the checkpoint indexed again.
 */
static int torch_meta(struct ckpt_store *s, const char *meta_path,
		      const struct ckpt_open_opts *o, const char *mver,
		      uint8_t **pklp, size_t len, const uint64_t *xxh3,
		      struct ckpt_meta **m, uint8_t *origin, uint8_t *variants,
		      char **warning, char *err, size_t errlen)
{
	struct cache_hold hold = { .held = false };
	struct ckpt_meta *parsed = NULL;
	const uint8_t *pkl;
	bool keep = keeps_pickle(s, o);
	uint8_t *img = NULL;
	size_t imglen = 0;
	int rc;

	/* Not kept: its pages go back as the index streams it, or before a
	 * parsed form is loaded (read again should that not do). */
	rc = torch_image(s, meta_path, o, mver, *pklp, len, !keep,
			 keep || !xxh3 ? NULL : pklp, xxh3, &img, &imglen,
			 origin, &hold, &parsed, warning, err, errlen);
	pkl = *pklp;
	if (rc)
		return rc;
	if (parsed) {	/* a cached image's parsed form */
		*variants = ckpt_torch_index_variants(img, imglen);
		free(img);
		if (!keep) {
			free(*pklp);
			*pklp = NULL;
		}
		*m = parsed;
		return 0;
	}
	if (*origin != CKPT_ORIGIN_TORCH_INDEX_CACHE && !keep) {
		/* Not needed again: the image and the parsed checkpoint
		 * need not share memory with it. */
		free(*pklp);
		*pklp = NULL;
	}
	*variants = ckpt_torch_index_variants(img, imglen);
	note_tag(&hold, img, imglen);
	/* Its pages go back as it is parsed: the image, built or read
	 * whole (or mapped from where it is staged), and the checkpoint are
	 * not held whole at once. */
	rc = ckpt_meta_parse_spend(img, imglen, meta_path, m, err, errlen);
	release_image(&hold, img, imglen);
	store_held(&hold, s, rc ? NULL : *m, warning);
	if (!rc && *pklp && !keep) {
		free(*pklp);	/* a cached image parsed: not needed again */
		*pklp = NULL;
	}
	if (!rc || *origin != CKPT_ORIGIN_TORCH_INDEX_CACHE)
		return rc;
	add_warning(warning,
		    "index cache: the cached index of %s does not parse (%s; ignored, indexed again)",
		    meta_path, err ? err : "");
	*origin = CKPT_ORIGIN_TORCH;
	rc = build_image(s, meta_path, pkl, len, locate_lazily(), true, false,
			 &img, &imglen, err, errlen);
	if (rc)
		return rc;
	*variants = ckpt_torch_index_variants(img, imglen);
	rc = ckpt_meta_parse(img, imglen, meta_path, m, err, errlen);
	if (!rc)	/* else every later open would pay this again */
		cache_replace(s, o->index_cache, mver, img, imglen, warning);
	free(img);
	return rc;
}

/*
 * A lazy torch open with an index cache keeps what it needs to store the
 * records it locates (located_to_cache()): the pickle (*pkl, taken; NULL
 * when torch_meta() freed it: read again then, if still len bytes of
 * hash xxh3), the .metadata version and the cache directory.  Out of
 * memory: kept nothing, and nothing is stored.
 */
static void keep_for_cache(struct ckpt_meta *m, const char *cdir,
			   const char *mver, uint8_t **pkl, size_t len,
			   uint64_t xxh3)
{
	m->index_cache = strdup(cdir);
	m->torch_mver = strdup(mver);
	if (!m->index_cache || !m->torch_mver) {
		free(m->index_cache);
		free(m->torch_mver);
		m->index_cache = m->torch_mver = NULL;
		return;
	}
	m->torch_pkl = *pkl;
	m->torch_pkl_len = len;
	m->torch_pkl_xxh3 = xxh3;
	*pkl = NULL;
}

/* Records this open located (not those an image it read had located). */
static bool has_located_now(const struct ckpt_meta *m)
{
	uint32_t i;

	for (i = 0; m->lazy && i < m->nchunks; i++)
		if (m->lazy[i].guard_len && ckpt_chunk_is_located(m, i))
			return true;
	return false;
}

/* Store the parsed form of img, just stored as hex's image in c (locked),
 * so that the next opens take it rather than parse the image: best
 * effort. */
static void merged_form(const struct ckpt_index_cache *c, const char *hex,
			uint8_t *img, size_t imglen, const char *name)
{
	struct ckpt_meta *m;
	char why[1024];
	char *ignored = NULL;
	uint64_t tag;

	if (!ckpt_torch_index_image_hash(img, imglen, &tag) ||
	    ckpt_meta_parse(img, imglen, name, &m, why, sizeof(why)))
		return;
	parsed_store(c, hex, tag, m, &ignored);
	free(ignored);
	ckpt_meta_free(m);
}

/*
 * Store what a lazy open located in the node-local index cache, merged
 * with what the cached image there (when it passes its stamp check, as
 * an open's would) had located: under the key's lock, written
 * atomically (ckpt_index_cache_write()).  Best effort: any failure
 * leaves the cache as it was, and the next open locates again.
 */
static void located_to_cache(struct ckpt_meta *m)
{
	struct ckpt_index_check ic = {
		.dir = ckpt_store_root(m->store), .meta_path = m->meta_path,
		.store = m->store, .pkl = m->torch_pkl,
		.pkl_len = m->torch_pkl_len,
	};
	uint8_t *pkl = NULL;	/* read again (keep_for_cache()) */
	const struct ckpt_meta *known[2] = { m, NULL };
	struct ckpt_meta *cached = NULL;
	struct ckpt_index_cache c;
	char hex[CKPT_INDEX_CACHE_KEY_HEX], why[1024];
	uint8_t *img = NULL;
	size_t imglen = 0;
	char *warning = NULL;

	if (!has_located_now(m) || cache_key(m->store, m->torch_mver, hex))
		return;
	if (ckpt_index_cache_open(m->index_cache, &c, why, sizeof(why)))
		return;
	if (ckpt_index_cache_lock_for(&c, hex, CKPT_INDEX_CACHE_MERGE_WAIT_MS,
				      why, sizeof(why)))
		goto out_close;
	if (!ic.pkl) {
		pkl = read_pickle_as(m->store, m->torch_pkl_len,
				     m->torch_pkl_xxh3);
		if (!pkl)
			goto out_close;
		ic.pkl = pkl;
		ic.pkl_xxh3 = m->torch_pkl_xxh3;	/* just checked */
		ic.has_pkl_xxh3 = true;
	}
	/* What the cached image located: from its parsed form, or parsed */
	if (!cache_hit(&c, hex, &ic, NULL, &img, &imglen, &cached,
		       &warning) &&
	    !cached &&
	    ckpt_meta_parse(img, imglen, m->meta_path, &cached, why,
			    sizeof(why)))
		cached = NULL;
	free(img);
	img = NULL;
	known[1] = cached;
	if (!ckpt_torch_index_merged(m->store, m->meta_path, ic.pkl,
				     m->torch_pkl_len, known, cached ? 2 : 1,
				     &img, &imglen, why, sizeof(why)) &&
	    !ckpt_index_cache_write(&c, hex, img, imglen, why, sizeof(why)))
		merged_form(&c, hex, img, imglen, m->meta_path);
	free(img);
	ckpt_meta_free(cached);
out_close:
	ckpt_index_cache_close(&c);
	free(warning);
	free(pkl);
}

/*
 * Rank-local checkpoints (torch's dcp.save(..., use_collectives=False)):
 * no .metadata, but one pickled __R.metadata per rank, each listing that
 * rank's chunks.  Each is indexed like a .metadata and parsed as a part;
 * the parts are merged into one native image (model/merge.c), which the
 * caller parses and tiles as usual.
 */

/* One __R.metadata, whole. */
struct rank_file {
	unsigned long rank;
	char *path;		/* dir/__R.metadata, for messages */
	char name[40];		/* __R.metadata */
	uint8_t *pkl;
	size_t len;
	char version[CKPT_STORE_VERSION_MAX];	/* ckpt_store_open()'s */
};

/* What a lazy rank-local open keeps to store what it located in the
 * node-local index cache when it is freed (rank_located_to_cache()). */
struct ckpt_rank_keep {
	struct rank_file *rf;	/* [n], owned */
	size_t n;
	char *cdir;		/* the cache directory */
	char hex[CKPT_INDEX_CACHE_KEY_HEX];	/* rank_cache_key() */
};

static void rank_files_free(struct rank_file *rf, size_t n)
{
	size_t i;

	for (i = 0; rf && i < n; i++) {
		free(rf[i].path);
		free(rf[i].pkl);
	}
	free(rf);
}

static void rank_keep_free(struct ckpt_rank_keep *k)
{
	if (!k)
		return;
	rank_files_free(k->rf, k->n);
	free(k->cdir);
	free(k);
}

/*
 * Every __R.metadata of s, whole, ranks ascending: 0 with *out (free
 * with rank_files_free()) and *nout, -ENOENT when there is none, else
 * -errno with err.  *mtime gets the newest one's; *has_index whether the
 * listing showed a .ckptfs-index (so that none is asked for in vain).  They stay in memory
 * together (with their parsed parts, until the merge), so they may hold
 * CKPT_LOCAL_META_MAX_BYTES (1 GiB) in all.
 */
static int read_rank_files(struct ckpt_store *s, struct rank_file **out,
			   size_t *nout, struct timespec *mtime,
			   bool *has_index, char *err, size_t errlen)
{
	const char *dir = ckpt_store_root(s);
	struct rank_scan rs = { 0 };
	struct rank_file *rf = NULL;
	size_t n = 0, i, total = 0;
	int rc;

	*out = NULL;
	*nout = 0;
	rc = ckpt_store_list(s, scan_rank, &rs, err, errlen);
	if (rc == -E2BIG)
		rc = ckpt_errf(err, errlen, -E2BIG,
			       "%s: more than %d __R.metadata files", dir,
			       RANK_LOCAL_MAX);
	else if (rc == -ENOMEM)
		rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	if (rc)
		goto out_free;
	if (!rs.n) {
		rc = -ENOENT;
		goto out_free;
	}
	qsort(rs.ranks, rs.n, sizeof(*rs.ranks), cmp_rank);
	rf = calloc(rs.n, sizeof(*rf));
	if (!rf) {
		rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
		goto out_free;
	}
	n = rs.n;
	for (i = 0; i < n; i++) {
		struct ckpt_store_file_info fi;
		struct rank_file *r = &rf[i];

		if (i && rs.ranks[i] == rs.ranks[i - 1]) {
			rc = ckpt_errf(err, errlen, -EINVAL,
				       "%s: two metadata files for rank %lu",
				       dir, rs.ranks[i]);
			goto out_free;
		}
		r->rank = rs.ranks[i];
		snprintf(r->name, sizeof(r->name), "__%lu.metadata", r->rank);
		if (asprintf(&r->path, "%s/%s", dir, r->name) < 0) {
			r->path = NULL;
			rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
			goto out_free;
		}
		rc = ckpt_store_read_file(s, r->name, CKPT_META_MAX_BYTES,
					  &r->pkl, &r->len, &fi, err, errlen);
		if (rc) {
			r->pkl = NULL;
			goto out_free;
		}
		total += r->len;
		if (total > CKPT_LOCAL_META_MAX_BYTES) {
			rc = ckpt_errf(err, errlen, -EFBIG,
				       "%s: the rank-local metadata files up to this one hold %zu bytes, more than the %zu MiB all of them may hold",
				       r->path, total,
				       CKPT_LOCAL_META_MAX_BYTES >> 20);
			goto out_free;
		}
		memcpy(r->version, fi.version, sizeof(r->version));
		if (i == 0 || fi.mtime_sec > mtime->tv_sec ||
		    (fi.mtime_sec == mtime->tv_sec &&
		     fi.mtime_nsec > mtime->tv_nsec))
			set_mtime(mtime, &fi);
		if (!ckpt_torch_is_pickle(r->pkl, r->len)) {
			rc = ckpt_errf(err, errlen, -EINVAL,
				       "%s: not a PyTorch rank-local metadata pickle",
				       r->path);
			goto out_free;
		}
	}
	*out = rf;
	*nout = n;
	*has_index = rs.has_index;
	rf = NULL;
out_free:
	rank_files_free(rf, n);
	free(rs.ranks);
	return rc;
}

/*
 * The node-local cache key of a rank-local checkpoint: its root (as
 * cache_key()) and, in rank order, every __R.metadata's rank, size,
 * version (ETag; size and mtime locally) and XXH3, so that any of them
 * replaced is another key.  -ENOMEM or 0.
 */
static int rank_cache_key(struct ckpt_store *s, const struct rank_file *rf,
			  size_t n, char hex[CKPT_INDEX_CACHE_KEY_HEX])
{
	char *v = NULL;
	size_t vlen = 0, i;
	FILE *f = open_memstream(&v, &vlen);
	int rc;

	if (!f)
		return -ENOMEM;
	fputs("rank-local\n", f);
	for (i = 0; i < n; i++)
		fprintf(f, "%lu %zu %s %016llx\n", rf[i].rank, rf[i].len,
			rf[i].version,
			(unsigned long long)XXH3_64bits(rf[i].pkl, rf[i].len));
	if (fclose(f)) {
		free(v);
		return -ENOMEM;
	}
	rc = cache_key(s, v, hex);
	free(v);
	return rc;
}

/*
 * The images that rank-local index buf (ckpt_torch_rank_index_parse())
 * holds for rf[0..n), each checked as an index of that rank's
 * __R.metadata as a .metadata's index is (ckpt_torch_index_check();
 * strict: the node-local cache's).  complete: an index file, which must
 * hold every rank and no other.  0 with img[i]/imglen[i] (pointing into
 * buf; NULL where it holds none for rank i), or -ESTALE (-ENOMEM) with
 * why naming index_path, and every img[i] NULL.
 */
static int rank_images(struct ckpt_store *s, const char *index_path,
		       bool strict, bool complete, const uint8_t *buf,
		       size_t len, const struct rank_file *rf, size_t n,
		       const uint8_t **img, size_t *imglen, char *why,
		       size_t whylen)
{
	const char *dir = ckpt_store_root(s);
	struct ckpt_rank_image *ri = NULL;
	size_t nri = 0, i, j = 0;
	int rc;

	memset(img, 0, n * sizeof(*img));
	rc = ckpt_torch_rank_index_parse(buf, len, &ri, &nri);
	if (rc == -ENOMEM)
		return ckpt_errf(why, whylen, rc, "out of memory");
	if (rc)
		return ckpt_errf(why, whylen, -ESTALE,
				 "%s: not an index of a rank-local checkpoint (a map of format '%s'); run 'ckptfs index %s' again",
				 index_path, CKPT_RANK_INDEX_FORMAT, dir);
	for (i = 0; i < n; i++) {
		struct ckpt_index_check ic = {
			.index_path = index_path, .dir = dir,
			.meta_path = rf[i].path, .store = s, .pkl = rf[i].pkl,
			.pkl_len = rf[i].len, .strict = strict,
		};

		if (complete && j < nri && ri[j].rank < rf[i].rank)
			break;		/* said below */
		while (j < nri && ri[j].rank < rf[i].rank)
			j++;
		if (j == nri || ri[j].rank != rf[i].rank) {
			if (!complete)
				continue;
			rc = ckpt_errf(why, whylen, -ESTALE,
				       "%s: stale: it has no index of %s; run 'ckptfs index %s' again",
				       index_path, rf[i].path, dir);
			goto out_free;
		}
		rc = ckpt_torch_index_check(&ic, ri[j].img, ri[j].len, why,
					    whylen);
		if (rc)
			goto out_free;
		img[i] = ri[j].img;
		imglen[i] = ri[j].len;
		j++;
	}
	if (complete && j < nri)
		rc = ckpt_errf(why, whylen, -ESTALE,
			       "%s: stale: it indexes rank %" PRIu64 ", which has no __%" PRIu64 ".metadata in %s; run 'ckptfs index %s' again",
			       index_path, ri[j].rank, ri[j].rank, dir, dir);
out_free:
	if (rc)
		memset(img, 0, n * sizeof(*img));
	free(ri);
	return rc;
}

/*
 * The cached rank-local index of key hex in c whose images pass
 * rank_images() (strict): 0 with *buf (caller frees) and img[]/imglen[]
 * pointing into it, or -errno (-ENOENT: none), with one line in
 * *warning when there was one that is not used.
 */
static int rank_cache_hit(const struct ckpt_index_cache *c, const char *hex,
			  struct ckpt_store *s, const struct rank_file *rf,
			  size_t n, uint8_t **buf, size_t *len,
			  const uint8_t **img, size_t *imglen, char **warning)
{
	char why[1024], path[PATH_MAX];
	int rc;

	free(*buf);
	*buf = NULL;
	memset(img, 0, n * sizeof(*img));
	rc = ckpt_index_cache_read(c, hex, CKPT_LOCAL_META_MAX_BYTES, buf, len,
				   why, sizeof(why));
	if (rc == -ENOENT)
		return rc;
	if (!rc) {
		snprintf(path, sizeof(path), "%s/%s.ckptfs-index", c->dir, hex);
		rc = rank_images(s, path, true, false, *buf, *len, rf, n, img,
				 imglen, why, sizeof(why));
		if (rc) {
			free(*buf);
			*buf = NULL;
		} else {
			ckpt_index_cache_touch(c, hex);	/* kept by use */
		}
	}
	if (rc)
		cache_ignored(warning, why);
	return rc;
}

/* Pack one image per rank (img[i], else more[i]) and store it as hex's
 * cached entry in c (locked); a failure only adds a warning. */
static void rank_cache_store(struct ckpt_index_cache *c, const char *hex,
			     const struct rank_file *rf, size_t n,
			     const uint8_t *const *img, const size_t *imglen,
			     uint8_t *const *more, const size_t *morelen,
			     char **warning)
{
	struct ckpt_rank_image *ri = calloc(n ? n : 1, sizeof(*ri));
	char why[1024] = "out of memory";
	uint8_t *out = NULL;
	size_t outlen = 0, i;

	for (i = 0; ri && i < n; i++)
		ri[i] = (struct ckpt_rank_image){
			rf[i].rank, img[i] ? img[i] : more[i],
			img[i] ? imglen[i] : morelen[i] };
	if (!ri || ckpt_torch_rank_index_pack(ri, n, &out, &outlen) ||
	    ckpt_index_cache_write(c, hex, out, outlen, why, sizeof(why))) {
		add_warning(warning, "index cache: %s (not cached)", why);
		ckpt_index_cache_drop_lock(c, hex);
	}
	free(out);
	free(ri);
}

/*
 * A rank-local checkpoint's merged image (*img, caller frees).  Each
 * rank's image comes, as a .metadata's does (torch_image()), from the
 * index given (o->index) or else the checkpoint's .ckptfs-index, a
 * rank-local index (ckpt_torch_rank_index_parse()) that must cover
 * every rank and is refused when stale; else from the node-local index
 * cache when o has one (one entry keyed by every __R.metadata:
 * rank_cache_key(); ignored with a warning when stale); else it is built
 * now: lazily unless CKPTFS_EAGER_INDEX=1 (locate_lazily()), and then
 * stored in the cache under the key's lock, so that the node's other
 * opens wait for it and read it (build_image()).  A lazy open with a
 * cache gets in *keep (caller frees with rank_keep_free()) what it
 * needs to store what it locates (rank_located_to_cache()).  -ENOENT
 * when there is no __R.metadata.
 */
static int rank_local_image(struct ckpt_store *s,
			    const struct ckpt_open_opts *o, uint8_t **img,
			    size_t *imglen, struct timespec *mtime,
			    struct ckpt_rank_keep **keep, char **warning,
			    char *err, size_t errlen)
{
	bool lazy = locate_lazily(), c_open = false, store = false;
	bool have_index = false, listed = false;
	const char *dir = ckpt_store_root(s);
	const char *cdir = o ? o->index_cache : NULL;
	struct ckpt_index_cache c;
	struct rank_file *rf = NULL;
	struct ckpt_meta **parts = NULL;
	const uint8_t **pre = NULL;
	uint8_t **built = NULL, *ibuf = NULL;
	size_t *prelen = NULL, *builtlen = NULL, ilen = 0, n = 0, i;
	const char **names = NULL;
	char hex[CKPT_INDEX_CACHE_KEY_HEX] = "", why[1024];
	char *ipath = NULL;
	int rc;

	*keep = NULL;
	rc = read_rank_files(s, &rf, &n, mtime, &listed, err, errlen);
	if (rc)
		return rc;
	parts = calloc(n, sizeof(*parts));
	names = calloc(n, sizeof(*names));
	pre = calloc(n, sizeof(*pre));
	prelen = calloc(n, sizeof(*prelen));
	built = calloc(n, sizeof(*built));
	builtlen = calloc(n, sizeof(*builtlen));
	if (!parts || !names || !pre || !prelen || !built || !builtlen) {
		rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
		goto out_free;
	}
	for (i = 0; i < n; i++)
		names[i] = rf[i].path;
	if (o && o->index) {
		/* A file the user names is on this machine. */
		ipath = strdup(o->index);
		rc = ipath ? ckpt_store_read_local(o->index,
						   CKPT_LOCAL_META_MAX_BYTES,
						   &ibuf, &ilen, NULL, err,
						   errlen) :
			     ckpt_errf(err, errlen, -ENOMEM, "out of memory");
		if (rc)
			goto out_free;
		have_index = true;
	} else {
		if (asprintf(&ipath, "%s/%s", dir, CKPT_INDEX_NAME) < 0) {
			ipath = NULL;
			rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
			goto out_free;
		}
		/* Listed with the ranks' files, or not asked for. */
		rc = !listed ? -ENOENT :
		     ckpt_store_read_file(s, CKPT_INDEX_NAME,
					  CKPT_LOCAL_META_MAX_BYTES, &ibuf,
					  &ilen, NULL, err, errlen);
		if (rc && rc != -ENOENT)
			goto out_free;
		have_index = !rc;
	}
	rc = 0;
	if (have_index) {
		rc = rank_images(s, ipath, false, true, ibuf, ilen, rf, n, pre,
				 prelen, err, errlen);
		if (rc)
			goto out_free;
	} else if (cdir) {
		if (rank_cache_key(s, rf, n, hex)) {
			rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
			goto out_free;
		}
		if (ckpt_index_cache_open(cdir, &c, why, sizeof(why))) {
			add_warning(warning, "%s", why);
		} else {
			c_open = true;
			if (rank_cache_hit(&c, hex, s, rf, n, &ibuf, &ilen, pre,
					   prelen, warning)) {
				/* Indexed now, and stored: under the lock,
				 * unless another process stored it meanwhile. */
				rc = ckpt_index_cache_lock(&c, hex, why,
							   sizeof(why));
				if (rc == -ECANCELED) {
					rc = ckpt_errf(err, errlen, rc, "%s",
						       why);
					goto out_free;
				}
				if (rc)
					add_warning(warning,
						    "index cache: %s (indexed in memory)",
						    why);
				else
					store = rank_cache_hit(&c, hex, s, rf,
							       n, &ibuf, &ilen,
							       pre, prelen,
							       warning) != 0;
				rc = 0;
			}
		}
	}
	for (i = 0; i < n; i++) {
		uint8_t *part = NULL;
		size_t plen = 0;

		if (pre[i]) {
			rc = ckpt_meta_parse_part(pre[i], prelen[i],
						  rf[i].path, &parts[i], why,
						  sizeof(why));
			if (!rc)
				continue;
			parts[i] = NULL;
			if (have_index) {
				rc = ckpt_errf(err, errlen, rc, "%s", why);
				goto out_free;
			}
			add_warning(warning,
				    "index cache: the cached index of %s does not parse (%s; ignored, indexed again)",
				    rf[i].path, why);
			pre[i] = NULL;
		}
		rc = build_image(s, rf[i].path, rf[i].pkl, rf[i].len, lazy,
				 store, false, &part, &plen, err, errlen);
		if (rc)
			goto out_free;
		rc = ckpt_meta_parse_part(part, plen, rf[i].path, &parts[i],
					  err, errlen);
		if (rc) {
			free(part);
			goto out_free;
		}
		if (store && lazy && !has_files_whole(s, parts[i])) {
			/* refused when its files open: not cached */
			ckpt_index_cache_drop_lock(&c, hex);
			store = false;
		}
		if (store) {
			built[i] = part;
			builtlen[i] = plen;
		} else {
			free(part);
		}
	}
	if (store)
		rank_cache_store(&c, hex, rf, n, pre, prelen, built, builtlen,
				 warning);
	rc = ckpt_meta_merge(parts, names, n, img, imglen, err, errlen);
	if (!rc && lazy && cdir && !have_index) {
		struct ckpt_rank_keep *k = calloc(1, sizeof(*k));

		if (k)
			k->cdir = strdup(cdir);
		if (k && k->cdir) {	/* else nothing is stored */
			k->rf = rf;
			k->n = n;
			memcpy(k->hex, hex, sizeof(hex));
			rf = NULL;
			*keep = k;
		} else {
			free(k);
		}
	}
out_free:
	if (c_open)
		ckpt_index_cache_close(&c);
	for (i = 0; parts && i < n; i++)
		ckpt_meta_free(parts[i]);
	for (i = 0; built && i < n; i++)
		free(built[i]);
	free(parts);
	free(names);
	free(pre);
	free(prelen);
	free(built);
	free(builtlen);
	free(ibuf);
	free(ipath);
	rank_files_free(rf, n);
	return rc;
}

/* Whether part p names a data file of m that holds a record m located
 * now (dirty[f], by m's file index): its image must be rebuilt. */
static bool names_dirty(const struct ckpt_meta *p, const struct ckpt_meta *m,
			const bool *dirty)
{
	uint32_t f, g;

	for (f = 0; f < p->nfiles; f++)
		for (g = 0; g < m->nfiles; g++)
			if (dirty[g] && !strcmp(p->strings + p->files[f].path,
						m->strings + m->files[g].path))
				return true;
	return false;
}

/*
 * Store what a lazy rank-local open located in the node-local index
 * cache, as located_to_cache() does for a .metadata: under the key's
 * lock, each rank's image rebuilt from its __R.metadata with the records
 * this open located and those the entry there had located (when its
 * images pass their check, as an open's would), written atomically as
 * the one entry.  A rank whose cached image names no data file this open
 * located a record in keeps that image as it is (no pickle is parsed
 * for it).  Best effort: any failure leaves the cache as it was.
 */
static void rank_located_to_cache(struct ckpt_meta *m)
{
	struct ckpt_rank_keep *k = m->rank_keep;
	struct ckpt_index_cache c;
	const uint8_t **pre = NULL;
	uint8_t **built = NULL, *buf = NULL;
	size_t *prelen = NULL, *builtlen = NULL, len = 0, i;
	char why[1024], *warning = NULL;
	bool *dirty = NULL;
	uint32_t ci;

	if (!has_located_now(m))
		return;
	if (ckpt_index_cache_open(k->cdir, &c, why, sizeof(why)))
		return;
	if (ckpt_index_cache_lock_for(&c, k->hex,
				      CKPT_INDEX_CACHE_MERGE_WAIT_MS, why,
				      sizeof(why)))
		goto out_close;
	pre = calloc(k->n, sizeof(*pre));
	prelen = calloc(k->n, sizeof(*prelen));
	built = calloc(k->n, sizeof(*built));
	builtlen = calloc(k->n, sizeof(*builtlen));
	dirty = calloc(m->nfiles ? m->nfiles : 1, sizeof(*dirty));
	if (!pre || !prelen || !built || !builtlen || !dirty)
		goto out_free;
	for (ci = 0; ci < m->nchunks; ci++)
		if (m->lazy[ci].guard_len && ckpt_chunk_is_located(m, ci) &&
		    !ckpt_is_zrec(m->chunks[ci].file) &&
		    m->chunks[ci].file < m->nfiles)
			dirty[m->chunks[ci].file] = true;
	rank_cache_hit(&c, k->hex, m->store, k->rf, k->n, &buf, &len, pre,
		       prelen, &warning);
	for (i = 0; i < k->n; i++) {
		const struct ckpt_meta *known[2] = { m, NULL };
		struct ckpt_meta *cached = NULL;
		int rc;

		if (pre[i] && ckpt_meta_parse_part(pre[i], prelen[i],
						   k->rf[i].path, &cached, why,
						   sizeof(why)))
			cached = NULL;
		if (cached && !names_dirty(cached, m, dirty)) {
			ckpt_meta_free_parsed(cached);
			continue;	/* stored as it is */
		}
		pre[i] = NULL;
		known[1] = cached;
		rc = ckpt_torch_index_merged(m->store, k->rf[i].path,
					     k->rf[i].pkl, k->rf[i].len, known,
					     cached ? 2 : 1, &built[i],
					     &builtlen[i], why, sizeof(why));
		ckpt_meta_free_parsed(cached);
		if (rc)
			goto out_free;
	}
	rank_cache_store(&c, k->hex, k->rf, k->n, pre, prelen, built,
			 builtlen, &warning);
out_free:
	for (i = 0; built && i < k->n; i++)
		free(built[i]);
	free(pre);
	free(prelen);
	free(built);
	free(builtlen);
	free(dirty);
	free(buf);
out_close:
	ckpt_index_cache_close(&c);
	free(warning);
}

/*
 * `ckptfs index` of a rank-local checkpoint: every rank's image built now
 * from its __R.metadata, packed as one rank-local index (*img, caller
 * frees), and the merged checkpoint parsed as a mount would (*parsed,
 * caller frees with ckpt_meta_free()).
 */
static int rank_local_index(struct ckpt_store *s, uint8_t **img,
			    size_t *imglen, struct ckpt_meta **parsed,
			    char *err, size_t errlen)
{
	struct ckpt_rank_image *ri = NULL;
	struct ckpt_meta **parts = NULL;
	struct rank_file *rf = NULL;
	struct timespec mtime = { 0 };
	const char **names = NULL;
	bool listed;
	uint8_t **built = NULL, *merged = NULL;
	size_t n = 0, i, mlen = 0;
	char *path = NULL;
	int rc;

	rc = read_rank_files(s, &rf, &n, &mtime, &listed, err, errlen);
	if (rc)
		return rc;
	parts = calloc(n, sizeof(*parts));
	names = calloc(n, sizeof(*names));
	built = calloc(n, sizeof(*built));
	ri = calloc(n, sizeof(*ri));
	if (!parts || !names || !built || !ri ||
	    asprintf(&path, "%s/__*.metadata", ckpt_store_root(s)) < 0) {
		path = NULL;
		rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
		goto out_free;
	}
	for (i = 0; i < n; i++) {
		names[i] = rf[i].path;
		ri[i].rank = rf[i].rank;
		rc = index_now(s, rf[i].path, rf[i].pkl, rf[i].len, &built[i],
			       &ri[i].len, err, errlen);
		if (rc)
			goto out_free;
		ri[i].img = built[i];
		rc = ckpt_meta_parse_part(built[i], ri[i].len, rf[i].path,
					  &parts[i], err, errlen);
		if (rc)
			goto out_free;
	}
	rc = ckpt_meta_merge(parts, names, n, &merged, &mlen, err, errlen);
	if (rc)
		goto out_free;
	rc = ckpt_meta_parse(merged, mlen, path, parsed, err, errlen);
	if (rc)
		goto out_free;
	rc = ckpt_torch_rank_index_pack(ri, n, img, imglen);
	if (rc) {
		ckpt_meta_free(*parsed);
		*parsed = NULL;
		rc = ckpt_errf(err, errlen, rc, "out of memory");
	}
out_free:
	for (i = 0; parts && i < n; i++)
		ckpt_meta_free(parts[i]);
	for (i = 0; built && i < n; i++)
		free(built[i]);
	free(parts);
	free(names);
	free(built);
	free(ri);
	free(merged);
	free(path);
	rank_files_free(rf, n);
	return rc;
}

static int open_opts(const char *dir, const struct ckpt_open_opts *o,
		     struct ckpt_meta **out, char *err, size_t errlen)
{
	struct timespec mtime = { 0 };
	struct ckpt_store *s;
	struct ckpt_meta *m;
	char *path = NULL;
	uint8_t *buf = NULL, origin = CKPT_ORIGIN_NATIVE;
	uint8_t variants = 0;
	bool sharded = false, follow = o && o->follow_symlinks, torch = false;
	char *warning = NULL;
	size_t len = 0;
	char mver[CKPT_STORE_VERSION_MAX] = "";
	struct ckpt_rank_keep *keep = NULL;
	int rc;

	*out = NULL;
	rc = open_store(dir, follow, o ? o->s3 : NULL, &s, err, errlen);
	if (rc)
		return rc;
	dir = ckpt_store_root(s);	/* never a SAS a URL carries */
	if (ckpt_store_warning(s))
		add_warning(&warning, "%s", ckpt_store_warning(s));
	rc = read_dot_metadata(s, &path, &buf, &len, &mtime, mver, err,
			       errlen);
	if (rc == -ENOENT) {
		char why[1024];

		/* No .metadata: the ranks' own __R.metadata files? */
		snprintf(why, sizeof(why), "%s", err ? err : "");
		rc = rank_local_image(s, o, &buf, &len, &mtime, &keep,
				      &warning, err, errlen);
		origin = CKPT_ORIGIN_TORCH_LOCAL;
		if (rc == -ENOENT) {	/* ... or safetensors files? */
			rc = safetensors_image(s, &buf, &len, &mtime, &sharded,
					       &warning, err, errlen);
			origin = sharded ? CKPT_ORIGIN_SAFETENSORS_SHARDED :
					   CKPT_ORIGIN_SAFETENSORS;
		}
		if (rc == -ENOENT) {
			/* (why: .metadata's own reason, kept for an object
			 * store, whose line names what answered) */
			rc = ckpt_errf(err, errlen, -EINVAL,
				       "%s: not a checkpoint: it holds none of "
				       ".metadata (ckptfs, PyTorch DCP), "
				       "__R.metadata (PyTorch rank-local), "
				       "*.safetensors, "
				       "model.safetensors.index.json%s%s",
				       dir, !ckpt_store_root_is_remote(dir) ?
				       "" : "; ",
				       !ckpt_store_root_is_remote(dir) ? "" :
				       why);
			goto out_path;
		}
		if (rc)
			goto out_path;
		free(path);
		if (asprintf(&path, origin != CKPT_ORIGIN_TORCH_LOCAL ?
			     "%s/*.safetensors" : "%s/__*.metadata", dir) < 0) {
			path = NULL;
			free(buf);
			rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
			goto out_path;
		}
	} else if (rc) {
		goto out_path;
	} else if (ckpt_torch_is_pickle(buf, len)) {
		/* what a pickle read again at close must hash to */
		bool hashed = o && o->index_cache && !keeps_pickle(s, o);
		uint64_t xxh3 = hashed ? XXH3_64bits(buf, len) : 0;

		rc = torch_meta(s, path, o, mver, &buf, len,
				hashed ? &xxh3 : NULL, &m, &origin, &variants,
				&warning, err, errlen);
		if (!rc && m->lazy && o && o->index_cache)
			keep_for_cache(m, o->index_cache, mver, &buf, len,
				       xxh3);
		free(buf);
		if (rc)
			goto out_path;
		torch = true;
	}
	if (!torch) {
		rc = ckpt_meta_parse_spend(buf, len, path, &m, err, errlen);
		free(buf);
		if (rc)
			goto out_path;
		m->rank_keep = keep;
		keep = NULL;
	}
	if (m->lazy && !torch && origin != CKPT_ORIGIN_TORCH_LOCAL) {
		/* "archive" is for images built in memory, never a file's */
		rc = ckpt_errf(err, errlen, -EINVAL,
			       "%s: records with 'archive' are only located in a PyTorch checkpoint",
			       path);
		ckpt_meta_free(m);
		goto out_path;
	}
	if (m->lazy)
		m->locate = ckpt_torch_locate;
	m->side_cap = o ? o->cache_bytes : 0;
	ckpt_meta_set_origin(m, origin, variants);
	if (m->nzrecs &&
	    ckpt_record_cache_setup(m, o ? o->cache_bytes : 0, 0)) {
		ckpt_meta_free(m);
		rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
		goto out_path;
	}
	m->dir = strdup(dir);
	if (!m->dir) {
		ckpt_meta_free(m);
		rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
		goto out_path;
	}
	m->meta_path = path;
	m->mtime = mtime;
	m->store = s;
	ckpt_meta_mark_open(m);
	m->follow_symlinks = follow;
	m->warning = warning;
	if (warning) {
		/* A warning names files: escaped like every message. */
		size_t wl = strlen(warning);
		char *safe = malloc(4 * wl + 8);

		if (safe) {
			ckpt_escape_line(warning, wl, safe, 4 * wl + 8);
			free(warning);
			m->warning = safe;
		}
	}
	*out = m;
	return 0;
out_path:
	free(path);
	free(warning);
	rank_keep_free(keep);
	ckpt_store_free(s);
	return rc;
}

int ckpt_meta_open_opts(const char *dir, const struct ckpt_open_opts *o,
			struct ckpt_meta **out, char *err, size_t errlen)
{
	char shown[PATH_MAX];
	bool began;
	int rc;

	ckpt_clear_last_error();
	/* On S3, s3_open_deadline_ms bounds the whole open, not each of
	 * its requests (issue 26 item 6). */
	began = ckpt_open_bound_begin();
	rc = open_opts(dir, o, out, err, errlen);
	ckpt_open_bound_end(began);
	dir = ckpt_store_root_shown(dir, shown, sizeof(shown));
	rc = ckpt_cancel_result(rc, dir, err, errlen);
	if (rc)
		return ckpt_last_error_finish(rc, dir);
	ckpt_clear_last_error();
	return 0;
}

int ckpt_meta_open(const char *dir, struct ckpt_meta **out, char *err,
		   size_t errlen)
{
	return ckpt_meta_open_opts(dir, NULL, out, err, errlen);
}

int ckpt_object_read(const char *dir, const char *name,
		     const struct ckpt_open_opts *o, uint8_t **buf,
		     size_t *len, char *err, size_t errlen)
{
	struct ckpt_store *s = NULL;
	char shown[PATH_MAX];
	bool began;
	int rc;

	*buf = NULL;
	*len = 0;
	ckpt_clear_last_error();
	began = ckpt_open_bound_begin();
	rc = open_store(dir, o && o->follow_symlinks, o ? o->s3 : NULL, &s,
			err, errlen);
	if (!rc)
		rc = ckpt_store_read_file(s, name, CKPT_META_MAX_BYTES, buf,
					  len, NULL, err, errlen);
	ckpt_store_free(s);
	ckpt_open_bound_end(began);
	dir = ckpt_store_root_shown(dir, shown, sizeof(shown));
	rc = ckpt_cancel_result(rc, dir, err, errlen);
	if (rc)
		return ckpt_last_error_finish(rc, dir);
	return 0;
}

void ckpt_object_free(void *buf)
{
	free(buf);
}

bool ckpt_root_is_remote(const char *root)
{
	return root && ckpt_store_root_is_remote(root);
}

/* Here, above records/, io/ and model/: the handle owns the record
 * cache and the store, which model/ does not know. */
void ckpt_meta_free(struct ckpt_meta *m)
{
	if (!m)
		return;
	if (m->index_cache && m->store)
		located_to_cache(m);
	if (m->rank_keep) {
		if (m->store)
			rank_located_to_cache(m);
		rank_keep_free(m->rank_keep);
		m->rank_keep = NULL;
	}
	ckpt_record_cache_free(m->records);
	m->records = NULL;
	ckpt_files_close(m);
	ckpt_meta_free_parsed(m);
}

void ckpt_meta_cancel(struct ckpt_meta *m)
{
	if (m && m->store)
		ckpt_store_cancel(m->store);
}

const char *ckpt_meta_credentials(const struct ckpt_meta *m)
{
	return m && m->store ? ckpt_store_credentials(m->store) : NULL;
}

void ckpt_meta_io_stats(const struct ckpt_meta *m, struct ckpt_io_stats *out)
{
	struct ckpt_store_stats st = { 0 };

	if (m && m->store)
		ckpt_store_stats(m->store, &st);
	out->bytes_fetched = st.bytes_fetched;
	out->bytes_delivered = st.bytes_delivered;
	out->requests = st.requests;
	out->retries = st.retries;
	out->connects = st.connects;
	out->side_bytes_peak = m ? __atomic_load_n(&m->side_bytes_peak,
						   __ATOMIC_RELAXED) : 0;
	if (!m || !m->store)
		return;
	out->open_gets = m->at_open.gets;
	out->open_heads = m->at_open.heads;
	out->open_lists = m->at_open.lists;
	out->open_bytes_fetched = m->at_open.bytes_fetched;
	out->open_bytes_delivered = m->at_open.bytes_delivered;
	/* Monotonic counters, each read after its snapshot: no wrap. */
	out->read_gets = st.gets - m->at_open.gets;
	out->read_heads = st.heads - m->at_open.heads;
	out->read_lists = st.lists - m->at_open.lists;
	out->read_bytes_fetched = st.bytes_fetched - m->at_open.bytes_fetched;
	out->read_bytes_delivered = st.bytes_delivered -
				    m->at_open.bytes_delivered;
}

int ckpt_meta_build_index(const char *dir, bool follow, uint8_t **img,
			  size_t *imglen, struct ckpt_meta **parsed, char *err,
			  size_t errlen)
{
	struct ckpt_open_opts o = { .follow_symlinks = follow };

	return ckpt_meta_build_index_opts(dir, &o, img, imglen, parsed, err,
					  errlen);
}

int ckpt_meta_build_index_opts(const char *dir,
			       const struct ckpt_open_opts *o, uint8_t **img,
			       size_t *imglen, struct ckpt_meta **parsed,
			       char *err, size_t errlen)
{
	struct timespec mtime;
	struct ckpt_store *s;
	char *path = NULL;
	uint8_t *buf = NULL;
	size_t len = 0;
	int rc;

	*img = NULL;
	*parsed = NULL;
	rc = open_store(dir, o && o->follow_symlinks, o ? o->s3 : NULL, &s,
			err, errlen);
	if (rc)
		return rc;
	dir = ckpt_store_root(s);
	rc = read_dot_metadata(s, &path, &buf, &len, &mtime, NULL, err,
			       errlen);
	if (rc == -ENOENT) {
		char why[1024];

		/* No .metadata: the ranks' own __R.metadata files? */
		snprintf(why, sizeof(why), "%s", err ? err : "");
		rc = rank_local_index(s, img, imglen, parsed, err, errlen);
		if (rc == -ENOENT)	/* .metadata's own reason */
			rc = ckpt_errf(err, errlen, -ENOENT, "%s", why);
		goto out_path;
	}
	if (rc)
		goto out_path;
	if (!ckpt_torch_is_pickle(buf, len)) {
		rc = ckpt_errf(err, errlen, -EINVAL,
			       "%s: not a PyTorch checkpoint (already in the native format): nothing to index",
			       path);
		goto out_buf;
	}
	rc = index_now(s, path, buf, len, img, imglen, err, errlen);
	if (rc)
		goto out_buf;
	/* Validate it as a mount would. */
	rc = ckpt_meta_parse(*img, *imglen, path, parsed, err, errlen);
	if (rc) {
		free(*img);
		*img = NULL;
	}
out_buf:
	free(buf);
out_path:
	free(path);
	ckpt_store_free(s);
	return rc;
}
