/* SPDX-License-Identifier: MIT */
/*
 * Storage: where a checkpoint's bytes come from.  A store is a root of
 * names: a local directory, or an object-store prefix (s3://bucket/prefix).
 * Every byte libckptfs reads goes through one: .metadata, __R.metadata,
 * indexes, model.safetensors.index.json, safetensors headers, torch zips
 * and data files.  Nothing above io/ knows which implementation it uses.
 *
 * A file is opened by name.  Opening fixes its identity: its size and a
 * version (size and mtime for a local file, the ETag on S3).  Every
 * later read checks that the same file is still there (a local fd reopened
 * must be the same inode; an S3 GET carries If-Match): a file replaced or
 * deleted since gives -EIO naming it, never bytes of two versions mixed.
 *
 * Implementations: store_local.c (openat2 beneath the root, a bounded
 * cache of open fds), store_s3.c (libcurl: HEAD, ListObjectsV2, ranged
 * GETs, many in flight) and store_azure.c (Azure Blob Storage over the
 * same HTTP engine: HEAD, List Blobs, ranged GETs).  store.c picks one
 * from the root's form.
 *
 * Thread safety: after ckpt_store_new(), every function but
 * ckpt_store_free() may be called from any number of threads at once.
 * A store's caches (fds, connections) have their own locks and a bound.
 */
#ifndef CKPT_STORE_H
#define CKPT_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ckptfs.h"

struct ckpt_store;

#define CKPT_STORE_VERSION_MAX 128	/* bytes of a version, NUL included */

/* What every reader says of a name that leads outside the root (local,
 * without follow_symlinks): "ROOT/NAME: " CKPT_STORE_OUTSIDE. */
#define CKPT_STORE_OUTSIDE \
	"leads outside the checkpoint directory (a symlink?); -o follow_symlinks allows that"

/* How to reach a store.  Zero / NULL fields take the defaults (and for
 * S3 the AWS environment variables and ~/.aws files, see s3_config.h). */
struct ckpt_store_opts {
	bool follow_symlinks;	/* local: names may lead outside the root */
	bool raise_nofile;	/* local: raise RLIMIT_NOFILE's soft limit to
				 * the hard one (the daemon and CLI opt in;
				 * a library caller must ask) */
	uint32_t max_open;	/* local: most fds kept open (0: from the
				 * soft RLIMIT_NOFILE, at most 4096: with
				 * raise_nofile all of it but a reserve,
				 * else half, the rest left to the host) */
	const struct ckpt_s3_opts *s3;	/* S3 settings (ckptfs.h), or NULL */
	bool direct_io;		/* local: read ranges of 256 KiB or more that
				 * have no page cached with O_DIRECT, in the
				 * device's largest requests (ckptfs.h,
				 * CKPT_FILES_DIRECT_IO) */
};

/* A file's identity, fixed when it was opened. */
struct ckpt_store_file_info {
	uint64_t size;
	char version[CKPT_STORE_VERSION_MAX];	/* NUL-terminated */
	int64_t mtime_sec, mtime_nsec;	/* last modified (local: st_mtim,
					 * S3: Last-Modified); 0: unknown */
	/* What a node-local cache compares besides size and version: what
	 * no user can set back (local: device, inode and ctime, which
	 * `touch -r` cannot restore; S3: the ETag again).  NUL-terminated. */
	char ident[CKPT_STORE_VERSION_MAX];
};

/*
 * A store for root: "s3://bucket[/prefix]" for S3,
 * "az://account/container[/prefix]" or an http(s):// blob URL for Azure
 * (az_config.h), anything else a local directory.  The root must exist and be reachable (local: a directory
 * that opens; S3: the bucket answers, the credentials are accepted).
 * Returns 0 and sets *out (caller frees with ckpt_store_free()), or -errno
 * with one line in err naming the root and the problem; the line never
 * holds a credential.
 */
int ckpt_store_new(const char *root, const struct ckpt_store_opts *o,
		   struct ckpt_store **out, char *err, size_t errlen);

/* Close every file and connection and free s.  Accepts NULL.  No other
 * call on s may be running. */
