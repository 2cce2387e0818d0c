/* SPDX-License-Identifier: MIT */
/*
 * The pickled Metadata, read by its fixed schema (see
 * ../shared/torch-dcp-format.md, section 2):
 *
 *   Metadata {state_dict_metadata: {fqn: TensorStorageMetadata |
 *                                         BytesStorageMetadata},
 *             planner_data: None | {fqn: (str|int, ...)},
 *             storage_data: {MetadataIndex: _StorageInfo}, ...}
 *
 * and written out as the native image: the same keys and chunks, and one
 * record per chunk whose offset/length are the raw tensor bytes inside the
 * .distcp file (found through each archive's central directory and
 * data.pkl), with strides when the saved tensor is not row-major.  Unknown
 * dataclass fields are ignored.  The three large dicts are read as the
 * pickle streams them (on_pairs()), a batch of items at a time, and the
 * image is written in parts joined at the end.
 */
#include "torch/torch_index.h"


#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "common/cancel.h"
#include "common/errbuf.h"
#include "common/grow.h"
#include "common/mpcursor.h"
#include "common/mpout.h"
#include "common/relpath.h"
#include "common/strides.h"
#include "common/strtab.h"
#include "io/datafiles.h"
#include "io/zstd_decode.h"
#include "model/meta.h"
#include "safetensors/st_blob.h"
#include "model/transforms.h"
#include "torch/pickle.h"
#include "torch/torch_globals.h"
#include "torch/torch_record.h"

#define FQN_SHOWN 120

/* Files a Megatron-Core torch_dist checkpoint keeps beside .metadata:
 * each becomes a bytes entry of that name (one path component), so the
 * view's root shows it as it is. */
static const char *const side_files[] = { "common.pt", "metadata.json" };
#define NSIDE (sizeof(side_files) / sizeof(side_files[0]))

/*
 * Locating a record reads its first and last TZ_WINDOW bytes (tz_open's
 * windows; a zstd frame's magic), one record after another: two small
 * requests per record, each waited for.  So the windows of the next
 * PF_RECORDS records are asked for first.  A local store gets them as
 * WILLNEED hints, a record's tail and the next one's head (adjacent in a
 * .distcp file) as one range, so that a cold device reads them in a deep
 * queue and in half the requests.  A store that keeps requests in flight
 * (an object store: ckpt_store_parallelism() > 0) fetches them in one
 * batch (it merges near ones and runs them at once) into memory, from
 * which reads inside a window are then served: at most PF_RECORDS * 2 *
 * TZ_WINDOW bytes.
 */
#define PF_RECORDS 4096u

struct pf_win {
	uint32_t fid;
	uint64_t off, len;	/* in the file */
	uint8_t *buf;		/* inside the prefetch's mem, or borrowed
				 * (a batch's fetched range, model/meta.h) */
};

struct prefetch {
	struct pf_win *w;	/* sorted by fid, off */
	size_t n;
	uint64_t maxlen;	/* the longest window */
	uint8_t *mem;
};

/*
 * The span of the current data file read last.  Locating a record reads
 * its first bytes (its kind), its head window and its tail window; the
 * tail's read continues into what follows, usually the next record's
 * head.  So each record costs one pread instead of three.
 */
struct window {
	bool valid;
	uint32_t fid;		/* store id of the file */
	uint64_t off;		/* where buf starts in it */
	size_t len;
	uint8_t buf[2 * TZ_WINDOW];
};

/* A state_dict_metadata key, as its storage records need it; fqn points
 * into the pickle.  A tensor's chunks are nchunks x (offsets, sizes), each
 * ndim long, from tctx.kdims[dims]. */
struct sdm_key {
	size_t fqn_at;		/* its name, at tctx.fqns + fqn_at */
	uint32_t fqn_len;
	uint32_t nchunks;
	size_t dims;
	bool tensor;
	uint8_t dtype;		/* enum ckpt_dtype */
	uint8_t ndim;
};

/* A relative_path the records name (a copy: the pickle may be spent). */
struct rel_path {
	char *s;
	uint32_t len;
};

/* The image's parts, written as the pickle streams by (pk_stream) and
 * joined at the end. */
enum { ROLE_SDM, ROLE_PD, ROLE_SD, NROLES };

struct tctx {
	const char *dir, *name;	/* the store's root, .metadata's path */
	struct ckpt_store *store;	/* NULL: no data files (fuzzing) */
	char *err;
	size_t errlen;
	struct ckpt_mpout w;	/* header and stamp */
	struct ckpt_mpout wk;	/* state_dict_metadata's entries */
	struct ckpt_mpout wp;	/* planner_data's entries */
	struct ckpt_mpout wr;	/* storage_data's records */
	uint32_t npd, nrec;	/* entries in wp, records in wr */
	uint32_t nseen;		/* storage_data items seen */
	uint32_t streamed[NROLES];	/* each role's dict (pk_stream_id()) */
	bool keys_closed;	/* storage_data began */
	struct sdm_key *keys;	/* state_dict_metadata, in order */
	size_t nkeys, keys_cap;
	char *fqns;		/* their names, copied (NUL-terminated) */
	size_t nfqns, fqns_cap;
	uint64_t *kdims;
	size_t nkdims, kdims_cap;
	struct ckpt_strtab by_fqn;	/* index in keys */
	size_t by_fqn_max;		/* what it is sized for */
	uint32_t last_key;		/* the last record's */
	struct rel_path *paths;	/* the records' relative paths, each */
	size_t npaths, paths_cap;	/* once when consecutive */
	bool has_file;			/* a data file is current: */
	uint32_t fid;			/* its store id, */
	struct rel_path fd_path;	/* its name (owned) */
	uint64_t fsize;			/* and size */
	/* SerializationFormat.SAFETENSORS: the open file's blob, parsed */
	struct ckpt_st_set st;
	uint64_t st_base;
	bool st_loaded;
	uint8_t variants;		/* CKPT_VARIANT_* seen */
	/* Megatron-Core's files beside .metadata, shown as they are */
	const char *side[NSIDE];
	uint64_t side_size[NSIDE];
	unsigned nside;
	struct prefetch pf;	/* the current records' windows */
	struct window win;
	bool lazy;		/* records inside archives are not located:
				 * each gets its "archive" (docs/format.md) */
	/* ckpt_torch_index_merged(): records these located are written
	 * located, and the stamp names the data files */
	const struct ckpt_meta *const *known;
	uint32_t **known_guard;	/* [nknown]: chunk -> guard, or NULL */
	size_t nknown;
};

static int find_side_files(struct tctx *t)
{
	struct ckpt_store_file_info fi;
	uint32_t id;
	unsigned i;
	int rc;

	for (i = 0; t->store && i < NSIDE; i++) {
		const char *n = side_files[i];

		if (ckpt_strtab_find(&t->by_fqn, 0, n, strlen(n)) != UINT32_MAX)
			continue;
		rc = ckpt_store_open(t->store, n, &id, &fi, t->err, t->errlen);
		if (rc == -ENOENT || rc == -EINVAL || rc == -EXDEV)
			continue;	/* none, not a file, or outside */
		if (rc)
			return rc;
		t->side[t->nside] = n;
		t->side_size[t->nside++] = fi.size;
	}
	return 0;
}

/* A record's bytes [base, base + len) of data file id (fsize bytes),
 * read through win. */
struct blob {
	struct ckpt_store *store;
	uint32_t id;
	uint64_t base, len, fsize;
	const struct prefetch *pf;	/* or NULL */
	struct window *win;
};

bool ckpt_torch_is_pickle(const uint8_t *buf, size_t len)
{
	return len >= 2 && buf[0] == 0x80 && buf[1] >= 2 && buf[1] <= 5;
}

static int fail(struct tctx *t, const struct pk_value *fqn, const char *what)
{
	if (fqn && fqn->type == PK_STR)
		return ckpt_errf_key(t->err, t->errlen, -EINVAL,
				     fqn->u.str.s, fqn->u.str.len,
				     "%s: key '%.*s': %s", t->name,
				     (int)(fqn->u.str.len > FQN_SHOWN ? FQN_SHOWN :
					   fqn->u.str.len), fqn->u.str.s, what);
	return ckpt_errf(t->err, t->errlen, -EINVAL, "%s: %s", t->name, what);
}

/* The state dict of a dataclass instance of class id. */
static const struct pk_value *state_of(const struct pk_value *v, int id)
{
	if (!pk_is_call(v, id) || !v->u.call.state ||
	    v->u.call.state->type != PK_DICT)
		return NULL;
	return v->u.call.state;
}

/* torch.Size((d0, ...)) or a plain tuple of non-negative ints. */
static int dims_of(const struct pk_value *v, uint64_t *out, unsigned *n)
{
	uint32_t i;

	if (v && v->type == PK_DIMS) {	/* a torch.Size, compacted */
		if (v->n > CKPT_MAX_DIMS)
			return -EINVAL;
		memcpy(out, v->u.dims, v->n * sizeof(*out));
		*n = v->n;
		return 0;
	}
	if (pk_is_call(v, TG_SIZE)) {
		if (v->u.call.state || v->u.call.args->n != 1)
			return -EINVAL;
		v = v->u.call.args->u.items[0];
	}
	if (!v || (v->type != PK_TUPLE && v->type != PK_LIST) ||
	    v->n > CKPT_MAX_DIMS)
		return -EINVAL;
	for (i = 0; i < v->n; i++) {
		if (v->u.items[i]->type != PK_INT || v->u.items[i]->u.i < 0)
			return -EINVAL;
		out[i] = (uint64_t)v->u.items[i]->u.i;
	}
	*n = v->n;
	return 0;
}

static void put_key(struct ckpt_mpout *w, const struct pk_value *s)
{
	ckpt_mp_str_with_body(w, s->u.str.s, s->u.str.len);
}

/* TensorProperties: the 5-tuple state (dtype, layout, requires_grad,
 * memory_format, pin_memory), or a dict with those names. */
static int props_of(const struct pk_value *p, enum ckpt_dtype *dt,
		    bool *requires_grad)
{
	const struct pk_value *st, *d = NULL, *rg = NULL;

	if (!pk_is_call(p, TG_PROPS) || !(st = p->u.call.state))
		return -EINVAL;
	if (st->type == PK_TUPLE && st->n >= 3) {
		d = st->u.items[0];
		rg = st->u.items[2];
	} else if (st->type == PK_DICT) {
		d = pk_dict_get(st, "dtype");
		rg = pk_dict_get(st, "requires_grad");
	}
	if (!d || d->type != PK_GLOBAL || d->u.global < TG_DTYPE ||
	    d->u.global >= TG_DTYPE + CKPT_DTYPE_COUNT)
		return -EINVAL;
	*dt = (enum ckpt_dtype)(d->u.global - TG_DTYPE);
	*requires_grad = rg && rg->type == PK_BOOL && rg->u.i;
	return 0;
}

static void fqn_key(const void *ctx, uint32_t idx, uint64_t *seed,
		    const char **s, size_t *len);

/* A new key fqn (a PK_STR), looked up by name from now on; the table is
 * sized again as keys come (their number is known only at the end). */
static int add_key(struct tctx *t, const struct pk_value *fqn,
		   struct sdm_key **out)
{
	struct sdm_key *k;
	uint32_t i;

