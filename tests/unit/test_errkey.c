/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the key as a field of every error (issue 18 item 6): a
 * checkpoint refused at open (native msgpack, a torch .metadata pickle,
 * safetensors) or a layout refused at bind leaves the key the message
 * names in ckpt_last_error_get().key, with the code, whatever the
 * checkpoint's path says.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckptfs.h"
#include "ckptdir.h"
#include "common/errbuf.h"
#include "model/layout.h"
#include "testhelp.h"

/* What a chunk or a record of the one tensor key looks like. */
struct nat {
	const char *key;	/* the key in state_dict_metadata */
	const char *dtype;
	uint64_t shape[2];
	uint64_t off[2], size[2];	/* its one chunk */
	const char *rec_key;	/* the record's fqn (NULL: key) */
};

/* A native .metadata of one float tensor n->key with one chunk, stored in
 * "data" (which is written, big enough). */
static void put_native(const char *dir, const struct nat *n)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	uint64_t len = 4 * n->size[0] * n->size[1];
	char *zero;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	mb_header(&pk, 1);
	mb_str(&pk, n->key);
	msgpack_pack_map(&pk, 4);
	mb_str(&pk, "type");
	mb_str(&pk, "tensor");
	mb_str(&pk, "dtype");
	mb_str(&pk, n->dtype ? n->dtype : "float32");
	mb_str(&pk, "size");
	mb_dims(&pk, n->shape, 2);
	mb_str(&pk, "chunks");
	msgpack_pack_array(&pk, 1);
	msgpack_pack_map(&pk, 2);
	mb_str(&pk, "offsets");
	mb_dims(&pk, n->off, 2);
	mb_str(&pk, "sizes");
	mb_dims(&pk, n->size, 2);
	mb_str(&pk, "storage_data");
	msgpack_pack_array(&pk, 1);
	msgpack_pack_map(&pk, 5);
	mb_str(&pk, "fqn");
	mb_str(&pk, n->rec_key ? n->rec_key : n->key);
	mb_str(&pk, "offsets");
	mb_dims(&pk, n->off, 2);
	mb_str(&pk, "relative_path");
	mb_str(&pk, "data");
	mb_str(&pk, "offset");
	msgpack_pack_uint64(&pk, 0);
	mb_str(&pk, "length");
	msgpack_pack_uint64(&pk, len);
	CHECK(cd_put(dir, ".metadata", sb.data, sb.size) == 0);
	msgpack_sbuffer_destroy(&sb);
	zero = calloc(1, len ? len : 1);
	CHECK(zero && cd_put(dir, "data", zero, len) == 0);
	free(zero);
}

/* Open dir: it must fail with code and key; the message is returned in
 * e for further checks. */
static void refused(const char *dir, int code, const char *key,
		    struct ckpt_error *e)
{
	struct ckpt_meta *m = NULL;
	char err[CKPT_ERROR_TEXT];
	int rc;

	rc = ckpt_meta_open(dir, &m, err, sizeof(err));
	ckpt_last_error_get(e);
	CHECK(rc == -code);
	CHECK(m == NULL);
	CHECK(e->code == code);
	if (strcmp(e->key, key))
		fprintf(stderr, "  key '%s', want '%s' (%s)\n", e->key, key,
			e->message);
	CHECK(strcmp(e->key, key) == 0);
	CHECK(strcmp(e->message, err) == 0);
	ckpt_meta_free(m);
}

static const struct nat good = {
	"a.b", NULL, { 4, 8 }, { 0, 0 }, { 4, 8 }, NULL
};

