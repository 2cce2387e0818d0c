/* SPDX-License-Identifier: MIT */
/*
 * The local-directory store: names are opened beneath the root with
 * openat2(RESOLVE_BENEATH) (unless follow_symlinks), first O_PATH and
 * checked with fstat, so that nothing but a regular file is ever opened
 * for reading; then read with pread through a bounded LRU cache of open
 * fds.  Never mmap'ed: a file truncated under us gives EIO, not SIGBUS.
 *
 * A file's identity is (st_dev, st_ino, st_ctim) when first opened.  While
 * its fd is open the store keeps reading that file even if it is deleted
 * or replaced; when the cache has to reopen it and finds another file (or
 * none), reads fail with EIO.  Bytes of two different files are never
 * mixed.
 */
#include "io/store_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/errbuf.h"
#include "common/grow.h"
#include "common/lru.h"
#include "common/strtab.h"

#define FD_CAP_MAX 4096
#define FD_RESERVED 32	/* for /dev/fuse, stdio, the caller's own, ... */
#define PAGE_BITS 10	/* file records are allocated 1024 at a time */
#define PAGE_FILES (1u << PAGE_BITS)
#define NPAGES 65536	/* at most 64 Mi files */
#define DIRECT_MIN ((uint64_t)256 << 10)	/* smaller: one request anyway */
#define DIRECT_ALIGN 4096	/* offsets and lengths of O_DIRECT reads */
#define BOUNCE ((size_t)4 << 20)	/* per thread, on huge pages */
#define HUGE ((size_t)2 << 20)

/* One file opened by name.  All but fd and refs are fixed at open. */
struct lfile {
	char *name;		/* owned */
	uint64_t size;
	uint64_t dev, ino;	/* its identity ... */
	int64_t ctime_sec, ctime_nsec;	/* ... with its ctime: an inode
					 * number may be reused */
	int64_t mtime_sec, mtime_nsec;
	int fd;			/* -1 when not open; guarded by ls->lock */
	int dfd;		/* fd reopened O_DIRECT, -1 when not; closed
				 * with fd; guarded by lock */
	bool no_direct;		/* O_DIRECT refused here; guarded by lock */
	uint32_t step;		/* bytes per O_DIRECT read; guarded by lock */
	uint32_t refs;		/* readers using fd now; guarded by lock */
};

struct local_store {
	struct ckpt_store base;
	int dirfd;
	char *real_root;	/* the root's resolved path, for kernels
				 * without openat2; NULL without /proc */
	bool follow;		/* set before reads start */
	bool direct;		/* direct_io; set before reads start */
	pthread_mutex_t lock;	/* guards everything below */
	uint32_t cap;		/* most files open at once */
	uint32_t nopen;
	uint32_t nfiles;
	struct lfile *pages[NPAGES];	/* records never move */
	struct ckpt_lru lru;	/* the open files */
	struct ckpt_lru_link *links;	/* [nfiles]: file i's LRU link */
	size_t cap_links;
	struct ckpt_strtab by_name;	/* name -> id */
	size_t tab_items;	/* by_name is sized for this many */
};

static struct local_store *local_of(struct ckpt_store *s)
{
	return (struct local_store *)s;
}

static struct lfile *file_at(const struct local_store *ls, uint32_t id)
{
	return &ls->pages[id >> PAGE_BITS][id & (PAGE_FILES - 1)];
}

/* How many files may stay open: with raise, the soft limit is raised to
 * the hard one and all of it but a reserve may be used; a library caller
 * that did not ask keeps half of its own limit for itself. */
static uint32_t choose_cap(bool raise)
{
	struct rlimit rl;
	rlim_t n;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return 64;
	if (raise && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
			getrlimit(RLIMIT_NOFILE, &rl);
	}
	n = rl.rlim_cur > FD_RESERVED ? rl.rlim_cur - FD_RESERVED : 0;
	if (!raise)
		n /= 2;
	if (n > FD_CAP_MAX)
		return FD_CAP_MAX;
	return n > 4 ? (uint32_t)n : 4;
}

/*
 * Every read asks for exactly the bytes a view needs, in runs of up to a
 * few MiB: the kernel's readahead would only add bytes nobody asked for
 * (2x on a cold cache for a rank's rows), so it is off.
 */
static void no_readahead(int fd)
{
	posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
}

/* The path fd refers to, from /proc (NULL when that cannot say). */
static char *fd_path(int fd)
{
	char proc[64], *buf = malloc(PATH_MAX + 1);
	ssize_t n;

	if (!buf)
		return NULL;
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	n = readlink(proc, buf, PATH_MAX);
	if (n <= 0 || n >= PATH_MAX || buf[0] != '/') {
		free(buf);
		return NULL;
	}
	buf[n] = '\0';
	return buf;
}

/* Without openat2: does fd lie beneath the root?  (The path the kernel
 * resolved, so no component of it can have been swapped since.) */