	if (t->nkeys >= UINT32_MAX - 1 ||
	    ckpt_grow((void **)&t->keys, &t->keys_cap, t->nkeys + 1,
		      sizeof(*t->keys)))
		return ckpt_errf(t->err, t->errlen, -ENOMEM,
				 "%s: out of memory", t->name);
	if (t->nkeys + 1 > t->by_fqn_max) {
		size_t max = t->by_fqn_max ? t->by_fqn_max * 2 : 1024;

		ckpt_strtab_destroy(&t->by_fqn);
		t->by_fqn_max = 0;
		if (ckpt_strtab_init(&t->by_fqn, max, fqn_key, t))
			return ckpt_errf(t->err, t->errlen, -ENOMEM,
					 "%s: out of memory", t->name);
		t->by_fqn_max = max;
		for (i = 0; i < t->nkeys; i++)
			ckpt_strtab_insert(&t->by_fqn, i);
	}
	if (ckpt_grow((void **)&t->fqns, &t->fqns_cap,
		      t->nfqns + fqn->u.str.len + 1, 1))
		return ckpt_errf(t->err, t->errlen, -ENOMEM,
				 "%s: out of memory", t->name);
	memcpy(t->fqns + t->nfqns, fqn->u.str.s, fqn->u.str.len);
	t->fqns[t->nfqns + fqn->u.str.len] = '\0';
	k = &t->keys[t->nkeys];
	*k = (struct sdm_key){ .fqn_at = t->nfqns,
			       .fqn_len = fqn->u.str.len };
	t->nfqns += (size_t)fqn->u.str.len + 1;
	if (ckpt_strtab_insert(&t->by_fqn, (uint32_t)t->nkeys) != UINT32_MAX)
		return fail(t, fqn, "appears twice in state_dict_metadata");
	t->nkeys++;
	*out = k;
	return 0;
}

static int put_tensor_entry(struct tctx *t, const struct pk_value *fqn,
			    const struct pk_value *st)
{
	const struct pk_value *chunks = pk_dict_get(st, "chunks");
	uint64_t size[CKPT_MAX_DIMS], *d;
	struct sdm_key *key;
	enum ckpt_dtype dt;
	bool rg;
	unsigned n, k;
	uint32_t i;
	int rc;

	if (props_of(pk_dict_get(st, "properties"), &dt, &rg))
		return fail(t, fqn, "TensorStorageMetadata.properties is not a TensorProperties with a known dtype");
	if (dims_of(pk_dict_get(st, "size"), size, &n))
		return fail(t, fqn, "TensorStorageMetadata.size is not a torch.Size of at most 16 dims");
	if (!chunks || chunks->type != PK_LIST)
		return fail(t, fqn, "TensorStorageMetadata.chunks is not a list");
	rc = add_key(t, fqn, &key);
	if (rc)
		return rc;
	key->tensor = true;
	key->dtype = (uint8_t)dt;
	key->ndim = (uint8_t)n;
	key->dims = t->nkdims;
	key->nchunks = chunks->n;
	ckpt_mp_map(&t->wk, 5);
	ckpt_pack_cstr(&t->wk, "type");
	ckpt_pack_cstr(&t->wk, "tensor");
	ckpt_pack_cstr(&t->wk, "dtype");
	ckpt_pack_cstr(&t->wk, ckpt_dtype_name(dt));
	ckpt_pack_cstr(&t->wk, "requires_grad");
	ckpt_pack_bool(&t->wk, rg);
	ckpt_pack_cstr(&t->wk, "size");
	ckpt_pack_dims(&t->wk, size, n);
	ckpt_pack_cstr(&t->wk, "chunks");
	ckpt_mp_array(&t->wk, chunks->n);
	for (i = 0; i < chunks->n; i++) {
		const struct pk_value *c = state_of(chunks->u.items[i],
						    TG_CHUNK_MD);

		if (!c)
			return fail(t, fqn, "a chunk is not a ChunkStorageMetadata");
		/* grown as chunks prove to be chunks, not for the list's
		 * length at once; never NULL (a 0-dim tensor's are empty) */
		if (ckpt_grow((void **)&t->kdims, &t->kdims_cap,
			      t->nkdims + ((size_t)i + 1) * 2 * n + 1,
			      sizeof(*t->kdims)))
			return ckpt_errf(t->err, t->errlen, -ENOMEM,
					 "%s: out of memory", t->name);
		d = t->kdims + t->nkdims + (size_t)i * 2 * n;
		ckpt_mp_map(&t->wk, 2);
		if (dims_of(pk_dict_get(c, "offsets"), d, &k) || k != n)
			return fail(t, fqn, "a chunk's offsets are not a torch.Size of the tensor's rank");
		ckpt_pack_cstr(&t->wk, "offsets");
		ckpt_pack_dims(&t->wk, d, k);
		if (dims_of(pk_dict_get(c, "sizes"), d + n, &k) || k != n)
			return fail(t, fqn, "a chunk's sizes are not a torch.Size of the tensor's rank");
		ckpt_pack_cstr(&t->wk, "sizes");
		ckpt_pack_dims(&t->wk, d + n, k);
	}
	t->nkdims += (size_t)chunks->n * 2 * n;
	return 0;
}

/* One state_dict_metadata item: its entry into wk, its key into keys. */
static int consume_key(struct tctx *t, const struct pk_value *k,
		       const struct pk_value *v)
{
	const struct pk_value *st;
	struct sdm_key *key;
	int rc;

	if (k->type != PK_STR)
		return fail(t, NULL, "state_dict_metadata has a key that is not a string");
	ckpt_mp_str_with_body(&t->wk, k->u.str.s, k->u.str.len);
	if ((st = state_of(v, TG_TENSOR_MD)))
		return put_tensor_entry(t, k, st);
	if (!pk_is_call(v, TG_BYTES_MD))
		return fail(t, k, "value is neither TensorStorageMetadata nor BytesStorageMetadata");
	rc = add_key(t, k, &key);
	if (rc)
		return rc;
	ckpt_mp_map(&t->wk, 1);
	ckpt_pack_cstr(&t->wk, "type");
	ckpt_pack_cstr(&t->wk, "bytes");
	return 0;
}

static bool is_path(const struct pk_value *v)
{
	uint32_t i;

	if (!v || (v->type != PK_TUPLE && v->type != PK_LIST) || v->n == 0)
		return false;
	for (i = 0; i < v->n; i++) {
		const struct pk_value *c = v->u.items[i];

		if (c->type != PK_STR && !(c->type == PK_INT && c->u.i >= 0))
			return false;
	}
	return true;
}

/* One planner_data item (2.x: flat key -> path tuple), into wp when it
 * has that shape; other entries are planner-private. */
static void consume_planner(struct tctx *t, const struct pk_value *k,
			    const struct pk_value *p)
{
	uint32_t j;

	if (k->type != PK_STR || !is_path(p))
		return;
	put_key(&t->wp, k);
	ckpt_mp_array(&t->wp, p->n);
	for (j = 0; j < p->n; j++) {
		if (p->u.items[j]->type == PK_STR)
			put_key(&t->wp, p->u.items[j]);
		else
			ckpt_mp_uint64(&t->wp,
					    (uint64_t)p->u.items[j]->u.i);
	}
	t->npd++;
}

static void fqn_key(const void *ctx, uint32_t idx, uint64_t *seed,
		    const char **s, size_t *len)
{
	const struct tctx *t = ctx;
	const struct sdm_key *k = &t->keys[idx];

	*seed = 0;
	*s = t->fqns + k->fqn_at;
	*len = k->fqn_len;
}

/* The prefetched window of file fid holding [off, off + len), or NULL. */
static const struct pf_win *pf_find(const struct prefetch *pf, uint32_t fid,
				    uint64_t off, size_t len)
{
	size_t lo = 0, hi = pf ? pf->n : 0;

	while (lo < hi) {	/* the first window after (fid, off) */
		size_t mid = lo + (hi - lo) / 2;
		const struct pf_win *w = &pf->w[mid];

		if (w->fid < fid || (w->fid == fid && w->off <= off))
			lo = mid + 1;
		else
			hi = mid;
	}
	/* Windows may overlap (a record's head and tail): look back a few. */
	while (lo-- > 0) {
		const struct pf_win *w = &pf->w[lo];

		if (w->fid != fid)
			break;
		if (off >= w->off && off + len <= w->off + w->len)
			return w;
		if (w->off + pf->maxlen <= off)
			break;
	}
	return NULL;
}

/* tz_read_fn over a blob: from the prefetched windows (an object
 * store) or its window when that holds the bytes;
 * else a read at the record's start takes its whole head window, and one
 * that ends at the record's end continues a window further (the next
 * record's head), both kept in the window for the reads that follow. */
static int blob_read(void *ctx, uint64_t off, void *buf, size_t len)
{
	const struct blob *b = ctx;
	struct window *w = b->win;
	uint64_t at = b->base + off, want = len;
	const struct pf_win *p = pf_find(b->pf, b->id, at, len);
	int rc;

	if (p) {
		memcpy(buf, p->buf + (at - p->off), len);
		return 0;
	}
	if (w->valid && w->fid == b->id && at >= w->off &&
	    at - w->off <= w->len && len <= w->len - (at - w->off)) {
		memcpy(buf, w->buf + (at - w->off), len);
		return 0;
	}
	if (len > sizeof(w->buf) || at > b->fsize)
		return ckpt_store_pread(b->store, b->id, buf, len, at);
	if (off == 0 && want < TZ_WINDOW)
		want = b->len < TZ_WINDOW ? b->len : TZ_WINDOW;
	if (off + len == b->len)
		want = sizeof(w->buf);
	if (want > b->fsize - at)
		want = b->fsize - at;
	if (want < len)
		return ckpt_store_pread(b->store, b->id, buf, len, at);
	w->valid = false;
	rc = ckpt_store_pread(b->store, b->id, w->buf, (size_t)want, at);
	if (rc)
		return rc;
	w->valid = true;
	w->fid = b->id;
	w->off = at;
	w->len = (size_t)want;
	memcpy(buf, w->buf, len);
	return 0;
}

static int cmp_win(const void *a, const void *b)
{
	const struct pf_win *x = a, *y = b;

	if (x->fid != y->fid)
		return x->fid < y->fid ? -1 : 1;
	return x->off < y->off ? -1 : x->off > y->off;
}

static void pf_clear(struct prefetch *pf)
{
	free(pf->w);
	free(pf->mem);
	memset(pf, 0, sizeof(*pf));
}

/* Hint the windows w[0..n) (in record order) to a local store, joining
 * a window to the one before when they are near in the same file. */
static void pf_hint(struct ckpt_store *s, const struct pf_win *w, size_t n)
{
	uint64_t at = 0, len = 0;
	uint32_t fid = 0;
	size_t k;

	for (k = 0; k < n; k++) {
		if (len && w[k].fid == fid && w[k].off >= at &&
		    w[k].off <= at + len + TZ_WINDOW) {
			if (w[k].off + w[k].len - at > len)
				len = w[k].off + w[k].len - at;
			continue;
		}
		if (len)
			ckpt_store_willneed(s, fid, at, len);
		fid = w[k].fid;
		at = w[k].off;
		len = w[k].len;
	}
	if (len)
		ckpt_store_willneed(s, fid, at, len);
}

/*
 * Ask for the windows of storage records [first, first + PF_RECORDS) of
 * sd (see PF_RECORDS): hinted, or fetched into t->pf.  Best effort: a
 * record that does not parse, a file that does not open or a read that
 * fails leaves its windows out, and locating the record reads (and
 * reports) as usual.
 */
static void pf_fetch(struct tctx *t, size_t n, size_t extra);

/* The head and tail windows of the record [off, off + len) of file id,
 * as pf->w[*n...]. */
static void pf_add(struct prefetch *pf, size_t *n, uint32_t id, uint64_t off,
		   uint64_t len)
{
	/* tz_open reads a record of up to two windows whole */
	uint64_t head = len <= 2 * TZ_WINDOW ? len : TZ_WINDOW;

	pf->w[(*n)++] = (struct pf_win){ id, off, head, NULL };
	if (len > head)
		pf->w[(*n)++] = (struct pf_win){ id, off + len - TZ_WINDOW,
						 TZ_WINDOW, NULL };
}

/* The windows of storage_data items kv[0, 2 * npairs), at most
 * PF_RECORDS of them. */
