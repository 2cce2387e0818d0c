/* SPDX-License-Identifier: MIT */
/*
 * The checkpoint model: keys (entries), their saved chunks, and the data
 * files holding the chunks' bytes, parsed from `.metadata` (format
 * "tensorplay-dcp", version 1) and validated.  Everything is kept in a few
 * flat arrays indexed by uint32, so a checkpoint with a million chunks
 * costs tens of megabytes, not a pointer forest.
 *
 * A meta is immutable once opened: any number of threads may read it.
 * What changes while it is read lives apart, in objects with their own
 * locks that the open handle owns: its store (io/store.h: open fds) and
 * the decoded-record cache.
 */
#ifndef CKPT_META_H
#define CKPT_META_H

#include <stdbool.h>
#include <stddef.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "ckptfs.h"
#include "common/dtype.h"
#include "common/lru.h"
#include "common/forksafe.h"
#include "common/strtab.h"
#include "model/transforms.h"

#define CKPT_META_MAX_BYTES ((size_t)512 << 20)	/* .metadata size cap */
#define CKPT_LOCAL_META_MAX_BYTES ((size_t)1 << 30)	/* all __R.metadata
							 * of a checkpoint */
#ifndef CKPT_LIB_VERSION	/* the Makefile passes its VERSION */
#define CKPT_LIB_VERSION "unknown"
#endif
#define CKPT_FORMAT_NAME "tensorplay-dcp"
#define CKPT_FORMAT_VERSION 1
#define CKPT_INDEX_NAME ".ckptfs-index"	/* `ckptfs index`'s default output */

/* One saved chunk of a tensor (or the single record of a bytes entry). */
struct ckpt_chunk {
	uint32_t dims_at;	/* offsets at meta->dims[dims_at],
				 * sizes at meta->dims[dims_at + ndim] */
	uint32_t file;		/* meta->files index; CKPT_NONE = no record */
	uint32_t strides_at;	/* element strides at meta->dims[strides_at];
				 * CKPT_NONE: row-major (the usual case) */
	uint32_t crc32;		/* valid when has_crc32 */
	uint64_t foff;		/* first byte of the chunk in that file */
	uint64_t len;		/* its byte length */
	uint64_t xxh3;		/* valid when has_xxh3 */
	bool has_xxh3;
	bool has_crc32;		/* CRC-32 of the record (torch's zip CRC) */
};

/*
 * A record's guard (a torch record's "zip_header", docs/format.md): the
 * len bytes at [off, off + len) of the chunk's file, which end at or
 * before its foff, hash to xxh3.  The reads of an open check it once
 * (io/datafiles.c), so an index whose record moved gives EIO, not other
 * bytes.
 */
#define CKPT_GUARD_MAX (30u + 65535u + 65535u)	/* a zip local header */
struct ckpt_guard {
	uint64_t off;
	uint64_t xxh3;
	uint32_t len;
	uint32_t chunk;		/* meta->chunks index */
	uint32_t entry;		/* meta->entries index, for messages */
};

/*
 * A record located lazily (docs/format.md "archive"): a tensor saved in a
 * torch.save archive at [boff, boff + blen) of its chunk's file, whose
 * tensor bytes inside it are not known yet.  Until ckpt_meta_locate()
 * has located it, its chunk's foff/len/strides/crc32 are placeholders
 * that no read may use (meta->located says which chunks are located).
 */
struct ckpt_lazy {
	uint64_t boff, blen;
	uint32_t strides_at;	/* ndim dims reserved for its strides;
				 * CKPT_NONE for a 0-d tensor */
	/* Once located: the zip local header in front of its bytes, for
	 * an index image to carry (ckpt_torch_index_merged()); 0: none */
	uint32_t guard_len;
	uint64_t guard_off, guard_xxh3;
};

/* meta->located[chunk] */
#define CKPT_LOC_DONE 0		/* located (every eager record) */
#define CKPT_LOC_PENDING 1	/* not located yet */
#define CKPT_LOC_FAILED 2	/* locating failed: meta->locate_err says */
#define CKPT_LOC_LOCATING 3	/* a thread is locating it, outside
				 * locate_lock: others wait for located_cv */

/*
 * A byte range of a data file fetched by a read batch together with the
 * zip structures of the records it needs (view/parallel_read.c, the
 * "joined" read): locating reads those structures from it, and the
 * batch's data reads are served from it (io/datafiles.c), so a record
 * that a range reads from one end of costs one request, not two.
 */
struct ckpt_fetched {
	uint32_t file;		/* meta->files index */
	uint64_t off, len;	/* in the file */
	uint8_t *buf;		/* len bytes; owned by the batch */
};

