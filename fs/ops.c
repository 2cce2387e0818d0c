/* SPDX-License-Identifier: MIT */
/*
 * FUSE low-level handlers: lookup, getattr, readdir, open, read, statfs and
 * xattrs, over libckptfs's public API.  Inode numbers are the view's node
 * indices + 1, so they are stable small integers; the root is 1.  The
 * mount is read-only ("ro"), so the kernel refuses every mutating call
 * with EROFS before it reaches us: there are no handlers for them.
 */
#include "ops.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <syslog.h>
#include <time.h>

#define READ_MAX ((size_t)1 << 20)

/* One read buffer per serving thread, kept for the thread's life: no
 * malloc per request, and daemon memory bounded by threads x request size
 * whatever is read. */
static pthread_key_t buf_key;
static pthread_once_t buf_once = PTHREAD_ONCE_INIT;

struct tbuf {
	struct ckpt_scratch *scratch;
	size_t cap;
	char data[];
};

static void tbuf_free(void *p)
{
	struct tbuf *b = p;

	if (b)
		ckpt_scratch_free(b->scratch);
	free(b);
}

static void buf_key_init(void)
{
	pthread_key_create(&buf_key, tbuf_free);
}

/* A buffer of at least size bytes and a read scratch, owned by the calling
 * thread; NULL on out-of-memory. */
static struct tbuf *thread_buf(size_t size)
{
	struct tbuf *b;

	pthread_once(&buf_once, buf_key_init);
	b = pthread_getspecific(buf_key);
	if (b && b->cap >= size)
		return b;
	tbuf_free(b);
	pthread_setspecific(buf_key, NULL);
	b = calloc(1, sizeof(*b) + (size < READ_MAX ? READ_MAX : size));
	if (!b)
		return NULL;
	b->scratch = ckpt_scratch_new();
	if (!b->scratch) {
		free(b);
		return NULL;
	}
	b->cap = size < READ_MAX ? READ_MAX : size;
	pthread_setspecific(buf_key, b);
	return b;
}

/* Rate limit of the error log: at most LOG_BURST lines per LOG_WINDOW
 * seconds; the rest are counted and reported with the next line. */
#define LOG_BURST 10
#define LOG_WINDOW 5
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static time_t log_window_start;
static unsigned log_in_window, log_suppressed;

void ckfs_report_corrupt(void *ctx, const char *line)
{
	const struct ckfs *fs = ctx;
	char safe[1536];

	ckpt_line_for_msg(line, safe, sizeof(safe));
	if (fs->use_syslog)
		syslog(LOG_ERR, "verify: %s", safe);
	else
		fprintf(stderr, "ckptfs: verify: %s\n", safe);
}

void ckfs_log(const struct ckfs *fs, const char *fmt, ...)
{
	char raw[4096], line[1536];
	unsigned dropped = 0;
	time_t now = time(NULL);
	va_list ap;

	pthread_mutex_lock(&log_lock);
	if (now - log_window_start >= LOG_WINDOW) {
		dropped = log_suppressed;
		log_window_start = now;
		log_in_window = 0;
		log_suppressed = 0;
	}
	if (log_in_window >= LOG_BURST) {
		log_suppressed++;
		pthread_mutex_unlock(&log_lock);
		return;
	}
	log_in_window++;
	pthread_mutex_unlock(&log_lock);
	va_start(ap, fmt);
	vsnprintf(raw, sizeof(raw), fmt, ap);
	va_end(ap);
	/* Names in the line (paths, keys) reach no log raw, and a long one
	 * is shortened in the middle so the reason shows. */
	ckpt_line_for_msg(raw, line, sizeof(line));
	if (fs->use_syslog) {
		if (dropped)
			syslog(LOG_ERR, "%u more errors not logged", dropped);
		syslog(LOG_ERR, "%s", line);
	} else {
		if (dropped)
			fprintf(stderr, "ckptfs: %u more errors not logged\n",
				dropped);
		fprintf(stderr, "ckptfs: %s\n", line);
	}
}

static pthread_mutex_t tune_lock = PTHREAD_MUTEX_INITIALIZER;

/* Raise the mount's readahead (see mount_run.c), once: INIT is done when
 * any other request arrives. */
static void tune(struct ckfs *fs)
{
	FILE *f;

	pthread_mutex_lock(&tune_lock);
	if (!fs->tuned && fs->readahead_path[0]) {
		f = fopen(fs->readahead_path, "we");
		if (f) {
			fprintf(f, "%u\n", fs->readahead_kb);
			fclose(f);
		}
	}
	__atomic_store_n(&fs->tuned, 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&tune_lock);
}

