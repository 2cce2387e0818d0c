/* SPDX-License-Identifier: MIT */
/*
 * libckptfs: open a distributed-training checkpoint, build the resharded
 * view one or more ranks of a new world see, walk its files and read any
 * byte range of them.  This is the library's only public header: the
 * ckptfs daemon, its subcommands and any other program use it alone.
 *
 * Conventions
 *   - Actions return 0 or -errno.  Those that take (err, errlen) write a
 *     one-line reason there (naming the file, the key and the fact);
 *     errlen may be 0.
 *   - Objects are opaque and come in _new/_free (or _open/_free) pairs;
 *     every _free accepts NULL.  Strings and arrays a call hands back are
 *     borrowed from the object named in its comment.
 *   - Only plain C types cross the interface (integers, char *, fixed
 *     arrays of CKPT_MAX_DIMS = 16 uint64_t, function pointers), so a
 *     ctypes or cffi binding can call it without the preprocessor.
 *   - Thread safety: an open meta and a built view are immutable; any
 *     number of threads may read them at once, each with its own
 *     struct ckpt_scratch.  Opening, building and freeing are not
 *     thread-safe with respect to the object concerned.
 */
#ifndef CKPTFS_H
#define CKPTFS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CKPT_MAX_DIMS 16		/* dims of any tensor */
#define CKPT_NONE UINT32_MAX		/* "no index" */
#define CKPT_CACHE_MB 1024		/* decoded-record cache default, MiB */

/* The library's version, e.g. "0.5.0" (the Makefile's VERSION). */
const char *ckpt_version(void);

/*
 * The binary interface, for bindings that mirror this header's structs
 * (ctypes, cffi): CKPT_ABI_VERSION changes whenever a struct or a
 * function's signature below changes.  A binding checks, at load, the
 * version and the size and field offsets of every struct it mirrors.
 */
#define CKPT_ABI_VERSION 8	/* 2: ckpt_s3_opts.credentials_file,
				 * config_file; ckpt_io_stats; 3:
				 * ckpt_open_opts.index_cache; 4:
				 * CKPT_FILES_DIRECT_IO; 5:
				 * ckpt_s3_opts.no_sign_request,
				 * ckpt_meta_credentials(),
				 * ckpt_thread_cancel_set(); 6:
				 * ckpt_s3_opts.ca_bundle,
				 * addressing_style,
				 * ckpt_io_stats.connects and its
				 * open_* and read_* (requests by
				 * kind, per phase); 7:
				 * ckpt_object_read(),
				 * ckpt_object_free(); 8:
				 * ckpt_io_stats.side_bytes_peak */

/* CKPT_ABI_VERSION as the library was built. */
unsigned ckpt_abi_version(void);

/* sizeof(struct NAME) for NAME such as "ckpt_view_opts" (each struct of
 * this header); 0 for a name it does not know. */
size_t ckpt_abi_struct_size(const char *name);

/* offsetof(struct NAME, FIELD); -1 for a struct or field it does not
 * know. */
long ckpt_abi_field_offset(const char *name, const char *field);

/* ------------------------------------------------------------------ */
/* Errors */

#define CKPT_ERROR_TEXT 4096		/* bytes of each text of ckpt_error */
#define CKPT_NO_OFFSET UINT64_MAX	/* ckpt_error.offset: none */

/*
 * A failure as fields, so that callers branch on the code and read the
 * file, offset and key without parsing the message.  Texts are
 * NUL-terminated ("" when unknown) and cut when longer.
 */
struct ckpt_error {
	int code;		/* errno value (EINVAL, EIO, ECANCELED, ...);
				 * 0: no failure */
	uint64_t offset;	/* byte offset in path; CKPT_NO_OFFSET: none */
	char path[CKPT_ERROR_TEXT];	/* the file or checkpoint concerned */
	char key[CKPT_ERROR_TEXT];	/* the key (FQN) concerned */
	char message[CKPT_ERROR_TEXT];	/* the one-line reason, naming the
					 * file, the key and the fact */
};

/*
 * The calling thread's last failure, copied into *out.  Every action of
 * this header that fails with -errno records it, as errno: the code, the
 * message (what it writes into err, when it takes one) and, where it
 * knows them, the file, the offset and the key.  A batch read records,
 * in the calling thread, the failure that stopped it.  An action that
 * succeeds may leave it unchanged.
 */
void ckpt_last_error_get(struct ckpt_error *out);

/* ------------------------------------------------------------------ */
/* Cancelling a call */

/*
 * Set the calling thread's cancel flag (NULL: none) and return the one it
 * had.  While it is set, every call of this header the thread makes
 * polls *flag; once another thread stores a nonzero value there, the
 * call ends soon (its waits poll every 20 ms; docs/cancel.md gives the
 * latencies measured) and fails with -ECANCELED
 * ("cancelled" in ckpt_last_error()).  That covers every phase that can
 * wait: an open (the HEAD and GET of .metadata, the listing of a bucket,
 * the index pass over a torch checkpoint's records, the index cache's
 * lock wait), ckpt_files_open(), and reads (a batch's threads take the
 * flag of the thread that called it when its options give none).  HTTP
 * transfers in flight are broken off (their connections closed), and
 * retries and their backoff are not waited for.  A local pread is not
 * interrupted (it ends by itself), and a call that has nothing left to
 * wait for may still succeed.
 *
 * Unlike ckpt_meta_cancel(), this stops one call, not the handle: a
 * cancelled open leaves nothing behind, and a meta whose read was
 * cancelled serves the next call as before.  The flag is borrowed: it
 * must stay valid until it is replaced (set NULL before it goes away).
 * Thread-local: it affects the calling thread only; async-signal-safe
 * to store into *flag, not to call this.
 */