static bool is_beneath(const struct local_store *ls, int fd)
{
	char *p = fd_path(fd);
	size_t n = strlen(ls->real_root);
	bool ok;

	if (!p)
		return false;
	ok = !strncmp(p, ls->real_root, n) &&
	     (p[n] == '/' || (n == 1 && p[1]));
	free(p);
	return ok;
}

/* openat2 beneath the root (a path or a symlink in it leading outside
 * fails with EXDEV), or anywhere with follow.  Before Linux 5.6, an O_PATH
 * open follows symlinks and then checks where it landed; other opens
 * refuse every symlink (O_NOFOLLOW).  Returns an fd or -1 with errno. */
static int open_beneath(const struct local_store *ls, const char *name,
			int flags, bool follow)
{
	/* openat2 refuses O_PATH with any flag but a few */
	int extra = flags & O_PATH ? O_CLOEXEC : O_CLOEXEC | O_NOCTTY;
	struct open_how how = {
		.flags = (uint64_t)(flags | extra),
		.resolve = follow ? RESOLVE_NO_MAGICLINKS :
			   RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
	};
	long fd;

	fd = syscall(SYS_openat2, ls->dirfd, name, &how, sizeof(how));
	if (fd >= 0 || errno != ENOSYS)
		return (int)fd;
	if (follow)
		return openat(ls->dirfd, name, flags | extra);
	if (!(flags & O_PATH) || !ls->real_root)
		return openat(ls->dirfd, name, flags | extra | O_NOFOLLOW);
	fd = openat(ls->dirfd, name, flags | extra);
	if (fd >= 0 && !is_beneath(ls, (int)fd)) {
		close((int)fd);
		errno = EXDEV;
		return -1;
	}
	return (int)fd;
}

/*
 * Open name for reading, never opening anything but a regular file: an
 * O_PATH fd is checked with fstat first, and only then is that very inode
 * opened for reading (through /proc/self/fd, or again beneath the root
 * with O_NONBLOCK and the same dev/ino when /proc is not mounted).
 * Returns the fd with *st, or -errno: -EXDEV leads outside, -EINVAL not a
 * regular file.
 */
static int open_regular(const struct local_store *ls, const char *name,
			struct stat *st)
{
	char proc[64];
	struct stat st2;
	int pfd, fd, fl, e;

	pfd = open_beneath(ls, name, O_PATH, ls->follow);
	if (pfd < 0) {
		e = errno;
		return e == ELOOP && !ls->follow ? -EXDEV : -e;
	}
	if (fstat(pfd, st) != 0) {
		e = errno;
		close(pfd);
		return -e;
	}
	if (!S_ISREG(st->st_mode)) {
		close(pfd);
		/* O_NOFOLLOW's fallback opens a symlink itself */
		return S_ISLNK(st->st_mode) && !ls->follow ? -EXDEV : -EINVAL;
	}
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", pfd);
	fd = open(proc, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0 && (errno == ENOENT || errno == ENOTDIR))
		fd = open_beneath(ls, name, O_RDONLY | O_NONBLOCK,
				  ls->follow);
	e = errno;
	close(pfd);
	if (fd < 0)
		return e == ELOOP && !ls->follow ? -EXDEV : -e;
	if (fstat(fd, &st2) != 0 || st2.st_dev != st->st_dev ||
	    st2.st_ino != st->st_ino || !S_ISREG(st2.st_mode)) {
		close(fd);
		return -ESTALE;	/* swapped between the two opens */
	}
	*st = st2;
	fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
	no_readahead(fd);
	return fd;
}

/* The LRU list of open files, threaded through ls->links.  Lock held. */
static void lru_unlink(struct local_store *ls, uint32_t id)
{
	ckpt_lru_unlink(&ls->lru, ls->links, sizeof(*ls->links), id);
}

static void lru_push(struct local_store *ls, uint32_t id)
{
	ckpt_lru_push(&ls->lru, ls->links, sizeof(*ls->links), id);
}

/* Close least recently used files nobody is reading until fewer than
 * limit are open.  Lock held. */
static void evict(struct local_store *ls, uint32_t limit)
{
	uint32_t id = ls->lru.tail;

	while (ls->nopen >= limit && id != CKPT_NONE) {
		struct lfile *f = file_at(ls, id);
		uint32_t prev = ls->links[id].prev;

		if (f->refs == 0) {
			lru_unlink(ls, id);
			close(f->fd);
			f->fd = -1;
			if (f->dfd >= 0)
				close(f->dfd);
			f->dfd = -1;
			ls->nopen--;
		}
		id = prev;
	}
}

/* Keep fd as file id's open fd, making room first.  Lock held. */
static void keep_open(struct local_store *ls, uint32_t id, int fd)
{
	struct lfile *f = file_at(ls, id);

	evict(ls, ls->cap);
	f->fd = fd;
	ls->nopen++;
	lru_push(ls, id);
}