static void pf_load(struct tctx *t, const struct pk_value *const *kv,
		    size_t npairs)
{
	struct prefetch *pf = &t->pf;
	size_t i, n = 0;

	pf_clear(pf);
	if (!t->store)
		return;
	pf->w = calloc(2 * npairs + 1, sizeof(*pf->w));
	if (!pf->w)
		return;
	for (i = 0; i < npairs; i++) {
		const struct pk_value *si = state_of(kv[2 * i + 1],
						     TG_STORAGE_INFO);
		const struct pk_value *path, *o, *l;
		struct ckpt_store_file_info fi;
		uint64_t off, len;
		uint32_t id;
		char *name;
		int rc;

		path = si ? pk_dict_get(si, "relative_path") : NULL;
		o = si ? pk_dict_get(si, "offset") : NULL;
		l = si ? pk_dict_get(si, "length") : NULL;
		if (!path || path->type != PK_STR || !o || o->type != PK_INT ||
		    o->u.i < 0 || !l || l->type != PK_INT || l->u.i <= 0 ||
		    !ckpt_relpath_is_safe(path->u.str.s, path->u.str.len))
			continue;
		name = strndup(path->u.str.s, path->u.str.len);
		rc = name ? ckpt_store_open(t->store, name, &id, &fi, NULL, 0) :
		     -ENOMEM;
		free(name);
		off = (uint64_t)o->u.i;
		len = (uint64_t)l->u.i;
		if (rc || off > fi.size || len > fi.size - off)
			continue;
		pf_add(pf, &n, id, off, len);
	}
	pf_fetch(t, n, 0);
}

/* The windows pf->w[0..n) asked for (see pf_load()), beside
 * pf->w[n..n + extra), whose bytes are there already (borrowed). */
static void pf_fetch(struct tctx *t, size_t n, size_t extra)
{
	struct prefetch *pf = &t->pf;
	struct ckpt_store_range *r = NULL;
	uint64_t at = 0;
	size_t k;

	if (!ckpt_store_parallelism(t->store)) {
		pf_hint(t->store, pf->w, n);
		goto out_keep_extra;
	}
	pf->mem = malloc(n ? n * 2 * TZ_WINDOW : 1);
	r = calloc(n ? n : 1, sizeof(*r));
	if (!pf->mem || !r)
		goto out_keep_extra;
	for (k = 0; k < n; k++) {
		pf->w[k].buf = pf->mem + at;
		r[k] = (struct ckpt_store_range){ pf->w[k].fid, pf->w[k].off,
						  pf->w[k].len, pf->w[k].buf };
		at += pf->w[k].len;
	}
	if (n && ckpt_store_read(t->store, r, n))
		goto out_keep_extra;
	free(r);
	n += extra;
	goto out_sort;
out_keep_extra:
	/* Best effort: what was not fetched is read when needed. */
	free(r);
	free(pf->mem);
	pf->mem = NULL;
	memmove(pf->w, pf->w + n, extra * sizeof(*pf->w));
	n = extra;
out_sort:
	qsort(pf->w, n, sizeof(*pf->w), cmp_win);
	pf->n = n;
	pf->maxlen = 0;
	for (k = 0; k < n; k++)
		if (pf->w[k].len > pf->maxlen)
			pf->maxlen = pf->w[k].len;
	if (!n)
		pf_clear(pf);
}

/* Make the record's file the current one. */
static int open_file(struct tctx *t, const struct pk_value *fqn,
		     const struct pk_value *path)
{
	struct ckpt_store_file_info fi;
	char *p;
	int rc;

	if (t->has_file && t->fd_path.len == path->u.str.len &&
	    !memcmp(t->fd_path.s, path->u.str.s, path->u.str.len))
		return 0;
	t->has_file = false;
	ckpt_st_set_free(&t->st);
	t->st_loaded = false;
	if (!ckpt_relpath_is_safe(path->u.str.s, path->u.str.len))
		return fail(t, fqn, "relative_path must be relative, inside the checkpoint, without '..' or NUL");
	p = strndup(path->u.str.s, path->u.str.len);
	if (!p)
		return ckpt_errf(t->err, t->errlen, -ENOMEM, "out of memory");
	rc = ckpt_files_open_one(t->store, p, fqn->u.str.s, fqn->u.str.len,
				 &t->fid, &fi, t->err, t->errlen);
	if (rc) {
		free(p);
		return rc;
	}
	t->has_file = true;
	free(t->fd_path.s);
	t->fd_path = (struct rel_path){ p, path->u.str.len };
	t->fsize = fi.size;
	return 0;
}

/* The chunk of key k whose offsets are off (n dims); *sizes set. */
static int chunk_sizes(const struct tctx *t, const struct sdm_key *k,
		       const uint64_t *off, unsigned n, int64_t hint,
		       uint64_t *sizes)
{
	uint32_t i, c;

	if (n != k->ndim)
		return -ENOENT;
	for (c = 0; c <= k->nchunks; c++) {
		const uint64_t *d;

		/* Try the record's own index first. */
		if (c == 0) {
			if (hint < 0 || hint >= k->nchunks)
				continue;
			i = (uint32_t)hint;
		} else {
			i = c - 1;
		}
		d = t->kdims + k->dims + (size_t)i * 2 * n;
		if (memcmp(d, off, n * sizeof(*d)))
			continue;
		memcpy(sizes, d + n, n * sizeof(*sizes));
		return 0;
	}
	return -ENOENT;
}

/* Where a located record's bytes are, as the native format says it. */
struct location {
	uint64_t offset, length;
	uint32_t crc32;		/* of [offset, offset + length); 0: none */
	bool strided;
	uint64_t strides[CKPT_MAX_DIMS];
	/* stored with transforms: [offset, +length) are the stored bytes */
	unsigned ntransforms;
	uint8_t transforms[CKPT_MAX_TRANSFORMS];
	uint64_t size;		/* bytes records: the decoded size */
	/* [guard_off, +guard_len): the zip local header right before the
	 * record's storage, which hashes to guard_xxh3; guard_len 0: none */
	uint64_t guard_off, guard_xxh3;
	uint32_t guard_len;
	/* not located (tctx.lazy): the archive [offset, +archive_len) */
	uint64_t archive_len;
	bool archive;
};

/* _StorageInfo.transform_descriptors: None, [], or descriptors ckptfs
 * decodes (model/transforms.h), into loc. */
static int read_transforms(struct tctx *t, const struct pk_value *fqn,
			   const struct pk_value *td, struct location *loc)
{
	enum ckpt_transform x;
	char why[256];
	uint32_t i;

	loc->ntransforms = 0;
	if (!td || td->type == PK_NONE)
		return 0;
	if (td->type != PK_LIST && td->type != PK_TUPLE)
		return fail(t, fqn, "_StorageInfo.transform_descriptors is not a list");
	if (td->n > CKPT_MAX_TRANSFORMS)
		return fail(t, fqn, "_StorageInfo.transform_descriptors has more than 4 transforms");
	for (i = 0; i < td->n; i++) {
		const struct pk_value *d = td->u.items[i];

		if (d->type != PK_STR)
			return fail(t, fqn, "_StorageInfo.transform_descriptors holds a non-string");
		if (ckpt_transform_parse(d->u.str.s, d->u.str.len, &x, why,
					 sizeof(why)))
			return fail(t, fqn, why);
		loc->transforms[i] = (uint8_t)x;
	}
	loc->ntransforms = td->n;
	return 0;
}

/* Open the file of the record at [boff, boff + blen) of path, which must
 * lie inside it; where gets "DIR/PATH: offset N: key 'K'" + suffix, b the
 * record's reader. */
static int open_record(struct tctx *t, const struct pk_value *fqn,
		       const struct pk_value *path, uint64_t boff,
		       uint64_t blen, const char *suffix, char *where,
		       size_t wlen, struct blob *b)
{
	int rc = open_file(t, fqn, path);
	size_t wat;

	if (rc)
		return rc;
	/* By hand, not snprintf: every record gets one, used on errors. */
	wat = 0;
	if (wlen)
		where[0] = '\0';
	ckpt_msg_put(where, wlen, &wat, t->dir, strlen(t->dir));
	ckpt_msg_put(where, wlen, &wat, "/", 1);
	ckpt_msg_put(where, wlen, &wat, path->u.str.s, path->u.str.len);
	ckpt_msg_put(where, wlen, &wat, ": offset ", 9);
	ckpt_msg_put_u64(where, wlen, &wat, boff);
	ckpt_msg_put(where, wlen, &wat, ": key '", 7);
	ckpt_msg_put(where, wlen, &wat, fqn->u.str.s,
		     fqn->u.str.len > FQN_SHOWN ? FQN_SHOWN : fqn->u.str.len);
	ckpt_msg_put(where, wlen, &wat, "'", 1);
	ckpt_msg_put(where, wlen, &wat, suffix, strlen(suffix));
	if (boff > t->fsize || blen > t->fsize - boff)
		return ckpt_errf(t->err, t->errlen, -EIO,
				 "%s: record of %" PRIu64 " bytes runs past the end of the %" PRIu64 "-byte file",
				 where, blen, t->fsize);
	b->store = t->store;
	b->id = t->fid;
	b->base = boff;
	b->pf = &t->pf;
	b->len = blen;
	b->fsize = t->fsize;
	b->win = &t->win;
	return 0;
}

/* A record stored with transforms: check that its stored bytes lie in the
 * file and start like a zstd frame.  Tensors are decoded on first read
 * (their archive is checked then); a bytes record is decoded now, once,
 * to learn its size. */
static int locate_stored(struct tctx *t, const struct pk_value *fqn,
			 const struct pk_value *path, bool tensor,
			 uint64_t boff, uint64_t blen, struct location *loc)
{
	uint8_t head[4];
	struct blob b;
	char where[512], why[512];
	int rc;

	rc = open_record(t, fqn, path, boff, blen, "", where, sizeof(where), &b);
	if (rc)
		return rc;
	if (blen < sizeof(head) || blob_read(&b, 0, head, sizeof(head)) ||
	    !ckpt_zstd_magic_ok(head, sizeof(head)))
		return ckpt_errf(t->err, t->errlen, -EINVAL,
				 "%s: record is said to be stored with %s, but is not a zstd frame",
				 where, ckpt_transform_name(loc->transforms[0]));
	loc->offset = boff;
	loc->length = blen;
	loc->strided = false;
	loc->crc32 = 0;
	loc->size = 0;
	if (tensor)
		return 0;
	rc = ckpt_decode_stored(blob_read, &b, blen, loc->transforms,
				loc->ntransforms,
				(uint64_t)CKPT_CACHE_MB << 20, CKPT_DECODE_ANY,
				NULL, NULL,
				&loc->size, why, sizeof(why));
	if (rc)
		return ckpt_errf(t->err, t->errlen, rc == -ENOMEM ? rc : -EINVAL,
				 "%s: bytes record stored with %s: %s", where,
				 ckpt_transform_name(loc->transforms[0]), why);
	return 0;
}

/* Locate the raw bytes of the tensor record at [boff, boff + blen) of
 * path, for the chunk of entry at offsets off, and check them against the
 * chunk: dtype, size, addressed elements inside the storage. */
/*
 * SerializationFormat.SAFETENSORS: the .distcp file ends with one
 * safetensors blob of the rank's tensors, keyed by FQN, starting at the
 * record's offset; the record's length is the tensor's byte size, not its
 * place.  The chunk's bytes are where the blob's header says, checked
 * against the metadata (dtype, size, and DCP_SHARDING_INFO's offsets).
 */
static int locate_in_safetensors(struct tctx *t, const char *fqn,
				 size_t fqn_len, uint64_t boff, uint64_t blen,
				 enum ckpt_dtype dt, const uint64_t *sizes,
				 const uint64_t *off, unsigned n,
				 const char *where, struct location *loc)
{
	const struct ckpt_st_tensor *st;
	char s1[256], s2[256];
	int rc;

	if (!t->st_loaded || t->st_base != boff) {
		ckpt_st_set_free(&t->st);
		t->st_loaded = false;
		rc = ckpt_st_read_blob(t->store, t->fid, boff, t->fsize, 0, where, &t->st,
				       t->err, t->errlen);
		if (rc)
			return rc;
		t->st_loaded = true;
		t->st_base = boff;
		t->variants |= CKPT_VARIANT_ST_PAYLOAD;
	}
	st = ckpt_st_find(&t->st, 0, t->st.nt, fqn, fqn_len);
	if (!st)
		return ckpt_errf(t->err, t->errlen, -EINVAL,
				 "%s: the safetensors blob there has no tensor of this key",
				 where);
	if (st->dtype != dt)
		return ckpt_errf(t->err, t->errlen, -EINVAL,
				 "%s: the safetensors blob stores %s, .metadata says %s",
				 where, ckpt_dtype_name(st->dtype),
				 ckpt_dtype_name(dt));
	if (st->ndim != n || memcmp(st->shape, sizes, n * sizeof(*sizes)))
		return ckpt_errf(t->err, t->errlen, -EINVAL,
				 "%s: the safetensors blob's shape %s is not the chunk's %s",
				 where, ckpt_fmt_dims(s1, sizeof(s1), st->shape, st->ndim),
				 ckpt_fmt_dims(s2, sizeof(s2), sizes, n));
	if (st->has_saved && memcmp(st->saved, off, n * sizeof(*off)))
		return ckpt_errf(t->err, t->errlen, -EINVAL,
				 "%s: DCP_SHARDING_INFO's saved_offsets %s are not the chunk's",
				 where, ckpt_fmt_dims(s1, sizeof(s1), st->saved, n));
	if (st->len != blen)
		return ckpt_errf(t->err, t->errlen, -EINVAL,
				 "%s: record length %" PRIu64 " is not the tensor's %" PRIu64 " bytes",
				 where, blen, st->len);
	loc->offset = st->foff;
	loc->length = st->len;
	loc->crc32 = 0;
	loc->strided = false;
	return 0;
}