const volatile int *ckpt_thread_cancel_set(const volatile int *flag);

/* ------------------------------------------------------------------ */
/* Element types */

enum ckpt_dtype {
	CKPT_F64,
	CKPT_F32,
	CKPT_F16,
	CKPT_BF16,
	CKPT_F8E4M3,
	CKPT_F8E5M2,
	CKPT_I64,
	CKPT_I32,
	CKPT_I16,
	CKPT_I8,
	CKPT_U8,
	CKPT_BOOL,
	CKPT_DTYPE_COUNT	/* also "no dtype" / "no conversion" */
};

/* Parse a dtype name ("float32", "bfloat16", ...; len bytes of s).
 * Returns 0 and sets *out, or -EINVAL. */
int ckpt_dtype_from_name(const char *s, size_t len, enum ckpt_dtype *out);

/* Name and element size of dt; "?" and 0 for an unknown value. */
const char *ckpt_dtype_name(enum ckpt_dtype dt);
unsigned ckpt_dtype_size(enum ckpt_dtype dt);

/*
 * One field of a tab-separated table (manifest.tsv, `ckptfs ls`): s with
 * tab, newline, carriage return and backslash written as the two
 * characters \t, \n, \r and \\, so that a key holding them still gives
 * one row of the same columns.  Writes at most cap bytes, NUL included,
 * to out; returns the escaped length (as snprintf: out was cut when it is
 * >= cap).
 */
size_t ckpt_tsv_escape(const char *s, char *out, size_t cap);

/*
 * A name from a checkpoint or a store (a key, a file, an object) for a
 * one-line message: valid UTF-8 kept, backslash, tab, newline and CR as
 * \\, \t, \n, \r, other control bytes, DEL and invalid bytes as \xNN;
 * a name too long for out (cap bytes, NUL included) is shortened in the
 * middle ("abc\u2026xyz"), so what follows it in the message shows.  s NULL: "".  Returns out.
 */
char *ckpt_name_for_msg(const char *s, char *out, size_t cap);

/*
 * A whole message line (its names may already be escaped) for a terminal
 * or a log: the same escapes, but backslashes kept as they are; a line
 * too long for out is shortened in the middle, so its reason at the end
 * shows.  s and out must not overlap.  Returns out.
 */
char *ckpt_line_for_msg(const char *s, char *out, size_t cap);

/* Convert n elements of dtype src at in to doubles at out. */
void ckpt_convert_to_double(enum ckpt_dtype src, const void *in, double *out,
			    size_t n);

/* ------------------------------------------------------------------ */
/* Checkpoints */

struct ckpt_meta;	/* an open checkpoint; immutable once open */

enum ckpt_kind {
	CKPT_KIND_TENSOR,
	CKPT_KIND_BYTES,	/* a blob passed through unchanged */
};

/* Where a checkpoint's metadata came from. */
enum ckpt_origin {
	CKPT_ORIGIN_NATIVE,		/* a msgpack .metadata */
	CKPT_ORIGIN_TORCH,		/* a torch DCP pickle, indexed at open */
	CKPT_ORIGIN_TORCH_INDEX,	/* a torch DCP pickle, via its index */
	CKPT_ORIGIN_TORCH_LOCAL,	/* torch DCP rank-local __R.metadata
					 * files, merged */
	CKPT_ORIGIN_SAFETENSORS,	/* a directory of .safetensors files */
	CKPT_ORIGIN_SAFETENSORS_SHARDED,	/* DCP's sharded safetensors
					 * (DCP_SHARDING_INFO) */
	CKPT_ORIGIN_TORCH_INDEX_CACHE,	/* a torch DCP pickle, via this
					 * node's index cache */
};

/*
 * Object storage: a checkpoint given as "s3://bucket[/prefix]".  NULL and
 * 0 fields follow the AWS conventions (AWS_ACCESS_KEY_ID,
 * AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION or
 * AWS_DEFAULT_REGION, AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL, AWS_PROFILE
 * with ~/.aws/credentials and ~/.aws/config), then the defaults.  The
 * strings are copied at open; credentials never appear in messages.
 */