/* Reopen file id and check it is still the file first opened.  Lock
 * held.  Returns the fd or -errno (-ESTALE: another file). */
static int reopen(struct local_store *ls, uint32_t id)
{
	struct lfile *f = file_at(ls, id);
	struct stat st;
	int fd;

	fd = open_regular(ls, f->name, &st);
	if (fd == -EINVAL)
		return -ESTALE;	/* now something else than a file */
	if (fd < 0)
		return fd;
	if ((uint64_t)st.st_dev != f->dev || (uint64_t)st.st_ino != f->ino ||
	    st.st_ctim.tv_sec != f->ctime_sec ||
	    st.st_ctim.tv_nsec != f->ctime_nsec) {
		close(fd);
		return -ESTALE;
	}
	return fd;
}

/* File id's fd, with a reference held; or -errno (-ESTALE, ...). */
static int acquire(struct local_store *ls, uint32_t id)
{
	struct lfile *f;
	int fd;

	pthread_mutex_lock(&ls->lock);
	if (id >= ls->nfiles) {
		pthread_mutex_unlock(&ls->lock);
		return -EBADF;
	}
	f = file_at(ls, id);
	if (f->fd < 0) {
		fd = reopen(ls, id);
		if (fd < 0) {
			pthread_mutex_unlock(&ls->lock);
			return fd;
		}
		keep_open(ls, id, fd);
	} else if (ls->lru.head != id) {
		lru_unlink(ls, id);
		lru_push(ls, id);
	}
	f->refs++;
	fd = f->fd;
	pthread_mutex_unlock(&ls->lock);
	return fd;
}

static void release(struct local_store *ls, uint32_t id)
{
	pthread_mutex_lock(&ls->lock);
	file_at(ls, id)->refs--;
	if (ls->nopen > ls->cap)
		evict(ls, ls->cap + 1);
	pthread_mutex_unlock(&ls->lock);
}

static void name_key(const void *ctx, uint32_t idx, uint64_t *seed,
		     const char **s, size_t *len)
{
	const struct lfile *f = file_at(ctx, idx);

	*seed = 0;
	*s = f->name;
	*len = strlen(f->name);
}

/* Room for one more file: its page, its LRU link, its slot in by_name.
 * Lock held.  Returns 0 or -ENOMEM / -EMFILE. */
static int make_room(struct local_store *ls)
{
	uint32_t id = ls->nfiles, i;
	struct ckpt_strtab t;

	if ((id >> PAGE_BITS) >= NPAGES)
		return -EMFILE;
	if (!ls->pages[id >> PAGE_BITS]) {
		ls->pages[id >> PAGE_BITS] = calloc(PAGE_FILES,
						    sizeof(struct lfile));
		if (!ls->pages[id >> PAGE_BITS])
			return -ENOMEM;
	}
	if (ckpt_grow((void **)&ls->links, &ls->cap_links, (size_t)id + 1,
		      sizeof(*ls->links)))
		return -ENOMEM;
	if ((size_t)id + 1 <= ls->tab_items)
		return 0;
	if (ckpt_strtab_init(&t, ls->tab_items * 2, name_key, ls))
		return -ENOMEM;
	for (i = 0; i < id; i++)
		ckpt_strtab_insert(&t, i);
	ckpt_strtab_destroy(&ls->by_name);
	ls->by_name = t;
	ls->tab_items *= 2;
	return 0;
}

static void fill_info(const struct lfile *f, struct ckpt_store_file_info *info)
{
	if (!info)
		return;
	memset(info, 0, sizeof(*info));
	info->size = f->size;
	info->mtime_sec = f->mtime_sec;
	info->mtime_nsec = f->mtime_nsec;
	/* Size and mtime, which a copy keeps (cp -a, rsync -a): an index's
	 * stamp built from it survives the checkpoint being moved.  Reopens
	 * check the stricter dev/ino/ctime identity kept in f. */
	snprintf(info->version, sizeof(info->version),
		 "%" PRIu64 "@%" PRId64 ".%09" PRId64, f->size, f->mtime_sec,
		 f->mtime_nsec);
	snprintf(info->ident, sizeof(info->ident),
		 "%" PRIx64 ":%" PRIx64 ":%" PRId64 ".%09" PRId64 ":%" PRIu64
		 "@%" PRId64 ".%09" PRId64, f->dev, f->ino, f->ctime_sec,
		 f->ctime_nsec, f->size, f->mtime_sec, f->mtime_nsec);
}

static int open_error(const struct local_store *ls, const char *name, int rc,
		      char *err, size_t errlen)
{
	const char *root = ls->base.root;

	if (rc == -EXDEV)
		return ckpt_errf(err, errlen, rc, "%s/%s: " CKPT_STORE_OUTSIDE,
				 root, name);
	if (rc == -EINVAL)
		return ckpt_errf(err, errlen, rc, "%s/%s: not a regular file",
				 root, name);
	if (rc == -ESTALE)
		return ckpt_errf(err, errlen, -EIO,
				 "%s/%s: replaced while being opened", root,
				 name);
	return ckpt_errf(err, errlen, rc, "%s/%s: cannot open: %s", root, name,
			 strerror(-rc));
}