static void test_native(void)
{
	struct ckpt_error e;
	struct nat n;
	char *d = cd_new();

	n = good;			/* the chunk lies outside the shape */
	n.off[0] = 2;
	put_native(d, &n);
	refused(d, EINVAL, "a.b", &e);
	CHECK(strstr(e.message, "key 'a.b': chunk [2,0]+[4,8] lies outside"));

	n = good;			/* a gap: the tiling check */
	n.size[0] = 2;
	put_native(d, &n);
	refused(d, EINVAL, "a.b", &e);
	CHECK(strstr(e.message, "the tiling has a gap"));

	n = good;			/* named by the entry's "where" */
	n.dtype = "float99";
	put_native(d, &n);
	refused(d, EINVAL, "a.b", &e);
	CHECK(strstr(e.message, "key 'a.b': unknown dtype 'float99'"));

	n = good;			/* a record of a key not in the dict */
	n.rec_key = "no.such";
	put_native(d, &n);
	refused(d, EINVAL, "no.such", &e);
	CHECK(strstr(e.message, "record for unknown key 'no.such'"));

	n = good;			/* not UTF-8: the raw bytes */
	n.key = "a.\xff";
	put_native(d, &n);
	refused(d, EINVAL, "a.\xff", &e);
	CHECK(strstr(e.message, "'a.\\xff' is not valid UTF-8"));

	n = good;			/* an error that names no key */
	put_native(d, &n);
	CHECK(cd_put(d, ".metadata", "\x81\xa6" "format\xa1x", 10) == 0);
	refused(d, EINVAL, "", &e);
	cd_remove(d);
}

/* A key longer than the field: cut, at a UTF-8 character boundary. */
static void test_long_key(void)
{
	char key[CKPT_ERROR_TEXT + 64], want[CKPT_ERROR_TEXT];
	struct ckpt_error e;
	struct nat n = good;
	char *d = cd_new();
	size_t i;

	/* "é" is 2 bytes: 4095 bytes of them would split one. */
	for (i = 0; i + 2 < sizeof(key); i += 2)
		memcpy(key + i, "\xc3\xa9", 2);
	key[i] = '\0';
	memcpy(want, key, CKPT_ERROR_TEXT - 2);
	want[CKPT_ERROR_TEXT - 2] = '\0';
	n.key = key;
	n.off[0] = 2;
	put_native(d, &n);
	refused(d, EINVAL, want, &e);
	cd_remove(d);
}

/* pickle BINUNICODE (X) of s */
static size_t pk_str(uint8_t *p, const char *s)
{
	uint32_t n = (uint32_t)strlen(s);

	p[0] = 'X';
	p[1] = (uint8_t)n;
	p[2] = (uint8_t)(n >> 8);
	p[3] = (uint8_t)(n >> 16);
	p[4] = (uint8_t)(n >> 24);
	memcpy(p + 5, s, n);
	return 5 + n;
}

static size_t pk_raw(uint8_t *p, const char *s)
{
	memcpy(p, s, strlen(s));
	return strlen(s);
}

#define DCP_MD "ctorch.distributed.checkpoint.metadata\n"

/*
 * A torch .metadata: Metadata(state_dict_metadata={key:
 * TensorStorageMetadata(properties=None, size=None, chunks=[])},
 * storage_data={}), protocol 2, by hand.
 */
static void test_torch(void)
{
	uint8_t p[1024];
	size_t n = 0;
	struct ckpt_error e;
	char *d = cd_new();

	n += pk_raw(p + n, "\x80\x02" DCP_MD "Metadata\n)\x81}(");
	n += pk_str(p + n, "state_dict_metadata");
	n += pk_raw(p + n, "}");
	n += pk_str(p + n, "a.b");
	n += pk_raw(p + n, DCP_MD "TensorStorageMetadata\n)\x81}(");
	n += pk_str(p + n, "properties");
	n += pk_raw(p + n, "N");
	n += pk_str(p + n, "size");
	n += pk_raw(p + n, "N");
	n += pk_str(p + n, "chunks");
	n += pk_raw(p + n, "]ubs");
	n += pk_str(p + n, "storage_data");
	n += pk_raw(p + n, "}ub.");
	CHECK(n < sizeof(p));
	CHECK(cd_put(d, ".metadata", p, n) == 0);
	refused(d, EINVAL, "a.b", &e);
	CHECK(strstr(e.message, "key 'a.b': TensorStorageMetadata.properties"));
	cd_remove(d);
}

/* model.safetensors: an 8-byte little-endian header length, the header,
 * 8 bytes of data. */
static void put_safetensors(const char *dir, const char *header)
{
	size_t hl = strlen(header), i;
	uint8_t buf[512] = { 0 };

	for (i = 0; i < 8; i++)
		buf[i] = (uint8_t)(hl >> (8 * i));
	memcpy(buf + 8, header, hl);
	CHECK(cd_put(dir, "model.safetensors", buf, 8 + hl + 8) == 0);
}