struct ckpt_s3_opts {
	const char *endpoint;	/* e.g. "http://127.0.0.1:7480" */
	const char *region;	/* default "us-east-1" */
	const char *profile;	/* of ~/.aws/{credentials,config} */
	const char *access_key;
	const char *secret_key;
	const char *session_token;
	uint32_t parallel;	/* GETs in flight at once (default 16) */
	uint64_t part_bytes;	/* large ranges are split into parts of
				 * about this size (default 8 MiB) */
	uint64_t merge_gap;	/* ranges at most this far apart are
				 * fetched by one GET (default: see README) */
	uint32_t retries;	/* per request, after the first try
				 * (0: the default, 5;
				 * CKPT_S3_NO_RETRIES: none) */
	uint32_t timeout_ms;	/* how long a try waits for the first
				 * byte of its answer (default 10000) */
	const char *credentials_file;	/* instead of
					 * AWS_SHARED_CREDENTIALS_FILE or
					 * ~/.aws/credentials */
	const char *config_file;	/* instead of AWS_CONFIG_FILE or
					 * ~/.aws/config */
	bool no_sign_request;	/* unsigned requests, for public buckets
				 * (the AWS CLI's --no-sign-request);
				 * without it, finding no credentials is
				 * an error (see docs/s3-credentials.md) */
	/* Time bounds and caps, 0 meaning the default (docs/s3-trust.md): */
	uint32_t connect_timeout_ms;	/* to connect (default 3000) */
	uint32_t low_speed_limit;	/* bytes/s: a try slower than this */
	uint32_t low_speed_time;	/* for this many seconds fails
					 * (default 4 B/s for 10 s) */
	uint32_t open_deadline_ms;	/* the whole open of a checkpoint:
					 * probe, listing pages, HEADs and
					 * the index pass's GETs together,
					 * retries included (default
					 * 15000) */
	uint32_t read_deadline_ms;	/* each GET of a read, its retries
					 * included (default 300000) */
	uint32_t list_max_keys;		/* a listing of more keys fails
					 * (default 1000000) */
	const char *ca_bundle;	/* PEM file of the CAs that HTTPS
				 * endpoints are verified against, before
				 * AWS_CA_BUNDLE and the profile's
				 * ca_bundle; NULL: those, else the
				 * system's CA store (docs/s3-trust.md) */
	const char *addressing_style;	/* "auto" (NULL), "virtual" or
					 * "path", as botocore's
					 * s3.addressing_style (docs/s3.md) */
	/* Azure Blob Storage (az://ACCOUNT/CONTAINER/PREFIX, docs/azure.md);
	 * the settings above but the AWS ones apply to it too: */
	const char *az_endpoint;	/* the account's blob endpoint, before
					 * AZURE_STORAGE_BLOB_ENDPOINT (Azurite:
					 * http://127.0.0.1:PORT/ACCOUNT) */
	bool az_anonymous;	/* unsigned requests, for a public
				 * container; without it, finding no
				 * credentials is an error */
};

#define CKPT_S3_NO_RETRIES UINT32_MAX	/* ckpt_s3_opts.retries: none */

struct ckpt_open_opts {
	const char *index;	/* a `ckptfs index` file to use for a torch
				 * checkpoint (stale: an error); NULL: use
				 * dir/.ckptfs-index when it is current */
	bool follow_symlinks;	/* data files may lead outside dir */
	uint64_t cache_bytes;	/* decoded records (zstd) kept in memory,
				 * and the most one may decode to; also
				 * the most joined reads hold in buffers
				 * of their own (at most 256 MiB); 0: the
				 * default, 1 GiB (-o cache_mb=) */
	const struct ckpt_s3_opts *s3;	/* for s3:// checkpoints, or NULL */
	const char *index_cache;	/* a directory of this node's indexes
					 * of torch checkpoints without an
					 * index (see below); NULL: none */
};

/*
 * The index cache (ckpt_open_opts.index_cache): a torch DCP checkpoint
 * with a pickled .metadata, no o->index and no current .ckptfs-index is
 * indexed once per node: the image `ckptfs index` would write is kept as
 * DIR/<xxh3-128 of the root and .metadata's version>.ckptfs-index.  An
 * open finds it there (checked like o->index against every data file),
 * or takes DIR/<hex>.lock, so that the processes opening the same
 * checkpoint at once wait for the first to index it, and writes it.  A
 * rank-local checkpoint (__R.metadata per rank) is one entry, keyed by
 * every __R.metadata's version, holding each rank's image (the container
 * `ckptfs index` writes for it; docs/index-cache.md).  A
 * stale, corrupt or edited cache file, or a DIR that is not the user's
 * own (owned by the euid, not writable by group or others) is not used:
 * ckpt_meta_warning() says why, and the checkpoint is indexed in memory;
 * a cache that cannot be written (no space, read-only) is skipped the
 * same way.  DIR is created 0700 when missing; it keeps at most
 * CKPT_INDEX_CACHE_MAX files (the oldest beyond are removed on write).
 */
#define CKPT_INDEX_CACHE_MAX 64

/*
 * Open the checkpoint in directory dir: read dir/.metadata, pick its
 * format's reader, and validate everything (tiling, bounds, records).
 * Data files are not opened yet (see ckpt_files_open()).  o may be NULL.
 * Returns 0 and sets *out (caller frees with ckpt_meta_free()), or -errno
 * with the reason in err.
 */
int ckpt_meta_open_opts(const char *dir, const struct ckpt_open_opts *o,
			struct ckpt_meta **out, char *err, size_t errlen);
int ckpt_meta_open(const char *dir, struct ckpt_meta **out, char *err,
		   size_t errlen);

/*
 * Parse and validate a native metadata image already in memory.  name is
 * used in messages; buf is not kept.  Returns 0 and sets *out (caller
 * frees with ckpt_meta_free(); it has no directory, so its data files
 * cannot be opened), or -errno.
 */