static int local_open(struct ckpt_store *s, const char *name, uint32_t *id,
		      struct ckpt_store_file_info *info, char *err,
		      size_t errlen)
{
	struct local_store *ls = local_of(s);
	struct lfile *f;
	struct stat st;
	uint32_t i;
	char *copy;
	int fd, rc;

	pthread_mutex_lock(&ls->lock);
	i = ckpt_strtab_find(&ls->by_name, 0, name, strlen(name));
	if (i != UINT32_MAX) {
		fill_info(file_at(ls, i), info);
		pthread_mutex_unlock(&ls->lock);
		*id = i;
		return 0;
	}
	pthread_mutex_unlock(&ls->lock);

	fd = open_regular(ls, name, &st);
	if (fd < 0)
		return open_error(ls, name, fd, err, errlen);
	copy = strdup(name);
	pthread_mutex_lock(&ls->lock);
	/* Another thread may have opened it meanwhile: keep its record. */
	i = ckpt_strtab_find(&ls->by_name, 0, name, strlen(name));
	if (i != UINT32_MAX) {
		fill_info(file_at(ls, i), info);
		pthread_mutex_unlock(&ls->lock);
		close(fd);
		free(copy);
		*id = i;
		return 0;
	}
	rc = copy ? make_room(ls) : -ENOMEM;
	if (rc) {
		pthread_mutex_unlock(&ls->lock);
		close(fd);
		free(copy);
		return ckpt_errf(err, errlen, rc, "%s/%s: %s", s->root, name,
				 rc == -EMFILE ? "too many files" : "out of memory");
	}
	i = ls->nfiles;
	f = file_at(ls, i);
	f->name = copy;
	f->size = (uint64_t)st.st_size;
	f->dev = (uint64_t)st.st_dev;
	f->ino = (uint64_t)st.st_ino;
	f->ctime_sec = st.st_ctim.tv_sec;
	f->ctime_nsec = st.st_ctim.tv_nsec;
	f->mtime_sec = st.st_mtim.tv_sec;
	f->mtime_nsec = st.st_mtim.tv_nsec;
	f->fd = -1;
	f->dfd = -1;
	ckpt_lru_link_init(&ls->links[i]);
	ls->nfiles++;
	ckpt_strtab_insert(&ls->by_name, i);
	keep_open(ls, i, fd);
	fill_info(f, info);
	pthread_mutex_unlock(&ls->lock);
	*id = i;
	return 0;
}

static const char *local_name(const struct ckpt_store *s, uint32_t id)
{
	struct local_store *ls = (struct local_store *)s;
	const char *name = "?";

	pthread_mutex_lock(&ls->lock);
	if (id < ls->nfiles)
		name = file_at(ls, id)->name;
	pthread_mutex_unlock(&ls->lock);
	return name;
}

#ifndef SYS_cachestat
#define SYS_cachestat 451	/* the same number on every architecture */
#endif

/* cachestat(2)'s argument and answer (Linux 6.5, linux/mman.h). */
struct cs_range {
	uint64_t off, len;
};

struct cs_stat {
	uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted,
		 nr_recently_evicted;
};

/* Set once cachestat(2) turned out missing (an older kernel, a seccomp
 * filter): every hint is then given. */
static atomic_bool no_cachestat;

/* Pages of [off, off + len) of fd in the page cache, in *n; false when
 * the kernel cannot say. */
static bool cached_pages(int fd, uint64_t off, uint64_t len, uint64_t *n)
{
	struct cs_range r = { .off = off, .len = len };
	struct cs_stat cs;

	if (!len || atomic_load_explicit(&no_cachestat, memory_order_relaxed))
		return false;
	if (syscall(SYS_cachestat, fd, &r, &cs, 0) != 0) {
		if (errno == ENOSYS || errno == EPERM)
			atomic_store_explicit(&no_cachestat, true,
					      memory_order_relaxed);
		return false;
	}
	*n = cs.nr_cache;
	return true;
}

/* Whether every page of [off, off + len) of fd is in the page cache
 * (false when the kernel cannot say). */
static bool all_cached(int fd, uint64_t off, uint64_t len)
{
	uint64_t n, page = (uint64_t)sysconf(_SC_PAGESIZE);

	return cached_pages(fd, off, len, &n) &&
	       n >= (off + len - 1) / page - off / page + 1;
}

/* Whether at most a sixteenth of the pages of [off, off + len) of fd are
 * in the page cache (false when the kernel cannot say). */
static bool mostly_uncached(int fd, uint64_t off, uint64_t len)
{
	uint64_t n;

	return cached_pages(fd, off, len, &n) &&
	       n <= len / DIRECT_ALIGN / 16;
}