void ckpt_store_free(struct ckpt_store *s);

/*
 * Change the local settings of s (follow_symlinks, raise_nofile,
 * max_open; o->s3 is ignored) after it was made: ckpt_files_open() calls
 * this with what its caller asked for, before reads start.  Files already
 * open keep their identity; a lower max_open closes the unused ones at
 * once.  A store of another kind ignores it.  Returns 0 or -errno with
 * err.  Not thread-safe.
 */
int ckpt_store_set_opts(struct ckpt_store *s, const struct ckpt_store_opts *o,
			char *err, size_t errlen);

/* Does root name an object store (s3://, az://, an http(s):// blob
 * URL), not a local directory? */
bool ckpt_store_root_is_remote(const char *root);

/*
 * root as messages may show it: an object store's URL less its query (a
 * SAS token), copied into buf (cap bytes, shortened when it does not
 * fit).  Returns buf.
 */
const char *ckpt_store_root_shown(const char *root, char *buf, size_t cap);

/* The root as given, for messages ("ckpt/", "s3://bucket/prefix"); never
 * holds a credential.  Borrowed from s. */
const char *ckpt_store_root(const struct ckpt_store *s);

/* The root's identity for stamps: the local directory's st_dev:st_ino, or
 * the S3 endpoint, bucket and prefix.  Borrowed from s. */
const char *ckpt_store_identity(const struct ckpt_store *s);

/* Where the store's credentials come from (an object store's; NULL for a
 * local directory), never a secret.  Borrowed from s. */
const char *ckpt_store_credentials(const struct ckpt_store *s);

/* One line the user should know about how s was opened (a session token
 * sent over plain http://), or NULL.  Borrowed from s. */
const char *ckpt_store_warning(const struct ckpt_store *s);

/* How many reads are worth keeping in flight at once, for the parallel
 * engine's default thread count: 0 for a local directory (meaning "as
 * the CPUs allow"), the parallel setting for S3. */
unsigned ckpt_store_parallelism(const struct ckpt_store *s);

/*
 * Call fn(ctx, name, size) for each file directly under the root (not
 * recursive; no order promised).  Local: every entry but directories,
 * symlinks by their own name with their target's size; a FIFO or device
 * is listed too (size 0), so that ckpt_store_open() refuses it with a
 * reason instead of it going unnoticed.  fn returns 0 to go on, anything
 * else to stop (then returned).  Returns 0, fn's value, or -errno with
 * err.  Names are borrowed for the call only.
 */
int ckpt_store_list(struct ckpt_store *s,
		    int (*fn)(void *ctx, const char *name, uint64_t size),
		    void *ctx, char *err, size_t errlen);

/*
 * Open name, a relative path beneath the root ("a/b.distcp"; no "..",
 * no leading '/', no NUL), and fix its identity.  Opening the same name
 * again returns the same *id and info.  A name that is not a regular
 * file, or (local, without follow_symlinks) that leads outside the root,
 * is refused before any byte of it is read (local: it is opened O_PATH
 * and checked with fstat before it is opened for reading, so a device
 * node is never opened).  Returns 0 with *id (valid until s is freed)
 * and *info, -ENOENT when there is no such file, or -errno; err names
 * the file and the problem: -EXDEV it leads outside the root
 * (CKPT_STORE_OUTSIDE), -EINVAL the name is not a safe relative name or
 * the file is not a regular file.  Thread-safe.
 */
int ckpt_store_open(struct ckpt_store *s, const char *name, uint32_t *id,
		    struct ckpt_store_file_info *info, char *err,
		    size_t errlen);

/*
 * About to open nopen names directly under the root: an object store
 * lists the root first (one request per page of up to 1,000 names, each
 * with its size and ETag), so that opening a listed name costs no HEAD
 * and fixes the identity the listing gave.  Only worth it while a page
 * saves more than one HEAD: nothing for nopen < 2, and the listing stops
 * after nopen / 2 pages (the names of those pages are kept).  A listing
 * the server refuses (no s3:ListBucket) or that fails is forgotten: each
 * open then HEADs as before.  A local store does nothing.  Thread-safe.
 */