int ckpt_meta_parse(const uint8_t *buf, size_t len, const char *name,
		    struct ckpt_meta **out, char *err, size_t errlen);

/*
 * Index the torch checkpoint in dir: the native image `ckptfs index`
 * writes, validated (for a rank-local checkpoint, __R.metadata per rank:
 * the rank-local container of each rank's image, and *parsed the merged
 * checkpoint).  Returns 0 and sets *img (caller frees with free()),
 * *imglen and *parsed (caller frees with ckpt_meta_free()), or -errno
 * (-EINVAL for a checkpoint that is already native).
 */
int ckpt_meta_build_index(const char *dir, bool follow, uint8_t **img,
			  size_t *imglen, struct ckpt_meta **parsed, char *err,
			  size_t errlen);
/* The same with open options (o->follow_symlinks, o->s3 for an s3://
 * dir; the others are ignored).  o may be NULL. */
int ckpt_meta_build_index_opts(const char *dir,
			       const struct ckpt_open_opts *o, uint8_t **img,
			       size_t *imglen, struct ckpt_meta **parsed,
			       char *err, size_t errlen);

/* Close the data files and free everything.  Accepts NULL. */
void ckpt_meta_free(struct ckpt_meta *m);

/*
 * Read all of the object name directly under checkpoint root dir (a local
 * directory or "s3://bucket[/prefix]"), e.g. ".metadata", through the
 * store an open would make (o->follow_symlinks, o->s3; the other fields
 * are ignored; o may be NULL), without opening the checkpoint: at most
 * the .metadata size cap (512 MiB; more is -EFBIG).  Returns 0 and sets
 * *buf (caller frees with ckpt_object_free()) and *len, -ENOENT when dir
 * or the object does not exist, or -errno, with the reason in err and
 * ckpt_last_error().  Thread-safe.
 */
int ckpt_object_read(const char *dir, const char *name,
		     const struct ckpt_open_opts *o, uint8_t **buf,
		     size_t *len, char *err, size_t errlen);
/* Free a buffer ckpt_object_read() returned.  Accepts NULL. */
void ckpt_object_free(void *buf);

/* Does root name an object store ("s3://...", "az://...", an http(s)://
 * blob URL: used as given, never a local path)? */
bool ckpt_root_is_remote(const char *root);

/*
 * For shutdown: every read of m's checkpoint that waits on an object
 * store (s3://) ends as soon as it can, failing with -EINTR ("cancelled"
 * in ckpt_last_error()), and so does every later read.  Reads of a
 * local directory are left to finish (a pread ends by itself).  Call it
 * from any thread (not from a signal handler) while others read; m must
 * still be freed with ckpt_meta_free() once they have returned.
 * Accepts NULL.
 */
void ckpt_meta_cancel(struct ckpt_meta *m);

/*
 * What m's reads fetched so far (monotonic counters, all threads).  The
 * first four are totals; open_* are what happened until
 * ckpt_meta_open*() returned (listing, .metadata, indexing, HEADs), and
 * read_* everything since (a record located lazily by a read counts as
 * read).  GETs, HEADs and LISTs are HTTP requests of an object store,
 * retries included (0 for a local directory, whose preads only count in
 * requests): gets + heads + lists == requests.  open_X + read_X == the
 * total of X.
 */
struct ckpt_io_stats {
	uint64_t bytes_fetched;	/* from the disk or the server: merge gaps
				 * and retries included (object bodies;
				 * not listings) */
	uint64_t bytes_delivered;	/* into the library's buffers */
	uint64_t requests;	/* preads, or HTTP requests */
	uint64_t retries;	/* HTTP requests sent again */
	uint64_t connects;	/* new connections made (TCP, and TLS
				 * handshakes over them) */
	uint64_t open_gets;	/* GETs of objects (whole or ranged) */
	uint64_t open_heads;
	uint64_t open_lists;	/* GETs of listings (ListObjectsV2) */
	uint64_t open_bytes_fetched;
	uint64_t open_bytes_delivered;
	uint64_t read_gets;
	uint64_t read_heads;
	uint64_t read_lists;
	uint64_t read_bytes_fetched;
	uint64_t read_bytes_delivered;
	/* The most bytes read batches held at once in buffers of their
	 * own for joined reads (docs/performance.md): the zip structures
	 * beside a record's data, and data that could not be fetched into
	 * its destination. */
	uint64_t side_bytes_peak;
};

/* Fill *out with m's counters (zeros for a meta parsed from memory).
 * Thread-safe. */
void ckpt_meta_io_stats(const struct ckpt_meta *m, struct ckpt_io_stats *out);

/*
 * Where the credentials of m's object store come from, e.g. "the
 * environment (AWS_ACCESS_KEY_ID)" or "web identity
 * (AWS_WEB_IDENTITY_TOKEN_FILE), role arn:aws:iam::1:role/x"; never a
 * secret.  NULL for a local checkpoint.  Borrowed: valid until m is
 * freed.  Thread-safe.
 */
const char *ckpt_meta_credentials(const struct ckpt_meta *m);