/*
 * The guard of a tensor record (docs/format.md "zip_header"): the hash of
 * its zip local header, name and extra field, which lie right before the
 * storage's bytes.  A read checks it once per open (io/datafiles.c), so a
 * record moved within a rewritten archive that kept its size and times
 * fails with EIO rather than serving other bytes.
 */
static int put_guard(struct blob *b, uint64_t boff,
		     const struct torch_tensor_rec *r, const char *where,
		     struct location *loc, char *err, size_t errlen)
{
	uint64_t n = r->data_off - r->hdr_off;
	uint8_t *h;

	/* torch_record_locate() found data_off past hdr_off's header. */
	if (r->data_off < r->hdr_off || n > CKPT_GUARD_MAX)
		return ckpt_errf(err, errlen, -EINVAL,
				 "%s: zip local header of %" PRIu64 " bytes",
				 where, r->data_off - r->hdr_off);
	h = malloc(n ? n : 1);
	if (!h)
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	if (blob_read(b, r->hdr_off, h, n)) {
		free(h);
		return ckpt_errf(err, errlen, -EIO,
				 "%s: cannot read its zip local header", where);
	}
	loc->guard_off = boff + r->hdr_off;
	loc->guard_len = (uint32_t)n;
	loc->guard_xxh3 = XXH3_64bits(h, n);
	free(h);
	return 0;
}

static int locate_zip(struct tctx *t, const char *fqn, size_t fqn_len,
		      enum ckpt_dtype dt, const uint64_t *sizes,
		      const uint64_t *off, unsigned n, struct blob *b,
		      const char *where, struct location *loc);

static int locate_tensor(struct tctx *t, const struct pk_value *fqn,
			 const struct sdm_key *key, const uint64_t *off,
			 unsigned n, int64_t hint, const struct pk_value *path,
			 uint64_t boff, uint64_t blen, struct location *loc)
{
	uint64_t sizes[CKPT_MAX_DIMS];
	enum ckpt_dtype dt = (enum ckpt_dtype)key->dtype;
	struct blob b;
	char where[512], chunk[272];
	int rc;

	if (chunk_sizes(t, key, off, n, hint, sizes))
		return fail(t, fqn, "a storage record's offsets match no chunk");
	memcpy(chunk, " chunk ", 7);
	ckpt_fmt_dims(chunk + 7, sizeof(chunk) - 7, off, n);
	rc = open_record(t, fqn, path, boff, blen, chunk, where, sizeof(where),
			 &b);
	if (rc)
		return rc;
	return locate_zip(t, fqn->u.str.s, fqn->u.str.len, dt, sizes, off, n,
			  &b, where, loc);
}

/*
 * The tensor in the record b (a torch.save archive, or a safetensors
 * blob), checked against the chunk (dtype dt, sizes, at offsets off, n
 * dims): where it lies, into loc, with the guard of its zip local header.
 */
static int locate_zip(struct tctx *t, const char *fqn, size_t fqn_len,
		      enum ckpt_dtype dt, const uint64_t *sizes,
		      const uint64_t *off, unsigned n, struct blob *b,
		      const char *where, struct location *loc)
{
	struct torch_tensor_rec r;
	uint64_t numel = 1, base, at, len, boff = b->base, blen = b->len;
	bool rowmajor;
	unsigned d, isz;
	int rc;

	{
		uint8_t head[9] = { 0 };

		/* Not a zip: a safetensors blob (8-byte length, then '{')? */
		if (t->fsize - boff >= 4 && blob_read(b, 0, head, 4) == 0 &&
		    memcmp(head, "PK\3\4", 4) != 0) {
			if (t->fsize - boff < 9 || blob_read(b, 0, head, 9) ||
			    head[8] != '{')
				return ckpt_errf(t->err, t->errlen, -EINVAL,
						 "%s: record is not a torch.save zip archive (nor a safetensors blob)",
						 where);
			return locate_in_safetensors(t, fqn, fqn_len, boff,
						     blen, dt, sizes, off, n,
						     where, loc);
		}
	}
	rc = torch_record_locate(blob_read, b, blen, where, &r, t->err,
				 t->errlen);
	if (rc)
		return rc;
	if (r.dtype != dt)
		return ckpt_errf(t->err, t->errlen, -EINVAL,
				 "%s: data.pkl stores %s, .metadata says %s",
				 where, ckpt_dtype_name(r.dtype),
				 ckpt_dtype_name(dt));
	if (r.ndim != n || memcmp(r.size, sizes, n * sizeof(*sizes))) {
		char s1[256], s2[256];

		return ckpt_errf(t->err, t->errlen, -EINVAL,
				 "%s: data.pkl's size %s is not the chunk's %s",
				 where, ckpt_fmt_dims(s1, sizeof(s1), r.size, r.ndim),
				 ckpt_fmt_dims(s2, sizeof(s2), sizes, n));
	}
	isz = ckpt_dtype_size(dt);
	for (d = 0; d < n; d++) {
		if (__builtin_mul_overflow(numel, sizes[d], &numel))
			return ckpt_errf(t->err, t->errlen, -EOVERFLOW,
					 "%s: chunk has too many elements", where);
	}
	rowmajor = ckpt_strides_row_major(sizes, r.stride, n);
	/* All in range: the record lies in the file and the addressed
	 * elements in the record (torch_record_locate checked). */
	base = boff + r.data_off;
	at = base + r.storage_offset * isz;
	len = rowmajor ? numel * isz : r.data_len - r.storage_offset * isz;
	loc->offset = numel == 0 ? base : at;
	loc->length = len;
	/* The zip's CRC covers the whole storage: usable when the record is
	 * exactly that (torch writes 0 when it computes none). */
	loc->crc32 = loc->offset == base && len == r.data_len ? r.crc32 : 0;
	loc->strided = !rowmajor;
	rc = put_guard(b, boff, &r, where, loc, t->err, t->errlen);
	if (rc)
		return rc;
	memcpy(loc->strides, r.stride, n * sizeof(*r.stride));
	return 0;
}

/*
 * A tensor record of a torch.save archive [boff, boff + blen), not
 * located (tctx.lazy): the chunk's byte size stands as its length, the
 * archive's place as "archive", and ckpt_torch_locate() finds the tensor
 * inside when a read needs it.  Nothing is read now.  path_safe: what
 * note_path() found of the record's relative_path.
 */
static int lazy_tensor(struct tctx *t, const struct pk_value *fqn,
		       const struct sdm_key *key, const uint64_t *off,
		       unsigned n, int64_t hint, bool path_safe,
		       uint64_t boff, uint64_t blen, struct location *loc)
{
	uint64_t sizes[CKPT_MAX_DIMS], bytes;
	enum ckpt_dtype dt = (enum ckpt_dtype)key->dtype;
	unsigned d;

	if (chunk_sizes(t, key, off, n, hint, sizes))
		return fail(t, fqn, "a storage record's offsets match no chunk");
	if (!path_safe)
		return fail(t, fqn, "relative_path must be relative, inside the checkpoint, without '..' or NUL");
	bytes = ckpt_dtype_size(dt);
	for (d = 0; d < n; d++)
		if (__builtin_mul_overflow(bytes, sizes[d], &bytes))
			return fail(t, fqn, "chunk has too many elements");
	loc->offset = boff;
	loc->length = bytes;
	loc->crc32 = 0;
	loc->strided = false;
	loc->archive = true;
	loc->archive_len = blen;
	return 0;
}

/*
 * The record of fqn at offsets off (n dims) in archive [boff, +blen) of
 * path, as one of t->known located it: 0 and *loc (with its zip_header),
 * or -ENOENT (not located there, or without a zip_header to carry).
 */
static int known_location(const struct tctx *t, const struct pk_value *fqn,
			  const uint64_t *off, unsigned n,
			  const struct pk_value *path, uint64_t boff,
			  uint64_t blen, struct location *loc)
{
	size_t k;

	for (k = 0; k < t->nknown; k++) {
		const struct ckpt_meta *km = t->known[k];
		const struct ckpt_entry *e;
		uint32_t ci;

		e = ckpt_meta_find(km, fqn->u.str.s, fqn->u.str.len);
		if (!e || e->ndim != n)
			continue;
		for (ci = e->chunk_first; ci < e->chunk_first + e->nchunks;
		     ci++) {
			const struct ckpt_chunk *c = &km->chunks[ci];
			const uint64_t *st;
			const char *fp;

			if (n && memcmp(ckpt_chunk_offsets(km, c), off,
					n * sizeof(*off)))
				continue;
			if (ckpt_is_zrec(c->file) ||
			    !ckpt_chunk_is_located(km, ci))
				break;
			fp = km->strings + km->files[c->file].path;
			if (strlen(fp) != path->u.str.len ||
			    memcmp(fp, path->u.str.s, path->u.str.len) ||
			    c->foff < boff || c->foff - boff > blen ||
			    c->len > blen - (c->foff - boff))
				break;
			memset(loc, 0, sizeof(*loc));
			if (km->lazy && km->lazy[ci].guard_len) {
				loc->guard_off = km->lazy[ci].guard_off;
				loc->guard_len = km->lazy[ci].guard_len;
				loc->guard_xxh3 = km->lazy[ci].guard_xxh3;
			} else if (t->known_guard[k] &&
				   t->known_guard[k][ci] != UINT32_MAX) {
				const struct ckpt_guard *g =
					&km->guards[t->known_guard[k][ci]];

				loc->guard_off = g->off;
				loc->guard_len = g->len;
				loc->guard_xxh3 = g->xxh3;
			} else {
				break;	/* every record carries its header */
			}
			loc->offset = c->foff;
			loc->length = c->len;
			loc->crc32 = c->has_crc32 ? c->crc32 : 0;
			st = ckpt_chunk_strides(km, c);
			if (st && n) {
				loc->strided = true;
				memcpy(loc->strides, st, n * sizeof(*st));
			}
			return 0;
		}
	}
	return -ENOENT;
}

/* A record's location failed with rc: its messages name the key (as
 * open_record()'s "where"), so the last error's key is fqn too. */
static int located_key(const struct pk_value *fqn, int rc)
{
	ckpt_last_error_keyn(fqn->u.str.s, fqn->u.str.len);
	return rc;
}

/* A record's relative_path, kept for the stamp's "files": each once when
 * it is among the last PATHS_SEEN kept (a checkpoint's records cycle
 * through its few files), else put_file_stamps() removes the repeats.
 * Unsafe paths are not kept: their records fail.  *safe: path is known
 * safe (ckpt_relpath_is_safe()): kept now or before. */
#define PATHS_SEEN 64