static struct ckfs *fs_of(fuse_req_t req)
{
	struct ckfs *fs = fuse_req_userdata(req);

	if (!__atomic_load_n(&fs->tuned, __ATOMIC_ACQUIRE))
		tune(fs);
	return fs;
}

/* What an inode number names: the root of the rankN/ directories (top),
 * or a node of the tree as one slot's rank sees it. */
struct ref {
	bool top;
	uint32_t slot, node;
};

static int ref_of(const struct ckfs *fs, fuse_ino_t ino, struct ref *r)
{
	int rc = ckpt_view_ino_decode(fs->view, ino, &r->slot, &r->node);

	if (rc < 0)
		return rc;
	r->top = rc == 1;
	return 0;
}

static bool ref_is_dir(const struct ckfs *fs, const struct ref *r)
{
	struct ckpt_node_info ni;

	return r->top || (ckpt_view_node(fs->view, r->node, &ni) == 0 &&
			  ni.type == CKPT_NODE_DIR);
}

/* Attributes of r.  Returns 0, or -ENOMEM when a .ckptfs/ file could not
 * be built (then no size is given to the kernel to cache). */
static int fill_stat(const struct ckfs *fs, fuse_ino_t ino,
		     const struct ref *r, struct stat *st)
{
	const struct ckpt_view *v = fs->view;
	struct ckpt_node_info ni;
	uint64_t size;
	int rc;

	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_uid = fs->uid;
	st->st_gid = fs->gid;
	st->st_atim = fs->mtime;
	st->st_mtim = fs->mtime;
	st->st_ctim = fs->mtime;
	st->st_blksize = 4096;
	if (r->top) {
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2 + fs->vi.nslots;
		return 0;
	}
	rc = ckpt_view_node(v, r->node, &ni);
	if (rc)
		return rc;
	if (ni.type == CKPT_NODE_DIR) {
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2 + ni.nsubdirs;
		return 0;
	}
	rc = ckpt_view_size(v, r->slot, r->node, &size);
	if (rc)
		return rc;
	st->st_mode = S_IFREG | 0444;
	st->st_nlink = 1;
	st->st_size = (off_t)size;
	st->st_blocks = (blkcnt_t)((size + 511) / 512);
	return 0;
}

void ckfs_release_thread_buffer(void)
{
	pthread_once(&buf_once, buf_key_init);
	tbuf_free(pthread_getspecific(buf_key));
	pthread_setspecific(buf_key, NULL);
}

static void ckfs_init(void *userdata, struct fuse_conn_info *conn)
{
	struct ckfs *fs = userdata;

	/* Opens carry no state here: answering the first one with ENOSYS
	 * lets the kernel skip OPEN/FLUSH/RELEASE for every later file
	 * (its default for such files is keep_cache).  Write opens never get
	 * here: the mount is read-only. */
	if (conn->capable & FUSE_CAP_NO_OPEN_SUPPORT) {
		conn->want |= FUSE_CAP_NO_OPEN_SUPPORT;
		fs->no_open = true;
	}
	/* The view never changes: let the kernel cache and batch freely. */
	if (conn->capable & FUSE_CAP_ASYNC_READ)
		conn->want |= FUSE_CAP_ASYNC_READ;
	conn->want &= ~(unsigned)(FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE |
				  FUSE_CAP_SPLICE_MOVE);
	conn->max_background = 64;
	conn->congestion_threshold = 48;
}

/* "rankN" of a multi-rank root: the slot, or CKPT_NONE. */
static uint32_t slot_named(const struct ckfs *fs, const char *name)
{
	char want[32];
	uint32_t s;

	for (s = 0; s < fs->vi.nslots; s++) {
		snprintf(want, sizeof(want), "rank%u",
			 ckpt_view_slot_rank(fs->view, s));
		if (strcmp(want, name) == 0)
			return s;
	}
	return CKPT_NONE;
}