enum {
	/* Allow symlinks that lead outside the checkpoint directory. */
	CKPT_FILES_FOLLOW_SYMLINKS = 1 << 0,
	/* The library never changes its host process unless asked: */
	/* raise RLIMIT_NOFILE's soft limit to the hard one and use all of
	 * it but a reserve for data files (without it, at most half of the
	 * soft limit is used); the ckptfs daemon and CLI ask for this. */
	CKPT_FILES_RAISE_NOFILE = 1 << 1,
	/* let ckpt_view_read_batch() and ckpt_meta_read_boxes()
	 * madvise(MADV_HUGEPAGE) the caller's destination memory (faster
	 * first touch of large fresh buffers). */
	CKPT_FILES_HUGE_PAGES = 1 << 2,
	/* read each range of 256 KiB or more of which no page is in the
	 * page cache with O_DIRECT, through a buffer on huge pages, in
	 * requests of the device's max_sectors_kb: on a device that counts
	 * requests (IOPS-bound), the page cache's scattered 4 KiB pages
	 * cap a request at 128 segments, often 512 KiB.  Those bytes then
	 * stay out of the page cache: other processes reading the same
	 * bytes (replicated tensors, a second load) read the device again.
	 * Local directories only; where O_DIRECT is refused, reads are
	 * buffered. */
	CKPT_FILES_DIRECT_IO = 1 << 3,
	CKPT_FILES_KNOWN = (1 << 4) - 1	/* others: -EINVAL */
};

/*
 * Check every data file (regular, inside the directory, long enough) and
 * keep up to max_open of them open (0: from RLIMIT_NOFILE, see
 * CKPT_FILES_RAISE_NOFILE).  flags: CKPT_FILES_*.  Call once, before
 * reading.  Returns 0 or -errno with the reason in err.
 */
int ckpt_files_open(struct ckpt_meta *m, unsigned flags, uint32_t max_open,
		    char *err, size_t errlen);

struct ckpt_meta_info {
	const char *dir;	/* as given to open; borrowed from m */
	const char *meta_path;	/* dir/.metadata; borrowed from m */
	const char *format;	/* "tensorplay-dcp", "torch-dcp", ... */
	uint64_t version;	/* of the native image */
	int origin;		/* enum ckpt_origin */
	uint32_t nkeys;
	uint32_t nchunks;
	uint32_t nfiles;
	int64_t mtime_sec;	/* of .metadata (rank-local: the newest
				 * __R.metadata; safetensors: the newest
				 * file read; 0: parsed from memory) */
	long mtime_nsec;
};

/*
 * One line about something the open left out that the user should know
 * (e.g. .safetensors files that model.safetensors.index.json does not
 * list, which are ignored), or NULL.  Borrowed from m.  Thread-safe.
 */
const char *ckpt_meta_warning(const struct ckpt_meta *m);

/* Facts about m.  Thread-safe. */
void ckpt_meta_info(const struct ckpt_meta *m, struct ckpt_meta_info *out);

struct ckpt_key_info {
	const char *fqn;	/* NUL-terminated; borrowed from m */
	int kind;		/* enum ckpt_kind */
	int dtype;		/* enum ckpt_dtype (tensors) */
	unsigned ndim;
	uint64_t shape[CKPT_MAX_DIMS];	/* global shape */
	uint64_t numel;
	uint64_t nbytes;	/* of the global tensor / the blob */
	uint32_t chunk_first;	/* its chunks: [chunk_first, +nchunks) */
	uint32_t nchunks;
};

/* Key i (in metadata order) of m.  Returns 0, or -ENOENT past the end.
 * Thread-safe. */
int ckpt_meta_key(const struct ckpt_meta *m, uint32_t i,
		  struct ckpt_key_info *out);

/* The index of the key named fqn (NUL-terminated) into *i, or -ENOENT. */
int ckpt_meta_find_key(const struct ckpt_meta *m, const char *fqn,
		       uint32_t *i);

struct ckpt_chunk_info {
	uint32_t key;		/* the key that owns it */
	unsigned ndim;
	uint64_t offsets[CKPT_MAX_DIMS];	/* in the global tensor */
	uint64_t sizes[CKPT_MAX_DIMS];
	bool has_record;	/* false: no bytes (an empty chunk) */
	uint32_t file;		/* data file index, when has_record */
	const char *path;	/* its relative path; borrowed from m */
	uint64_t foff, len;	/* where its bytes lie in that file */
	bool strided;		/* stored in a non-row-major layout */
	const char *checksum;	/* "xxh3", "crc32" or NULL: none */
	uint64_t stored_checksum;	/* the value the metadata gives */
	/* A record stored with transforms (zstd): foff/len above are its
	 * stored bytes, which decode to decoded_len bytes of the chunk. */
	const char *transforms;	/* e.g. "stream.zstd/1"; NULL: none */
	uint64_t decoded_len;
};

/* Chunk ci of m.  Returns 0, or -ENOENT past the end.  Thread-safe.
 * A record not located yet (a PyTorch checkpoint opened lazily from an
 * object store, docs/s3.md: a read locates it) has foff/len of its
 * whole torch.save archive, and no checksum. */
int ckpt_meta_chunk(const struct ckpt_meta *m, uint32_t ci,
		    struct ckpt_chunk_info *out);