/*
 * Whether a range is read with O_DIRECT (direct_io): large enough to be
 * more than one request, and hardly any of it in the page cache.  A few
 * cached pages are allowed, read again from the device: the zip header
 * and central directory read at open share pages with a record's first
 * and last bytes.  Correct either way: an O_DIRECT read writes dirty
 * pages of its range back first, and clean ones hold what the disk does.
 */
static bool wants_direct(const struct local_store *ls, int fd, uint64_t off,
			 uint64_t len)
{
	return ls->direct && len >= DIRECT_MIN &&
	       mostly_uncached(fd, off, len);
}

/*
 * The largest request of the block device holding st (its queue's
 * max_sectors_kb; a partition's is its disk's), in bytes, or 1 MiB when
 * sysfs cannot say (no block device: NFS, overlayfs, ...), at most
 * half the bounce buffer.  A read of exactly that is one request (a
 * larger one was cut into 1 MiB bios on a loop device).
 */
static uint32_t device_step(const struct stat *st)
{
	char path[96];
	unsigned kb = 0;
	int i;

	for (i = 0; i < 2 && !kb; i++) {
		FILE *fh;

		snprintf(path, sizeof(path), "/sys/dev/block/%u:%u/%squeue/max_sectors_kb",
			 major(st->st_dev), minor(st->st_dev),
			 i ? "../" : "");
		fh = fopen(path, "re");
		if (!fh)
			continue;
		if (fscanf(fh, "%u", &kb) != 1)
			kb = 0;
		fclose(fh);
	}
	if (kb < 64)
		return 1u << 20;
	if ((size_t)kb << 10 > BOUNCE / 2)
		return (uint32_t)(BOUNCE / 2);
	return (uint32_t)(kb << 10) & ~(uint32_t)(DIRECT_ALIGN - 1);
}

/* File id's O_DIRECT fd (fd is its open fd, a reference held), opened
 * on first use; -1 where O_DIRECT is refused (then never tried again). */
static int direct_fd(struct local_store *ls, uint32_t id, int fd,
		     uint32_t *step)
{
	struct lfile *f = file_at(ls, id);
	struct stat st;
	char proc[64];
	int dfd;

	pthread_mutex_lock(&ls->lock);
	if (f->dfd < 0 && !f->no_direct) {
		snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
		dfd = open(proc, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_DIRECT);
		if (dfd >= 0 && (fstat(dfd, &st) != 0 ||
				 (uint64_t)st.st_dev != f->dev ||
				 (uint64_t)st.st_ino != f->ino)) {
			close(dfd);
			dfd = -1;
		}
		if (dfd < 0) {
			f->no_direct = true;
		} else {
			f->dfd = dfd;
			f->step = device_step(&st);
		}
	}
	dfd = f->dfd;
	*step = f->step;
	pthread_mutex_unlock(&ls->lock);
	return dfd;
}

static pthread_key_t bounce_key;
static pthread_once_t bounce_once = PTHREAD_ONCE_INIT;
static bool bounce_ok;

static void bounce_free(void *p)
{
	munmap(p, BOUNCE);
}

static void bounce_init(void)
{
	bounce_ok = pthread_key_create(&bounce_key, bounce_free) == 0;
}

/*
 * This thread's bounce buffer: BOUNCE bytes, 2 MiB-aligned, asked to be
 * on huge pages, so that a request's memory is a few long segments
 * instead of one 4 KiB page each.  Our own memory, freed at thread
 * exit.  NULL when out of memory.
 */
