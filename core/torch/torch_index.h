/* SPDX-License-Identifier: MIT */
/*
 * PyTorch distributed checkpoints (FileSystemWriter: a pickled .metadata
 * and __R_I.distcp files of torch.save archives) turned into the native
 * metadata image (docs/format.md), whose records point straight at each
 * tensor's raw bytes inside the .distcp files.  The native parser then
 * validates it like any other checkpoint, and reads never touch a zip or
 * a pickle again.  This is what `ckptfs index` writes to a file.
 */
#ifndef CKPT_TORCH_INDEX_H
#define CKPT_TORCH_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

/* True when a .metadata image is a pickle (protocol 2-5), not msgpack. */
bool ckpt_torch_is_pickle(const uint8_t *buf, size_t len);

struct ckpt_store;

/*
 * Build the native image for the torch checkpoint at the root of store s
 * from its .metadata pickle pkl[0, len).  name (the .metadata path) and
 * the data file paths prefix messages.  Data files are opened through s
 * (NULL: none can be, e.g. when fuzzing); only each record's zip end
 * records, central directory, data.pkl and local headers are read.
 * Returns 0 and sets *img (caller frees) and *imglen, or -errno with a
 * one-line reason.
 */
int ckpt_torch_index(struct ckpt_store *s, const char *name,
		     const uint8_t *pkl, size_t len, uint8_t **img,
		     size_t *imglen, char *err, size_t errlen);

/* The "guards" field of an index's source stamp: 1 when every tensor
 * record in a torch.save archive carries its zip_header.  An index
 * without it (an older ckptfs) is refused: rebuild it. */
#define CKPT_INDEX_GUARDS 1

/*
 * The "source" stamp an index carries (docs/format.md): the pickle's size
 * and XXH3, each data file's size and version as the store gives them
 * (ckpt_store_open(): dev:ino:mtime:ctime for a local file, the ETag on
 * S3), and an XXH3 of every byte of the image after the stamp.
 * ckpt_torch_index_matches() is true when img was built from exactly pkl
 * (the pickle alone).
 */
/*
 * Like ckpt_torch_index(), but without reading a data file: each tensor
 * record inside a torch.save archive is left to be located when a read
 * needs it (its "archive", docs/format.md; ckpt_torch_locate()).  The
 * image has no data files in its stamp: it is never stored.
 */
int ckpt_torch_index_lazy(struct ckpt_store *s, const char *name,
			  const uint8_t *pkl, size_t len, uint8_t **img,
			  size_t *imglen, char *err, size_t errlen);

/*
 * ckpt_torch_index_lazy() for a caller done with pkl (the stamped image:
 * ckpt_torch_index_pieces() with spend): the pickle's pages are given
 * back to the system as it streams by (pk_stream.spend), so the pickle
 * and the image are not held whole at once.  pkl must be malloc()'d
 * memory of the caller's; afterwards its bytes are undefined and the
 * caller may only free it.
 */
int ckpt_torch_index_spend(struct ckpt_store *s, const char *name,
			   uint8_t *pkl, size_t len, uint8_t **img,
			   size_t *imglen, char *err, size_t errlen);

/*
 * An image as the index wrote it, in pieces: iov[0, n) one after another
 * are its len bytes, each iov_base malloc()'d and the holder's.  So the
 * image is written where it goes (the node-local index cache's temp
 * file: ckpt_index_cache_stage()) without being joined in memory first.
 */
#define CKPT_TORCH_PIECES 6
struct ckpt_torch_pieces {
	struct iovec iov[CKPT_TORCH_PIECES];
	int n;
	size_t len;
};

/*
 * ckpt_torch_index_merged() with nothing known (the lazy image with the
 * stamp, for the node-local index cache), into *pieces (the caller's:
 * ckpt_torch_pieces_free()).  spend: as ckpt_torch_index_spend(), pkl's
 * pages are given back as it streams by (then its bytes are undefined
 * and the caller may only free it); else pkl is only read.
 */
int ckpt_torch_index_pieces(struct ckpt_store *s, const char *name,
			    uint8_t *pkl, size_t len, bool spend,
			    struct ckpt_torch_pieces *pieces, char *err,
			    size_t errlen);
/* pc joined into *img (the caller's) and *imglen; 0, or -ENOMEM.  pc is
 * freed (and emptied) either way. */
int ckpt_torch_pieces_join(struct ckpt_torch_pieces *pc, uint8_t **img,
			   size_t *imglen);
void ckpt_torch_pieces_free(struct ckpt_torch_pieces *pc);

struct ckpt_meta;
struct ckpt_fetched;

/*
 * Like ckpt_torch_index_lazy(), but each tensor record that one of
 * known[0..nknown) has located (with the zip_header in front of it) is
 * written located, as ckpt_torch_index() would write it, and the stamp
 * names every data file (their identity as s has them open: no request
 * for a file s opened before), so the image may be stored in the
 * node-local index cache.  Records none of them located keep their
 * "archive".  nknown may be 0 (known not NULL): the lazy image with the
 * stamp, which the open stores for the node's other opens to use.
 * Returns as ckpt_torch_index(); *img is the caller's.
 */
