/* SPDX-License-Identifier: MIT */
/*
 * FUSE low-level handlers: lookup, getattr, readdir, open, read and the
 * refusals of every mutating call (EROFS).  Inode numbers are the view's
 * node indices + 1, so they are stable small integers; the root is 1.
 */
#include "ops.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "../core/meta.h"

#define READ_MAX ((size_t)1 << 20)

/* One read buffer per serving thread, kept for the thread's life: no
 * malloc per request, and daemon memory bounded by threads x request size
 * whatever is read. */
static pthread_key_t buf_key;
static pthread_once_t buf_once = PTHREAD_ONCE_INIT;

struct tbuf {
	struct ckpt_read_scratch scratch;
	size_t cap;
	char data[];
};

static void tbuf_free(void *p)
{
	struct tbuf *b = p;

	if (b)
		ckpt_read_scratch_destroy(&b->scratch);
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
	b->cap = size < READ_MAX ? READ_MAX : size;
	pthread_setspecific(buf_key, b);
	return b;
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
	return r->top || ckpt_node_is_dir(&fs->view->nodes[r->node]);
}

static void fill_stat(const struct ckfs *fs, fuse_ino_t ino,
		      const struct ref *r, struct stat *st)
{
	const struct ckpt_view *v = fs->view;
	const struct ckpt_meta *m = v->meta;
	uint64_t size;

	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_uid = fs->uid;
	st->st_gid = fs->gid;
	st->st_atim = m->mtime;
	st->st_mtim = m->mtime;
	st->st_ctim = m->mtime;
	st->st_blksize = 4096;
	if (r->top) {
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2 + v->nslots;
	} else if (ckpt_node_is_dir(&v->nodes[r->node])) {
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2 + v->nodes[r->node].nsubdirs;
	} else {
		size = ckpt_view_size(v, r->slot, r->node);
		st->st_mode = S_IFREG | 0444;
		st->st_nlink = 1;
		st->st_size = (off_t)size;
		st->st_blocks = (blkcnt_t)((size + 511) / 512);
	}
}

void ckfs_release_thread_buffer(void)
{
	pthread_once(&buf_once, buf_key_init);
	tbuf_free(pthread_getspecific(buf_key));
	pthread_setspecific(buf_key, NULL);
}

/* The path of slot's node i under the mount point, into out (PATH_MAX
 * bytes). */
static void node_path(const struct ckfs *fs, uint32_t slot, uint32_t i,
		      char *out)
{
	const struct ckpt_view *v = fs->view;
	size_t at;

	if (v->multi)
		at = (size_t)snprintf(out, PATH_MAX, "%s/rank%u/", fs->mnt,
				      v->slot_rank[slot]);
	else
		at = (size_t)snprintf(out, PATH_MAX, "%s/", fs->mnt);
	if (at < PATH_MAX)
		ckpt_view_path(v, i, out + at, PATH_MAX - at);
}

/* Push every file's bytes into the kernel's page cache.  The kernel
 * stores data only for inodes it knows, so each file is first looked up
 * through the mount (served by the other threads). */
static void *prefetch_main(void *arg)
{
	struct ckfs *fs = arg;
	const struct ckpt_view *v = fs->view;
	struct ckpt_read_scratch s = { 0 };
	char *buf = malloc(READ_MAX), *path = malloc(PATH_MAX);
	struct stat st;
	uint32_t i, slot;

	for (slot = 0; buf && path && slot < v->nslots; slot++) {
		for (i = 1; i < v->nnodes && !fs->prefetch_stop; i++) {
			uint64_t off = 0, size = ckpt_view_size(v, slot, i);
			size_t got;

			if (size == 0)
				continue;
			node_path(fs, slot, i, path);
			if (stat(path, &st) != 0)	/* e.g. a path too long */
				continue;
			while (off < size && !fs->prefetch_stop) {
				struct fuse_bufvec bv = FUSE_BUFVEC_INIT(0);

				if (ckpt_view_read(v, slot, i, off, READ_MAX,
						   buf, &got, &s) || got == 0)
					break;
				bv.buf[0].mem = buf;
				bv.buf[0].size = got;
				if (fuse_lowlevel_notify_store(fs->se,
						ckpt_view_ino(v, slot, i),
						(off_t)off, &bv, 0))
					break;
				off += got;
			}
		}
	}
	ckpt_read_scratch_destroy(&s);
	free(buf);
	free(path);
	return NULL;
}

int ckfs_prefetch_start(struct ckfs *fs)
{
	int rc = pthread_create(&fs->prefetch_thread, NULL, prefetch_main, fs);

	if (rc)
		return -rc;
	fs->prefetch_running = true;
	return 0;
}

void ckfs_prefetch_stop(struct ckfs *fs)
{
	fs->prefetch_stop = 1;
}