void ckpt_store_list_ahead(struct ckpt_store *s, uint32_t nopen);

/* The name file id was opened with; borrowed from s. */
const char *ckpt_store_name(const struct ckpt_store *s, uint32_t id);

/* One byte range to read: len bytes of file id at off into dst. */
struct ckpt_store_range {
	uint32_t id;
	uint64_t off;
	uint64_t len;
	void *dst;
};

/*
 * Read every range of r[0..n) exactly.  The ranges may come in any order
 * and may overlap in the file (not in dst); the store may merge ranges a
 * small gap apart, split large ones, and run them concurrently.  Returns
 * 0, or -EIO (-ENOMEM, -EINTR when cancelled) with ckpt_last_error()
 * naming the file, the range and the reason: the file is shorter than
 * asked, was replaced or deleted since it was opened, or the server kept
 * failing after the retries.  dst bytes of a failed call are unspecified.
 * Thread-safe.
 */
int ckpt_store_read(struct ckpt_store *s, const struct ckpt_store_range *r,
		    size_t n);

/* ckpt_store_read(), where each of r[first_join..n) also comes in one
 * request with a range of its file that starts at most join bytes after
 * its end (an object store; a local store reads as ckpt_store_read()):
 * a zip local header read with its record's bytes.  Same returns. */
int ckpt_store_read_joined(struct ckpt_store *s,
			   const struct ckpt_store_range *r, size_t n,
			   size_t first_join, uint32_t join);

/* One range: ckpt_store_read() of {id, off, len, dst}. */
int ckpt_store_pread(struct ckpt_store *s, uint32_t id, void *dst,
		     size_t len, uint64_t off);

/*
 * Read all of file name (at most max bytes: a longer one is -EFBIG,
 * "more than the MAX-byte metadata limit") into *buf (caller frees with
 * free()), its length into *len and its identity into *info (may be
 * NULL).  Returns 0 or -errno with err naming it.
 */
int ckpt_store_read_file(struct ckpt_store *s, const char *name, size_t max,
			 uint8_t **buf, size_t *len,
			 struct ckpt_store_file_info *info, char *err,
			 size_t errlen);

/*
 * The same for a file the user named on this machine, wherever it is
 * (`-o index=FILE`, `--index FILE`): read through a local store rooted at
 * its directory, symlinks followed, even when the checkpoint itself is
 * remote.  Messages name path as given.
 */
int ckpt_store_read_local(const char *path, size_t max, uint8_t **buf,
			  size_t *len, struct ckpt_store_file_info *info,
			  char *err, size_t errlen);

/* A hint that [off, off + len) of file id will be read soon (local:
 * POSIX_FADV_WILLNEED).  Errors are ignored.  Thread-safe. */
void ckpt_store_willneed(struct ckpt_store *s, uint32_t id, uint64_t off,
			 uint64_t len);

/*
 * For shutdown (a daemon told to stop while reads wait on a server that
 * does not answer): every read of s in progress ends as soon as it can
 * with -EINTR, and so does every later one.  A local store's reads are
 * left alone (a pread is not interruptible; it ends by itself).
 * Thread-safe, async-signal-unsafe; s must still be freed with
 * ckpt_store_free().
 */
void ckpt_store_cancel(struct ckpt_store *s);

/* What a store has done so far (monotonic counters). */
struct ckpt_store_stats {
	uint64_t bytes_fetched;	/* from the device or the server, gaps and
				 * retries included */
	uint64_t bytes_delivered;	/* into callers' buffers */
	uint64_t requests;	/* preads, or HTTP requests */
	uint64_t retries;	/* HTTP requests sent again */
	uint64_t connects;	/* new connections made */
	/* HTTP requests by kind, retries included (0 for a local store):
	 * gets + heads + lists == requests */
	uint64_t gets;		/* GETs of objects */
	uint64_t heads;
	uint64_t lists;		/* GETs of listings */
};

void ckpt_store_stats(const struct ckpt_store *s,
		      struct ckpt_store_stats *out);

#endif