/* Data file fi: its relative path (borrowed from m) and its size when
 * validated (0 before ckpt_files_open()).  Returns 0 or -ENOENT. */
int ckpt_meta_file(const struct ckpt_meta *m, uint32_t fi, const char **path,
		   uint64_t *size);

/*
 * Check chunk ci's record against its checksum, reading it with buf
 * (buflen bytes) as working memory; *got gets the checksum computed.
 * Returns 0 when it matches, 1 when the record has no checksum, -EBADMSG
 * on a mismatch, -EIO when the file cannot give the bytes.
 * Thread-safe (each caller its own buf).
 */
int ckpt_verify_chunk(struct ckpt_meta *m, uint32_t ci, char *buf,
		      size_t buflen, uint64_t *got);

/* ------------------------------------------------------------------ */
/* 2-D layouts (TP x DP): a box of the global tensor per parameter */

struct ckpt_layout;

/* Parse a layout file (`PARAM OFFSETS SIZES` lines).  Returns 0 and sets
 * *out (caller frees with ckpt_layout_free()), or -errno with
 * "FILE:LINE: reason" in err. */
int ckpt_layout_load(const char *path, struct ckpt_layout **out, char *err,
		     size_t errlen);
void ckpt_layout_free(struct ckpt_layout *l);

/* Bind l's boxes to m's keys (checked against each key's shape).
 * Returns 0 or -EINVAL naming the line, the key and the problem.  Call
 * once, before building views with l. */
int ckpt_layout_bind(struct ckpt_layout *l, const struct ckpt_meta *m,
		     char *err, size_t errlen);

/* Call fn once for each line of a bound layout that matched no key, with
 * a one-line message ("FILE:LINE: PARAM matches no key"). */
void ckpt_layout_unmatched(const struct ckpt_layout *l,
			   void (*fn)(void *ctx, const char *msg), void *ctx);

/* ------------------------------------------------------------------ */
/* Views */

struct ckpt_view;	/* immutable once built */

struct ckpt_view_opts {
	uint32_t world;		/* >= 1 */
	uint32_t rank;		/* < world; used when nranks == 0 */
	const uint32_t *ranks;	/* several ranks: distinct, each < world */
	uint32_t nranks;	/* 0: one rank, no rankN/ directories */
	const char *prefix;	/* NULL: every key; else first component */
	const struct ckpt_layout *layout;	/* NULL or bound to the meta */
	enum ckpt_dtype dtype;	/* CKPT_DTYPE_COUNT: no conversion */
	bool verify;		/* check each record on its first read */
	bool npy;		/* tensors as NAME.npy files */
	bool meta_dir;		/* a .ckptfs/ directory in each tree */
	const char *source;	/* the checkpoint, for .ckptfs/ files */
	const char *layout_path;	/* for view.json, or NULL */
	/* Called once per record found corrupt (verify), with report_ctx
	 * and one line naming the file, offset and key; may be NULL.  May
	 * be called from any thread that reads. */
	void (*report)(void *ctx, const char *line);
	void *report_ctx;
};

/*
 * Build the view of m for o: the tree of directories and files, and each
 * file's geometry (box, size, dtype, npy header, the chunks it touches)
 * for every rank served.  world 0, a rank not below world, ranks that
 * repeat, two keys needing the same path, or a name longer than 255 bytes
 * are an error (-EINVAL) naming the value or the key(s).  Returns 0 and sets *out
 * (caller frees with ckpt_view_free(); m and o->layout must outlive it),
 * or -errno with the reason in err.
 */
int ckpt_view_new(struct ckpt_meta *m, const struct ckpt_view_opts *o,
		  struct ckpt_view **out, char *err, size_t errlen);
void ckpt_view_free(struct ckpt_view *v);

struct ckpt_view_info {
	uint32_t world;
	uint32_t nslots;	/* ranks served (1 without --ranks) */
	bool multi;		/* rankN/ directories at the root */
	uint32_t nnodes;	/* per slot; node 0 is the root */
	uint32_t nfiles;	/* key files per slot */
	uint64_t total_bytes;	/* of every key file of every slot */
	bool npy;
	int dtype;		/* conversion target, or CKPT_DTYPE_COUNT */
};

void ckpt_view_info(const struct ckpt_view *v, struct ckpt_view_info *out);

/* The rank that slot serves (slot < nslots). */
uint32_t ckpt_view_slot_rank(const struct ckpt_view *v, uint32_t slot);

/* The meta a view was built from; borrowed. */
struct ckpt_meta *ckpt_view_meta(const struct ckpt_view *v);

enum ckpt_node_type {
	CKPT_NODE_DIR,
	CKPT_NODE_KEY,		/* a state key's file */
	CKPT_NODE_META,		/* a file of .ckptfs/ */
};

struct ckpt_node_info {
	int type;		/* enum ckpt_node_type */
	uint32_t parent;	/* the root is its own parent */
	const char *name;	/* NUL-terminated; borrowed from v */
	uint32_t name_len;
	uint32_t key;		/* CKPT_NODE_KEY: the meta key; else NONE */
	uint32_t nchildren;	/* dirs */
	uint32_t nsubdirs;	/* dirs */
};

/* Node i (< nnodes) of the tree.  Returns 0 or -ENOENT. */
int ckpt_view_node(const struct ckpt_view *v, uint32_t i,
		   struct ckpt_node_info *out);