void ckfs_prefetch_join(struct ckfs *fs)
{
	if (fs->prefetch_running)
		pthread_join(fs->prefetch_thread, NULL);
	fs->prefetch_running = false;
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
static uint32_t slot_named(const struct ckpt_view *v, const char *name)
{
	char want[32];
	uint32_t s;

	for (s = 0; s < v->nslots; s++) {
		snprintf(want, sizeof(want), "rank%u", v->slot_rank[s]);
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
		c.slot = slot_named(v, name);
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
	fill_stat(fs, ep.ino, &c, &ep.attr);
	fuse_reply_entry(req, &ep);
}

static void ckfs_getattr(fuse_req_t req, fuse_ino_t ino,
			 struct fuse_file_info *fi)
{
	struct ckfs *fs = fs_of(req);
	struct stat st;
	struct ref r;

	(void)fi;
	if (ref_of(fs, ino, &r)) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	fill_stat(fs, ino, &r, &st);
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
	if ((fi->flags & O_ACCMODE) != O_RDONLY) {
		fuse_reply_err(req, EROFS);
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

	*c = *r;
	if (i == 0) {
		*name = ".";
		return true;
	}
	if (i == 1) {
		*name = "..";
		if (r->top || (v->multi && r->node == 0)) {
			c->top = true;	/* the mount's root */
		} else {
			c->node = v->nodes[r->node].parent;
		}
		return true;
	}
	(void)ino;
	if (r->top) {
		if ((uint64_t)(i - 2) >= v->nslots)
			return false;
		c->top = false;
		c->slot = (uint32_t)(i - 2);
		c->node = 0;
		snprintf(namebuf, nblen, "rank%u", v->slot_rank[c->slot]);
		*name = namebuf;
		return true;
	}
	if ((uint64_t)(i - 2) >= v->nodes[r->node].nchildren)
		return false;
	c->node = v->children[v->nodes[r->node].child_first + (uint32_t)(i - 2)];
	*name = v->names + v->nodes[c->node].name;
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

		fill_stat(fs, cino, &c, &st);
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
	if ((fi->flags & O_ACCMODE) != O_RDONLY ||
	    (fi->flags & (O_TRUNC | O_CREAT))) {
		fuse_reply_err(req, EROFS);
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

static void ckfs_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		      struct fuse_file_info *fi)
{
	struct ckfs *fs = fs_of(req);
	struct tbuf *tb;
	uint64_t fsize;
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
	fsize = ckpt_view_size(fs->view, r.slot, r.node);
	if ((uint64_t)off >= fsize) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	if (size > fsize - (uint64_t)off)
		size = (size_t)(fsize - (uint64_t)off);
	tb = thread_buf(size);
	if (!tb) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	rc = ckpt_view_read(fs->view, r.slot, r.node, (uint64_t)off, size,
			    tb->data, &got, &tb->scratch);
	if (rc)
		fuse_reply_err(req, rc == -ENOMEM ? ENOMEM : EIO);
	else
		fuse_reply_buf(req, tb->data, got);
}

static void ckfs_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct ckfs *fs = fs_of(req);
	struct statvfs sv;

	(void)ino;
	memset(&sv, 0, sizeof(sv));
	sv.f_bsize = 4096;
	sv.f_frsize = 4096;
	sv.f_blocks = (fsblkcnt_t)((fs->view->total_bytes + 4095) / 4096);
	sv.f_files = (fsblkcnt_t)fs->view->nnodes * fs->view->nslots;
	sv.f_namemax = 255;
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

/* Every call that would change the tree or a file. */
static void erofs(fuse_req_t req)
{
	fuse_reply_err(req, EROFS);
}

static void ckfs_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr,
			 int to_set, struct fuse_file_info *fi)
{
	(void)ino; (void)attr; (void)to_set; (void)fi;
	erofs(req);
}

static void ckfs_mknod(fuse_req_t req, fuse_ino_t parent, const char *name,
		       mode_t mode, dev_t rdev)
{
	(void)parent; (void)name; (void)mode; (void)rdev;
	erofs(req);
}

static void ckfs_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name,
		       mode_t mode)
{
	(void)parent; (void)name; (void)mode;
	erofs(req);
}

static void ckfs_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	(void)parent; (void)name;
	erofs(req);
}

static void ckfs_symlink(fuse_req_t req, const char *link, fuse_ino_t parent,
			 const char *name)
{
	(void)link; (void)parent; (void)name;
	erofs(req);
}

static void ckfs_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
			fuse_ino_t newparent, const char *newname,
			unsigned int flags)
{
	(void)parent; (void)name; (void)newparent; (void)newname; (void)flags;
	erofs(req);
}

static void ckfs_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent,
		      const char *newname)
{
	(void)ino; (void)newparent; (void)newname;
	erofs(req);
}

static void ckfs_write(fuse_req_t req, fuse_ino_t ino, const char *buf,
		       size_t size, off_t off, struct fuse_file_info *fi)
{
	(void)ino; (void)buf; (void)size; (void)off; (void)fi;
	erofs(req);
}

static void ckfs_create(fuse_req_t req, fuse_ino_t parent, const char *name,
			mode_t mode, struct fuse_file_info *fi)
{
	(void)parent; (void)name; (void)mode; (void)fi;
	erofs(req);
}

static void ckfs_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			  const char *value, size_t size, int flags)
{
	(void)ino; (void)name; (void)value; (void)size; (void)flags;
	erofs(req);
}

static void ckfs_removexattr(fuse_req_t req, fuse_ino_t ino,
			     const char *name)
{
	(void)ino; (void)name;
	erofs(req);
}

static void ckfs_fallocate(fuse_req_t req, fuse_ino_t ino, int mode,
			   off_t offset, off_t length,
			   struct fuse_file_info *fi)
{
	(void)ino; (void)mode; (void)offset; (void)length; (void)fi;
	erofs(req);
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
	.setattr = ckfs_setattr,
	.mknod = ckfs_mknod,
	.mkdir = ckfs_mkdir,
	.unlink = ckfs_unlink,
	.rmdir = ckfs_unlink,
	.symlink = ckfs_symlink,
	.rename = ckfs_rename,
	.link = ckfs_link,
	.write = ckfs_write,
	.create = ckfs_create,
	.setxattr = ckfs_setxattr,
	.removexattr = ckfs_removexattr,
	.fallocate = ckfs_fallocate,
};
