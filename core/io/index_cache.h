/* SPDX-License-Identifier: MIT */
/*
 * The node-local index cache (ckpt_open_opts.index_cache): a directory of
 * this user's own, holding the native index images of torch checkpoints
 * as <hex>.ckptfs-index files named by a key of the checkpoint's root and
 * .metadata version, written atomically, bounded in count, with a
 * <hex>.lock file per key so that the processes of a node index a
 * checkpoint once; beside each image, the checkpoint parsed from it
 * (<hex>.ckptfs-parsed), which the node's next opens take instead of
 * parsing the image again.  What a cached image is worth is decided
 * above (the index's own stamp check); here only files, locks and
 * trust.
 */
#ifndef CKPT_INDEX_CACHE_H
#define CKPT_INDEX_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define CKPT_INDEX_CACHE_KEY_HEX 33	/* 32 hex digits and a NUL */

/* The key of a checkpoint: xxh3-128 of root (its canonical name) and
 * version (of its .metadata), as 32 hex digits into hex. */
void ckpt_index_cache_key(const char *root, const char *version,
			  char hex[CKPT_INDEX_CACHE_KEY_HEX]);

struct ckpt_index_beat;

/* An open cache directory. */
struct ckpt_index_cache {
	const char *dir;	/* as given; borrowed */
	int dfd;		/* the directory, O_RDONLY|O_DIRECTORY */
	int lock_fd;		/* the key's lock file while held, else -1 */
	struct ckpt_index_beat *beat;	/* the holder's heartbeat, or NULL */
};

/*
 * Open dir as a cache (created 0700 when missing, its parents too):
 * refused with -EPERM when it is not a directory owned by the euid, or
 * writable by group or others (a symlink is not followed).  Returns 0
 * and fills *c (release with ckpt_index_cache_close()), or -errno with
 * err naming dir and why it is not used.
 */
int ckpt_index_cache_open(const char *dir, struct ckpt_index_cache *c,
			  char *err, size_t errlen);

/* Unlock if locked; c stays open.  Accepts an unlocked *c. */
void ckpt_index_cache_unlock(struct ckpt_index_cache *c);

/* Unlock if locked, close.  Accepts a zeroed or closed *c once opened. */
void ckpt_index_cache_close(struct ckpt_index_cache *c);

/* Remove hex's lock file, which c holds (ckpt_index_cache_lock()), when
 * no image is stored for hex after all (indexing failed, or the write):
 * otherwise every checkpoint that fails to index would leave one behind,
 * beyond the bound on images.  A process still waiting on the removed
 * file only indexes once more.  Best effort. */
void ckpt_index_cache_drop_lock(const struct ckpt_index_cache *c,
				const char *hex);

/*
 * Read hex's cached image (at most max bytes) into *buf (caller frees
 * with free()) and *len.  The file must be a regular file owned by the
 * euid and not writable by group or others (-EPERM), opened without
 * following a symlink.  Returns 0, -ENOENT when there is none, or -errno
 * with err naming the file and the problem.
 */
int ckpt_index_cache_read(const struct ckpt_index_cache *c, const char *hex,
			  size_t max, uint8_t **buf, size_t *len, char *err,
			  size_t errlen);

/* ckpt_index_cache_read() of the first max bytes at most of hex's image
 * (its head: what its stamp needs). */
int ckpt_index_cache_read_head(const struct ckpt_index_cache *c,
			       const char *hex, size_t max, uint8_t **buf,
			       size_t *len, char *err, size_t errlen);

/* Whether c holds an image file of key hex (not whether it is good). */
bool ckpt_index_cache_has_image(const struct ckpt_index_cache *c,
				const char *hex);

/*
 * Map hex's parsed form (<hex>.ckptfs-parsed, model/meta_parsed.h),
 * checked as ckpt_index_cache_read() checks an image, privately
 * (MAP_PRIVATE, writable: a write is the process's own): the node's
 * processes that take it share its pages in the page cache rather than
 * each filling memory of its own.  The cache replaces a file only by
 * rename, so a mapping stays as it was checked; one written over in
 * place by hand while mapped changes under it (its pages not yet
 * written to), and one truncated faults the process, as for any mapped
 * file.  Returns 0 with
 * *map (caller unmaps with munmap(*map, *len)) and *len, or -errno with
 * err (-ENOENT: none).
 */
int ckpt_index_cache_map_parsed(const struct ckpt_index_cache *c,
				const char *hex, size_t max, uint8_t **map,
				size_t *len, char *err, size_t errlen);