static int note_path(struct tctx *t, const struct pk_value *path,
		     bool *safe)
{
	size_t i;
	char *s;

	*safe = true;
	for (i = t->npaths; i > 0 && t->npaths - i < PATHS_SEEN; i--) {
		const struct rel_path *p = &t->paths[i - 1];

		if (p->len == path->u.str.len &&
		    !memcmp(p->s, path->u.str.s, p->len))
			return 0;
	}
	if (!ckpt_relpath_is_safe(path->u.str.s, path->u.str.len)) {
		*safe = false;
		return 0;
	}
	if (ckpt_grow((void **)&t->paths, &t->paths_cap, t->npaths + 1,
		      sizeof(*t->paths)) ||
	    !(s = strndup(path->u.str.s, path->u.str.len)))
		return ckpt_errf(t->err, t->errlen, -ENOMEM,
				 "%s: out of memory", t->name);
	t->paths[t->npaths++] = (struct rel_path){ s, path->u.str.len };
	return 0;
}

static int put_record(struct tctx *t, const struct pk_value *key,
		      const struct pk_value *val, uint32_t ri)
{
	const struct pk_value *mi = state_of(key, TG_INDEX);
	const struct pk_value *si = state_of(val, TG_STORAGE_INFO);
	const struct pk_value *fqn, *offv, *idx, *path, *o, *l, *td;
	const struct sdm_key *sk;
	uint64_t off[CKPT_MAX_DIMS];
	struct location loc = { .guard_len = 0 };
	unsigned n = 0;
	uint32_t ei;
	bool tensor, path_safe;
	char what[96];
	int rc;

	if (!mi || !si) {
		snprintf(what, sizeof(what), "storage_data item %" PRIu32
			 " is not MetadataIndex -> _StorageInfo", ri);
		return fail(t, NULL, what);
	}
	fqn = pk_dict_get(mi, "fqn");
	if (!fqn || fqn->type != PK_STR)
		return fail(t, NULL, "MetadataIndex.fqn is not a string");
	offv = pk_dict_get(mi, "offset");
	idx = pk_dict_get(mi, "index");
	path = pk_dict_get(si, "relative_path");
	o = pk_dict_get(si, "offset");
	l = pk_dict_get(si, "length");
	td = pk_dict_get(si, "transform_descriptors");
	rc = read_transforms(t, fqn, td, &loc);
	if (rc)
		return rc;
	if (!path || path->type != PK_STR || !o || o->type != PK_INT ||
	    o->u.i < 0 || !l || l->type != PK_INT || l->u.i < 0)
		return fail(t, fqn, "_StorageInfo needs relative_path (str), offset and length (non-negative ints)");
	/* torch's storage_data: each saving rank's records in key order,
	 * so the key after the last record's is tried first. */
	ei = t->last_key + 1;
	if (ei >= t->nkeys || t->keys[ei].fqn_len != fqn->u.str.len ||
	    memcmp(t->fqns + t->keys[ei].fqn_at, fqn->u.str.s,
		   fqn->u.str.len))
		ei = ckpt_strtab_find(&t->by_fqn, 0, fqn->u.str.s,
				      fqn->u.str.len);
	if (ei == UINT32_MAX)
		return fail(t, fqn, "storage record for a key not in state_dict_metadata");
	t->last_key = ei;
	sk = &t->keys[ei];
	tensor = sk->tensor;
	rc = note_path(t, path, &path_safe);
	if (rc)
		return rc;
	if (tensor && (!offv || offv->type == PK_NONE ||
		       dims_of(offv, off, &n)))
		return fail(t, fqn, "MetadataIndex.offset of a tensor record is not a torch.Size");
	if (loc.ntransforms) {
		rc = locate_stored(t, fqn, path, tensor, (uint64_t)o->u.i,
				   (uint64_t)l->u.i, &loc);
		if (rc)
			return located_key(fqn, rc);
	} else if (tensor && t->lazy &&
		   !known_location(t, fqn, off, n, path, (uint64_t)o->u.i,
				   (uint64_t)l->u.i, &loc)) {
		/* located by an open before: written as the eager pass */
	} else if (tensor && t->lazy) {
		rc = lazy_tensor(t, fqn, sk, off, n,
				 idx && idx->type == PK_INT ? idx->u.i : -1,
				 path_safe, (uint64_t)o->u.i,
				 (uint64_t)l->u.i, &loc);
		if (rc)
			return located_key(fqn, rc);
	} else if (tensor) {
		rc = locate_tensor(t, fqn, sk, off, n,
				   idx && idx->type == PK_INT ? idx->u.i : -1,
				   path, (uint64_t)o->u.i, (uint64_t)l->u.i,
				   &loc);
		if (rc)
			return located_key(fqn, rc);
	} else {
		loc.offset = (uint64_t)o->u.i;
		loc.length = (uint64_t)l->u.i;
		loc.strided = false;
		loc.crc32 = 0;
	}
	ckpt_mp_map(&t->wr, 6 + loc.strided + (loc.crc32 != 0) +
			 (loc.guard_len != 0) + loc.archive +
			 (loc.ntransforms ? 2 + !tensor : 0));
	ckpt_pack_cstr(&t->wr, "fqn");
	put_key(&t->wr, fqn);
	ckpt_pack_cstr(&t->wr, "index");
	if (idx && idx->type == PK_INT && idx->u.i >= 0)
		ckpt_mp_uint64(&t->wr, (uint64_t)idx->u.i);
	else
		ckpt_mp_nil(&t->wr);
	ckpt_pack_cstr(&t->wr, "relative_path");
	put_key(&t->wr, path);
	ckpt_pack_cstr(&t->wr, "offsets");
	if (tensor)
		ckpt_pack_dims(&t->wr, off, n);
	else
		ckpt_mp_nil(&t->wr);
	ckpt_pack_cstr(&t->wr, "offset");
	ckpt_mp_uint64(&t->wr, loc.offset);
	ckpt_pack_cstr(&t->wr, "length");
	ckpt_mp_uint64(&t->wr, loc.length);
	if (loc.strided) {
		ckpt_pack_cstr(&t->wr, "strides");
		ckpt_pack_dims(&t->wr, loc.strides, n);
	}
	if (loc.crc32) {
		ckpt_pack_cstr(&t->wr, "crc32");
		ckpt_mp_uint64(&t->wr, loc.crc32);
	}
	if (loc.guard_len) {
		ckpt_pack_cstr(&t->wr, "zip_header");
		ckpt_mp_array(&t->wr, 3);
		ckpt_mp_uint64(&t->wr, loc.guard_off);
		ckpt_mp_uint64(&t->wr, loc.guard_len);
		ckpt_mp_uint64(&t->wr, loc.guard_xxh3);
	}
	if (loc.archive) {
		ckpt_pack_cstr(&t->wr, "archive");
		ckpt_mp_array(&t->wr, 2);
		ckpt_mp_uint64(&t->wr, loc.offset);
		ckpt_mp_uint64(&t->wr, loc.archive_len);
	}
	if (loc.ntransforms) {
		unsigned k;

		ckpt_pack_cstr(&t->wr, "transforms");
		ckpt_mp_array(&t->wr, loc.ntransforms);
		for (k = 0; k < loc.ntransforms; k++)
			ckpt_pack_cstr(&t->wr,
				       ckpt_transform_name(loc.transforms[k]));
		ckpt_pack_cstr(&t->wr, "payload");
		ckpt_pack_cstr(&t->wr, tensor ? "torch.save" : "raw");
		if (!tensor) {
			ckpt_pack_cstr(&t->wr, "size");
			ckpt_mp_uint64(&t->wr, loc.size);
		}
	}
	t->nrec++;
	return 0;
}

/* storage_data items kv[0, 2 * npairs): each record into wr, the
 * windows of PF_RECORDS at a time fetched first when they are located
 * now. */
static int consume_records(struct tctx *t, const struct pk_value *const *kv,
			   size_t npairs)
{
	size_t i;
	int rc = 0;

	t->keys_closed = true;
	for (i = 0; i < npairs; i++) {
		if (ckpt_is_cancelled()) {	/* between records */
			rc = ckpt_errf(t->err, t->errlen, -ECANCELED,
				       "%s: indexing cancelled", t->name);
			break;
		}
		if (i % PF_RECORDS == 0 && !t->lazy)
			pf_load(t, kv + 2 * i, npairs - i < PF_RECORDS ?
					       npairs - i : PF_RECORDS);
		rc = put_record(t, kv[2 * i], kv[2 * i + 1], t->nseen++);
		if (rc)
			break;
	}
	pf_clear(&t->pf);
	return rc;
}

static int cmp_path(const void *a, const void *b)
{
	const struct rel_path *x = a, *y = b;
	int c = memcmp(x->s, y->s, x->len < y->len ? x->len : y->len);

	return c ? c : (x->len > y->len) - (x->len < y->len);
}

/* One "files" entry of the stamp: the file's name, and its size and
 * version as the store gives them (ckpt_store_open()); one that cannot be
 * opened is stamped with size 0 and no version, and the record that needs
 * it fails with its reason. */
static void put_file_stamp(struct tctx *t, const char *name, size_t len)
{
	struct ckpt_store_file_info fi = { 0 };
	char *p = strndup(name, len);
	uint32_t id;

	if (!p || !t->store ||
	    ckpt_store_open(t->store, p, &id, &fi, NULL, 0))
		memset(&fi, 0, sizeof(fi));
	free(p);
	ckpt_mp_map(&t->w, 4);
	ckpt_pack_cstr(&t->w, "path");
	ckpt_mp_str_with_body(&t->w, name, len);
	ckpt_pack_cstr(&t->w, "size");
	ckpt_mp_uint64(&t->w, fi.size);
	ckpt_pack_cstr(&t->w, "version");
	ckpt_pack_cstr(&t->w, fi.version);
	ckpt_pack_cstr(&t->w, "ident");
	ckpt_pack_cstr(&t->w, fi.ident);
}

/*
 * The stamp's "files": every data file the records name (each once, in
 * name order) and the side files, each with its size and version, so a
 * mount can tell whether the index still describes the files that are
 * there (ckpt_torch_index_check()).
 */
static void put_file_stamps(struct tctx *t)
{
	size_t u = 0, i;

	if (t->npaths)	/* NULL with none: qsort's is nonnull */
		qsort(t->paths, t->npaths, sizeof(*t->paths), cmp_path);
	for (i = 0; i < t->npaths; i++)
		if (!u || cmp_path(&t->paths[u - 1], &t->paths[i]))
			t->paths[u++] = t->paths[i];
		else
			free(t->paths[i].s);
	t->npaths = u;
	if (t->lazy && !t->known)	/* never stored (open.c) */
		u = 0;
	ckpt_pack_cstr(&t->w, "files");
	ckpt_mp_array(&t->w, u + t->nside);
	for (i = 0; i < u; i++)
		put_file_stamp(t, t->paths[i].s, t->paths[i].len);
	for (i = 0; i < t->nside; i++)
		put_file_stamp(t, t->side[i], strlen(t->side[i]));
}

/* Big-endian v into the 8 bytes at p (a msgpack uint64's body). */
static void put_be64(uint8_t *p, uint64_t v)
{
	int i;

	for (i = 7; i >= 0; i--, v >>= 8)
		p[i] = (uint8_t)v;
}

static const char *const stream_roles[NROLES] = {
	"state_dict_metadata", "planner_data", "storage_data",
};

static int not_as_torch(struct tctx *t, unsigned role, const char *what)
{
	return ckpt_errf(t->err, t->errlen, -EINVAL,
			 "%s: %s %s: not a Metadata as torch writes it",
			 t->name, stream_roles[role], what);
}

/* Items kv[0, 2 * npairs) of role's dict, each into its part. */
static int consume(struct tctx *t, unsigned role,
		   const struct pk_value *const *kv, size_t npairs)
{
	size_t i;
	int rc = 0;

	switch (role) {
	case ROLE_SDM:
		for (i = 0; i < npairs && !rc; i++)
			rc = consume_key(t, kv[2 * i], kv[2 * i + 1]);
		return rc;
	case ROLE_PD:
		for (i = 0; i < npairs; i++)
			consume_planner(t, kv[2 * i], kv[2 * i + 1]);
		return 0;
	default:
		return consume_records(t, kv, npairs);
	}
}

/*
 * The pickle's state_dict_metadata, planner_data and storage_data as they
 * stream by (pk_stream), a SETITEMS batch at a time: nothing of them is
 * kept but the image's parts and the keys' sizes.  Records need their
 * keys, so a storage_data that comes first is declined (built whole and
 * read at the end, as is any dict that does not stream), as is every
 * storage_data of the eager pass.
 */