/* The ranges one batch fetched (sorted by file, off), while it reads. */
struct ckpt_fetched_set {
	const struct ckpt_fetched *w;
	size_t n;
	uint64_t maxlen;	/* the longest of w[] */
	struct ckpt_fetched_set *next;
};

/* The bytes at each end of an archive that locating one of its records
 * reads first (torch/torch_zip.h's TZ_WINDOW: the head with data.pkl and
 * the local headers, the tail with the central directory); an archive of
 * up to twice this is read whole. */
#define CKPT_LOCATE_WINDOW 1024u

/* The range of w[0..n) (sorted by file, off; none longer than maxlen)
 * that holds [off, off + len) of meta file `file`, or NULL.  Borrowed
 * from w. */
const struct ckpt_fetched *ckpt_fetched_find(const struct ckpt_fetched *w,
					     size_t n, uint64_t maxlen,
					     uint32_t file, uint64_t off,
					     uint64_t len);

struct ckpt_meta;
/* Locate chunks ci[0..n) (each pending, each once), writing each one's
 * foff/len/strides/crc32 and then, with release order, its located
 * state (DONE or FAILED); a failure is recorded per chunk, its reason
 * in locate_err under locate_lock.  pre[0..npre) (may be NULL, sorted by
 * file, off) are bytes already fetched: a read inside one of them is
 * served from it.  Called without locate_lock, on chunks the caller
 * marked CKPT_LOC_LOCATING (no other thread touches their fields); one
 * it leaves LOCATING (cancelled) goes back to pending.  Returns 0 or
 * -errno for what failed the whole batch. */
typedef int (*ckpt_locate_fn)(struct ckpt_meta *m, const uint32_t *ci,
			      size_t n, const struct ckpt_fetched *pre,
			      size_t npre);

/* One state key. */
struct ckpt_entry {
	uint32_t fqn;		/* NUL-terminated, at meta->strings + fqn */
	uint32_t fqn_len;
	uint8_t kind;		/* enum ckpt_kind */
	uint8_t dtype;		/* enum ckpt_dtype, tensors only */
	uint8_t ndim;
	bool requires_grad;
	uint32_t size_at;	/* global shape at meta->dims[size_at] */
	uint32_t chunk_first;	/* chunks, sorted by offsets */
	uint32_t nchunks;
	uint32_t comp_first;	/* planner_data path, in meta->comps */
	uint32_t ncomps;	/* 0: none given, split the FQN on '.' */
	uint64_t numel;		/* elements of the global tensor */
	uint64_t nbytes;	/* bytes of the global tensor / bytes record */
};

/* A planner_data path component. */
struct ckpt_comp {
	uint32_t str;		/* at meta->strings + str, NUL-terminated */
	uint32_t len;
};

/* A data file named by at least one record.  Opening and reading it is
 * the open handle's business (io/datafiles.h), not the model's. */
struct ckpt_file {
	uint32_t path;		/* relative path, at meta->strings + path */
	uint32_t need_entry;	/* the entry whose record ends last ... */
	uint64_t need;		/* ... and where: the size the file needs */
};

struct ckpt_store;	/* io/store.h: where the bytes come from */

/* A data file as ckpt_files_open() opened it (io/datafiles.c). */
struct ckpt_file_open {
	uint32_t id;		/* in meta->store */
	uint64_t size;		/* when opened */
	uint32_t guard_first;	/* its guards: meta->guard_order[first, */
	uint32_t guard_count;	/* first + count), by offset */
	bool guards_nested;	/* records overlap: in guard order, their
				 * starts or ends are not both ascending,
				 * so each read scans every guard */
};

/*
 * A record stored with transforms (zstd): its chunk's `file` is
 * CKPT_ZREC | its index in meta->zrecs, and the chunk's foff/len address
 * the decoded chunk bytes, row-major.  The encoded bytes are
 * [off, off + len) of data file `file`.  Immutable, like the rest of the
 * meta: the decoded bytes live in the record cache (meta->records).
 */
#define CKPT_ZREC 0x80000000u
struct ckpt_zrec {
	uint32_t file;		/* the data file holding the encoded bytes */
	uint32_t chunk;		/* the chunk it stores */
	uint64_t off, len;	/* the encoded bytes in that file */
	uint8_t payload;	/* enum ckpt_payload */
	uint8_t ntransforms;
	uint8_t transforms[CKPT_MAX_TRANSFORMS];	/* enum ckpt_transform,
							 * stored order */
};