static void ckfs_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct ckfs *fs = fs_of(req);
	const struct ckpt_view *v = fs->view;
	struct fuse_entry_param ep;
	struct ref p, c;
	uint32_t i;
	int rc;

	if (ref_of(fs, parent, &p)) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	if (!ref_is_dir(fs, &p)) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	memset(&ep, 0, sizeof(ep));
	ep.entry_timeout = fs->timeout;
	c.top = false;
	if (p.top) {
		c.slot = slot_named(fs, name);
		c.node = 0;
		i = c.slot;
	} else {
		c.slot = p.slot;
		c.node = i = ckpt_view_lookup(v, p.node, name);
	}
	if (i == CKPT_NONE) {
		/* A negative entry the kernel may cache: the view is fixed. */
		fuse_reply_entry(req, &ep);
		return;
	}
	ep.ino = ckpt_view_ino(v, c.slot, c.node);
	ep.generation = 1;
	ep.attr_timeout = fs->timeout;
	rc = fill_stat(fs, ep.ino, &c, &ep.attr);
	if (rc)
		fuse_reply_err(req, -rc);
	else
		fuse_reply_entry(req, &ep);
}

static void ckfs_getattr(fuse_req_t req, fuse_ino_t ino,
			 struct fuse_file_info *fi)
{
	struct ckfs *fs = fs_of(req);
	struct stat st;
	struct ref r;
	int rc;

	(void)fi;
	if (ref_of(fs, ino, &r)) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	rc = fill_stat(fs, ino, &r, &st);
	if (rc)
		fuse_reply_err(req, -rc);
	else
		fuse_reply_attr(req, &st, fs->timeout);
}

static void ckfs_opendir(fuse_req_t req, fuse_ino_t ino,
			 struct fuse_file_info *fi)
{
	struct ckfs *fs = fs_of(req);
	struct ref r;

	if (ref_of(fs, ino, &r)) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	if (!ref_is_dir(fs, &r)) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	fi->cache_readdir = 1;
	fi->keep_cache = 1;
	fuse_reply_open(req, fi);
}

/* Entry i of directory r: 0 = ".", 1 = "..", 2 + k = child k (rankN/
 * directories at a multi-rank root).  Returns false past the end. */
static bool dir_entry(const struct ckfs *fs, fuse_ino_t ino,
		      const struct ref *r, off_t i, const char **name,
		      char *namebuf, size_t nblen, struct ref *c)
{
	const struct ckpt_view *v = fs->view;
	struct ckpt_node_info ni;

	*c = *r;
	if (i == 0) {
		*name = ".";
		return true;
	}
	if (i == 1) {
		*name = "..";
		if (r->top || (fs->vi.multi && r->node == 0))
			c->top = true;	/* the mount's root */
		else if (ckpt_view_node(v, r->node, &ni) == 0)
			c->node = ni.parent;
		return true;
	}
	(void)ino;
	if (r->top) {
		if ((uint64_t)(i - 2) >= fs->vi.nslots)
			return false;
		c->top = false;
		c->slot = (uint32_t)(i - 2);
		c->node = 0;
		snprintf(namebuf, nblen, "rank%u",
			 ckpt_view_slot_rank(v, c->slot));
		*name = namebuf;
		return true;
	}
	if ((uint64_t)(i - 2) > UINT32_MAX)
		return false;
	c->node = ckpt_view_child(v, r->node, (uint32_t)(i - 2));
	if (c->node == CKPT_NONE || ckpt_view_node(v, c->node, &ni))
		return false;
	*name = ni.name;
	return true;
}

/* With plus, each entry carries its attributes, so `ls -l` and os.walk +
 * open need no separate LOOKUP per file. */
static void list_dir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		     bool plus)
{
	struct ckfs *fs = fs_of(req);
	const struct ckpt_view *v = fs->view;
	size_t used = 0, need;
	char *buf, namebuf[32];
	const char *name;
	struct ref r, c;
	struct stat st;
	off_t i;

	if (ref_of(fs, ino, &r)) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	if (!ref_is_dir(fs, &r)) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	if (size > READ_MAX)
		size = READ_MAX;
	buf = malloc(size);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	for (i = off < 0 ? 0 : off;
	     dir_entry(fs, ino, &r, i, &name, namebuf, sizeof(namebuf), &c);
	     i++) {
		fuse_ino_t cino = c.top ? 1 : ckpt_view_ino(v, c.slot, c.node);

		if (fill_stat(fs, cino, &c, &st)) {
			/* A .ckptfs/ file that cannot be built now: list it
			 * without attributes rather than with a wrong size. */
			if (plus)
				break;
		}
		if (plus) {
			struct fuse_entry_param ep;

			memset(&ep, 0, sizeof(ep));
			/* "." and ".." carry no entry: no lookup count. */
			if (i >= 2) {
				ep.ino = cino;
				ep.generation = 1;
				ep.attr = st;
				ep.attr_timeout = fs->timeout;
				ep.entry_timeout = fs->timeout;
			} else {
				ep.attr.st_ino = cino;
				ep.attr.st_mode = st.st_mode;
			}
			need = fuse_add_direntry_plus(req, buf + used,
						      size - used, name, &ep,
						      i + 1);
		} else {
			need = fuse_add_direntry(req, buf + used, size - used,
						 name, &st, i + 1);
		}
		if (need > size - used)
			break;
		used += need;
	}
	fuse_reply_buf(req, buf, used);
	free(buf);
}