static int on_pairs(void *ctx, unsigned role, uint32_t dict,
		    const struct pk_value *const *kv, size_t npairs)
{
	struct tctx *t = ctx;

	if (!t->streamed[role]) {
		/* The eager pass fetches the windows of PF_RECORDS records
		 * at a time, more than a batch holds: it reads the records
		 * from the whole tree, as before. */
		if (role == ROLE_SD && (!t->streamed[ROLE_SDM] || !t->lazy))
			return 1;
		t->streamed[role] = dict;
	} else if (t->streamed[role] != dict) {
		return not_as_torch(t, role, "appears twice");
	}
	if (role == ROLE_SDM && t->keys_closed)
		return not_as_torch(t, role, "grows after storage_data began");
	return consume(t, role, kv, npairs);
}

/* The dicts that did not stream, read now from the tree: 0 or -errno. */
static int consume_rest(struct tctx *t, const struct pk_value *const *v)
{
	unsigned r;
	int rc = 0;

	for (r = 0; r < NROLES; r++) {
		if (t->streamed[r] && t->streamed[r] != pk_stream_id(v[r]))
			return not_as_torch(t, r, "is not the dict that streamed as it");
		if (pk_stream_id(v[r]) && v[r]->id != (int32_t)r)
			return not_as_torch(t, r, "is another role's dict");
	}
	for (r = 0; r < NROLES && !rc; r++)
		if (v[r] && !(v[r]->flags & PK_STREAMED))
			rc = consume(t, r, (const struct pk_value *const *)
					   v[r]->u.items, v[r]->n / 2);
	return rc;
}

/* Megatron-Core's side files as bytes entries ("state_dict_metadata",
 * "planner_data") or records (storage_data). */
static void put_side_entries(struct tctx *t, struct ckpt_mpout *w,
			     unsigned role)
{
	unsigned i;

	for (i = 0; i < t->nside; i++) {
		ckpt_pack_cstr(w, t->side[i]);
		if (role == ROLE_PD) {
			ckpt_mp_array(w, 1);
			ckpt_pack_cstr(w, t->side[i]);
			continue;
		}
		ckpt_mp_map(w, 1);
		ckpt_pack_cstr(w, "type");
		ckpt_pack_cstr(w, "bytes");
	}
}

static void put_side_records(struct tctx *t, struct ckpt_mpout *w)
{
	unsigned i;

	for (i = 0; i < t->nside; i++) {
		ckpt_mp_map(w, 6);
		ckpt_pack_cstr(w, "fqn");
		ckpt_pack_cstr(w, t->side[i]);
		ckpt_pack_cstr(w, "index");
		ckpt_mp_nil(w);
		ckpt_pack_cstr(w, "relative_path");
		ckpt_pack_cstr(w, t->side[i]);
		ckpt_pack_cstr(w, "offsets");
		ckpt_mp_nil(w);
		ckpt_pack_cstr(w, "offset");
		ckpt_mp_uint64(w, 0);
		ckpt_pack_cstr(w, "length");
		ckpt_mp_uint64(w, t->side_size[i]);
	}
}

/* The hash of the image in parts[0, n) from body_at of the first on
 * (the stamp's "image_xxh3"), written into the first at hash_at. */
static int hash_parts(struct ckpt_mpout *const *parts, size_t n,
		      size_t hash_at, size_t body_at)
{
	XXH3_state_t *st = XXH3_createState();
	size_t k;

	if (!st)
		return -ENOMEM;
	for (k = 0; k < n; k++)
		if (parts[k]->failed)
			goto out_nomem;
	(void)XXH3_64bits_reset(st);
	(void)XXH3_64bits_update(st, parts[0]->sb.data + body_at,
				 parts[0]->sb.size - body_at);
	for (k = 1; k < n; k++)
		if (parts[k]->sb.size)
			(void)XXH3_64bits_update(st, parts[k]->sb.data,
						 parts[k]->sb.size);
	put_be64((uint8_t *)parts[0]->sb.data + hash_at,
		 XXH3_64bits_digest(st));
	XXH3_freeState(st);
	return 0;
out_nomem:
	XXH3_freeState(st);
	return -ENOMEM;
}

/* parts[0, n) as *pc's pieces, each taken from its part (the empty ones
 * left out). */
static void take_pieces(struct ckpt_mpout *const *parts, size_t n,
			struct ckpt_torch_pieces *pc)
{
	size_t k;

	memset(pc, 0, sizeof(*pc));
	for (k = 0; k < n; k++) {
		if (parts[k]->sb.size) {
			pc->iov[pc->n].iov_base = parts[k]->sb.data;
			pc->iov[pc->n].iov_len = parts[k]->sb.size;
			pc->len += parts[k]->sb.size;
			pc->n++;
			parts[k]->sb.data = NULL;	/* pc's now */
		}
		ckpt_mpout_destroy(parts[k]);
		ckpt_mpout_init(parts[k]);
	}
}

void ckpt_torch_pieces_free(struct ckpt_torch_pieces *pc)
{
	int k;

	for (k = 0; k < pc->n; k++)
		free(pc->iov[k].iov_base);
	memset(pc, 0, sizeof(*pc));
}

/* The last piece (the records: most of the image) is grown in place to
 * the whole and moved to its end, and the others copied in front of it,
 * each freed as soon as it is copied: the image is never held twice. */
int ckpt_torch_pieces_join(struct ckpt_torch_pieces *pc, uint8_t **img,
			   size_t *imglen)
{
	size_t at = 0, tail;
	uint8_t *buf;
	int k;

	if (!pc->n) {
		*img = malloc(1);
		*imglen = 0;
		return *img ? 0 : -ENOMEM;
	}
	tail = pc->iov[pc->n - 1].iov_len;
	buf = realloc(pc->iov[pc->n - 1].iov_base, pc->len);
	if (!buf) {
		ckpt_torch_pieces_free(pc);
		return -ENOMEM;
	}
	pc->n--;	/* the last is buf now */
	memmove(buf + pc->len - tail, buf, tail);
	for (k = 0; k < pc->n; k++) {
		memcpy(buf + at, pc->iov[k].iov_base, pc->iov[k].iov_len);
		at += pc->iov[k].iov_len;
		free(pc->iov[k].iov_base);
	}
	*img = buf;
	*imglen = pc->len;
	memset(pc, 0, sizeof(*pc));
	return 0;
}

static int index_image(struct ckpt_store *s, const char *name,
		       const uint8_t *pkl, size_t len, bool lazy, bool spend,
		       const struct ckpt_meta *const *known,
		       uint32_t **known_guard, size_t nknown,
		       struct ckpt_torch_pieces *pieces, uint8_t **img,
		       size_t *imglen, char *err, size_t errlen)
{
	struct tctx t = { .dir = s ? ckpt_store_root(s) : ".", .name = name,
			  .store = s, .err = err, .errlen = errlen,
			  .lazy = lazy, .known = known,
			  .known_guard = known_guard, .nknown = nknown };
	struct pk_stream stream = { TG_METADATA, stream_roles, NROLES,
				    on_pairs, &t, spend };
	const struct pk_value *root, *st, *v[NROLES];
	struct ckpt_mpout hp, hs;
	struct ckpt_mpout *parts[] = { &t.w, &t.wk, &hp, &t.wp, &hs, &t.wr };
	struct ckpt_torch_pieces pc;
	_Static_assert(sizeof(parts) / sizeof(parts[0]) == CKPT_TORCH_PIECES,
		       "an image's pieces are its parts");
	struct pk_arena *arena = NULL;
	uint64_t pkl_xxh3 = XXH3_64bits(pkl, len);	/* before it is spent */
	size_t hash_at, body_at, i;
	bool has_pd;
	int rc;

	if (pieces)
		memset(pieces, 0, sizeof(*pieces));
	else
		*img = NULL, *imglen = 0;
	ckpt_mpout_init(&t.w);
	ckpt_mpout_init(&t.wk);
	ckpt_mpout_init(&t.wp);
	ckpt_mpout_init(&t.wr);
	ckpt_mpout_init(&hp);
	ckpt_mpout_init(&hs);
	if (ckpt_strtab_init(&t.by_fqn, 1024, fqn_key, &t)) {
		rc = ckpt_errf(err, errlen, -ENOMEM, "%s: out of memory", name);
		goto out_parts;
	}
	t.by_fqn_max = 1024;
	rc = pk_load_stream(pkl, len, torch_metadata_globals,
			    torch_metadata_nglobals, &stream, name,
			    (struct pk_value **)&root, &arena, err, errlen);
	if (rc)
		goto out_tab;
	st = state_of(root, TG_METADATA);
	v[ROLE_SDM] = pk_dict_get(st, "state_dict_metadata");
	v[ROLE_SD] = pk_dict_get(st, "storage_data");
	if (!st || !v[ROLE_SDM] || v[ROLE_SDM]->type != PK_DICT ||
	    !v[ROLE_SD] || v[ROLE_SD]->type != PK_DICT) {
		rc = fail(&t, NULL, "pickle is not a torch distributed checkpoint Metadata with state_dict_metadata and storage_data dicts");
		goto out_tab;
	}
	v[ROLE_PD] = pk_dict_get(st, "planner_data");
	if (v[ROLE_PD] && v[ROLE_PD]->type != PK_DICT)
		v[ROLE_PD] = NULL;	/* None in 1.13; planner-private otherwise */
	rc = consume_rest(&t, v);
	if (rc)
		goto out_tab;
	rc = find_side_files(&t);
	if (rc)
		goto out_tab;
	/* The keys' sizes served the records: not held while the image's
	 * parts are joined. */
	free(t.kdims);
	t.kdims = NULL;
	has_pd = v[ROLE_PD] || t.nside;
	ckpt_mp_map(&t.w, has_pd ? 6 : 5);
	ckpt_pack_cstr(&t.w, "format");
	ckpt_pack_cstr(&t.w, CKPT_FORMAT_NAME);
	ckpt_pack_cstr(&t.w, "version");
	ckpt_mp_uint64(&t.w, CKPT_FORMAT_VERSION);
	/* The stamp comes first, so a mount checks an index without walking
	 * it: the pickle's size and hash, each data file's identity, and a
	 * hash of every byte after the stamp (an edited record is caught).
	 * That hash is known only once the image is joined, so its
	 * fixed-width value (0xcf, 8 bytes) is filled in then; variants
	 * (seen while the records were written) stay a fixed-width byte
	 * (0xcc), as images have them.
	 * docs/format.md describes it. */
	ckpt_pack_cstr(&t.w, "source");
	ckpt_mp_map(&t.w, 7);
	ckpt_pack_cstr(&t.w, "format");
	ckpt_pack_cstr(&t.w, "torch-dcp");
	ckpt_pack_cstr(&t.w, "metadata_size");
	ckpt_mp_uint64(&t.w, len);
	ckpt_pack_cstr(&t.w, "metadata_xxh3");
	ckpt_mp_uint64(&t.w, pkl_xxh3);
	/* Every tensor record in a torch.save archive has its zip_header:
	 * an index without this was written before, and is not used. */
	ckpt_pack_cstr(&t.w, "guards");
	ckpt_mp_uint64(&t.w, CKPT_INDEX_GUARDS);
	ckpt_pack_cstr(&t.w, "variants");
	ckpt_mp_fix_uint8(&t.w, t.variants);
	put_file_stamps(&t);
	ckpt_pack_cstr(&t.w, "image_xxh3");
	hash_at = t.w.sb.size + 1;
	ckpt_mp_fix_uint64(&t.w, 0);
	body_at = t.w.sb.size;
	ckpt_pack_cstr(&t.w, "state_dict_metadata");
	ckpt_mp_map(&t.w, (uint32_t)(t.nkeys + t.nside));
	put_side_entries(&t, &t.w, ROLE_SDM);
	if (has_pd) {
		ckpt_pack_cstr(&hp, "planner_data");
		ckpt_mp_map(&hp, t.npd + t.nside);
		put_side_entries(&t, &hp, ROLE_PD);
	}
	ckpt_pack_cstr(&hs, "storage_data");
	ckpt_mp_array(&hs, t.nrec + t.nside);
	put_side_records(&t, &hs);
	rc = hash_parts(parts, sizeof(parts) / sizeof(parts[0]), hash_at,
			body_at);
	if (!rc) {
		take_pieces(parts, sizeof(parts) / sizeof(parts[0]), &pc);
		if (pieces)
			*pieces = pc;
		else
			rc = ckpt_torch_pieces_join(&pc, img, imglen);
	}
	if (rc)
		ckpt_errf(err, errlen, rc, "%s: out of memory", name);
out_tab:
	ckpt_strtab_destroy(&t.by_fqn);
out_parts:
	ckpt_mpout_destroy(&t.w);
	ckpt_mpout_destroy(&t.wk);
	ckpt_mpout_destroy(&t.wp);
	ckpt_mpout_destroy(&t.wr);
	ckpt_mpout_destroy(&hp);
	ckpt_mpout_destroy(&hs);
	ckpt_st_set_free(&t.st);
	pk_free(arena);
	free(t.keys);
	free(t.fqns);
	free(t.kdims);
	for (i = 0; i < t.npaths; i++)
		free(t.paths[i].s);
	free(t.paths);
	free(t.fd_path.s);
	return rc;
}