/* Is a chunk's (or a read run's) file a record with transforms? */
static inline bool ckpt_is_zrec(uint32_t file)
{
	return (file & CKPT_ZREC) && file != CKPT_NONE;
}

/* The cache of decoded records (records/record_cache.c), whose layout is
 * records/'s alone. */
struct ckpt_record_cache;
struct ckpt_rank_keep;	/* core/open.c */

struct ckpt_meta {
	char *dir;		/* the checkpoint directory, as given */
	char *meta_path;	/* dir + "/.metadata", used in messages */
	char *warning;		/* ckpt_meta_warning(), or NULL */
	uint64_t version;
	uint8_t origin;		/* enum ckpt_origin */
	char format[160];	/* its name, for ckpt_meta_info() */
	struct timespec mtime;	/* of .metadata */

	struct ckpt_entry *entries;	/* in metadata order */
	uint32_t nentries;
	struct ckpt_chunk *chunks;
	uint32_t nchunks;
	uint64_t *dims;
	uint32_t ndims;
	struct ckpt_comp *comps;
	uint32_t ncomps;
	struct ckpt_file *files;
	uint32_t nfiles;
	struct ckpt_zrec *zrecs;	/* records stored with transforms */
	uint32_t nzrecs;
	struct ckpt_guard *guards;	/* records' guards, in record order */
	uint32_t nguards;
	/* The decoded-record cache: mutable, with its own lock; owned by
	 * this handle (made by records/ on first use or at open, freed by
	 * ckpt_meta_free() in open.c).  Read and set atomically. */
	struct ckpt_record_cache *records;
	char *strings;
	size_t strings_len;
	/* The parsed form the arrays above (and lazy, located) point into
	 * when the meta was taken back from one (model/meta_parsed.h):
	 * owned (a private mapping of blob_len bytes), unmapped in their
	 * place; NULL: each is its own allocation. */
	void *blob;
	size_t blob_len;

	struct ckpt_strtab by_fqn;	/* FQN -> entry */

	/* The open handle's I/O, apart from the model (io/datafiles.c):
	 * set by ckpt_meta_open_opts() and ckpt_files_open(), then only
	 * read. */
	struct ckpt_store *store;	/* owned; NULL when parsed from memory */
	/* The store's counters as ckpt_meta_open*() returned (the open's
	 * share; ckpt_meta_io_stats() counts the reads' from there);
	 * written once, before m is handed out. */
	struct {
		uint64_t gets, heads, lists, bytes_fetched, bytes_delivered;
	} at_open;
	struct ckpt_file_open *opened;	/* [nfiles]; NULL until
					 * ckpt_files_open() */
	/* The guards by file, then offset (meta->guards indices), and
	 * whether each guard was found intact (set once, atomically):
	 * made by ckpt_files_open(). */
	uint32_t *guard_order;
	_Atomic uint8_t *guard_ok;	/* [nguards] */
	bool follow_symlinks;	/* ckpt_open_opts.follow_symlinks */
	bool huge_pages;	/* CKPT_FILES_HUGE_PAGES */

	/* Records located lazily (NULL when there are none): made by the
	 * parser; a chunk's fields change once, from pending to located,
	 * by the one thread that marked it LOCATING under locate_lock,
	 * published by located[] (release/acquire). */
	struct ckpt_lazy *lazy;		/* [nchunks] */
	_Atomic uint8_t *located;	/* [nchunks], CKPT_LOC_* */
	char **locate_err;		/* [nchunks], guarded by locate_lock */
	uint32_t nlazy;			/* records that were pending */
	/* What a lazy torch open keeps to store what it located in the
	 * node-local index cache when it is freed (open.c): the .metadata
	 * pickle (from an object store; a local one is read again then,
	 * and must still be torch_pkl_len bytes hashing to torch_pkl_xxh3),
	 * its version and the cache directory; all owned, NULL when there
	 * is no cache. */
	uint8_t *torch_pkl;
	size_t torch_pkl_len;
	uint64_t torch_pkl_xxh3;
	char *torch_mver;
	char *index_cache;
	/* The same for a lazy rank-local open (its __R.metadata pickles,
	 * the cache key and directory): open.c's own, freed by
	 * ckpt_meta_free(); NULL when there is no cache. */
	struct ckpt_rank_keep *rank_keep;
	pthread_mutex_t locate_lock;
	pthread_cond_t located_cv;	/* a LOCATING batch ended; with
					 * locate_lock */
	struct ckpt_fork_hook locate_fork;	/* ckpt_meta_fork_hook() */
	/* The ranges read batches fetched with their records' zip
	 * structures, serving those batches' reads (lazy opens only) */
	pthread_rwlock_t fetched_lock;
	struct ckpt_fetched_set *fetched;	/* guarded by fetched_lock */
	/* The bytes joined reads hold in side buffers now, and the most
	 * they held at once (ckpt_io_stats.side_bytes_peak); atomic */
	uint64_t side_bytes, side_bytes_peak;
	/* The most side_bytes may reach, across all of the handle's reads
	 * (ckpt_open_opts.cache_bytes, at most 256 MiB); 0: that most */
	uint64_t side_cap;
	ckpt_locate_fn locate;		/* set by the opener; NULL: pending
					 * records cannot be read (EIO) */
};