static void ckfs_readdir(fuse_req_t req, fuse_ino_t ino, size_t size,
			 off_t off, struct fuse_file_info *fi)
{
	(void)fi;
	list_dir(req, ino, size, off, false);
}

static void ckfs_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size,
			     off_t off, struct fuse_file_info *fi)
{
	(void)fi;
	list_dir(req, ino, size, off, true);
}

static void ckfs_open(fuse_req_t req, fuse_ino_t ino,
		      struct fuse_file_info *fi)
{
	struct ckfs *fs = fs_of(req);
	struct ref r;

	if (ref_of(fs, ino, &r)) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	if (ref_is_dir(fs, &r)) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	if (fs->no_open) {
		fuse_reply_err(req, ENOSYS);
		return;
	}
	fi->keep_cache = 1;
	fi->direct_io = 0;
	fuse_reply_open(req, fi);
}

/*
 * Reads that failed slowly (a stalled store: the read deadline), kept for
 * FAILED_HOLD_MS.  After a failed readahead the kernel reads the page it
 * was asked for again, at once: that second READ would wait the whole
 * read deadline again and double a read()'s time.  A READ inside a range
 * which failed slowly that recently, for the same process, fails at once
 * with EIO.  The hold is short and per process: the kernel's retry comes
 * within the same read() of the same reader, and a read made later or by
 * another process (the store may have recovered) is tried again.
 */
#define FAILED_SLOW_MS 1000	/* a failure this slow is remembered */
#define FAILED_HOLD_MS 250	/* ... for this long after it ended */
#define FAILED_SLOTS 16
struct failed_read {
	fuse_ino_t ino;		/* 0: free */
	pid_t pid;		/* of the process whose READ failed */
	uint64_t off, end;	/* the range of the READ that failed */
	uint64_t at_ms;		/* CLOCK_MONOTONIC ms it failed */
	uint64_t took_ms;
};
static pthread_mutex_t failed_lock = PTHREAD_MUTEX_INITIALIZER;
static struct failed_read failed[FAILED_SLOTS];	/* guarded by failed_lock */
static unsigned failed_next;			/* guarded by failed_lock */

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* A recent slow failure of ino containing [off, end), for process pid,
 * copied to *out. */
static bool has_failed_recently(fuse_ino_t ino, pid_t pid, uint64_t off,
				uint64_t end, uint64_t now,
				struct failed_read *out)
{
	bool hit = false;
	unsigned i;

	pthread_mutex_lock(&failed_lock);
	for (i = 0; i < FAILED_SLOTS && !hit; i++) {
		const struct failed_read *f = &failed[i];

		if (f->ino == ino && f->pid == pid &&
		    now - f->at_ms < FAILED_HOLD_MS &&
		    f->off <= off && end <= f->end) {
			*out = *f;
			hit = true;
		}
	}
	pthread_mutex_unlock(&failed_lock);
	return hit;
}

static void remember_failed(fuse_ino_t ino, pid_t pid, uint64_t off,
			    uint64_t end, uint64_t now, uint64_t took_ms)
{
	pthread_mutex_lock(&failed_lock);
	failed[failed_next] = (struct failed_read){ ino, pid, off, end, now,
						    took_ms };
	failed_next = (failed_next + 1) % FAILED_SLOTS;
	pthread_mutex_unlock(&failed_lock);
}