int ckpt_torch_index(struct ckpt_store *s, const char *name,
		     const uint8_t *pkl, size_t len, uint8_t **img,
		     size_t *imglen, char *err, size_t errlen)
{
	return index_image(s, name, pkl, len, false, false, NULL, NULL, 0,
			   NULL, img, imglen, err, errlen);
}

int ckpt_torch_index_lazy(struct ckpt_store *s, const char *name,
			  const uint8_t *pkl, size_t len, uint8_t **img,
			  size_t *imglen, char *err, size_t errlen)
{
	return index_image(s, name, pkl, len, true, false, NULL, NULL, 0,
			   NULL, img, imglen, err, errlen);
}

int ckpt_torch_index_spend(struct ckpt_store *s, const char *name,
			   uint8_t *pkl, size_t len, uint8_t **img,
			   size_t *imglen, char *err, size_t errlen)
{
	return index_image(s, name, pkl, len, true, true, NULL, NULL, 0,
			   NULL, img, imglen, err, errlen);
}

int ckpt_torch_index_pieces(struct ckpt_store *s, const char *name,
			    uint8_t *pkl, size_t len, bool spend,
			    struct ckpt_torch_pieces *pieces, char *err,
			    size_t errlen)
{
	static const struct ckpt_meta *const none[1] = { NULL };
	uint32_t *no_guards[1] = { NULL };

	return index_image(s, name, pkl, len, true, spend, none, no_guards,
			   0, pieces, NULL, NULL, err, errlen);
}

int ckpt_torch_index_merged(struct ckpt_store *s, const char *name,
			    const uint8_t *pkl, size_t len,
			    const struct ckpt_meta *const *known,
			    size_t nknown, uint8_t **img, size_t *imglen,
			    char *err, size_t errlen)
{
	uint32_t **gmap;
	size_t k;
	uint32_t g;
	int rc;

	gmap = calloc(nknown ? nknown : 1, sizeof(*gmap));
	if (!gmap)
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	for (k = 0; k < nknown; k++) {
		const struct ckpt_meta *km = known[k];

		if (!km->nguards)
			continue;
		gmap[k] = malloc(km->nchunks * sizeof(**gmap));
		if (!gmap[k]) {
			rc = ckpt_errf(err, errlen, -ENOMEM, "out of memory");
			goto out_free;
		}
		memset(gmap[k], 0xff, km->nchunks * sizeof(**gmap));
		for (g = 0; g < km->nguards; g++)
			if (km->guards[g].chunk < km->nchunks)
				gmap[k][km->guards[g].chunk] = g;
	}
	rc = index_image(s, name, pkl, len, true, false, known, gmap, nknown,
			 NULL, img, imglen, err, errlen);
out_free:
	for (k = 0; k < nknown; k++)
		free(gmap[k]);
	free(gmap);
	return rc;
}

/*
 * Locate pending chunk ci of m (its archive fetched into t->pf, or read
 * now): where its tensor lies, as the eager index would have found it,
 * with every check of locate_zip(); written into the chunk.
 */
static int locate_one(struct tctx *t, struct ckpt_meta *m, uint32_t ci)
{
	struct ckpt_chunk *c = &m->chunks[ci];
	const struct ckpt_lazy *lz = &m->lazy[ci];
	const struct ckpt_entry *e = ckpt_meta_chunk_entry(m, ci);
	const struct ckpt_file_open *f = &m->opened[c->file];
	const char *fqn = ckpt_entry_fqn(m, e);
	const uint64_t *off = ckpt_chunk_offsets(m, c);
	struct location loc = { .guard_len = 0 };
	struct blob b;
	char where[512], dims[256];
	int rc;

	snprintf(where, sizeof(where), "%s/%s: offset %" PRIu64 ": key '%.*s' chunk %s",
		 m->dir, m->strings + m->files[c->file].path, lz->boff,
		 FQN_SHOWN, fqn, ckpt_fmt_dims(dims, sizeof(dims), off,
					       e->ndim));
	if (t->fid != f->id) {
		ckpt_st_set_free(&t->st);
		t->st_loaded = false;
	}
	t->has_file = true;
	t->fid = f->id;
	t->fsize = f->size;
	if (lz->boff > f->size || lz->blen > f->size - lz->boff)
		return ckpt_errf(t->err, t->errlen, -EIO,
				 "%s: record of %" PRIu64 " bytes runs past the end of the %" PRIu64 "-byte file",
				 where, lz->blen, f->size);
	b = (struct blob){ .store = t->store, .id = f->id, .base = lz->boff,
			   .len = lz->blen, .fsize = f->size, .pf = &t->pf,
			   .win = &t->win };
	rc = locate_zip(t, fqn, e->fqn_len, (enum ckpt_dtype)e->dtype,
			ckpt_chunk_sizes(m, e, c), off, e->ndim, &b, where,
			&loc);
	if (rc)
		return rc;
	if (loc.offset > f->size || loc.length > f->size - loc.offset)
		return ckpt_errf(t->err, t->errlen, -EIO,
				 "%s: tensor bytes [%" PRIu64 ", +%" PRIu64 ") past the end of the file",
				 where, loc.offset, loc.length);
	if (loc.strided) {
		if (lz->strides_at == CKPT_NONE)
			return ckpt_errf(t->err, t->errlen, -EIO,
					 "%s: strided 0-d tensor", where);
		memcpy(m->dims + lz->strides_at, loc.strides,
		       e->ndim * sizeof(*loc.strides));
		c->strides_at = lz->strides_at;
	}
	m->lazy[ci].guard_off = loc.guard_off;
	m->lazy[ci].guard_len = loc.guard_len;
	m->lazy[ci].guard_xxh3 = loc.guard_xxh3;
	c->foff = loc.offset;
	c->len = loc.length;
	c->crc32 = loc.crc32;
	c->has_crc32 = loc.crc32 != 0;
	return 0;
}

_Static_assert(TZ_WINDOW == CKPT_LOCATE_WINDOW,
	       "joined reads fetch the windows locating reads");

int ckpt_torch_locate(struct ckpt_meta *m, const uint32_t *ci, size_t n,
		      const struct ckpt_fetched *pre, size_t npre)
{
	struct tctx t = { .dir = m->dir, .name = m->meta_path,
			  .store = m->store, .fid = UINT32_MAX };
	size_t i, k, nw = 0;
	uint64_t maxlen = 0;
	bool cancelled = false;
	char why[1024];

	if (!m->opened || !m->store)
		return -EBADF;	/* left pending: located once they are */
	for (i = 0; i < npre; i++)
		if (pre[i].len > maxlen)
			maxlen = pre[i].len;
	/* Every archive's head and tail in one batch, but those already
	 * fetched (best effort: what is not fetched is read, and
	 * reported, by locate_one()). */
	t.pf.w = calloc(2 * n + npre + 1, sizeof(*t.pf.w));
	if (t.pf.w) {
		for (i = 0; i < n; i++) {
			const struct ckpt_lazy *lz = &m->lazy[ci[i]];
			uint32_t file = m->chunks[ci[i]].file;
			const struct ckpt_file_open *f = &m->opened[file];
			size_t from = nw, end;

			if (lz->boff > f->size ||
			    lz->blen > f->size - lz->boff || !lz->blen)
				continue;
			pf_add(&t.pf, &nw, f->id, lz->boff, lz->blen);
			end = nw;
			nw = from;
			for (k = from; k < end; k++)
				if (!ckpt_fetched_find(pre, npre, maxlen, file,
						       t.pf.w[k].off,
						       t.pf.w[k].len))
					t.pf.w[nw++] = t.pf.w[k];
		}
		for (i = 0; i < npre; i++)
			t.pf.w[nw + i] = (struct pf_win){
				m->opened[pre[i].file].id, pre[i].off,
				pre[i].len, pre[i].buf };
		pf_fetch(&t, nw, npre);
	}
	for (i = 0; i < n; i++) {
		int rc;

		why[0] = '\0';
		t.err = why;
		t.errlen = sizeof(why);
		rc = locate_one(&t, m, ci[i]);
		if (rc && ckpt_is_cancelled()) {
			/* Cancelled, not broken: left pending for a later
			 * call (the handle stays usable). */
			cancelled = true;
			continue;
		}
		if (rc) {
			if (!why[0])
				snprintf(why, sizeof(why), "%s: %s",
					 m->meta_path, strerror(-rc));
			pthread_mutex_lock(&m->locate_lock);
			free(m->locate_err[ci[i]]);
			m->locate_err[ci[i]] = strdup(why);
			pthread_mutex_unlock(&m->locate_lock);
		}
		__atomic_store_n((uint8_t *)&m->located[ci[i]],
				 rc ? CKPT_LOC_FAILED : CKPT_LOC_DONE,
				 __ATOMIC_RELEASE);
	}
	pf_clear(&t.pf);
	ckpt_st_set_free(&t.st);
	return cancelled ? -ECANCELED : 0;
}

/* What an index's source map says (see ckpt_torch_index()). */
struct source {
	uint64_t size, hash, variants, image_hash;
	uint64_t guards;		/* CKPT_INDEX_GUARDS, or 0 (older) */
	bool has_hash, has_image_hash, has_files;
	struct mp_cursor files;		/* at the "files" array */
	size_t body_at;			/* the image's bytes after the map */
};

/* The image's source map into *src; false when it has none. */
static bool read_source(const uint8_t *img, size_t imglen,
			struct source *src)
{
	struct mp_cursor c = { img, img + imglen }, s;
	const char *k;
	uint32_t n, m, i, j, kl;

	memset(src, 0, sizeof(*src));
	src->size = UINT64_MAX;
	if (mp_read_map(&c, &n))
		return false;
	for (i = 0; i < n; i++) {
		if (mp_read_str(&c, &k, &kl))
			return false;
		if (kl != 6 || memcmp(k, "source", 6)) {
			if (mp_skip(&c))
				return false;
			continue;
		}
		s = c;
		if (mp_skip(&c))
			return false;
		src->body_at = (size_t)((const uint8_t *)c.p - img);
		if (mp_read_map(&s, &m))
			return false;
		for (j = 0; j < m; j++) {
			if (mp_read_str(&s, &k, &kl))
				return false;
			if (kl == 13 && !memcmp(k, "metadata_size", 13)) {
				if (mp_read_uint(&s, &src->size))
					return false;
			} else if (kl == 13 && !memcmp(k, "metadata_xxh3", 13)) {
				if (mp_read_uint(&s, &src->hash))
					return false;
				src->has_hash = true;
			} else if (kl == 8 && !memcmp(k, "variants", 8)) {
				if (mp_read_uint(&s, &src->variants))
					return false;
			} else if (kl == 6 && !memcmp(k, "guards", 6)) {
				if (mp_read_uint(&s, &src->guards))
					return false;
			} else if (kl == 10 && !memcmp(k, "image_xxh3", 10)) {
				if (mp_read_uint(&s, &src->image_hash))
					return false;
				src->has_image_hash = true;
			} else if (kl == 5 && !memcmp(k, "files", 5)) {
				src->files = s;
				src->has_files = true;
				if (mp_skip(&s))
					return false;
			} else if (mp_skip(&s)) {
				return false;
			}
		}
		return true;
	}
	return false;
}