static void test_safetensors(void)
{
	struct ckpt_error e;
	char *d = cd_new();

	put_safetensors(d, "{\"a.b\":{\"dtype\":\"Q9\",\"shape\":[2],"
			   "\"data_offsets\":[0,8]}}");
	refused(d, EINVAL, "a.b", &e);
	CHECK(strstr(e.message, "key 'a.b': dtype 'Q9' is not supported"));
	/* "__metadata__" is named like a key but is none. */
	put_safetensors(d, "{\"__metadata__\":[]}");
	refused(d, EINVAL, "", &e);
	CHECK(strstr(e.message, "key '__metadata__'"));
	cd_remove(d);
}

static void test_layout(void)
{
	static const char text[] = "a.b 0,0,0 4,4,4\n";
	struct ckpt_layout *l = NULL;
	struct ckpt_meta *m = NULL;
	struct ckpt_error e;
	char err[1024];
	char *d = cd_new();

	put_native(d, &good);
	CHECK(ckpt_meta_open(d, &m, err, sizeof(err)) == 0);
	CHECK(ckpt_layout_parse(text, sizeof(text) - 1, "l.txt", &l, err,
				sizeof(err)) == 0);
	if (m && l) {
		CHECK(ckpt_layout_bind(l, m, err, sizeof(err)) == -EINVAL);
		ckpt_last_error_get(&e);
		CHECK(e.code == EINVAL);
		CHECK(strcmp(e.key, "a.b") == 0);
		CHECK(strstr(e.message, "box has 3 dims, key 'a.b' has 2"));
	}
	ckpt_layout_free(l);
	ckpt_meta_free(m);
	cd_remove(d);
}

/* A path holding "key '" changes nothing: the key is a field. */
static void test_path_with_key_quote(void)
{
	char *top = cd_new(), sub[4200];
	struct ckpt_meta *m = NULL;
	struct ckpt_error e;
	struct nat n = good;
	char err[1024];

	snprintf(sub, sizeof(sub), "%s/key 'x.y': ", top);
	CHECK(mkdir(sub, 0700) == 0);
	n.off[0] = 2;
	put_native(sub, &n);
	refused(sub, EINVAL, "a.b", &e);
	CHECK(strncmp(e.path, sub, strlen(sub)) == 0);
	/* no key named: none recorded, whatever the path says */
	CHECK(cd_put(sub, ".metadata", "\x81\xa6" "format\xa1x", 10) == 0);
	refused(sub, EINVAL, "", &e);
	CHECK(strstr(e.message, "key 'x.y'"));
	/* and a good one opens, leaving no error */
	put_native(sub, &good);
	CHECK(ckpt_meta_open(sub, &m, err, sizeof(err)) == 0);
	ckpt_last_error_get(&e);
	CHECK(e.code == 0 && e.key[0] == '\0');
	ckpt_meta_free(m);
	cd_remove(top);
}

/* The helper itself: a counted key, cut at its length or its NUL. */
static void test_errf_key(void)
{
	struct ckpt_error e;
	char err[64];

	CHECK(ckpt_errf_key(err, sizeof(err), -EINVAL, "a.bXYZ", 3,
			    "f: key '%.*s': bad", 3, "a.bXYZ") == -EINVAL);
	ckpt_last_error_get(&e);
	CHECK(strcmp(e.key, "a.b") == 0 && e.code == EINVAL);
	CHECK(strcmp(err, "f: key 'a.b': bad") == 0);
	ckpt_errf_key(err, sizeof(err), -E2BIG, "c\0d", 3, "x");
	ckpt_last_error_get(&e);
	CHECK(strcmp(e.key, "c") == 0 && e.code == E2BIG);
	ckpt_errf_key(err, sizeof(err), -EINVAL, NULL, 0, "no key");
	ckpt_last_error_get(&e);
	CHECK(e.key[0] == '\0');
}

int main(void)
{
	TEST(test_errf_key);
	TEST(test_native);
	TEST(test_long_key);
	TEST(test_torch);
	TEST(test_safetensors);
	TEST(test_layout);
	TEST(test_path_with_key_quote);
	return TEST_REPORT();
}