static void *bounce(void)
{
	char *p, *a;

	pthread_once(&bounce_once, bounce_init);
	if (!bounce_ok)
		return NULL;
	p = pthread_getspecific(bounce_key);
	if (p)
		return p;
	p = mmap(NULL, BOUNCE + HUGE, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	a = (char *)(((uintptr_t)p + HUGE - 1) & ~(uintptr_t)(HUGE - 1));
	if (a > p)
		munmap(p, (size_t)(a - p));
	munmap(a + BOUNCE, (size_t)(p + HUGE - a));
	madvise(a, BOUNCE, MADV_HUGEPAGE);
	if (pthread_setspecific(bounce_key, a) != 0) {
		munmap(a, BOUNCE);
		return NULL;
	}
	return a;
}

/*
 * Read r with O_DIRECT: DIRECT_ALIGN-aligned reads of step bytes (one
 * device request each) into this thread's bounce buffer, copied out.
 * Returns 0, or -EAGAIN when it could not (O_DIRECT refused, a short or
 * failed read): the caller then reads r through the page cache, which
 * gives the reason of a real failure.
 */
static int read_direct(struct local_store *ls, int fd,
		       const struct ckpt_store_range *r)
{
	uint64_t end = r->off + r->len, pos, lo, hi;
	uint32_t step;
	char *buf;
	int dfd;

	dfd = direct_fd(ls, r->id, fd, &step);
	buf = dfd >= 0 ? bounce() : NULL;
	if (!buf)
		return -EAGAIN;
	pos = r->off & ~(uint64_t)(DIRECT_ALIGN - 1);
	while (pos < end) {
		size_t want = (size_t)((end - pos + DIRECT_ALIGN - 1) &
				       ~(uint64_t)(DIRECT_ALIGN - 1));
		ssize_t n;

		if (want > step)
			want = step;
		n = pread(dfd, buf, want, (off_t)pos);
		if (n < 0 && errno == EINTR)
			continue;
		atomic_fetch_add(&ls->base.requests, 1);
		if (n <= 0)
			return -EAGAIN;
		atomic_fetch_add(&ls->base.bytes_fetched, (uint64_t)n);
		lo = pos > r->off ? pos : r->off;
		hi = pos + (uint64_t)n < end ? pos + (uint64_t)n : end;
		if (hi > lo)
			memcpy((char *)r->dst + (lo - r->off), buf + (lo - pos),
			       (size_t)(hi - lo));
		if ((size_t)n < want && hi < end)
			return -EAGAIN;	/* the file ends early */
		pos += (uint64_t)n;
	}
	atomic_fetch_add(&ls->base.bytes_delivered, r->len);
	return 0;
}

/* A pread of file f's [off, off + len) that gave n (< 0: errno) after
 * got bytes: -EIO, with the last error naming the file and offset. */
static int read_failed(const struct local_store *ls, const struct lfile *f,
		       uint64_t off, uint64_t len, uint64_t got, ssize_t n)
{
	if (n < 0) {
		ckpt_set_last_error("%s/%s: offset %" PRIu64 ": read error: %s",
				    ls->base.root, f->name, off + got,
				    strerror(errno));
		ckpt_last_error_file(ls->base.root, f->name, off + got);
	} else {
		ckpt_set_last_error("%s/%s: offset %" PRIu64 ": file ends %" PRIu64 " bytes into a %" PRIu64 "-byte read (truncated?)",
				    ls->base.root, f->name, off, got, len);
		ckpt_last_error_file(ls->base.root, f->name, off);
	}
	return -EIO;
}

/* pread exactly r->len bytes of fd; -EIO with the reason in the last
 * error. */
static int read_range(struct local_store *ls, int fd,
		      const struct ckpt_store_range *r)
{
	const struct lfile *f = file_at(ls, r->id);
	uint64_t got = 0;
	ssize_t n;

	if (wants_direct(ls, fd, r->off, r->len) &&
	    read_direct(ls, fd, r) == 0)
		return 0;
	while (got < r->len) {
		size_t want = r->len - got > ((size_t)1 << 30) ?
			      (size_t)1 << 30 : (size_t)(r->len - got);

		n = pread(fd, (char *)r->dst + got, want,
			  (off_t)(r->off + got));
		if (n < 0 && errno == EINTR)
			continue;
		atomic_fetch_add(&ls->base.requests, 1);
		if (n <= 0)
			return read_failed(ls, f, r->off, r->len, got, n);
		atomic_fetch_add(&ls->base.bytes_fetched, (uint64_t)n);
		got += (uint64_t)n;
	}
	atomic_fetch_add(&ls->base.bytes_delivered, r->len);
	return 0;
}

/* The most ranges, and bytes, read_adjacent() reads by one preadv. */
#define ADJACENT_MAX 64
#define ADJACENT_BYTES ((uint64_t)1 << 30)

/*
 * The ranges r[0..*k) of one file that follow one another exactly, each
 * starting where the one before it ends (a joined read: the side buffer
 * of a record's head, its middle fetched into its destination, the side
 * buffer of its tail), read by preadv(2) into their own buffers: one
 * request for them all, and no copy.  *k: how many it read (2 or more),
 * 0 when r[0] starts no such run, or a cold run goes to O_DIRECT (then
 * the caller reads it).  Returns 0 or -EIO with the reason.
 */
static int read_adjacent(struct local_store *ls, int fd,
			 const struct ckpt_store_range *r, size_t n,
			 size_t *k)
{
	const struct lfile *f = file_at(ls, r[0].id);
	struct iovec iov[ADJACENT_MAX];
	uint64_t total = r[0].len, got = 0;
	size_t i, j, first = 0;
	ssize_t m;

	*k = 0;
	if (total > ADJACENT_BYTES)
		return 0;
	for (i = 1; i < n && i < ADJACENT_MAX && r[i].id == r[0].id &&
		    r[i].off == r[i - 1].off + r[i - 1].len &&
		    r[i].len <= ADJACENT_BYTES - total; i++)
		total += r[i].len;
	if (i < 2 || wants_direct(ls, fd, r[0].off, total))
		return 0;
	for (j = 0; j < i; j++)
		iov[j] = (struct iovec){ r[j].dst, r[j].len };
	while (got < total) {
		m = preadv(fd, iov + first, (int)(i - first),
			   (off_t)(r[0].off + got));
		if (m < 0 && errno == EINTR)
			continue;
		atomic_fetch_add(&ls->base.requests, 1);
		if (m <= 0) {
			*k = i;
			return read_failed(ls, f, r[0].off, total, got, m);
		}
		atomic_fetch_add(&ls->base.bytes_fetched, (uint64_t)m);
		got += (uint64_t)m;
		while (m > 0 && first < i) {	/* past what it filled */
			if ((size_t)m >= iov[first].iov_len) {
				m -= (ssize_t)iov[first].iov_len;
				first++;
			} else {
				iov[first].iov_base =
					(char *)iov[first].iov_base + m;
				iov[first].iov_len -= (size_t)m;
				m = 0;
			}
		}
		while (first < i && !iov[first].iov_len)
			first++;
	}
	atomic_fetch_add(&ls->base.bytes_delivered, total);
	*k = i;
	return 0;
}

/* The most bytes read_overlapping() reads through one buffer. */
#define OVERLAP_MAX ((uint64_t)16 << 20)

/*
 * The ranges r[0..*k) of one file that follow one another, each starting
 * inside or right at the end of those before it (a lazy open's joined
 * reads: each record's range goes a window into its neighbours'), read
 * by one pread of their union into a buffer and copied out, rather than
 * their shared bytes read again.  *k: how many it read (1 or more), 0
 * when r[0] starts no such run (or out of memory): the caller reads it
 * alone.  Returns 0 or read_range()'s error.
 */
static int read_overlapping(struct local_store *ls, int fd,
			    const struct ckpt_store_range *r, size_t n,
			    size_t *k)
{
	struct ckpt_store_range u = r[0];
	uint64_t end = r[0].off + r[0].len, asked = r[0].len;
	size_t i;
	int rc;

	*k = 0;
	if (u.len > OVERLAP_MAX)
		return 0;
	for (i = 1; i < n && r[i].id == u.id && r[i].off >= r[i - 1].off &&
		    r[i].off <= end; i++) {
		uint64_t e = r[i].off + r[i].len;	/* checked by the
							 * caller's file */
		if (e > end) {
			if (e - u.off > OVERLAP_MAX)
				break;
			end = e;
		}
		asked += r[i].len;
	}
	if (i < 2)
		return 0;
	u.len = end - u.off;
	u.dst = malloc((size_t)u.len);
	if (!u.dst)
		return 0;
	rc = read_range(ls, fd, &u);
	if (!rc) {
		size_t j;

		for (j = 0; j < i; j++)
			memcpy(r[j].dst, (char *)u.dst + (r[j].off - u.off),
			       (size_t)r[j].len);
		/* delivered: what was asked, the shared bytes each time */
		atomic_fetch_add(&ls->base.bytes_delivered, asked - u.len);
	}
	free(u.dst);
	*k = i;
	return rc;
}

static int local_read(struct ckpt_store *s, const struct ckpt_store_range *r,
		      size_t n)
{
	struct local_store *ls = local_of(s);
	uint32_t held = CKPT_NONE;
	int fd = -1, rc = 0;
	size_t i, k;

	for (i = 0; i < n && !rc; i++) {
		if (r[i].id != held) {	/* runs of one file share a fd */
			if (held != CKPT_NONE)
				release(ls, held);
			held = CKPT_NONE;
			fd = acquire(ls, r[i].id);
			if (fd < 0) {
				ckpt_set_last_error("%s/%s: cannot open: %s",
						    s->root, local_name(s, r[i].id),
						    fd == -ESTALE ? "replaced since it was validated" :
						    strerror(-fd));
				ckpt_last_error_file(s->root,
						     local_name(s, r[i].id),
						     CKPT_NO_OFFSET);
				return -EIO;
			}
			held = r[i].id;
		}
		rc = read_adjacent(ls, fd, r + i, n - i, &k);
		if (!k)
			rc = read_overlapping(ls, fd, r + i, n - i, &k);
		if (k)
			i += k - 1;
		else
			rc = read_range(ls, fd, &r[i]);
	}
	if (held != CKPT_NONE)
		release(ls, held);
	return rc;
}

/*
 * WILLNEED walks every page of its range even when all are cached, at a
 * tenth of the cost of reading them: on a warm page cache (a resume right
 * after a save, a second load) that was most of what a batch read spent
 * beyond its copies.  cachestat(2) answers the same question 8x cheaper,
 * so the hint is given only for ranges it does not find whole.
 */
static void local_willneed(struct ckpt_store *s, uint32_t id, uint64_t off,
			   uint64_t len)
{
	struct local_store *ls = local_of(s);
	int fd = acquire(ls, id);

	if (fd < 0)
		return;
	/* a range its reader will read with O_DIRECT is left alone: a
	 * hint would put it in the page cache in small requests first */
	if (!all_cached(fd, off, len) && !wants_direct(ls, fd, off, len))
		posix_fadvise(fd, (off_t)off, (off_t)len,
			      POSIX_FADV_WILLNEED);
	release(ls, id);
}

static int local_list(struct ckpt_store *s,
		      int (*fn)(void *ctx, const char *name, uint64_t size),
		      void *ctx, char *err, size_t errlen)
{
	struct local_store *ls = local_of(s);
	struct dirent *de;
	struct stat st;
	DIR *d;
	int dfd, rc = 0;

	/* Our own open file description: readdir's offset is not shared. */
	dfd = openat(ls->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return ckpt_errf(err, errlen, -errno, "%s: cannot list: %s",
				 s->root, strerror(errno));
	d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return ckpt_errf(err, errlen, -ENOMEM, "%s: out of memory",
				 s->root);
	}
	while (!rc && (errno = 0, de = readdir(d))) {
		uint64_t size = 0;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
			continue;	/* gone since readdir */
		if (S_ISDIR(st.st_mode))
			continue;
		if (S_ISLNK(st.st_mode) &&
		    fstatat(dfd, de->d_name, &st, 0) == 0 &&
		    S_ISDIR(st.st_mode))
			continue;
		if (S_ISREG(st.st_mode))
			size = (uint64_t)st.st_size;
		rc = fn(ctx, de->d_name, size);
	}
	if (!rc && errno)
		rc = ckpt_errf(err, errlen, -errno, "%s: cannot list: %s",
			       s->root, strerror(errno));
	closedir(d);
	return rc;
}

static int local_set_opts(struct ckpt_store *s, const struct ckpt_store_opts *o,
			  char *err, size_t errlen)
{
	struct local_store *ls = local_of(s);

	(void)err;
	(void)errlen;
	pthread_mutex_lock(&ls->lock);
	ls->follow = o->follow_symlinks;
	ls->direct = o->direct_io;
	ls->cap = o->max_open ? o->max_open : choose_cap(o->raise_nofile);
	evict(ls, ls->cap + 1);
	pthread_mutex_unlock(&ls->lock);
	return 0;
}

static void local_destroy(struct ckpt_store *s)
{
	struct local_store *ls = local_of(s);
	uint32_t i;

	for (i = 0; i < ls->nfiles; i++) {
		struct lfile *f = file_at(ls, i);

		if (f->fd >= 0)
			close(f->fd);
		if (f->dfd >= 0)
			close(f->dfd);
		free(f->name);
	}
	for (i = 0; i < NPAGES && ls->pages[i]; i++)
		free(ls->pages[i]);
	if (ls->dirfd >= 0)
		close(ls->dirfd);
	free(ls->real_root);
	ckpt_strtab_destroy(&ls->by_name);
	free(ls->links);
	pthread_mutex_destroy(&ls->lock);
	free(s->root);
	free(s->identity);
	free(ls);
}

static const struct ckpt_store_ops local_ops = {
	.kind = "local",
	.destroy = local_destroy,
	.list = local_list,
	.open = local_open,
	.name = local_name,
	.read = local_read,
	.willneed = local_willneed,
	.set_opts = local_set_opts,
};

int ckpt_store_local_new(const char *root, const struct ckpt_store_opts *o,
			 struct ckpt_store **out, char *err, size_t errlen)
{
	struct local_store *ls;
	struct stat st;
	int rc;

	*out = NULL;
	ls = calloc(1, sizeof(*ls));
	if (!ls)
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	ls->base.ops = &local_ops;
	ls->dirfd = -1;
	pthread_mutex_init(&ls->lock, NULL);
	ckpt_lru_init(&ls->lru);
	ls->follow = o->follow_symlinks;
	ls->direct = o->direct_io;
	ls->cap = o->max_open ? o->max_open : choose_cap(o->raise_nofile);
	ls->tab_items = 64;
	ls->dirfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (ls->dirfd < 0) {
		rc = ckpt_errf(err, errlen, -errno, "%s: cannot open: %s", root,
			       strerror(errno));
		goto out_free;
	}
	ls->real_root = fd_path(ls->dirfd);
	if (fstat(ls->dirfd, &st) != 0) {
		rc = ckpt_errf(err, errlen, -errno, "%s: cannot stat: %s",
			       root, strerror(errno));
		goto out_free;
	}
	if (ckpt_strtab_init(&ls->by_name, ls->tab_items, name_key, ls) ||
	    !(ls->base.root = strdup(root)) ||
	    asprintf(&ls->base.identity, "%" PRIx64 ":%" PRIx64,
		     (uint64_t)st.st_dev, (uint64_t)st.st_ino) < 0) {
		ls->base.identity = NULL;
		rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
		goto out_free;
	}
	*out = &ls->base;
	return 0;
out_free:
	local_destroy(&ls->base);
	return rc;
}