int ckpt_torch_index_merged(struct ckpt_store *s, const char *name,
			    const uint8_t *pkl, size_t len,
			    const struct ckpt_meta *const *known,
			    size_t nknown, uint8_t **img, size_t *imglen,
			    char *err, size_t errlen);
/*
 * m's ckpt_locate_fn (model/meta.h) for a torch checkpoint: the archives
 * of pending chunks ci[0..n) are fetched in one batch (each one's head
 * and tail window; the store merges neighbours and runs them at once),
 * then each tensor is found and checked as ckpt_torch_index() does (zip
 * structure, local header, data.pkl's dtype and size against the chunk,
 * the addressed bytes inside the storage).  A chunk that fails is marked
 * so with its reason; the others are located.  Needs m's data files
 * open (else -EBADF, all left pending).  Called with m->locate_lock
 * held; returns 0.
 */
int ckpt_torch_locate(struct ckpt_meta *m, const uint32_t *ci, size_t n,
		      const struct ckpt_fetched *pre, size_t npre);

bool ckpt_torch_index_matches(const uint8_t *img, size_t imglen,
			      const uint8_t *pkl, size_t len);

/* What an index is checked against. */
struct ckpt_index_check {
	const char *index_path;	/* for messages */
	const char *dir;	/* the checkpoint's root, for messages */
	const char *meta_path;	/* its .metadata */
	struct ckpt_store *store;	/* the checkpoint's store */
	const uint8_t *pkl;	/* .metadata's bytes now (NULL with
				 * has_pkl_xxh3: given back already) */
	size_t pkl_len;
	uint64_t pkl_xxh3;	/* with has_pkl_xxh3: their XXH3, known */
	bool has_pkl_xxh3;
	bool strict;		/* the node-local index cache's image: each
				 * file's "ident" (ckpt_store_file_info) must
				 * match too, not only its size and version */
};

/*
 * Whether the index img still describes the checkpoint: built from this
 * very pickle, not edited since (its image hash), and every data file it
 * stamped of the same size and version now (and, with ic->strict, the
 * same ident: inode and ctime locally) (opened through ic->store, which
 * then keeps reading exactly those files).  Returns 0, or -ESTALE
 * with one line naming the index, the mismatch and "run 'ckptfs index
 * DIR' again".
 */
int ckpt_torch_index_check(const struct ckpt_index_check *ic,
			   const uint8_t *img, size_t imglen, char *err,
			   size_t errlen);

/*
 * ckpt_torch_index_check() of the first len bytes of an index (its head,
 * which holds its stamp), for a caller that uses what was parsed from the
 * index, not its records (the index cache's parsed form): every check but
 * the hash of the records, whose hash the stamp records goes into
 * *image_hash.  A head too short to hold the whole stamp fails as an
 * index without one does (-ESTALE): read the whole index then.
 */
int ckpt_torch_index_check_head(const struct ckpt_index_check *ic,
				const uint8_t *head, size_t len,
				uint64_t *image_hash, char *err,
				size_t errlen);

/* Whether img (an index, or its first imglen bytes) holds its whole
 * stamp. */
bool ckpt_torch_index_has_stamp(const uint8_t *img, size_t imglen);

/* The hash of its records that index img's stamp records, into
 * *image_hash; false when it has none. */
bool ckpt_torch_index_image_hash(const uint8_t *img, size_t imglen,
				 uint64_t *image_hash);

/* The CKPT_VARIANT_* flags an index records (model/meta.h): whether the
 * .distcp files hold safetensors blobs.  0 when it says nothing. */
uint8_t ckpt_torch_index_variants(const uint8_t *img, size_t imglen);

/*
 * A rank-local checkpoint's index (docs/format.md, "Rank-local
 * checkpoints"): one msgpack map {"format": CKPT_RANK_INDEX_FORMAT,
 * "version": 1, "ranks": [{"rank": R, "index": bin}, ...]}, each "index"
 * the image ckpt_torch_index() (or ckpt_torch_index_merged()) builds from
 * that rank's __R.metadata, ranks ascending.  `ckptfs index` writes it
 * as .ckptfs-index; the node-local index cache stores it too.
 */
#define CKPT_RANK_INDEX_FORMAT "ckptfs-rank-local-index"

struct ckpt_rank_image {
	uint64_t rank;
	const uint8_t *img;	/* borrowed */
	size_t len;
};

/* Pack r[0..n) (ranks ascending) into *out (caller frees) and *outlen:
 * 0 or -ENOMEM. */
int ckpt_torch_rank_index_pack(const struct ckpt_rank_image *r, size_t n,
			       uint8_t **out, size_t *outlen);

/* Whether buf is a rank-local index (its "format" says so). */
bool ckpt_torch_is_rank_index(const uint8_t *buf, size_t len);

/* The images of rank-local index buf: 0 and *out (caller frees; each
 * img points into buf) and *n, -EBADMSG when buf is not one (malformed,
 * another format or version, ranks not ascending), or -ENOMEM. */
int ckpt_torch_rank_index_parse(const uint8_t *buf, size_t len,
				struct ckpt_rank_image **out, size_t *n);

#endif