/*
 * Make sure chunks ci[0..n) (meta->chunks indices; repeats allowed) are
 * located before their bytes are planned: the pending ones are located
 * together, in one batch (on an object store, one parallel batch of
 * requests).  Thread-safe; a record is located once per open.  Returns 0,
 * or -EIO (with the last error naming the file and the key) when one of
 * them cannot be located, now or at an earlier call.
 */
int ckpt_meta_locate(struct ckpt_meta *m, const uint32_t *ci, size_t n);

/* ckpt_meta_locate(), reading the zip structures from pre[0..npre)
 * (sorted by file, off; borrowed for the call) where they hold them. */
int ckpt_meta_locate_pre(struct ckpt_meta *m, const uint32_t *ci, size_t n,
			 const struct ckpt_fetched *pre, size_t npre);

/* Made with the lazy records (their locks): register m's fork handlers
 * (locate_lock, fetched_lock; in a child, records being located by the
 * parent's threads are pending again).  ckpt_meta_free_parsed() removes
 * them. */
void ckpt_meta_fork_hook(struct ckpt_meta *m);

/* Is chunk ci located (its position usable)?  Acquire order. */
static inline bool ckpt_chunk_is_located(const struct ckpt_meta *m,
					 uint32_t ci)
{
	return !m->located ||
	       __atomic_load_n((const uint8_t *)&m->located[ci],
			       __ATOMIC_ACQUIRE) == CKPT_LOC_DONE;
}

/*
 * Read, parse and validate dir/.metadata: the native msgpack format, or a
 * PyTorch distributed checkpoint's pickle, which is indexed (see
 * torch_index.h) unless a current index exists.  Data files are opened
 * only to index a torch checkpoint; see ckpt_files_open().  o may be NULL.
 * Returns 0 and sets *out (caller frees with ckpt_meta_free()), or -errno
 * with the reason in err.
 */
int ckpt_meta_open_opts(const char *dir, const struct ckpt_open_opts *o,
			struct ckpt_meta **out, char *err, size_t errlen);
int ckpt_meta_open(const char *dir, struct ckpt_meta **out, char *err,
		   size_t errlen);

/*
 * Index the torch checkpoint in dir: the native image `ckptfs index`
 * writes, validated.  Returns 0 and sets *img (caller frees), *imglen and
 * *parsed, the image parsed (caller frees with ckpt_meta_free(); its
 * dir is not set and its data files are not opened), or -errno (-EINVAL
 * for a checkpoint that is already native).
 */
int ckpt_meta_build_index(const char *dir, bool follow, uint8_t **img,
			  size_t *imglen, struct ckpt_meta **parsed, char *err,
			  size_t errlen);

/*
 * Parse and validate a metadata image already in memory (the fuzz and unit
 * tests' entry point).  name is used in messages.  The buffer is not kept.
 * Returns 0 and sets *out (caller frees with ckpt_meta_free()), or -errno.
 */
int ckpt_meta_parse(const uint8_t *buf, size_t len, const char *name,
		    struct ckpt_meta **out, char *err, size_t errlen);

/*
 * ckpt_meta_parse() of an image the caller is done with: its pages are
 * given back to the system as the parse passes them (ckpt_give_back()),
 * so the image and the checkpoint parsed from it are not held whole at
 * once.  buf must be malloc()'d memory of the caller's, or a private
 * mapping of a file (read-only will do: the parse never writes to buf);
 * afterwards its bytes are undefined and the caller may only free or
 * unmap it.
 */
int ckpt_meta_parse_spend(uint8_t *buf, size_t len, const char *name,
			  struct ckpt_meta **out, char *err, size_t errlen);

/* Close the data files, free the record cache and everything else
 * (core/open.c: the open handle owns its store and its record cache).
 * Accepts NULL. */
void ckpt_meta_free(struct ckpt_meta *m);