bool ckpt_torch_index_matches(const uint8_t *img, size_t imglen,
			      const uint8_t *pkl, size_t len)
{
	struct source src;

	return read_source(img, imglen, &src) && src.has_hash &&
	       src.size == len && src.hash == XXH3_64bits(pkl, len);
}

/* One stamped file against the file there now (opened through the
 * store, which then reads that very file): 0, or -ESTALE with err. */
static int check_file(const struct ckpt_index_check *ic, const char *path,
		      uint64_t size, const char *version, const char *ident,
		      char *err, size_t errlen)
{
	struct ckpt_store_file_info now;
	char why[512];
	uint32_t id;
	int rc = ckpt_store_open(ic->store, path, &id, &now, why, sizeof(why));

	if (rc)
		return ckpt_errf(err, errlen, -ESTALE,
				 "%s: stale: %s; run 'ckptfs index %s' again",
				 ic->index_path, why, ic->dir);
	if (now.size != size || strcmp(now.version, version))
		return ckpt_errf(err, errlen, -ESTALE,
				 "%s: stale: %s/%s is %" PRIu64 " bytes, version %s, but the index was built from %" PRIu64 " bytes, version %s; run 'ckptfs index %s' again",
				 ic->index_path, ic->dir, path, now.size,
				 now.version, size,
				 version[0] ? version : "(unreadable)", ic->dir);
	/* The node-local cache also compares what a copy does not keep and
	 * no user can set back (inode, ctime): its image is never moved. */
	if (ic->strict && (!ident || strcmp(now.ident, ident)))
		return ckpt_errf(err, errlen, -ESTALE,
				 "%s: stale: %s/%s is file %s now, but the index was built from file %s",
				 ic->index_path, ic->dir, path, now.ident,
				 ident ? ident : "(not recorded)");
	return 0;
}

/* Every file of the stamp's "files" array against the files there now. */
static int check_files(const struct ckpt_index_check *ic,
		       struct mp_cursor c, char *err, size_t errlen)
{
	uint32_t n, i, m, j, kl, pl = 0, vl = 0, il = 0;
	const char *k, *p = NULL, *v = NULL, *id = NULL;
	char path[4096], version[CKPT_STORE_VERSION_MAX];
	char ident[CKPT_STORE_VERSION_MAX];
	uint64_t size = UINT64_MAX;
	int rc;

	if (mp_read_array(&c, &n))
		goto bad;
	ckpt_store_list_ahead(ic->store, n);
	for (i = 0; i < n; i++) {
		if (mp_read_map(&c, &m))
			goto bad;
		for (j = 0; j < m; j++) {
			if (mp_read_str(&c, &k, &kl))
				goto bad;
			if (kl == 4 && !memcmp(k, "path", 4)) {
				if (mp_read_str(&c, &p, &pl))
					goto bad;
			} else if (kl == 4 && !memcmp(k, "size", 4)) {
				if (mp_read_uint(&c, &size))
					goto bad;
			} else if (kl == 7 && !memcmp(k, "version", 7)) {
				if (mp_read_str(&c, &v, &vl))
					goto bad;
			} else if (kl == 5 && !memcmp(k, "ident", 5)) {
				if (mp_read_str(&c, &id, &il))
					goto bad;
			} else if (mp_skip(&c)) {
				goto bad;
			}
		}
		if (!p || !v || size == UINT64_MAX || pl >= sizeof(path) ||
		    vl >= sizeof(version) || il >= sizeof(ident) ||
		    !ckpt_relpath_is_safe(p, pl))
			goto bad;
		memcpy(path, p, pl);
		path[pl] = '\0';
		memcpy(version, v, vl);
		version[vl] = '\0';
		if (id) {
			memcpy(ident, id, il);
			ident[il] = '\0';
		}
		rc = check_file(ic, path, size, version, id ? ident : NULL,
				err, errlen);
		if (rc)
			return rc;
		p = v = id = NULL;
		il = 0;
		size = UINT64_MAX;
	}
	return 0;
bad:
	return ckpt_errf(err, errlen, -ESTALE,
			 "%s: its stamp's list of data files is malformed; run 'ckptfs index %s' again",
			 ic->index_path, ic->dir);
}

/* ckpt_torch_index_check(), and with whole false, of an image's head
 * (what its stamp needs: not its body's hash); the image hash its stamp
 * records into *image_hash. */
static int check_stamp(const struct ckpt_index_check *ic, const uint8_t *img,
		       size_t imglen, bool whole, uint64_t *image_hash,
		       char *err, size_t errlen)
{
	uint64_t want;
	struct source src;

	if (!read_source(img, imglen, &src) || !src.has_hash)
		return ckpt_errf(err, errlen, -ESTALE,
				 "%s: not a ckptfs index of a torch checkpoint (no source stamp); run 'ckptfs index %s' again",
				 ic->index_path, ic->dir);
	want = ic->has_pkl_xxh3 ? ic->pkl_xxh3 :
				  XXH3_64bits(ic->pkl, ic->pkl_len);
	if (src.size != ic->pkl_len || src.hash != want)
		return ckpt_errf(err, errlen, -ESTALE,
				 "%s: index was not built from %s as it is now (it was built from %" PRIu64 " bytes with xxh3 %016" PRIx64 ", the file has %zu bytes with xxh3 %016" PRIx64 "); run 'ckptfs index %s' again",
				 ic->index_path, ic->meta_path, src.size,
				 src.hash, ic->pkl_len, want, ic->dir);
	if (!src.has_files || !src.has_image_hash)
		return ckpt_errf(err, errlen, -ESTALE,
				 "%s: written by an older ckptfs, without the stamp of its data files; run 'ckptfs index %s' again",
				 ic->index_path, ic->dir);
	if (src.guards < CKPT_INDEX_GUARDS)
		return ckpt_errf(err, errlen, -ESTALE,
				 "%s: written by an older ckptfs, before records carried their zip_header (the check that a record has not moved in its archive); rebuild it with 'ckptfs index %s'",
				 ic->index_path, ic->dir);
	want = whole ? XXH3_64bits(img + src.body_at, imglen - src.body_at) :
		       src.image_hash;
	if (want != src.image_hash)
		return ckpt_errf(err, errlen, -ESTALE,
				 "%s: edited: its records hash to %016" PRIx64 ", not to the %016" PRIx64 " its stamp recorded; run 'ckptfs index %s' again",
				 ic->index_path, want, src.image_hash, ic->dir);
	if (image_hash)
		*image_hash = src.image_hash;
	return check_files(ic, src.files, err, errlen);
}

int ckpt_torch_index_check(const struct ckpt_index_check *ic,
			   const uint8_t *img, size_t imglen, char *err,
			   size_t errlen)
{
	return check_stamp(ic, img, imglen, true, NULL, err, errlen);
}

int ckpt_torch_index_check_head(const struct ckpt_index_check *ic,
				const uint8_t *head, size_t len,
				uint64_t *image_hash, char *err,
				size_t errlen)
{
	return check_stamp(ic, head, len, false, image_hash, err, errlen);
}

bool ckpt_torch_index_has_stamp(const uint8_t *img, size_t imglen)
{
	struct source src;

	return read_source(img, imglen, &src);
}

bool ckpt_torch_index_image_hash(const uint8_t *img, size_t imglen,
				 uint64_t *image_hash)
{
	struct source src;

	if (!read_source(img, imglen, &src) || !src.has_image_hash)
		return false;
	*image_hash = src.image_hash;
	return true;
}

uint8_t ckpt_torch_index_variants(const uint8_t *img, size_t imglen)
{
	struct source src;

	if (!read_source(img, imglen, &src))
		return 0;
	return (uint8_t)(src.variants & CKPT_VARIANT_ST_PAYLOAD);
}

int ckpt_torch_rank_index_pack(const struct ckpt_rank_image *r, size_t n,
			       uint8_t **out, size_t *outlen)
{
	struct ckpt_mpout w;
	size_t i;
	int rc;

	if (n > UINT32_MAX)
		return -ENOMEM;
	ckpt_mpout_init(&w);
	ckpt_mp_map(&w, 3);
	ckpt_pack_cstr(&w, "format");
	ckpt_pack_cstr(&w, CKPT_RANK_INDEX_FORMAT);
	ckpt_pack_cstr(&w, "version");
	ckpt_mp_uint64(&w, 1);
	ckpt_pack_cstr(&w, "ranks");
	ckpt_mp_array(&w, (uint32_t)n);
	for (i = 0; i < n; i++) {
		ckpt_mp_map(&w, 2);
		ckpt_pack_cstr(&w, "rank");
		ckpt_mp_uint64(&w, r[i].rank);
		ckpt_pack_cstr(&w, "index");
		ckpt_mp_bin(&w, r[i].len);
		ckpt_mp_bin_body(&w, r[i].img, r[i].len);
	}
	rc = ckpt_mpout_finish(&w, out, outlen);
	ckpt_mpout_destroy(&w);
	return rc;
}

static bool key_is(const char *k, uint32_t kl, const char *want)
{
	return kl == strlen(want) && !memcmp(k, want, kl);
}

/* The "ranks" array of a rank-local index at c, into r[0..*n). */
static int rank_entries(struct mp_cursor *c, struct ckpt_rank_image **out,
			size_t *nout)
{
	struct ckpt_rank_image *r;
	uint32_t n, i, m, j, kl, bl;
	const char *k;
	bool has_rank, has_img;

	if (mp_read_array(c, &n))
		return -EBADMSG;
	r = calloc(n ? n : 1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		has_rank = has_img = false;
		if (mp_read_map(c, &m))
			goto bad;
		for (j = 0; j < m; j++) {
			if (mp_read_str(c, &k, &kl))
				goto bad;
			if (key_is(k, kl, "rank")) {
				if (mp_read_uint(c, &r[i].rank))
					goto bad;
				has_rank = true;
			} else if (key_is(k, kl, "index")) {
				if (mp_read_bin(c, &r[i].img, &bl))
					goto bad;
				r[i].len = bl;
				has_img = true;
			} else if (mp_skip(c)) {
				goto bad;
			}
		}
		if (!has_rank || !has_img || (i && r[i].rank <= r[i - 1].rank))
			goto bad;
	}
	*out = r;
	*nout = n;
	return 0;
bad:
	free(r);
	return -EBADMSG;
}

/* Walks buf's top-level map: the rank entries when out is not NULL. */
static int rank_index_read(const uint8_t *buf, size_t len,
			   struct ckpt_rank_image **out, size_t *n)
{
	struct mp_cursor c = { buf, buf + len }, ranks = { NULL, NULL };
	const char *k, *v;
	uint32_t m, i, kl, vl;
	uint64_t ver = 0;
	bool fmt = false;

	if (mp_read_map(&c, &m))
		return -EBADMSG;
	for (i = 0; i < m; i++) {
		if (mp_read_str(&c, &k, &kl))
			return -EBADMSG;
		if (key_is(k, kl, "format")) {
			if (mp_read_str(&c, &v, &vl))
				return -EBADMSG;
			fmt = key_is(v, vl, CKPT_RANK_INDEX_FORMAT);
		} else if (key_is(k, kl, "version")) {
			if (mp_read_uint(&c, &ver))
				return -EBADMSG;
		} else if (key_is(k, kl, "ranks")) {
			ranks = c;
			if (mp_skip(&c))
				return -EBADMSG;
		} else if (mp_skip(&c)) {
			return -EBADMSG;
		}
	}
	if (!fmt || ver != 1 || !ranks.p)
		return -EBADMSG;
	return out ? rank_entries(&ranks, out, n) : 0;
}

bool ckpt_torch_is_rank_index(const uint8_t *buf, size_t len)
{
	return rank_index_read(buf, len, NULL, NULL) == 0;
}

int ckpt_torch_rank_index_parse(const uint8_t *buf, size_t len,
				struct ckpt_rank_image **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	return rank_index_read(buf, len, out, n);
}