/* The k-th child of directory node dir (sorted by name), or CKPT_NONE. */
uint32_t ckpt_view_child(const struct ckpt_view *v, uint32_t dir, uint32_t k);

/* The child of directory node dir called name, or CKPT_NONE. */
uint32_t ckpt_view_lookup(const struct ckpt_view *v, uint32_t dir,
			  const char *name);

/* The path of node i from the tree's root ("a/b/c") into out (cap
 * bytes, NUL-terminated, cut when longer). */
void ckpt_view_path(const struct ckpt_view *v, uint32_t i, char *out,
		    size_t cap);

/* Inode numbers: stable small integers.  One slot: node i is inode
 * i + 1.  Several: inode 1 is the root of the rankN/ directories, 2 + s
 * is slot s's directory, then every slot's other nodes. */
uint64_t ckpt_view_ino(const struct ckpt_view *v, uint32_t slot,
		       uint32_t node);
/* 0 with *slot and *node set, 1 for the root of rankN/ dirs, or -ENOENT. */
int ckpt_view_ino_decode(const struct ckpt_view *v, uint64_t ino,
			 uint32_t *slot, uint32_t *node);

struct ckpt_entry_info {
	uint32_t key;		/* meta key; CKPT_NONE for .ckptfs/ files */
	const char *fqn;	/* borrowed from the meta, or NULL */
	int kind;		/* enum ckpt_kind */
	int dtype;		/* as shown (after conversion) */
	int saved_dtype;	/* as stored */
	unsigned ndim;
	uint64_t shape[CKPT_MAX_DIMS];		/* this rank's slice */
	uint64_t global_shape[CKPT_MAX_DIMS];
	uint64_t offsets[CKPT_MAX_DIMS];	/* slice start, global */
	uint64_t size;		/* file bytes, header included */
	uint64_t header;	/* bytes of the .npy header (0: none) */
	uint32_t nchunks;	/* saved chunks the slice touches */
};

/* What file node shows to slot's rank: decided when the view was
 * built.  Returns 0, or -EISDIR / -ENOENT. */
int ckpt_view_entry(const struct ckpt_view *v, uint32_t slot, uint32_t node,
		    struct ckpt_entry_info *out);

/* Bytes of file node for slot into *size (0 for directories).  Returns
 * 0, -ENOENT, or -ENOMEM when a .ckptfs/ file could not be built (nothing
 * is cached: the next call tries again). */
int ckpt_view_size(const struct ckpt_view *v, uint32_t slot, uint32_t node,
		   uint64_t *size);

/* The saved chunks file node's slice touches for slot, ascending:
 * *chunks is borrowed from v.  Returns their count. */
uint32_t ckpt_view_chunks(const struct ckpt_view *v, uint32_t slot,
			  uint32_t node, const uint32_t **chunks);

/*
 * Extended attributes of file node for slot: user.ckptfs.fqn, .kind
 * ("tensor" or "bytes"), and for tensors .dtype (after conversion),
 * .shape, .global_shape and .offsets, dims comma-separated.
 * ckpt_view_xattr() writes name's value into buf (not NUL-terminated) and
 * returns its length, even when longer than cap (buf then holds a
 * prefix); -ENODATA when there is none.  ckpt_view_xattr_list() does the
 * same for the NUL-separated list of names.
 */
int ckpt_view_xattr(const struct ckpt_view *v, uint32_t slot, uint32_t node,
		    const char *name, char *buf, size_t cap);
int ckpt_view_xattr_list(const struct ckpt_view *v, uint32_t node, char *buf,
			 size_t cap);

/* ------------------------------------------------------------------ */
/* Reading */

/* Per-thread working memory for reads: caller frees with
 * ckpt_scratch_free().  NULL on out of memory. */
struct ckpt_scratch *ckpt_scratch_new(void);
void ckpt_scratch_free(struct ckpt_scratch *s);

/*
 * Read up to len bytes of file node, as slot's rank sees it, at off into
 * buf; *got is how many (0 at or past the end).  s is the calling
 * thread's scratch.  Returns 0, -ENOMEM, -EISDIR, or -EIO when a data
 * file cannot give every byte asked for (or a record fails -o verify);
 * then ckpt_last_error() names the file, offset and key.  Thread-safe
 * with one scratch per thread.
 */
int ckpt_view_read(const struct ckpt_view *v, uint32_t slot, uint32_t node,
		   uint64_t off, size_t len, void *buf, size_t *got,
		   struct ckpt_scratch *s);

/* The message of the calling thread's last failure (see
 * ckpt_last_error_get()), "" when none.  Borrowed; valid until the
 * thread's next call into the library. */
const char *ckpt_last_error(void);

/* One run of a read plan: len bytes of data file `file` at foff, from
 * saved chunk `chunk`. */
struct ckpt_read_run {
	uint32_t chunk;
	uint32_t file;
	uint64_t foff;
	uint64_t len;
	bool decoded;		/* the chunk's record is stored with
				 * transforms: foff/len address its decoded
				 * bytes (decoded once, then cached) */
};