/* Free what the model owns, and m, leaving m->store, m->opened and
 * m->records to the caller (ckpt_meta_free(), and the parser's failure
 * paths); m->records must be NULL by then.  Accepts NULL. */
void ckpt_meta_free_parsed(struct ckpt_meta *m);

/*
 * Like ckpt_meta_parse(), for one rank's part of a checkpoint whose ranks
 * wrote their own metadata: every rule but the tiling (a part holds only
 * its rank's chunks).  For ckpt_meta_merge().
 */
int ckpt_meta_parse_part(const uint8_t *buf, size_t len, const char *name,
			 struct ckpt_meta **out, char *err, size_t errlen);

/*
 * One native image from the parts of a checkpoint whose ranks each wrote
 * their own metadata (torch's dcp.save(..., use_collectives=False):
 * __R.metadata), parsed with ckpt_meta_parse_part(): every key once, its
 * chunks the union of the parts' (a chunk saved identically by several
 * ranks, a replicated tensor, is kept once, with the first part's record).
 * Keys whose dtype, kind or shape disagree between parts are an error
 * naming both parts.  The image still has to be parsed (and tiled) by
 * ckpt_meta_parse(), which refuses gaps and overlaps as for any
 * checkpoint.  Returns 0 and sets *img (caller frees) and *len, or -errno.
 */
int ckpt_meta_merge(struct ckpt_meta *const *parts, const char *const *names,
		    size_t n, uint8_t **img, size_t *len, char *err,
		    size_t errlen);

/* Variants of a format, named after it ("torch-dcp+zstd"). */
#define CKPT_VARIANT_ZSTD 1		/* records stored with zstd */
#define CKPT_VARIANT_ST_PAYLOAD 2	/* .distcp files hold safetensors */

/* Set m's origin (enum ckpt_origin) and its format's name; records with
 * transforms add +zstd by themselves. */
void ckpt_meta_set_origin(struct ckpt_meta *m, uint8_t origin,
			  uint8_t variants);

/* The key of entry idx in m (const struct ckpt_meta *ctx) for m->by_fqn,
 * a ckpt_strtab_key_fn. */
void ckpt_meta_fqn_key(const void *ctx, uint32_t idx, uint64_t *seed,
		       const char **s, size_t *len);

/* The relative path of data file idx in m, the same for a table of
 * m->files. */
void ckpt_meta_path_key(const void *ctx, uint32_t idx, uint64_t *seed,
			const char **s, size_t *len);

/* Find an entry by FQN; NULL when absent.  Borrowed from m. */
const struct ckpt_entry *ckpt_meta_find(const struct ckpt_meta *m,
					const char *fqn, size_t len);

/* The entry that owns chunk ci (chunk ranges follow entry order).
 * Borrowed from m. */
const struct ckpt_entry *ckpt_meta_chunk_entry(const struct ckpt_meta *m,
					       uint32_t ci);

/* Chunk c's record with transforms, or NULL for a plain record. */
static inline const struct ckpt_zrec *ckpt_chunk_zrec(const struct ckpt_meta *m,
						      const struct ckpt_chunk *c)
{
	return ckpt_is_zrec(c->file) ? &m->zrecs[c->file & ~CKPT_ZREC] : NULL;
}

static inline const char *ckpt_entry_fqn(const struct ckpt_meta *m,
					 const struct ckpt_entry *e)
{
	return m->strings + e->fqn;
}

static inline const uint64_t *ckpt_entry_shape(const struct ckpt_meta *m,
					       const struct ckpt_entry *e)
{
	return m->dims + e->size_at;
}

/* Lexicographic order of two n-dim positions (chunk offsets): < 0, 0 or
 * > 0. */
static inline int ckpt_dims_cmp(const uint64_t *a, const uint64_t *b,
				unsigned n)
{
	unsigned d;

	for (d = 0; d < n; d++)
		if (a[d] != b[d])
			return a[d] < b[d] ? -1 : 1;
	return 0;
}

static inline const uint64_t *ckpt_chunk_offsets(const struct ckpt_meta *m,
						 const struct ckpt_chunk *c)
{
	return m->dims + c->dims_at;
}

/* A strided chunk's element strides; NULL when it is row-major. */
static inline const uint64_t *ckpt_chunk_strides(const struct ckpt_meta *m,
						 const struct ckpt_chunk *c)
{
	return c->strides_at == CKPT_NONE ? NULL : m->dims + c->strides_at;
}

static inline const uint64_t *ckpt_chunk_sizes(const struct ckpt_meta *m,
					       const struct ckpt_entry *e,
					       const struct ckpt_chunk *c)
{
	return m->dims + c->dims_at + e->ndim;
}

#endif