static void ckfs_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		      struct fuse_file_info *fi)
{
	struct ckfs *fs = fs_of(req);
	struct failed_read f;
	struct tbuf *tb;
	uint64_t fsize, t0;
	struct ref r;
	size_t got;
	int rc;

	(void)fi;
	if (ref_of(fs, ino, &r)) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	if (ref_is_dir(fs, &r)) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	if (off < 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	rc = ckpt_view_size(fs->view, r.slot, r.node, &fsize);
	if (rc) {
		fuse_reply_err(req, -rc);
		return;
	}
	if ((uint64_t)off >= fsize) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	if (size > fsize - (uint64_t)off)
		size = (size_t)(fsize - (uint64_t)off);
	t0 = mono_ms();
	if (has_failed_recently(ino, fuse_req_ctx(req)->pid, (uint64_t)off,
				(uint64_t)off + size, t0, &f)) {
		ckfs_log(fs, "read of %zu bytes at %lld (rank %u): failed at "
			 "once: a read of bytes %llu-%llu failed %llu ms ago "
			 "after %llu ms (see above)", size, (long long)off,
			 ckpt_view_slot_rank(fs->view, r.slot),
			 (unsigned long long)f.off,
			 (unsigned long long)f.end - 1,
			 (unsigned long long)(t0 - f.at_ms),
			 (unsigned long long)f.took_ms);
		fuse_reply_err(req, EIO);
		return;
	}
	tb = thread_buf(size);
	if (!tb) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	atomic_fetch_add_explicit(&fs->busy, 1, memory_order_relaxed);
	rc = ckpt_readahead_read(fs->ra, fs->view, r.slot, r.node,
				 (uint64_t)off, size, tb->data, &got,
				 tb->scratch);
	atomic_fetch_sub_explicit(&fs->busy, 1, memory_order_relaxed);
	if (rc) {
		uint64_t t1 = mono_ms();

		if (rc == -EIO && t1 - t0 >= FAILED_SLOW_MS)
			remember_failed(ino, fuse_req_ctx(req)->pid,
					(uint64_t)off, (uint64_t)off + size,
					t1, t1 - t0);
		if (rc != -ENOMEM)
			ckfs_log(fs, "read of %zu bytes at %lld (rank %u): %s", size,
				 (long long)off,
				 ckpt_view_slot_rank(fs->view, r.slot),
				 ckpt_last_error()[0] ? ckpt_last_error() :
							strerror(-rc));
		fuse_reply_err(req, rc == -ENOMEM ? ENOMEM : EIO);
	} else {
		fuse_reply_buf(req, tb->data, got);
	}
}

static void ckfs_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct ckfs *fs = fs_of(req);
	struct statvfs sv;

	(void)ino;
	memset(&sv, 0, sizeof(sv));
	sv.f_bsize = 4096;
	sv.f_frsize = 4096;
	sv.f_blocks = (fsblkcnt_t)((fs->vi.total_bytes + 4095) / 4096);
	sv.f_files = (fsblkcnt_t)fs->vi.nnodes * fs->vi.nslots;
	sv.f_namemax = 255;	/* longer names are refused at mount */
	sv.f_flag = ST_RDONLY;
	fuse_reply_statfs(req, &sv);
}

/* getxattr(2)/listxattr(2) semantics: size 0 asks for the length, a
 * buffer too small is ERANGE. */
static void reply_xattr_value(fuse_req_t req, const char *buf, int len,
			      size_t size)
{
	if (len < 0)
		fuse_reply_err(req, -len);
	else if (size == 0)
		fuse_reply_xattr(req, (size_t)len);
	else if ((size_t)len > size)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, buf, (size_t)len);
}

#define XATTR_MAX 4096

static void ckfs_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			  size_t size)
{
	struct ckfs *fs = fs_of(req);
	char buf[XATTR_MAX];
	struct ref r;
	int len;

	if (ref_of(fs, ino, &r)) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	len = r.top ? -ENODATA :
	      ckpt_view_xattr(fs->view, r.slot, r.node, name, buf, sizeof(buf));
	if (len > XATTR_MAX)
		len = -E2BIG;
	reply_xattr_value(req, buf, len, size);
}

static void ckfs_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	struct ckfs *fs = fs_of(req);
	char buf[XATTR_MAX];
	struct ref r;
	int len;

	if (ref_of(fs, ino, &r)) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	len = r.top ? 0 : ckpt_view_xattr_list(fs->view, r.node, buf,
						sizeof(buf));
	reply_xattr_value(req, buf, len, size);
}

const struct fuse_lowlevel_ops ckfs_ops = {
	.init = ckfs_init,
	.lookup = ckfs_lookup,
	.getattr = ckfs_getattr,
	.opendir = ckfs_opendir,
	.readdir = ckfs_readdir,
	.readdirplus = ckfs_readdirplus,
	.open = ckfs_open,
	.read = ckfs_read,
	.statfs = ckfs_statfs,
	.getxattr = ckfs_getxattr,
	.listxattr = ckfs_listxattr,
};