/*
 * Plan bytes [off, off + len) of key file node's data (no npy header, no
 * conversion) for slot: call fn for each run, in the order the bytes
 * appear in the file.  fn returns 0 to go on, anything else to stop (then
 * returned).  Returns 0, -EISDIR, or fn's value.
 */
int ckpt_view_plan(const struct ckpt_view *v, uint32_t slot, uint32_t node,
		   uint64_t off, uint64_t len,
		   int (*fn)(void *ctx, const struct ckpt_read_run *run),
		   void *ctx);

/* ------------------------------------------------------------------ */
/* Read-ahead windows for in-order readers of strided or remote files  */

struct ckpt_readahead;

/*
 * Read-ahead for view files whose bytes come from strided records (a
 * transposed tensor, say) or from an object store (s3://): a reader that
 * reads such a file in order gets a window read ahead of it at once (in
 * large blocks of a strided record; from an object store, in 1 MiB
 * pieces fetched by many GETs at once), and its next reads are copied
 * from it.  The window is the request plus
 * what the reader already read in order, at most window bytes, so it
 * about doubles each time and a reader reads at most twice what it is
 * served (once when it reads to the end).  From an object store, a
 * reader that starts a small file (up to 1 MiB) right after reading the
 * view's previous file to its end gets it and the next small files (up
 * to 8, at most window bytes) fetched in one batch, each into a window
 * of its own, and, while it reads those, the files after them fetched
 * by up to four threads of ra's own (files follow one another in readdir
 * order: each directory sorted by name).  All windows together hold at
 * most budget bytes.  Other files, and readers that jump, read directly.
 * Returns NULL when window or budget is 0 or out of memory (then
 * ckpt_readahead_read() reads directly).  Caller frees with
 * ckpt_readahead_free() (accepts NULL) once no read runs.
 */
struct ckpt_readahead *ckpt_readahead_new(uint64_t window, uint64_t budget);
void ckpt_readahead_free(struct ckpt_readahead *ra);

/* ckpt_view_read() through ra: the same contract and errors.  A window
 * is read with its own working memory, freed after.  Thread-safe: the
 * reads of one file wait for its window rather than read it twice. */
int ckpt_readahead_read(struct ckpt_readahead *ra, const struct ckpt_view *v,
			uint32_t slot, uint32_t node, uint64_t off, size_t len,
			void *buf, size_t *got, struct ckpt_scratch *s);

/* ------------------------------------------------------------------ */
/* Parallel direct reads: many byte ranges into caller memory at once */

/* len bytes at off of view file node (as slot's rank sees it) into dst. */
struct ckpt_read_req {
	uint32_t slot;
	uint32_t node;
	uint64_t off;
	uint64_t len;
	void *dst;
};

/*
 * Serve every request with a pool of `threads` threads (0: one per CPU).
 * Requests are cut into pieces of at most a few MiB that the threads take
 * in turn; each piece is planned and read as ckpt_view_read() reads
 * (runs merged, only the needed bytes).  Reading past a file's end is an
 * error (-EINVAL): a batch fills exactly what it asks for.  Returns 0,
 * or the first error with one line in err naming the file, offset and
 * key.  Does not call back into the caller; thread-safe (the view is
 * only read).
 */
int ckpt_view_read_batch(const struct ckpt_view *v,
			 const struct ckpt_read_req *reqs, size_t n,
			 unsigned threads, char *err, size_t errlen);

/* A box of a saved tensor, in global coordinates, into dst (row-major,
 * the saved dtype, numel x itemsize bytes).  For a bytes key the box is
 * ignored and dst gets the whole blob. */
struct ckpt_box_req {
	uint32_t key;
	uint64_t off[CKPT_MAX_DIMS];
	uint64_t size[CKPT_MAX_DIMS];
	void *dst;
};

/* Options of the batch reads below. */
struct ckpt_batch_opts {
	unsigned threads;	/* the pool (0: one per CPU) */
	/* When set, the threads check *cancel between pieces (each at most
	 * a few MiB): once it is nonzero they stop and the call returns
	 * -ECANCELED.  Another thread sets it (any aligned store). */
	const volatile int *cancel;
};

/*
 * ckpt_view_read_batch() and ckpt_meta_read_boxes() with options (o may
 * be NULL).  The failure that stops a batch is the calling thread's last
 * error (ckpt_last_error_get()): code, message, the data file, the offset
 * in it and the key.
 */
int ckpt_view_read_batch_opts(const struct ckpt_view *v,
			      const struct ckpt_read_req *reqs, size_t n,
			      const struct ckpt_batch_opts *o, char *err,
			      size_t errlen);
int ckpt_meta_read_boxes_opts(struct ckpt_meta *m,
			      const struct ckpt_box_req *reqs, size_t n,
			      const struct ckpt_batch_opts *o, char *err,
			      size_t errlen);

/*
 * Read boxes of m's saved tensors, independent of any view (what a
 * PyTorch StorageReader's ReadItems ask for), with `threads` threads as
 * ckpt_view_read_batch().  Each box must lie inside its key's shape
 * (-EINVAL naming the key otherwise).  Data files must be open
 * (ckpt_files_open()).  Returns 0 or the first error, with err.
 */
int ckpt_meta_read_boxes(struct ckpt_meta *m, const struct ckpt_box_req *reqs,
			 size_t n, unsigned threads, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