/*
 * Store iov[0..n) (n at most 32) as hex's parsed form: written to a new
 * temp file in the directory and renamed into place, not fsynced (one
 * torn by a crash fails its own hash, and the image is parsed instead).
 * Removed with hex's image when that is pruned.  Returns 0 or -errno with
 * err (nothing left behind).
 */
int ckpt_index_cache_write_parsed(const struct ckpt_index_cache *c,
				  const char *hex, const struct iovec *iov,
				  int n, char *err, size_t errlen);

/* How long a process waits for another that indexes the same checkpoint
 * without a sign of life from it (ms); the environment's
 * CKPTFS_INDEX_CACHE_WAIT_MS, when a number, replaces it. */
#define CKPT_INDEX_CACHE_WAIT_MS 120000u
/* How often the waiters poll the lock (ms): a holder that dies releases
 * its flock, and the next poll takes it. */
#define CKPT_INDEX_CACHE_POLL_MS 5u

/*
 * Take hex's lock (flock(LOCK_EX) on <hex>.lock, created 0600), waiting
 * for the process that holds it.  The holder's heartbeat (a thread that
 * sets the lock file's mtime every wait limit / 4, at most every second,
 * while the lock is held) extends the wait: only after the wait limit
 * (CKPT_INDEX_CACHE_WAIT_MS) with no heartbeat does it give up
 * (-ETIMEDOUT: the caller indexes without the cache).  Polls every
 * CKPT_INDEX_CACHE_POLL_MS at most, and gives up at once when the calling
 * thread's cancel flag is set (-ECANCELED).  Returns 0 or -errno with
 * err; held (and beating) until ckpt_index_cache_close().
 */
int ckpt_index_cache_lock(struct ckpt_index_cache *c, const char *hex,
			  char *err, size_t errlen);

/* The same, giving up after max_ms (0: no bound but the rules above)
 * with -ETIMEDOUT: for a write that may be skipped, such as a close
 * storing what it located, which must not hold up a shutdown. */
int ckpt_index_cache_lock_for(struct ckpt_index_cache *c, const char *hex,
			      unsigned max_ms, char *err, size_t errlen);

/* How long a close waits to store what it located (ms). */
#define CKPT_INDEX_CACHE_MERGE_WAIT_MS 2000u

/* Mark hex's image used now (its mtime, by which the oldest are
 * removed): best effort. */
void ckpt_index_cache_touch(const struct ckpt_index_cache *c,
			    const char *hex);

/*
 * Store img as hex's cached image: written to a new temp file made in
 * the directory opened (through c->dfd, never by path) and renamed over
 * <hex>.ckptfs-index, so a reader sees the old file or the new one
 * whole.  Not fsynced: one torn by a crash fails its stamp or its hash
 * at the next open, which warns and writes it again (a cache is not
 * worth a flush on the first open's way).  Then the oldest image files
 * (by mtime) beyond CKPT_INDEX_CACHE_MAX are removed with their locks.
 * Returns 0 or -errno with err (the cache is left as it was).
 */
int ckpt_index_cache_write(const struct ckpt_index_cache *c, const char *hex,
			   const uint8_t *img, size_t len, char *err,
			   size_t errlen);

/*
 * ckpt_index_cache_write() in two steps, for a caller that must free or
 * spend the image before it knows whether to store it: stage writes the
 * image, iov[0..n) one after another (n at most 32), to a new temp file
 * (0, or -errno with err and nothing left); then exactly
 * one of commit (renames it over hex's image and prunes, as the write
 * does; on failure -errno with err, and the temp file removed) or
 * unstage (removes it) ends *sg.  Meanwhile map_staged maps the staged
 * image read-only and private (*map, the caller's: munmap(*map, len)),
 * so it can be read without a copy in memory; 0, or -errno with err.
 * The mapping outlives the end of *sg.
 */
struct ckpt_index_staged {
	int fd;			/* the temp file, -1 once ended */
	char tmp[64];		/* its name in the directory */
	char name[64];		/* the image's name there */
};

int ckpt_index_cache_stage(const struct ckpt_index_cache *c,
			   const char *hex, const struct iovec *iov, int n,
			   struct ckpt_index_staged *sg, char *err,
			   size_t errlen);
int ckpt_index_cache_map_staged(const struct ckpt_index_cache *c,
				const struct ckpt_index_staged *sg, size_t len,
				const uint8_t **map, char *err, size_t errlen);
int ckpt_index_cache_commit(const struct ckpt_index_cache *c,
			    struct ckpt_index_staged *sg, char *err,
			    size_t errlen);
void ckpt_index_cache_unstage(const struct ckpt_index_cache *c,
			      struct ckpt_index_staged *sg);

#endif
